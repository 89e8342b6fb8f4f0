package array

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// CallOption modifies one call.
type CallOption func(*call)

type call struct{ rm string }

// Using stores the value with the named mechanism regardless of the mode
// (KVMD's custom mode).
func Using(rm string) CallOption { return func(c *call) { c.rm = rm } }

// shown quotes a key for messages, cut short when long.
func shown(key []byte) string {
	if len(key) > 48 {
		return fmt.Sprintf("%q… (%d bytes)", key[:48], len(key))
	}
	return fmt.Sprintf("%q", key)
}

// keyError is the error of an operation on one key, formatted only when
// shown: a read of a missing key is answered by errors.Is alone, and
// fmt.Errorf quoting the key was about a tenth of such a read's CPU.
type keyError struct {
	op  string
	key []byte // a copy: the caller may reuse its buffer
	err error
}

func (e *keyError) Error() string { return e.op + " " + shown(e.key) + ": " + e.err.Error() }
func (e *keyError) Unwrap() error { return e.err }

// opError wraps err, of op on key, with both (see keyError).
func opError(op string, key []byte, err error) error {
	return &keyError{op: op, key: bytes.Clone(key), err: err}
}

// located is what the array learned of a split by reading where it lives.
type located struct {
	m    mechanism.Mechanism
	have []mechanism.Piece // pieces read, have[0] the primary's
	hdr  format.Header     // of the newest good piece, or from a locator
	// payload of the primary's piece when it is the newest good one.
	payload []byte
	lay     *layout // once read (layoutOf)
}

func (l *located) header() *format.Header { return &l.hdr }

// locator is implemented by mechanisms whose pieces are not all under the
// data key (Packing): they can find a split whose primary piece is lost.
type locator interface {
	Locate(ctx context.Context, k mechanism.Key) (format.Header, bool, error)
}

// outOfPlace is implemented by mechanisms that write the pieces past the
// primary under the key the version selects (mechanism.Banked): an
// overwrite gets a version whose bank is not the replaced value's, and
// overwrites only the primary's piece of it.
type outOfPlace interface{ WritesOutOfPlace() bool }

// banksPastPrimary reports whether m writes the pieces past the primary of
// a write of version v under the bank key.
func banksPastPrimary(m mechanism.Mechanism, v uint64) bool {
	o, ok := m.(outOfPlace)
	return ok && o.WritesOutOfPlace() && mechanism.Banked(1, v)
}

// releaseChecker is implemented by mechanisms whose pieces carry more than
// the value (Packing: a set that other values depend on): asked before a
// store of another mechanism overwrites the primary's piece, it fails when
// releasing it would cost other values their redundancy.
type releaseChecker interface {
	CheckRelease(ctx context.Context, k mechanism.Key, prev *mechanism.Prev) error
}

// prevM is the mechanism of prev, nil for none.
func prevM(prev *located) mechanism.Mechanism {
	if prev == nil {
		return nil
	}
	return prev.m
}

// needsPrevious is implemented by mechanisms that must be handed the
// previous value of a split they overwrite, payload included (Packing),
// so the array reads before writing for them even in standalone mode.
type needsPrevious interface{ NeedsPrevious() bool }

// releaseMissed lets go of an old piece of split k on its primary that
// the primary's record says it missed writes of, before a store or a
// repair overwrites it. Such a piece may be a Packing member its set
// still lists: the store that moved the key on could not patch it out of
// the parities while the primary was down, so the set still needs its
// bytes, and members lost to the same faults may be reconstructible only
// with them. It leaves its set first (patched out with its own bytes, now
// readable), exactly as a store with the primary up does; when that
// cannot be done the caller must not overwrite the piece. current is the
// version the caller writes or repairs: a piece of it is no old piece.
func (a *Array) releaseMissed(ctx context.Context, k mechanism.Key, current uint64) error {
	if !a.env.Missing(k.Primary, k.Data()) {
		return nil
	}
	ops := []mechanism.Op{{Dev: k.Primary, Op: device.Op{Kind: device.OpRetrieve, Key: k.Data()}}}
	a.env.Do(ctx, ops)
	if ops[0].Hidden == nil {
		return nil
	}
	v, err := format.Decode(ops[0].Hidden)
	if err != nil || v.Version == current {
		return nil
	}
	lg, ok := a.byRM[v.RM].(letGoer)
	if !ok {
		return nil // its pieces carry nothing for other values
	}
	if err := lg.LetGo(ctx, k, v); err != nil {
		return fmt.Errorf("let go of the old piece of split %d on device %d, which missed newer writes: %w", k.Split, k.Primary, err)
	}
	return nil
}

// dropUncommitted deletes, best effort, the pieces past the primary of
// split 0 of a store of version v that failed before its commit point
// (its piece on the primary) landed. They are under the bank key, apart
// from the old value, which stays current and whole; but they are newer,
// so a read that cannot use the primary would take them for the value,
// and fail when too few landed to decode. The store failed, so either
// value may be read: the old one is. Not called once the primary's piece
// was sent (mechanism.ErrCommitUnknown): an unreadable primary then says
// nothing of whether it landed. Only pieces read back as version v
// go: the bank key may hold another write's (the caller holds the key's
// lock, so none lands between the read and the delete).
func (a *Array) dropUncommitted(ctx context.Context, key []byte, m mechanism.Mechanism, v uint64) {
	if !banksPastPrimary(m, v) {
		return
	}
	k := a.key(key, 0)
	if p := a.env.Read(ctx, k.Data(), []int{k.Primary})[0]; p.OK() && p.Value.Version == v {
		return // committed: the store failed past it
	}
	var devs []int
	for _, p := range a.env.Read(ctx, k.Bank(), a.env.Span(k, 1, m.Width())) {
		if p.OK() && p.Value.Version == v {
			devs = append(devs, p.Dev)
		}
	}
	if len(devs) > 0 {
		_ = a.env.Delete(ctx, k.Bank(), devs, len(devs))
	}
}

// letGoer is implemented by mechanisms whose pieces other values may
// depend on (Packing: a set's member): see releaseMissed.
type letGoer interface {
	LetGo(ctx context.Context, k mechanism.Key, v format.Value) error
}

// retrieveSplit is m.Retrieve of split k, located at version v, with its
// rewrites held back from an old piece on k's primary that a Packing set
// may still need (see releaseMissed): when the piece cannot leave its set
// yet, the read rewrites nothing.
func (a *Array) retrieveSplit(ctx context.Context, m mechanism.Mechanism, k mechanism.Key, have []mechanism.Piece, v uint64) ([]byte, format.Header, error) {
	if err := a.releaseMissed(ctx, k, v); err != nil {
		ctx = mechanism.WithDryRun(ctx, &mechanism.DryRun{})
	}
	return m.Retrieve(ctx, k, have)
}

// locate finds which mechanism wrote split k: from the primary's header
// when it reads well, else from the newest good piece on the devices that
// can hold pieces under the data key.
func (a *Array) locate(ctx context.Context, k mechanism.Key) (*located, error) {
	return a.locateFrom(ctx, k, a.env.Read(ctx, k.Data(), []int{k.Primary}))
}

// locateFrom is locate with the primary's piece already read: have holds
// just that piece.
func (a *Array) locateFrom(ctx context.Context, k mechanism.Key, have []mechanism.Piece) (*located, error) {
	p := &have[0]
	// A piece of another version on the primary of a later split (a
	// store that failed after partly landing) says nothing of where the
	// wanted version is: ask the other devices as for a lost piece.
	otherVersion := p.OK() && k.Want != 0 && p.Value.Version != k.Want
	if otherVersion {
		have = a.readNeighbours(ctx, k, have)
	}
	if !p.OK() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// A not-found is an answer to trust: a device that may have
		// missed the key answers mechanism.ErrStale instead.
		if errors.Is(p.Err, device.ErrNotFound) {
			if k.Want != 0 {
				// A split of a value whose split 0 was read: missing is
				// lost, not absent.
				return nil, mechanism.Lost(k, "array", have, "split missing")
			}
			if k.Split == 0 {
				return nil, ErrNotFound
			}
			return nil, fmt.Errorf("split %d: %w", k.Split, ErrNotFound)
		}
		// The primary cannot tell (failed, corrupt, stale, or being
		// rebuilt): ask the devices that can hold pieces under the data
		// key too, and trust the newest.
		have = a.readPastPrimary(ctx, k, have)
	}
	newest := func() int {
		best := -1
		for i := range have {
			q := &have[i]
			if q.OK() && (k.Want == 0 || q.Value.Version == k.Want) && (best < 0 || q.Value.Version > have[best].Value.Version) {
				best = i
			}
		}
		return best
	}
	best := newest()
	for best > 0 && k.Want == 0 && a.cutShort(k, have, best) {
		// The pieces of a write a crash cut short, newer than the value
		// it was replacing, are not the key's value: the value is the
		// newest write before it.
		v := have[best].Value.Version
		have = slices.DeleteFunc(have, func(q mechanism.Piece) bool { return q.OK() && q.Value.Version == v })
		best = newest()
	}
	if best != 0 && !(best > 0 && k.Want != 0) {
		// The primary cannot answer for itself: a piece on a neighbour
		// may be a copy that an interrupted change of mechanism left
		// behind, older than a member its set knows of. The newest wins.
		for _, m := range a.mechs {
			if lc, ok := m.(locator); ok {
				h, found, err := lc.Locate(ctx, k)
				if err != nil {
					if best >= 0 {
						continue // what the devices hold still answers
					}
					return nil, err
				}
				if found && (k.Want == 0 || h.Version == k.Want) && (best < 0 || h.Version > have[best].Value.Version) {
					return &located{m: m, have: have, hdr: h}, nil
				}
			}
		}
	}
	if best < 0 && a.unacknowledgedMiss(ctx, k, have) {
		best = 0
	}
	if best < 0 {
		if errors.Is(p.Err, format.ErrCorrupt) || k.Want != 0 {
			return nil, mechanism.Lost(k, "array", have, "no readable header")
		}
		// The primary missed a delete and no other device holds a piece:
		// the delete is the last word.
		if errors.Is(p.Err, mechanism.ErrStale) && a.env.MissedDelete(k.Primary, k.Data()) {
			return nil, ErrNotFound
		}
		if k.Split == 0 && a.absentProvable() {
			return nil, ErrNotFound
		}
		// p.Err is detail, not wrapped: a not-found from a device being
		// rebuilt must not read as "the key does not exist".
		return nil, fmt.Errorf("split %d: %w: primary device %d cannot answer (%v) and no other device holds a piece",
			k.Split, ErrUnavailable, k.Primary, p.Err)
	}
	m, ok := a.byRM[have[best].Value.RM]
	if !ok {
		return nil, fmt.Errorf("split %d on device %d was written by mechanism id %d, which is not configured: %w",
			k.Split, have[best].Dev, have[best].Value.RM, ErrUnknownMechanism)
	}
	l := &located{m: m, have: have, hdr: have[best].Value.Header}
	if best == 0 {
		l.payload = have[0].Value.Payload
	}
	if _, ok := m.(outOfPlace); !ok {
		// Bank pieces are Splitting's alone: another mechanism must
		// not take them for its pieces on their devices.
		l.have = slices.DeleteFunc(have, func(p mechanism.Piece) bool { return p.Bank })
	}
	return l, nil
}

// unacknowledgedMiss reports whether the primary's record of a missed
// store of split k names no acknowledged write, and if so puts the piece
// it hid in have[0], vouched for (the record cleared, unless in a dry
// run). have holds what locate read: the primary's stale answer and, past
// it, the data and bank keys of every device a piece can be on.
//
// An acknowledged store has a piece or a durable record on every device
// of its width (Env.Acknowledge), and a width of one (Hashing) records
// nothing: it lands on the primary or fails. So when every other device
// that can hold a piece of k is healthy, has no record of k, and answered
// that it holds none, and no mechanism that keeps its values elsewhere
// (Packing's sets) knows the key, the record belongs to a store that
// failed: one that recorded the primary's miss before another miss of
// its own could not be recorded, and whose other pieces were dropped as
// uncommitted, or one a crash cut short. The piece it hides is then the
// last acknowledged value; refusing it as stale made that value
// unreadable and its device impossible to resync (issue 40).
func (a *Array) unacknowledgedMiss(ctx context.Context, k mechanism.Key, have []mechanism.Piece) bool {
	if !errors.Is(have[0].Err, mechanism.ErrStale) || a.env.State(k.Primary) != mechanism.Healthy ||
		a.env.MissedDelete(k.Primary, k.Data()) {
		return false
	}
	w := min(a.maxWidth, a.env.N())
	for off := 1; off < w; off++ {
		d := a.env.At(k, off)
		if a.env.State(d) != mechanism.Healthy || a.env.Missing(d, k.Data()) || a.env.Missing(d, k.Bank()) {
			return false
		}
	}
	answered := 0
	for i := 1; i < len(have); i++ {
		if !errors.Is(have[i].Err, device.ErrNotFound) {
			return false
		}
		answered++
	}
	if w > 1 && answered != 2*(w-1) {
		return false // not every device past the primary was asked
	}
	ops := []mechanism.Op{{Dev: k.Primary, Op: device.Op{Kind: device.OpRetrieve, Key: k.Data()}}}
	a.env.Do(ctx, ops)
	if ops[0].Hidden == nil {
		return false
	}
	v, err := format.Decode(ops[0].Hidden)
	if err != nil || (k.Want != 0 && v.Version != k.Want) {
		return false
	}
	if _, ok := a.byRM[v.RM]; !ok {
		return false
	}
	if !mechanism.DryRunning(ctx) {
		a.env.Vouch(ctx, k.Primary, k.Data())
	}
	have[0] = mechanism.Piece{Dev: k.Primary, Value: v}
	return true
}

// cutShort reports whether have[best], the newest piece found past k's
// primary while the primary cannot answer, is of a write that a crash cut
// short: too few of its pieces are readable to read it (fewer than its
// mechanism's width less its tolerance), and it was never acknowledged.
// A write is acknowledged only once each device of its width took its
// piece or has a durable record of the miss (Env.Acknowledge), so each
// device that is healthy, answered, and holds neither a piece of it nor
// such a record is proof; a device that cannot tell counts as holding
// one. Without this, with the primary lost before any repair, the cut
// write's pieces made the value it was replacing, still whole on the
// other devices, unreadable (a crash, then a device lost).
//
// Packing is left out: a member's newest listing is its sets' to settle
// (Packing's supersedes), and its pieces are whole members.
func (a *Array) cutShort(k mechanism.Key, have []mechanism.Piece, best int) bool {
	m, ok := a.byRM[have[best].Value.RM]
	if !ok {
		return false
	}
	if _, ok := m.(locator); ok {
		return false
	}
	v := have[best].Value.Version
	w := min(m.Width(), a.env.N())
	good := 0
	for i := range have {
		if have[i].OK() && have[i].Value.Version == v {
			good++
		}
	}
	if good >= w-m.Tolerates() {
		return false
	}
	accounted := 0
	for off := range w {
		if a.mayHold(k, have, a.env.At(k, off), v) {
			accounted++
		}
	}
	return accounted < w
}

// mayHold reports whether device d may hold a piece of split k's write of
// version v, or a record that it missed it, as far as have (the pieces
// read) and the device's state tell.
func (a *Array) mayHold(k mechanism.Key, have []mechanism.Piece, d int, v uint64) bool {
	if a.env.State(d) != mechanism.Healthy || a.env.Missing(d, k.Data()) || a.env.Missing(d, k.Bank()) {
		return true
	}
	read := false
	for i := range have {
		q := &have[i]
		if q.Dev != d {
			continue
		}
		read = true
		switch {
		case q.OK() && q.Value.Version == v:
			return true
		case q.OK(), errors.Is(q.Err, device.ErrNotFound):
		default:
			return true // stale, corrupt, failed: it cannot tell
		}
	}
	return !read
}

// readNeighbours appends to have the pieces of k on the devices past its
// primary that can hold any, under the data key and the bank key.
func (a *Array) readNeighbours(ctx context.Context, k mechanism.Key, have []mechanism.Piece) []mechanism.Piece {
	w := min(a.maxWidth, a.env.N())
	if w <= 1 {
		return have
	}
	var bank []mechanism.Piece
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		bank = a.env.ReadBankSpan(ctx, k, 1, w, nil)
	}()
	have = append(have, a.env.ReadSpan(ctx, k, 1, w, nil)...)
	wg.Wait()
	return append(have, bank...)
}

// readPastPrimary is readNeighbours for a locate whose primary was not
// asked (slow, or failed), reading first the next device alone (offset
// 1, its data and bank keys). Every value whose mechanism tolerates a
// lost device has a piece there, or that device a record of missing it,
// but a Packing member's, which its set's index finds (locateFrom asks
// it). So when that device is healthy with no record of the key, no write
// of the key can have been cut short (mustSettle: a store cut short may
// have left newer pieces past it), and no value without redundancy can
// hide behind the primary (absentProvable), what the next device holds
// decides as all the neighbours' would: its piece is of the newest value
// past the primary, and its not-found proves the key absent unless
// Packing knows it. Otherwise, or when it cannot answer, every neighbour
// is read. The mechanism's read then reads the other pieces it needs: a
// read of a slow device's key costs 2 device reads instead of 10 (issue
// 40, item 4: GET with one device slow).
func (a *Array) readPastPrimary(ctx context.Context, k mechanism.Key, have []mechanism.Piece) []mechanism.Piece {
	if k.Want != 0 || a.env.Answering(k.Primary) || a.env.N() < 2 || a.env.State(a.env.At(k, 1)) != mechanism.Healthy ||
		a.mustSettle(k.User) || !a.absentProvable() {
		return a.readNeighbours(ctx, k, have)
	}
	next := a.env.ReadBoth(ctx, k, 1)
	for i := range next {
		if !next[i].OK() && !errors.Is(next[i].Err, device.ErrNotFound) {
			return a.readNeighbours(ctx, k, have)
		}
	}
	return append(have, next...)
}

// Store writes value under key, replacing any previous value.
func (a *Array) Store(ctx context.Context, key, value []byte, opts ...CallOption) error {
	c := callOf(opts)
	m, err := a.prepareStore(key, value, c)
	if err != nil {
		return opError("store", key, err)
	}
	_, err = a.run(ctx, key, "store", func() ([]byte, error) {
		return nil, a.store(ctx, key, value, m, c)
	})
	return err
}

// Retrieve returns the value stored under key.
func (a *Array) Retrieve(ctx context.Context, key []byte) ([]byte, error) {
	if err := a.checkUserKey(key); err != nil {
		return nil, opError("retrieve", key, err)
	}
	return a.run(ctx, key, "retrieve", func() ([]byte, error) { return a.retrieve(ctx, key) })
}

// Delete removes key and every piece of it; ErrNotFound if it is absent.
func (a *Array) Delete(ctx context.Context, key []byte) error {
	if err := a.checkUserKey(key); err != nil {
		return opError("delete", key, err)
	}
	_, err := a.run(ctx, key, "delete", func() ([]byte, error) { return nil, a.remove(ctx, key) })
	return err
}

// noted updates the metadata cache with what a read of key under its lock
// learned: l located its value (err nil), or it has none (ErrNotFound).
// Any other error says nothing, and changes nothing either.
func (a *Array) noted(key []byte, l *located, err error) {
	switch {
	case err == nil:
		a.meta.put(key, l.m, l.hdr, nil)
	case errors.Is(err, ErrNotFound):
		a.meta.put(key, nil, format.Header{}, nil)
	}
}

// Exist reports whether key exists.
func (a *Array) Exist(ctx context.Context, key []byte) (bool, error) {
	if err := a.checkUserKey(key); err != nil {
		return false, opError("exist", key, err)
	}
	if err := a.begin(); err != nil {
		return false, err
	}
	defer a.end()
	return a.exists(ctx, key)
}

// exists is Exist once the array is entered.
func (a *Array) exists(ctx context.Context, key []byte) (bool, error) {
	tk, err := a.locks.Lock(ctx, key)
	if err != nil {
		return false, err
	}
	defer tk.Release()
	if a.tinyKey(key) {
		if _, found, err := a.tinyLookup(ctx, key); err != nil || found {
			return found, err
		}
	}
	l, err := a.locate(ctx, a.key(key, 0))
	a.noted(key, l, err)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotFound):
		return false, nil
	}
	return false, opError("exist", key, err)
}

// splitsFor returns how many splits a value of n bytes takes with m.
func splitsFor(m mechanism.Mechanism, n int) int {
	c := m.SplitCap()
	return max(1, (n+c-1)/c)
}

func (a *Array) prepareStore(key, value []byte, c call) (mechanism.Mechanism, error) {
	if err := a.checkUserKey(key); err != nil {
		return nil, err
	}
	if int64(len(value)) > a.o.maxValue {
		return nil, fmt.Errorf("value of %d bytes, maximum %d: %w", len(value), a.o.maxValue, ErrValueTooLarge)
	}
	m, err := a.mechanismFor(len(value), c.rm)
	if err != nil {
		return nil, err
	}
	if n := splitsFor(m, len(value)); n > a.maxDataSplits(m) {
		return nil, fmt.Errorf("value of %d bytes needs %d splits with %s, at most %d: %w", len(value), n, m.Name(), a.maxDataSplits(m), ErrValueTooLarge)
	}
	return m, nil
}

// store runs under key's lock: to key's bucket or to its own pieces
// (tiny.go), or to its own pieces on an array without tiny values.
func (a *Array) store(ctx context.Context, key, value []byte, m mechanism.Mechanism, c call) error {
	if a.tinyKey(key) {
		// Its own pieces too: the tiny path writes them only when the
		// value moves out of its bucket (storeValue settles its bucket's).
		a.settleFirst(ctx, key)
		return a.storeTiny(ctx, key, value, m, c)
	}
	return a.storeValue(ctx, key, value, m, c)
}

// storeValue stores key's value under its own keys (split pieces), never
// in a bucket; under key's lock.
func (a *Array) storeValue(ctx context.Context, key, value []byte, m mechanism.Mechanism, c call) (err error) {
	a.settleFirst(ctx, key)
	var written *format.Header // the new value's, once it is in place
	defer func() {
		if err != nil {
			a.unsettle(key)
		}
		if err != nil || written == nil {
			a.meta.forget(key)
			return
		}
		a.meta.put(key, m, *written, value)
	}()
	n := splitsFor(m, len(value)) // splits holding bytes
	// A huge value on a banked array is written in the manifest layout
	// (manifest.go): its split 0 holds the manifest, splits 1..n the bytes.
	manifest := a.banked && n > 1
	internal := n
	if manifest {
		internal = n + 1
	}
	if m.Tolerates() == 0 {
		if err := a.markFlag(ctx, flagUnprotected, "a value without redundancy"); err != nil {
			return err
		}
	}
	if c.rm != "" && m != a.def && a.o.mode == Standalone {
		if err := a.markFlag(ctx, flagMixed, "custom-mode use"); err != nil {
			return err
		}
	}
	var prev *located
	unread := false // a previous value may exist, but could not be read
	if a.readsBeforeWrite(m, c, n) {
		var err error
		if prev, unread, err = a.previous(ctx, key, m); err != nil {
			return err
		}
	}
	var ph *format.Header
	var py *layout // prev's
	prevSplits := 0
	if prev != nil {
		var err error
		if py, err = a.layoutOf(ctx, key, prev); err != nil {
			if !unreadable(err) {
				return fmt.Errorf("read previous value: %w", err)
			}
			// Nothing readable to update, as for previous: what is left
			// of it is swept as orphans.
			prev, unread = nil, true
		}
	}
	if prev != nil {
		ph = prev.header()
		prevSplits = py.splits
		a.env.Clock().Observe(ph.Version)
	}
	prevFor := func(s int) *mechanism.Prev {
		p := &mechanism.Prev{Header: *py.hint(s)}
		if s == 0 {
			p.Payload = prev.payload
		}
		return p
	}
	// The versions of a manifest's data splits: each in the bank its
	// split in prev does not use, so that no piece of prev is
	// overwritten before split 0 commits the new value. Split 0's version,
	// taken last, is the newest.
	var dataVersions []uint64
	if manifest {
		vs := a.bankVersions()
		dataVersions = make([]uint64, n)
		for s := 1; s <= n; s++ {
			b := uint64(0)
			if prev != nil && s < py.splits {
				b = py.version(s)&1 ^ 1
			}
			dataVersions[s-1] = vs[b]
		}
	}
	obj := mechanism.Object{Splits: uint32(internal), ObjectLen: uint64(len(value)), Version: a.env.Clock().Next()}
	for !a.versionFits(obj.Version, m, prev) {
		obj.Version = a.env.Clock().Next()
	}
	y := &layout{h0: format.Header{Version: obj.Version}, splits: internal, size: int64(m.SplitCap()), length: int64(len(value)),
		manifest: manifest, versions: dataVersions}
	if manifest {
		obj.Splits += manifestBit
	}
	if rc, ok := prevM(prev).(releaseChecker); ok && prev.m != m {
		// Refused before anything is written: the new value would
		// overwrite a piece the old mechanism cannot let go.
		if err := rc.CheckRelease(ctx, a.key(key, 0), prevFor(0)); err != nil {
			return err
		}
	}
	// The new value is written first and what the old one leaves beyond it
	// is released after: a store that fails midway then leaves the old
	// value with all its redundancy, rather than neither value whole.
	// inPlace: the new value's split s is stored under the same key as
	// the old one's (always split 0; every split when not banked).
	inPlace := func(s int) bool { return s < internal && s < prevSplits && (s == 0 || !a.banked) }
	releaseSplit := func(ctx context.Context, s int) error {
		keep := 0
		if inPlace(s) {
			if prev.m == m {
				return nil // m.Store updates it in place
			}
			keep = m.Width()
			if banksPastPrimary(m, obj.Version) {
				keep = 1 // the old pieces past the primary were not touched
			}
		}
		return prev.m.Release(ctx, a.splitKey(key, s, py.version(s)), prevFor(s), keep)
	}
	released0 := false // split 0 released before its primary was overwritten
	release := func() error {
		err := releaseInOrder(prevSplits, func(s int) error {
			if s == 0 && released0 {
				return nil
			}
			return releaseSplit(ctx, s)
		})
		if err != nil {
			return fmt.Errorf("release previous value: %w", err)
		}
		return nil
	}
	var precommit func(context.Context, bool) error
	if _, ok := prevM(prev).(releaseChecker); ok && prev.m != m {
		// A Packing member's set may need its bytes until it records the
		// leave, so it is released before the new value's primary piece
		// overwrites it: a leave that fails then fails the store with
		// the member whole. Unless the new value's other pieces are not
		// durable yet (not ready) and the member's own piece is bad (its
		// value lives in its set alone): then it leaves after the store,
		// as for any mechanism, not to drop a value the store may fail
		// to replace.
		precommit = func(ctx context.Context, ready bool) error {
			k0 := a.key(key, 0)
			own := a.env.State(k0.Primary) == mechanism.Healthy && !a.env.Missing(k0.Primary, k0.Data())
			if !ready && !own {
				return nil
			}
			if err := releaseSplit(ctx, 0); err != nil {
				return fmt.Errorf("release previous value: %w", err)
			}
			released0 = true
			return nil
		}
	}
	storeSplit := func(s int) error {
		var pv *mechanism.Prev
		if prev != nil && prev.m == m && inPlace(s) {
			pv = prevFor(s)
		}
		o := obj
		var data []byte
		switch lo, hi := y.span(s); {
		case manifest && s == 0:
			data = y.encode()
		case manifest:
			o = mechanism.Object{Splits: 1, ObjectLen: uint64(hi - lo), Version: y.version(s)}
			data = value[lo:hi]
		default:
			data = value[lo:hi]
		}
		k := a.splitKey(key, s, o.Version)
		if err := a.releaseMissed(ctx, k, o.Version); err != nil {
			return err
		}
		if s == 0 {
			o.Precommit = precommit
		}
		return m.Store(ctx, k, o, data, pv)
	}
	if a.banked && internal > 1 {
		// Split 0 last: it is what makes the new value the current one.
		// Whether it can be written is known before any split is: if
		// not, the splits written first are lost with it, and where
		// the previous value is unknown (prev nil: its primary cannot
		// answer, as when that is split 0's failed device) they may
		// share its bank and overwrite its splits, losing both values.
		k0 := a.splitKey(key, 0, obj.Version)
		err = a.env.Reachable(a.env.Span(k0, 0, min(m.Width(), a.env.N())), m.Tolerates())
		if err == nil {
			err = a.forSplits(ctx, internal-1, func(i int) error { return storeSplit(i + 1) })
		}
		if err == nil {
			err = storeSplit(0)
		}
	} else {
		err = a.forSplits(ctx, internal, storeSplit)
	}
	if err != nil && prev != nil && !errors.Is(err, mechanism.ErrCommitUnknown) {
		a.dropUncommitted(ctx, key, m, obj.Version)
	}
	if err != nil && prev != nil && prev.m != m {
		// A failed store may still have overwritten some of the old
		// value's pieces. Where those carry more than the value itself
		// (Packing: a set that lists the member), leave them describing
		// a value that is gone and a later loss would bring it back: so
		// release them anyway once the primary no longer holds the old
		// value.
		if _, ok := prev.m.(needsPrevious); ok {
			p := a.env.Read(ctx, a.key(key, 0).Data(), []int{a.primary(key, 0)})[0]
			if p.OK() && p.Value.Version != ph.Version {
				_ = release()
			}
		}
		return err
	}
	if err == nil {
		_, hi := y.span(0)
		if manifest {
			hi = int64(len(y.encode()))
		}
		written = &format.Header{RM: m.RM(), Splits: obj.Splits, SplitLen: uint32(hi), ObjectLen: obj.ObjectLen, Version: obj.Version}
	}
	if err == nil && unread {
		return a.releaseUnread(ctx, a.splitKey(key, 0, obj.Version), m, obj.Version)
	}
	if err != nil || prev == nil {
		return err
	}
	// KVMD's num_user_key rule: the old mechanism removes what it stored
	// past the devices the new one overwrote, and the excess splits.
	return release()
}

// versionFits reports whether a store by m over prev (nil when unknown)
// may take version v for split 0: a mechanism writing out of place must
// take the other bank of pieces past the primary (mechanism.Banked) than
// what prev's pieces there are under. (A huge value's data splits choose
// their banks themselves: see storeValue.)
func (a *Array) versionFits(v uint64, m mechanism.Mechanism, prev *located) bool {
	if prev == nil {
		return true
	}
	if o, ok := m.(outOfPlace); ok && o.WritesOutOfPlace() {
		return banksPastPrimary(m, v) != banksPastPrimary(prev.m, prev.header().Version)
	}
	return true
}

// readsBeforeWrite: hybrid stores must learn the previous mechanism; so
// must custom stores and any store once the array is mixed, and stores by
// a mechanism that must know what it replaces (needsPrevious, outOfPlace:
// which bank to write). A standalone store of a huge value also reads, to
// remove excess splits of the value it replaces (a negligible cost next
// to the value itself).
func (a *Array) readsBeforeWrite(m mechanism.Mechanism, c call, n int) bool {
	if a.o.mode == Hybrid || c.rm != "" || n > 1 || needsPayload(m) {
		return true
	}
	if o, ok := m.(outOfPlace); ok && o.WritesOutOfPlace() {
		return true
	}
	a.hdrMu.Lock()
	defer a.hdrMu.Unlock()
	return a.hdr.flags&flagMixed != 0
}

// needsPayload reports whether m must be given the previous value's
// payload (needsPrevious), which only a read of the devices has.
func needsPayload(m mechanism.Mechanism) bool {
	np, ok := m.(needsPrevious)
	return ok && np.NeedsPrevious()
}

// previous returns what key holds, as store needs it: from the metadata
// cache when it knows the key has no value, or knows its value and neither
// m nor the value's mechanism needs the previous payload; else by
// locating it (one read of the primary).
// nil: nothing readable to update; unread then reports that a value may
// still have pieces there (the devices could not say: see releaseUnread).
func (a *Array) previous(ctx context.Context, key []byte, m mechanism.Mechanism) (l *located, unread bool, err error) {
	if l, known := a.cached(key, needsPayload(m)); known {
		return l, false, nil
	}
	l, err = a.locate(ctx, a.key(key, 0))
	switch {
	case err == nil:
		return l, false, nil
	case errors.Is(err, ErrNotFound):
		return nil, false, nil
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrDataLoss):
		// Nothing readable to update: the store replaces whatever is
		// there, and fails if the devices it needs do not answer.
		return nil, true, nil
	}
	return nil, false, fmt.Errorf("read previous value: %w", err)
}

// releaseUnread deletes, after a store by m of version whose previous
// value could not be read, what the devices past m's pieces may hold of
// that value under split 0's keys (k): a read that finds the primary lost, or a
// rebuild of the primary, would take such a copy for the key's value (a
// rebuild restored one over the new piece). A device that cannot take
// the delete (failed) has it recorded, so that its resync deletes the
// piece before it serves again. The delete fails only when such a
// record cannot be written: the store then fails too, its value in
// place (a failed store may have taken effect).
func (a *Array) releaseUnread(ctx context.Context, k mechanism.Key, m mechanism.Mechanism, version uint64) error {
	// The new value's pieces past the primary: under the data key, or
	// under the bank key when its version banks them.
	dataFrom, bankFrom := m.Width(), 1
	if banksPastPrimary(m, version) {
		dataFrom, bankFrom = 1, m.Width()
	}
	var errs []error
	for _, t := range a.sweepTargets(k, dataFrom, bankFrom) {
		if len(t.devs) > 0 {
			errs = append(errs, a.env.Delete(ctx, t.key, t.devs, len(t.devs)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release what the unread previous value left: %w", err)
	}
	return nil
}

// markFlag records an array-wide flag in the array header (flagMixed: a
// standalone array now holds values of more than one mechanism;
// flagUnprotected: it holds values no device loss is tolerated for).
func (a *Array) markFlag(ctx context.Context, flag byte, what string) error {
	a.hdrMu.Lock()
	defer a.hdrMu.Unlock()
	if a.hdr.flags&flag != 0 {
		return nil
	}
	h := a.hdr
	h.flags |= flag
	// One device holding the flag is enough for Open (it ORs the flags),
	// and a device that misses it gets it with the next epoch (Open,
	// Close, Resync): so the flag needs as many devices as a write of
	// any mechanism needs to survive two losses, not every device.
	up := a.upDevices()
	err := writeHeaders(ctx, a.env, h, up)
	took := 0
	for _, i := range up {
		if a.env.Writable(i) {
			took++
		}
	}
	if need := min(3, a.env.N()); took < need {
		return fmt.Errorf("record %s in the array header: %d devices took it, %d needed: %w", what, took, need, err)
	}
	a.hdr = h
	return nil
}

// absentProvable reports whether a key that no device answering holds is
// known not to exist: the array never stored a value that a single loss
// can take (flagUnprotected), and no more devices are failed than every
// redundant mechanism tolerates, so some piece of any value would answer.
func (a *Array) absentProvable() bool {
	a.hdrMu.Lock()
	unprotected := a.hdr.flags&flagUnprotected != 0 || a.hdr.flags&flagBanked == 0
	a.hdrMu.Unlock()
	if unprotected {
		return false
	}
	failed := 0
	for i := 0; i < a.env.N(); i++ {
		if a.env.State(i) != mechanism.Healthy {
			failed++
		}
	}
	for _, m := range a.mechs {
		if t := m.Tolerates(); t > 0 && failed > t {
			return false
		}
	}
	return true
}

// forSplits runs fn for splits 0..n-1, at most parallelism at once, and
// returns the first error.
func (a *Array) forSplits(ctx context.Context, n int, fn func(s int) error) error {
	if n == 1 {
		return fn(0)
	}
	sem := make(chan struct{}, a.o.parallelism)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for s := 0; s < n; s++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[s] = fn(s)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// retrieve runs under key's lock.
func (a *Array) retrieve(ctx context.Context, key []byte) ([]byte, error) {
	if a.tinyKey(key) {
		v, found, err := a.tinyLookup(ctx, key)
		if err != nil || found {
			return bytes.Clone(v), err
		}
	}
	return a.retrieveValue(ctx, key)
}

// retrieveValue reads key's value from its own pieces, never from a
// bucket; under key's lock.
func (a *Array) retrieveValue(ctx context.Context, key []byte) ([]byte, error) {
	// The metadata cache knows exactly whether key has a value of its own
	// pieces, as it knows what a store replaces (see metaCache), and
	// keeps some values whole.
	if e, v, ok := a.meta.lookup(key, true); ok {
		switch {
		case e.m == nil:
			return nil, ErrNotFound
		case v != nil:
			return v, nil
		}
	}
	a.meta.missed()
	k0 := a.key(key, 0)
	l, err := a.locate(ctx, k0)
	a.noted(key, l, err)
	if err != nil {
		return nil, err
	}
	v0, h0, err := a.retrieveSplit(ctx, l.m, k0, l.have, l.header().Version)
	if err != nil {
		return nil, err
	}
	a.env.Clock().Observe(h0.Version)
	var y *layout
	if a.isManifest(&h0) {
		y, err = a.decodeManifest(&h0, v0)
	} else {
		y, err = a.flatLayout(&h0)
	}
	if err != nil {
		return nil, err
	}
	if _, hi := y.span(0); !y.manifest && int64(len(v0)) != hi {
		return nil, fmt.Errorf("split 0 holds %d bytes, %d expected: %w", len(v0), hi, format.ErrCorrupt)
	}
	if y.splits == 1 {
		a.meta.noteHead(key, h0.Version, v0)
		return v0, nil
	}
	out := make([]byte, y.length)
	if !y.manifest {
		copy(out, v0)
	}
	err = a.forSplits(ctx, y.splits-1, func(i int) error {
		s := i + 1
		v, err := a.readSplit(ctx, key, y, s)
		if err != nil {
			return err
		}
		lo, _ := y.span(s)
		copy(out[lo:], v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	a.meta.noteHead(key, h0.Version, out)
	return out, nil
}

// readSplit returns the bytes of split s ≥ 1 of the value y describes,
// verified to be the write split 0 names.
func (a *Array) readSplit(ctx context.Context, key []byte, y *layout, s int) ([]byte, error) {
	k := a.keyIn(key, y, s)
	l, err := a.locate(ctx, k)
	if err != nil {
		return nil, err
	}
	if l.m.RM() != y.h0.RM {
		return nil, fmt.Errorf("split %d written by %s, split 0 by mechanism id %d: %w", s, l.m.Name(), y.h0.RM, format.ErrCorrupt)
	}
	v, h, err := a.retrieveSplit(ctx, l.m, k, l.have, k.Want)
	if err != nil {
		return nil, err
	}
	if err := y.matches(s, &h); err != nil {
		return nil, err
	}
	if lo, hi := y.span(s); int64(len(v)) != hi-lo {
		return nil, fmt.Errorf("split %d holds %d bytes, %d expected: %w", s, len(v), hi-lo, format.ErrCorrupt)
	}
	return v, nil
}

// readSplit0 returns the bytes of split 0 of a flat value y describes,
// whose split 0 l located.
func (a *Array) readSplit0(ctx context.Context, key []byte, l *located, y *layout) ([]byte, error) {
	v, h, err := a.retrieveSplit(ctx, l.m, a.key(key, 0), l.have, y.version(0))
	if err != nil {
		return nil, err
	}
	if err := y.matches(0, &h); err != nil {
		return nil, err
	}
	if _, hi := y.span(0); int64(len(v)) != hi {
		return nil, fmt.Errorf("split 0 holds %d bytes, %d expected: %w", len(v), hi, format.ErrCorrupt)
	}
	return v, nil
}

// remove runs under key's lock.
func (a *Array) remove(ctx context.Context, key []byte) error {
	if a.tinyKey(key) {
		a.settleFirst(ctx, key) // as store
		return a.removeTiny(ctx, key)
	}
	return a.removeValue(ctx, key)
}

// settleFirst repairs key, under its lock, before a write changes it
// while the scrub after an unclean shutdown is due (Unclean), or when a
// write of the key failed in this process (mustSettle). A write the crash
// cut short, or that failed midway, may have left the key's value without
// its redundancy (a Packing member whose set's parities never landed,
// which reads return), pieces of a newer version past the primary (a
// Splitting write's shards in the other bank), or an old set still
// listing it (a move to another Packing set whose leave failed). A write
// that built on that state would be acknowledged with less than its
// mechanism's tolerance: an update logged against parities that do not
// exist, lost with its primary, after which the key read as an older
// write's leftover copy; a delete whose key came back from such shards,
// or from the old set. The repair settles the key on what reads return
// first, as the scrub would. Until that scrub has run, writes pay a read
// of every piece of their key. Best effort: a repair that fails (a
// device down) leaves the write to go on as it would without, and the
// key to be settled again before its next write.
func (a *Array) settleFirst(ctx context.Context, key []byte) {
	if !a.mustSettle(key) {
		return
	}
	ctx = mechanism.WithSettling(ctx)
	_, rerr := a.repair(ctx, key)
	// A set may list a member of key that a crash cut short before its
	// piece landed (the parities written first). No read takes it while
	// the primary answers, but with the primary lost a rebuild restored
	// it over the key's later writes, a delete too. Such a listing is
	// retired now, as a scrub of its set would: every version of key but
	// the one it reads as is superseded.
	k := a.key(key, 0)
	hint := format.Header{Version: math.MaxUint64} // absent: none is kept
	l, err := a.locate(ctx, k)
	switch {
	case err == nil:
		hint = *l.header()
	case !errors.Is(err, ErrNotFound):
		return
	}
	for _, m := range a.mechs {
		if _, ok := m.(locator); ok && (l == nil || l.m != m) {
			// An error here is mostly "not in any set": nothing to retire.
			_, _ = m.Repair(ctx, k, &hint)
		}
	}
	if rerr == nil || errors.Is(rerr, ErrNotFound) {
		a.settledKey(key)
	}
}

// maxUnsettled bounds the keys kept for settling after a failed write;
// past it every write settles its key first until a scrub --repair that
// began after the overflow has completed.
const maxUnsettled = 1 << 16

// mustSettle reports whether key is to be settled before its next write
// (settleFirst): the array's previous process did not close it, or a
// write of key failed in this one (unsettle) and no settle of it has
// succeeded since.
func (a *Array) mustSettle(key []byte) bool {
	if a.unclean.Load() || a.overflow.Load() != 0 {
		return true
	}
	if a.unsettledN.Load() == 0 {
		return false
	}
	a.unsettledMu.Lock()
	defer a.unsettledMu.Unlock()
	_, ok := a.unsettled[string(key)]
	return ok
}

// unsettle records that a write of key failed, perhaps after writing some
// of its pieces.
func (a *Array) unsettle(key []byte) {
	a.unsettledMu.Lock()
	defer a.unsettledMu.Unlock()
	if _, ok := a.unsettled[string(key)]; ok {
		return
	}
	if len(a.unsettled) >= maxUnsettled {
		a.overflow.Add(1)
		return
	}
	if a.unsettled == nil {
		a.unsettled = map[string]struct{}{}
	}
	a.unsettled[string(key)] = struct{}{}
	a.unsettledN.Store(int64(len(a.unsettled)))
}

// settledKey records that key was settled.
func (a *Array) settledKey(key []byte) {
	if a.unsettledN.Load() == 0 {
		return
	}
	a.unsettledMu.Lock()
	defer a.unsettledMu.Unlock()
	delete(a.unsettled, string(key))
	a.unsettledN.Store(int64(len(a.unsettled)))
}

// removeValue deletes key's own pieces, never a bucket entry; under key's
// lock.
func (a *Array) removeValue(ctx context.Context, key []byte) (err error) {
	a.settleFirst(ctx, key)
	defer func() {
		if err == nil || errors.Is(err, ErrNotFound) {
			a.meta.put(key, nil, format.Header{}, nil)
		} else {
			a.meta.forget(key)
			a.unsettle(key)
		}
	}()
	l, err := a.toRemove(ctx, key)
	if err != nil {
		return err
	}
	h := *l.header()
	y, err := a.layoutOf(ctx, key, l)
	if err != nil {
		if !a.isManifest(&h) || needsPayload(l.m) {
			return err
		}
		// A manifest that cannot be read does not say which bank each
		// split is in: split 0 goes, then everything under the data
		// splits' keys in both banks (their pieces carry nothing for
		// other values: their mechanism is not Packing's).
		return releaseInOrder(a.splitsOf(&h), func(s int) error {
			if s == 0 {
				return l.m.Release(ctx, a.key(key, 0), &mechanism.Prev{Header: h, Payload: l.payload}, 0)
			}
			for _, b := range []uint64{0, 1} {
				if _, err := a.sweep(ctx, a.splitKey(key, s, b), 0, 0); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := releaseInOrder(y.splits, func(s int) error {
		p := &mechanism.Prev{Header: *y.hint(s)}
		if s == 0 {
			p.Payload = l.payload
		}
		return l.m.Release(ctx, a.splitKey(key, s, y.version(s)), p, 0)
	}); err != nil {
		return err
	}
	if a.o.mode == Standalone {
		// A standalone store does not read before writing, so a value
		// that once had more splits may have left some behind: remove
		// them too. In hybrid mode every store cleans up as it goes.
		for _, b := range a.leftoverBanks(y) {
			for s := b.from; s < a.maxSplits(); s++ {
				k := a.splitKey(key, s, b.version)
				l, err := a.locate(ctx, k)
				if err != nil {
					break
				}
				if err := l.m.Release(ctx, k, &mechanism.Prev{Header: *l.header()}, 0); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// cached returns what the metadata cache knows of key's value, as a
// store or a delete needs it: nil when the key has no value; known false
// when it must be located (the cache does not know the key, or the value
// is wanted with its payload, or its mechanism needs it to be released).
func (a *Array) cached(key []byte, payload bool) (l *located, known bool) {
	e, ok := a.meta.get(key)
	switch {
	case !ok:
		return nil, false
	case e.m == nil:
		return nil, true
	case payload || needsPayload(e.m):
		return nil, false
	}
	return &located{m: e.m, hdr: e.hdr}, true
}

// toRemove returns key's value as a delete needs it: from the metadata
// cache when it can tell (ErrNotFound: it has no value), else located.
func (a *Array) toRemove(ctx context.Context, key []byte) (*located, error) {
	if l, known := a.cached(key, false); known {
		if l == nil {
			return nil, ErrNotFound
		}
		return l, nil
	}
	return a.locate(ctx, a.key(key, 0))
}

// releaseInOrder runs fn for split 0, then for splits n-1 down to 1, one
// at a time, and stops at the first error. Removed in this order, what a
// crash leaves is findable: once split 0 is gone the value is gone, and
// the splits left are always 1..j, which repair's walk over leftovers
// (from split 1 up to the first split with no piece) finds whole.
func releaseInOrder(n int, fn func(s int) error) error {
	if n == 0 {
		return nil
	}
	if err := fn(0); err != nil {
		return err
	}
	for s := n - 1; s >= 1; s-- {
		if err := fn(s); err != nil {
			return err
		}
	}
	return nil
}

// bankFrom is where leftover splits of a key may start in one bank: from
// split from, in the bank of version.
type bankFrom struct {
	from    int
	version uint64
}

// leftoverBanks returns where splits that no longer belong to a key's
// value y (nil: it has none) may be: past its end in either bank, and,
// for a flat value, from split 1 in the other bank (a huge value that an
// interrupted store began to write, or that a store replaced). The other
// banks of a manifest's data splits are swept split by split (repair).
func (a *Array) leftoverBanks(y *layout) []bankFrom {
	if y == nil {
		out := []bankFrom{{from: 0, version: 0}}
		if a.banked {
			out = append(out, bankFrom{from: 1, version: 1})
		}
		return out
	}
	out := []bankFrom{{from: y.splits, version: y.h0.Version}}
	switch {
	case y.manifest:
		out = append(out, bankFrom{from: y.splits, version: y.h0.Version ^ 1})
	case a.banked:
		out = append(out, bankFrom{from: 1, version: y.h0.Version ^ 1})
	}
	return out
}

// Keys returns the user keys that start with prefix, in ascending order,
// each once. Each device contributes the keys whose primary it is, and the
// keys of primaries that cannot answer for themselves.
func (a *Array) Keys(ctx context.Context, prefix []byte) ([][]byte, error) {
	if err := a.begin(); err != nil {
		return nil, err
	}
	defer a.end()
	return a.keys(ctx, prefix)
}

func (a *Array) keys(ctx context.Context, prefix []byte) ([][]byte, error) {
	if err := a.listable(); err != nil {
		return nil, err
	}
	lists := make([][][]byte, a.env.N())
	errs := make([]error, a.env.N())
	gens := make([]mechanism.Gen, a.env.N())
	var wg sync.WaitGroup
	for i := 0; i < a.env.N(); i++ {
		var d device.Device
		d, gens[i] = a.env.DeviceGen(i)
		if a.env.State(i) == mechanism.Slow {
			continue // listed by the others, as a failed device's keys
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lists[i], errs[i] = a.deviceKeys(ctx, d, i, prefix)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, device.ErrDeviceFailed):
			// Its keys are listed by the devices holding their other
			// pieces, once it is marked failed.
			if a.env.Answering(i) {
				a.env.MarkFailed(i, gens[i])
				return a.keys(ctx, prefix)
			}
		default:
			return nil, fmt.Errorf("keys: device %d (%s): %w", i, a.env.Name(i), err)
		}
	}
	var all [][]byte
	for _, l := range lists {
		all = append(all, l...)
	}
	more, err := a.unlistedKeys(ctx, prefix)
	if err != nil {
		return nil, err
	}
	all = append(all, more...)
	if a.tiny != nil {
		all = slices.DeleteFunc(all, a.isBucket)
		tk, err := a.tinyKeys(ctx, prefix)
		if err != nil {
			return nil, err
		}
		all = append(all, tk...)
	}
	slices.SortFunc(all, func(x, y []byte) int { return compareBytes(x, y) })
	return slices.CompactFunc(all, func(x, y []byte) bool { return compareBytes(x, y) == 0 }), nil
}

// memberLister is implemented by mechanisms whose split 0 can live on its
// primary alone (Packing): it lists those of a device from what the other
// devices hold.
type memberLister interface {
	Members(ctx context.Context, dev int, prefix []byte) ([][]byte, error)
}

// unlistedKeys returns the keys under prefix whose split 0 lives only on a
// device that cannot list it (failed or being rebuilt) and that no other
// device holds under its data key: Packing members, found through their
// sets' parities. Each candidate is located as a read would locate it, so
// the listing holds exactly the keys a read returns: a member a stale set
// still lists after its key moved or was deleted is left out.
func (a *Array) unlistedKeys(ctx context.Context, prefix []byte) ([][]byte, error) {
	var out [][]byte
	for i := 0; i < a.env.N(); i++ {
		if a.env.State(i) == mechanism.Healthy {
			if a.env.MissedCount(i) > 0 {
				keys, err := a.missedListed(ctx, i, prefix)
				if err != nil {
					return nil, err
				}
				out = append(out, keys...)
			}
			continue
		}
		for _, m := range a.mechs {
			ml, ok := m.(memberLister)
			if !ok {
				continue
			}
			cands, err := ml.Members(ctx, i, prefix)
			if err != nil {
				return nil, fmt.Errorf("keys: members of device %d (%s): %w", i, a.env.Name(i), err)
			}
			for _, key := range cands {
				// A key that cannot be read now is left out, as a read
				// would return no value for it.
				ok, err := a.exists(ctx, key)
				if cerr := ctx.Err(); cerr != nil {
					return nil, cerr
				}
				if ok && err == nil {
					out = append(out, key)
				}
			}
		}
	}
	return out, nil
}

// missedListed returns the keys under prefix that healthy device i
// answers for in a listing (answersFor) and whose writes it missed, as
// its record lists them, and that exist. A device behind (its records
// found at open, or a resync that could not finish) is listed as healthy,
// but lacks the split-0 piece of every key whose store it missed: a key
// stored while it was down, whose other pieces the listing passes over
// as it is the key's primary's to list, would be left out until the
// resync (a hash's field missing from HGETALL after a restart while HLEN
// counts it: server's TestCollectionAnswerLostAtEveryOperation).
func (a *Array) missedListed(ctx context.Context, i int, prefix []byte) ([][]byte, error) {
	var out [][]byte
	for _, k := range a.env.Missed(i) {
		user, _, kind, err := format.ParseKey(k)
		if err != nil || !format.HoldsPiece(kind) || !bytes.HasPrefix(user, prefix) || a.isBucket(user) || !a.answersFor(i, user) {
			continue
		}
		ok, err := a.exists(ctx, user)
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		if ok && err == nil {
			out = append(out, slices.Clone(user))
		}
	}
	return out, nil
}

func compareBytes(x, y []byte) int {
	return slices.Compare(x, y)
}

// deviceKeys lists the user keys device i (d) answers for.
func (a *Array) deviceKeys(ctx context.Context, d device.Device, i int, prefix []byte) ([][]byte, error) {
	var keys [][]byte
	err := d.Iterate(ctx, prefix, func(k []byte) error {
		user, split, kind, err := format.ParseKey(k)
		if err != nil || !format.HoldsPiece(kind) || split != 0 {
			return nil
		}
		if p := a.primary(user, 0); (p == i || a.env.State(p) != mechanism.Healthy) && !a.stalePiece(i, k) {
			keys = append(keys, slices.Clone(user))
		}
		return nil
	})
	return keys, err
}

// repair runs under key's lock.
func (a *Array) repair(ctx context.Context, key []byte) (int, error) {
	a.meta.forget(key) // a repair may settle on another version
	n, _, err := a.repairSized(ctx, key)
	return n, err
}

// repairSized is repair, also returning the size of the value repaired.
func (a *Array) repairSized(ctx context.Context, key []byte) (int, int64, error) {
	var size int64
	l, err := a.locate(ctx, a.key(key, 0))
	switch {
	case err == nil:
	case errors.Is(err, ErrNotFound):
		l = nil
	default:
		return 0, 0, err
	}
	var total int
	var y *layout
	// Under a scrub, its scan listed every internal key of key, and
	// sweepHeld takes what belongs to no split of the value from it.
	_, scanned := ctx.Value(heldKey{}).(map[string][]int)
	if l != nil {
		repairSplit := func(s int) (int, error) {
			k, hint := a.key(key, 0), l.header()
			if s > 0 {
				k, hint = a.keyIn(key, y, s), y.hint(s)
			}
			if err := a.releaseMissed(ctx, k, hint.Version); err != nil {
				return 0, err
			}
			n, err := l.m.Repair(ctx, k, hint)
			if err != nil {
				return n, err
			}
			swept, err := a.sweep(ctx, k, l.m.Width(), bankedFrom(l.m))
			n += swept
			if err == nil && y != nil && y.manifest && s > 0 && !scanned {
				// Nothing in the bank split 0 does not name for it.
				swept, err = a.sweep(ctx, a.otherBank(key, y, s), 0, 0)
				n += swept
			}
			return n, err
		}
		// Split 0 first: its repair may settle on a newer version than
		// the one located (a store in flight whose split 0 reached a
		// neighbour only, after all its other splits), and that version
		// says where the other splits and the leftovers are.
		n, err := repairSplit(0)
		total += n
		if err != nil {
			return total, size, err
		}
		if now, err := a.locate(ctx, a.key(key, 0)); err == nil && now.header().Version != l.header().Version {
			l = now
			n, err := repairSplit(0)
			total += n
			if err != nil {
				return total, size, err
			}
		}
		if y, err = a.layoutOf(ctx, key, l); err != nil {
			return total, size, err
		}
		size = y.length
		counts := make([]int, y.splits)
		err = a.forSplits(ctx, y.splits-1, func(i int) error {
			var err error
			counts[i+1], err = repairSplit(i + 1)
			return err
		})
		for _, n := range counts {
			total += n
		}
		if err != nil {
			return total, size, err
		}
	}
	// Splits past the end (all of them when the key does not exist) are
	// orphans of an earlier, larger value, of a failed delete, or of an
	// interrupted store of a huge value (in the other bank).
	for _, b := range a.leftoverBanks(y) {
		for s := b.from; s < a.maxSplits() && !scanned; s++ {
			k := a.splitKey(key, s, b.version)
			if err := a.releaseMissed(ctx, k, 0); err != nil {
				return total, size, err
			}
			n, err := a.sweep(ctx, k, 0, 0)
			total += n
			if err != nil {
				return total, size, err
			}
			if n == 0 {
				break
			}
		}
	}
	// The walk above ends at the first split with no piece, but a store
	// cut short writes its splits in parallel and may leave gaps: a
	// scrub's scan finds them.
	n, err := a.sweepHeld(ctx, key, y)
	total += n
	if err != nil {
		return total, size, err
	}
	if l == nil {
		return total, 0, fmt.Errorf("split 0: %w", ErrNotFound)
	}
	return total, size, nil
}

// sweepHeld sweeps, under a scrub (withHeld), the splits of key its scan
// found that are no split of the value y (nil: none) describes.
func (a *Array) sweepHeld(ctx context.Context, key []byte, y *layout) (int, error) {
	held, ok := ctx.Value(heldKey{}).(map[string][]int)
	if !ok {
		return 0, nil
	}
	splits := map[int]bool{}
	for k := range held {
		if _, split, kind, err := format.ParseKey([]byte(k)); err == nil && format.HoldsPiece(kind) {
			s := a.logical(split)
			if y == nil || s >= y.splits || a.splitKey(key, s, y.version(s)).Split != split {
				splits[split] = true
			}
		}
	}
	total := 0
	for _, split := range slices.Sorted(maps.Keys(splits)) {
		k := a.key(key, a.logical(split))
		k.Split = split
		if err := a.releaseMissed(ctx, k, 0); err != nil {
			return total, err
		}
		n, err := a.sweep(ctx, k, 0, 0)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// sweepTarget is an internal key and the devices a sweep looks at for it.
type sweepTarget struct {
	key  []byte
	devs []int
}

// sweepTargets returns where a sweep of k looks: the devices at offsets
// from to the widest mechanism's under the data key, and from bankFrom
// (at least 1: the primary holds no piece under the bank key) under the
// bank key.
func (a *Array) sweepTargets(k mechanism.Key, from, bankFrom int) []sweepTarget {
	w := min(a.maxWidth, a.env.N())
	return []sweepTarget{{k.Data(), a.env.Span(k, from, w)}, {k.Bank(), a.env.Span(k, max(bankFrom, 1), w)}}
}

// bankedFrom is the offset past which no piece under the bank key
// belongs to a value of m (past m's width under the data key, none does):
// m's width if m banks, else 1.
func bankedFrom(m mechanism.Mechanism) int {
	if _, ok := m.(outOfPlace); ok {
		return m.Width()
	}
	return 1
}

// sweepIfLeftover sweeps the pieces of the given internal split number of
// key unless it belongs to the key's current value. It runs under key's
// lock.
func (a *Array) sweepIfLeftover(ctx context.Context, key []byte, split int) (int, error) {
	l, err := a.locate(ctx, a.key(key, 0))
	switch {
	case err == nil:
		y, err := a.layoutOf(ctx, key, l)
		if err != nil {
			return 0, err
		}
		if s := a.logical(split); s < y.splits && a.splitKey(key, s, y.version(s)).Split == split {
			return 0, nil
		}
	case !errors.Is(err, ErrNotFound):
		return 0, err
	}
	k := a.key(key, a.logical(split))
	k.Split = split
	return a.sweep(ctx, k, 0, 0)
}

// sweep deletes the pieces of k under its data key on the devices at
// offsets [from, maxWidth) from its primary, and under its bank key from
// offset max(bankFrom, 1) (see mechanism.Banked), and returns how many
// there were. Under a scrub (withHeld) its scan says which devices hold
// them; otherwise each device is asked.
func (a *Array) sweep(ctx context.Context, k mechanism.Key, from, bankFrom int) (int, error) {
	targets := a.sweepTargets(k, from, bankFrom)
	held, scanned := ctx.Value(heldKey{}).(map[string][]int)
	var ops []mechanism.Op
	if !scanned {
		for _, t := range targets {
			for _, d := range t.devs {
				ops = append(ops, mechanism.Op{Dev: d, Op: device.Op{Kind: device.OpExist, Key: t.key}})
			}
		}
		if len(ops) == 0 {
			return 0, nil
		}
		a.env.Do(ctx, ops)
	}
	count := 0
	var errs []error
	for _, t := range targets {
		var found, blind []int
		if scanned {
			for _, d := range held[string(t.key)] {
				if slices.Contains(t.devs, d) {
					found = append(found, d)
				}
			}
		} else {
			for i := range ops[:len(t.devs)] {
				switch {
				case errors.Is(ops[i].Err, device.ErrDeviceFailed):
					// Swept when it is resynced, before it serves again.
				case errors.Is(ops[i].Err, mechanism.ErrStale):
					blind = append(blind, ops[i].Dev) // whatever it holds goes
				case ops[i].Err != nil:
					errs = append(errs, ops[i].Err)
				case ops[i].Found:
					found = append(found, ops[i].Dev)
				}
			}
			ops = ops[len(t.devs):]
		}
		// Devices that cannot say (stale, being rebuilt) get a blind
		// delete but do not count, so that the caller's walk over splits
		// ends. A dry run (scrub without repair) leaves them out: it
		// counts the writes a repair would make, and a blind delete
		// fixes nothing it can name (a scrub of an array with a device
		// being rebuilt counted five such deletes a key).
		devs := found
		if !mechanism.DryRunning(ctx) {
			devs = append(devs, blind...)
		}
		if len(devs) > 0 {
			if err := a.env.Delete(ctx, t.key, devs, 0); err != nil {
				errs = append(errs, err)
			}
		}
		count += len(found)
	}
	if len(errs) > 0 {
		return 0, fmt.Errorf("sweep orphans of split %d: %w", k.Split, errors.Join(errs...))
	}
	return count, nil
}
