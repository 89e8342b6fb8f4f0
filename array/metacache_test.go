package array

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

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
	if got := r.retrieves() - before; got != 1 {
		t.Errorf("reads of absent keys read the devices %d times, want once (the first read of a key never seen)", got)
	}
	r.mustStore("never", small)
	r.mustRead("never", small)

	// Bounded: the least recently used key goes first.
	c := newMetaCache(2)
	for i := range 3 {
		c.put(fmt.Appendf(nil, "k%d", i), nil, format.Header{})
	}
	if _, ok := c.get([]byte("k0")); ok {
		t.Error("a cache of 2 keeps 3")
	}
	if _, ok := c.get([]byte("k2")); !ok {
		t.Error("the newest key is gone")
	}
}
