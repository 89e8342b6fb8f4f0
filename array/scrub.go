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

// Unlocated is the ScrubCounts row of keys whose mechanism a scrub could
// not tell: no piece of theirs has a readable header.
const Unlocated = "unlocated"

// ScrubCounts is what a scrub found for one mechanism.
type ScrubCounts struct {
	Mechanism string `json:"mechanism"`
	Keys      int64  `json:"keys"`
	// BadPieces counts pieces that were missing, corrupt or stale (copies,
	// shards, members, parities), repaired or to repair.
	BadPieces int64 `json:"bad_pieces"`
	// Unrecoverable counts keys that could not be read back.
	Unrecoverable int64 `json:"unrecoverable_keys"`
	// Waiting counts keys that could not be checked because a device
	// they need is down (failed, or being rebuilt), with nothing found
	// lost: they are checked once it is back (resync) or rebuilt (which
	// reports any key it cannot restore).
	Waiting int64 `json:"waiting_keys"`
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

// waits reports whether err, a key's repair error, says only that a
// device the key needs is down: no piece found bad beyond what its
// mechanism tolerates (ErrDataLoss).
func waits(err error) bool {
	return err != nil && !errors.Is(err, ErrDataLoss) && (errors.Is(err, device.ErrDeviceFailed) || errors.Is(err, ErrUnavailable))
}

// Waiting is the number of keys that wait for a device that is down.
func (r ScrubReport) Waiting() int64 {
	var n int64
	for _, m := range r.Mechanisms {
		n += m.Waiting
	}
	return n
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
	overflow := a.overflow.Load() // the failed writes this scrub settles
	// The keys stream from the devices' scans (in order, never all in
	// memory): first every user key held anywhere, orphans included (a
	// key whose primary does not know it is swept by Repair's not-found
	// path), then the mechanisms' own keys.
	var scanErr error
	var found, held atomic.Int64 // items and the pieces they hold
	items := func(yield func(healItem) bool) {
		for _, pieces := range []bool{true, false} {
			for it := range a.scrubKeys(ctx, pieces, &scanErr) {
				for _, devs := range it.held {
					held.Add(int64(len(devs)))
				}
				found.Add(1)
				if !yield(it) {
					return
				}
			}
		}
	}
	// The progress's total, until the scan ends: the keys on the devices
	// over the pieces a key found so far holds (keys are spread over the
	// key space whatever their mechanism, so the mix seen so far is the
	// mix to come).
	keys, _ := a.keysOnDevices(ctx, -1)
	total := func() int64 {
		f, h := found.Load(), held.Load()
		if h == 0 {
			return f
		}
		return max(f, keys*f/h)
	}

	per := map[string]*ScrubCounts{}
	for _, m := range a.mechs {
		per[m.Name()] = &ScrubCounts{Mechanism: m.Name()}
	}
	// Keys whose mechanism cannot be told (no readable header, the
	// primary down): a row of their own, so that none goes uncounted.
	per[""] = &ScrubCounts{Mechanism: Unlocated}
	var mu sync.Mutex
	var done, orphans, failed atomic.Int64 // failed: unrecoverable or waiting
	var tick func()
	if o.progress != nil {
		tick = func() {
			o.progress(Progress{Dev: -1, Keys: done.Load(), Total: total(), Failed: failed.Load(), Elapsed: time.Since(start)})
		}
	}
	stopTick := every(o.every, tick)
	runEach(ctx, items, o.workers, func(it healItem) {
		name, bad, orphan, err := a.scrubOne(ctx, it, repair)
		done.Add(1)
		orphans.Add(orphan)
		if err != nil {
			failed.Add(1)
		}
		mu.Lock()
		defer mu.Unlock()
		if name == "" && err == nil {
			return // orphans only: counted as such
		}
		if c := per[name]; c != nil {
			c.Keys++
			c.BadPieces += bad
			switch {
			case waits(err):
				c.Waiting++
			case err != nil:
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
		// writes an unclean shutdown cut short are settled (Unclean),
		// and so are those that failed before the scrub began, unless
		// more failed since.
		a.unclean.Store(false)
		a.overflow.CompareAndSwap(overflow, 0)
	}
	for _, m := range a.mechs {
		rep.Mechanisms = append(rep.Mechanisms, *per[m.Name()])
	}
	if u := per[""]; u.Keys > 0 {
		rep.Mechanisms = append(rep.Mechanisms, *u)
	}
	if o.progress != nil {
		o.progress(Progress{Dev: -1, Keys: rep.Keys, Total: rep.Keys, Failed: failed.Load(), Elapsed: rep.Elapsed, Completed: true})
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
	want := func(k []byte, _ device.Tag) device.Want {
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
			if a.env.Answering(d) {
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
		// of "a" enclose those of "a\x00\x00\x01", say): an item stays
		// open, collecting where its internal keys are, until the merge
		// is past the last internal key its user key can have.
		type openItem struct {
			it   healItem
			last []byte
		}
		var open []*openItem // in the order first seen
		byUser := map[string]*openItem{}
		// emit yields the open items the merge is past (at: its key; nil:
		// the end), in order up to the first still open, or all of them
		// when many are open (a user key whose internal keys enclose
		// many others).
		emit := func(at []byte) bool {
			keep := open[:0]
			for j, o := range open {
				past := at == nil || bytes.Compare(o.last, at) < 0
				if !past && len(open) <= 64 {
					keep = append(keep, open[j:]...)
					break
				}
				if !past {
					keep = append(keep, o)
					continue
				}
				delete(byUser, string(o.it.user))
				if !yield(o.it) {
					return false
				}
			}
			clear(open[len(keep):])
			open = keep
			return true
		}
		for m := range merge.Sorted(srcs) {
			if !pieces {
				if !yield(healItem{internal: m.Key, onlyFor: -1}) {
					return
				}
				continue
			}
			if !emit(m.Key) {
				return
			}
			user, _, _, _ := format.ParseKey(m.Key)
			o := byUser[string(user)]
			if o == nil {
				o = &openItem{it: healItem{user: user, onlyFor: -1, held: map[string][]int{}},
					last: format.Key(user, format.MaxSplits-1, 0xff)}
				byUser[string(user)] = o
				open = append(open, o)
			}
			for _, e := range m.Entries {
				o.it.held[string(m.Key)] = append(o.it.held[string(m.Key)], e.Val.dev)
			}
		}
		emit(nil)
	}
}

type heldKey struct{}

// withHeld returns a context under which a repair's sweep of orphans
// (Array.sweep) takes held, a scrub's scan of the devices, for where the
// user key's internal keys are, instead of asking each device: the scan
// listed them all on every device not failed (about 30 reads a key
// spared, most of a scrub's work). An orphan that appears after the scan
// waits for the next scrub. nil held: the devices are asked.
func withHeld(ctx context.Context, held map[string][]int) context.Context {
	if held == nil {
		return ctx
	}
	return context.WithValue(ctx, heldKey{}, held)
}

// keysOnDevices returns how many keys the devices not failed, but for
// device skip, hold as their Info reports them (an estimate on Pebble),
// and how many devices reported.
func (a *Array) keysOnDevices(ctx context.Context, skip int) (keys, devs int64) {
	for d := range a.env.N() {
		if d == skip || !a.env.Answering(d) {
			continue
		}
		if info, err := a.env.Device(d).Info(ctx); err == nil {
			keys, devs = keys+info.Keys, devs+1
		}
	}
	return keys, devs
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
	n, err := a.Repair(withHeld(rctx, it.held), it.user)
	if errors.Is(err, ErrNotFound) {
		return name, 0, count(n), nil // all it had were orphans
	}
	return name, count(n), 0, err
}
