package array

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/mechanism/packing"
	"github.com/kvarray/kvarray/mechanism/replication"
	"github.com/kvarray/kvarray/mechanism/splitting"
)

// The property test runs random sequences of store, update, delete,
// retrieve, asynchronous bursts, device failure, recovery, replacement, a
// device turning slow and fast again (a configuration without Hashing), a
// device lying (a key's piece replaced by another key's),
// one-off injected faults, restarts, heal and scrub against a model map,
// and checks that the array never returns wrong bytes, never loses an
// acknowledged value that its mechanisms can protect, acknowledges every
// store that its mechanism's tolerance covers, and never returns a value
// older than one a read has already returned (a read pins it).

// modelKey is what the model knows of one key.
type modelKey struct {
	// vals are the values a read may return; nil entry means "absent".
	// One entry when the last write was acknowledged; two or more after
	// failed writes (either may have landed).
	vals [][]byte
	rms  []string // mechanism each of vals was written with
	rm   string   // mechanism of the last write
	// lost: a device holding what may have been its only copy was
	// replaced; reads may then return any of vals, not-found or an error.
	lost bool
	// liedOn: devices whose piece of the key was replaced by another
	// key's (a misdirected write): each counts as a bad piece until the
	// key is written again.
	liedOn map[int]bool
}

type model struct {
	keys     map[string]*modelKey
	impaired map[int]bool // failed, or replaced and not yet repaired
	trace    map[string][]string
	dump     func(key string)
	step     int
}

// propertyConfig is one array setup for the property test.
type propertyConfig struct {
	name      string
	opts      []Option
	rms       []string       // mechanisms for custom stores
	tolerates map[string]int // per mechanism: failures tolerated
	width     map[string]int // per mechanism: devices per split
	limits    device.Limits
	sizes     func(*rand.Rand) int
}

func propertyConfigs() []propertyConfig {
	return []propertyConfig{{
		name: "hybrid-hashing-replication",
		opts: []Option{allMechanisms(), WithMode(Hybrid),
			WithRules(Rule{Max: 200, RM: "hashing"}, Rule{RM: "replication"})},
		rms:       []string{"hashing", "replication"},
		tolerates: map[string]int{"hashing": 0, "replication": 2},
		width:     map[string]int{"hashing": 1, "replication": 3},
		limits:    device.Limits{MaxValueLen: 16 << 10},
		sizes:     smallSizes,
	}, {
		// The paper's hybrid setup and workload: 4, 16 and 64 KiB values
		// at 30:40:30, to Replication, Packing and Splitting by size.
		name: "hybrid-all-four",
		// With a value cache: reads of recent values of up to 32 KiB
		// come from it.
		opts: []Option{everyMechanism(), WithMode(Hybrid), WithValueCache(MinValueCache, MaxValueCached),
			WithRules(Rule{Max: 8 << 10, RM: "replication"}, Rule{Max: 32 << 10, RM: "packing"}, Rule{RM: "splitting"})},
		rms:       []string{"hashing", "replication", "splitting", "packing"},
		tolerates: map[string]int{"hashing": 0, "replication": 2, "splitting": 2, "packing": 2},
		// A packing member's set may have pieces on every device.
		width:  map[string]int{"hashing": 1, "replication": 3, "splitting": 6, "packing": 6},
		limits: device.Limits{MaxValueLen: 64 << 10},
		sizes:  paperSizes,
	}, {
		// Standalone: no read before write, except for huge values and
		// once a per-call mechanism has been used. Without Hashing, so
		// that a device may be slow (the test marks one: its judge,
		// every hour, never runs).
		name: "standalone-splitting",
		opts: []Option{WithMechanisms(replication.New(3), splitting.New(4, 2), packing.New(4, 2, 0)), WithDefault("splitting"),
			WithSlowDevices(SlowPolicy{Every: time.Hour})},
		rms:       []string{"replication", "splitting", "packing"},
		tolerates: map[string]int{"hashing": 0, "replication": 2, "splitting": 2, "packing": 2},
		width:     map[string]int{"hashing": 1, "replication": 3, "splitting": 6, "packing": 6},
		limits:    device.Limits{MaxValueLen: 16 << 10},
		sizes:     smallSizes,
	}}
}

// smallSizes: mostly small values, some several splits long on 16 KiB
// devices.
func smallSizes(rng *rand.Rand) int {
	switch rng.IntN(10) {
	case 0:
		return 0
	case 1, 2, 3:
		return rng.IntN(200)
	case 9:
		return 16<<10 + rng.IntN(40<<10) // several splits
	default:
		return 200 + rng.IntN(4<<10)
	}
}

// paperSizes: 4, 16 and 64 KiB at 30:40:30, and now and then a value
// several splits long.
func paperSizes(rng *rand.Rand) int {
	switch x := rng.IntN(100); {
	case x < 2:
		return 300 << 10
	case x < 30:
		return 4 << 10
	case x < 70:
		return 16 << 10
	default:
		return 64 << 10
	}
}

// maxImpaired is how many devices the property test lets be failed or
// not yet rebuilt at once: two, the tolerance of every redundant
// mechanism configured.
const maxImpaired = 2

// TestPropertyAgainstModel runs each configuration for many seeds
// (KVARRAY_PROPERTY_SEEDS, default 200, 40 under the race detector;
// steps per seed KVARRAY_PROPERTY_STEPS, default 250). SEED=n replays one
// seed.
func TestPropertyAgainstModel(t *testing.T) {
	defSeeds := 200
	if raceEnabled {
		defSeeds = 40
	}
	seeds, steps := envInt("KVARRAY_PROPERTY_SEEDS", defSeeds), envInt("KVARRAY_PROPERTY_STEPS", 250)
	if testing.Short() {
		seeds = 20
	}
	if os.Getenv("SEED") != "" {
		seeds = 1
	}
	for _, pc := range propertyConfigs() {
		t.Run(pc.name, func(t *testing.T) {
			for i := 0; i < seeds && !t.Failed(); i++ {
				runProperty(t, pc, steps)
			}
		})
	}
}

func envInt(name string, def int) int {
	if s := os.Getenv(name); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			return n
		}
	}
	return def
}

// oneShot fails the next operation of its device once armed, then lets
// everything through again: a transient fault in one operation.
type oneShot struct{ armed atomic.Bool }

func (o *oneShot) MaybeError(faultdev.Op) error {
	if o.armed.CompareAndSwap(true, false) {
		return faultdev.ErrInjected
	}
	return nil
}

func runProperty(t *testing.T, pc propertyConfig, steps int) {
	const n = 6
	rng := newRand(t)
	r := &rig{t: t, opts: append(slices.Clone(pc.opts), WithParallelism(1+rng.IntN(4)))}
	shots := make([]*oneShot, n)
	for i := 0; i < n; i++ {
		mm := mem.New(mem.WithName(fmt.Sprintf("mem:dev%d", i)), mem.WithLimits(pc.limits))
		shots[i] = &oneShot{}
		r.mems = append(r.mems, mm)
		r.devs = append(r.devs, faultdev.Wrap(mm, shots[i]))
	}
	a, err := Create(ctx, r.devs, r.opts...)
	if err != nil {
		t.Fatal(err)
	}
	r.a = a
	// Stopped at the end (its devices are the test's), which gives back
	// its value cache's memory, outside the Go heap.
	defer func() { r.a.haltOnce.Do(r.a.halt) }()
	m := &model{keys: map[string]*modelKey{}, impaired: map[int]bool{}, trace: map[string][]string{}}
	logf := func(key, f string, args ...any) {
		m.trace[key] = append(m.trace[key], fmt.Sprintf(f, args...))
	}
	m.dump = func(key string) {
		t.Logf("primary of %q: device %d; holders of split 0: %v; states: %v", key, r.a.primary([]byte(key), 0), r.holders(key, 0), r.states())
		for d := range r.mems {
			ik := format.Key([]byte(key), 0, format.KindData)
			b, err := r.mems[d].Retrieve(ctx, ik)
			format.Unkey(ik, b, 0)
			v, derr := format.Decode(b)
			t.Logf("  device %d: missed=%v del=%v piece err=%v rm=%d version=%d len=%d decode=%v", d,
				r.a.env.MissedCount(d) > 0 && slices.ContainsFunc(r.a.env.Missed(d), func(x []byte) bool { return string(x) == string(ik) }),
				r.a.env.MissedDelete(d, ik), err, v.RM, v.Version, len(v.Payload), derr)
		}
		var lines []string
		lines = append(lines, m.trace[key]...)
		lines = append(lines, m.trace["*"]...)
		stepOf := func(l string) int {
			var n int
			fmt.Sscanf(l, "step %d", &n)
			return n
		}
		slices.SortStableFunc(lines, func(a, b string) int { return stepOf(a) - stepOf(b) })
		for _, l := range lines {
			t.Log(l)
		}
	}
	splitCap := map[string]int{}
	for _, name := range pc.rms {
		splitCap[name] = r.a.byName[name].SplitCap()
	}

	// devicesOf returns, per split, the devices a value of size n stored
	// with rm occupies.
	spans := func(key string, rm string, size int) [][]int {
		splits := max(1, (size+splitCap[rm]-1)/splitCap[rm])
		if splits > 1 && r.a.banked {
			splits++ // split 0 holds the manifest (manifest.go)
		}
		var out [][]int
		for s := 0; s < splits; s++ {
			p := r.a.primary([]byte(key), s)
			var span []int
			for i := 0; i < pc.width[rm]; i++ {
				span = append(span, (p+i)%n)
			}
			out = append(out, span)
		}
		return out
	}
	// packedLies returns the devices where a piece of a Packing value
	// has been lied about. A Packing set holds members of several keys,
	// and the model does not know which keys share a set, so a lie on
	// any member counts as a bad piece of every Packing value (a lie on
	// key-16's member, a failed device and a replaced one are three bad
	// pieces of key-33's set).
	packedLies := func() map[int]bool {
		lies := map[int]bool{}
		for _, mk := range m.keys {
			if slices.Contains(mk.rms, "packing") {
				for d := range mk.liedOn {
					lies[d] = true
				}
			}
		}
		return lies
	}
	// atRisk reports whether some split of the value has more impaired
	// devices (plus extra) than its mechanism tolerates.
	atRisk := func(key string, mk *modelKey, extra int) bool {
		var lies map[int]bool
		for i, v := range mk.vals {
			if v == nil {
				continue
			}
			rm := mk.rms[i]
			if rm == "packing" && lies == nil {
				lies = packedLies()
			}
			for _, span := range spans(key, rm, len(v)) {
				bad := 0
				for _, d := range span {
					if m.impaired[d] || d == extra || mk.liedOn[d] || rm == "packing" && lies[d] {
						bad++
					}
				}
				if bad > pc.tolerates[rm] {
					return true
				}
			}
		}
		return false
	}
	keyNames := make([]string, 40)
	for i := range keyNames {
		keyNames[i] = fmt.Sprintf("key-%02d", i)
	}
	randValue := func() []byte { return randBytes(rng, pc.sizes(rng)) }
	// noteFailed counts the devices the array failed (a one-off fault
	// does that) as impaired until they are healed.
	noteFailed := func() {
		for d := range r.mems {
			if r.a.DeviceState(d) == mechanism.Failed && !m.impaired[d] {
				logf("*", "step %d: device %d failed by the array", m.step, d)
				m.impaired[d] = true
			}
		}
	}
	check := func(step int, key string) {
		mk := m.keys[key]
		got, err := r.a.Retrieve(ctx, []byte(key))
		noteFailed() // a one-off fault may have failed a device just now
		if mk == nil {
			if !errors.Is(err, ErrNotFound) && !(errors.Is(err, ErrUnavailable) && len(m.impaired) > 0) {
				m.dump(key)
				t.Fatalf("step %d: retrieve of absent %q: %d bytes, %v", step, key, len(got), err)
			}
			return
		}
		if err != nil {
			if errors.Is(err, ErrNotFound) && (mk.lost || slices.ContainsFunc(mk.vals, func(v []byte) bool { return v == nil })) {
				return
			}
			if mk.lost || len(mk.vals) > 1 || atRisk(key, mk, -1) {
				return // an error is an allowed outcome, wrong bytes are not
			}
			m.dump(key)
			t.Fatalf("step %d: retrieve %q (%s, impaired %v): %v", step, key, mk.rm, m.impaired, err)
		}
		for j, v := range mk.vals {
			if v != nil && bytes.Equal(v, got) {
				// Pinned: no later read may return an older value.
				mk.vals, mk.rms = mk.vals[j:], mk.rms[j:]
				return
			}
		}
		for _, e := range m.trace[key] {
			t.Log(e)
		}
		t.Fatalf("step %d: retrieve %q returned %d bytes matching none of the %d allowed values", step, key, len(got), len(mk.vals))
	}

	lastHolders := map[string]string{}
	for step := 0; step < steps; step++ {
		if os.Getenv("TRACE_HOLDERS") != "" {
			for _, k := range keyNames {
				h := fmt.Sprint(r.holders(k, 0))
				if h != lastHolders[k] {
					logf(k, "step %d: holders now %s", step, h)
					lastHolders[k] = h
				}
			}
		}
		key := keyNames[rng.IntN(len(keyNames))]
		m.step = step
		// A store: which mechanism it will use, and what its outcome
		// means for the model.
		pickStore := func() ([]byte, string, []CallOption) {
			v := randValue()
			var opts []CallOption
			rm := r.a.Mechanism(len(v))
			if rng.IntN(5) == 0 {
				rm = pc.rms[rng.IntN(len(pc.rms))]
				opts = append(opts, Using(rm))
			}
			return v, rm, opts
		}
		stored := func(key string, v []byte, rm string, err error) {
			logf(key, "step %d: store %d bytes with %s (impaired %v): %v", step, len(v), rm, m.impaired, err)
			mk := m.keys[key]
			noteFailed()
			// A store over a value already lost (past its tolerance)
			// may fail: it must release the old value, and a Packing
			// member's release updates a set that can no longer be
			// decoded. It fails with data loss, never otherwise.
			lostBefore := mk != nil && mk.lost && errors.Is(err, ErrDataLoss)
			if err != nil && !lostBefore && !atRisk(key, &modelKey{vals: [][]byte{v}, rms: []string{rm}}, -1) {
				m.dump(key)
				t.Fatalf("step %d: store of %q with %s failed within tolerance (impaired %v): %v", step, key, rm, m.impaired, err)
			}
			if err == nil {
				m.keys[key] = &modelKey{vals: [][]byte{v}, rms: []string{rm}, rm: rm}
			} else if mk == nil {
				m.keys[key] = &modelKey{vals: [][]byte{nil, v}, rms: []string{"", rm}, rm: rm}
			} else {
				mk.vals = append(mk.vals, v)
				mk.rms = append(mk.rms, rm)
				mk.rm = rm
			}
		}
		switch op := rng.IntN(100); {
		case op < 31: // store or update
			v, rm, opts := pickStore()
			stored(key, v, rm, r.a.Store(ctx, []byte(key), v, opts...))
		case op < 36: // a range write (SETRANGE): it reads what it edits
			mk := m.keys[key]
			if mk != nil && (mk.lost || len(mk.vals) > 4) {
				// What it would edit is unknown, or one of many values:
				// each failed edit doubles them, until a read pins one.
				break
			}
			off, data := rng.Int64N(int64(len(randValue()))+1), randBytes(rng, 1+rng.IntN(3000))
			_, err := r.a.StoreRange(ctx, []byte(key), off, data)
			logf(key, "step %d: range write of %d bytes at %d (impaired %v): %v", step, len(data), off, m.impaired, err)
			noteFailed()
			before := []([]byte){nil}
			if mk != nil {
				before = mk.vals
			}
			edited := &modelKey{}
			if mk != nil {
				edited.liedOn = mk.liedOn // a range write may leave split 0's other pieces
			}
			for _, v := range before {
				e := modelEdit(v, off, data)
				edited.vals, edited.rms, edited.rm = append(edited.vals, e), append(edited.rms, r.a.Mechanism(len(e))), r.a.Mechanism(len(e))
			}
			// It fails where a read of the key may (absence cannot be
			// proven past an impaired primary) or a store of the result.
			readMayFail := len(m.impaired) > 0 && (mk == nil || slices.ContainsFunc(mk.vals, func(v []byte) bool { return v == nil })) ||
				mk != nil && (len(mk.vals) > 1 || atRisk(key, mk, -1))
			if err != nil && !atRisk(key, edited, -1) && !readMayFail {
				m.dump(key)
				t.Fatalf("step %d: range write of %q failed within tolerance (impaired %v): %v", step, key, m.impaired, err)
			}
			switch {
			case err == nil:
				m.keys[key] = edited
			case mk == nil:
				m.keys[key] = &modelKey{vals: append([][]byte{nil}, edited.vals...), rms: append([]string{""}, edited.rms...), rm: edited.rm}
			default:
				mk.vals, mk.rms, mk.rm = append(mk.vals, edited.vals...), append(mk.rms, edited.rms...), edited.rm
			}
		case op < 39: // a burst of asynchronous stores to different keys
			burst := map[string]*Future{}
			vals := map[string][]byte{}
			rms := map[string]string{}
			for range 6 {
				k := keyNames[rng.IntN(len(keyNames))]
				if burst[k] != nil {
					continue
				}
				v, rm, opts := pickStore()
				burst[k], vals[k], rms[k] = r.a.StoreAsync(ctx, []byte(k), v, opts...), v, rm
			}
			for k, f := range burst {
				stored(k, vals[k], rms[k], f.Err())
			}
		case op < 52: // delete
			err := r.a.Delete(ctx, []byte(key))
			logf(key, "step %d: delete (impaired %v): %v", step, m.impaired, err)
			mk := m.keys[key]
			switch {
			case err == nil:
				if mk == nil {
					m.dump(key)
					t.Fatalf("step %d: delete of absent %q succeeded", step, key)
				}
				// Every piece of whichever value was there is gone now.
				delete(m.keys, key)
			case errors.Is(err, ErrNotFound):
				if mk != nil && !slices.ContainsFunc(mk.vals, func(v []byte) bool { return v == nil }) && !mk.lost && !atRisk(key, mk, -1) {
					m.dump(key)
					t.Fatalf("step %d: delete of present %q: %v", step, key, err)
				}
				delete(m.keys, key)
			case mk != nil:
				mk.vals = append(mk.vals, nil)
				mk.rms = append(mk.rms, "")
			}
		case op < 76:
			logf(key, "step %d: check (impaired %v)", step, m.impaired)
			check(step, key)
		case op < 78: // a device lies: key's split-0 piece replaced by another key's
			d := rng.IntN(n)
			ik := format.Key([]byte(key), 0, format.KindData)
			if m.keys[key] == nil || r.mems[d].Failed() {
				break // an absent key's leftover piece, lied about, reads as lost
			}
			if _, err := r.mems[d].Retrieve(ctx, ik); err != nil {
				break
			}
			other := keyNames[rng.IntN(len(keyNames))]
			ok := format.Key([]byte(other), 0, format.KindData)
			b, err := r.mems[d].Retrieve(ctx, ok)
			if other == key || err != nil {
				break
			}
			if err := r.mems[d].Store(ctx, ik, b); err != nil {
				t.Fatal(err)
			}
			logf(key, "step %d: device %d holds %s's piece in its place", step, d, other)
			mk := m.keys[key]
			// The lie destroys d's piece as a replace would: if the
			// devices already impaired leave it nothing to spare, the
			// value is lost, and a repair may then clear its leftovers
			// (so that it reads as absent). A lie on a Packing member
			// is a bad piece of its whole set: every Packing value is
			// then at risk as a replace of d would put it.
			packed := slices.Contains(mk.rms, "packing")
			for k, kk := range m.keys {
				if (k == key || packed && slices.Contains(kk.rms, "packing")) && atRisk(k, kk, d) {
					kk.lost = true
					logf(k, "step %d: lost with device %d's lie", step, d)
				}
			}
			if mk.liedOn == nil {
				mk.liedOn = map[int]bool{}
			}
			mk.liedOn[d] = true
		case op < 80: // a device turns slow, or the slow one is fast again
			if r.a.slow == nil {
				break
			}
			if s := r.a.SlowDevices(); len(s) > 0 {
				// As its probes would re-admit it.
				_, err := r.a.Resync(ctx, s[0])
				logf("*", "step %d: slow device %d fast again: %v", step, s[0], err)
				if err == nil {
					delete(m.impaired, s[0])
				}
				break
			}
			if d := rng.IntN(n); len(m.impaired) < maxImpaired && !m.impaired[d] {
				r.a.slow.mu.Lock()
				marked := r.a.markSlowLocked(d, "made slow by the property test")
				r.a.slow.mu.Unlock()
				if marked {
					logf("*", "step %d: device %d slow", step, d)
					m.impaired[d] = true
				}
			}
		case op < 84: // fail a device (at most two impaired at once)
			d := rng.IntN(n)
			if len(m.impaired) < maxImpaired || m.impaired[d] {
				r.mems[d].Fail()
				logf("*", "step %d: fail device %d", step, d)
				m.impaired[d] = true
			}
		case op < 87: // replace a device: what was only there is lost
			d := rng.IntN(n)
			if len(m.impaired) < maxImpaired || m.impaired[d] {
				for k, mk := range m.keys {
					if atRisk(k, mk, d) {
						mk.lost = true
						logf(k, "step %d: lost with device %d", step, d)
					}
				}
				logf("*", "step %d: replace device %d", step, d)
				for _, s := range shots {
					s.armed.Store(false) // not during the operator's replace
				}
				r.mems[d].Replace()
				if err := r.a.ReplaceDevice(ctx, d, nil); err != nil {
					t.Fatalf("step %d: adopt %d: %v", step, d, err)
				}
				m.impaired[d] = true
			}
		case op < 90: // a failed device comes back (stale until repaired)
			for d := range m.impaired {
				r.mems[d].Recover()
			}
			logf("*", "step %d: recover %v", step, m.impaired)
		case op < 93: // one operation of one device fails, once
			if d := rng.IntN(n); len(m.impaired) < maxImpaired && !m.impaired[d] {
				for _, s := range shots {
					s.armed.Store(false) // one at a time: it may fail its device
				}
				shots[d].armed.Store(true)
				logf("*", "step %d: one-off fault armed on device %d", step, d)
			}
			continue // armed for the next step
		case op < 95: // restart: the array is opened again from the devices
			logf("*", "step %d: restart (impaired %v)", step, m.impaired)
			r.reopen()
		case op < 97:
			rep, err := r.a.Scrub(ctx, true)
			logf("*", "step %d: scrub --repair (impaired %v): %v %v", step, m.impaired, err, rep.Errors)
		default: // heal: every device that answers is resynced or rebuilt
			logf("*", "step %d: heal (impaired %v)", step, m.impaired)
			for d, err := range r.heal() {
				logf("*", "step %d: heal device %d: %v", step, d, err)
				if err == nil {
					delete(m.impaired, d)
				}
			}
		}
		for _, s := range shots {
			s.armed.Store(false)
		}
		noteFailed()
	}
	// Finally: everything back, repaired, and every value checked.
	for d := range r.mems {
		r.mems[d].Recover()
	}
	for d, err := range r.heal() {
		logf("*", "final heal device %d: %v", d, err)
		if err == nil {
			delete(m.impaired, d)
		}
	}
	for _, k := range keyNames {
		if mk := m.keys[k]; mk != nil && mk.lost {
			continue
		}
		check(steps, k)
	}
}
