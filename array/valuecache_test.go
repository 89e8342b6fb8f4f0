package array

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/format"
)

var errWrite = errors.New("injected write error")

// TestValueCache: with a value cache, a read of a value this array stored
// or read whole last reads no device and returns exactly that value; every
// change of the key is seen (overwrite, delete, a store that failed, a
// repair, a value too large to keep); neither the caller's buffer nor the
// returned one is the cache's.
func TestValueCache(t *testing.T) {
	ctx := context.Background()
	var failWrites atomic.Bool
	r := newFaultRig(t, func(int, *mem.Device) faultdev.Injector {
		return faultdev.InjectorFunc(func(op faultdev.Op) error {
			if failWrites.Load() && op.IsWrite() {
				return errWrite // not a failed device: nothing to resync after
			}
			return nil
		})
	}, everyMechanism(), WithMode(Hybrid), WithValueCache(64<<10, 16<<10),
		WithRules(Rule{Max: 4 << 10, RM: "replication"}, Rule{RM: "splitting"}))
	read := func(key string, want []byte) int64 {
		t.Helper()
		before := r.retrieves()
		r.mustRead(key, want)
		return r.retrieves() - before
	}

	v1 := bytes.Repeat([]byte("1"), 3000)
	in := bytes.Clone(v1)
	r.mustStore("k", in)
	in[0] = 'x' // the caller's buffer, reused after the store
	if n := read("k", v1); n != 0 {
		t.Errorf("a read of a value just stored read the devices %d times", n)
	}
	got, err := r.a.Retrieve(ctx, []byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	got[1] = 'y' // the caller's copy
	read("k", v1)

	// Overwritten, by another mechanism, and deleted.
	v2 := bytes.Repeat([]byte("2"), 9000) // splitting
	r.mustStore("k", v2)
	if n := read("k", v2); n != 0 {
		t.Errorf("a read of a value just stored read the devices %d times", n)
	}
	if err := r.a.Delete(ctx, []byte("k")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.a.Retrieve(ctx, []byte("k")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("retrieve after delete: %v, want ErrNotFound", err)
	}

	// A store that fails leaves the key to be read from the devices:
	// what they hold is the old value, or nothing.
	r.mustStore("k", v1)
	failWrites.Store(true)
	if err := r.a.Store(ctx, []byte("k"), v2); err == nil {
		t.Fatal("a store with every write failing succeeded")
	}
	failWrites.Store(false)
	if n := read("k", v1); n == 0 {
		t.Error("a read after a failed store was answered from the cache")
	}
	if n := read("k", v1); n != 0 {
		t.Errorf("a value read whole is not kept: the next read read the devices %d times", n)
	}

	// A repair may settle on another version: the key is read again.
	if _, err := r.a.Repair(ctx, []byte("k")); err != nil {
		t.Fatal(err)
	}
	if n := read("k", v1); n == 0 {
		t.Error("a read after a repair was answered from the cache")
	}

	// Ranges of a kept value come from it too (a hit); a range read of a
	// value not kept reads the devices (a miss).
	before, stats := r.retrieves(), r.a.ValueCacheStats()
	bs, total, err := r.a.RetrieveRanges(ctx, []byte("k"), Range{Off: 10, Len: 5}, Range{Off: 2999, Len: 9})
	if err != nil || total != 3000 || string(bs[0]) != "11111" || string(bs[1]) != "1" {
		t.Fatalf("ranges: %q %d %v", bs, total, err)
	}
	if n := r.retrieves() - before; n != 0 {
		t.Errorf("a range read of a kept value read the devices %d times", n)
	}
	r.mustStore("unkept", v2)
	r.a.meta.values.Del([]byte("unkept"))
	if _, err := r.a.RetrieveRange(ctx, []byte("unkept"), 100, 5); err != nil {
		t.Fatal(err)
	}
	if now := r.a.ValueCacheStats(); now.Hits != stats.Hits+1 || now.Misses != stats.Misses+1 {
		t.Errorf("a range read of a kept value and one of a value not kept: %d hits, %d misses, want 1, 1",
			now.Hits-stats.Hits, now.Misses-stats.Misses)
	}

	// Larger than the largest value kept: always read.
	big := bytes.Repeat([]byte("b"), 20<<10)
	r.mustStore("big", big)
	if n := read("big", big); n == 0 {
		t.Error("a value past the largest kept was answered from the cache")
	}

	// A value the cache dropped (it drops values as it fills) is read
	// from the devices again, and kept again.
	r.a.meta.values.Del([]byte("k"))
	if n := read("k", v1); n == 0 {
		t.Error("a value the cache dropped was read from nowhere")
	}
	if n := read("k", v1); n != 0 {
		t.Errorf("a value read again was not kept: read the devices %d times", n)
	}
	// The stamp: a value of another version in the cache (it cannot be
	// there but by a bug) is not returned.
	stale := binary.LittleEndian.AppendUint64(nil, 1)
	r.a.meta.values.Set([]byte("k"), append(stale, bytes.Repeat([]byte("0"), 3000)...))
	if n := read("k", v1); n == 0 {
		t.Error("a value of another version was returned from the cache")
	}
}

// TestValueCacheEntries: what the metadata cache's entries say of their
// values follows every way an entry changes or goes.
func TestValueCacheEntries(t *testing.T) {
	c := newMetaCache(3, 1, 4<<10) // the value cache's least
	val := func(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }
	hdr := func(n int, v uint64) format.Header { return format.Header{ObjectLen: uint64(n), Version: v} }
	m := newRig(t, 6, everyMechanism()).a.def // any mechanism: the cache only keeps it
	has := func(key string, want []byte) {
		t.Helper()
		_, got, _ := c.lookup([]byte(key), true)
		ok := got != nil
		switch {
		case want == nil && ok:
			t.Errorf("%s: the cache has a value", key)
		case want != nil && !bytes.Equal(got, want):
			t.Errorf("%s: the cache has %d bytes (kept %v), want %d", key, len(got), ok, len(want))
		}
	}
	c.put([]byte("a"), m, hdr(3000, 1), val(3000, 'a'))
	has("a", val(3000, 'a'))
	c.put([]byte("a"), m, hdr(2000, 2), val(2000, 'b')) // replaced
	has("a", val(2000, 'b'))
	c.put([]byte("a"), m, hdr(4000, 3), nil) // stored, value unknown
	has("a", nil)
	if c.values.Has([]byte("a")) {
		t.Error("a value replaced stays in the value cache")
	}
	c.noteHead([]byte("a"), 3, val(4000, 'c')) // read whole
	has("a", val(4000, 'c'))
	c.noteHead([]byte("a"), 9, val(4000, 'd')) // of another version: ignored
	has("a", val(4000, 'c'))
	c.put([]byte("big"), m, hdr(5000, 1), val(5000, 'e')) // over the largest kept
	has("big", nil)
	c.put([]byte("cut"), m, hdr(10, 1), val(9, 'f')) // not the whole value
	has("cut", nil)
	c.forget([]byte("a"))
	has("a", nil)
	if c.values.Has([]byte("a")) {
		t.Error("a key forgotten left its value in the value cache")
	}
	c.put([]byte("x"), m, hdr(100, 1), val(100, 'x'))
	for _, k := range []string{"y", "z", "w"} { // x, the least recent entry, goes
		c.put([]byte(k), nil, format.Header{}, nil)
	}
	if c.values.Has([]byte("x")) {
		t.Error("an entry evicted left its value in the value cache")
	}
	c.put([]byte("y"), m, hdr(100, 1), val(100, 'y'))
	c.close()
	has("y", nil)
}
