package array

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/mechanism/splitting"
)

// rangeLimits make values of a few tens of KiB huge (several splits), so
// that the tests cross split boundaries cheaply.
var rangeLimits = device.Limits{MaxValueLen: 8 << 10}

// modelRange is what RetrieveRange must return for v.
func modelRange(v []byte, off, n int64) []byte {
	lo := min(off, int64(len(v)))
	return v[lo : lo+min(n, int64(len(v))-lo)]
}

// modelEdit is v with data written at off (grown, zero filled).
func modelEdit(v []byte, off int64, data []byte) []byte {
	if len(data) == 0 {
		return v
	}
	out := make([]byte, max(int64(len(v)), off+int64(len(data))))
	copy(out, v)
	copy(out[off:], data)
	return out
}

// randRange returns a range around v, sometimes past its end.
func randRange(rng *rand.Rand, size int) Range {
	off := int64(rng.IntN(size + 2))
	return Range{off, int64(rng.IntN(max(size/3, 1) + 1))}
}

// checkRanges reads random ranges of key (several at once, as the
// keyspace does) and Len, and compares them with want.
func checkRanges(t *testing.T, a *Array, rng *rand.Rand, key string, want []byte, what string) {
	t.Helper()
	rs := []Range{randRange(rng, len(want)), randRange(rng, len(want)), {0, 9}}
	got, total, err := a.RetrieveRanges(ctx, []byte(key), rs...)
	if err != nil {
		t.Fatalf("%s: retrieve ranges %v of %q: %v", what, rs, key, err)
	}
	if total != int64(len(want)) {
		t.Fatalf("%s: %q has %d bytes, read %d", what, key, len(want), total)
	}
	for i, r := range rs {
		if w := modelRange(want, r.Off, r.Len); !bytes.Equal(got[i], w) {
			t.Fatalf("%s: range %v of %q (%d bytes): %d bytes, want %d (differ at %d)", what, r, key, len(want), len(got[i]), len(w), firstDiff(got[i], w))
		}
	}
	n, err := a.Len(ctx, []byte(key))
	if err != nil || n != int64(len(want)) {
		t.Fatalf("%s: len %q = %d, %v; want %d", what, key, n, err, len(want))
	}
}

// TestRangesAgainstModel: for every mechanism, small and huge values,
// random range reads and range writes (inside, across splits, past the
// end, on absent keys) agree with a byte-slice model.
func TestRangesAgainstModel(t *testing.T) {
	for _, fm := range faultMechanisms {
		t.Run(fm.name, func(t *testing.T) {
			rng := newRand(t)
			r := newRigLimits(t, 6, rangeLimits, everyMechanism())
			use := Using(fm.name)
			model := map[string][]byte{}
			keys := []string{"small-a", "small-b", "huge-a", "huge-b", "absent"}
			for _, k := range keys[:4] {
				size := 1 + rng.IntN(3000)
				if k[0] == 'h' {
					size = 20<<10 + rng.IntN(40<<10)
				}
				model[k] = randBytes(rng, size)
				r.mustStore(k, model[k], use)
			}
			for step := range 120 {
				k := keys[rng.IntN(len(keys))]
				what := fmt.Sprintf("step %d", step)
				switch rng.IntN(3) {
				case 0:
					off := int64(rng.IntN(len(model[k]) + 100))
					data := randBytes(rng, rng.IntN(12<<10))
					n, err := r.a.StoreRange(ctx, []byte(k), off, data, use)
					if err != nil {
						t.Fatalf("%s: store range of %d bytes at %d of %q: %v", what, len(data), off, k, err)
					}
					if len(data) > 0 || model[k] != nil {
						model[k] = modelEdit(model[k], off, data)
					}
					if n != int64(len(model[k])) {
						t.Fatalf("%s: store range returned length %d, want %d", what, n, len(model[k]))
					}
				case 1:
					// APPEND: an edit at the end.
					data := randBytes(rng, 1+rng.IntN(9000))
					if _, err := r.a.StoreRange(ctx, []byte(k), int64(len(model[k])), data, use); err != nil {
						t.Fatalf("%s: append to %q: %v", what, k, err)
					}
					model[k] = modelEdit(model[k], int64(len(model[k])), data)
				}
				if model[k] == nil {
					if _, err := r.a.RetrieveRange(ctx, []byte(k), 0, 10); !errors.Is(err, ErrNotFound) {
						t.Fatalf("%s: range of absent %q: %v, want not found", what, k, err)
					}
					if _, err := r.a.Len(ctx, []byte(k)); !errors.Is(err, ErrNotFound) {
						t.Fatalf("%s: len of absent %q: %v, want not found", what, k, err)
					}
					continue
				}
				checkRanges(t, r.a, rng, k, model[k], what)
			}
			for k, v := range model {
				r.mustRead(k, v)
			}
			if _, err := r.a.RetrieveRange(ctx, []byte("huge-a"), -1, 3); !errors.Is(err, ErrBadRange) {
				t.Fatalf("negative offset: %v, want ErrBadRange", err)
			}
		})
	}
}

// TestRangeReadReadsCoveringShards: a range read of a huge Splitting value
// reads from the devices the header of split 0's primary piece (length,
// geometry), split 0's pieces (the manifest: a few dozen bytes each), and
// the blocks of the data shards covering the range with their table
// entries: bytes in proportion to the range, not to a shard. The covered
// splits' other shards are not read (the manifest names only whole
// writes). Len reads one piece at most.
func TestRangeReadReadsCoveringShards(t *testing.T) {
	r := newRigLimits(t, 6, rangeLimits, everyMechanism(), WithMetaCache(0))
	rng := newRand(t)
	if r.a.mechs[2].Name() != "splitting" {
		t.Fatal("mechanism order changed")
	}
	split := int64(r.a.mechs[2].SplitCap())
	v := randBytes(rng, int(4*split+1000))
	r.mustStore("huge", v, Using("splitting"))
	shard := split / 4
	var manifest int64 // split 0's pieces
	for i := range r.mems {
		if b, err := r.raw(i, "huge", 0); err == nil {
			manifest += int64(len(b))
		}
	}
	if manifest == 0 || manifest > 6*200 {
		t.Fatalf("split 0's pieces take %d bytes, want a manifest's few dozen bytes each", manifest)
	}
	reads := func() (n, bytes int64) {
		for _, m := range r.mems {
			s := m.Stats()
			n, bytes = n+s.Retrieves, bytes+s.BytesRead
			m.ResetStats()
		}
		return n, bytes
	}
	cases := []struct {
		name           string
		off, n         int64
		blocks, splits int64
	}{
		{"split 0, shard 0", 10, 100, 1, 1},
		{"split 0, shard 2", 2*shard + 5, 100, 1, 1},
		{"split 3, shard 1", 3*split + shard + 7, 100, 1, 1},
		{"split 3, shards 1-2", 3*split + 2*shard - 50, 100, 2, 1},
		{"splits 2-3", 3*split - 50, 100, 2, 2},
		{"split 1, 3 blocks", split + 4000, 5000, 3, 1},
	}
	for _, c := range cases {
		reads()
		got, err := r.a.RetrieveRange(ctx, []byte("huge"), c.off, c.n)
		if err != nil || !bytes.Equal(got, v[c.off:c.off+c.n]) {
			t.Fatalf("%s: %d bytes, %v", c.name, len(got), err)
		}
		_, b := reads()
		// The header (format.HeaderLen + splitting's 7 bytes of fixed RM
		// fields, 43 bytes) of split 0's primary, split 0's pieces, and
		// the blocks with their table entries (4 bytes a block): no
		// header of a covered split's other shards, whose write is
		// whole since the manifest names it.
		if lo, hi := c.n, c.blocks*(splitting.BlockSize+4)+52+manifest; b < lo || b > hi {
			t.Errorf("%s: %d bytes read, want %d..%d (%d blocks and headers)", c.name, b, lo, hi, c.blocks)
		}
	}
	reads()
	if n, err := r.a.Len(ctx, []byte("huge")); err != nil || n != int64(len(v)) {
		t.Fatalf("len: %d, %v", n, err)
	}
	if n, _ := reads(); n != 1 {
		t.Errorf("len: %d device reads, want 1", n)
	}
}

// TestRangeWriteRewritesItsSplits: a range write to a huge value (the
// manifest layout) writes the splits its edits touch and split 0, not the
// value: an edit inside one split, across two, an append into the last
// split and past it, a write far past the end. After each, the value reads
// as the model, and the devices hold exactly what a fresh store of the
// model leaves (the replaced splits released, no orphan).
func TestRangeWriteRewritesItsSplits(t *testing.T) {
	for _, m := range []string{"splitting", "replication", "hashing", "packing"} {
		t.Run(m, func(t *testing.T) {
			r := newRigLimits(t, 6, rangeLimits, everyMechanism())
			rng := newRand(t)
			split := int64(r.a.byName[m].SplitCap())
			model := randBytes(rng, int(4*split+1000))
			r.mustStore("huge", model, Using(m))
			written := func() (n int64) {
				for _, d := range r.mems {
					n += d.Stats().BytesWritten
					d.ResetStats()
				}
				return n
			}
			written()
			cases := []struct {
				name   string
				off, n int64
				splits int64 // written, at most
			}{
				{"inside one split", 2*split + 100, 100, 1},
				{"across two splits", 3*split - 50, 100, 2},
				{"append into the last split", int64(len(model)), 500, 1},
				{"append past the last split", 4*split + 1400, split, 2},
				{"far past the end", 8*split + 10, 10, 4},
			}
			for _, c := range cases {
				data := randBytes(rng, int(c.n))
				n, err := r.a.StoreRange(ctx, []byte("huge"), c.off, data, Using(m))
				if end := c.off + c.n; int64(len(model)) < end {
					model = append(model, make([]byte, end-int64(len(model)))...)
				}
				copy(model[c.off:], data)
				if err != nil || n != int64(len(model)) {
					t.Fatalf("%s: %d, %v; want %d", c.name, n, err, len(model))
				}
				// Each split's bytes at most 3 times (3 copies; Splitting
				// writes less), and split 0 with the manifest; Packing
				// also patches 2 parities when a split joins its new set
				// and when the replaced one leaves.
				per := int64(3)
				if m == "packing" {
					per = 5
				}
				if w, most := written(), per*c.splits*split+6*200; w > most || w < c.n {
					t.Errorf("%s: %d bytes written, want %d..%d (%d splits)", c.name, w, c.n, most, c.splits)
				}
				r.mustRead("huge", model)
				if got, err := r.a.RetrieveRange(ctx, []byte("huge"), c.off, c.n); err != nil || !bytes.Equal(got, data) {
					t.Fatalf("%s: range read back: %v", c.name, err)
				}
			}
			if m == "packing" {
				return // its sets keep their parities (and slots) past a release
			}
			for _, diff := range asFresh(t, memDevices(r.mems), m, []byte("huge"), model) {
				t.Error(diff)
			}
			// A delete leaves nothing of it: every split, in either bank.
			if err := r.a.Delete(ctx, []byte("huge")); err != nil {
				t.Fatal(err)
			}
			for i := range r.mems {
				if info, _ := r.mems[i].Info(ctx); info.Keys != 1 {
					t.Errorf("device %d holds %d keys after the delete, want its array header alone", i, info.Keys)
				}
			}
		})
	}
}

// TestRangeDegraded: with any one or two devices failed or corrupted, range
// reads of values of every redundant mechanism, small and huge, are exact
// (a Splitting split with a covering shard lost is reconstructed), and a
// range write still lands.
func TestRangeDegraded(t *testing.T) {
	const n = 6
	rng := newRand(t)
	cases := 0
	for _, devs := range combos(n, 2) {
		if len(devs) == 0 {
			continue
		}
		for mask := 0; mask < 1<<len(devs); mask++ {
			if testing.Short() && cases%3 != 0 {
				cases++
				continue
			}
			cases++
			r := newRigLimits(t, n, rangeLimits, everyMechanism())
			model := map[string][]byte{}
			var keys []string
			for _, m := range []string{"replication", "splitting", "packing"} {
				for _, size := range []int{1 + rng.IntN(2000), 30<<10 + rng.IntN(20<<10)} {
					k := fmt.Sprintf("%s-%d", m, size)
					model[k] = randBytes(rng, size)
					r.mustStore(k, model[k], Using(m))
					keys = append(keys, k)
				}
			}
			for j, d := range devs {
				if mask&(1<<j) != 0 {
					r.mems[d].Fail()
				} else {
					r.corruptDevice(d)
				}
			}
			what := fmt.Sprintf("devices %v (failed mask %b)", devs, mask)
			for _, k := range keys {
				for range 4 {
					checkRanges(t, r.a, rng, k, model[k], what)
				}
			}
			k := keys[rng.IntN(len(keys))]
			off, data := int64(rng.IntN(len(model[k]))), randBytes(rng, 5000)
			m := k[:bytes.IndexByte([]byte(k), '-')]
			if _, err := r.a.StoreRange(ctx, []byte(k), off, data, Using(m)); err != nil {
				t.Fatalf("%s: store range of %q: %v", what, k, err)
			}
			model[k] = modelEdit(model[k], off, data)
			checkRanges(t, r.a, rng, k, model[k], what)
		}
	}
	t.Logf("%d fault combinations", cases)
}

// TestStoreRangeFaultAtEveryOperation: a range write to a small and a huge
// value of each mechanism, with device operation i failing (alone, or with
// every later one: a crash, the array then reopened from the devices), for
// every i the write makes. The value reads back whole as the old value or
// the new one, never a mix, before and after a repair, and a range read
// sees the value a whole read does; and a failure that the write
// acknowledged is the new value.
func TestStoreRangeFaultAtEveryOperation(t *testing.T) {
	rng := newRand(t)
	for _, m := range []string{"hashing", "replication", "splitting", "packing"} {
		for _, size := range []int{3000, 26 << 10} {
			for _, grow := range []bool{false, true} {
				old := randBytes(rng, size)
				off, data := int64(size/2), randBytes(rng, size/3)
				if grow {
					off = int64(size - 100)
				}
				want := modelEdit(old, off, data)
				for _, crash := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s-%d-grow=%v-crash=%v", m, size, grow, crash), func(t *testing.T) {
						// run stores old, then writes the range with operation
						// failAt (< 0: none) failing, and returns the devices,
						// the array and how many operations the write made.
						run := func(failAt int64) ([]device.Device, *Array, int64, error) {
							var count atomic.Int64
							inj := &faultdev.Toggle{Injector: faultdev.InjectorFunc(func(faultdev.Op) error {
								n := count.Add(1)
								if failAt >= 0 && (n == failAt+1 || crash && n > failAt) {
									return faultdev.ErrInjected
								}
								return nil
							})}
							var raw, wrapped []device.Device
							for i := range 6 {
								d := mem.New(mem.WithName(fmt.Sprintf("mem:dev%d", i)), mem.WithLimits(rangeLimits))
								raw = append(raw, d)
								wrapped = append(wrapped, faultdev.Wrap(d, inj))
							}
							a, err := Create(ctx, wrapped, everyMechanism())
							if err != nil {
								t.Fatal(err)
							}
							if err := a.Store(ctx, []byte("key"), old, Using(m)); err != nil {
								t.Fatal(err)
							}
							inj.On()
							_, err = a.StoreRange(ctx, []byte("key"), off, data, Using(m))
							return raw, a, count.Load(), err
						}
						_, a, total, err := run(-1)
						if err != nil {
							t.Fatalf("store range without faults: %v", err)
						}
						_ = a.Close()
						for i := int64(0); i < total; i++ {
							devs, a, _, err := run(i)
							if crash {
								// The crashed process is gone; its array is not
								// closed, but its background work stops with it.
								a.haltOnce.Do(a.halt)
								if a, err = Open(ctx, devs, everyMechanism()); err != nil {
									t.Fatalf("crash at op %d: reopen: %v", i, err)
								}
							}
							acked := err == nil && !crash
							check := func(when string) {
								// A range read first (a whole read may repair):
								// it must see the value a whole read sees.
								part, perr := a.RetrieveRange(ctx, []byte("key"), off, int64(len(data)))
								got, rerr := a.Retrieve(ctx, []byte("key"))
								if perr == nil && rerr == nil && !bytes.Equal(part, modelRange(got, off, int64(len(data)))) {
									t.Fatalf("op %d of %d failed (write: %v), %s: a range read saw the %s value, a whole read then the %s",
										i, total, err, when, map[bool]string{true: "new", false: "old"}[bytes.Equal(part, data)],
										map[bool]string{true: "new", false: "old"}[bytes.Equal(got, want)])
								}
								isOld, isNew := bytes.Equal(got, old), bytes.Equal(got, want)
								if rerr != nil || !isOld && !isNew || acked && !isNew {
									t.Fatalf("op %d of %d failed (write: %v), %s: %d bytes (old %v, new %v), %v",
										i, total, err, when, len(got), isOld, isNew, rerr)
								}
							}
							if m != "hashing" {
								// Hashing's one copy waits for its device.
								check("after the write")
							}
							for d := range 6 {
								if a.DeviceState(d) == mechanism.Failed {
									if _, err := a.Resync(ctx, d); err != nil {
										t.Fatalf("op %d: resync device %d: %v", i, d, err)
									}
								}
							}
							check("devices back")
							if _, err := a.Repair(ctx, []byte("key")); err != nil {
								t.Fatalf("op %d: repair: %v", i, err)
							}
							check("repaired")
							if m != "packing" {
								// Nothing left of the other value once scrubbed
								// (a repair's walk over splits past the end
								// stops at the first it finds none of): the
								// devices hold what a store of this one alone
								// leaves (a Packing set keeps its parities
								// past a release).
								if _, err := a.Scrub(ctx, true); err != nil {
									t.Fatalf("op %d: scrub: %v", i, err)
								}
								got, _ := a.Retrieve(ctx, []byte("key"))
								if diffs := asFresh(t, devs, m, []byte("key"), got); len(diffs) > 0 {
									t.Fatalf("op %d: scrubbed, %s", i, diffs[0])
								}
							}
							_ = a.Close()
						}
					})
				}
			}
		}
	}
}

// TestRangeReadOfCutShortWrite: an overwrite of a Splitting value that
// fails after its primary's shard and the shards covering a range landed,
// but fewer than k in all, leaves the old value; a range read over the
// new shards must return the old bytes too (what a whole read returns),
// not those of the write that never became the value.
func TestRangeReadOfCutShortWrite(t *testing.T) {
	var refuse [6]atomic.Bool // stores refused, by device
	var devs []device.Device
	for i := range 6 {
		m := mem.New(mem.WithName(fmt.Sprintf("mem:dev%d", i)), mem.WithLimits(rangeLimits))
		devs = append(devs, faultdev.Wrap(m, faultdev.InjectorFunc(func(op faultdev.Op) error {
			if op.Kind == device.OpStore && refuse[i].Load() {
				return fmt.Errorf("refused: %w", device.ErrNoSpace) // not a device failure
			}
			return nil
		})))
	}
	a, err := Create(ctx, devs, everyMechanism())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rng := newRand(t)
	old := randBytes(rng, 24<<10) // one split of 4 shards of 6 KiB
	key := []byte("cut-short")
	if err := a.Store(ctx, key, old, Using("splitting")); err != nil {
		t.Fatal(err)
	}
	p := a.primary(key, 0)
	for _, off := range []int{1, 4, 5} {
		refuse[(p+off)%6].Store(true)
	}
	updated := modelEdit(old, 12<<10, randBytes(rng, 10<<10)) // shards 2 and 3
	if _, err := a.StoreRange(ctx, key, 12<<10, updated[12<<10:], Using("splitting")); err == nil {
		t.Fatal("a write that reached 3 of 6 devices succeeded")
	}
	for i := range refuse {
		refuse[i].Store(false)
	}
	part, err := a.RetrieveRange(ctx, key, 13<<10, 8<<10)
	if err != nil || !bytes.Equal(part, old[13<<10:21<<10]) {
		t.Fatalf("range read after the cut-short write: %d bytes, %v; old %v, new %v", len(part), err,
			bytes.Equal(part, old[13<<10:21<<10]), bytes.Equal(part, updated[13<<10:21<<10]))
	}
	got, err := a.Retrieve(ctx, key)
	if err != nil || !bytes.Equal(got, old) {
		t.Fatalf("whole read after the cut-short write: %v (old %v)", err, bytes.Equal(got, old))
	}
}

// TestRangeReadAlignedBlocks: with KV-SSD values (2 MiB), a huge
// Splitting value's full splits have shards of whole blocks, so a 4 KiB
// range at a 4 KiB offset of the value, in any full split, reads one
// block: at most 2 × 4 KiB from the devices in all (the target);
// with the devices of the weighted placement (the capacity ring) too. The
// last, shorter split's shards are whole blocks only when that costs under
// 1% (docs/partial-io.md): a range there may span two blocks.
func TestRangeReadAlignedBlocks(t *testing.T) {
	t.Run("unweighted", func(t *testing.T) { testRangeReadAlignedBlocks(t, newRig(t, 6, everyMechanism())) })
	t.Run("weighted", func(t *testing.T) {
		testRangeReadAlignedBlocks(t, newRig(t, 8, everyMechanism(), WithWeights(4, 4, 3, 3, 3, 3, 3, 3)))
	})
}

func testRangeReadAlignedBlocks(t *testing.T, r *rig) {
	rng := newRand(t)
	split := r.a.mechs[2].SplitCap()
	v := randBytes(rng, 2*split+123<<10)
	r.mustStore("huge", v, Using("splitting"))
	for range 20 {
		off := int64(rng.IntN(2*split/4096)) * 4096 // in the two full splits
		n := min(int64(4096), int64(len(v))-off)
		for _, m := range r.mems {
			m.ResetStats()
		}
		got, err := r.a.RetrieveRange(ctx, []byte("huge"), off, n)
		if err != nil || !bytes.Equal(got, v[off:off+n]) {
			t.Fatalf("range at %d: %v", off, err)
		}
		var b int64
		for _, m := range r.mems {
			b += m.Stats().BytesRead
		}
		if b > 2*4096 {
			t.Errorf("range of 4 KiB at %d (split %d): %d bytes read, want at most %d", off, off/int64(split), b, 2*4096)
		}
	}
}

// TestRangeReadDamagedHeader: split 0's header is read alone, unverified,
// by a range read of a Splitting value; damaged (its length, split count,
// split size or version changed, its piece's checksum then failing), it
// never yields wrong bytes or a wrong length: what it says is checked
// against the blocks and the other shards, and the value is then located
// as a whole read locates it.
func TestRangeReadDamagedHeader(t *testing.T) {
	rng := newRand(t)
	for _, field := range []struct {
		name string
		off  int
		v    uint64
	}{{"splits", 8, 7}, {"split length", 12, 1000}, {"length", 16, 5 << 10}, {"length, huge", 16, 1 << 40}, {"version", 24, 12345}} {
		t.Run(field.name, func(t *testing.T) {
			r := newRigLimits(t, 6, rangeLimits, everyMechanism())
			v := randBytes(rng, 90<<10)
			r.mustStore("dmg", v, Using("splitting"))
			p := r.a.primary([]byte("dmg"), 0)
			k := format.Key([]byte("dmg"), 0, format.KindData)
			b, err := r.mems[p].Retrieve(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if field.off == 8 || field.off == 12 {
				binary.LittleEndian.PutUint32(b[field.off:], uint32(field.v))
			} else {
				binary.LittleEndian.PutUint64(b[field.off:], field.v)
			}
			if err := r.mems[p].Store(ctx, k, b); err != nil {
				t.Fatal(err)
			}
			for _, rg := range []Range{{10, 100}, {50 << 10, 4096}, {0, 1 << 40}} {
				got, total, err := r.a.RetrieveRanges(ctx, []byte("dmg"), rg)
				if err != nil || total != int64(len(v)) || !bytes.Equal(got[0], modelRange(v, rg.Off, rg.Len)) {
					t.Fatalf("range %v: %d bytes of %d, %v", rg, len(got[0]), total, err)
				}
			}
		})
	}
}

// TestRangeReadOfUnknownKeyReadsPrimaryOnce: a range read of a key the
// metadata cache does not know (a SET's read of the old state, after a
// restart or for a new key) asks the primary once on a device that
// cannot read part of a value (Pebble returns the whole value to the
// header peek, which then serves as the read) and once on any device when
// the key is absent.
func TestRangeReadOfUnknownKeyReadsPrimaryOnce(t *testing.T) {
	dir := t.TempDir()
	var reads atomic.Int64
	count := faultdev.InjectorFunc(func(op faultdev.Op) error {
		if op.Kind == device.OpRetrieve {
			reads.Add(1)
		}
		return nil
	})
	open := func(create bool) *Array {
		a, _ := openPebble(t, dir, 6, create, func(int) faultdev.Injector { return count })
		return a
	}
	// An array that held a value when it was opened: its metadata cache
	// cannot be complete (a fresh array's reads nothing: metacache_test).
	a := open(true)
	value := bytes.Repeat([]byte("v"), 4096)
	if err := a.Store(ctx, []byte("seed"), value); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a = open(false)
	for i := range 20 {
		reads.Store(0)
		key := fmt.Appendf(nil, "key-%d", i)
		if _, _, err := a.RetrieveRanges(ctx, key, Range{Len: 16}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("range read of an absent key: %v", err)
		}
		if n := reads.Load(); n != 1 {
			t.Fatalf("range read of an absent key: %d device reads, want 1", n)
		}
		if err := a.Store(ctx, key, value); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a = open(false) // an empty metadata cache
	defer a.Close()
	for i := range 20 {
		reads.Store(0)
		got, total, err := a.RetrieveRanges(ctx, fmt.Appendf(nil, "key-%d", i), Range{Len: 16})
		if err != nil || total != int64(len(value)) || !bytes.Equal(got[0], value[:16]) {
			t.Fatalf("range read after a restart: %q, %d, %v", got, total, err)
		}
		if n := reads.Load(); n != 1 {
			t.Fatalf("range read of a stored key after a restart: %d device reads, want 1", n)
		}
	}
}
