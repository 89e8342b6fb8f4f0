package redis

import (
	"strings"
	"testing"
)

// TestGuardStream: valid RESP2 passes the guard however the reads split
// it; bad lengths and types are refused, also when split.
func TestGuardStream(t *testing.T) {
	valid := "+OK\r\n-ERR x\r\n:42\r\n$-1\r\n*-1\r\n$0\r\n\r\n$5\r\nhe\r\no\r\n*2\r\n$1\r\n0\r\n*1\r\n$3\r\nkey\r\n*0\r\n"
	bad := map[string]string{
		"huge bulk":       "$17\r\n",
		"huge array":      "*5\r\n",
		"negative length": "$-2\r\n",
		"no digits":       "$\r\n",
		"letters":         "$1x\r\n",
		"unknown type":    "%1\r\n",
		"CR without LF":   "$1\rx",
		"too many digits": "$12345678901234567890\r\n",
	}
	newGuard := func() *guardConn { return &guardConn{maxBulk: 16, maxArray: 4} }
	for step := 1; step <= len(valid); step++ {
		g := newGuard()
		for i := 0; i < len(valid); i += step {
			if err := g.check([]byte(valid[i:min(i+step, len(valid))])); err != nil {
				t.Fatalf("valid stream in reads of %d bytes: %v", step, err)
			}
		}
		if g.st != atType {
			t.Fatalf("valid stream in reads of %d bytes ends mid-reply (state %d)", step, g.st)
		}
	}
	for name, b := range bad {
		for _, step := range []int{1, len(b)} {
			g := newGuard()
			var err error
			for i := 0; i < len(b) && err == nil; i += step {
				err = g.check([]byte(b[i:min(i+step, len(b))]))
			}
			if err == nil || !strings.Contains(err.Error(), "server sent") {
				t.Errorf("%s in reads of %d bytes: %v, want refused", name, step, err)
			}
		}
	}
}
