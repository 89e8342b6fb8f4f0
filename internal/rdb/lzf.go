package rdb

import "fmt"

// lzfDecompress expands LZF data (lzf_d.c) into exactly n bytes.
func lzfDecompress(in []byte, n int) ([]byte, error) {
	out := make([]byte, 0, n)
	bad := fmt.Errorf("LZF string: %w", ErrCorrupt)
	for i := 0; i < len(in); {
		ctrl := int(in[i])
		i++
		if ctrl < 32 { // a literal run of ctrl+1 bytes
			l := ctrl + 1
			if i+l > len(in) || len(out)+l > n {
				return nil, bad
			}
			out = append(out, in[i:i+l]...)
			i += l
			continue
		}
		l := ctrl >> 5
		if l == 7 {
			if i >= len(in) {
				return nil, bad
			}
			l += int(in[i])
			i++
		}
		if i >= len(in) {
			return nil, bad
		}
		ref := len(out) - ((ctrl&0x1f)<<8 | int(in[i])) - 1
		i++
		l += 2
		if ref < 0 || len(out)+l > n {
			return nil, bad
		}
		for j := range l { // byte by byte: the copy may overlap itself
			out = append(out, out[ref+j])
		}
	}
	if len(out) != n {
		return nil, bad
	}
	return out, nil
}
