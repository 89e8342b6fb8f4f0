package pebble

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvarray/kvarray/device"
)

// TestBulkLoad: the stores of BatchDeferred are collected and ingested
// as a sorted table at Sync. Invariants: they are invisible to reads until
// Sync and read back after it; an ordinary write of a collected key made
// after it was collected wins over it (a later Store, a later Delete);
// after a crash, everything written before the Sync is there.
func TestBulkLoad(t *testing.T) {
	fs := vfs.NewCrashableMem()
	dir := t.TempDir()
	d := mustOpen(t, dir, WithCreate(true), withFS(fs))
	ctx := t.Context()
	key := func(i int) []byte { return fmt.Appendf(nil, "key-%05d", i) }
	val := func(i int, gen string) []byte { return fmt.Appendf(nil, "%s-%05d", gen, i) }
	const n = 500
	// Collected out of key order, over several batches.
	for lo := n - 100; lo >= 0; lo -= 100 {
		ops := make([]device.Op, 0, 100)
		for i := lo; i < lo+100; i++ {
			ops = append(ops, device.Op{Kind: device.OpStore, Key: key(i), Value: val(i, "bulk")})
		}
		if err := d.BatchDeferred(ctx, ops); err != nil {
			t.Fatal(err)
		}
		for i := range ops {
			if ops[i].Err != nil {
				t.Fatal(ops[i].Err)
			}
		}
	}
	if _, err := d.Retrieve(ctx, key(7)); !errors.Is(err, device.ErrNotFound) {
		t.Fatalf("a collected store read before Sync: %v", err)
	}
	// Later ordinary writes of collected keys.
	if err := d.Store(ctx, key(1), val(1, "later")); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, key(2)); err != nil && !errors.Is(err, device.ErrNotFound) {
		t.Fatal(err)
	}
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(d *Device, when string) {
		t.Helper()
		for i := range n {
			v, err := d.Retrieve(ctx, key(i))
			switch {
			case i == 2:
				if !errors.Is(err, device.ErrNotFound) {
					t.Fatalf("%s: key 2, deleted after it was collected: %q, %v", when, v, err)
				}
			case i == 1:
				if string(v) != string(val(1, "later")) {
					t.Fatalf("%s: key 1, stored after it was collected: %q, %v", when, v, err)
				}
			default:
				if err != nil || string(v) != string(val(i, "bulk")) {
					t.Fatalf("%s: key %d: %q, %v", when, i, v, err)
				}
			}
		}
	}
	check(d, "after Sync")
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	check(mustOpen(t, dir, WithCreate(true), withFS(crashed)), "after a crash")
}

// TestBulkIngestRacesAStore: a store of a collected key that runs while
// the collection is being ingested must still win over the collected
// value. Invariant: once Store returns, reads return its value, whatever
// ingest ran beside it (a rebuild restored the old piece, a client then
// overwrote it: the rebuild's ingest must not bring the old one back, as
// it did when an ingest let ordinary writes skip the gate from the moment
// it took the collection).
func TestBulkIngestRacesAStore(t *testing.T) {
	d := mustOpen(t, t.TempDir(), WithCreate(true))
	ctx := t.Context()
	for i := range 200 {
		key := fmt.Appendf(nil, "key-%05d", i)
		// Enough other keys that the ingest takes a while.
		ops := []device.Op{{Kind: device.OpStore, Key: key, Value: []byte("old")}}
		for j := range 64 {
			ops = append(ops, device.Op{Kind: device.OpStore, Key: fmt.Appendf(nil, "pad-%05d-%03d", i, j), Value: make([]byte, 4096)})
		}
		if err := d.BatchDeferred(ctx, ops); err != nil {
			t.Fatal(err)
		}
		synced := make(chan error, 1)
		go func() { synced <- d.Sync(ctx) }()
		if err := d.Store(ctx, key, []byte("new")); err != nil {
			t.Fatal(err)
		}
		v, err := d.Retrieve(ctx, key)
		if err := <-synced; err != nil {
			t.Fatal(err)
		}
		if err != nil || string(v) != "new" {
			t.Fatalf("round %d: right after the store returned: %q, %v; want \"new\"", i, v, err)
		}
		if v, err := d.Retrieve(ctx, key); err != nil || string(v) != "new" {
			t.Fatalf("round %d: after the ingest: %q, %v; want \"new\" (the collected value came back)", i, v, err)
		}
	}
}

// deferStores has d collect n stores of 4 KiB values, gen in each value,
// 100 to a BatchDeferred call (so that several collections fill and are
// ingested on the way). The values of a call share one buffer, which is
// overwritten once the call returns: the device must have copied them.
func deferStores(t *testing.T, d *Device, n int, gen byte) error {
	t.Helper()
	buf := make([]byte, 100*4096)
	for lo := 0; lo < n; lo += 100 {
		ops := make([]device.Op, 0, 100)
		for i := lo; i < min(n, lo+100); i++ {
			v := buf[(i-lo)*4096 : (i-lo+1)*4096]
			clear(v)
			v[0], v[1] = gen, byte(i)
			ops = append(ops, device.Op{Kind: device.OpStore, Key: fmt.Appendf(nil, "key-%06d", i), Value: v})
		}
		err := d.BatchDeferred(t.Context(), ops)
		for i := range buf {
			buf[i] = 0xff
		}
		if err != nil {
			return err
		}
		for i := range ops {
			if ops[i].Err != nil {
				return ops[i].Err
			}
		}
	}
	return nil
}

// TestBulkIngestsInOrder: collections that fill (bulkMax) are ingested
// one after another. Invariant: a key collected twice reads as its later
// store after Sync, whichever ingest (a full collection's or Sync's) took
// each, and after a crash.
func TestBulkIngestsInOrder(t *testing.T) {
	fs := vfs.NewCrashableMem()
	dir := t.TempDir()
	d := mustOpen(t, dir, WithCreate(true), withFS(fs))
	const n = 3 * bulkMax / 4096 // three collections' worth
	for gen := byte(1); gen <= 3; gen++ {
		if err := deferStores(t, d, n, gen); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	check := func(d *Device, when string) {
		t.Helper()
		for i := range n {
			v, err := d.Retrieve(t.Context(), fmt.Appendf(nil, "key-%06d", i))
			if err != nil || len(v) != 4096 || v[0] != 3 || v[1] != byte(i) {
				t.Fatalf("%s: key %d: generation %v, %v; want the last store (3)", when, i, v[:min(len(v), 2)], err)
			}
		}
	}
	check(d, "after Sync")
	check(mustOpen(t, dir, WithCreate(true), withFS(fs.CrashClone(vfs.CrashCloneCfg{}))), "after a crash")
}
