package glob

import (
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "anything", true},
		{"", "", true},
		{"", "a", false},
		{"h?llo", "hello", true},
		{"h?llo", "hllo", false},
		{"h*llo", "hllo", true},
		{"h*llo", "heeeello", true},
		{"h[ae]llo", "hallo", true},
		{"h[ae]llo", "hillo", false},
		{"h[^e]llo", "hallo", true},
		{"h[^e]llo", "hello", false},
		{"h[a-b]llo", "hbllo", true},
		{"h[b-a]llo", "hbllo", true},
		{"h[a-b]llo", "hcllo", false},
		{`h\*llo`, "h*llo", true},
		{`h\*llo`, "hello", false},
		{`[\]]`, "]", true},
		{"user:*:name", "user:42:name", true},
		{"user:*:name", "user:42:email", false},
		{"*a*a*a*a*a*a*a*a*b", strings.Repeat("a", 60), false},
		{"a*", "A", false},
		{"[abc", "b", true},
		{`ab\`, `ab\`, true},
	} {
		if got := Match([]byte(tc.pattern), []byte(tc.s)); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// globRef is a plain recursive glob with Match's rules (exponential
// in the worst case; fine for small inputs), to check Match against.
func globRef(p, s []byte) bool {
	if len(p) == 0 {
		return len(s) == 0
	}
	if p[0] == '*' {
		for i := 0; i <= len(s); i++ {
			if globRef(p[1:], s[i:]) {
				return true
			}
		}
		return false
	}
	if len(s) == 0 {
		return false
	}
	next, ok := matchOne(p, 0, s[0])
	return ok && globRef(p[next:], s[1:])
}

func FuzzGlob(f *testing.F) {
	f.Add([]byte("a*b?[c-e]"), []byte("axxbyd"))
	f.Add([]byte(`*\*[^x]`), []byte("**y"))
	f.Fuzz(func(t *testing.T, p, s []byte) {
		if len(p) > 24 || len(s) > 24 {
			return
		}
		if got, want := Match(p, s), globRef(p, s); got != want {
			t.Fatalf("Match(%q, %q) = %v, reference %v", p, s, got, want)
		}
	})
}
