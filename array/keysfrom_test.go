package array

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/mechanism"
)

// pages lists prefix a page of count keys at a time with KeysFrom,
// failing the test unless the pages are in strictly ascending order and
// every cursor but the last is the page's last key.
func pages(t *testing.T, a *Array, prefix []byte, count int) [][]byte {
	t.Helper()
	var all [][]byte
	var after []byte
	for calls := 0; ; calls++ {
		if calls > 100000 {
			t.Fatal("listing does not end")
		}
		keys, next, err := a.KeysFrom(ctx, prefix, after, count)
		if err != nil {
			t.Fatalf("keys from %q: %v", after, err)
		}
		if len(keys) > count {
			t.Fatalf("page of %d keys, asked for %d", len(keys), count)
		}
		for _, k := range keys {
			if len(all) > 0 && bytes.Compare(all[len(all)-1], k) >= 0 {
				t.Fatalf("%q listed after %q", k, all[len(all)-1])
			}
			all = append(all, k)
		}
		if next == nil {
			return all
		}
		if len(keys) == 0 || !bytes.Equal(next, keys[len(keys)-1]) {
			t.Fatalf("cursor %q after a page ending %d keys in", next, len(keys))
		}
		after = next
	}
}

// sameListing fails the test unless paging through KeysFrom gives exactly
// what Keys gives, for a few page sizes and prefixes.
func sameListing(t *testing.T, a *Array, what string) {
	t.Helper()
	for _, prefix := range [][]byte{nil, []byte("b/"), []byte("zz")} {
		want, err := a.Keys(ctx, prefix)
		if err != nil {
			t.Fatalf("%s: keys %q: %v", what, prefix, err)
		}
		for _, count := range []int{1, 7, 1000} {
			got := pages(t, a, prefix, count)
			if !slices.EqualFunc(got, want, bytes.Equal) {
				t.Fatalf("%s: prefix %q, pages of %d: listed %d keys, Keys lists %d", what, prefix, count, len(got), len(want))
			}
		}
	}
}

// TestKeysFromMatchesKeys: on arrays of every mechanism, with huge values
// and keys that are prefixes of others, a listing paged with KeysFrom is
// exactly Keys, healthy, with a device failed, and with a device replaced
// and not yet rebuilt (Packing members found through their sets).
func TestKeysFromMatchesKeys(t *testing.T) {
	for _, rm := range []string{"replication", "hashing", "splitting", "packing", "hybrid"} {
		t.Run(rm, func(t *testing.T) {
			opts := []Option{everyMechanism(), WithDefault(rm)}
			if rm == "hybrid" {
				opts = hybridAll()
			}
			// 8 KiB device values make the 20 KiB values huge.
			r := newRigLimits(t, 6, device.Limits{MaxValueLen: 8 << 10}, opts...)
			rng := newRand(t)
			for i := range 120 {
				k := fmt.Sprintf("%s/%03d", []string{"a", "b", "b/x"}[i%3], i/3)
				if i%10 == 0 {
					k = k[:len(k)-1] // a prefix of other keys
				}
				r.mustStore(k, randBytes(rng, []int{10, 3000, 20000}[i%3]))
			}
			if err := r.a.Delete(ctx, []byte("a/001")); err != nil {
				t.Fatal(err)
			}
			sameListing(t, r.a, "healthy")
			if rm == "hashing" {
				return // a device gone loses its keys: nothing to list
			}
			r.mems[2].Fail()
			sameListing(t, r.a, "device 2 failed")
			r.mems[2].Recover()
			r.replace(2)
			sameListing(t, r.a, "device 2 replaced")
			if _, err := r.a.Rebuild(ctx, 2); err != nil {
				t.Fatal(err)
			}
			sameListing(t, r.a, "device 2 rebuilt")
		})
	}
}

// TestKeysFromWhileChanging: keys present for the whole listing are listed
// exactly once, while other keys are stored and deleted between pages.
func TestKeysFromWhileChanging(t *testing.T) {
	r := newRig(t, 6, hybridAll()...)
	rng := newRand(t)
	var stable []string
	for i := range 200 {
		k := fmt.Sprintf("key-%04d", 2*i)
		stable = append(stable, k)
		r.mustStore(k, randBytes(rng, 100+rng.IntN(10000)))
	}
	seen := map[string]int{}
	var after []byte
	for page := 0; ; page++ {
		keys, next, err := r.a.KeysFrom(ctx, nil, after, 9)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			seen[string(k)]++
		}
		// Churn on both sides of the cursor: odd keys come and go.
		for j := range 5 {
			k := fmt.Sprintf("key-%04d", 2*rng.IntN(200)+1)
			if j%2 == 0 {
				r.mustStore(k, randBytes(rng, 50))
			} else if err := r.a.Delete(ctx, []byte(k)); err != nil && !errors.Is(err, ErrNotFound) {
				t.Fatal(err)
			}
		}
		if next == nil {
			break
		}
		after = next
	}
	for _, k := range stable {
		if seen[k] != 1 {
			t.Fatalf("%s, present for the whole listing, listed %d times", k, seen[k])
		}
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%s listed %d times", k, n)
		}
	}
}

// TestKeysFromBadCount: a page size that is not positive is refused.
func TestKeysFromBadCount(t *testing.T) {
	r := newRig(t, 3, allMechanisms())
	for _, n := range []int{0, -1} {
		if _, _, err := r.a.KeysFrom(ctx, nil, nil, n); !errors.Is(err, ErrBadCount) {
			t.Fatalf("count %d: %v, want ErrBadCount", n, err)
		}
	}
}

// countedCursors is a mem device whose cursors are counted: opened, and
// open now.
type countedCursors struct {
	*mem.Device
	opened, open *atomic.Int64
}

func (d countedCursors) Cursor(ctx context.Context, prefix, start []byte) (device.Cursor, error) {
	c, err := device.OpenCursor(ctx, d.Device, prefix, start)
	if err != nil {
		return nil, err
	}
	d.opened.Add(1)
	d.open.Add(1)
	return countedCursor{c, d.open}, nil
}

type countedCursor struct {
	device.Cursor
	open *atomic.Int64
}

func (c countedCursor) Close() error {
	c.open.Add(-1)
	return c.Cursor.Close()
}

// TestKeysFromKeepsCursors: the pages of one listing use the device
// cursors its first page opened (cursors.go), unless a device changed
// state between pages, which reopens them and still lists every key
// present throughout exactly once; a finished listing closes its
// cursors, an idle one is swept, and Close closes what is kept.
func TestKeysFromKeepsCursors(t *testing.T) {
	var opened, open atomic.Int64
	r := newRigWrapped(t, 6, device.Limits{}, func(_ int, m *mem.Device) device.Device {
		return countedCursors{m, &opened, &open}
	}, hybridAll()...)
	r.a.listings.age = time.Hour // one listing's cursors, however slow the host
	rng := newRand(t)
	var want [][]byte
	for i := range 150 {
		k := fmt.Appendf(nil, "key-%04d", i)
		want = append(want, k)
		r.mustStore(string(k), randBytes(rng, []int{10, 3000, 20000}[i%3]))
	}
	list := func(failAt int) [][]byte {
		var all [][]byte
		var after []byte
		for page := 0; ; page++ {
			if page == failAt {
				// Failed, and known so to the array.
				r.mems[2].Fail()
				_, gen := r.a.env.DeviceGen(2)
				r.a.env.MarkFailed(2, gen)
			}
			keys, next, err := r.a.KeysFrom(ctx, nil, after, 7)
			if err != nil {
				t.Fatalf("page %d: %v", page, err)
			}
			all = append(all, keys...)
			if next == nil {
				return all
			}
			after = next
		}
	}
	if got := list(-1); !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("listed %d keys, want %d", len(got), len(want))
	}
	if n := opened.Load(); n != 6 {
		t.Fatalf("a listing of 22 pages opened %d cursors, want one per device", n)
	}
	if n := open.Load(); n != 0 {
		t.Fatalf("%d cursors left open by a finished listing", n)
	}
	opened.Store(0)
	if got := list(5); !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("device 2 failed at page 5: listed %d keys, want %d", len(got), len(want))
	}
	if n := opened.Load(); n != 6+6 {
		t.Fatalf("a device failing mid-listing: %d cursors opened, want the first page's 6 and 6 again", n)
	}
	r.mems[2].Recover()

	// One page, then left: kept until swept.
	if _, _, err := r.a.KeysFrom(ctx, nil, nil, 7); err != nil {
		t.Fatal(err)
	}
	if open.Load() == 0 {
		t.Fatal("a listing's cursors were not kept after its first page")
	}
	r.a.listings.mu.Lock()
	for _, l := range r.a.listings.kept {
		l.used = l.used.Add(-listingIdle)
	}
	r.a.listings.mu.Unlock()
	r.a.sweepListings()
	if n := open.Load(); n != 0 {
		t.Fatalf("%d cursors open after an idle listing was swept", n)
	}
	if _, _, err := r.a.KeysFrom(ctx, nil, nil, 7); err != nil {
		t.Fatal(err)
	}
	if err := r.a.Close(); err != nil {
		t.Fatal(err)
	}
	if n := open.Load(); n != 0 {
		t.Fatalf("%d cursors open after Close", n)
	}
}

// TestListingBeyondTolerance: with more devices failed than any mechanism
// tolerates, a key's pieces may all be on them, so Keys and KeysFrom fail
// with ErrUnavailable rather than answer a listing short of keys (a
// collection's elements listed so made a pop of a full sorted set answer
// empty). At the tolerance they still list every key.
func TestListingBeyondTolerance(t *testing.T) {
	r := newRig(t, 6, hybridAll()...)
	rng := newRand(t)
	var want [][]byte
	for i := range 60 {
		k := fmt.Sprintf("k%03d", i)
		r.mustStore(k, randBytes(rng, []int{10, 3000, 20000}[i%3]))
		want = append(want, []byte(k))
	}
	fail := func(d int) {
		r.mems[d].Fail()
		_, g := r.a.env.DeviceGen(d)
		r.a.env.MarkFailed(d, g)
	}
	fail(1)
	fail(4)
	if got, err := r.a.Keys(ctx, nil); err != nil || !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("two devices failed: %d keys, %v; want all %d", len(got), err, len(want))
	}
	if got := pages(t, r.a, nil, 7); !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("two devices failed: %d keys paged, want %d", len(got), len(want))
	}
	fail(5)
	if keys, err := r.a.Keys(ctx, nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("three devices failed: Keys = %d keys, %v; want ErrUnavailable", len(keys), err)
	}
	if keys, _, err := r.a.KeysFrom(ctx, nil, nil, 10); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("three devices failed: KeysFrom = %d keys, %v; want ErrUnavailable", len(keys), err)
	}
}

// TestListingWithDeviceBehind: a device that missed stores while failed
// and is found behind at the next open (its records, no resync yet) is
// listed as healthy, but lacks the split-0 pieces of the keys it missed:
// the listing takes those from its record (Array.missedListed), and
// lists every key until the resync, whatever device is each key's
// primary.
func TestListingWithDeviceBehind(t *testing.T) {
	r := newRig(t, 6, allMechanisms())
	r.mustStore("before", []byte("v"))
	for i := range 10 {
		r.mustStore(fmt.Sprintf("old%d", i), []byte("v"))
	}
	r.mems[2].Fail()
	for i := range 10 {
		if err := r.a.Delete(ctx, []byte(fmt.Sprintf("old%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	var want [][]byte
	for i := range 40 {
		k := fmt.Sprintf("k%02d", i)
		r.mustStore(k, []byte("v"))
		want = append(want, []byte(k))
	}
	want = append([][]byte{[]byte("before")}, want...)
	slices.SortFunc(want, bytes.Compare)
	r.mems[2].Recover()
	r.reopen()
	if st := r.a.DeviceState(2); st != mechanism.Healthy || r.a.env.MissedCount(2) == 0 {
		t.Fatalf("device 2 reopened %v with %d keys to resync; want healthy and behind", st, r.a.env.MissedCount(2))
	}
	for _, count := range []int{1, 7, 1000} {
		if got := pages(t, r.a, nil, count); !slices.EqualFunc(got, want, bytes.Equal) {
			t.Errorf("pages of %d with device 2 behind: %q, want %q", count, got, want)
		}
	}
	if got, err := r.a.Keys(ctx, nil); err != nil || !slices.EqualFunc(got, want, bytes.Equal) {
		t.Errorf("keys with device 2 behind: %q, %v; want %q", got, err, want)
	}
}
