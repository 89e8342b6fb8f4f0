// Package lincheck records what concurrent clients of a Redis-protocol
// key-value service saw (SET, GET, DEL; HSET, HGET, HDEL of one field;
// SADD, SREM, SISMEMBER of one member; ZADD, ZSCORE, ZREM of one member;
// RPUSH, LPOP and LRANGE of a list; XADD, XLEN and XRANGE of a stream; a
// Lua script's read-modify-write of a key (EVAL: GET then SET, returning
// the old value); with their
// invocation and return
// times) and checks the history for linearizability with
// github.com/anishathalye/porcupine, against a model in which every key,
// every field of a hash, every member of a set and every member of a
// sorted set is a register that holds a value (a set member: "member"; a
// sorted set member: its score) or nothing, and every list is a queue
// of the values pushed (RPUSH's reply is the queue's new length, LPOP
// takes its head, LRANGE 0 -1 reads it whole), and every stream is a log
// of the entries added (an XADD's ID is above every ID the stream held
// before it, XLEN counts the entries, XRANGE - + reads them all, in
// order, each ID as its XADD answered). Hashes, sets, sorted sets, lists
// and streams live under keys of their own (HashKey, SetKey, ZSetKey,
// ListKey, StreamKey), so no command meets a value of another type. Tests use it to show that
// kvarray serves as one correct key-value store while its devices fail,
// hang and come back.
//
// Rules of the history, which make the check sound under faults:
//   - Every value written is unique (its client and sequence number), and
//     its bytes are a function of that id, so a read is matched to exactly
//     one write and a value with any wrong byte matches none.
//   - A write that returned an error may or may not have taken effect, at
//     any time after it was invoked: its return time is left open (after
//     every other operation), so the checker may place it anywhere later.
//   - A read that returned an error observed nothing and is left out.
package lincheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"
)

// Kind is the kind of one operation.
type Kind uint8

// The operations of the model.
const (
	Set Kind = iota + 1
	Get
	Del
	HSet      // HSET key field value: Deleted is the count added
	HGet      // HGET key field
	HDel      // HDEL key field
	SAdd      // SADD key member: Deleted is the count added
	SIsMember // SISMEMBER key member: Found
	SRem      // SREM key member
	ZAdd      // ZADD key score member: Value is the score, Deleted the count added
	ZScore    // ZSCORE key member: Found, Value the score
	ZRem      // ZREM key member
	RPush     // RPUSH key value: Deleted is the list's new length
	LPop      // LPOP key: Found, Value the id popped
	LRange    // LRANGE key 0 -1: Value the ids, comma-separated
	Swap      // EVAL of swapScript: SET key Value, returning the old value as a Get does
	XAdd      // XADD key * v value: Value is the value's id; the Output's Value the entry ID
	XLen      // XLEN key: Deleted is the length
	XRange    // XRANGE key - +: Value the entries as ID=value id, comma-separated
)

// swapScript is Swap's script: a read and a write that only run as one
// unit if scripts are atomic (another client's SET between them would
// be lost, and the history then has no linearization).
const swapScript = "local old = redis.call('get', KEYS[1]); redis.call('set', KEYS[1], ARGV[1]); return old"

// kinds are the kinds, in order, for reports.
var kinds = []Kind{Set, Get, Del, HSet, HGet, HDel, SAdd, SIsMember, SRem, ZAdd, ZScore, ZRem, RPush, LPop, LRange, Swap, XAdd, XLen, XRange}

var kindNames = map[Kind]string{Set: "SET", Get: "GET", Del: "DEL", HSet: "HSET", HGet: "HGET", HDel: "HDEL",
	SAdd: "SADD", SIsMember: "SISMEMBER", SRem: "SREM", ZAdd: "ZADD", ZScore: "ZSCORE", ZRem: "ZREM",
	RPush: "RPUSH", LPop: "LPOP", LRange: "LRANGE", Swap: "EVAL(GET+SET)", XAdd: "XADD", XLen: "XLEN", XRange: "XRANGE"}

func (k Kind) String() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// reads reports whether k changes nothing.
func (k Kind) reads() bool {
	return k == Get || k == HGet || k == SIsMember || k == ZScore || k == LRange || k == XLen || k == XRange
}

// Input is an operation as invoked: for Set and HSet, Value is the id of
// the value written; for the hash and set kinds, Field is the field or
// member.
type Input struct {
	Kind  Kind
	Key   string
	Field string
	Value string
}

// register is what the model partitions by: a key, or a hash's field or
// a set's member.
func (in Input) register() string {
	if in.Field == "" {
		return in.Key
	}
	return in.Key + " " + in.Field
}

// HashKey, SetKey, ZSetKey and ListKey name the hash, the set, the
// sorted set and the list that clients keep beside string key k.
func HashKey(k string) string { return "h:" + k }

// SetKey: see HashKey.
func SetKey(k string) string { return "s:" + k }

// ZSetKey: see HashKey.
func ZSetKey(k string) string { return "z:" + k }

// ListKey: see HashKey.
func ListKey(k string) string { return "l:" + k }

// StreamKey: see HashKey.
func StreamKey(k string) string { return "x:" + k }

// zmember is the sorted set member Client uses for field: half of them
// longer than zset-max-listpack-value (64), so that a sorted set that
// ever holds one is a skiplist (element keys) and the others stay
// listpacks.
func zmember(field string) string {
	if field >= "f2" {
		return field + strings.Repeat("z", 70)
	}
	return field
}

// present is the state of a set member that is there.
const present = "member"

// Output is what an operation returned. Unknown: the operation failed and
// its effect is unknown. For Get: Found and Value (an id, or "corrupt: ..."
// for bytes that are no value written). For Del: Deleted (0 or 1).
type Output struct {
	Unknown bool
	// Cancelled: the outcome is unknown because the client gave up (its
	// context ended: the test stopping), not because the server failed.
	Cancelled bool
	Found     bool
	Value     string
	Deleted   int64
}

// Model is the register-per-key model: a state is the id of the value a
// key holds, "" when it holds none. Histories are partitioned by key.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(Input).register()
			byKey[k] = append(byKey[k], op)
		}
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(string), input.(Input), output.(Output)
		switch in.Kind {
		case Set:
			return true, in.Value
		case Swap:
			if out.Unknown {
				return true, in.Value
			}
			if out.Found {
				return out.Value == s, in.Value
			}
			return s == "", in.Value
		case HSet, SAdd, ZAdd:
			next := in.Value
			if in.Kind == SAdd {
				next = present
			}
			if out.Unknown {
				return true, next
			}
			return (out.Deleted == 1) == (s == ""), next
		case Get, HGet, SIsMember, ZScore:
			if out.Found {
				return out.Value == s, s
			}
			return s == "", s
		case RPush:
			next := in.Value
			if s != "" {
				next = s + "," + in.Value
			}
			if out.Unknown {
				return true, next
			}
			return out.Deleted == int64(strings.Count(next, ",")+1), next
		case LPop:
			head, rest, _ := strings.Cut(s, ",")
			if out.Unknown {
				// It popped the head, or found the list empty.
				return true, rest
			}
			if out.Found {
				return s != "" && out.Value == head, rest
			}
			return s == "", s
		case LRange:
			return out.Value == s, s
		case XAdd:
			if out.Unknown {
				// Added or not, under an ID nobody was told: an XRANGE
				// that reads it names it.
				return true, appendEntry(s, unknownID+"="+in.Value)
			}
			return idBelow(lastID(s), out.Value), appendEntry(s, out.Value+"="+in.Value)
		case XLen:
			return out.Deleted == int64(countEntries(s)), s
		case XRange:
			if !sameEntries(s, out.Value) {
				return false, s
			}
			return true, out.Value
		case Del, HDel, SRem, ZRem:
			if out.Unknown {
				return true, ""
			}
			return (out.Deleted == 1) == (s != ""), ""
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		reg := in.register()
		switch {
		case out.Unknown:
			return fmt.Sprintf("%v %s %s -> unknown", in.Kind, reg, in.Value)
		case in.Kind == Set:
			return fmt.Sprintf("SET %s %s", reg, in.Value)
		case in.Kind == HSet, in.Kind == ZAdd:
			return fmt.Sprintf("%v %s %s -> %d", in.Kind, reg, in.Value, out.Deleted)
		case in.Kind == RPush:
			return fmt.Sprintf("RPUSH %s %s -> %d", reg, in.Value, out.Deleted)
		case in.Kind == LRange:
			return fmt.Sprintf("LRANGE %s -> [%s]", reg, out.Value)
		case in.Kind == XAdd:
			return fmt.Sprintf("XADD %s %s -> %s", reg, in.Value, out.Value)
		case in.Kind == XRange:
			return fmt.Sprintf("XRANGE %s -> [%s]", reg, out.Value)
		case in.Kind == LPop && !out.Found:
			return fmt.Sprintf("LPOP %s -> nil", reg)
		case in.Kind == LPop:
			return fmt.Sprintf("LPOP %s -> %s", reg, out.Value)
		case in.Kind == Swap && !out.Found:
			return fmt.Sprintf("%v %s %s -> nil", in.Kind, reg, in.Value)
		case in.Kind == Swap:
			return fmt.Sprintf("%v %s %s -> %s", in.Kind, reg, in.Value, out.Value)
		case in.Kind.reads() && !out.Found:
			return fmt.Sprintf("%v %s -> nil", in.Kind, reg)
		case in.Kind.reads():
			return fmt.Sprintf("%v %s -> %s", in.Kind, reg, out.Value)
		}
		return fmt.Sprintf("%v %s -> %d", in.Kind, reg, out.Deleted)
	},
	DescribeState: func(state any) string {
		if state.(string) == "" {
			return "(absent)"
		}
		return state.(string)
	},
}

// unknownID stands in a stream's state for the ID of an entry whose XADD
// failed (it may have been added).
const unknownID = "?"

func appendEntry(s, e string) string {
	if s == "" {
		return e
	}
	return s + "," + e
}

func countEntries(s string) int {
	if s == "" {
		return 0
	}
	return strings.Count(s, ",") + 1
}

// lastID is the ID of the last entry of stream state s whose ID is known,
// "0-0" if none is: an XADD's ID must be above it (and above an unknown
// one's too, which this does not check).
func lastID(s string) string {
	for s != "" {
		var e string
		if i := strings.LastIndexByte(s, ','); i >= 0 {
			s, e = s[:i], s[i+1:]
		} else {
			s, e = "", s
		}
		if id, _, _ := strings.Cut(e, "="); id != unknownID {
			return id
		}
	}
	return "0-0"
}

// streamID parses an entry ID, ms-seq.
func streamID(id string) (ms, seq uint64, ok bool) {
	a, b, cut := strings.Cut(id, "-")
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return ms, seq, cut && err1 == nil && err2 == nil
}

// idBelow reports whether entry ID a is below b (false if b is no ID).
func idBelow(a, b string) bool {
	ams, aseq, _ := streamID(a)
	bms, bseq, ok := streamID(b)
	return ok && (ams < bms || ams == bms && aseq < bseq)
}

// sameEntries reports whether an XRANGE that read got (ID=value id, comma
// separated) can have read stream state s: the same values in the same
// order, each known ID the same, and the IDs increasing.
func sameEntries(s, got string) bool {
	if countEntries(s) != countEntries(got) {
		return false
	}
	if s == "" {
		return true
	}
	prev := "0-0"
	wants := strings.Split(s, ",")
	for i, e := range strings.Split(got, ",") {
		want := wants[i]
		id, v, _ := strings.Cut(e, "=")
		wid, wv, _ := strings.Cut(want, "=")
		if v != wv || wid != unknownID && wid != id || !idBelow(prev, id) {
			return false
		}
		prev = id
	}
	return true
}

// Value returns the bytes of the value with the given id and size: the id,
// "/", the size, "|", then filler derived from both (a value is longer than
// size when the size cannot hold that prefix). A value cut short or grown
// no longer matches its prefix.
func Value(id string, size int) []byte {
	head := id + "/" + strconv.Itoa(size) + "|"
	b := make([]byte, 0, max(size, len(head)))
	b = append(b, head...)
	x := uint64(size)
	for _, c := range []byte(head) {
		x = x*131 + uint64(c)
	}
	for len(b) < cap(b) {
		x = x*6364136223846793005 + 1442695040888963407
		b = append(b, 'a'+byte(x>>59)) // 32 letters
	}
	return b
}

// ID returns the id of value b, or "corrupt: ..." when b is not exactly
// the value its prefix says (torn, mixed, or any byte wrong).
func ID(b []byte) string {
	if i := bytes.IndexByte(b, '|'); i > 0 {
		if j := bytes.LastIndexByte(b[:i], '/'); j > 0 {
			id := string(b[:j])
			if size, err := strconv.Atoi(string(b[j+1 : i])); err == nil && size >= 0 && size <= 1<<30 && bytes.Equal(b, Value(id, size)) {
				return id
			}
		}
	}
	return fmt.Sprintf("corrupt: %d bytes beginning %q", len(b), b[:min(len(b), 24)])
}

// Recorder collects a history. Its methods are safe for concurrent use.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	errs  map[Kind][]string // the first errors of each kind, for the test's log
}

// NewRecorder starts a history now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now(), errs: map[Kind][]string{}} }

// Now returns the time since the recorder started, in nanoseconds.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Add records one operation of client invoked at call and returned at ret;
// err is the error the operation returned (see the package doc for how a
// failed operation is recorded).
func (r *Recorder) Add(client int, in Input, call int64, out Output, ret int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if len(r.errs[in.Kind]) < 3 {
			r.errs[in.Kind] = append(r.errs[in.Kind], fmt.Sprintf("client %d at %v: %v %s: %v", client, time.Duration(call), in.Kind, in.Key, err))
		}
		if in.Kind.reads() {
			return
		}
		out, ret = Output{Unknown: true, Cancelled: errors.Is(err, context.Canceled)}, math.MaxInt64
	}
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// Operations returns a copy of the history.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.ops...)
}

// Errors returns the first few errors operations of each kind returned.
func (r *Recorder) Errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, k := range kinds {
		out = append(out, r.errs[k]...)
	}
	return out
}

// Counts returns how many operations of each kind were recorded, and how
// many of them have an unknown outcome.
func (r *Recorder) Counts() (byKind map[Kind]int, unknown int) {
	byKind = map[Kind]int{}
	for _, op := range r.Operations() {
		byKind[op.Input.(Input).Kind]++
		if op.Output.(Output).Unknown {
			unknown++
		}
	}
	return byKind, unknown
}

// Check checks the history, giving up after timeout (porcupine.Unknown).
func (r *Recorder) Check(timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(Model, r.Operations(), timeout)
}

// explainWindow is how many operations Explain shows.
const explainWindow = 60

// Explain describes the first key whose history cannot be linearized:
// the operations up to the first one that cannot be linearized (the
// shortest failing prefix in invocation order, which holds the violation),
// the last explainWindow of them, for a failure message.
func (r *Recorder) Explain(info porcupine.LinearizationInfo) string {
	ops := r.Operations()
	for _, part := range Model.Partition(ops) {
		if porcupine.CheckOperations(Model, part) {
			continue
		}
		sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
		// Adding operations invoked later cannot explain an earlier
		// violation, so failing prefixes are closed upwards: the
		// shortest is found by bisection.
		n := sort.Search(len(part), func(n int) bool { return !porcupine.CheckOperations(Model, part[:n+1]) }) + 1
		var sb strings.Builder
		fmt.Fprintf(&sb, "key %s is not linearizable; of its %d operations, the first %d are not (the last of them, marked, cannot be placed):\n",
			part[0].Input.(Input).register(), len(part), n)
		from := max(0, n-explainWindow)
		if from > 0 {
			fmt.Fprintf(&sb, "  ... %d before\n", from)
		}
		for i, op := range part[from:n] {
			ret := "never"
			if op.Return != math.MaxInt64 {
				ret = time.Duration(op.Return).String()
			}
			mark := " "
			if from+i == n-1 {
				mark = ">"
			}
			fmt.Fprintf(&sb, " %sclient %d [%v .. %s] %s\n", mark, op.ClientId, time.Duration(op.Call), ret, Model.DescribeOperation(op.Input, op.Output))
		}
		return sb.String()
	}
	return "every key linearizes on its own"
}

// Sizes of the values clients write, by weight: small values and a few of
// several KiB and tens of KiB, so that every mechanism of a hybrid array
// (replication, packing, splitting) takes part.
func randomSize(rng *rand.Rand) int {
	switch x := rng.IntN(100); {
	case x < 60:
		return 32 + rng.IntN(200)
	case x < 85:
		return 9<<10 + rng.IntN(8<<10)
	default:
		return 33<<10 + rng.IntN(32<<10)
	}
}

// Client runs operations on random keys through rdb until ctx is done or
// ops operations have run, recording each in rec as client cid. Operations
// are 21% SET, 20% GET, 8% DEL and 4% Swap (a script) of string
// keys; 3% XADD, 1% XLEN and 1% XRANGE - + of its stream (StreamKey); 8% HSET, 6% HGET and
// 2% HDEL of one of Fields fields of the key's hash (HashKey); 4% SADD,
// 3% SISMEMBER and 2% SREM of one of Fields members of its set (SetKey);
// 5% ZADD, 3% ZSCORE and 2% ZREM of one of Fields members of its sorted
// set (ZSetKey; the score is unique to the write: client id × 10^6 +
// sequence); 4% RPUSH and 3% LPOP of its list (ListKey).
// It returns the operations that failed (which the history records as
// the rules say).
func Client(ctx context.Context, rdb *redis.Client, rec *Recorder, cid int, keys []string, ops int, seed uint64) (failed int) {
	rng := rand.New(rand.NewPCG(seed, uint64(cid)))
	for seq := 0; seq < ops && ctx.Err() == nil; seq++ {
		key := keys[rng.IntN(len(keys))]
		in := Input{Key: key}
		var out Output
		var err error
		call := rec.Now()
		field := "f" + strconv.Itoa(rng.IntN(Fields))
		id := "c" + strconv.Itoa(cid) + "-" + strconv.Itoa(seq)
		switch x := rng.IntN(100); {
		case x < 4:
			in.Kind, in.Value = Swap, id
			old, e := rdb.Eval(ctx, swapScript, []string{key}, Value(in.Value, randomSize(rng))).Text()
			out, err = found([]byte(old), e)
		case x < 25:
			in.Kind = Set
			in.Value = id
			err = rdb.Set(ctx, key, Value(in.Value, randomSize(rng)), 0).Err()
		case x < 28:
			in = Input{Kind: XAdd, Key: StreamKey(key), Value: id}
			out.Value, err = rdb.XAdd(ctx, &redis.XAddArgs{Stream: in.Key, Values: []any{"v", Value(in.Value, 16+rng.IntN(200))}}).Result()
		case x < 29:
			in = Input{Kind: XLen, Key: StreamKey(key)}
			out.Deleted, err = rdb.XLen(ctx, in.Key).Result()
		case x < 30:
			in = Input{Kind: XRange, Key: StreamKey(key)}
			out, err = xrange(rdb.XRange(ctx, in.Key, "-", "+").Result())
		case x < 50:
			in.Kind = Get
			out, err = found(rdb.Get(ctx, key).Bytes())
		case x < 58:
			in.Kind = Del
			out.Deleted, err = rdb.Del(ctx, key).Result()
		case x < 66:
			in = Input{Kind: HSet, Key: HashKey(key), Field: field, Value: id}
			out.Deleted, err = rdb.HSet(ctx, in.Key, field, Value(in.Value, randomSize(rng))).Result()
		case x < 72:
			in = Input{Kind: HGet, Key: HashKey(key), Field: field}
			out, err = found(rdb.HGet(ctx, in.Key, field).Bytes())
		case x < 74:
			in = Input{Kind: HDel, Key: HashKey(key), Field: field}
			out.Deleted, err = rdb.HDel(ctx, in.Key, field).Result()
		case x < 78:
			in = Input{Kind: SAdd, Key: SetKey(key), Field: field}
			out.Deleted, err = rdb.SAdd(ctx, in.Key, field).Result()
		case x < 81:
			in = Input{Kind: SIsMember, Key: SetKey(key), Field: field}
			out.Found, err = rdb.SIsMember(ctx, in.Key, field).Result()
			if out.Found {
				out.Value = present
			}
		case x < 83:
			in = Input{Kind: SRem, Key: SetKey(key), Field: field}
			out.Deleted, err = rdb.SRem(ctx, in.Key, field).Result()
		case x < 88:
			score := float64(cid)*1e6 + float64(seq)
			in = Input{Kind: ZAdd, Key: ZSetKey(key), Field: zmember(field), Value: formatScore(score)}
			out.Deleted, err = rdb.ZAdd(ctx, in.Key, redis.Z{Score: score, Member: in.Field}).Result()
		case x < 91:
			in = Input{Kind: ZScore, Key: ZSetKey(key), Field: zmember(field)}
			out, err = zscore(rdb.ZScore(ctx, in.Key, in.Field).Result())
		case x < 93:
			in = Input{Kind: ZRem, Key: ZSetKey(key), Field: zmember(field)}
			out.Deleted, err = rdb.ZRem(ctx, in.Key, in.Field).Result()
		case x < 97:
			in = Input{Kind: RPush, Key: ListKey(key), Value: id}
			out.Deleted, err = rdb.RPush(ctx, in.Key, Value(in.Value, 16+rng.IntN(200))).Result()
		default:
			in = Input{Kind: LPop, Key: ListKey(key)}
			out, err = found(rdb.LPop(ctx, in.Key).Bytes())
		}
		ret := rec.Now()
		if err != nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		if err != nil {
			failed++
		}
		rec.Add(cid, in, call, out, ret, err)
	}
	return failed
}

func formatScore(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// zscore is a ZSCORE's Output: the score, or not found (redis.Nil).
func zscore(f float64, err error) (Output, error) {
	switch {
	case errors.Is(err, redis.Nil):
		return Output{}, nil
	case err != nil:
		return Output{}, err
	}
	return Output{Found: true, Value: formatScore(f)}, nil
}

// lrange is an LRANGE 0 -1's Output: the ids of the elements, in order
// (an element that is no value written reads as "corrupt: ...").
func lrange(vs []string, err error) (Output, error) {
	ids := make([]string, len(vs))
	for i, v := range vs {
		ids[i] = ID([]byte(v))
	}
	return Output{Found: true, Value: strings.Join(ids, ",")}, err
}

// xrange is an XRANGE - +'s Output: its entries as ID=value id (an entry
// whose field v is no value written reads as "corrupt: ...").
func xrange(ms []redis.XMessage, err error) (Output, error) {
	es := make([]string, len(ms))
	for i, m := range ms {
		v, _ := m.Values["v"].(string)
		es[i] = m.ID + "=" + ID([]byte(v))
	}
	return Output{Found: true, Value: strings.Join(es, ",")}, err
}

// Fields is how many fields (and members) the hash (and set) beside each
// key has in Client's workload: few, so that operations meet.
const Fields = 4

// found is a read's Output: a value's id, or not found (redis.Nil).
func found(b []byte, err error) (Output, error) {
	switch {
	case errors.Is(err, redis.Nil):
		return Output{}, nil
	case err != nil:
		return Output{}, err
	}
	return Output{Found: true, Value: ID(b)}, nil
}

// ReadAll has client id read, as part of the history, every key of keys,
// every field of its hash, every member of its set and of its sorted set,
// its list and its stream (XRANGE and XLEN); it returns the errors of the reads that failed (which
// then observed nothing).
func ReadAll(ctx context.Context, rdb *redis.Client, rec *Recorder, id int, keys []string) error {
	var errs []error
	read := func(in Input, do func() (Output, error)) {
		call := rec.Now()
		out, err := do()
		if err != nil {
			errs = append(errs, fmt.Errorf("final %v %s: %w", in.Kind, in.register(), err))
		}
		rec.Add(id, in, call, out, rec.Now(), err)
	}
	for _, k := range keys {
		read(Input{Kind: Get, Key: k}, func() (Output, error) { return found(rdb.Get(ctx, k).Bytes()) })
		for f := range Fields {
			field := "f" + strconv.Itoa(f)
			read(Input{Kind: HGet, Key: HashKey(k), Field: field}, func() (Output, error) {
				return found(rdb.HGet(ctx, HashKey(k), field).Bytes())
			})
			read(Input{Kind: SIsMember, Key: SetKey(k), Field: field}, func() (Output, error) {
				ok, err := rdb.SIsMember(ctx, SetKey(k), field).Result()
				if ok {
					return Output{Found: true, Value: present}, err
				}
				return Output{}, err
			})
			m := zmember(field)
			read(Input{Kind: ZScore, Key: ZSetKey(k), Field: m}, func() (Output, error) {
				return zscore(rdb.ZScore(ctx, ZSetKey(k), m).Result())
			})
		}
		read(Input{Kind: LRange, Key: ListKey(k)}, func() (Output, error) {
			return lrange(rdb.LRange(ctx, ListKey(k), 0, -1).Result())
		})
		read(Input{Kind: XRange, Key: StreamKey(k)}, func() (Output, error) {
			return xrange(rdb.XRange(ctx, StreamKey(k), "-", "+").Result())
		})
		read(Input{Kind: XLen, Key: StreamKey(k)}, func() (Output, error) {
			n, err := rdb.XLen(ctx, StreamKey(k)).Result()
			return Output{Deleted: n}, err
		})
	}
	return errors.Join(errs...)
}

// Summary is the history's operations counted by kind, for a test's log:
// "40 SET, 12 HGET, ... (3 with unknown outcome)".
func (r *Recorder) Summary() string {
	byKind, unknown := r.Counts()
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%d %v", byKind[k], k))
	}
	return fmt.Sprintf("%s (%d with unknown outcome)", strings.Join(parts, ", "), unknown)
}

// Writes reports whether k changes what it names.
func (k Kind) Writes() bool { return !k.reads() }
