package array

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/internal/merge"
	"github.com/kvarray/kvarray/mechanism"
)

// Healing a device. Two cases, as in RAID with a write-intent bitmap:
//
//   - A device that was only unreachable comes back with everything it had
//     and a resync record, kept on the other devices, of the keys whose
//     writes it missed. Resync re-admits it at once (reads of recorded keys
//     fail as stale, so it never serves an old value) and brings exactly
//     those keys up to date.
//   - A replaced device (ReplaceDevice) starts empty. Rebuild restores what
//     belongs on it by reading only the devices that can hold its keys
//     (KVMD's adjacent devices: the mechanisms' widths before and after it)
//     and repairing key by key, many keys in flight, and checkpoints its
//     progress on the device so that an interrupted rebuild resumes.

// rebuildKeyedMechanism is implemented by mechanisms with pieces the data
// keys of the neighbours do not reveal (Packing: members found through
// their set's parities, and the parities themselves).
type rebuildKeyedMechanism interface {
	RebuildKeys(ctx context.Context, dev int) ([]mechanism.Key, error)
}

// keyRepairer is implemented by mechanisms that can repair one of their
// own internal keys that is not a data key (Packing's parities).
type keyRepairer interface {
	RepairKey(ctx context.Context, internal []byte) (bool, error)
}

// Progress is reported during Rebuild and Resync.
type Progress struct {
	Dev       int
	Keys      int64 // keys done
	Total     int64 // keys to do (Rebuild: an estimate until its scan ends)
	Bytes     int64 // user bytes repaired
	Repaired  int64 // pieces rewritten or deleted
	Failed    int64 // keys that could not be repaired
	Skipped   int64 // keys done by an earlier, interrupted run
	Elapsed   time.Duration
	Completed bool
}

// HealOption configures Rebuild and Resync.
type HealOption func(*healOptions)

type healOptions struct {
	workers  int
	progress func(Progress)
	every    time.Duration
}

// WithWorkers sets how many keys are repaired at once (default 16).
func WithWorkers(n int) HealOption { return func(o *healOptions) { o.workers = max(1, n) } }

// WithProgress has fn called about every interval, and once at the end.
func WithProgress(fn func(Progress), every time.Duration) HealOption {
	return func(o *healOptions) { o.progress, o.every = fn, every }
}

// RebuildReport is the outcome of Rebuild or Resync.
type RebuildReport struct {
	Dev      int           `json:"device"`
	Name     string        `json:"name"`
	Keys     int64         `json:"keys"`
	Bytes    int64         `json:"bytes"`
	Repaired int64         `json:"pieces_repaired"`
	Failed   int64         `json:"keys_failed"`
	Skipped  int64         `json:"keys_skipped"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	Errors   []string      `json:"errors,omitempty"`
}

// KeysPerSec is the repair rate.
func (r RebuildReport) KeysPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Keys) / r.Elapsed.Seconds()
}

// ErrBadDevice: a device index outside the array.
var ErrBadDevice = errors.New("no such device")

func (a *Array) checkDev(i int) error {
	if i < 0 || i >= a.env.N() {
		return fmt.Errorf("device %d: the array has devices 0..%d: %w", i, a.env.N()-1, ErrBadDevice)
	}
	return nil
}

// ReplaceDevice puts dev (nil: keep the current device object, which was
// swapped underneath, as an emulator's Replace does) at position i as a
// new, empty member: the array header is written on it, marked as being
// rebuilt, and what the old device missed is forgotten. Run Rebuild next.
func (a *Array) ReplaceDevice(ctx context.Context, i int, dev device.Device) error {
	if err := a.checkDev(i); err != nil {
		return fmt.Errorf("replace: %w", err)
	}
	if dev != nil {
		if f, ok := device.AsFencer(dev); ok && a.own != nil {
			// Its writes are the owner's only (owner.go).
			if err := f.Fence(ctx, fenceKey, a.own.epoch, a.own.token()); err != nil {
				return fmt.Errorf("replace device %d: fence it: %w", i, err)
			}
		}
		old := a.env.Device(i)
		a.env.SetDevice(i, dev)
		_ = old.Close()
	}
	a.hdrMu.Lock()
	h := a.hdr
	a.hdrMu.Unlock()
	a.env.SetState(i, mechanism.Rebuilding)
	a.env.Forget(ctx, i)
	if err := writeHeaders(ctx, a.env, h, []int{i}); err != nil {
		return fmt.Errorf("replace device %d: %w", i, err)
	}
	a.env.SetState(i, mechanism.Rebuilding) // a failed header write marked it Failed
	a.setReason(i, nil)
	return nil
}

// AdoptDevice is ReplaceDevice(ctx, i, nil).
func (a *Array) AdoptDevice(ctx context.Context, i int) error { return a.ReplaceDevice(ctx, i, nil) }

// Resync re-admits device i, which was failed and answers again with its
// data: its header must still say it is member i of this array. It then
// repairs every key its resync record lists, the misses of operations
// still running when it re-admits the device included (it waits for them
// to record those). Must not be called holding a key's turn.
func (a *Array) Resync(ctx context.Context, i int, opts ...HealOption) (RebuildReport, error) {
	rep := RebuildReport{Dev: i}
	if err := a.checkDev(i); err != nil {
		return rep, fmt.Errorf("resync: %w", err)
	}
	rep.Name = a.env.Name(i)
	if a.env.State(i) == mechanism.Full {
		// Re-admitted only once it takes writes again: its misses go on
		// being recorded until then.
		if err := a.spaceBack(ctx, i); err != nil {
			return rep, fmt.Errorf("resync: %w", err)
		}
	}
	b, err := a.env.Device(i).Retrieve(ctx, headerKey)
	if err != nil {
		return rep, fmt.Errorf("resync device %d (%s): read its header: %w", i, rep.Name, err)
	}
	h, err := decodeHeader(b)
	if err != nil || h.id != a.hdr.id || h.pos != i {
		return rep, fmt.Errorf("resync device %d (%s): it no longer holds this array's header for position %d (replace and rebuild it): %v", i, rep.Name, i, err)
	}
	if h.flags&flagRebuilding != 0 {
		a.env.SetState(i, mechanism.Rebuilding)
		return rep, fmt.Errorf("resync device %d (%s): it was being rebuilt: run rebuild", i, rep.Name)
	}
	a.hdrMu.Lock()
	known := uint64(0)
	if a.hdr.vec != nil {
		known = a.hdr.vec[i]
	}
	a.hdrMu.Unlock()
	if h.epoch < known {
		return rep, fmt.Errorf("resync device %d (%s): it is %w (epoch %d, the array last wrote epoch %d to it): replace and rebuild it",
			i, rep.Name, ErrStaleCopy, h.epoch, known)
	}
	a.env.SetState(i, mechanism.Healthy)
	a.setReason(i, nil)
	// Array-wide flags it missed while failed (mixed use), and the epoch.
	a.hdrMu.Lock()
	_ = writeHeaders(ctx, a.env, a.hdr, []int{i})
	a.hdrMu.Unlock()
	if err := a.env.CatchUpRecords(ctx, i); err != nil {
		return rep, fmt.Errorf("resync device %d (%s): delete the records it holds that were cleared: %w", i, rep.Name, err)
	}
	// Operations that found the device Failed and are still running
	// record their misses before they end: wait for them, or the keys
	// they missed would be left stale behind a device called in sync.
	a.env.Quiesce()
	keys := a.env.Missed(i)
	work := make([]healItem, 0, len(keys))
	for _, k := range keys {
		work = append(work, healItem{internal: k, onlyFor: -1})
	}
	return a.heal(ctx, i, healSlice(work), int64(len(work)), nil, opts)
}

// healItem is one key to repair: a user key, or an internal key that only
// its mechanism understands.
type healItem struct {
	user     []byte
	internal []byte
	// onlyFor, when ≥ 0 (Rebuild), lets a key whose pieces cannot be on
	// that device be skipped after one read of its header.
	onlyFor int
	// Of a piece a rebuild's scan found (see scanItems): its split
	// number, the header of its newest copy on the neighbours (nil when
	// a neighbour could not hand out values), and its internal key, the
	// scan position that the checkpoint records once it is done.
	split int
	hdr   *format.Header
	at    []byte
	scan  *scanRead // nil: restore by repair
	// held: of a scrub's item, the devices its scan found holding each
	// internal key of the user key (see scrubKeys and withHeld).
	held map[string][]int
}

// errNotScanned is the error of a piece a rebuild's scan found absent.
var errNotScanned = fmt.Errorf("%w: absent from the rebuild's scan", device.ErrNotFound)

// scanRead is what a rebuild's scan read of a key on the other devices:
// its pieces there, valid for the restore unless the key was written to
// the device being rebuilt after generation gen of watch.
// read returns the one piece the scan read with its value, or nil.
func (r *scanRead) read() *mechanism.Piece {
	var got *mechanism.Piece
	for i := range r.pieces {
		if r.pieces[i].OK() {
			if got != nil {
				return nil
			}
			got = &r.pieces[i]
		}
	}
	return got
}

type scanRead struct {
	pieces []mechanism.Piece
	// unread: devices that hold a piece of the key whose value the scan
	// did not read (one neighbour reads it: see scanItems).
	unread []mechanism.Piece
	// absent, when set, adds to pieces the devices the scan found to
	// hold none (see scanItems): only a repair from the pieces read
	// needs them, so they are made for it alone (a rebuild of 100k
	// Replication copies allocated 380 MB making them for every key).
	absent func(pieces, unread []mechanism.Piece) []mechanism.Piece
	watch  *mechanism.Watch
	gen    uint64
}

// have is every piece the scan learned of: read, or known absent.
func (r *scanRead) have() []mechanism.Piece {
	if r.absent == nil {
		return r.pieces
	}
	return r.absent(slices.Clip(r.pieces), r.unread)
}

// repairerWith is implemented by mechanisms whose repair can reuse pieces
// already read (Replication, Hashing, Splitting): given every piece but
// the rebuilt device's, it reads nothing and writes that one.
type repairerWith interface {
	RepairWith(ctx context.Context, k mechanism.Key, hint *format.Header, have []mechanism.Piece) (int, error)
}

// restorerFrom is implemented by mechanisms that keep the same bytes on
// every device of a value's span (Replication, Hashing): one piece read
// from a neighbour restores the rebuilt device's, with one write.
type restorerFrom interface {
	RestoreFrom(ctx context.Context, k mechanism.Key, dev int, from mechanism.Piece) (int, error)
}

// Rebuild restores everything that belongs on device i, which must be
// Rebuilding (see ReplaceDevice), and marks it healthy when every key was
// repaired. It is restartable: keys done by an interrupted run, recorded
// on the device, are skipped.
//
// The neighbours that can share a key with i are scanned together, in
// key order (an ordered merge, holding one entry per neighbour, each
// neighbour's scan reading ahead on its own goroutine), so the keys
// stream through the repair without being collected. Where a neighbour
// hands out values (device.Scanner), one of them reads each key's value
// (see scanItems): its header tells the mechanism, and a key whose
// mechanism keeps nothing on i costs nothing more. A key that has a
// piece on i is restored once: from the piece the scan read when its
// mechanism keeps the same bytes on every device (RestoreFrom: one
// write, no read), or by its mechanism's repair from the pieces the scan
// read (RepairWith: the others are read), when no write of the key
// reached i since the scan began (mechanism.Watch); otherwise from the
// other devices, read again, never from i (mechanism.WithRestoring).
// Writes to i are deferred where i can defer them (i gathers them: a
// Pebble device bulk loads them; elsewhere they share batches), and
// synced before each checkpoint and before i is marked healthy (see
// saveCheckpoint). Orphans (pieces of deleted values, leftover splits)
// are not looked for: that is Scrub's job. Then come the keys the mechanisms know of by other
// means (Packing's members of sets with a piece on i), and the keys i
// missed while it was failed.
func (a *Array) Rebuild(ctx context.Context, i int, opts ...HealOption) (RebuildReport, error) {
	rep := RebuildReport{Dev: i}
	if err := a.checkDev(i); err != nil {
		return rep, fmt.Errorf("rebuild: %w", err)
	}
	rep.Name = a.env.Name(i)
	if a.env.State(i) != mechanism.Rebuilding {
		return rep, fmt.Errorf("rebuild device %d (%s): it is %v, not being rebuilt (replace it first)", i, rep.Name, a.env.State(i))
	}
	// A device that was being rebuilt when it failed comes back with the
	// record copies it held then: those whose deletion it missed must go
	// before they are read as records again (at the next open).
	if err := a.env.CatchUpRecords(ctx, i); err != nil {
		return rep, fmt.Errorf("rebuild device %d (%s): delete the records it holds that were cleared: %w", i, rep.Name, err)
	}
	// Deferred work is done first (Packing's delta log folded into its
	// parities, emptied sets deleted): a rebuild then restores parities,
	// not what a log would have changed, and no set it cannot list (an
	// empty one) is left with a parity missing. What fails to settle (a
	// set short of a device) is left to the log and repaired as usual.
	_ = a.Settle(ctx)
	done, skipped := a.checkpoint(ctx, i)
	// Writes to i from here on are tracked: a key written since the scan
	// began is restored from what the devices hold then, not from what
	// the scan read.
	watch := a.env.WatchWrites(i)
	defer a.env.Unwatch(watch)
	gen := watch.Gen()
	source := func(emit func(healItem) bool) error {
		if err := a.scanItems(ctx, i, done, watch, gen, emit); err != nil {
			return err
		}
		for _, m := range a.mechs {
			if rk, ok := m.(rebuildKeyedMechanism); ok {
				more, err := rk.RebuildKeys(ctx, i)
				if err != nil {
					return err
				}
				for _, k := range more {
					if !emit(healItem{user: k.User, onlyFor: i}) {
						return nil
					}
				}
			}
		}
		// Keys it missed while it was failed, before it was replaced by
		// itself (its header says rebuilding).
		for _, k := range a.env.Missed(i) {
			if !emit(healItem{internal: k, onlyFor: -1}) {
				return nil
			}
		}
		return nil
	}
	// One restoring context for the whole rebuild: its repairs do not
	// read device i, and their writes to it share batches.
	rctx := mechanism.WithRestoring(ctx, i)
	rep, err := a.heal(rctx, i, source, a.rebuildEstimate(ctx, i)-skipped, func(at []byte, count int64) { a.saveCheckpoint(ctx, i, at, skipped+count) }, opts)
	rep.Skipped = skipped
	if err != nil {
		return rep, err
	}
	// Misses recorded while the rebuild ran, after it listed the device's
	// records (a write or a replay that found i's piece not yet restored),
	// are caught up now, as Resync would: the device is not left behind.
	if keys := a.env.Missed(i); len(keys) > 0 {
		work := make([]healItem, 0, len(keys))
		for _, k := range keys {
			work = append(work, healItem{internal: k, onlyFor: -1})
		}
		more, err := a.heal(ctx, i, healSlice(work), int64(len(work)), nil, opts)
		rep.Keys, rep.Bytes, rep.Repaired, rep.Failed = rep.Keys+more.Keys, rep.Bytes+more.Bytes, rep.Repaired+more.Repaired, rep.Failed+more.Failed
		rep.Errors, rep.Elapsed = append(rep.Errors, more.Errors...), rep.Elapsed+more.Elapsed
		return rep, err
	}
	return rep, nil
}

// rebuildEstimate is how many keys a rebuild of device i will repair, for
// its progress until its scan ends: as many as the other devices hold on
// average (pieces, not keys, but each restored piece is one key's).
func (a *Array) rebuildEstimate(ctx context.Context, i int) int64 {
	sum, n := a.keysOnDevices(ctx, i)
	if n == 0 {
		return 0
	}
	return sum / n
}

// scanItems emits, in internal key order from just after done, one item
// per data key that may have a piece on device i: the keys on the devices
// that can share a split with i (see sharesSplits) whose placement span
// can cover i, merged across those devices. With a header (the value read
// by the key's designated neighbour, a device.Scanner), a key is emitted
// only when its own mechanism puts a piece on i, and a huge value once,
// for its first split that does.
func (a *Array) scanItems(ctx context.Context, i int, done []byte, watch *mechanism.Watch, gen uint64, emit func(healItem) bool) error {
	n := a.env.N()
	w := min(a.maxWidth, n)
	var start []byte
	if done != nil {
		start = append(slices.Clone(done), 0) // the least key after done
	}
	errs := make([]error, n) // under errMu
	var errMu sync.Mutex
	failed := func(d int) bool {
		errMu.Lock()
		defer errMu.Unlock()
		return errs[d] != nil
	}
	var scanned []int
	reader := make([]bool, n) // may read values for the others
	for d := 0; d < n; d++ {
		if d == i || !a.sharesSplits(d, i, w) || a.env.State(d) == mechanism.Failed {
			continue
		}
		scanned = append(scanned, d)
		reader[d] = a.env.State(d) == mechanism.Healthy
	}
	// Of a key near i (its placement span can cover i), one neighbour
	// reads the value: the healthy scanned device first in the key's
	// placement order (its primary, unless that is i). The others only
	// say that they hold it (their values cost a read each, and the
	// header of one piece tells its value's mechanism and version; see
	// restoreScanned).
	place := a.env.Placement()
	readerOf := func(key mechanism.Key) int {
		for j := range n {
			if at := place.At(key, j); reader[at] {
				return at
			}
		}
		return -1
	}
	// notOn reports whether a piece of split key whose tag names its
	// mechanism (format.Tag) says that the split has no piece on i: that
	// mechanism's span of the split does not reach i (see onDevice).
	notOn := func(key mechanism.Key, tag device.Tag) bool {
		rm, ok := format.TagRM(uint8(tag))
		m, known := a.byRM[rm]
		return ok && known && place.Offset(key, i) >= m.Width()
	}
	want := func(d int) func([]byte, device.Tag) device.Want {
		return func(k []byte, tag device.Tag) device.Want {
			user, split, kind, err := format.ParseKey(k)
			if err != nil || !format.HoldsPiece(kind) {
				return device.Skip
			}
			key := a.key(user, a.logical(split))
			if place.Offset(key, i) >= w {
				return device.Skip
			}
			reads, none := readerOf(key) == d, notOn(key, tag)
			switch {
			case none && !reads:
				// Another neighbour's piece of a mechanism that
				// puts none on i: the key's pieces that decide
				// are the reader's, and the repair reads its own.
				return device.Skip
			case none:
				// A reader's piece whose tag shows it needs no
				// restore is declined: left unread (see flush).
				return device.KeyOnly
			case !reads:
				return device.KeyOnly
			}
			return device.KeyValue
		}
	}
	var srcs []iter.Seq[scanEntry]
	for _, d := range scanned {
		// The scan runs on readAhead's goroutine: its error is published
		// under errMu when it ends, for absent to read meanwhile.
		var scanErr error
		seq := a.sortedScan(ctx, d, nil, start, true, want(d), &scanErr)
		srcs = append(srcs, readAhead(func(yield func(scanEntry) bool) {
			seq(yield)
			errMu.Lock()
			errs[d] = scanErr
			errMu.Unlock()
		}))
	}
	// absent completes the pieces of a key the scan read with the devices
	// it scanned that hold none, under either key: as current as the
	// pieces read (see scanCurrent), they spare the repair a read. A
	// device whose scan failed (by the time the repair asks) says
	// nothing.
	absent := func(pieces []mechanism.Piece, unread []mechanism.Piece) []mechanism.Piece {
		has := func(d int, bank bool) func(mechanism.Piece) bool {
			return func(p mechanism.Piece) bool { return p.Dev == d && p.Bank == bank }
		}
		for _, bank := range []bool{false, true} {
			for _, d := range scanned {
				if !failed(d) && !slices.ContainsFunc(pieces, has(d, bank)) && !slices.ContainsFunc(unread, has(d, bank)) {
					pieces = append(pieces, mechanism.Piece{Dev: d, Bank: bank, Err: errNotScanned})
				}
			}
		}
		return pieces
	}
	// A value whose pieces past the primary are under its bank key
	// (mechanism.Banked) shows as two neighbouring keys, its data key
	// (the primary's piece) and its bank key: they make one item.
	// readerMissed reports whether the reader of it's key has a write of
	// the key it missed on record: its piece, read or tagged, may be older
	// than the key's value, and cannot say that i needs none of it.
	readerMissed := func(it *healItem) bool {
		rd := readerOf(a.key(it.user, a.logical(it.split)))
		if rd < 0 || a.env.MissedCount(rd) == 0 {
			return false
		}
		return a.env.Missing(rd, format.Key(it.user, it.split, format.KindData)) ||
			a.env.Missing(rd, format.Key(it.user, it.split, format.KindBank))
	}
	var pending *healItem
	// pendingOK: every piece read decoded; declined: the reader left its
	// piece unread, its tag showing that its mechanism puts none on i.
	var pendingOK, declined bool
	flush := func() bool {
		it := pending
		pending = nil
		if it == nil {
			return true
		}
		switch {
		case declined && pendingOK && (it.hdr == nil || !a.onDevice(it.user, it.split, it.hdr, i)) && !readerMissed(it):
			// Whichever is newest, the declined piece or the newest
			// read, says no piece on i: what reading the reader's
			// value would have decided.
			return true
		case declined, !pendingOK || it.hdr == nil:
			// Unknown (a read piece that may be older than a
			// declined one says otherwise, or no header): the
			// repair locates the key itself.
			it.hdr, it.scan = nil, nil
		case !a.onDevice(it.user, it.split, it.hdr, i):
			if !readerMissed(it) {
				return true
			}
			it.hdr, it.scan = nil, nil
		default:
			it.scan.absent = absent
		}
		return emit(*it)
	}
	for m := range merge.Sorted(srcs) {
		var hdr *format.Header
		known, refused := true, false
		user, split, kind, _ := format.ParseKey(m.Key)
		pieces := make([]mechanism.Piece, 0, len(m.Entries))
		var unread []mechanism.Piece
		rd := -2 // the key's reader, once an unread piece asks
		for _, e := range m.Entries {
			p := mechanism.Piece{Dev: e.Val.dev, Bank: kind == format.KindBank}
			if e.Val.unread {
				if rd == -2 {
					rd = readerOf(a.key(user, a.logical(split)))
				}
				// The reader is asked for its value unless it
				// declines (want).
				refused = refused || e.Val.dev == rd
				unread = append(unread, p)
				continue
			}
			v, err := format.Decode(e.Val.value)
			switch {
			case e.Val.value == nil || err != nil:
				known = false
			case hdr == nil || v.Version > hdr.Version:
				hdr = &v.Header
			}
			p.Value, p.Raw = v, e.Val.value
			pieces = append(pieces, p)
		}
		if pending != nil && kind == format.KindBank && pending.split == split && bytes.Equal(pending.user, user) {
			pending.at = m.Key
			pending.scan.pieces = append(pending.scan.pieces, pieces...)
			pending.scan.unread = append(pending.scan.unread, unread...)
			if hdr != nil && (pending.hdr == nil || hdr.Version > pending.hdr.Version) {
				pending.hdr = hdr
			}
			pendingOK, declined = pendingOK && known, declined || refused
			continue
		}
		if !flush() {
			return ctx.Err()
		}
		pending = &healItem{user: user, split: split, onlyFor: i, at: m.Key, hdr: hdr,
			scan: &scanRead{pieces: pieces, unread: unread, watch: watch, gen: gen}}
		pendingOK, declined = known, refused
	}
	if !flush() {
		return ctx.Err()
	}
	var list []error
	errMu.Lock() // the scans have ended: Sorted stopped them
	defer errMu.Unlock()
	for _, err := range errs {
		// A neighbour that fails is marked so by the repairs; the keys
		// it listed alone have no other piece to restore from.
		if err != nil && !errors.Is(err, device.ErrDeviceFailed) {
			list = append(list, err)
		}
	}
	return errors.Join(list...)
}

// onDevice reports whether the value a scanned piece belongs to (split
// split of user, header h) has a piece under the data key on device dev,
// counted once per value: for a huge value, only its first split whose
// span covers dev says yes. Pieces the header shows are orphans (a split
// past the value's end, or in the other bank) say no: Scrub sweeps them.
// A mechanism that is not configured says yes, for the repair to report.
func (a *Array) onDevice(user []byte, split int, h *format.Header, dev int) bool {
	m, ok := a.byRM[h.RM]
	if !ok {
		return true
	}
	n := a.env.N()
	s := a.logical(split)
	splits := a.splitsOf(h)
	if s > 0 && h.Splits == 1 && a.banked {
		// A manifest's data split, written as a value of its own: its
		// value has splits 0..s at least.
		splits = s + 1
	}
	if s >= splits || a.splitKey(user, s, h.Version).Split != split {
		return false
	}
	// Unweighted, the spans of splits n.. repeat those of splits 0..n-1;
	// weighted, the splits' points need not come round so soon.
	weighted := a.env.Placement().Weighted()
	for first := 0; first < splits && (first < n || weighted); first++ {
		if a.offset(user, first, dev) < m.Width() {
			return first == s
		}
	}
	return false
}

// checkpointEvery is how often a rebuild without progress reports saves
// its checkpoint (each save syncs the device: see saveCheckpoint).
const checkpointEvery = time.Second

var checkpointKey = format.Key([]byte("\x00kvarray-rebuilt-at"), 0, format.KindArray)

// checkpoint returns the internal key up to which an interrupted rebuild
// of device i scanned and repaired, and how many keys that was.
func (a *Array) checkpoint(ctx context.Context, i int) ([]byte, int64) {
	b, err := a.env.Device(i).Retrieve(ctx, checkpointKey)
	if err != nil {
		return nil, 0
	}
	v, err := format.Decode(b)
	if err != nil || len(v.Payload) < 8 {
		return nil, 0
	}
	return v.Payload[8:], int64(binary.BigEndian.Uint64(v.Payload))
}

// saveCheckpoint records that the rebuild of device i restored count keys,
// up to at. The pieces it restored are synced first (they may have been
// written deferred, see mechanism.WithRestoring): the checkpoint never
// passes a piece a crash could lose.
func (a *Array) saveCheckpoint(ctx context.Context, i int, at []byte, count int64) {
	ctx = context.WithoutCancel(ctx)
	if syncDevice(ctx, a.env.Device(i)) != nil {
		return
	}
	p := binary.BigEndian.AppendUint64(nil, uint64(count))
	p = append(p, at...)
	h := format.Header{RM: format.RMNone, Splits: 1, SplitLen: uint32(len(p)), ObjectLen: uint64(len(p))}
	_ = a.env.Device(i).Store(ctx, checkpointKey, format.Encode(&h, p))
}

// syncDevice makes the deferred writes of d durable (device.Deferred);
// the writes of other devices always are.
func syncDevice(ctx context.Context, d device.Device) error {
	if dd, ok := d.(device.Deferred); ok {
		return dd.Sync(ctx)
	}
	return nil
}

// heal repairs the items source emits, workers at once, reporting
// progress (against estimate until source is done, then the count). Items with a scan position (Rebuild's) come first, in
// ascending order: the position of the longest run of them that is done
// is checkpointed now and then, with their count, and never past a key
// that failed. When every item is repaired the device is marked healthy
// and its rebuilding state cleared.
func (a *Array) heal(ctx context.Context, dev int, source func(emit func(healItem) bool) error, estimate int64, checkpoint func([]byte, int64), opts []HealOption) (RebuildReport, error) {
	o := healOptions{workers: 16, every: time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	rep := RebuildReport{Dev: dev, Name: a.env.Name(dev)}
	start := time.Now()
	var keys, bytes, repaired, failed, total atomic.Int64
	total.Store(max(estimate, 0))
	var mu sync.Mutex
	var errs []string
	// The checkpoint: items are numbered as emitted; next is the first
	// not known done, at and count describe the items before it.
	var (
		next, count int64
		at          []byte
		frozen      bool // an item failed: the checkpoint stays before it
		doneAt      = map[int64][]byte{}
	)
	markDone := func(seq int64, it healItem, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		if frozen {
			return
		}
		if !ok {
			frozen = true
			clear(doneAt)
			return
		}
		doneAt[seq] = it.at
		for {
			p, ok := doneAt[next]
			if !ok {
				break
			}
			delete(doneAt, next)
			next++
			if p != nil {
				at, count = p, count+1
			}
		}
	}
	saveAt := func() {
		mu.Lock()
		p, c := at, count
		mu.Unlock()
		if checkpoint != nil && p != nil {
			checkpoint(p, c)
		}
	}
	report := func(final bool) {
		if o.progress != nil {
			o.progress(Progress{Dev: dev, Keys: keys.Load(), Total: total.Load(), Bytes: bytes.Load(),
				Repaired: repaired.Load(), Failed: failed.Load(), Elapsed: time.Since(start), Completed: final})
		}
	}
	// The checkpoint is saved with each progress report, or every
	// checkpointEvery without reports, so that an interrupted rebuild
	// (a crash: ^C saves it anyway) does not start over.
	var tick func()
	interval := o.every
	switch {
	case o.progress != nil:
		tick = func() {
			report(false)
			saveAt()
		}
	case checkpoint != nil:
		tick, interval = saveAt, checkpointEvery
	}
	stopTick := every(interval, tick)
	type job struct {
		seq int64
		it  healItem
	}
	jobs := make(chan job, o.workers)
	var wg sync.WaitGroup
	for range o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				n, size, err := a.healOne(ctx, j.it)
				if err == nil && ctx.Err() != nil {
					// A repair cut short may skip its writes and still
					// succeed (they are best effort for a read's repair):
					// not done, so that the checkpoint does not pass it.
					err = fmt.Errorf("repair %s: %w", shown(j.it.user), ctx.Err())
				}
				keys.Add(1)
				repaired.Add(int64(n))
				bytes.Add(size)
				if err != nil {
					failed.Add(1)
					mu.Lock()
					if len(errs) < 20 {
						errs = append(errs, err.Error())
					}
					mu.Unlock()
				}
				markDone(j.seq, j.it, err == nil)
			}
		}()
	}
	var seq int64
	srcErr := source(func(it healItem) bool {
		if ctx.Err() != nil {
			return false
		}
		jobs <- job{seq: seq, it: it}
		seq++
		return true
	})
	close(jobs)
	wg.Wait()
	stopTick()
	if srcErr == nil {
		total.Store(seq)
	}
	rep.Keys, rep.Bytes, rep.Repaired, rep.Failed = keys.Load(), bytes.Load(), repaired.Load(), failed.Load()
	rep.Elapsed, rep.Errors = time.Since(start), errs
	if err := ctx.Err(); err != nil {
		saveAt()
		report(false)
		return rep, fmt.Errorf("heal device %d: interrupted after %d keys: %w", dev, rep.Keys, err)
	}
	if srcErr != nil {
		saveAt()
		report(false)
		return rep, fmt.Errorf("heal device %d (%s): list its keys: %w", dev, rep.Name, srcErr)
	}
	report(true)
	if rep.Failed > 0 && (checkpoint == nil || a.othersImpaired(dev)) {
		saveAt()
		why := ""
		if checkpoint != nil {
			why = " while another device is down: the device stays rebuilding; run the rebuild again once that device is back or rebuilt"
		}
		return rep, fmt.Errorf("heal device %d (%s): %d of %d keys could not be repaired%s (first: %s)", dev, rep.Name, rep.Failed, seq, why, errs[0])
	}
	if a.env.State(dev) == mechanism.Rebuilding {
		// What it restored deferred is durable before it counts as whole
		// (synced even if ctx ended meanwhile: the work is done). Should
		// the device not be marked healthy, the checkpoint keeps the work.
		if err := syncDevice(context.WithoutCancel(ctx), a.env.Device(dev)); err != nil {
			return rep, fmt.Errorf("heal device %d (%s): sync what it restored: %w", dev, rep.Name, err)
		}
		a.env.SetState(dev, mechanism.Healthy)
		a.hdrMu.Lock()
		h := a.hdr
		a.hdrMu.Unlock()
		// Not deferred with the rebuild's writes: the healthy mark is
		// durable before the rebuild reports the device healthy (a
		// kill -9 after it brought the device back rebuilding).
		if err := writeHeaders(mechanism.WithoutRestoring(ctx), a.env, h, []int{dev}); err != nil {
			a.env.SetState(dev, mechanism.Rebuilding)
			saveAt()
			return rep, fmt.Errorf("heal device %d: clear its rebuilding mark: %w", dev, err)
		}
		_ = a.env.Device(dev).Delete(ctx, checkpointKey)
	}
	return rep, nil
}

// healSlice is a heal source of a fixed list of items.
func healSlice(items []healItem) func(func(healItem) bool) error {
	return func(emit func(healItem) bool) error {
		for _, it := range items {
			if !emit(it) {
				return nil
			}
		}
		return nil
	}
}

// othersImpaired reports whether a device other than dev is failed. A key
// a rebuild cannot repair while no other device is failed is lost (its
// only pieces were on replaced devices, as with Hashing on dev): the
// rebuild reports it and completes. With another device down, the key may
// come back with it, so the rebuild stays open.
func (a *Array) othersImpaired(dev int) bool {
	for i := 0; i < a.env.N(); i++ {
		if i != dev && a.env.State(i) == mechanism.Failed {
			return true
		}
	}
	return false
}

// healOne repairs one item under its key's lock.
func (a *Array) healOne(ctx context.Context, it healItem) (int, int64, error) {
	user := it.user
	split := 0 // of an internal data key: a resync record's
	if user == nil {
		u, s, kind, err := format.ParseKey(it.internal)
		split = s
		if err != nil {
			return 0, 0, err
		}
		if !format.HoldsPiece(kind) {
			for _, m := range a.mechs {
				if kr, ok := m.(keyRepairer); ok {
					if handled, err := kr.RepairKey(ctx, it.internal); handled {
						return 1, 0, err
					}
				}
			}
			return 0, 0, nil
		}
		user = u
	}
	if err := a.checkKey(user); err != nil {
		return 0, 0, err
	}
	// A repair may settle on another version (a store in flight found
	// whole): what the cache knew of the key goes.
	defer a.meta.forget(user)
	if it.hdr != nil {
		if n, size, ok := a.restoreScanned(ctx, it); ok {
			return n, size, nil
		}
	}
	var n int
	var size int64
	_, err := a.run(ctx, user, "repair", func() ([]byte, error) {
		var err error
		if it.onlyFor >= 0 {
			n, size, err = a.restoreKey(ctx, user, it.onlyFor)
			return nil, err
		}
		n, size, err = a.repairSized(ctx, user)
		if split != 0 && (err == nil || errors.Is(err, ErrNotFound)) {
			// repairSized's walk over leftover splits ends at the first
			// with no piece; the split this record names may lie past it.
			swept, serr := a.sweepIfLeftover(ctx, user, split)
			n += swept
			if serr != nil {
				return nil, serr
			}
		}
		return nil, err
	})
	if errors.Is(err, ErrNotFound) {
		err = nil // deleted: swept of whatever was left
	}
	return n, size, err
}

// restoreScanned restores on device it.onlyFor the piece of a value that a
// rebuild's scan found on its neighbours, with one call to the value's
// mechanism's Repair (under Rebuild's restoring context: it does not
// read the device being restored, and its write shares a batch). It
// reports false, having changed nothing that a full repair would not,
// when the fast path does not apply: a huge value, a mechanism with
// pieces beyond the data key (Packing), or a repair that fails (the value
// may have changed mechanism since the scan): healOne then locates the
// key and repairs it in full.
func (a *Array) restoreScanned(ctx context.Context, it healItem) (int, int64, bool) {
	h := it.hdr
	m, ok := a.byRM[h.RM]
	if !ok || h.Splits != 1 || it.split != 0 {
		return 0, 0, false
	}
	if _, keyed := m.(rebuildKeyedMechanism); keyed {
		return 0, 0, false
	}
	var n int
	_, err := a.run(ctx, it.user, "repair", func() ([]byte, error) {
		k := a.key(it.user, 0)
		var err error
		current := a.scanCurrent(k, it)
		rf, copied := m.(restorerFrom)
		rw, reuses := m.(repairerWith)
		switch from := it.scan.read(); {
		case copied && current && from != nil:
			n, err = rf.RestoreFrom(ctx, k, it.onlyFor, *from)
		case reuses && current:
			// The pieces not read (it.scan.unread) are read now.
			n, err = rw.RepairWith(ctx, k, h, it.scan.have())
		default:
			n, err = m.Repair(ctx, k, h)
		}
		return nil, err
	})
	switch {
	case err == nil:
		return n, int64(h.ObjectLen), true
	case errors.Is(err, ErrNotFound) && n == 0:
		return 0, 0, true // deleted since the scan
	}
	return 0, 0, false
}

// restoreKey restores on device dev, under key's lock, the pieces of key's
// value that belong there: it locates the value (one read of its primary)
// and has its mechanism repair each split whose pieces can be on dev
// (under Rebuild's restoring context, see mechanism.WithRestoring: dev
// is not read). Unlike repair it sweeps no orphans: a rebuild
// restores what belongs on the device, and Scrub removes what does not.
func (a *Array) restoreKey(ctx context.Context, key []byte, dev int) (int, int64, error) {
	l, err := a.locate(ctx, a.key(key, 0))
	if err != nil {
		return 0, 0, err
	}
	y, err := a.layoutOf(ctx, key, l)
	if err != nil {
		return 0, 0, err
	}
	_, keyed := l.m.(rebuildKeyedMechanism)
	counts := make([]int, y.splits)
	err = a.forSplits(ctx, y.splits, func(s int) error {
		k := a.keyIn(key, y, s)
		if !keyed && a.env.Offset(k, dev) >= l.m.Width() {
			return nil // its pieces are all on other devices
		}
		var err error
		counts[s], err = l.m.Repair(ctx, k, y.hint(s))
		return err
	})
	total := 0
	for _, c := range counts {
		total += c
	}
	return total, y.length, err
}

// scanCurrent reports whether the pieces of k the scan read (it.scan) are
// still what the other devices hold: no write of k reached the rebuilt
// device since the scan began (see mechanism.Watch), and every device
// they came from is healthy and missed no write of k. It runs under k's
// lock.
func (a *Array) scanCurrent(k mechanism.Key, it healItem) bool {
	if it.scan == nil {
		return false
	}
	data, bank := k.Data(), k.Bank()
	if it.scan.watch.TouchedSince(data, it.scan.gen) || it.scan.watch.TouchedSince(bank, it.scan.gen) {
		return false
	}
	for _, p := range it.scan.pieces {
		if errors.Is(p.Err, errNotScanned) {
			continue // what the scan did not find it did not read
		}
		key := data
		if p.Bank {
			key = bank
		}
		if a.env.State(p.Dev) != mechanism.Healthy || a.env.Missing(p.Dev, key) {
			return false
		}
	}
	return true
}

// Read-ahead of a rebuild's scans: each neighbour's scan runs on its own
// goroutine, up to readAheadChunks chunks of readAheadChunk entries ahead
// of the merge, so that the neighbours' reads (a value read each, on
// Pebble) proceed together rather than one after the other on the
// merge's goroutine. It holds at most (readAheadChunks+2) ×
// readAheadChunk entries per neighbour: a few MiB of 4 KiB pieces.
const (
	readAheadChunk  = 64
	readAheadChunks = 4
)

// readAhead yields what seq yields, running seq on its own goroutine ahead
// of the consumer. Whatever seq writes before it returns (its error) is
// visible once the iteration ends, early or not: the goroutine has ended.
func readAhead[T any](seq iter.Seq[T]) iter.Seq[T] {
	return func(yield func(T) bool) {
		chunks := make(chan []T, readAheadChunks)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer close(chunks)
			chunk := make([]T, 0, readAheadChunk)
			send := func() bool {
				select {
				case chunks <- chunk:
					chunk = make([]T, 0, readAheadChunk)
					return true
				case <-stop:
					return false
				}
			}
			for v := range seq {
				if chunk = append(chunk, v); len(chunk) == readAheadChunk && !send() {
					return
				}
			}
			if len(chunk) > 0 {
				send()
			}
		}()
		defer func() {
			close(stop)
			<-done
		}()
		for chunk := range chunks {
			for _, v := range chunk {
				if !yield(v) {
					return
				}
			}
		}
	}
}
