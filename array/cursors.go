package array

import (
	"context"
	"encoding/binary"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/mechanism"
)

// Kept listings. A paged listing (KeysFrom: SCAN's cursor) resumes each
// page after the last key of the page before. Opening and seeking an
// iterator on every device for every page touched every level of every
// device's LSM: at 10 M keys, most of a page's cost. So the devices'
// cursors of a listing are kept between its pages, under the key the next
// page resumes after, with the keys they read past the page's end.
//
// Invariants:
//   - A listing is used by one call at a time: take removes it from the
//     table, put returns it.
//   - A listing is reused only while every device is the device object
//     (generation) and in the state it was when the listing was opened:
//     which device answers for a key (answersFor) depends on both, and a
//     key a device passed over under the old states would be missed.
//   - Kept listings are bounded: at most maxListings, each closed once
//     idle for listingIdle or opened listingAge ago, and all at Close,
//     before the devices. A Pebble iterator holds the memtables and
//     tables of the moment it was opened: under a write load of W bytes a
//     second per device, a listing pins up to listingAge·W of memtables
//     that a flush would have freed (8 MB/s a device at 4k SET/s of 4 KiB),
//     so a long listing reopens its cursors every listingAge (a page
//     costs about 0.1 ms: one reopen a second costs nothing measurable).
const (
	maxListings = 16
	listingIdle = 2 * time.Second
	listingAge  = time.Second
)

// listing is one paged listing's open device cursors.
type listing struct {
	gens   []mechanism.Gen
	states []mechanism.State
	devs   []stream
	opened time.Time
	used   time.Time
}

// stream is one device's cursor of a listing and the entries read from
// it (those keep let through) that no page has passed yet, ascending.
type stream struct {
	dev int
	c   device.Cursor // nil: it could not be opened (err)
	buf []scanEntry
	end bool
	err error
}

// at returns the j-th entry of the stream, reading from the cursor as
// needed, or false past its end (then s.err tells whether it failed).
func (s *stream) at(ctx context.Context, j int, keep func([]byte) bool) (scanEntry, bool) {
	for len(s.buf) <= j && !s.end {
		k, ok := s.c.Next(ctx)
		if !ok {
			s.end, s.err = true, s.c.Err()
			break
		}
		if keep(k) {
			s.buf = append(s.buf, scanEntry{Key: slices.Clone(k), Val: scanned{dev: s.dev}})
		}
	}
	if j < len(s.buf) {
		return s.buf[j], true
	}
	return scanEntry{}, false
}

// listings is an Array's table of kept listings.
type listings struct {
	mu     sync.Mutex
	kept   map[string]*listing
	timer  *time.Timer // sweeps idle listings; nil when none is armed
	closed bool
	// age overrides listingAge when set (tests: a listing that must not
	// be reopened however slow the host).
	age time.Duration
}

// tooOld reports whether l was opened longer than the listing age ago.
func (t *listings) tooOld(l *listing) bool {
	age := listingAge
	if t.age > 0 {
		age = t.age
	}
	return time.Since(l.opened) > age
}

func listingKey(prefix, after []byte) string {
	k := binary.AppendUvarint(nil, uint64(len(prefix)))
	return string(append(append(k, prefix...), after...))
}

// openListing opens a listing of the keys with prefix from start on every
// device; a device whose cursor cannot be opened has the error in its
// stream.
func (a *Array) openListing(ctx context.Context, prefix, start []byte) *listing {
	n := a.env.N()
	l := &listing{gens: make([]mechanism.Gen, n), states: make([]mechanism.State, n), devs: make([]stream, n), opened: time.Now()}
	for i := range n {
		var d device.Device
		d, l.gens[i] = a.env.DeviceGen(i)
		l.states[i] = a.env.State(i)
		s := &l.devs[i]
		s.dev = i
		if l.states[i] == mechanism.Slow {
			// Not waited for: its keys are listed by the others, as a
			// failed device's.
			s.err, s.end = mechanism.ErrMarkedSlow, true
			continue
		}
		s.c, s.err = device.OpenCursor(ctx, d, prefix, start)
		s.end = s.err != nil
	}
	return l
}

// current tells whether l's devices are still the ones, in the states,
// it was opened with.
func (a *Array) current(l *listing) bool {
	for i := range l.devs {
		if _, gen := a.env.DeviceGen(i); gen != l.gens[i] || a.env.State(i) != l.states[i] {
			return false
		}
	}
	return true
}

func (l *listing) close() {
	for i := range l.devs {
		if c := l.devs[i].c; c != nil {
			_ = c.Close()
		}
	}
}

// takeListing returns the kept listing that resumes after after, removed
// from the table, or nil.
func (a *Array) takeListing(prefix, after []byte) *listing {
	t := &a.listings
	t.mu.Lock()
	k := listingKey(prefix, after)
	l := t.kept[k]
	delete(t.kept, k)
	t.mu.Unlock()
	if l == nil {
		return nil
	}
	if t.tooOld(l) || !a.current(l) {
		l.close()
		return nil
	}
	return l
}

// putListing keeps l for the page that resumes after next, closing the
// least recently used listing when the table is full.
func (a *Array) putListing(prefix, next []byte, l *listing) {
	t := &a.listings
	l.used = time.Now()
	var drop []*listing
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		l.close()
		return
	}
	if t.kept == nil {
		t.kept = make(map[string]*listing)
	}
	k := listingKey(prefix, next)
	if old := t.kept[k]; old != nil {
		drop = append(drop, old)
	}
	t.kept[k] = l
	for len(t.kept) > maxListings {
		var lru string
		for k, x := range t.kept {
			if lru == "" || x.used.Before(t.kept[lru].used) {
				lru = k
			}
		}
		drop = append(drop, t.kept[lru])
		delete(t.kept, lru)
	}
	t.arm(a.sweepListings)
	t.mu.Unlock()
	closeAll(drop)
}

// arm starts the sweep unless one is armed, nothing is kept or the table
// is closed; under t.mu.
func (t *listings) arm(sweep func()) {
	if t.timer == nil && len(t.kept) > 0 && !t.closed {
		t.timer = time.AfterFunc(listingIdle, sweep)
	}
}

func closeAll(ls []*listing) {
	for _, l := range ls {
		l.close()
	}
}

// sweepListings closes the listings idle for listingIdle or opened
// listingAge ago, and arms itself again while any is kept.
func (a *Array) sweepListings() {
	t := &a.listings
	var drop []*listing
	t.mu.Lock()
	for k, l := range t.kept {
		if time.Since(l.used) >= listingIdle || t.tooOld(l) {
			drop = append(drop, l)
			delete(t.kept, k)
		}
	}
	t.timer = nil
	t.arm(a.sweepListings)
	t.mu.Unlock()
	closeAll(drop)
}

// closeListings closes every kept listing and keeps no more: for Close,
// before the devices are closed.
func (a *Array) closeListings() {
	t := &a.listings
	t.mu.Lock()
	t.closed = true
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	kept := slices.Collect(maps.Values(t.kept))
	t.kept = nil
	t.mu.Unlock()
	closeAll(kept)
}
