package array

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/format"
)

// TestRebuildStaleReader: the neighbour that reads a key's piece for a
// rebuild (its primary, here) missed the key's last write, and holds the
// value before it: a Replication copy, whose three copies miss the lost
// device, where the last write, a Splitting value, has a shard on it.
// Invariant: the rebuild restores that shard (the device holds exactly
// what it held before it was lost), and every value reads back: a
// piece whose device missed a write of its key, read or only tagged, does
// not decide that the key has nothing to restore. Run with tags, and
// with values kept apart but untagged (as Pebble blobs written before
// tags: the reader reads its stale piece).
func TestRebuildStaleReader(t *testing.T) {
	for _, tagged := range []bool{true, false} {
		t.Run(fmt.Sprintf("tagged=%v", tagged), func(t *testing.T) { testRebuildStaleReader(t, tagged) })
	}
}

func testRebuildStaleReader(t *testing.T, tagged bool) {
	ctx := context.Background()
	tagger := pieceTag
	if !tagged {
		tagger = func([]byte) device.Tag { return 0 }
	}
	r := newRigOf(t, 6, []mem.Option{mem.WithTagger(tagger)}, func(_ int, m *mem.Device) device.Device { return m },
		everyMechanism(), WithDefault("replication"))
	const lost = 2
	var key string
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("key-%04d", i)
		// Its primary is not the lost device, and its copies miss it.
		if r.a.offset([]byte(k), 0, lost) >= 3 {
			key = k
		}
	}
	old := bytes.Repeat([]byte("o"), 3000)
	r.mustStore(key, old)
	primary := r.a.primary([]byte(key), 0)
	stale, err := r.mems[primary].Retrieve(ctx, format.Key([]byte(key), 0, format.KindData))
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("n"), 3000)
	r.mustStore(key, val, Using("splitting"))
	// The primary missed the Splitting write: it still holds its copy of
	// the value before, and the array has the miss on record.
	dataKey := format.Key([]byte(key), 0, format.KindData)
	if err := r.mems[primary].Store(ctx, dataKey, stale); err != nil {
		t.Fatal(err)
	}
	if err := r.a.env.MarkStale(ctx, primary, dataKey); err != nil {
		t.Fatal(err)
	}
	before := r.devKeys(lost) // not read first: a read would repair the primary
	r.replace(lost)
	if _, err := r.a.Rebuild(ctx, lost); err != nil {
		t.Fatal(err)
	}
	after := r.devKeys(lost)
	if len(after) != len(before) {
		t.Fatalf("device %d held %d pieces, holds %d after the rebuild", lost, len(before), len(after))
	}
	for i := range before {
		if !bytes.Equal(before[i], after[i]) {
			t.Fatalf("device %d held %q, holds %q after the rebuild", lost, before[i], after[i])
		}
	}
	r.mustRead(key, val)
}
