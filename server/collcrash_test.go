package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
)

// The collection crash test kills the server at every device operation
// of a workload of hash, set, list and sorted set commands in turn (a
// faultdev.Crash shared by all devices drops the i-th operation and
// every later one), then serves the devices again with a new array and
// server, as a restart would. The workload crosses each type's
// inline-to-external conversion and includes commands that change
// several keys (SMOVE, SUNIONSTORE, LMOVE, ZUNIONSTORE of sorted sets and
// sets) or many elements (HDEL of several fields, LREM, ZPOPMIN with a
// count, DEL). Invariant, checked after each restart:
//
//   - every collection reads back (HGETALL, SMEMBERS, LRANGE, ZRANGE
//     WITHSCORES) exactly as the model after the last acknowledged
//     command, or, all keys at once, as the model after the one command
//     in flight at the crash: nothing acknowledged lost, no command half
//     applied, within a key or across keys, a list's order and a sorted
//     set's scores included;
//   - HLEN, SCARD, LLEN and ZCARD equal the number of elements read
//     (counts exact);
//   - a key of another type (WRONGTYPE) or a read error never appears.

// collModel is the state of the workload's keys: a hash's fields, a
// set's members (with empty values), a sorted set's members with their
// scores (formatScore) and a list's elements under their positions
// (listPos, so that the map's order is the list's); an empty collection
// is absent.
type collModel map[string]map[string]string

func (m collModel) clone() collModel {
	c := collModel{}
	for k, v := range m {
		c[k] = maps.Clone(v)
	}
	return c
}

// list is key's list, head first.
func (m collModel) list(k string) []string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(m[k])) {
		out = append(out, m[k][p])
	}
	return out
}

// setList makes key's list xs (absent when empty).
func (m collModel) setList(k string, xs []string) {
	delete(m, k)
	if len(xs) == 0 {
		return
	}
	m[k] = map[string]string{}
	for i, x := range xs {
		m[k][listPos(i)] = x
	}
}

func listPos(i int) string { return fmt.Sprintf("%06d", i) }

// zentries is key's sorted set (or set: members score 1) in ZRANGE's
// order.
func (m collModel) zentries(k string) []redis.Z {
	var out []redis.Z
	for mem, sc := range m[k] {
		f := 1.0
		if sc != "" {
			f, _ = strconv.ParseFloat(sc, 64)
		}
		out = append(out, redis.Z{Member: mem, Score: f})
	}
	slices.SortFunc(out, func(a, b redis.Z) int {
		if c := cmp.Compare(a.Score, b.Score); c != 0 {
			return c
		}
		return strings.Compare(a.Member.(string), b.Member.(string))
	})
	return out
}

func formatScore(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// collOp is one command of the workload and what it does to the model.
type collOp struct {
	args  []string
	apply func(collModel)
}

var (
	crashHashes = []string{"h0", "h1"}
	crashSets   = []string{"s0", "s1", "s2"}
	crashLists  = []string{"l0", "l1"}
	crashZSets  = []string{"z0", "z1"}
)

// collWorkload is n commands over the crash keys, from seed: values of 8
// and of 100 bytes (past hash-max-listpack-value and
// zset-max-listpack-value), up to 6 fields or members (past the entries
// limits the test configures), lists past 3 elements.
func collWorkload(seed uint64, n int) []collOp {
	rng := rand.New(rand.NewPCG(seed, 7))
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	field := func() string { return "f" + strconv.Itoa(rng.IntN(6)) }
	value := func(i int) string {
		v := fmt.Sprintf("v%d-", i)
		if rng.IntN(3) == 0 {
			return v + string(make([]byte, 100))
		}
		return v + "xxxx"
	}
	// A list element or sorted set member: few distinct ones, so that LREM
	// and ZADD meet them again; some past the listpack value limit.
	elem := func() string {
		e := "e" + strconv.Itoa(rng.IntN(4))
		if rng.IntN(4) == 0 {
			return e + strings.Repeat("-", 100)
		}
		return e
	}
	set := func(m collModel, k string) map[string]string {
		if m[k] == nil {
			m[k] = map[string]string{}
		}
		return m[k]
	}
	drop := func(m collModel, k string) {
		if len(m[k]) == 0 {
			delete(m, k)
		}
	}
	side := func() (string, bool) {
		if rng.IntN(2) == 0 {
			return "LEFT", true
		}
		return "RIGHT", false
	}
	// pop takes count elements off an end of xs.
	pop := func(xs []string, left bool, count int) []string {
		count = min(count, len(xs))
		if left {
			return xs[count:]
		}
		return xs[:len(xs)-count]
	}
	var ops []collOp
	for i := range n {
		switch x := rng.IntN(100); {
		case x < 15:
			k, fs := pick(crashHashes), map[string]string{}
			args := []string{"HSET", k}
			for range 1 + rng.IntN(3) {
				f, v := field(), value(i)
				fs[f] = v
				args = append(args, f, v)
			}
			ops = append(ops, collOp{args, func(m collModel) { maps.Copy(set(m, k), fs) }})
		case x < 22:
			k, f, g := pick(crashHashes), field(), field()
			ops = append(ops, collOp{[]string{"HDEL", k, f, g}, func(m collModel) { delete(m[k], f); delete(m[k], g); drop(m, k) }})
		case x < 34:
			k, ms := pick(crashSets), []string{}
			for range 1 + rng.IntN(3) {
				ms = append(ms, field())
			}
			ops = append(ops, collOp{append([]string{"SADD", k}, ms...), func(m collModel) {
				for _, x := range ms {
					set(m, k)[x] = ""
				}
			}})
		case x < 39:
			k, f := pick(crashSets), field()
			ops = append(ops, collOp{[]string{"SREM", k, f}, func(m collModel) { delete(m[k], f); drop(m, k) }})
		case x < 43:
			src, dst, f := pick(crashSets), pick(crashSets), field()
			ops = append(ops, collOp{[]string{"SMOVE", src, dst, f}, func(m collModel) {
				if _, ok := m[src][f]; ok && src != dst {
					delete(m[src], f)
					drop(m, src)
					set(m, dst)[f] = ""
				}
			}})
		case x < 46:
			dst, a, b := pick(crashSets), pick(crashSets), pick(crashSets)
			ops = append(ops, collOp{[]string{"SUNIONSTORE", dst, a, b}, func(m collModel) {
				u := maps.Clone(m[a])
				if u == nil {
					u = map[string]string{}
				}
				maps.Copy(u, m[b])
				m[dst] = u
				drop(m, dst)
			}})
		case x < 58:
			k, end, left := pick(crashLists), "RPUSH", false
			if rng.IntN(2) == 0 {
				end, left = "LPUSH", true
			}
			var es []string
			for range 1 + rng.IntN(3) {
				es = append(es, elem())
			}
			ops = append(ops, collOp{append([]string{end, k}, es...), func(m collModel) {
				xs := m.list(k)
				if left {
					for _, e := range es {
						xs = append([]string{e}, xs...)
					}
				} else {
					xs = append(xs, es...)
				}
				m.setList(k, xs)
			}})
		case x < 63:
			k, count := pick(crashLists), 1+rng.IntN(2)
			end, left := "RPOP", false
			if rng.IntN(2) == 0 {
				end, left = "LPOP", true
			}
			ops = append(ops, collOp{[]string{end, k, strconv.Itoa(count)}, func(m collModel) { m.setList(k, pop(m.list(k), left, count)) }})
		case x < 67:
			src, dst := pick(crashLists), pick(crashLists)
			from, fromLeft := side()
			to, toLeft := side()
			ops = append(ops, collOp{[]string{"LMOVE", src, dst, from, to}, func(m collModel) {
				xs := m.list(src)
				if len(xs) == 0 {
					return
				}
				e := xs[len(xs)-1]
				if fromLeft {
					e = xs[0]
				}
				m.setList(src, pop(xs, fromLeft, 1))
				ys := m.list(dst)
				if toLeft {
					ys = append([]string{e}, ys...)
				} else {
					ys = append(ys, e)
				}
				m.setList(dst, ys)
			}})
		case x < 70:
			k, count, e := pick(crashLists), rng.IntN(5)-2, elem()
			ops = append(ops, collOp{[]string{"LREM", k, strconv.Itoa(count), e}, func(m collModel) {
				xs := m.list(k)
				if count < 0 {
					slices.Reverse(xs)
				}
				var kept []string
				left := max(count, -count)
				for _, x := range xs {
					if x == e && (count == 0 || left > 0) {
						left--
						continue
					}
					kept = append(kept, x)
				}
				if count < 0 {
					slices.Reverse(kept)
				}
				m.setList(k, kept)
			}})
		case x < 80:
			k, ms := pick(crashZSets), map[string]string{}
			args := []string{"ZADD", k}
			for range 1 + rng.IntN(3) {
				mem, sc := elem(), formatScore(float64(rng.IntN(7)-3))
				ms[mem] = sc
				args = append(args, sc, mem)
			}
			ops = append(ops, collOp{args, func(m collModel) { maps.Copy(set(m, k), ms) }})
		case x < 84:
			k, inc, mem := pick(crashZSets), float64(rng.IntN(5)-2), elem()
			ops = append(ops, collOp{[]string{"ZINCRBY", k, formatScore(inc), mem}, func(m collModel) {
				f, _ := strconv.ParseFloat(m[k][mem], 64)
				set(m, k)[mem] = formatScore(f + inc)
			}})
		case x < 88:
			k, a, b := pick(crashZSets), elem(), elem()
			ops = append(ops, collOp{[]string{"ZREM", k, a, b}, func(m collModel) { delete(m[k], a); delete(m[k], b); drop(m, k) }})
		case x < 92:
			k, count := pick(crashZSets), 1+rng.IntN(3)
			ops = append(ops, collOp{[]string{"ZPOPMIN", k, strconv.Itoa(count)}, func(m collModel) {
				es := m.zentries(k)
				for _, e := range es[:min(count, len(es))] {
					delete(m[k], e.Member.(string))
				}
				drop(m, k)
			}})
		case x < 95:
			// The sources are sorted sets or sets (members score 1).
			dst, a, b := pick(crashZSets), pick(crashZSets), pick(append(slices.Clone(crashZSets), crashSets...))
			ops = append(ops, collOp{[]string{"ZUNIONSTORE", dst, "2", a, b}, func(m collModel) {
				u := map[string]string{}
				for _, src := range []string{a, b} {
					for _, e := range m.zentries(src) {
						f, _ := strconv.ParseFloat(u[e.Member.(string)], 64)
						u[e.Member.(string)] = formatScore(f + e.Score)
					}
				}
				m[dst] = u
				drop(m, dst)
			}})
		default:
			k := pick(slices.Concat(crashHashes, crashSets, crashLists, crashZSets))
			ops = append(ops, collOp{[]string{"DEL", k}, func(m collModel) { delete(m, k) }})
		}
	}
	return ops
}

// TestCollectionCrashAtEveryOperation: see the comment above.
func TestCollectionCrashAtEveryOperation(t *testing.T) {
	seed, ops := collFaultWorkload(t)
	faultAtEveryPoint(t, seed, func(cfg *config.Config, at int64) int64 {
		return runCollFaulted(t, cfg, ops, crashFault{faultdev.CrashAt(at)}, at)
	})
}

// collFaultWorkload is the collection fault tests' workload: 60 commands
// (30 under -race, 15 with -short) from a time-based seed, or SEED=n's.
func collFaultWorkload(t *testing.T) (uint64, []collOp) {
	seed := faultSeed()
	n := 60
	switch {
	case testing.Short():
		n = 15
	case raceEnabled:
		n = 30
	}
	ops := collWorkload(seed, n)
	t.Logf("seed %d, %d commands", seed, len(ops))
	return seed, ops
}

// faultSeed is SEED=n's n, else a time-based seed.
func faultSeed() uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	return seed
}

// deviceFault is the fault a fault test puts under every device of the
// server's array (serveFaulted): a crash at one device operation
// (crashFault), an answer lost (answerLost) or writes failed (writesFailed,
// collfaults_test.go).
type deviceFault interface {
	// wrap puts the fault in front of device i.
	wrap(i int, d device.Device) device.Device
	// arm is called once the array exists: the faults that let its
	// creation through count device operations from then on.
	arm()
	// commandDone is called as each command of a client returns.
	commandDone()
	// count is how many device operations were counted so far.
	count() int64
	// hit reports whether the fault came: then the devices are served
	// again by a new array and server, and checked.
	hit() bool
	// lives reports whether the process lives on through the fault
	// (not a crash): then the live server is checked too.
	lives() bool
}

// crashFault is a faultdev.Crash shared by every device.
type crashFault struct{ *faultdev.Crash }

func (c crashFault) wrap(_ int, d device.Device) device.Device { return faultdev.Wrap(d, c.Crash) }
func (crashFault) arm()                                        {}
func (crashFault) commandDone()                                {}
func (c crashFault) count() int64                              { return c.Count() }
func (c crashFault) hit() bool                                 { return c.Crashed() }
func (crashFault) lives() bool                                 { return false }

// faultAtEveryPoint runs a fault test's workload once to count its device
// operations (run(cfg, -1), which injects nothing), then again with the
// fault at each (run(cfg, at)), on a mem hybrid array;
// KVARRAY_CRASH_POINT=at runs one point, as a failure reported it.
func faultAtEveryPoint(t *testing.T, seed uint64, run func(cfg *config.Config, at int64) int64) {
	t.Helper()
	cfg, err := config.Parse([]byte(memHybrid), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// A run without the fault counts the points (the background's
	// operations make runs vary a little).
	total := run(cfg, -1)
	t.Logf("%d device operations to fault at", total)
	first, last := int64(0), total
	if p := os.Getenv("KVARRAY_CRASH_POINT"); p != "" {
		first, _ = strconv.ParseInt(p, 10, 64)
		last = first
	}
	for at := first; at <= last; at++ {
		run(cfg, at)
		if t.Failed() {
			t.Fatalf("failed at fault point %d (seed %d)", at, seed)
		}
	}
}

// serveFaulted serves an array on cfg's devices, each behind fault, runs
// work with a client of it (fault.commandDone after each command), and,
// when the fault came, runs check with that client if the process lives
// on, then shuts it down. When the fault came, it opens the same devices
// again in a new array and server, as a restart would, and runs check
// with a client of that. It returns how many device operations fault
// counted.
func serveFaulted(t *testing.T, cfg *config.Config, fault deviceFault, work func(*redis.Client), check func(*redis.Client)) int64 {
	ctx := context.Background()
	base := config.OpenDevices(cfg, true)
	devs := make([]device.Device, len(base))
	for i, d := range base {
		devs[i] = fault.wrap(i, keepOpen{d})
	}
	a, err := array.Create(ctx, devs, cfg.Options()...)
	if err != nil {
		if fault.hit() {
			return fault.count() // crashed while creating: nothing to check
		}
		t.Fatal(err)
	}
	fault.arm()
	quiet := WithErrorLog(log.New(io.Discard, "", 0))
	srv := New(a, WithDevices(devs), quiet)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	rdb := redis.NewClient(&redis.Options{Addr: l.Addr().String(), MaxRetries: -1, Protocol: 2})
	rdb.AddHook(afterCommand(fault.commandDone))
	work(rdb)
	if fault.hit() && fault.lives() {
		checkPhase(t, "live", rdb, check)
	}
	rdb.Close()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	_ = srv.Shutdown(sctx)
	cancel()
	<-done
	_ = a.Close()
	count := fault.count()
	if !fault.hit() {
		return count
	}
	// The restart: the same devices, a new array and server.
	b, err := array.Open(ctx, base, cfg.Options()...)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	ts := serveArray(t, b, base, quiet)
	defer ts.stop()
	checkPhase(t, "restarted", ts.client(), check)
	return count
}

// checkPhase runs check with rdb, saying which server failed it.
func checkPhase(t *testing.T, phase string, rdb *redis.Client, check func(*redis.Client)) {
	t.Helper()
	failed := t.Failed()
	check(rdb)
	if !failed && t.Failed() {
		t.Errorf("(the checks above were of the %s server)", phase)
	}
}

// afterCommand is a go-redis hook calling its function as each command
// (or pipeline) returns.
type afterCommand func()

func (afterCommand) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f afterCommand) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		defer f()
		return next(ctx, cmd)
	}
}

func (f afterCommand) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		defer f()
		return next(ctx, cmds)
	}
}

// runCollFaulted runs ops until one fails (the fault at device operation
// at came), then checks the server against the model (see above): the
// acknowledged commands applied, and the failed one in flight. It returns
// how many device operations the run made.
func runCollFaulted(t *testing.T, cfg *config.Config, ops []collOp, fault deviceFault, at int64) int64 {
	acked := collModel{}
	var inflight *collOp
	return serveFaulted(t, cfg, fault, func(rdb *redis.Client) {
		ctx := context.Background()
		rdb.Do(ctx, "CONFIG", "SET", "hash-max-listpack-entries", "3")
		rdb.Do(ctx, "CONFIG", "SET", "set-max-intset-entries", "3")
		rdb.Do(ctx, "CONFIG", "SET", "list-max-listpack-size", "3")
		rdb.Do(ctx, "CONFIG", "SET", "zset-max-listpack-entries", "3")
		for i := range ops {
			// A nil reply (LPOP of an empty list) is an answer too.
			if err := rdb.Do(ctx, toAny(ops[i].args)...).Err(); err != nil && !errors.Is(err, redis.Nil) {
				inflight = &ops[i]
				break
			}
			ops[i].apply(acked)
		}
	}, func(rdb *redis.Client) {
		after := acked.clone()
		if inflight != nil {
			inflight.apply(after)
		}
		got := readColls(t, rdb)
		if !collEqual(got, acked) && !collEqual(got, after) {
			t.Errorf("fault at %d, in flight %q:\nread     %v\nacked    %v\nor after %v", at, inflightArgs(inflight), got, acked, after)
		}
	})
}

func inflightArgs(op *collOp) []string {
	if op == nil {
		return nil
	}
	return op.args
}

func toAny(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}

// readColls reads every key of the workload, checking that its count
// agrees with its elements.
func readColls(t *testing.T, rdb *redis.Client) collModel {
	t.Helper()
	ctx := context.Background()
	m := collModel{}
	for _, k := range crashHashes {
		h, err := rdb.HGetAll(ctx, k).Result()
		if err != nil {
			t.Fatalf("HGETALL %s: %v", k, err)
		}
		if n, err := rdb.HLen(ctx, k).Result(); err != nil || n != int64(len(h)) {
			t.Errorf("HLEN %s: %d, %v; HGETALL has %d fields", k, n, err, len(h))
		}
		if len(h) > 0 {
			m[k] = h
		}
	}
	for _, k := range crashSets {
		ms, err := rdb.SMembers(ctx, k).Result()
		if err != nil {
			t.Fatalf("SMEMBERS %s: %v", k, err)
		}
		if n, err := rdb.SCard(ctx, k).Result(); err != nil || n != int64(len(ms)) {
			t.Errorf("SCARD %s: %d, %v; SMEMBERS has %d members", k, n, err, len(ms))
		}
		if len(ms) > 0 {
			m[k] = map[string]string{}
			for _, x := range ms {
				m[k][x] = ""
			}
		}
	}
	for _, k := range crashLists {
		xs, err := rdb.LRange(ctx, k, 0, -1).Result()
		if err != nil {
			t.Fatalf("LRANGE %s: %v", k, err)
		}
		if n, err := rdb.LLen(ctx, k).Result(); err != nil || n != int64(len(xs)) {
			t.Errorf("LLEN %s: %d, %v; LRANGE has %d elements", k, n, err, len(xs))
		}
		m.setList(k, xs)
	}
	for _, k := range crashZSets {
		es, err := rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
		if err != nil {
			t.Fatalf("ZRANGE %s: %v", k, err)
		}
		if n, err := rdb.ZCard(ctx, k).Result(); err != nil || n != int64(len(es)) {
			t.Errorf("ZCARD %s: %d, %v; ZRANGE has %d members", k, n, err, len(es))
		}
		for _, e := range es {
			if m[k] == nil {
				m[k] = map[string]string{}
			}
			m[k][e.Member.(string)] = formatScore(e.Score)
		}
		// ZRANGE's order must be the model's (score, then member).
		if !slices.Equal(es, m.zentries(k)) {
			t.Errorf("ZRANGE %s out of order: %v", k, es)
		}
	}
	return m
}

func collEqual(a, b collModel) bool {
	return maps.EqualFunc(a, b, func(x, y map[string]string) bool { return maps.Equal(x, y) })
}

// keepOpen is a device that the crashed array's Close leaves open for the
// restart (a process's exit closes nothing of a device's data).
type keepOpen struct{ device.Device }

func (keepOpen) Close() error { return nil }
