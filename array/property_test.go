package array

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/mechanism"
)

// The property test runs random sequences of store, update, delete,
// retrieve, device failure, recovery, replacement and repair against a
// model map, and checks that the array never returns wrong bytes and never
// loses an acknowledged value that its mechanisms can protect.

// modelKey is what the model knows of one key.
type modelKey struct {
	// vals are the values a read may return; nil entry means "absent".
	// One entry when the last write was acknowledged; two or more after
	// failed writes (either may have landed).
	vals [][]byte
	rm   string // mechanism of the last acknowledged write
	// lost: a device holding what may have been its only copy was
	// replaced; reads may then return any of vals, not-found or an error.
	lost bool
}

type model struct {
	keys     map[string]*modelKey
	impaired map[int]bool // failed, or replaced and not yet repaired
	trace    map[string][]string
}

// propertyConfig is one array setup for the property test.
type propertyConfig struct {
	name      string
	opts      []Option
	rms       []string       // mechanisms for custom stores
	tolerates map[string]int // per mechanism: failures tolerated
	width     map[string]int // per mechanism: devices per split
}

func propertyConfigs() []propertyConfig {
	return []propertyConfig{{
		name: "hybrid-hashing-replication",
		opts: []Option{allMechanisms(), WithMode(Hybrid),
			WithRules(Rule{Max: 200, RM: "hashing"}, Rule{RM: "replication"})},
		rms:       []string{"hashing", "replication"},
		tolerates: map[string]int{"hashing": 0, "replication": 2},
		width:     map[string]int{"hashing": 1, "replication": 3},
	}}
}

func TestPropertyAgainstModel(t *testing.T) {
	for _, pc := range propertyConfigs() {
		t.Run(pc.name, func(t *testing.T) {
			ops := 3000
			if testing.Short() {
				ops = 600
			}
			runProperty(t, pc, ops)
		})
	}
}

func runProperty(t *testing.T, pc propertyConfig, steps int) {
	const n = 6
	limits := device.Limits{MaxValueLen: 16 << 10} // small, so that huge values are cheap
	r := newRigLimits(t, n, limits, pc.opts...)
	rng := newRand(t)
	m := &model{keys: map[string]*modelKey{}, impaired: map[int]bool{}, trace: map[string][]string{}}
	logf := func(key, f string, args ...any) {
		m.trace[key] = append(m.trace[key], fmt.Sprintf(f, args...))
	}
	splitCap := map[string]int{}
	for _, name := range pc.rms {
		splitCap[name] = r.a.byName[name].SplitCap()
	}

	// devicesOf returns, per split, the devices a value of size n stored
	// with rm occupies.
	spans := func(key string, rm string, size int) [][]int {
		splits := max(1, (size+splitCap[rm]-1)/splitCap[rm])
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
	// atRisk reports whether some split of the value has more impaired
	// devices (plus extra) than its mechanism tolerates.
	atRisk := func(key string, mk *modelKey, extra int) bool {
		for _, v := range mk.vals {
			if v == nil {
				continue
			}
			for _, span := range spans(key, mk.rm, len(v)) {
				bad := 0
				for _, d := range span {
					if m.impaired[d] || d == extra {
						bad++
					}
				}
				if bad > pc.tolerates[mk.rm] {
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
	randValue := func() []byte {
		switch rng.IntN(10) {
		case 0:
			return randBytes(rng, 0)
		case 1, 2, 3:
			return randBytes(rng, rng.IntN(200))
		case 9:
			return randBytes(rng, 16<<10+rng.IntN(40<<10)) // several splits
		default:
			return randBytes(rng, 200+rng.IntN(4<<10))
		}
	}
	check := func(step int, key string) {
		mk := m.keys[key]
		got, err := r.a.Retrieve(ctx, []byte(key))
		if mk == nil {
			if !errors.Is(err, ErrNotFound) && !(errors.Is(err, ErrUnavailable) && len(m.impaired) > 0) {
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
			t.Fatalf("step %d: retrieve %q (%s, impaired %v): %v", step, key, mk.rm, m.impaired, err)
		}
		for _, v := range mk.vals {
			if v != nil && bytes.Equal(v, got) {
				return
			}
		}
		for _, e := range m.trace[key] {
			t.Log(e)
		}
		t.Fatalf("step %d: retrieve %q returned %d bytes matching none of the %d allowed values", step, key, len(got), len(mk.vals))
	}

	for step := 0; step < steps; step++ {
		key := keyNames[rng.IntN(len(keyNames))]
		switch op := rng.IntN(100); {
		case op < 40: // store or update
			v := randValue()
			var opts []CallOption
			rm := r.a.Mechanism(len(v))
			if rng.IntN(5) == 0 {
				rm = pc.rms[rng.IntN(len(pc.rms))]
				opts = append(opts, Using(rm))
			}
			err := r.a.Store(ctx, []byte(key), v, opts...)
			logf(key, "step %d: store %d bytes with %s (impaired %v): %v", step, len(v), rm, m.impaired, err)
			mk := m.keys[key]
			if err == nil {
				m.keys[key] = &modelKey{vals: [][]byte{v}, rm: rm}
			} else if mk == nil {
				m.keys[key] = &modelKey{vals: [][]byte{nil, v}, rm: rm}
			} else {
				mk.vals = append(mk.vals, v)
				mk.rm = rm
			}
		case op < 55: // delete
			err := r.a.Delete(ctx, []byte(key))
			logf(key, "step %d: delete (impaired %v): %v", step, m.impaired, err)
			mk := m.keys[key]
			switch {
			case err == nil:
				if mk == nil {
					for _, e := range m.trace[key] {
						t.Log(e)
					}
					t.Fatalf("step %d: delete of absent %q succeeded", step, key)
				}
				// Every piece of whichever value was there is gone now.
				delete(m.keys, key)
			case errors.Is(err, ErrNotFound):
				if mk != nil && !slices.ContainsFunc(mk.vals, func(v []byte) bool { return v == nil }) && !mk.lost && !atRisk(key, mk, -1) {
					for _, e := range m.trace[key] {
						t.Log(e)
					}
					t.Fatalf("step %d: delete of present %q: %v", step, key, err)
				}
				delete(m.keys, key)
			case mk != nil:
				mk.vals = append(mk.vals, nil)
			}
		case op < 85:
			logf(key, "step %d: check (impaired %v)", step, m.impaired)
			check(step, key)
		case op < 90: // fail a device (at most two impaired at once)
			d := rng.IntN(n)
			if len(m.impaired) < 2 || m.impaired[d] {
				r.mems[d].Fail()
				logf(key, "step %d: fail device %d", step, d)
				m.impaired[d] = true
			}
		case op < 94: // replace a device: what was only there is lost
			d := rng.IntN(n)
			if len(m.impaired) < 2 || m.impaired[d] {
				for k, mk := range m.keys {
					if atRisk(k, mk, d) {
						mk.lost = true
						logf(k, "step %d: lost with device %d", step, d)
					}
				}
				logf(key, "step %d: replace device %d", step, d)
				r.mems[d].Replace()
				r.a.SetDeviceState(d, mechanism.Healthy)
				if err := r.a.AdoptDevice(ctx, d); err != nil {
					t.Fatalf("step %d: adopt %d: %v", step, d, err)
				}
				m.impaired[d] = true
			}
		case op < 97: // a failed device comes back (stale until repaired)
			for d := range m.impaired {
				r.mems[d].Recover()
			}
			logf(key, "step %d: recover %v", step, m.impaired)
		default: // repair: every device that answers is brought up to date
			logf(key, "step %d: repair (impaired %v)", step, m.impaired)
			for d := range m.impaired {
				if !r.mems[d].Failed() {
					delete(m.impaired, d)
				}
			}
			r.repairAllTolerant(keyNames, m)
		}
	}
	// Finally: everything back, repaired, and every value checked.
	for d := range r.mems {
		r.mems[d].Recover()
	}
	m.impaired = map[int]bool{}
	r.repairAllTolerant(keyNames, m)
	for _, k := range keyNames {
		if mk := m.keys[k]; mk != nil && mk.lost {
			continue
		}
		check(steps, k)
	}
}

// repairAllTolerant repairs every key, as a rebuild would, and re-admits
// the devices that answer. Keys in doubt (after a failed write) or lost may
// fail to repair; keys the model is certain of must repair.
func (r *rig) repairAllTolerant(keys []string, m *model) {
	r.t.Helper()
	for i := range r.mems {
		if !r.mems[i].Failed() && r.a.DeviceState(i) == mechanism.Failed {
			r.a.SetDeviceState(i, mechanism.Rebuilding)
		}
	}
	for _, k := range keys {
		_, err := r.a.Repair(ctx, []byte(k))
		mk := m.keys[k]
		if err != nil && !errors.Is(err, ErrNotFound) && mk != nil && len(mk.vals) == 1 && !mk.lost && len(m.impaired) == 0 {
			for _, e := range m.trace[k] {
				r.t.Log(e)
			}
			r.t.Fatalf("repair of %q (%s): %v", k, m.keys[k].rm, err)
		}
	}
	r.repairAll(nil)
}
