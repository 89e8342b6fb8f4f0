// Package glob matches Redis glob patterns (KEYS, SCAN MATCH, CONFIG GET,
// pub/sub patterns and ACL key and channel patterns), as Redis's
// stringmatchlen does without nocase: one implementation, so that what a pattern selects is
// the same wherever it is used.
package glob

// Match reports whether s matches the Redis glob pattern: '*' any
// bytes, '?' one byte, '[abc]' '[^abc]' '[a-z]' one byte of (or not of) a
// set, '\x' the byte x. Case-sensitive, as KEYS and SCAN are. It runs in
// O(len(pattern) × len(s)): on a mismatch it backtracks only to the last
// '*', which is enough because every other element matches exactly one
// byte.
func Match(pattern, s []byte) bool {
	p, i := 0, 0
	starP, starI := -1, 0
	for i < len(s) {
		if p < len(pattern) {
			if pattern[p] == '*' {
				for p < len(pattern) && pattern[p] == '*' {
					p++
				}
				if p == len(pattern) {
					return true
				}
				starP, starI = p, i
				continue
			}
			if next, ok := matchOne(pattern, p, s[i]); ok {
				p, i = next, i+1
				continue
			}
		}
		if starP < 0 {
			return false
		}
		starI++
		p, i = starP, starI
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// matchOne matches the pattern element at p (not '*') against the byte ch
// and returns where the next element starts.
func matchOne(pattern []byte, p int, ch byte) (int, bool) {
	switch pattern[p] {
	case '?':
		return p + 1, true
	case '\\':
		if p+1 < len(pattern) {
			return p + 2, pattern[p+1] == ch
		}
		return p + 1, ch == '\\'
	case '[':
		p++
		not := p < len(pattern) && pattern[p] == '^'
		if not {
			p++
		}
		match := false
		for p < len(pattern) && pattern[p] != ']' {
			switch {
			case pattern[p] == '\\' && p+1 < len(pattern):
				p++
				match = match || pattern[p] == ch
				p++
			case p+2 < len(pattern) && pattern[p+1] == '-':
				lo, hi := pattern[p], pattern[p+2]
				if lo > hi {
					lo, hi = hi, lo
				}
				match = match || lo <= ch && ch <= hi
				p += 3
			default:
				match = match || pattern[p] == ch
				p++
			}
		}
		if p < len(pattern) {
			p++ // the ']'; an unclosed set runs to the end
		}
		return p, match != not
	}
	return p + 1, pattern[p] == ch
}
