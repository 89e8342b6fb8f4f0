package pebble_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/pebble"
	"github.com/kvarray/kvarray/format"
)

// TestRebuildCrashResumes: a rebuild on Pebble writes the restored pieces
// unsynced (device.Deferred) and syncs before each checkpoint. The machine
// "crashes" in the middle of it (a copy of the file systems as last
// synced, while the rebuild goes on), and the array is opened again from
// that copy. Invariant: the rebuild resumes from its checkpoint (it skips
// keys), completes, and the rebuilt device then holds exactly the pieces
// it held before it was lost, byte for byte, and every value reads back.
// The values are flushed into blob files first, so the scan reads one
// neighbour's value per key and restores the others' from it (the
// Replication fast path).
func TestRebuildCrashResumes(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	root := t.TempDir()
	open := func(fs vfs.FS, name string) *pebble.Device {
		d, err := pebble.Open(filepath.Join(root, name), pebble.WithCreate(true), pebble.WithFS(fs))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	names := []string{"dev0", "dev1", "dev2", "dev3", "dev4", "dev5"}
	devs := make([]device.Device, nDevs)
	for i := range devs {
		devs[i] = open(fs, names[i])
	}
	opts := append(arrayOpts[:len(arrayOpts):len(arrayOpts)], array.WithMode(array.Standalone), array.WithDefault("replication"))
	a, err := array.Create(ctx, devs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	vals := map[string][]byte{}
	for i := range n {
		k := fmt.Sprintf("key-%06d", i)
		v := bytes.Repeat([]byte{byte(i), byte(i >> 8), byte(i >> 16)}, 1500)
		if err := a.Store(ctx, []byte(k), v); err != nil {
			t.Fatal(err)
		}
		vals[k] = v
	}
	for _, d := range devs {
		if err := d.(*pebble.Device).Flush(); err != nil {
			t.Fatal(err)
		}
	}
	before := pieces(t, devs[2])

	names[2] = "dev2-new"
	fresh := open(fs, names[2])
	if err := a.ReplaceDevice(ctx, 2, fresh); err != nil {
		t.Fatal(err)
	}
	var (
		once    sync.Once
		crashed vfs.FS
	)
	checkpoint := format.Key([]byte("\x00kvarray-rebuilt-at"), 0, format.KindArray)
	progress := func(p array.Progress) {
		// Once a checkpoint was saved (one is after each report).
		if _, err := fresh.Retrieve(ctx, checkpoint); err == nil && !p.Completed {
			once.Do(func() { crashed = fs.CrashClone(vfs.CrashCloneCfg{}) })
		}
	}
	if _, err := a.Rebuild(ctx, 2, array.WithWorkers(4), array.WithProgress(progress, time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_ = a.Close()
	if crashed == nil {
		t.Fatal("the rebuild ended before the crash was taken")
	}

	for i := range devs {
		devs[i] = open(crashed, names[i])
	}
	a, err = array.Open(ctx, devs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close() }()
	rep, err := a.Rebuild(ctx, 2, array.WithWorkers(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the crash: %d keys skipped, %d restored", rep.Skipped, rep.Keys)
	if rep.Skipped == 0 {
		t.Fatal("the rebuild started over: no checkpoint survived the crash")
	}
	checkRebuilt(t, a, before, devs[2], vals)
}

// checkRebuilt checks that rebuilt device d holds exactly the pieces
// before lists, byte for byte, and that every value of vals reads back.
func checkRebuilt(t *testing.T, a *array.Array, before map[string][]byte, d device.Device, vals map[string][]byte) {
	t.Helper()
	after := pieces(t, d)
	if len(after) != len(before) {
		t.Fatalf("the rebuilt device held %d pieces, holds %d after the rebuild", len(before), len(after))
	}
	for k, v := range before {
		if !bytes.Equal(after[k], v) {
			t.Fatalf("piece %q differs after the rebuild", k)
		}
	}
	for k, v := range vals {
		got, err := a.Retrieve(context.Background(), []byte(k))
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("%s: %d bytes, %v", k, len(got), err)
		}
	}
}

// pieces is every key and value d holds but the array's own (header,
// checkpoint, records).
func pieces(t *testing.T, d device.Device) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := device.Scan(context.Background(), d, nil, nil, true, func(k, v []byte) error {
		if _, _, kind, err := format.ParseKey(k); err != nil || kind != format.KindArray {
			out[string(k)] = bytes.Clone(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
