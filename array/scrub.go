package array

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
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
	// Every user key held anywhere, including orphans: a key whose primary
	// does not know it is swept by Repair's not-found path.
	var items []healItem
	seen := map[string]bool{}
	var own [][]byte
	for d := 0; d < a.env.N(); d++ {
		if a.env.State(d) == mechanism.Failed {
			continue
		}
		err := a.env.Device(d).Iterate(ctx, nil, func(k []byte) error {
			user, _, kind, err := format.ParseKey(k)
			switch {
			case err != nil || kind == format.KindArray:
			case format.HoldsPiece(kind):
				if !seen[string(user)] {
					seen[string(user)] = true
					items = append(items, healItem{user: slices.Clone(user), onlyFor: -1})
				}
			default:
				if !seen["\x00"+string(k)] {
					seen["\x00"+string(k)] = true
					own = append(own, slices.Clone(k))
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, device.ErrDeviceFailed) {
			return rep, err
		}
	}
	sort.Slice(items, func(i, j int) bool { return slices.Compare(items[i].user, items[j].user) < 0 })
	for _, k := range own {
		items = append(items, healItem{internal: k, onlyFor: -1})
	}

	per := map[string]*ScrubCounts{}
	for _, m := range a.mechs {
		per[m.Name()] = &ScrubCounts{Mechanism: m.Name()}
	}
	var mu sync.Mutex
	var done, orphans atomic.Int64
	var tick func()
	if o.progress != nil {
		tick = func() {
			o.progress(Progress{Dev: -1, Keys: done.Load(), Total: int64(len(items)), Elapsed: time.Since(start)})
		}
	}
	stopTick := every(o.every, tick)
	runPool(ctx, len(items), o.workers, func(i int) {
		name, bad, orphan, err := a.scrubOne(ctx, items[i], repair)
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
		o.progress(Progress{Dev: -1, Keys: rep.Keys, Total: int64(len(items)), Elapsed: rep.Elapsed, Completed: true})
	}
	return rep, ctx.Err()
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
