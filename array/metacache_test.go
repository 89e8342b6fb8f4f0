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

// retrieves counts the device reads so far.
func (r *rig) retrieves() int64 {
	var n int64
	for _, m := range r.mems {
		n += m.Stats().Retrieves
	}
	return n
}

// TestMetaCacheSparesHybridRead: a hybrid store of a key this array wrote,
// deleted or read last takes no read of the devices; a repair makes it
// read again; and a value moved between mechanisms from the cache alone
// leaves no piece of the old one behind.
func TestMetaCacheSparesHybridRead(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, 6, everyMechanism(), WithMode(Hybrid),
		WithRules(Rule{Max: 100, RM: "hashing"}, Rule{Max: 4 << 10, RM: "replication"}, Rule{RM: "splitting"}))
	small, mid, big := []byte("tiny"), bytes.Repeat([]byte("m"), 1000), bytes.Repeat([]byte("b"), 9000)

	r.mustStore("k", mid) // unknown key: one read
	before := r.retrieves()
	for _, v := range [][]byte{mid, big, small, mid, big, mid} {
		r.mustStore("k", v)
		r.mustRead("k", v)
	}
	// Each mustRead reads the value; no store read anything more.
	reads := r.retrieves() - before
	r.mustStore("k", big)
	if got := r.retrieves() - before - reads; got != 0 {
		t.Errorf("a store of a cached key read the devices %d times", got)
	}
	// Nothing of the mechanisms the key went through is left but its
	// splitting shards on the six devices.
	for i := range r.mems {
		for _, kind := range []format.Kind{format.KindData, format.KindBank} {
			b, err := r.mems[i].Retrieve(ctx, format.Key([]byte("k"), 0, kind))
			if err != nil {
				continue
			}
			format.Unkey(format.Key([]byte("k"), 0, kind), b, 0)
			v, err := format.Decode(b)
			if err != nil || v.RM != format.RMSplitting {
				t.Errorf("device %d kind %d holds a piece of another mechanism: %v %v", i, kind, v.RM, err)
			}
		}
	}
	if err := r.a.Delete(ctx, []byte("k")); err != nil {
		t.Fatal(err)
	}
	before = r.retrieves()
	r.mustStore("k", mid) // deleted: known absent
	if got := r.retrieves() - before; got != 0 {
		t.Errorf("a store after a delete read the devices %d times", got)
	}
	if _, err := r.a.Repair(ctx, []byte("k")); err != nil {
		t.Fatal(err)
	}
	before = r.retrieves()
	r.mustStore("k", small)
	if got := r.retrieves() - before; got == 0 {
		t.Error("a store after a repair did not read what it replaces")
	}
	r.mustRead("k", small)
	if n := r.holders("k", 0); len(n) != 1 {
		t.Errorf("hashing value held by devices %v", n)
	}

	// A read of a key known to have no value reads nothing: after a
	// delete, and after a first read that found none.
	if err := r.a.Delete(ctx, []byte("k")); err != nil {
		t.Fatal(err)
	}
	before = r.retrieves()
	for _, k := range []string{"k", "never", "never"} {
		if _, err := r.a.Retrieve(ctx, []byte(k)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("retrieve %q: %v, want ErrNotFound", k, err)
		}
		if _, _, err := r.a.RetrieveRanges(ctx, []byte(k), Range{Len: 9}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("retrieve ranges of %q: %v, want ErrNotFound", k, err)
		}
	}
	// The array was empty when created: the cache knows every key that
	// has a value (TestCompleteMetaCache), so a key never seen has none.
	if got := r.retrieves() - before; got != 0 {
		t.Errorf("reads of absent keys read the devices %d times, want none", got)
	}
	r.mustStore("never", small)
	r.mustRead("never", small)
	r.reopen() // devices that hold values: a key never seen is read once
	before = r.retrieves()
	for range 2 {
		if _, err := r.a.Retrieve(ctx, []byte("unseen")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("retrieve unseen: %v, want ErrNotFound", err)
		}
	}
	if got := r.retrieves() - before; got == 0 || got > 3 {
		t.Errorf("two reads of a key never seen after a reopen read the devices %d times, want the first alone", got)
	}

	// Bounded: the least recently used key goes first.
	c := newMetaCache(2, 0, 0)
	for i := range 3 {
		c.put(fmt.Appendf(nil, "k%d", i), nil, format.Header{}, nil)
	}
	if _, ok := c.get([]byte("k0")); ok {
		t.Error("a cache of 2 keeps 3")
	}
	if _, ok := c.get([]byte("k2")); !ok {
		t.Error("the newest key is gone")
	}
}

// TestCompleteMetaCache: on an array created on empty devices, a key the
// metadata cache never saw has no value, so neither its stores nor its
// reads read the devices; a read of a value's first bytes (the keyspace's
// header, read by every SET) is answered from the head the cache kept of
// the value stored; a store that fails leaves its key to be read; and the
// first eviction, or an open of devices that hold values, ends it all.
func TestCompleteMetaCache(t *testing.T) {
	small, mid, big := []byte("tiny"), bytes.Repeat([]byte("m"), 1000), bytes.Repeat([]byte("b"), 9000)
	mid[3], big[5] = 'x', 'y' // heads that differ from the rest
	var failing atomic.Bool
	r := newFaultRig(t, func(int, *mem.Device) faultdev.Injector {
		return faultdev.InjectorFunc(func(op faultdev.Op) error {
			if failing.Load() && !op.IsRead() {
				return faultdev.ErrInjected
			}
			return nil
		})
	}, everyMechanism(), WithMode(Hybrid), WithMetaCache(8),
		WithRules(Rule{Max: 100, RM: "hashing"}, Rule{Max: 2000, RM: "packing"}, Rule{Max: 4 << 10, RM: "replication"}, Rule{RM: "splitting"}))
	reads := func(fn func()) int64 {
		before := r.retrieves()
		fn()
		return r.retrieves() - before
	}
	// rangeIs checks the range rg of key's value against v (nil: absent).
	rangeIs := func(key string, rg Range, v []byte) {
		t.Helper()
		got, total, err := r.a.RetrieveRanges(ctx, []byte(key), rg)
		if v == nil {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("range %v of %q: %v, want ErrNotFound", rg, key, err)
			}
			return
		}
		lo := min(rg.Off, int64(len(v)))
		want := v[lo:min(lo+rg.Len, int64(len(v)))]
		if err != nil || total != int64(len(v)) || !bytes.Equal(got[0], want) {
			t.Fatalf("range %v of %q: %q of %d bytes, %v; want %q of %d", rg, key, got, total, err, want, len(v))
		}
	}
	values := [][]byte{small, mid, big, mid[:900], small[:2]}
	for i, v := range values {
		key := fmt.Sprintf("k%d", i)
		if n := reads(func() {
			if _, err := r.a.Retrieve(ctx, []byte(key)); !errors.Is(err, ErrNotFound) {
				t.Fatalf("retrieve %q: %v, want ErrNotFound", key, err)
			}
			rangeIs(key, Range{Len: 9}, nil)
			r.mustStore(key, v)
			rangeIs(key, Range{Len: 9}, v)
			rangeIs(key, Range{Off: 2, Len: 14}, v)
		}); n != 0 {
			t.Errorf("%q: reads of a new key, its store and reads of its head read the devices %d times", key, n)
		}
	}
	// The head follows every change: an overwrite by another mechanism,
	// a delete, a store after it.
	if n := reads(func() {
		r.mustStore("k0", big)
		rangeIs("k0", Range{Len: 9}, big)
		r.mustStore("k2", small)
		rangeIs("k2", Range{Len: 9}, small)
	}); n != 0 {
		t.Errorf("overwrites and reads of heads read the devices %d times", n)
	}
	if err := r.a.Delete(ctx, []byte("k1")); err != nil { // Packing reads the member it removes
		t.Fatal(err)
	}
	// A delete of a value of another mechanism, or of a key with none,
	// takes its header from the cache.
	if n := reads(func() {
		if err := r.a.Delete(ctx, []byte("k0")); err != nil {
			t.Fatal(err)
		}
		if err := r.a.Delete(ctx, []byte("nothing")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("delete of a key never stored: %v, want ErrNotFound", err)
		}
		for i := range r.mems {
			for _, kind := range []format.Kind{format.KindData, format.KindBank} {
				if ok, _ := r.mems[i].Exist(ctx, format.Key([]byte("k0"), 0, kind)); ok {
					t.Errorf("device %d still holds a piece (kind %d) of a deleted value", i, kind)
				}
			}
		}
		rangeIs("k0", Range{Len: 9}, nil)
		r.mustStore("k0", big)
	}); n != 0 {
		t.Errorf("deletes of cached keys read the devices %d times", n)
	}
	for i := range r.mems {
		if ok, _ := r.mems[i].Exist(ctx, format.Key([]byte("nothing"), 0, format.KindData)); ok {
			t.Errorf("device %d holds a piece of a key never stored", i)
		}
	}
	if n := reads(func() {
		rangeIs("k1", Range{Len: 9}, nil)
		r.mustStore("k1", mid[:500])
		rangeIs("k1", Range{Len: 9}, mid[:500])
	}); n != 0 {
		t.Errorf("a store after a delete and reads of heads read the devices %d times", n)
	}
	// Past the head: read from the devices.
	if n := reads(func() { rangeIs("k0", Range{Off: 10, Len: 20}, big) }); n == 0 {
		t.Error("a range past the cached head read no device")
	}
	// A store of a new key that fails leaves it unknown: read, not absent.
	failing.Store(true)
	if err := r.a.Store(ctx, []byte("failed"), mid); err == nil {
		t.Fatal("a store with every write failing succeeded")
	}
	failing.Store(false)
	if e, ok := r.a.meta.get([]byte("failed")); ok {
		t.Errorf("the cache takes a key whose store failed for known (value by %v)", e.m)
	}
	r.heal()
	if n := reads(func() { _, _ = r.a.Retrieve(ctx, []byte("failed")) }); n == 0 {
		t.Error("a read of a key whose store failed read no device")
	}

	// Past the bound (8 keys): an entry evicted, a key never seen is read.
	for i := range 8 {
		r.mustStore(fmt.Sprintf("more%d", i), small)
	}
	if n := reads(func() { rangeIs("never", Range{Len: 9}, nil) }); n == 0 {
		t.Error("after an eviction a read of a key never seen read no device")
	}
	// Every value is still what was stored.
	for key, v := range map[string][]byte{"k0": big, "k1": mid[:500], "k2": small, "k3": mid[:900], "k4": small[:2], "more7": small} {
		r.mustRead(key, v)
		rangeIs(key, Range{Len: 9}, v)
	}

	// An array opened on devices that hold values knows nothing yet.
	r2 := newRig(t, 6, everyMechanism(), WithMode(Hybrid))
	r2.mustStore("a", mid)
	r2.reopen()
	before := r2.retrieves()
	if _, err := r2.a.Retrieve(ctx, []byte("b")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("retrieve b: %v", err)
	}
	if r2.retrieves() == before {
		t.Error("an array reopened on devices holding a value took a key never seen for absent without reading")
	}
}
