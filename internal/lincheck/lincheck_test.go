package lincheck

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func TestValueAndID(t *testing.T) {
	for _, size := range []int{0, 5, 6, 100, 40 << 10} {
		v := Value("c1-7", size)
		if len(v) < size {
			t.Fatalf("size %d: %d bytes", size, len(v))
		}
		if got := ID(v); got != "c1-7" {
			t.Fatalf("size %d: id %q", size, got)
		}
		if size > 10 {
			bad := append([]byte(nil), v...)
			bad[len(bad)-1] ^= 1
			if got := ID(bad); !strings.HasPrefix(got, "corrupt") {
				t.Fatalf("size %d: a flipped byte reads as %q", size, got)
			}
			if got := ID(v[:len(v)-1]); !strings.HasPrefix(got, "corrupt") {
				t.Fatalf("size %d: a torn value reads as %q", size, got)
			}
		}
	}
}

// history builds a recorder from ops given as (client, input, call,
// output, return, failed).
type step struct {
	client    int
	in        Input
	call, ret int64
	out       Output
	err       bool
}

func check(t *testing.T, steps []step) porcupine.CheckResult {
	t.Helper()
	r := NewRecorder()
	for _, s := range steps {
		var err error
		if s.err {
			err = errors.New("failed")
		}
		r.Add(s.client, s.in, s.call, s.out, s.ret, err)
	}
	res, _ := r.Check(10 * time.Second)
	return res
}

// TestModel: the checker accepts what a correct store may do and rejects
// a stale read, a lost acknowledged write, a wrong DEL count and a value
// nobody wrote.
func TestModel(t *testing.T) {
	set := func(c int, k, v string, call, ret int64) step {
		return step{client: c, in: Input{Kind: Set, Key: k, Value: v}, call: call, ret: ret}
	}
	get := func(c int, k, v string, call, ret int64) step {
		return step{client: c, in: Input{Kind: Get, Key: k}, call: call, ret: ret, out: Output{Found: v != "", Value: v}}
	}
	del := func(c int, k string, n int64, call, ret int64) step {
		return step{client: c, in: Input{Kind: Del, Key: k}, call: call, ret: ret, out: Output{Deleted: n}}
	}
	failedSet := set(0, "k", "lost?", 1, 2)
	failedSet.err = true
	for _, tc := range []struct {
		name  string
		steps []step
		want  porcupine.CheckResult
	}{
		{"sequential", []step{set(0, "k", "a", 0, 1), get(1, "k", "a", 2, 3), del(0, "k", 1, 4, 5), get(1, "k", "", 6, 7)}, porcupine.Ok},
		{"concurrent read sees either", []step{set(0, "k", "a", 0, 1), set(0, "k", "b", 2, 5), get(1, "k", "a", 3, 4)}, porcupine.Ok},
		{"stale read", []step{set(0, "k", "a", 0, 1), set(0, "k", "b", 2, 3), get(1, "k", "a", 4, 5)}, porcupine.Illegal},
		{"lost write", []step{set(0, "k", "a", 0, 1), get(1, "k", "", 2, 3)}, porcupine.Illegal},
		{"wrong del count", []step{del(0, "k", 1, 0, 1)}, porcupine.Illegal},
		{"value nobody wrote", []step{set(0, "k", "a", 0, 1), get(1, "k", "corrupt: x", 2, 3)}, porcupine.Illegal},
		{"failed write may land late", []step{failedSet, get(1, "k", "", 3, 4), get(1, "k", "lost?", 5, 6)}, porcupine.Ok},
		{"failed write may never land", []step{failedSet, get(1, "k", "", 3, 4)}, porcupine.Ok},
		{"failed write cannot undo", []step{failedSet, get(1, "k", "lost?", 3, 4), get(1, "k", "", 5, 6)}, porcupine.Illegal},
		{"keys are independent", []step{set(0, "k", "a", 0, 1), set(0, "j", "b", 0, 1), get(1, "j", "b", 2, 3), get(1, "k", "a", 2, 3)}, porcupine.Ok},
	} {
		if got := check(t, tc.steps); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
