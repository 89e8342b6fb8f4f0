package array

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// hybridAll is the paper's hybrid setup over all four mechanisms.
func hybridAll() []Option {
	return []Option{everyMechanism(), WithMode(Hybrid),
		WithRules(Rule{Max: 8 << 10, RM: "replication"}, Rule{Max: 32 << 10, RM: "packing"}, Rule{RM: "splitting"})}
}

// workload stores and reads keys from several goroutines until stop is
// closed, and returns every acknowledged value (the last one per key).
// Any error fails the test: with at most r devices down, degraded mode
// must keep every operation working. stored counts the stores acknowledged
// so far.
func workload(t *testing.T, a *Array, seed uint64, stop <-chan struct{}, stored *atomic.Int64) func() map[string][]byte {
	var mu sync.Mutex
	acked := map[string][]byte{}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d-%03d", w, rng.IntN(150))
				sizes := []int{4 << 10, 16 << 10, 64 << 10}
				switch rng.IntN(3) {
				case 0:
					mu.Lock()
					want, ok := acked[key]
					mu.Unlock()
					got, err := a.Retrieve(context.Background(), []byte(key))
					if !ok {
						continue
					}
					if err != nil || string(got) != string(want) {
						t.Errorf("retrieve %q during the workload: %d bytes, %v", key, len(got), err)
						return
					}
				default:
					v := randBytes(rng, sizes[rng.IntN(3)])
					if err := a.Store(context.Background(), []byte(key), v); err != nil {
						t.Errorf("store %q during the workload: %v", key, err)
						return
					}
					mu.Lock()
					acked[key] = v
					mu.Unlock()
					stored.Add(1)
				}
			}
		}()
	}
	return func() map[string][]byte {
		wg.Wait()
		return acked
	}
}

// readAll checks that every acknowledged value reads back byte-exact.
func readAll(t *testing.T, a *Array, acked map[string][]byte, what string) {
	t.Helper()
	for k, v := range acked {
		got, err := a.Retrieve(context.Background(), []byte(k))
		if err != nil || string(got) != string(v) {
			t.Fatalf("%s: %q: %d bytes (want %d), %v", what, k, len(got), len(v), err)
		}
	}
}

// TestFailReplaceRebuildUnderLoad: a device fails under a concurrent
// workload of all four mechanisms; the workload runs on without errors;
// the device is replaced and rebuilt; then every acknowledged value reads
// back with the rebuilt device's neighbours failed, which proves the
// rebuilt device holds its data.
func TestFailReplaceRebuildUnderLoad(t *testing.T) {
	r := newRig(t, 6, hybridAll()...)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	stop := make(chan struct{})
	var stored atomic.Int64
	wait := workload(t, r.a, seed, stop, &stored)
	const dev = 2
	r.mems[dev].Fail()
	// Let the workload run degraded for a while: at least 50 stores,
	// however loaded the machine is (a rebuild of nothing proves nothing).
	from := stored.Load()
	for i, deadline := 0, time.Now().Add(30*time.Second); i < 200 || (stored.Load() < from+50 && time.Now().Before(deadline)); i++ {
		_, _ = r.a.Exist(ctx, []byte(fmt.Sprint("probe", i)))
	}
	close(stop)
	acked := wait()
	if r.a.DeviceState(dev) != mechanism.Failed {
		t.Fatalf("device %d is %v after failing under load", dev, r.a.DeviceState(dev))
	}
	readAll(t, r.a, acked, "degraded")

	r.replace(dev)
	rep, err := r.a.Rebuild(ctx, dev)
	if err != nil {
		t.Fatalf("rebuild: %v (%+v)", err, rep)
	}
	if r.a.DeviceState(dev) != mechanism.Healthy || rep.Keys == 0 {
		t.Fatalf("after rebuild: state %v, report %+v", r.a.DeviceState(dev), rep)
	}
	r.mems[(dev+5)%6].Fail()
	r.mems[(dev+1)%6].Fail()
	readAll(t, r.a, acked, "rebuilt device with both neighbours failed")
}

// TestStaleDeviceComesBack: a device drops out while the workload updates
// values, comes back with the old values, and must never serve them; a
// resync brings it up to date from the record, after which it serves with
// its neighbours failed.
func TestStaleDeviceComesBack(t *testing.T) {
	r := newRig(t, 6, hybridAll()...)
	rng := newRand(t)
	acked := map[string][]byte{}
	var keys []string
	var vals [][]byte
	for i := 0; i < 120; i++ {
		keys = append(keys, fmt.Sprint("k", i))
		vals = append(vals, randBytes(rng, []int{4 << 10, 16 << 10, 64 << 10}[i%3]))
	}
	storeConcurrently(t, r.a, keys, vals)
	const dev = 3
	r.mems[dev].Fail()
	// Update every key while the device is away (two thirds of them have a
	// piece there), and delete some.
	for i := range vals {
		vals[i] = randBytes(rng, len(vals[i]))
	}
	storeConcurrently(t, r.a, keys, vals)
	for i, k := range keys {
		acked[k] = vals[i]
	}
	for _, k := range keys[:10] {
		if err := r.a.Delete(ctx, []byte(k)); err != nil {
			t.Fatalf("degraded delete %q: %v", k, err)
		}
		delete(acked, k)
	}
	behind := r.a.env.MissedCount(dev)
	if behind == 0 {
		t.Fatal("no resync record for the failed device")
	}
	r.mems[dev].Recover() // back, with every old value on it
	// Re-admitted: it must not serve what it missed.
	rep, err := r.a.Resync(ctx, dev)
	if err != nil {
		t.Fatalf("resync: %v", err)
	}
	if rep.Keys != int64(behind) || r.a.env.MissedCount(dev) != 0 {
		t.Fatalf("resync repaired %d keys of %d recorded, %d left", rep.Keys, behind, r.a.env.MissedCount(dev))
	}
	r.mems[(dev+5)%6].Fail()
	r.mems[(dev+1)%6].Fail()
	readAll(t, r.a, acked, "resynced device with both neighbours failed")
	for _, k := range keys[:10] {
		if _, err := r.a.Retrieve(ctx, []byte(k)); !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrUnavailable) {
			t.Fatalf("deleted %q came back: %v", k, err)
		}
	}
}

// TestStaleReadsHiddenBeforeResync: before any resync, a device that comes
// back answers stale for what it missed, so reads never see old bytes.
func TestStaleReadsHiddenBeforeResync(t *testing.T) {
	r := newRig(t, 6, everyMechanism(), WithDefault("replication"))
	r.mustStore("k", []byte("old"))
	p := r.a.primary([]byte("k"), 0)
	r.mems[p].Fail()
	r.mustStore("k", []byte("new")) // degraded: primary missed it
	r.mems[p].Recover()
	r.a.SetDeviceState(p, mechanism.Healthy) // as if re-admitted without resync
	r.mustRead("k", []byte("new"))
	if v, err := r.piece(p, "k", 0); err != nil || string(v.Payload) != "new" {
		t.Fatalf("the read did not repair the stale primary: %q %v", v.Payload, err)
	}
}

// TestRebuildRestartable: an interrupted rebuild resumes from its
// checkpoint and finishes, losing nothing.
func TestRebuildRestartable(t *testing.T) {
	r := newRig(t, 6, hybridAll()...)
	rng := newRand(t)
	var keys []string
	var vals [][]byte
	for i := 0; i < 600; i++ {
		keys = append(keys, fmt.Sprintf("key-%04d", i))
		vals = append(vals, randBytes(rng, 1+rng.IntN(6000)))
	}
	storeConcurrently(t, r.a, keys, vals)
	const dev = 1
	r.replace(dev)
	cctx, cancel := context.WithCancel(ctx)
	var once sync.Once
	// One worker: items finish in order, so the checkpoint follows them.
	// With more, one slow early item in flight at the cancel holds the
	// checkpoint before it, however many later items finished.
	_, err := r.a.Rebuild(cctx, dev, WithWorkers(1), WithProgress(func(p Progress) {
		if p.Keys > 100 {
			once.Do(cancel)
		}
	}, time.Millisecond))
	if err == nil {
		t.Fatal("cancelled rebuild reported success")
	}
	err1 := err
	if r.a.DeviceState(dev) != mechanism.Rebuilding {
		t.Fatalf("interrupted rebuild left the device %v", r.a.DeviceState(dev))
	}
	rep, err := r.a.Rebuild(ctx, dev)
	if err != nil {
		t.Fatalf("resumed rebuild: %v", err)
	}
	if rep.Skipped == 0 {
		t.Fatalf("resumed rebuild redid everything: %+v (first run: %v)", rep, err1)
	}
	r.mems[(dev+5)%6].Fail()
	r.mems[(dev+1)%6].Fail()
	for i, k := range keys {
		r.mustRead(k, vals[i])
	}
}

// TestScrubFindsAndRepairsCorruption corrupts random pieces of every
// mechanism: a scrub without repair reports them and changes nothing, a
// scrub with repair fixes them all, and a third scrub finds nothing.
func TestScrubFindsAndRepairsCorruption(t *testing.T) {
	r := newRig(t, 6, hybridAll()...)
	rng := newRand(t)
	var keys []string
	var vals [][]byte
	for i := 0; i < 90; i++ {
		keys = append(keys, fmt.Sprint("key-", i))
		vals = append(vals, randBytes(rng, []int{4 << 10, 16 << 10, 64 << 10}[i%3]))
	}
	storeConcurrently(t, r.a, keys, vals)
	// Corrupt one random piece in each of 30 keys, packing members only on
	// device 0 and packing parities only on device 1, so that no set loses
	// more than r=2 pieces.
	corrupted := 0
	for _, i := range rng.Perm(len(keys))[:30] {
		key := keys[i]
		holders := r.holders(key, 0)
		if len(holders) == 0 || (len(holders) == 1 && holders[0] != 0) {
			continue
		}
		d := holders[rng.IntN(len(holders))]
		if err := r.mems[d].Corrupt(format.Key([]byte(key), 0, format.KindData)); err == nil {
			corrupted++
		}
	}
	var parities [][]byte
	_ = r.mems[1].Iterate(ctx, []byte("\x00kvarray-set"), func(k []byte) error {
		parities = append(parities, append([]byte(nil), k...))
		return nil
	})
	for _, k := range parities {
		if rng.IntN(2) == 0 {
			_ = r.mems[1].Corrupt(k)
			corrupted++
		}
	}
	before := snapshot(r)
	rep, err := r.a.Scrub(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Problems() == 0 {
		t.Fatalf("scrub found nothing after %d corruptions: %+v", corrupted, rep)
	}
	if after := snapshot(r); after != before {
		t.Fatal("a scrub without repair changed the devices")
	}
	rep, err = r.a.Scrub(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("repaired: %+v", rep)
	rep, err = r.a.Scrub(ctx, false)
	if err != nil || rep.Problems() != 0 {
		t.Fatalf("after repair a scrub still finds %d problems: %+v, %v", rep.Problems(), rep, err)
	}
	r.checkAllPieces()
	for i, k := range keys {
		r.mustRead(k, vals[i])
	}
}

// snapshot summarises every device's contents.
func snapshot(r *rig) string {
	s := ""
	for d, m := range r.mems {
		st := m.Stats()
		info, _ := m.Info(ctx)
		s += fmt.Sprintf("%d:%d/%d/%d ", d, info.Keys, info.Used, st.BytesWritten)
	}
	return s
}

// TestAutoResync: a device that comes back is resynced by the array on its
// own, and then serves its keys with its neighbours failed.
func TestAutoResync(t *testing.T) {
	r := newRig(t, 6, everyMechanism(), WithDefault("replication"), WithAutoResync(5*time.Millisecond))
	r.mustStore("k", []byte("old"))
	p := r.a.primary([]byte("k"), 0)
	r.mems[p].Fail()
	r.mustStore("k", []byte("new"))
	if r.a.DeviceState(p) != mechanism.Failed || r.a.env.MissedCount(p) == 0 {
		t.Fatalf("device %d: %v, %d keys behind", p, r.a.DeviceState(p), r.a.env.MissedCount(p))
	}
	r.mems[p].Recover()
	deadline := time.Now().Add(10 * time.Second)
	for r.a.DeviceState(p) != mechanism.Healthy || r.a.env.MissedCount(p) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("device %d not resynced: %v, %d behind", p, r.a.DeviceState(p), r.a.env.MissedCount(p))
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.mems[(p+1)%6].Fail()
	r.mems[(p+2)%6].Fail()
	r.mustRead("k", []byte("new"))
}
