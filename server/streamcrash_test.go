package server

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/device/faultdev"
)

// The stream crash test is the collection crash test's (collcrash_test.go)
// for a stream and its consumer group: a workload of XADD (with exact
// MAXLEN), XDEL, XTRIM MINID, XREADGROUP, XACK, XCLAIM and XAUTOCLAIM,
// small nodes so that node records are written and trimmed, killed at
// every device operation, then served again. Invariant, after each
// restart: the entries (XRANGE), the group's last-delivered ID and
// pending count (XINFO GROUPS) and its pending entries with their
// consumers and delivery counts (XPENDING) are the model's after the last
// acknowledged command, or after the one in flight: no command half
// applied, no pending entry without its delivery, nothing acknowledged
// lost.

// streamState is the model: entries by ms (every ID is ms-1), the
// group's last-delivered ms and its pending entries.
type streamState struct {
	entries []int
	last    int
	pel     map[int]pendingState
}

type pendingState struct {
	consumer string
	count    int
}

func (s streamState) clone() streamState {
	return streamState{entries: slices.Clone(s.entries), last: s.last, pel: maps.Clone(s.pel)}
}

func (s *streamState) has(ms int) bool { _, ok := slices.BinarySearch(s.entries, ms); return ok }

// streamOp is a command and what it does to the model. A command whose
// effect depends on what it read (XREADGROUP, XCLAIM, XAUTOCLAIM) is
// applied as its reply says when it has one (past the crash point the
// devices fail and a listing may read nothing: the reply is what a client
// saw), else (in flight) as the model predicts.
type streamOp struct {
	args  []string
	apply func(s *streamState, reply any)
}

// replyIDs are the entry IDs (as ms) in an XREADGROUP, XCLAIM or
// XAUTOCLAIM reply.
func replyIDs(reply any) []int {
	var out []int
	var walk func(any)
	walk = func(x any) {
		switch v := x.(type) {
		case string:
			var ms int
			if _, err := fmt.Sscanf(v, "%d-1", &ms); err == nil && strings.HasSuffix(v, "-1") {
				out = append(out, ms)
			}
		case []any:
			for _, y := range v {
				walk(y)
			}
		}
	}
	walk(reply)
	return out
}

func sid(ms int) string { return strconv.Itoa(ms) + "-1" }

// streamWorkload is n commands on stream "s" and its group "g" from seed.
func streamWorkload(seed uint64, n int) []streamOp {
	rng := rand.New(rand.NewPCG(seed, 9))
	next := 1
	cons := []string{"a", "b", "c"}
	var ops []streamOp
	for range n {
		switch x := rng.IntN(100); {
		case x < 35:
			ms := next
			next++
			args := []string{"XADD", "s"}
			maxLen := -1
			if rng.IntN(4) == 0 {
				maxLen = 3 + rng.IntN(6)
				args = append(args, "MAXLEN", strconv.Itoa(maxLen))
			}
			ops = append(ops, streamOp{append(args, sid(ms), "n", strconv.Itoa(ms)), func(s *streamState, _ any) {
				s.entries = append(s.entries, ms)
				if maxLen >= 0 && len(s.entries) > maxLen {
					s.entries = s.entries[len(s.entries)-maxLen:]
				}
			}})
		case x < 42:
			ms := 1 + rng.IntN(next)
			ops = append(ops, streamOp{[]string{"XDEL", "s", sid(ms)}, func(s *streamState, _ any) {
				s.entries = slices.DeleteFunc(s.entries, func(e int) bool { return e == ms })
			}})
		case x < 47:
			ms := 1 + rng.IntN(next)
			ops = append(ops, streamOp{[]string{"XTRIM", "s", "MINID", sid(ms)}, func(s *streamState, _ any) {
				s.entries = slices.DeleteFunc(s.entries, func(e int) bool { return e < ms })
			}})
		case x < 72:
			c, count := cons[rng.IntN(3)], 1+rng.IntN(3)
			ops = append(ops, streamOp{[]string{"XREADGROUP", "GROUP", "g", c, "COUNT", strconv.Itoa(count), "STREAMS", "s", ">"}, func(s *streamState, reply any) {
				var got []int
				if reply != nil {
					got = replyIDs(reply)
				} else {
					for _, e := range s.entries {
						if e > s.last && len(got) < count {
							got = append(got, e)
						}
					}
				}
				for _, e := range got {
					s.pel[e] = pendingState{c, 1}
					s.last = e
				}
			}})
		case x < 85:
			a, b := 1+rng.IntN(next), 1+rng.IntN(next)
			ops = append(ops, streamOp{[]string{"XACK", "s", "g", sid(a), sid(b)}, func(s *streamState, _ any) {
				delete(s.pel, a)
				delete(s.pel, b)
			}})
		case x < 93:
			c, ms := cons[rng.IntN(3)], 1+rng.IntN(next)
			ops = append(ops, streamOp{[]string{"XCLAIM", "s", "g", c, "0", sid(ms)}, func(s *streamState, reply any) {
				p, ok := s.pel[ms]
				claimed := ok && s.has(ms)
				if reply != nil {
					claimed = slices.Contains(replyIDs(reply), ms)
				}
				switch {
				case claimed:
					s.pel[ms] = pendingState{c, p.count + 1}
				case ok && !s.has(ms):
					delete(s.pel, ms)
				}
			}})
		default:
			c := cons[rng.IntN(3)]
			ops = append(ops, streamOp{[]string{"XAUTOCLAIM", "s", "g", c, "0", "0", "COUNT", "2"}, func(s *streamState, reply any) {
				ids := slices.Sorted(maps.Keys(s.pel))
				ids = ids[:min(2, len(ids))]
				if reply != nil {
					// [next, claimed, deleted]: the IDs of the last two.
					r, _ := reply.([]any)
					if len(r) == 3 {
						ids = replyIDs(r[1:])
					}
				}
				for _, ms := range ids {
					if !s.has(ms) {
						delete(s.pel, ms)
					} else {
						s.pel[ms] = pendingState{c, s.pel[ms].count + 1}
					}
				}
			}})
		}
	}
	return ops
}

// TestStreamCrashAtEveryOperation: see the comment above.
func TestStreamCrashAtEveryOperation(t *testing.T) {
	seed, ops := streamFaultWorkload(t)
	faultAtEveryPoint(t, seed, func(cfg *config.Config, at int64) int64 {
		return runStreamFaulted(t, cfg, ops, crashFault{faultdev.CrashAt(at)}, at)
	})
}

// streamFaultWorkload is the stream fault tests' workload: 30 commands
// (12 with -short) from a time-based seed, or SEED=n's.
func streamFaultWorkload(t *testing.T) (uint64, []streamOp) {
	seed := faultSeed()
	n := 30
	if testing.Short() {
		n = 12
	}
	ops := streamWorkload(seed, n)
	t.Logf("seed %d, %d commands", seed, len(ops))
	return seed, ops
}

// streamSetup makes the workload's stream and group, with small nodes.
var streamSetup = [][]string{
	{"CONFIG", "SET", "stream-node-max-entries", "3"},
	{"XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"},
}

// runStreamFaulted runs ops until one fails (the fault at device
// operation at came), then checks the server against the model. It
// returns how many device operations the run made.
func runStreamFaulted(t *testing.T, cfg *config.Config, ops []streamOp, fault deviceFault, at int64) int64 {
	acked := streamState{pel: map[int]pendingState{}}
	var inflight *streamOp
	var all []streamOp
	for _, args := range streamSetup {
		all = append(all, streamOp{args, func(*streamState, any) {}})
	}
	all = append(all, ops...)
	return serveFaulted(t, cfg, fault, func(rdb *redis.Client) {
		for i := range all {
			r := rdb.Do(context.Background(), toAny(all[i].args)...)
			if err := r.Err(); err != nil && err != redis.Nil {
				inflight = &all[i]
				break
			}
			all[i].apply(&acked, streamReply(r.Val()))
		}
	}, func(rdb *redis.Client) {
		if inflight == &all[1] || inflight == &all[0] {
			return // failed before the stream was made
		}
		after := acked.clone()
		if inflight != nil {
			inflight.apply(&after, nil)
		}
		got, err := readStreamState(rdb)
		if err != nil {
			t.Errorf("fault at %d, in flight %q: reading the stream: %v", at, inflightStreamArgs(inflight), err)
			return
		}
		if !streamEqual(got, acked) && !streamEqual(got, after) {
			t.Errorf("fault at %d, in flight %q:\nread     %+v\nacked    %+v\nor after %+v", at, inflightStreamArgs(inflight), got, acked, after)
		}
	})
}

// streamReply is an answered command's reply for streamOp.apply: a null
// reply is an empty one (nothing read), as nil means in flight.
func streamReply(r any) any {
	if r == nil {
		return []any{}
	}
	return r
}

func inflightStreamArgs(op *streamOp) []string {
	if op == nil {
		return nil
	}
	return op.args
}

// readStreamState reads the stream and its group, checking that the
// counts agree with what is listed.
func readStreamState(rdb *redis.Client) (streamState, error) {
	ctx := context.Background()
	s := streamState{pel: map[int]pendingState{}}
	ms, err := rdb.XRange(ctx, "s", "-", "+").Result()
	if err != nil {
		return s, err
	}
	for _, m := range ms {
		var e int
		if _, err := fmt.Sscanf(m.ID, "%d-1", &e); err != nil || m.Values["n"] != strconv.Itoa(e) {
			return s, fmt.Errorf("entry %v", m)
		}
		s.entries = append(s.entries, e)
	}
	if n, err := rdb.XLen(ctx, "s").Result(); err != nil || n != int64(len(ms)) {
		return s, fmt.Errorf("XLEN %d (%v), XRANGE has %d", n, err, len(ms))
	}
	gs, err := rdb.XInfoGroups(ctx, "s").Result()
	if err != nil || len(gs) != 1 {
		return s, fmt.Errorf("groups %v (%v)", gs, err)
	}
	if gs[0].LastDeliveredID != "0-0" {
		if _, err := fmt.Sscanf(gs[0].LastDeliveredID, "%d-1", &s.last); err != nil {
			return s, err
		}
	}
	ps, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "s", Group: "g", Start: "-", End: "+", Count: 1000}).Result()
	if err != nil {
		return s, err
	}
	for _, p := range ps {
		var e int
		if _, err := fmt.Sscanf(p.ID, "%d-1", &e); err != nil {
			return s, err
		}
		s.pel[e] = pendingState{p.Consumer, int(p.RetryCount)}
	}
	if gs[0].Pending != int64(len(ps)) {
		return s, fmt.Errorf("the group counts %d pending, XPENDING lists %d", gs[0].Pending, len(ps))
	}
	return s, nil
}

func streamEqual(a, b streamState) bool {
	return slices.Equal(a.entries, b.entries) && a.last == b.last && maps.Equal(a.pel, b.pel)
}
