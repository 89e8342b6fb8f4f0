package redis_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/redis"
	"github.com/kvarray/kvarray/device/redis/redistest"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/mechanism/hashing"
	"github.com/kvarray/kvarray/mechanism/packing"
	"github.com/kvarray/kvarray/mechanism/replication"
	"github.com/kvarray/kvarray/mechanism/splitting"
)

const nDevs = 6

// configs are the array configurations under test, each over 6
// redis-server devices. redundant says whether the values survive the loss
// of a device (all but hashing).
var configs = []struct {
	name      string
	opts      []array.Option
	redundant bool
}{
	{"hashing", []array.Option{array.WithMechanisms(hashing.New())}, false},
	{"replication", []array.Option{array.WithMechanisms(replication.New(3))}, true},
	{"splitting", []array.Option{array.WithMechanisms(splitting.New(4, 2))}, true},
	{"packing", []array.Option{array.WithMechanisms(packing.New(4, 2, 0))}, true},
	{"hybrid", []array.Option{
		array.WithMechanisms(replication.New(3), packing.New(4, 2, 0), splitting.New(4, 2)),
		array.WithMode(array.Hybrid),
		array.WithRules(array.Rule{Max: 8 << 10, RM: "replication"}, array.Rule{Max: 32 << 10, RM: "packing"}, array.Rule{RM: "splitting"}),
	}, true},
}

// rig is an array over redis-server devices, with the servers at hand to
// kill and restart.
type rig struct {
	t    *testing.T
	srvs []*redistest.Server
	devs []*redis.Device
	a    *array.Array
}

func newRig(t *testing.T, opts ...array.Option) *rig {
	t.Helper()
	r := &rig{t: t, srvs: redistest.StartN(t, nDevs)}
	devs := make([]device.Device, nDevs)
	for i, s := range r.srvs {
		d, err := redis.Open(t.Context(), s.URL(0), redis.WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		r.devs = append(r.devs, d)
		devs[i] = d
	}
	a, err := array.Create(t.Context(), devs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r.a = a
	t.Cleanup(func() { _ = a.Close() })
	return r
}

func newRand(t *testing.T) *rand.Rand {
	seed := rand.Uint64()
	if s := os.Getenv("SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (replay with SEED=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, 0))
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func (r *rig) mustStore(key string, v []byte) {
	r.t.Helper()
	if err := r.a.Store(r.t.Context(), []byte(key), v); err != nil {
		r.t.Fatalf("store %q (%d bytes): %v", key, len(v), err)
	}
}

func (r *rig) mustRead(key string, want []byte) {
	r.t.Helper()
	got, err := r.a.Retrieve(r.t.Context(), []byte(key))
	if err != nil {
		r.t.Fatalf("retrieve %q: %v", key, err)
	}
	if !bytes.Equal(got, want) {
		r.t.Fatalf("retrieve %q: %d bytes, want %d: wrong bytes", key, len(got), len(want))
	}
}

// holder returns the device holding split 0 of key's data, or -1.
func (r *rig) holder(key string) int {
	for i, d := range r.devs {
		if ok, _ := d.Exist(r.t.Context(), format.Key([]byte(key), 0, format.KindData)); ok {
			return i
		}
	}
	return -1
}

// TestArrayRoundTrip stores, reads, overwrites and deletes values of every
// size class with each mechanism, over 6 redis-servers.
func TestArrayRoundTrip(t *testing.T) {
	sizes := []int{0, 1, 4 << 10, 64 << 10, 2<<20 + 12345}
	for _, cfg := range configs {
		t.Run(cfg.name, func(t *testing.T) {
			r := newRig(t, cfg.opts...)
			rng := newRand(t)
			var keys []string
			for _, n := range sizes {
				key := fmt.Sprintf("rt-%d", n)
				v := randBytes(rng, n)
				r.mustStore(key, v)
				r.mustRead(key, v)
				v2 := randBytes(rng, n/3+5)
				r.mustStore(key, v2)
				r.mustRead(key, v2)
				keys = append(keys, key)
			}
			got, err := r.a.Keys(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(keys)
			if len(got) != len(keys) {
				t.Fatalf("Keys = %q, want %q", got, keys)
			}
			for i := range got {
				if string(got[i]) != keys[i] {
					t.Fatalf("Keys = %q, want %q (in order)", got, keys)
				}
			}
			for _, key := range keys {
				if err := r.a.Delete(t.Context(), []byte(key)); err != nil {
					t.Fatalf("delete %q: %v", key, err)
				}
				if _, err := r.a.Retrieve(t.Context(), []byte(key)); !errors.Is(err, array.ErrNotFound) {
					t.Fatalf("retrieve %q after delete: %v", key, err)
				}
			}
			st, err := r.a.Status(t.Context(), array.StatusDeep())
			if err != nil {
				t.Fatal(err)
			}
			if st.Objects != 0 {
				t.Fatalf("Status after deleting everything: %d objects", st.Objects)
			}
			for _, ds := range st.Devices {
				if ds.State != "healthy" {
					t.Errorf("device %d (%s): %s %s", ds.Index, ds.Name, ds.State, ds.Reason)
				}
			}
		})
	}
}

// preSizes cycle through the hybrid rules' classes (replication, packing,
// splitting).
var preSizes = []int{100, 3000, 9000, 20000, 40000, 70000}

// TestArrayKillRestart: one redis-server is killed in the middle of a
// concurrent workload. Values written before the kill keep reading back
// byte-exact (hashing: the killed device's values give an error, never
// bytes). Then the server is restarted empty, re-admitted and repaired,
// and every acknowledged value reads back with the device's two
// neighbours killed, proving that the repaired device holds its data.
func TestArrayKillRestart(t *testing.T) {
	for ci, cfg := range configs {
		t.Run(cfg.name, func(t *testing.T) {
			r := newRig(t, cfg.opts...)
			rng := newRand(t)
			ctx := t.Context()
			victim := ci % nDevs

			// Values written before the kill, concurrently so that
			// Packing forms sets.
			const nPre = 48
			pre := map[string][]byte{}
			var preKeys []string
			for i := range nPre {
				k := fmt.Sprintf("pre-%03d", i)
				pre[k] = randBytes(rng, preSizes[i%len(preSizes)])
				preKeys = append(preKeys, k)
			}
			var wg sync.WaitGroup
			for _, k := range preKeys {
				wg.Go(func() {
					if err := r.a.Store(ctx, []byte(k), pre[k]); err != nil {
						t.Errorf("store %q: %v", k, err)
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			holders := map[string]int{}
			onVictim := 0
			for _, k := range preKeys {
				holders[k] = r.holder(k)
				if holders[k] == victim {
					onVictim++
				}
			}
			if !cfg.redundant && onVictim == 0 {
				t.Fatalf("no key on device %d: the test does not exercise loss", victim)
			}

			// The workload: writers store fresh keys, readers read the
			// values written before the kill.
			type result struct {
				val []byte
				err error
			}
			var (
				mu      sync.Mutex
				written = map[string]result{}
				stop    = make(chan struct{})
				killed  = make(chan struct{})
				reads   [2]int // before, after the kill
				lost    int    // hashing reads that failed after the kill
			)
			check := func(k string, got []byte, err error, afterKill bool) {
				want := pre[k]
				switch {
				case err == nil && bytes.Equal(got, want):
					return
				case err == nil:
					t.Errorf("retrieve %q: %d bytes, want %d: WRONG BYTES", k, len(got), len(want))
				case !afterKill:
					t.Errorf("retrieve %q before the kill: %v", k, err)
				case cfg.redundant:
					t.Errorf("retrieve %q after killing device %d: %v", k, victim, err)
				case holders[k] != victim:
					t.Errorf("retrieve %q (on device %d) after killing device %d: %v", k, holders[k], victim, err)
				case !errors.Is(err, array.ErrUnavailable) && !errors.Is(err, array.ErrDataLoss):
					t.Errorf("retrieve %q on the killed device: %v, want ErrUnavailable or ErrDataLoss", k, err)
				default:
					mu.Lock()
					lost++
					mu.Unlock()
				}
			}
			for g := range 4 {
				seed := rng.Uint64()
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), seed))
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						k := fmt.Sprintf("w-%d-%04d", g, i)
						v := randBytes(rng, preSizes[rng.IntN(len(preSizes))])
						err := r.a.Store(ctx, []byte(k), v)
						mu.Lock()
						written[k] = result{v, err}
						mu.Unlock()
					}
				})
			}
			for g := range 3 {
				seed := rng.Uint64()
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g)+100, seed))
					for {
						select {
						case <-stop:
							return
						default:
						}
						k := preKeys[rng.IntN(len(preKeys))]
						got, err := r.a.Retrieve(ctx, []byte(k))
						// A read that ends after the kill began may have
						// seen it.
						afterKill := false
						select {
						case <-killed:
							afterKill = true
						default:
						}
						check(k, got, err, afterKill)
						mu.Lock()
						if afterKill {
							reads[1]++
						} else {
							reads[0]++
						}
						mu.Unlock()
					}
				})
			}
			time.Sleep(300 * time.Millisecond)
			close(killed) // first: a read that fails from the kill ends after this
			r.srvs[victim].Kill()
			time.Sleep(500 * time.Millisecond)
			close(stop)
			wg.Wait()
			acked, failed := 0, 0
			var firstErr error
			for _, w := range written {
				if w.err == nil {
					acked++
				} else {
					failed++
					firstErr = cmp.Or(firstErr, w.err)
				}
			}
			if firstErr != nil {
				t.Logf("a failed store: %v", firstErr)
			}
			t.Logf("device %d killed; reads before/after: %d/%d, hashing reads lost: %d; stores acknowledged %d, failed %d",
				victim, reads[0], reads[1], lost, acked, failed)
			if reads[1] == 0 {
				t.Fatal("no read after the kill: the test does not exercise it")
			}
			if r.a.DeviceState(victim) != mechanism.Failed {
				t.Errorf("device %d killed, array says %v", victim, r.a.DeviceState(victim))
			}
			// Every value written before the kill, once more, sequentially.
			for _, k := range preKeys {
				got, err := r.a.Retrieve(ctx, []byte(k))
				check(k, got, err, true)
			}
			if t.Failed() {
				return
			}

			// Restart the server: no persistence, so it comes back empty.
			r.srvs[victim].Restart()
			waitServing(t, r.devs[victim])
			if err := r.a.AdoptDevice(ctx, victim); err != nil {
				t.Fatalf("adopt device %d: %v", victim, err)
			}
			all, err := r.a.Keys(ctx, nil)
			if err != nil {
				t.Fatalf("keys: %v", err)
			}
			toRepair := map[string]bool{}
			for _, k := range all {
				toRepair[string(k)] = true
			}
			for k := range pre {
				toRepair[k] = true
			}
			for k := range written {
				toRepair[k] = true
			}
			unsure := 0
			for k := range toRepair {
				_, err := r.a.Repair(ctx, []byte(k))
				switch {
				case err == nil:
				case written[k].err != nil && (errors.Is(err, array.ErrNotFound) || errors.Is(err, array.ErrUnavailable)):
					// A store that failed may have left nothing, or
					// pieces the array cannot vouch for.
					unsure++
				case !cfg.redundant && (errors.Is(err, array.ErrNotFound) || errors.Is(err, array.ErrDataLoss) || errors.Is(err, array.ErrUnavailable)):
					// A hashing value that was on the lost device.
				default:
					t.Errorf("repair %q: %v", k, err)
				}
			}
			r.a.SetDeviceState(victim, mechanism.Healthy)
			t.Logf("%d keys repaired, %d of failed stores not repairable", len(toRepair), unsure)
			if t.Failed() {
				return
			}

			if !cfg.redundant {
				// Hashing: the values elsewhere are intact; those of the
				// lost device are gone, and say so.
				for _, k := range preKeys {
					got, err := r.a.Retrieve(ctx, []byte(k))
					switch {
					case holders[k] != victim:
						if err != nil || !bytes.Equal(got, pre[k]) {
							t.Errorf("retrieve %q (device %d) after the restart: %d bytes, %v", k, holders[k], len(got), err)
						}
					case err == nil:
						t.Errorf("retrieve %q of the lost device returned %d bytes", k, len(got))
					}
				}
				return
			}

			// Kill the victim's neighbours: what they held of the values
			// must now come from the repaired device.
			left, right := (victim+nDevs-1)%nDevs, (victim+1)%nDevs
			r.srvs[left].Kill()
			r.srvs[right].Kill()
			n := 0
			for k, v := range pre {
				r.mustRead(k, v)
				n++
			}
			for k, w := range written {
				got, err := r.a.Retrieve(ctx, []byte(k))
				switch {
				case w.err == nil:
					if err != nil || !bytes.Equal(got, w.val) {
						t.Errorf("retrieve acknowledged %q with devices %d and %d killed: %d bytes, %v", k, left, right, len(got), err)
					}
					n++
				case err == nil && !bytes.Equal(got, w.val):
					t.Errorf("retrieve %q (store failed) returned other bytes", k)
				}
			}
			t.Logf("%d acknowledged values read back with devices %d and %d killed and %d repaired", n, left, right, victim)
		})
	}
}

// waitServing waits until d answers again: the first call after a restart
// reports the restart, and go-redis may refuse for up to a second after
// an outage.
func waitServing(t *testing.T, d *redis.Device) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := d.Exist(t.Context(), []byte("probe"))
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("device does not serve 10s after its restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// BenchmarkSingleVsBatch compares 4 KiB stores and retrieves on one redis
// device issued one at a time (a round trip each) with batches of 64 (one
// pipelined round trip).
func BenchmarkSingleVsBatch(b *testing.B) {
	srv := redistest.Start(b)
	d, err := redis.Open(context.Background(), srv.URL(0))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	const size, batch = 4 << 10, 64
	val := bytes.Repeat([]byte{0xa5}, size)
	key := func(i int) []byte { return fmt.Appendf(nil, "bench-%06d", i%4096) }
	ctx := context.Background()
	for i := range 4096 { // warm-up, and something to read
		if err := d.Store(ctx, key(i), val); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("store/single", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := d.Store(ctx, key(i), val); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("retrieve/single", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := d.Retrieve(ctx, key(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	runBatch := func(b *testing.B, kind device.OpKind) {
		b.SetBytes(size * batch)
		b.ReportAllocs()
		ops := make([]device.Op, batch)
		n := 0
		for b.Loop() {
			for j := range ops {
				ops[j] = device.Op{Kind: kind, Key: key(n + j), Value: val}
				if kind != device.OpStore {
					ops[j].Value = nil
				}
			}
			n += batch
			if err := d.Batch(ctx, ops); err != nil {
				b.Fatal(err)
			}
			for j := range ops {
				if ops[j].Err != nil {
					b.Fatal(ops[j].Err)
				}
			}
		}
		// b.N counts batches: report per 4 KiB op too.
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/4KiB-op")
	}
	b.Run("store/batch64", func(b *testing.B) { runBatch(b, device.OpStore) })
	b.Run("retrieve/batch64", func(b *testing.B) { runBatch(b, device.OpRetrieve) })
}
