package mechanism

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
)

// Resync records (a write-intent log, per key): when a device misses a
// delete, or an acknowledged store (a degraded write: see Env.Write and
// Acknowledge), the internal key is recorded durably on up to two other
// devices before the operation returns. A store that is not acknowledged
// records nothing: the pieces it did not replace still hold the value the
// caller must fall back to.
// Until a later write of that key lands on the device, reads of the key
// from it fail with ErrStale, so a device that comes back after missing
// writes never serves the old values, and Resync knows exactly which keys
// to bring up to date instead of a full pass.
//
// A record is stored under format.Key(recordPrefix ‖ device (2 bytes) ‖
// xxhash64(internal key) (8 bytes), 0, KindArray); its value frames the
// internal key. Records are kept in memory too, with the devices holding
// their copies.
//
// A record is cleared by deleting its copies. A holder that misses that
// delete (it is failed) would bring the record back at the next open, and
// with it a device marked stale for a key it holds correctly (fewer good
// pieces than there are). So the missed delete is itself recorded: a
// record of device H's record key, saying H missed its deletion. Open
// ignores the copies such records name, and Resync of H deletes them
// (CatchUpRecords).
//
// Invariant: a record's durable copies are those its in-memory entry
// lists (or, after a failed delete, those a record of that miss names):
// a copy nobody tracks would come back at the next open as a device
// behind that nothing repairs. So every change of a record, its memory
// entry and its copies' writes or deletes together, holds the record's
// lock (lockRecord). Without it a clear running between a record's entry
// and its copies' stores deletes copies not yet written: the stores land
// after the deletes, and the copies outlive the entry. The array's key
// lock does not order these: an online replace forgets the old device's
// records (Forget) while writes that missed it are being recorded.
// Locks nest only from a record to a record of its record key (a holder
// that missed a copy's write or deletion), never back, so they cannot
// deadlock.

// recordPrefix starts the user part of every record key.
var recordPrefix = []byte("\x00kvarray-resync")

// recordCopies is how many devices hold each record.
const recordCopies = 2

type records struct {
	mu     sync.Mutex
	missed []map[string]*record // per device, by internal key
	// busy: the lock of each record being changed, by record key (see
	// lockRecord).
	busy map[string]*recordLock
}

// recordLock serialises the changes of one record.
type recordLock struct {
	mu   sync.Mutex
	refs int // holder and waiters: the last one out drops the lock
}

// lockRecord takes the lock of the record whose key is rk (see the
// package doc) and returns its unlock. Two keys whose record keys collide
// share a lock, as they share their copies.
func (e *Env) lockRecord(rk []byte) (unlock func()) {
	e.rec.mu.Lock()
	l := e.rec.busy[string(rk)]
	if l == nil {
		l = &recordLock{}
		e.rec.busy[string(rk)] = l
	}
	l.refs++
	e.rec.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		e.rec.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(e.rec.busy, string(rk))
		}
		e.rec.mu.Unlock()
	}
}

// record is one key a device missed.
type record struct {
	holders []int // devices holding the durable record
	// stale: the holders whose copy is of an earlier version (their
	// rewrite failed). They stay holders, so that a clear deletes their
	// copies, but do not count towards recordCopies.
	stale []int
	// deleted: the last write missed was a delete, so once no other
	// device holds a piece of the key, the key does not exist.
	deleted bool
	// version orders the record's rewrites (an HLC stamp). A holder
	// whose rewrite failed keeps the earlier copy, which may disagree on
	// deleted; when copies disagree at open, the newest is the record.
	version uint64
}

func recordKey(dev int, key []byte) []byte {
	u := append(slices.Clip(recordPrefix), byte(dev>>8), byte(dev))
	u = binary.BigEndian.AppendUint64(u, xxhash.Sum64(key))
	return format.Key(u, 0, format.KindArray)
}

// recordable reports whether a write of key is tracked: the array's own
// metadata (headers, records) is not.
func recordable(key []byte) bool {
	_, _, kind, err := format.ParseKey(key)
	return err == nil && kind != format.KindArray
}

func (e *Env) missed(dev int, key []byte) bool {
	e.rec.mu.Lock()
	defer e.rec.mu.Unlock()
	_, ok := e.rec.missed[dev][string(key)]
	return ok
}

// keepRecords records the deletes in ops that a device missed and clears
// the records of writes that landed.
func (e *Env) keepRecords(ctx context.Context, ops []Op) {
	for i := range ops {
		op := &ops[i]
		if !isWrite(op.Kind) || !recordable(op.Key) {
			continue
		}
		switch {
		case op.Err == nil:
			if e.missed(op.Dev, op.Key) {
				e.clearMiss(ctx, op.Dev, op.Key)
			}
		case op.Kind == device.OpDelete:
			_ = e.recordMiss(ctx, op.Dev, op.Key, true) // Delete checks it (recorded)
		}
	}
}

// ErrNotRecorded: a device missed a write and no other device took the
// record of it, so the write must not be acknowledged: the device would
// serve the old value when it came back.
var ErrNotRecorded = errors.New("the miss could not be recorded on any other device")

// Acknowledge records the stores in ops that a device missed, once the
// caller has decided to acknowledge the write they are part of. An error
// (ErrNotRecorded) means some miss is not durable: the write must not be
// acknowledged.
func (e *Env) Acknowledge(ctx context.Context, ops []Op) error {
	var errs []error
	for i := range ops {
		if op := &ops[i]; op.Kind == device.OpStore && op.Err != nil && recordable(op.Key) {
			// A device swapped out meanwhile (Rebuilding) is restored
			// whole by its rebuild: its misses need no record.
			if err := e.recordMiss(ctx, op.Dev, op.Key, false); err != nil && e.State(op.Dev) != Rebuilding {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// recorded reports whether dev's miss of key is recorded durably.
func (e *Env) recorded(dev int, key []byte) bool {
	e.rec.mu.Lock()
	defer e.rec.mu.Unlock()
	r, ok := e.rec.missed[dev][string(key)]
	return ok && len(r.holders) > 0
}

// recordMiss records that dev missed a write (a delete when deleted) of
// key, and fails with ErrNotRecorded when no device took the record.
func (e *Env) recordMiss(ctx context.Context, dev int, key []byte, deleted bool) (err error) {
	rk := recordKey(dev, key)
	defer e.lockRecord(rk)()
	e.rec.mu.Lock()
	var was []int // holders of an earlier record of the key, rewritten too
	if r, ok := e.rec.missed[dev][string(key)]; ok {
		if r.deleted == deleted && len(r.holders) > 0 {
			short := r.fresh() < recordCopies
			e.rec.mu.Unlock()
			if short {
				// A holder was lost (replaced) or missed the write: one
				// copy alone would be gone with its device, and the
				// device that missed the key would come back trusted.
				e.copyRecordLocked(ctx, dev, key)
			}
			return nil
		}
		was = r.holders
		prev := *r
		defer func() {
			if errors.Is(err, ErrNotRecorded) {
				// Nothing of the new record is durable: the earlier one
				// stands, as its copies say.
				e.rec.mu.Lock()
				e.rec.missed[dev][string(key)] = &prev
				e.rec.mu.Unlock()
			}
		}()
	}
	r := &record{deleted: deleted, version: e.clock.Next()}
	e.rec.missed[dev][string(key)] = r
	e.rec.mu.Unlock()

	val := recordValue(key, r)
	var ops []Op
	for i := 1; i < e.N() && len(ops) < recordCopies; i++ {
		d := e.Dev(dev, i)
		if e.Writable(d) {
			ops = append(ops, Op{Dev: d, Op: device.Op{Kind: device.OpStore, Key: rk, Value: val}})
		}
	}
	// Every copy of the earlier record must be rewritten (or, failing
	// that, deleted with the new one when it is cleared): a copy nobody
	// tracks would come back at the next open.
	for _, d := range was {
		if !slices.ContainsFunc(ops, func(op Op) bool { return op.Dev == d }) {
			ops = append(ops, Op{Dev: d, Op: device.Op{Kind: device.OpStore, Key: rk, Value: val}})
		}
	}
	// Not Do: a record write that fails is not itself recorded.
	e.do(context.WithoutCancel(ctx), ops)
	var holders, fresh, stale []int
	for i := range ops {
		switch {
		case ops[i].Err == nil:
			fresh = append(fresh, ops[i].Dev)
		case slices.Contains(was, ops[i].Dev):
			stale = append(stale, ops[i].Dev)
		}
	}
	holders = append(slices.Clone(fresh), stale...)
	e.rec.mu.Lock()
	if r, ok := e.rec.missed[dev][string(key)]; ok {
		r.holders, r.stale = holders, stale
	}
	e.rec.mu.Unlock()
	// A holder that had missed the deletion of an earlier copy of this
	// record holds a current one now.
	for _, h := range fresh {
		if e.missed(h, rk) {
			e.clearMiss(ctx, h, rk)
		}
	}
	if len(fresh) == 0 {
		// Not durable, so not a record: the write it belongs to is not
		// acknowledged, and an entry kept in memory alone would hide
		// dev's piece for the rest of the process (it is gone at the next
		// open) while proving nothing: a later read could not tell it
		// from the miss of an acknowledged write, and a value its
		// failed overwrite never replaced read as unavailable (issue 40).
		// A device being rebuilt keeps it: its misses are acknowledged
		// without a record (Acknowledge), and its old pieces must not
		// serve meanwhile.
		if e.State(dev) != Rebuilding && len(was) == 0 {
			e.rec.mu.Lock()
			if r, ok := e.rec.missed[dev][string(key)]; ok && len(r.holders) == 0 {
				delete(e.rec.missed[dev], string(key))
			}
			e.rec.mu.Unlock()
		}
		return fmt.Errorf("device %d missed a write of %q: %w", dev, key, ErrNotRecorded)
	}
	if len(fresh) < recordCopies {
		e.copyRecordLocked(ctx, dev, key) // a holder failed under the write: another takes it
	}
	return nil
}

// clearMiss drops the record of key on dev.
func (e *Env) clearMiss(ctx context.Context, dev int, key []byte) {
	rk := recordKey(dev, key)
	defer e.lockRecord(rk)()
	e.rec.mu.Lock()
	_, ok := e.rec.missed[dev][string(key)]
	delete(e.rec.missed[dev], string(key))
	e.rec.mu.Unlock()
	if !ok {
		return
	}
	// Every device but dev may hold a copy: the holders known are those
	// read at open and written since, and a device that was down at open
	// may hold one too. Deleting a copy that is not there costs little;
	// leaving one behind would bring the record back.
	var ops []Op
	for i := 1; i < e.N(); i++ {
		ops = append(ops, Op{Dev: e.Dev(dev, i), Op: device.Op{Kind: device.OpDelete, Key: rk}})
	}
	e.do(context.WithoutCancel(ctx), ops)
	for i := range ops {
		if ops[i].Err != nil {
			_ = e.recordMiss(ctx, ops[i].Dev, rk, true) // at worst, a needless repair later
		}
	}
}

// adoptCopy reads the record copy k that device holder holds and takes it
// into the records, holder among its holders.
func (e *Env) adoptCopy(ctx context.Context, holder int, k []byte) {
	defer e.lockRecord(k)() // not a copy a clear is deleting meanwhile
	b, err := e.Device(holder).Retrieve(ctx, k)
	if err != nil {
		return
	}
	target, key, ok := parseRecord(k, b, e.N())
	if !ok {
		return
	}
	v, _ := format.Decode(b)
	e.rec.mu.Lock()
	defer e.rec.mu.Unlock()
	deleted := len(v.Fields) == 1 && v.Fields[0] == 1
	r := e.rec.missed[target][string(key)]
	switch {
	case r == nil:
		r = &record{deleted: deleted, version: v.Version}
		e.rec.missed[target][string(key)] = r
	case v.Version > r.version:
		// A holder whose rewrite failed keeps an older copy: the order
		// copies are read in must not decide whether the miss was a
		// delete (a stale "store" copy read first hid a missed delete,
		// and the deleted key's old piece came back as data loss).
		r.deleted, r.version = deleted, v.Version
		r.stale = slices.Clone(r.holders)
	case v.Version < r.version && !slices.Contains(r.stale, holder):
		r.stale = append(r.stale, holder)
	}
	if !slices.Contains(r.holders, holder) {
		r.holders = append(r.holders, holder)
	}
}

// recordValue is the stored form of record r of key: the key, framed,
// whether the miss was a delete, and the record's version.
func recordValue(key []byte, r *record) []byte {
	kind := byte(0)
	if r.deleted {
		kind = 1
	}
	h := format.Header{RM: format.RMNone, Version: r.version, Splits: 1, SplitLen: uint32(len(key)), ObjectLen: uint64(len(key)), Fields: []byte{kind}}
	return format.Encode(&h, key)
}

// parseRecord decodes the record copy b stored under k: the device that
// missed a write and the internal key it missed.
func parseRecord(k, b []byte, n int) (dev int, key []byte, ok bool) {
	v, err := format.Decode(b)
	if err != nil {
		return 0, nil, false
	}
	u, _, _, _ := format.ParseKey(k)
	dev = int(u[len(recordPrefix)])<<8 | int(u[len(recordPrefix)+1])
	if dev >= n || !slices.Equal(recordKey(dev, v.Payload), k) {
		return 0, nil, false
	}
	return dev, v.Payload, true
}

// isRecordKey reports whether key is a record's key.
func isRecordKey(key []byte) bool {
	u, _, kind, err := format.ParseKey(key)
	return err == nil && kind == format.KindArray && len(u) == len(recordPrefix)+10 && string(u[:len(recordPrefix)]) == string(recordPrefix)
}

// CatchUpRecords brings the record copies on device dev, which comes
// back, in line with the records: it deletes the copies whose deletion it
// missed (see the package doc) and clears those records. Any other copy
// it holds is a record: one it holds with others, or one that only it and
// other devices down when the array opened hold. Taking a cleared record
// for live costs one needless repair of its key; the reverse would serve
// a missed write's old value, so such copies are taken as records.
func (e *Env) CatchUpRecords(ctx context.Context, dev int) error {
	var ops []Op
	for _, k := range e.Missed(dev) {
		if isRecordKey(k) {
			ops = append(ops, Op{Dev: dev, Op: device.Op{Kind: device.OpDelete, Key: k}})
		}
	}
	var copies [][]byte
	if err := e.Device(dev).Iterate(ctx, recordPrefix, func(k []byte) error {
		if isRecordKey(k) {
			copies = append(copies, slices.Clone(k))
		}
		return nil
	}); err != nil {
		return err
	}
	for _, k := range copies {
		if slices.ContainsFunc(ops, func(op Op) bool { return string(op.Key) == string(k) }) {
			continue // its deletion was missed: deleted below
		}
		e.adoptCopy(ctx, dev, k)
	}
	e.do(ctx, ops)
	var errs []error
	for i := range ops {
		if ops[i].Err != nil {
			errs = append(errs, ops[i].Err)
			continue
		}
		e.clearMiss(ctx, dev, ops[i].Key)
	}
	return errors.Join(errs...)
}

// Vouch clears dev's record of key once the caller has proved that the
// record names no acknowledged write (see Array.unacknowledgedMiss): the
// piece it hid is current again.
func (e *Env) Vouch(ctx context.Context, dev int, key []byte) { e.clearMiss(ctx, dev, key) }

// Missed returns the internal keys device dev's record lists.
func (e *Env) Missed(dev int) [][]byte {
	e.rec.mu.Lock()
	defer e.rec.mu.Unlock()
	out := make([][]byte, 0, len(e.rec.missed[dev]))
	for k := range e.rec.missed[dev] {
		out = append(out, []byte(k))
	}
	slices.SortFunc(out, func(a, b []byte) int { return slices.Compare(a, b) })
	return out
}

// MarkStale records that dev holds an out-of-date piece under key that
// a write chose not to touch (a parity patched on the other devices only),
// so that it is never read as current.
func (e *Env) MarkStale(ctx context.Context, dev int, key []byte) error {
	return e.recordMiss(ctx, dev, key, false)
}

// MissedDelete reports whether the last write of key that dev missed was
// a delete.
func (e *Env) MissedDelete(dev int, key []byte) bool {
	e.rec.mu.Lock()
	defer e.rec.mu.Unlock()
	r, ok := e.rec.missed[dev][string(key)]
	return ok && r.deleted
}

// MissedCount returns how many keys device dev's record lists.
func (e *Env) MissedCount(dev int) int {
	e.rec.mu.Lock()
	defer e.rec.mu.Unlock()
	return len(e.rec.missed[dev])
}

// Forget drops device dev's record: a replaced device starts empty, so
// what the old one missed no longer matters (Rebuild restores it all).
// The records it held for other devices are gone with it: each is written
// again to another device, so that it keeps its copies.
func (e *Env) Forget(ctx context.Context, dev int) {
	for _, k := range e.Missed(dev) {
		e.clearMiss(ctx, dev, k)
	}
	type held struct {
		target int
		key    string
	}
	var lost []held
	e.rec.mu.Lock()
	for target, m := range e.rec.missed {
		for key, r := range m {
			if slices.Contains(r.holders, dev) {
				r.dropHolder(dev)
				lost = append(lost, held{target, key})
			}
		}
	}
	e.rec.mu.Unlock()
	for _, h := range lost {
		e.copyRecord(ctx, h.target, []byte(h.key))
	}
}

// copyRecord writes record (target, key) to devices that do not hold it
// yet until it has recordCopies holders, never to dev target itself.
func (e *Env) copyRecord(ctx context.Context, target int, key []byte) {
	defer e.lockRecord(recordKey(target, key))()
	e.copyRecordLocked(ctx, target, key)
}

// copyRecordLocked is copyRecord under the record's lock.
func (e *Env) copyRecordLocked(ctx context.Context, target int, key []byte) {
	e.rec.mu.Lock()
	r := e.rec.missed[target][string(key)]
	if r == nil {
		e.rec.mu.Unlock()
		return
	}
	have, stale, fresh := slices.Clone(r.holders), slices.Clone(r.stale), r.fresh()
	val := recordValue(key, r)
	e.rec.mu.Unlock()
	rk := recordKey(target, key)
	var ops []Op
	// A stale copy rewritten first: it is one copy fewer to delete.
	for _, d := range stale {
		if fresh+len(ops) < recordCopies && e.Writable(d) {
			ops = append(ops, Op{Dev: d, Op: device.Op{Kind: device.OpStore, Key: rk, Value: val}})
		}
	}
	for i := 1; i < e.N() && fresh+len(ops) < recordCopies; i++ {
		d := e.Dev(target, i)
		if e.Writable(d) && !slices.Contains(have, d) {
			ops = append(ops, Op{Dev: d, Op: device.Op{Kind: device.OpStore, Key: rk, Value: val}})
		}
	}
	e.do(context.WithoutCancel(ctx), ops)
	e.rec.mu.Lock()
	defer e.rec.mu.Unlock()
	if r := e.rec.missed[target][string(key)]; r != nil {
		for i := range ops {
			if ops[i].Err != nil {
				continue
			}
			r.stale = slices.DeleteFunc(r.stale, func(h int) bool { return h == ops[i].Dev })
			if !slices.Contains(r.holders, ops[i].Dev) {
				r.holders = append(r.holders, ops[i].Dev)
			}
		}
	}
}

// fresh is how many of r's holders hold its current version.
func (r *record) fresh() int { return len(r.holders) - len(r.stale) }

// dropHolder removes device h from r's holders.
func (r *record) dropHolder(h int) {
	r.holders = slices.DeleteFunc(r.holders, func(d int) bool { return d == h })
	r.stale = slices.DeleteFunc(r.stale, func(d int) bool { return d == h })
}

// LoadRecords reads the resync records from every device that answers,
// as an array does when it opens.
func (e *Env) LoadRecords(ctx context.Context) error {
	var errs []error
	for d := 0; d < e.N(); d++ {
		if e.State(d) == Failed {
			continue
		}
		var keys [][]byte
		err := e.Device(d).Iterate(ctx, recordPrefix, func(k []byte) error {
			if isRecordKey(k) {
				keys = append(keys, slices.Clone(k))
			}
			return nil
		})
		if err != nil {
			if !errors.Is(err, device.ErrDeviceFailed) {
				errs = append(errs, err)
			}
			continue
		}
		for _, k := range keys {
			e.adoptCopy(ctx, d, k)
		}
	}
	// Copies whose deletion their holder missed are not records.
	e.rec.mu.Lock()
	defer e.rec.mu.Unlock()
	for dev, m := range e.rec.missed {
		for key, r := range m {
			for _, h := range slices.Clone(r.holders) {
				if cleared, ok := e.rec.missed[h][string(recordKey(dev, []byte(key)))]; ok && cleared.deleted {
					r.dropHolder(h)
				}
			}
			if len(r.holders) == 0 {
				delete(m, key)
			}
		}
	}
	return errors.Join(errs...)
}
