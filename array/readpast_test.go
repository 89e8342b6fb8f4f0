package array

import (
	"errors"
	"fmt"
	"testing"

	"github.com/kvarray/kvarray/mechanism"
)

// TestReadPastSlowPrimary: a read of a key whose primary is slow (sent
// nothing) asks the next device first and then only the other pieces its
// mechanism needs: 2 device reads prove a key absent, 3 read a replicated
// value, where every device any mechanism could use was read before (10
// reads). Every value reads right, Splitting's and Packing's too; a key
// the next device cannot vouch for (it missed a write of it) is looked
// for on every neighbour and found.
func TestReadPastSlowPrimary(t *testing.T) {
	const slow = 0
	r := newRig(t, 6, slowMechanisms(), WithDefault("replication"))
	on := func(prefix string) string { // a key whose primary is the slow device
		for i := 0; ; i++ {
			if k := fmt.Sprintf("%s-%d", prefix, i); r.a.primary([]byte(k), 0) == slow {
				return k
			}
		}
	}
	keys := map[string][]byte{}
	for _, rm := range []string{"replication", "splitting", "packing"} {
		k := on(rm)
		keys[k] = []byte("a value of " + rm)
		r.mustStore(k, keys[k], Using(rm))
	}
	absent := on("absent")
	for k := range keys {
		r.a.meta.forget([]byte(k)) // read from the devices
	}
	r.a.meta.forget([]byte(absent))
	if !r.a.env.MarkSlow(slow) {
		t.Fatalf("device %d not marked slow", slow)
	}
	reads := func(what string, fn func()) int64 {
		t.Helper()
		r.resetStats()
		fn()
		_, n := r.devWrites()
		return n
	}
	// Packing's index of its sets is built at the first read that asks it
	// (its parities read once): not counted.
	if _, err := r.a.Retrieve(ctx, []byte(absent)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("%s: %v, want not found", absent, err)
	}
	r.a.meta.forget([]byte(absent))
	for k, v := range keys {
		n := reads(k, func() { r.mustRead(k, v) })
		if k == on("replication") && n > 3 {
			t.Errorf("%s, its primary slow: %d device reads, want at most 3", k, n)
		}
	}
	if n := reads("absent", func() {
		if _, err := r.a.Retrieve(ctx, []byte(absent)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: %v, want not found", absent, err)
		}
	}); n != 2 {
		t.Errorf("a key that does not exist, its primary slow: %d device reads, want 2", n)
	}
	// The next device missed the replicated key's last write: it cannot
	// vouch, and the value is found on the other copy.
	k := on("replication")
	v := []byte("written while the next device was down")
	next := r.a.env.At(r.a.key([]byte(k), 0), 1)
	r.mems[next].Fail()
	r.mustStore(k, v)
	r.mems[next].Recover()
	if r.a.DeviceState(next) != mechanism.Failed {
		t.Fatalf("device %d is %v after a write failed on it", next, r.a.DeviceState(next))
	}
	r.a.meta.forget([]byte(k))
	r.a.env.SetState(next, mechanism.Healthy) // back, its miss still recorded
	if !r.a.env.Missing(next, r.a.key([]byte(k), 0).Data()) {
		t.Fatalf("device %d has no record of the write it missed", next)
	}
	if r.a.DeviceState(slow) != mechanism.Slow {
		t.Fatalf("device %d is %v", slow, r.a.DeviceState(slow))
	}
	r.mustRead(k, v)
}
