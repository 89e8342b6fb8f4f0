package array

import (
	"bytes"
	"context"
	"errors"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/internal/merge"
	"github.com/kvarray/kvarray/mechanism"
)

// ScrubCounts is what a scrub found for one mechanism.
type ScrubCounts struct {
	Mechanism string `json:"mechanism"`
	Keys      int64  `json:"keys"`
	// BadPieces counts pieces that were missing, corrupt or stale (copies,
	// shards, members, parities), repaired or to repair.
	BadPieces int64 `json:"bad_pieces"`
	// Unrecoverable counts keys that could not be read back.
	Unrecoverable int64 `json:"unrecoverable_keys"`
}

// ScrubReport is the outcome of Scrub.
type ScrubReport struct {
	Keys       int64         `json:"keys"`
	Repair     bool          `json:"repair"`
	Mechanisms []ScrubCounts `json:"mechanisms"`
	// Orphans counts pieces of keys that do not exist (left by failed
	// deletes or writes), and leftover parities of sets with no member.
	Orphans int64         `json:"orphaned_pieces"`
	Elapsed time.Duration `json:"elapsed_ns"`
	Errors  []string      `json:"errors,omitempty"`
}

// Problems is the number of things found wrong.
func (r ScrubReport) Problems() int64 {
	n := r.Orphans
	for _, m := range r.Mechanisms {
		n += m.BadPieces + m.Unrecoverable
	}
	return n
}

// Scrub reads every value and every redundant piece, verifies checksums
// and that each value is recoverable, and reports per mechanism what it
// found; with repair it rewrites what is bad and removes orphans (without,
// it changes nothing: the repairs run with their writes counted, not
// made).
func (a *Array) Scrub(ctx context.Context, repair bool, opts ...HealOption) (ScrubReport, error) {
	o := healOptions{workers: 16, every: time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	rep := ScrubReport{Repair: repair}
	start := time.Now()
	// The keys stream from the devices' scans (in order, never all in
	// memory): first every user key held anywhere, orphans included (a
	// key whose primary does not know it is swept by Repair's not-found
	// path), then the mechanisms' own keys.
	var scanErr error
	var found atomic.Int64
	items := func(yield func(healItem) bool) {
		for _, pieces := range []bool{true, false} {
			for it := range a.scrubKeys(ctx, pieces, &scanErr) {
				found.Add(1)
				if !yield(it) {
					return
				}
			}
		}
	}
	estimate := a.scrubEstimate(ctx)
	total := func() int64 { return max(estimate, found.Load()) }

	per := map[string]*ScrubCounts{}
	for _, m := range a.mechs {
		per[m.Name()] = &ScrubCounts{Mechanism: m.Name()}
	}
	var mu sync.Mutex
	var done, orphans atomic.Int64
	var tick func()
	if o.progress != nil {
		tick = func() {
			o.progress(Progress{Dev: -1, Keys: done.Load(), Total: total(), Elapsed: time.Since(start)})
		}
	}
	stopTick := every(o.every, tick)
	runEach(ctx, items, o.workers, func(it healItem) {
		name, bad, orphan, err := a.scrubOne(ctx, it, repair)
		done.Add(1)
		orphans.Add(orphan)
		mu.Lock()
		defer mu.Unlock()
		if c := per[name]; c != nil {
			c.Keys++
			c.BadPieces += bad
			if err != nil {
				c.Unrecoverable++
			}
		}
		if err != nil && len(rep.Errors) < 20 {
			rep.Errors = append(rep.Errors, err.Error())
		}
	})
	stopTick()
	if scanErr != nil {
		// Not every key was seen: the array is not known to be settled.
		rep.Keys, rep.Orphans, rep.Elapsed = done.Load(), orphans.Load(), time.Since(start)
		return rep, scanErr
	}
	if repair && ctx.Err() == nil {
		// Repairs move members out of sparse Packing sets with logged
		// leaves: fold them, so that a repaired array is also settled.
		if err := a.Settle(ctx); err != nil && len(rep.Errors) < 20 {
			rep.Errors = append(rep.Errors, err.Error())
		}
	}
	rep.Keys, rep.Orphans, rep.Elapsed = done.Load(), orphans.Load(), time.Since(start)
	if repair && ctx.Err() == nil {
		// Every key was checked and repaired where it could be: the
		// writes an unclean shutdown cut short are settled (Unclean).
		a.unclean.Store(false)
	}
	for _, m := range a.mechs {
		rep.Mechanisms = append(rep.Mechanisms, *per[m.Name()])
	}
	if o.progress != nil {
		o.progress(Progress{Dev: -1, Keys: rep.Keys, Total: rep.Keys, Elapsed: rep.Elapsed, Completed: true})
	}
	return rep, ctx.Err()
}

// scrubKeys yields, in internal key order and each once, the keys held on
// the devices not failed: with pieces, one item per user key that has a
// piece of any kind (a value's, a split's, a bank's, an orphan's);
// without, one per mechanism's own key (Packing's parities and logs). A
// device's scan error other than its failure is left in *errp once the
// iteration ends. It holds a few keys at a time, whatever the number of
// keys.
func (a *Array) scrubKeys(ctx context.Context, pieces bool, errp *error) iter.Seq[healItem] {
	want := func(k []byte) device.Want {
		_, _, kind, err := format.ParseKey(k)
		if err != nil || kind == format.KindArray || format.HoldsPiece(kind) != pieces {
			return device.Skip
		}
		return device.KeyOnly
	}
	return func(yield func(healItem) bool) {
		n := a.env.N()
		errs := make([]error, n)
		var srcs []iter.Seq[scanEntry]
		for d := range n {
			if a.env.State(d) != mechanism.Failed {
				srcs = append(srcs, a.sortedScan(ctx, d, nil, nil, false, want, &errs[d]))
			}
		}
		defer func() {
			for _, err := range errs {
				if err != nil && !errors.Is(err, device.ErrDeviceFailed) && *errp == nil {
					*errp = err
				}
			}
		}()
		// The internal keys of one user key need not be adjacent (those
		// of "a" enclose those of "a\x00\x00\x01", say): seen remembers
		// the user keys listed until the scan is past the last internal
		// key each can have.
		seen := map[string]bool{}
		for m := range merge.Sorted(srcs) {
			if !pieces {
				if !yield(healItem{internal: m.Key, onlyFor: -1}) {
					return
				}
				continue
			}
			user, _, _, _ := format.ParseKey(m.Key)
			if len(seen) >= 64 {
				for u := range seen {
					if bytes.Compare(format.Key([]byte(u), format.MaxSplits-1, 0xff), m.Key) < 0 {
						delete(seen, u)
					}
				}
			}
			if seen[string(user)] {
				continue
			}
			seen[string(user)] = true
			if !yield(healItem{user: user, onlyFor: -1}) {
				return
			}
		}
	}
}

// scrubEstimate guesses how many keys a scrub will find, for its progress
// until its scan ends: the keys on the devices, each counted on as many
// devices as the configured mechanisms' mean width.
func (a *Array) scrubEstimate(ctx context.Context) int64 {
	var keys int64
	for d := range a.env.N() {
		if a.env.State(d) == mechanism.Failed {
			continue
		}
		if info, err := a.env.Device(d).Info(ctx); err == nil {
			keys += info.Keys
		}
	}
	width := 0
	for _, m := range a.mechs {
		width += min(m.Width(), a.env.N())
	}
	return keys * int64(len(a.mechs)) / int64(max(1, width))
}

// scrubOne checks (and with repair, repairs) one item, returning its
// mechanism's name, the bad pieces found and the orphans found.
func (a *Array) scrubOne(ctx context.Context, it healItem, repair bool) (string, int64, int64, error) {
	var dr mechanism.DryRun
	rctx := ctx
	if !repair {
		rctx = mechanism.WithDryRun(ctx, &dr)
	}
	count := func(n int) int64 {
		if repair {
			return int64(n)
		}
		return int64(dr.Writes())
	}
	if it.user == nil {
		for _, m := range a.mechs {
			if kr, ok := m.(keyRepairer); ok {
				if handled, err := kr.RepairKey(rctx, it.internal); handled {
					return m.Name(), count(0), 0, err
				}
			}
		}
		return "", 0, 0, nil
	}
	name := ""
	if l, err := a.locate(ctx, a.key(it.user, 0)); err == nil {
		name = l.m.Name()
	}
	n, err := a.Repair(rctx, it.user)
	if errors.Is(err, ErrNotFound) {
		return name, 0, count(n), nil // all it had were orphans
	}
	return name, count(n), 0, err
}
