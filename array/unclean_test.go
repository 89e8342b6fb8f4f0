package array

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism/hashing"
	"github.com/kvarray/kvarray/mechanism/replication"
)

// TestUncleanShutdown: an array that its process never closed (a crash:
// the devices outlive the array, as their files outlive a killed
// process) opens as Unclean, and stays so across clean closes until a
// scrub with repair completes; a clean close then opens clean. A device
// that was down at the clean close, and so keeps an older open's header,
// does not make the next open unclean.
func TestUncleanShutdown(t *testing.T) {
	dir := t.TempDir()
	var down atomic.Int64
	down.Store(-1)
	open := func(create bool) (*Array, []device.Device) {
		t.Helper()
		return openPebble(t, dir, 4, create, func(i int) faultdev.Injector {
			return faultdev.InjectorFunc(func(faultdev.Op) error {
				if down.Load() == int64(i) {
					return faultdev.ErrInjected
				}
				return nil
			})
		})
	}
	expect := func(a *Array, want bool, when string) {
		t.Helper()
		st, err := a.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if a.Unclean() != want || st.Unclean != want {
			t.Fatalf("%s: Unclean() %v, Status().Unclean %v, want %v", when, a.Unclean(), st.Unclean, want)
		}
	}
	closeArray := func(a *Array) {
		t.Helper()
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}

	a, _ := open(true)
	expect(a, false, "created")
	if err := a.Store(ctx, []byte("key"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	closeArray(a)
	a, devs := open(false)
	expect(a, false, "after a clean close")
	if err := a.Store(ctx, []byte("key"), []byte("v2")); err != nil {
		t.Fatal(err)
	}
	// The crash: the process's array never closes; its devices' files
	// stay as they were.
	a.haltOnce.Do(a.halt)
	for _, d := range devs {
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	a, _ = open(false)
	expect(a, true, "after a crash")
	closeArray(a)
	a, _ = open(false)
	expect(a, true, "after a crash and a clean close, with no scrub")
	if _, err := a.Scrub(ctx, false); err != nil {
		t.Fatal(err)
	}
	expect(a, true, "after a scrub without repair")
	if _, err := a.Scrub(ctx, true); err != nil {
		t.Fatal(err)
	}
	expect(a, false, "after a scrub with repair")
	closeArray(a)
	a, _ = open(false)
	expect(a, false, "after the scrub and a clean close")

	// Device 2 misses the clean close (it fails first), keeping the
	// header of this open, flag and all.
	down.Store(2)
	if _, err := a.Retrieve(ctx, []byte("key")); err != nil {
		t.Fatal(err)
	}
	if err := a.Store(ctx, []byte("key"), []byte("v3")); err != nil {
		t.Fatal(err)
	}
	closeArray(a)
	down.Store(-1)
	a, _ = open(false)
	expect(a, false, "with a device back that was down at the clean close")
	if got, err := a.Retrieve(ctx, []byte("key")); err != nil || string(got) != "v3" {
		t.Fatalf("key: %q, %v", got, err)
	}
	closeArray(a)
}

// TestHashingUpdateAfterACutShortMove: a store that moves a value from
// Replication to Hashing writes the Hashing piece on the primary, then
// deletes the copies past it; a crash between the two leaves the older
// copies (here put back after the store, as the crash would have left
// them: no device saw a delete fail). After the restart, before any
// scrub, the key is written again with Hashing and acknowledged; then its
// primary, the one device a Hashing value lives on, is lost. Invariant:
// the key's read fails (the value had no redundancy to lose), never
// returns the older copies' value over the acknowledged write.
func TestHashingUpdateAfterACutShortMove(t *testing.T) {
	r := newRig(t, 6, WithMechanisms(replication.New(3), hashing.New()), WithDefault("replication"))
	rng := newRand(t)
	key := "moved"
	old := randBytes(rng, 700)
	r.mustStore(key, old)
	p := r.a.primary([]byte(key), 0)
	copies := map[int][]byte{}
	for _, d := range r.holders(key, 0) {
		if d != p {
			b, err := r.raw(d, key, 0)
			if err != nil {
				t.Fatal(err)
			}
			copies[d] = b
		}
	}
	r.mustStore(key, randBytes(rng, 700), Using("hashing"))
	for d, b := range copies {
		if err := r.mems[d].Store(ctx, format.Key([]byte(key), 0, format.KindData), b); err != nil {
			t.Fatal(err)
		}
	}
	r.reopen() // the crash
	newer := randBytes(rng, 700)
	r.mustStore(key, newer, Using("hashing"))
	r.reopen() // reads locate the key afresh, as after a restart
	r.mems[p].Fail()
	got, err := r.a.Retrieve(ctx, []byte(key))
	switch {
	case err == nil && bytes.Equal(got, old):
		t.Fatalf("with its Hashing primary lost, %s read as the Replication write the acknowledged one replaced", key)
	case err == nil:
		t.Fatalf("with its Hashing primary lost, %s read %d bytes", key, len(got))
	}
	r.mems[p].Recover()
	if errs := r.heal(); errs[p] != nil {
		t.Fatalf("resync of device %d: %v", p, errs[p])
	}
	r.mustRead(key, newer)
	if h := r.holders(key, 0); len(h) != 1 {
		t.Fatalf("%s, a Hashing value, has pieces on devices %v", key, h)
	}
}

// TestFailedWritesSettleFirst: a key whose write failed is settled before
// its next write, then no more; past maxUnsettled such keys every key is,
// until a scrub --repair has run.
func TestFailedWritesSettleFirst(t *testing.T) {
	r := newRig(t, 6, allMechanisms())
	if r.a.mustSettle([]byte("k")) {
		t.Fatal("a key of a clean array with no failed write must be settled")
	}
	r.a.unsettle([]byte("k"))
	if !r.a.mustSettle([]byte("k")) || r.a.mustSettle([]byte("other")) {
		t.Fatal("only the key whose write failed must be settled")
	}
	r.mustStore("k", []byte("v"))
	if r.a.mustSettle([]byte("k")) {
		t.Fatal("a settled key must be settled again")
	}
	for i := range maxUnsettled + 1 {
		r.a.unsettle([]byte{byte(i), byte(i >> 8), byte(i >> 16)})
	}
	if !r.a.mustSettle([]byte("other")) {
		t.Fatal("past maxUnsettled failed keys, a key is not settled")
	}
	if _, err := r.a.Scrub(ctx, true); err != nil {
		t.Fatal(err)
	}
	if r.a.mustSettle([]byte("other")) {
		t.Fatal("after a scrub --repair, every key is still settled")
	}
}
