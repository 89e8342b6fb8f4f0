// Package lincheck records what concurrent clients of a Redis-protocol
// key-value service saw (SET, GET, DEL with their invocation and return
// times) and checks the history for linearizability with
// github.com/anishathalye/porcupine, against a model in which every key is
// a register that holds a value or nothing. Tests use it to show that
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
)

func (k Kind) String() string {
	switch k {
	case Set:
		return "SET"
	case Get:
		return "GET"
	case Del:
		return "DEL"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Input is an operation as invoked: for Set, Value is the id of the value
// written.
type Input struct {
	Kind  Kind
	Key   string
	Value string
}

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
			k := op.Input.(Input).Key
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
		case Get:
			if out.Found {
				return out.Value == s, s
			}
			return s == "", s
		case Del:
			if out.Unknown {
				return true, ""
			}
			return (out.Deleted == 1) == (s != ""), ""
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		switch {
		case out.Unknown:
			return fmt.Sprintf("%v %s %s -> unknown", in.Kind, in.Key, in.Value)
		case in.Kind == Set:
			return fmt.Sprintf("SET %s %s", in.Key, in.Value)
		case in.Kind == Get && !out.Found:
			return fmt.Sprintf("GET %s -> nil", in.Key)
		case in.Kind == Get:
			return fmt.Sprintf("GET %s -> %s", in.Key, out.Value)
		}
		return fmt.Sprintf("DEL %s -> %d", in.Key, out.Deleted)
	},
	DescribeState: func(state any) string {
		if state.(string) == "" {
			return "(absent)"
		}
		return state.(string)
	},
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
		if in.Kind == Get {
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
	for _, k := range []Kind{Set, Get, Del} {
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
			part[0].Input.(Input).Key, len(part), n)
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
// ops operations have run, recording each in rec as client id. Operations
// are 50% SET, 35% GET and 15% DEL. It returns the operations that failed
// (which the history records as the rules say).
func Client(ctx context.Context, rdb *redis.Client, rec *Recorder, id int, keys []string, ops int, seed uint64) (failed int) {
	rng := rand.New(rand.NewPCG(seed, uint64(id)))
	for seq := 0; seq < ops && ctx.Err() == nil; seq++ {
		key := keys[rng.IntN(len(keys))]
		in := Input{Key: key}
		var out Output
		var err error
		call := rec.Now()
		switch x := rng.IntN(100); {
		case x < 50:
			in.Kind = Set
			in.Value = "c" + strconv.Itoa(id) + "-" + strconv.Itoa(seq)
			err = rdb.Set(ctx, key, Value(in.Value, randomSize(rng)), 0).Err()
		case x < 85:
			in.Kind = Get
			var b []byte
			b, err = rdb.Get(ctx, key).Bytes()
			switch {
			case errors.Is(err, redis.Nil):
				err = nil
			case err == nil:
				out.Found, out.Value = true, ID(b)
			}
		default:
			in.Kind = Del
			out.Deleted, err = rdb.Del(ctx, key).Result()
		}
		ret := rec.Now()
		if err != nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		if err != nil {
			failed++
		}
		rec.Add(id, in, call, out, ret, err)
	}
	return failed
}
