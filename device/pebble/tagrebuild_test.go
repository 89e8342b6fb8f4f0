package pebble_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/pebble"
	"github.com/kvarray/kvarray/format"
)

// blobReads counts the reads of blob files (separated values) through
// the file system under it.
type blobReads struct {
	vfs.FS
	n *atomic.Int64
}

func (fs blobReads) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	if err != nil || !strings.HasSuffix(name, ".blob") {
		return f, err
	}
	return blobFile{File: f, n: fs.n}, nil
}

type blobFile struct {
	vfs.File
	n *atomic.Int64
}

func (f blobFile) ReadAt(p []byte, off int64) (int, error) {
	f.n.Add(1)
	return f.File.ReadAt(p, off)
}

// TestRebuildReadsTaggedPieces: with the pieces tagged by their mechanism
// (pebble.WithTagger(format.Tag)), a rebuild's scan reads a key's value
// only where its tag shows a piece to restore on the lost device: 4 KiB
// values with 3 copies on 6 devices have one on it for half the keys.
// Invariants: the rebuilt device holds exactly the pieces it held before
// it was lost, byte for byte, keys whose mechanism changed (a Splitting
// value overwritten by Replication's, and back; Replication's by
// Packing's) included; every value
// reads back; and the tagged rebuild reads fewer blob values than the same
// rebuild untagged, which reads one per key.
func TestRebuildReadsTaggedPieces(t *testing.T) {
	tagged := rebuildBlobReads(t, true)
	untagged := rebuildBlobReads(t, false)
	t.Logf("blob reads: tagged %d, untagged %d", tagged, untagged)
	if tagged*4 > untagged*3 {
		t.Fatalf("tagged rebuild read %d blob values, untagged %d: the tags spared under a quarter", tagged, untagged)
	}
}

// rebuildBlobReads fills an array, loses device 2, rebuilds it, checks
// the invariants of TestRebuildReadsTaggedPieces and returns how many
// blob reads the rebuild did.
func rebuildBlobReads(t *testing.T, tagged bool) int64 {
	ctx := context.Background()
	var reads atomic.Int64
	fs := blobReads{FS: vfs.NewMem(), n: &reads}
	root := t.TempDir()
	open := func(name string) *pebble.Device {
		opts := []pebble.Option{pebble.WithCreate(true), pebble.WithFS(fs), pebble.WithLimits(limits)}
		if tagged {
			opts = append(opts, pebble.WithTagger(func(v []byte) device.Tag { return device.Tag(format.Tag(v)) }))
		}
		d, err := pebble.Open(filepath.Join(root, name), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	devs := make([]device.Device, nDevs)
	for i := range devs {
		devs[i] = open(fmt.Sprintf("dev%d", i))
	}
	a, err := array.Create(ctx, devs, arrayOpts...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close() }()
	vals := map[string][]byte{}
	store := func(k string, v []byte) {
		if err := a.Store(ctx, []byte(k), v); err != nil {
			t.Fatal(err)
		}
		vals[k] = v
	}
	for i := range 1500 {
		store(fmt.Sprintf("key-%05d", i), bytes.Repeat([]byte{byte(i), byte(i >> 8), 'r'}, 600)) // Replication
	}
	for i := range 100 {
		store(fmt.Sprintf("key-%05d", i), bytes.Repeat([]byte{byte(i), 's'}, 20<<10)) // Splitting
	}
	for i := range 50 {
		store(fmt.Sprintf("key-%05d", i), bytes.Repeat([]byte{byte(i), 'R'}, 900)) // Replication again
	}
	for i := 1000; i < 1200; i++ {
		store(fmt.Sprintf("key-%05d", i), bytes.Repeat([]byte{byte(i), byte(i >> 8), 'p', 'k'}, 1024)) // Packing
	}
	for _, d := range devs {
		if err := d.(*pebble.Device).Flush(); err != nil {
			t.Fatal(err)
		}
	}
	before := pieces(t, devs[2])
	fresh := open("dev2-new")
	if err := a.ReplaceDevice(ctx, 2, fresh); err != nil {
		t.Fatal(err)
	}
	reads.Store(0)
	rep, err := a.Rebuild(ctx, 2, array.WithWorkers(4))
	if err != nil {
		t.Fatal(err)
	}
	n := reads.Load()
	if rep.Failed != 0 {
		t.Fatalf("%d keys failed: %v", rep.Failed, rep.Errors)
	}
	checkRebuilt(t, a, before, fresh, vals)
	return n
}
