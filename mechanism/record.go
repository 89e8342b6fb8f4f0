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
	// deleted: the last write missed was a delete, so once no other
	// device holds a piece of the key, the key does not exist.
	deleted bool
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
func (e *Env) recordMiss(ctx context.Context, dev int, key []byte, deleted bool) error {
	rk := recordKey(dev, key)
	defer e.lockRecord(rk)()
	e.rec.mu.Lock()
	var was []int // holders of an earlier record of the key, rewritten too
	if r, ok := e.rec.missed[dev][string(key)]; ok {
		if r.deleted == deleted && len(r.holders) > 0 {
			short := len(r.holders) < recordCopies
			e.rec.mu.Unlock()
			if short {
				// A holder was lost (replaced) or missed the write: one
				// copy alone would be gone with its device, and the
				// device that missed the key would come back trusted.
				e.copyRecordLocked(ctx, dev, key, deleted)
			}
			return nil
		}
		was = r.holders
	}
	e.rec.missed[dev][string(key)] = &record{deleted: deleted}
	e.rec.mu.Unlock()

	val := recordValue(key, deleted)
	var ops []Op
	for i := 1; i < e.N() && len(ops) < recordCopies; i++ {
		d := e.Dev(dev, i)
		if e.State(d) != Failed {
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
	var holders []int
	for i := range ops {
		if ops[i].Err == nil || slices.Contains(was, ops[i].Dev) {
			holders = append(holders, ops[i].Dev)
		}
	}
	e.rec.mu.Lock()
	if r, ok := e.rec.missed[dev][string(key)]; ok {
		r.holders = holders
	}
	e.rec.mu.Unlock()
	// A holder that had missed the deletion of an earlier copy of this
	// record holds a current one now.
	for _, h := range holders {
		if e.missed(h, rk) {
			e.clearMiss(ctx, h, rk)
		}
	}
	if len(holders) == 0 {
		return fmt.Errorf("device %d missed a write of %q: %w", dev, key, ErrNotRecorded)
	}
	if len(holders) < recordCopies {
		e.copyRecordLocked(ctx, dev, key, deleted) // a holder failed under the write: another takes it
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
	r := e.rec.missed[target][string(key)]
	if r == nil {
		r = &record{deleted: len(v.Fields) == 1 && v.Fields[0] == 1}
		e.rec.missed[target][string(key)] = r
	}
	if !slices.Contains(r.holders, holder) {
		r.holders = append(r.holders, holder)
	}
}

// recordValue is the stored form of a record of key: the key, framed,
// and whether the miss was a delete.
func recordValue(key []byte, deleted bool) []byte {
	kind := byte(0)
	if deleted {
		kind = 1
	}
	h := format.Header{RM: format.RMNone, Splits: 1, SplitLen: uint32(len(key)), ObjectLen: uint64(len(key)), Fields: []byte{kind}}
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
		target  int
		key     string
		deleted bool
	}
	var lost []held
	e.rec.mu.Lock()
	for target, m := range e.rec.missed {
		for key, r := range m {
			if slices.Contains(r.holders, dev) {
				r.holders = slices.DeleteFunc(r.holders, func(h int) bool { return h == dev })
				lost = append(lost, held{target, key, r.deleted})
			}
		}
	}
	e.rec.mu.Unlock()
	for _, h := range lost {
		e.copyRecord(ctx, h.target, []byte(h.key), h.deleted)
	}
}

// copyRecord writes record (target, key) to devices that do not hold it
// yet until it has recordCopies holders, never to dev target itself.
func (e *Env) copyRecord(ctx context.Context, target int, key []byte, deleted bool) {
	defer e.lockRecord(recordKey(target, key))()
	e.copyRecordLocked(ctx, target, key, deleted)
}

// copyRecordLocked is copyRecord under the record's lock.
func (e *Env) copyRecordLocked(ctx context.Context, target int, key []byte, deleted bool) {
	e.rec.mu.Lock()
	r := e.rec.missed[target][string(key)]
	if r == nil {
		e.rec.mu.Unlock()
		return
	}
	have := slices.Clone(r.holders)
	e.rec.mu.Unlock()
	val := recordValue(key, deleted)
	rk := recordKey(target, key)
	var ops []Op
	for i := 1; i < e.N() && len(have)+len(ops) < recordCopies; i++ {
		d := e.Dev(target, i)
		if e.State(d) != Failed && !slices.Contains(have, d) {
			ops = append(ops, Op{Dev: d, Op: device.Op{Kind: device.OpStore, Key: rk, Value: val}})
		}
	}
	e.do(context.WithoutCancel(ctx), ops)
	e.rec.mu.Lock()
	defer e.rec.mu.Unlock()
	if r := e.rec.missed[target][string(key)]; r != nil {
		for i := range ops {
			if ops[i].Err == nil && !slices.Contains(r.holders, ops[i].Dev) {
				r.holders = append(r.holders, ops[i].Dev)
			}
		}
	}
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
			r.holders = slices.DeleteFunc(r.holders, func(h int) bool {
				cleared, ok := e.rec.missed[h][string(recordKey(dev, []byte(key)))]
				return ok && cleared.deleted
			})
			if len(r.holders) == 0 {
				delete(m, key)
			}
		}
	}
	return errors.Join(errs...)
}
