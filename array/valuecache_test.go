package array

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

	// Ranges of a kept value come from it too.
	before := r.retrieves()
	bs, total, err := r.a.RetrieveRanges(ctx, []byte("k"), Range{Off: 10, Len: 5}, Range{Off: 2999, Len: 9})
	if err != nil || total != 3000 || string(bs[0]) != "11111" || string(bs[1]) != "1" {
		t.Fatalf("ranges: %q %d %v", bs, total, err)
	}
	if n := r.retrieves() - before; n != 0 {
		t.Errorf("a range read of a kept value read the devices %d times", n)
	}

	// Larger than the largest value kept: always read.
	big := bytes.Repeat([]byte("b"), 20<<10)
	r.mustStore("big", big)
	if n := read("big", big); n == 0 {
		t.Error("a value past the largest kept was answered from the cache")
	}

	// The bound: 64 KiB hold 21 values of 3,000 bytes; the least
	// recently used go first, and their keys are still known.
	for i := range 30 {
		r.mustStore(fmt.Sprintf("v%02d", i), bytes.Repeat([]byte{byte(i)}, 3000))
	}
	if n := read("v00", bytes.Repeat([]byte{0}, 3000)); n == 0 {
		t.Error("the least recent value was kept past the bound")
	}
	if n := read("v29", bytes.Repeat([]byte{29}, 3000)); n != 0 {
		t.Errorf("the most recent value was not kept: read the devices %d times", n)
	}
	if held, max := r.a.meta.held, r.a.meta.valueBytes; held > max || held < max-3000 {
		t.Errorf("values held: %d bytes, bound %d", held, max)
	}
}

// TestValueCacheAccounting: the bytes the cache counts are those of the
// values its entries hold, through every way an entry changes or goes.
func TestValueCacheAccounting(t *testing.T) {
	c := newMetaCache(4, 10<<10, 4<<10)
	val := func(n int) []byte { return bytes.Repeat([]byte("v"), n) }
	hdr := func(n int) format.Header { return format.Header{ObjectLen: uint64(n), Version: 1} }
	check := func(what string) {
		t.Helper()
		var sum int64
		n := 0
		for e := c.lru.Front(); e != nil; e = e.Next() {
			ent := e.Value.(*metaEntry)
			sum += int64(len(ent.value))
			if ent.inVals != nil {
				n++
			}
		}
		if sum != c.held || n != c.values.Len() || c.held > c.valueBytes {
			t.Errorf("%s: entries hold %d bytes in %d values, the cache counts %d in %d (bound %d)", what, sum, n, c.held, c.values.Len(), c.valueBytes)
		}
	}
	m := newRig(t, 6, everyMechanism()).a.def // any mechanism: the cache only keeps it
	c.put([]byte("a"), m, hdr(3000), val(3000))
	c.put([]byte("b"), m, hdr(3000), val(3000))
	check("two values")
	c.put([]byte("a"), m, hdr(4000), val(4000)) // replaced
	check("replaced")
	c.put([]byte("c"), m, hdr(5000), val(5000)) // over the largest kept
	if e, _ := c.get([]byte("c")); e.value != nil {
		t.Error("a value over the largest kept was kept")
	}
	check("too large")
	c.put([]byte("d"), m, hdr(4000), val(4000)) // evicts b's value (least recent)
	check("over the bound")
	if e, ok := c.get([]byte("b")); !ok || e.value != nil {
		t.Errorf("b: known %v, value kept %v: want its entry without its value", ok, e.value != nil)
	}
	c.forget([]byte("a"))
	check("forgotten")
	c.put([]byte("e"), nil, format.Header{}, nil)
	c.put([]byte("f"), m, hdr(10), val(10)) // evicts the least recent entry
	check("entry evicted")
	c.put([]byte("d"), m, hdr(9), val(10)) // not the whole value: not kept
	if e, _ := c.get([]byte("d")); e.value != nil {
		t.Error("a value of another length than its header's was kept")
	}
	check("partial")
	c.noteHead([]byte("f"), 1, val(10))
	c.noteHead([]byte("f"), 2, val(10)) // another version: ignored
	check("noted")
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		c.forget([]byte(k))
	}
	check("all forgotten")
	if c.held != 0 {
		t.Errorf("nothing kept, %d bytes counted", c.held)
	}

	// An entry evicted takes its value along.
	c = newMetaCache(1, 10<<10, 4<<10)
	c.put([]byte("x"), m, hdr(3000), val(3000))
	c.put([]byte("y"), m, hdr(2000), val(2000))
	check("entry with a value evicted")
}
