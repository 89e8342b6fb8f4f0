package array

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/format"
)

// devKeys lists the internal keys device i holds, less the array's own
// (header, checkpoint, resync records): the pieces a rebuild restores.
func (r *rig) devKeys(i int) [][]byte {
	r.t.Helper()
	var out [][]byte
	err := r.mems[i].Iterate(context.Background(), nil, func(k []byte) error {
		if _, _, kind, err := format.ParseKey(k); err == nil && kind == format.KindArray {
			return nil
		}
		out = append(out, bytes.Clone(k))
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

// devOps sums every device operation (reads, existence checks, writes)
// over the rig's devices. Iterations are not counted: a rebuild's scans
// are sequential reads of the neighbours, paid once per device.
func (r *rig) devOps() int64 {
	w, rd := r.devWrites()
	return w + rd
}

// TestRebuildOpsPerPiece: a rebuild of a replaced device restores exactly
// the pieces it held (same internal keys, every value reading back), and
// costs few device operations per restored piece, on devices that hand
// out values with their keys and on devices that keep them apart and tag
// them (as Pebble does: "apart"). Invariant: every acknowledged value
// reads back unchanged after the rebuild, and the rebuilt device holds
// the same set of pieces as before it was lost.
func TestRebuildOpsPerPiece(t *testing.T) {
	configs := []struct {
		name  string
		opts  []Option
		size  int
		apart bool
		// Device operations per restored piece, at most. Replication:
		// the copy written from the copies the scan read (reading them
		// again, when the key changed meanwhile, makes 3). Splitting: the
		// shard rebuilt from the other shards the scan read, written
		// (apart: the k-1 shards the scan did not read are read).
		// Packing: the member located, its set's pieces read.
		max float64
	}{
		{"replication", []Option{everyMechanism(), WithDefault("replication")}, 1000, false, 1},
		{"hybrid-replication", hybridAll(), 1000, false, 1},
		{"splitting", []Option{everyMechanism(), WithDefault("splitting")}, 1000, false, 1},
		{"packing", []Option{everyMechanism(), WithDefault("packing")}, 1000, false, 12},
		{"hybrid-mixed", hybridAll(), 0, false, 5},
		{"replication-apart", []Option{everyMechanism(), WithDefault("replication")}, 1000, true, 1},
		{"hybrid-replication-apart", hybridAll(), 1000, true, 1},
		{"splitting-apart", []Option{everyMechanism(), WithDefault("splitting")}, 1000, true, 5},
		{"hybrid-mixed-apart", hybridAll(), 0, true, 7},
	}
	// Once per rebuild, not per piece: the checkpoint read, the header
	// write that ends the rebuild, the checkpoint's delete.
	const fixed = 8
	const n = 300
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			memOpts := []mem.Option{}
			if c.apart {
				memOpts = append(memOpts, mem.WithTagger(pieceTag))
			}
			r := newRigOf(t, 6, memOpts, func(_ int, m *mem.Device) device.Device { return m }, c.opts...)
			rng := newRand(t)
			vals := map[string][]byte{}
			for i := range n {
				size := c.size
				if size == 0 {
					size = []int{100, 9 << 10, 40 << 10}[i%3]
				}
				k := fmt.Sprintf("key-%05d", i)
				vals[k] = randBytes(rng, size)
				r.mustStore(k, vals[k])
			}
			before := r.devKeys(2)
			r.replace(2)
			r.resetStats()
			rep, err := r.a.Rebuild(context.Background(), 2)
			if err != nil {
				t.Fatal(err)
			}
			ops := r.devOps()
			w, rd := r.devWrites()
			after := r.devKeys(2)
			per := float64(ops-fixed) / float64(max(1, len(after)))
			t.Logf("%s: %d pieces restored (%d keys visited), %d device ops (%d reads, %d writes): %.2f per restored piece",
				c.name, len(after), rep.Keys, ops, rd, w, per)
			if !slices.EqualFunc(before, after, bytes.Equal) {
				t.Fatalf("device 2 held %d pieces, holds %d after the rebuild", len(before), len(after))
			}
			for k, v := range vals {
				r.mustRead(k, v)
			}
			if c.max > 0 && per > c.max {
				t.Fatalf("%.2f device operations per restored piece, want at most %.0f", per, c.max)
			}
		})
	}
}
