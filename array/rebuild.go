package array

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
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
	Total     int64 // keys to do (0 while still counting)
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
		old := a.devs[i]
		a.devs[i] = dev
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
// repairs every key its resync record lists.
func (a *Array) Resync(ctx context.Context, i int, opts ...HealOption) (RebuildReport, error) {
	rep := RebuildReport{Dev: i}
	if err := a.checkDev(i); err != nil {
		return rep, fmt.Errorf("resync: %w", err)
	}
	rep.Name = a.env.Name(i)
	b, err := a.devs[i].Retrieve(ctx, headerKey)
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
	keys := a.env.Missed(i)
	work := make([]healItem, 0, len(keys))
	for _, k := range keys {
		work = append(work, healItem{internal: k, onlyFor: -1})
	}
	return a.heal(ctx, i, work, nil, opts)
}

// healItem is one key to repair: a user key, or an internal key that only
// its mechanism understands.
type healItem struct {
	user     []byte
	internal []byte
	// onlyFor, when ≥ 0 (Rebuild), lets a key whose pieces cannot be on
	// that device be skipped after one read of its header.
	onlyFor int
}

// Rebuild restores everything that belongs on device i, which must be
// Rebuilding (see ReplaceDevice), and marks it healthy when every key was
// repaired. It is restartable: keys done by an interrupted run, recorded
// on the device, are skipped.
func (a *Array) Rebuild(ctx context.Context, i int, opts ...HealOption) (RebuildReport, error) {
	rep := RebuildReport{Dev: i}
	if err := a.checkDev(i); err != nil {
		return rep, fmt.Errorf("rebuild: %w", err)
	}
	rep.Name = a.env.Name(i)
	if a.env.State(i) != mechanism.Rebuilding {
		return rep, fmt.Errorf("rebuild device %d (%s): it is %v, not being rebuilt (replace it first)", i, rep.Name, a.env.State(i))
	}
	keys, err := a.rebuildKeys(ctx, i)
	if err != nil {
		return rep, fmt.Errorf("rebuild device %d (%s): %w", i, rep.Name, err)
	}
	done := a.checkpoint(ctx, i)
	work := make([]healItem, 0, len(keys))
	skipped := int64(0)
	for _, k := range keys {
		if done != nil && slices.Compare(k, done) <= 0 {
			skipped++
			continue
		}
		work = append(work, healItem{user: k, onlyFor: i})
	}
	// Keys it missed while it was failed, before it was replaced by
	// itself (its header says rebuilding): after the scan, unordered.
	for _, k := range a.env.Missed(i) {
		work = append(work, healItem{internal: k, onlyFor: -1})
	}
	rep, err = a.heal(ctx, i, work, func(last []byte) { a.saveCheckpoint(ctx, i, last) }, opts)
	rep.Skipped = skipped
	return rep, err
}

// rebuildKeys lists the user keys that may have a piece on device i: keys
// with a data key on a device at most maxWidth-1 away whose span covers i,
// and the keys the mechanisms know of by other means. Sorted, each once.
func (a *Array) rebuildKeys(ctx context.Context, i int) ([][]byte, error) {
	n := a.env.N()
	w := min(a.maxWidth, n)
	var mu sync.Mutex
	var keys [][]byte
	var wg sync.WaitGroup
	var errs []error
	for d := 0; d < n; d++ {
		dist := (i - d + n) % n // how far d is before i
		back := (d - i + n) % n // how far d is after i
		if d == i || (dist >= w && back >= w) || a.env.State(d) == mechanism.Failed {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local [][]byte
			err := a.devs[d].Iterate(ctx, nil, func(k []byte) error {
				user, split, kind, err := format.ParseKey(k)
				if err != nil || kind != format.KindData {
					return nil
				}
				if off := (i - a.primary(user, a.logical(split)) + n) % n; off < w {
					local = append(local, slices.Clone(user))
				}
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil && !errors.Is(err, device.ErrDeviceFailed) {
				errs = append(errs, fmt.Errorf("list keys on device %d: %w", d, err))
			}
			keys = append(keys, local...)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, m := range a.mechs {
		if rk, ok := m.(rebuildKeyedMechanism); ok {
			more, err := rk.RebuildKeys(ctx, i)
			if err != nil {
				return nil, err
			}
			for _, k := range more {
				keys = append(keys, k.User)
			}
		}
	}
	slices.SortFunc(keys, slices.Compare)
	return slices.CompactFunc(keys, func(x, y []byte) bool { return slices.Equal(x, y) }), nil
}

var checkpointKey = format.Key([]byte("\x00kvarray-rebuilt"), 0, format.KindArray)

func (a *Array) checkpoint(ctx context.Context, i int) []byte {
	b, err := a.devs[i].Retrieve(ctx, checkpointKey)
	if err != nil {
		return nil
	}
	v, err := format.Decode(b)
	if err != nil {
		return nil
	}
	return v.Payload
}

func (a *Array) saveCheckpoint(ctx context.Context, i int, last []byte) {
	h := format.Header{RM: format.RMNone, Splits: 1, SplitLen: uint32(len(last)), ObjectLen: uint64(len(last))}
	_ = a.devs[i].Store(context.WithoutCancel(ctx), checkpointKey, format.Encode(&h, last))
}

// heal repairs work with bounded parallelism, reporting progress. With
// checkpoint set (Rebuild), items are user keys in sorted order and the
// longest prefix of them that is done is checkpointed now and then. When
// every item is repaired the device is marked healthy and its rebuilding
// state cleared.
func (a *Array) heal(ctx context.Context, dev int, work []healItem, checkpoint func([]byte), opts []HealOption) (RebuildReport, error) {
	o := healOptions{workers: 16, every: time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	rep := RebuildReport{Dev: dev, Name: a.env.Name(dev)}
	start := time.Now()
	var keys, bytes, repaired, failed atomic.Int64
	doneFlags := make([]bool, len(work))
	var mu sync.Mutex
	var errs []string
	next := 0 // all items before next are done (for the checkpoint)
	report := func(final bool) {
		if o.progress != nil {
			o.progress(Progress{Dev: dev, Keys: keys.Load(), Total: int64(len(work)), Bytes: bytes.Load(),
				Repaired: repaired.Load(), Failed: failed.Load(), Elapsed: time.Since(start), Completed: final})
		}
	}
	var tick func()
	if o.progress != nil {
		tick = func() {
			report(false)
			var last []byte
			mu.Lock()
			if next > 0 {
				last = work[next-1].user
			}
			mu.Unlock()
			if checkpoint != nil && last != nil {
				checkpoint(last)
			}
		}
	}
	stopTick := every(o.every, tick)
	runPool(ctx, len(work), o.workers, func(j int) {
		n, size, err := a.healOne(ctx, work[j])
		keys.Add(1)
		repaired.Add(int64(n))
		bytes.Add(size)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed.Add(1)
			if len(errs) < 20 {
				errs = append(errs, err.Error())
			}
			return
		}
		doneFlags[j] = true
		for next < len(work) && doneFlags[next] {
			next++
		}
	})
	stopTick()
	rep.Keys, rep.Bytes, rep.Repaired, rep.Failed = keys.Load(), bytes.Load(), repaired.Load(), failed.Load()
	rep.Elapsed, rep.Errors = time.Since(start), errs
	if err := ctx.Err(); err != nil {
		if checkpoint != nil && next > 0 && work[next-1].user != nil {
			checkpoint(work[next-1].user)
		}
		report(false)
		return rep, fmt.Errorf("heal device %d: interrupted after %d of %d keys: %w", dev, rep.Keys, len(work), err)
	}
	report(true)
	if rep.Failed > 0 && (checkpoint == nil || a.othersImpaired(dev)) {
		if checkpoint != nil && next > 0 && work[next-1].user != nil {
			checkpoint(work[next-1].user)
		}
		return rep, fmt.Errorf("heal device %d (%s): %d of %d keys could not be repaired (first: %s)", dev, rep.Name, rep.Failed, len(work), errs[0])
	}
	if a.env.State(dev) == mechanism.Rebuilding {
		a.env.SetState(dev, mechanism.Healthy)
		a.hdrMu.Lock()
		h := a.hdr
		a.hdrMu.Unlock()
		if err := writeHeaders(ctx, a.env, h, []int{dev}); err != nil {
			a.env.SetState(dev, mechanism.Rebuilding)
			return rep, fmt.Errorf("heal device %d: clear its rebuilding mark: %w", dev, err)
		}
		_ = a.devs[dev].Delete(ctx, checkpointKey)
	}
	return rep, nil
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

// mayHold reports whether device dev may hold a piece of key, from one
// read of its header: the scan that lists a rebuild's keys goes as far as
// the widest configured mechanism, but a value's own mechanism may be
// narrower. Packing, huge values and anything unreadable say yes.
func (a *Array) mayHold(ctx context.Context, key []byte, dev int) bool {
	l, err := a.locate(ctx, a.key(key, 0))
	if err != nil {
		return true
	}
	if l.header().Splits != 1 {
		return true
	}
	if _, ok := l.m.(rebuildKeyedMechanism); ok {
		return true
	}
	off := (dev - a.primary(key, 0) + a.env.N()) % a.env.N()
	return off < l.m.Width()
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
		if kind != format.KindData {
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
	var n int
	var size int64
	_, err := a.run(ctx, user, "repair", func() ([]byte, error) {
		if it.onlyFor >= 0 && !a.mayHold(ctx, user, it.onlyFor) {
			return nil, nil
		}
		var err error
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
