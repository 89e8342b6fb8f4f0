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
// nobody wrote, for keys, hash fields and set members; and two scripted
// read-modify-writes that both read the same value (not atomic); and for
// streams, an XADD ID not above the stream's last, an acknowledged entry
// lost, moved or read under another ID, a wrong XLEN.
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
	hset := func(c int, f, v string, added int64, call, ret int64) step {
		return step{client: c, in: Input{Kind: HSet, Key: "h", Field: f, Value: v}, call: call, ret: ret, out: Output{Deleted: added}}
	}
	hget := func(c int, f, v string, call, ret int64) step {
		return step{client: c, in: Input{Kind: HGet, Key: "h", Field: f}, call: call, ret: ret, out: Output{Found: v != "", Value: v}}
	}
	sadd := func(c int, m string, added int64, call, ret int64) step {
		return step{client: c, in: Input{Kind: SAdd, Key: "s", Field: m}, call: call, ret: ret, out: Output{Deleted: added}}
	}
	sis := func(c int, m string, is bool, call, ret int64) step {
		out := Output{Found: is}
		if is {
			out.Value = present
		}
		return step{client: c, in: Input{Kind: SIsMember, Key: "s", Field: m}, call: call, ret: ret, out: out}
	}
	srem := func(c int, m string, n int64, call, ret int64) step {
		return step{client: c, in: Input{Kind: SRem, Key: "s", Field: m}, call: call, ret: ret, out: Output{Deleted: n}}
	}
	swap := func(c int, k, v, old string, call, ret int64) step {
		return step{client: c, in: Input{Kind: Swap, Key: k, Value: v}, call: call, ret: ret, out: Output{Found: old != "", Value: old}}
	}
	zadd := func(c int, m, score string, added int64, call, ret int64) step {
		return step{client: c, in: Input{Kind: ZAdd, Key: "z", Field: m, Value: score}, call: call, ret: ret, out: Output{Deleted: added}}
	}
	zscore := func(c int, m, score string, call, ret int64) step {
		return step{client: c, in: Input{Kind: ZScore, Key: "z", Field: m}, call: call, ret: ret, out: Output{Found: score != "", Value: score}}
	}
	zrem := func(c int, m string, n int64, call, ret int64) step {
		return step{client: c, in: Input{Kind: ZRem, Key: "z", Field: m}, call: call, ret: ret, out: Output{Deleted: n}}
	}
	rpush := func(c int, v string, n int64, call, ret int64) step {
		return step{client: c, in: Input{Kind: RPush, Key: "l", Value: v}, call: call, ret: ret, out: Output{Deleted: n}}
	}
	lpop := func(c int, v string, call, ret int64) step {
		return step{client: c, in: Input{Kind: LPop, Key: "l"}, call: call, ret: ret, out: Output{Found: v != "", Value: v}}
	}
	lrange := func(c int, vs string, call, ret int64) step {
		return step{client: c, in: Input{Kind: LRange, Key: "l"}, call: call, ret: ret, out: Output{Found: true, Value: vs}}
	}
	xadd := func(c int, v, id string, call, ret int64) step {
		return step{client: c, in: Input{Kind: XAdd, Key: "x", Value: v}, call: call, ret: ret, out: Output{Value: id}}
	}
	xlen := func(c int, n int64, call, ret int64) step {
		return step{client: c, in: Input{Kind: XLen, Key: "x"}, call: call, ret: ret, out: Output{Deleted: n}}
	}
	xrange := func(c int, es string, call, ret int64) step {
		return step{client: c, in: Input{Kind: XRange, Key: "x"}, call: call, ret: ret, out: Output{Found: true, Value: es}}
	}
	failedXAdd := xadd(0, "b", "", 2, 3)
	failedXAdd.err = true
	failedPush := rpush(0, "b", 0, 2, 3)
	failedPush.err = true
	failedPop := lpop(1, "", 2, 3)
	failedPop.err = true
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
		{"hash fields", []step{hset(0, "a", "x", 1, 0, 1), hset(0, "a", "y", 0, 2, 3), hget(1, "a", "y", 4, 5), hget(1, "b", "", 4, 5)}, porcupine.Ok},
		{"hash field lost", []step{hset(0, "a", "x", 1, 0, 1), hget(1, "a", "", 2, 3)}, porcupine.Illegal},
		{"hash field stale", []step{hset(0, "a", "x", 1, 0, 1), hset(0, "a", "y", 0, 2, 3), hget(1, "a", "x", 4, 5)}, porcupine.Illegal},
		{"HSET counts a field twice", []step{hset(0, "a", "x", 1, 0, 1), hset(0, "a", "y", 1, 2, 3)}, porcupine.Illegal},
		{"set members", []step{sadd(0, "m", 1, 0, 1), sadd(0, "m", 0, 2, 3), sis(1, "m", true, 4, 5), srem(0, "m", 1, 6, 7), sis(1, "m", false, 8, 9)}, porcupine.Ok},
		{"set member lost", []step{sadd(0, "m", 1, 0, 1), sis(1, "m", false, 2, 3)}, porcupine.Illegal},
		{"SREM of a member gone", []step{sadd(0, "m", 1, 0, 1), srem(0, "m", 1, 2, 3), srem(1, "m", 1, 4, 5)}, porcupine.Illegal},
		{"fields are independent of keys", []step{set(0, "h", "a", 0, 1), hset(1, "a", "x", 1, 2, 3), get(1, "h", "a", 4, 5)}, porcupine.Ok},
		{"scripted swaps chain", []step{set(0, "k", "a", 0, 1), swap(1, "k", "b", "a", 2, 3), swap(0, "k", "c", "b", 4, 5), get(1, "k", "c", 6, 7)}, porcupine.Ok},
		{"concurrent swaps order", []step{set(0, "k", "a", 0, 1), swap(1, "k", "b", "c", 2, 5), swap(0, "k", "c", "a", 2, 5)}, porcupine.Ok},
		{"two swaps see one value", []step{set(0, "k", "a", 0, 1), swap(1, "k", "b", "a", 2, 5), swap(0, "k", "c", "a", 2, 5)}, porcupine.Illegal},
		{"swap of an absent key", []step{swap(0, "k", "a", "", 0, 1), get(1, "k", "a", 2, 3)}, porcupine.Ok},
		{"sorted set members", []step{zadd(0, "m", "1", 1, 0, 1), zadd(0, "m", "2", 0, 2, 3), zscore(1, "m", "2", 4, 5), zrem(0, "m", 1, 6, 7), zscore(1, "m", "", 8, 9)}, porcupine.Ok},
		{"sorted set score stale", []step{zadd(0, "m", "1", 1, 0, 1), zadd(0, "m", "2", 0, 2, 3), zscore(1, "m", "1", 4, 5)}, porcupine.Illegal},
		{"ZADD counts a member twice", []step{zadd(0, "m", "1", 1, 0, 1), zadd(0, "m", "2", 1, 2, 3)}, porcupine.Illegal},
		{"queue", []step{rpush(0, "a", 1, 0, 1), rpush(0, "b", 2, 2, 3), lpop(1, "a", 4, 5), lrange(1, "b", 6, 7), lpop(1, "b", 8, 9), lpop(1, "", 10, 11)}, porcupine.Ok},
		{"concurrent pushes in either order", []step{rpush(0, "a", 2, 0, 5), rpush(1, "b", 1, 0, 5), lrange(2, "b,a", 6, 7)}, porcupine.Ok},
		{"pop out of order", []step{rpush(0, "a", 1, 0, 1), rpush(0, "b", 2, 2, 3), lpop(1, "b", 4, 5)}, porcupine.Illegal},
		{"pushed element lost", []step{rpush(0, "a", 1, 0, 1), lrange(1, "", 2, 3)}, porcupine.Illegal},
		{"element popped twice", []step{rpush(0, "a", 1, 0, 1), lpop(1, "a", 2, 3), lpop(2, "a", 4, 5)}, porcupine.Illegal},
		{"wrong length", []step{rpush(0, "a", 1, 0, 1), rpush(0, "b", 1, 2, 3)}, porcupine.Illegal},
		{"failed push may land late", []step{rpush(0, "a", 1, 0, 1), failedPush, lrange(1, "a", 4, 5), lrange(1, "a,b", 6, 7)}, porcupine.Ok},
		{"failed pop may have taken the head", []step{rpush(0, "a", 1, 0, 1), failedPop, lrange(1, "", 4, 5)}, porcupine.Ok},
		{"failed pop takes only the head", []step{rpush(0, "a", 1, 0, 1), rpush(0, "b", 2, 0, 1), failedPop, lrange(1, "a", 4, 5)}, porcupine.Illegal},
		{"stream log", []step{xadd(0, "a", "5-0", 0, 1), xadd(0, "b", "5-1", 2, 3), xlen(1, 2, 4, 5), xrange(1, "5-0=a,5-1=b", 6, 7)}, porcupine.Ok},
		{"concurrent XADDs in either order", []step{xadd(0, "a", "7-0", 0, 5), xadd(1, "b", "6-0", 0, 5), xrange(2, "6-0=b,7-0=a", 6, 7)}, porcupine.Ok},
		{"XADD ID not above the last", []step{xadd(0, "a", "5-1", 0, 1), xadd(0, "b", "5-1", 2, 3)}, porcupine.Illegal},
		{"XADD ID below an earlier one", []step{xadd(0, "a", "5-1", 0, 1), xadd(0, "b", "4-9", 2, 3)}, porcupine.Illegal},
		{"entry read under another ID", []step{xadd(0, "a", "5-0", 0, 1), xrange(1, "5-1=a", 2, 3)}, porcupine.Illegal},
		{"acknowledged entry lost", []step{xadd(0, "a", "5-0", 0, 1), xadd(0, "b", "6-0", 2, 3), xrange(1, "6-0=b", 4, 5)}, porcupine.Illegal},
		{"entries out of order", []step{xadd(0, "a", "5-0", 0, 1), xadd(0, "b", "6-0", 2, 3), xrange(1, "6-0=b,5-0=a", 4, 5)}, porcupine.Illegal},
		{"wrong XLEN", []step{xadd(0, "a", "5-0", 0, 1), xlen(1, 0, 2, 3)}, porcupine.Illegal},
		{"failed XADD may land, under the ID read", []step{xadd(0, "a", "5-0", 0, 1), failedXAdd, xrange(1, "5-0=a,9-3=b", 4, 5), xadd(1, "c", "9-4", 6, 7)}, porcupine.Ok},
		{"failed XADD may never land", []step{xadd(0, "a", "5-0", 0, 1), failedXAdd, xrange(1, "5-0=a", 4, 5), xlen(1, 1, 6, 7)}, porcupine.Ok},
		{"a failed XADD's ID, once read, stays", []step{xadd(0, "a", "5-0", 0, 1), failedXAdd, xrange(1, "5-0=a,9-3=b", 4, 5), xrange(1, "5-0=a,9-4=b", 6, 7)}, porcupine.Illegal},
		{"keys are independent", []step{set(0, "k", "a", 0, 1), set(0, "j", "b", 0, 1), get(1, "j", "b", 2, 3), get(1, "k", "a", 2, 3)}, porcupine.Ok},
	} {
		if got := check(t, tc.steps); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
