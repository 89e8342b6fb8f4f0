package array

// Tiny values (issue 13, item 2; MemEC's idea on kvarray's parts).
//
// A value of at most Max bytes (WithTiny) is not stored under its own key:
// it is an entry of a *bucket*, an ordinary array value under the internal
// user key tinyPrefix ‖ bucket number (4 bytes, big-endian), and the
// bucket is stored with the bucket mechanism (Packing by default, whatever
// the hybrid rules say). Key b of user key u is hash(u) mod Buckets, the
// same xxhash as placement: a GET finds its value with no key map, by
// reading the bucket (one device read when healthy, since a Packing member
// lives whole on its primary). Everything the array does for values (crash
// safety, checksums, degraded reads, the delta-logged updates, repair,
// rebuild, scrub) it thus does for buckets, and Packing's per-member
// header, key and parity are amortised over every entry of a bucket
// instead of being paid per tiny value.
//
// Bucket payload: a format byte (1), then entries, each
//
//	uvarint(key length << 1 | moving) ‖ [version (8 bytes, moving only)] ‖
//	uvarint(value length) ‖ key ‖ value
//
// so an entry of a key under 64 bytes and a value under 128 costs 2 bytes
// beyond its key and value.
//
// Moving between tiny and not tiny. A key has its value in one place: its
// bucket's entry or its own pieces (the "big" value). The invariant that
// makes a bucket entry authoritative in one read: an entry without the
// moving flag means the key has no big value. A move is three steps, each
// crash-safe because bucket writes and big writes are each crash-safe:
//
//   - big → tiny: write the entry flagged moving with a new version V
//     (newer than the big value's), delete the big value, clear the flag;
//   - tiny → big: flag the entry moving with a new version (older than the
//     big store's, which comes after from the same clock), store the big
//     value, remove the entry.
//
// A reader that finds a moving entry also locates the big value and takes
// the newer of the two (the entry's version against the big value's split
// 0 header); a reader that finds no entry reads the big value as before.
// So a crash between steps never shows an older value after a newer one
// was acknowledged, or read. Every store, delete and Repair of the key
// first settles a moving entry it finds (deleting the stale side first,
// then clearing the flag), so writes start from the invariant's state.
//
// Locks: a tiny operation holds its user key's turn (as every operation)
// and then its bucket's turn (the bucket key in the same keylock table)
// for the read-modify-write of the bucket; never in the other order
// (scrub, rebuild and listing take bucket keys alone).
//
// Costs (healthy array): GET of a tiny key, 1 bucket read; of a big key,
// that read plus the usual ones (the bucket must prove the key is not
// tiny). SET of a tiny key already in its bucket: a bucket read plus the
// bucket's store (Packing: its read before write and one delta-logged
// update when the bucket still fits its set's shard size, else a move to
// a new set); of a new tiny key, one more read (locating a big value),
// unless the metadata cache knows the key has none. SET of a big key: one
// bucket read more than without buckets. Listing reads every bucket.
//
// Buckets: N is fixed at creation (recorded in the array header, like the
// weights): changing it would move every tiny key. N trades bucket size
// against the per-bucket costs: each tiny write rewrites its whole bucket
// (and Packing's update writes the delta on r parity devices), so a bucket
// should stay a few KiB (N ≈ expected tiny bytes / 2–4 KiB), and each
// bucket carries a piece header, a roster and parity headers (a few
// hundred bytes per bucket), so buckets much below 1 KiB waste space. A
// bucket grows past what a device value holds at its peril: it becomes a
// multi-split value, whose writes are slower still.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// tinyPrefix starts the internal user key of every bucket. User keys that
// start with it are refused on arrays with tiny values.
const tinyPrefix = "\x00kvarray-tiny"

// ErrReservedKey: the key is in the range the array keeps for itself.
var ErrReservedKey = errors.New("reserved key")

// Tiny is the configuration of tiny values (WithTiny).
type Tiny struct {
	// Max is the largest value stored in a bucket, in bytes.
	Max int
	// Buckets is the number of buckets; fixed at creation.
	Buckets int
	// RM names the mechanism that stores buckets (default "packing").
	RM string
}

// WithTiny stores values of at most t.Max bytes (without a per-call
// mechanism) as entries of t.Buckets buckets, each an array value stored
// with t.RM. It takes effect at Create and is recorded in the array
// header; Open uses the header's Max and Buckets (and refuses an option
// that asks for tiny values on an array created without them). Off by
// default.
func WithTiny(t Tiny) Option { return func(o *options) { o.tiny = &t } }

// tinyState is the tiny geometry of an open array.
type tinyState struct {
	max     int
	buckets uint32
	m       mechanism.Mechanism
	index   tinyIndex
}

// setTiny sets a.tiny from the header, once it is known.
func (a *Array) setTiny(create bool) error {
	if create && a.o.tiny != nil {
		t := a.o.tiny
		if t.Max < 1 || t.Buckets < 1 || int64(t.Buckets) > 1<<32-1 {
			return fmt.Errorf("tiny values up to %d bytes in %d buckets: want both positive", t.Max, t.Buckets)
		}
		a.hdr.flags |= flagTiny
		a.hdr.tinyMax, a.hdr.tinyBuckets = uint32(t.Max), uint32(t.Buckets)
	}
	if a.hdr.flags&flagTiny == 0 {
		if a.o.tiny != nil {
			return errors.New("tiny values are chosen at creation: this array was created without them")
		}
		return nil
	}
	rm := "packing"
	if a.o.tiny != nil && a.o.tiny.RM != "" {
		rm = a.o.tiny.RM
	}
	m, ok := a.byName[rm]
	if !ok {
		return fmt.Errorf("tiny values' buckets are stored with %q: %w", rm, ErrUnknownMechanism)
	}
	a.tiny = &tinyState{max: int(a.hdr.tinyMax), buckets: a.hdr.tinyBuckets, m: m}
	return nil
}

// checkUserKey is checkKey for keys a caller names: on an array with tiny
// values, keys in the buckets' range are refused.
func (a *Array) checkUserKey(key []byte) error {
	if err := a.checkKey(key); err != nil {
		return err
	}
	if a.tiny != nil && bytes.HasPrefix(key, []byte(tinyPrefix)) {
		return fmt.Errorf("keys starting with %q hold tiny values' buckets: %w", tinyPrefix, ErrReservedKey)
	}
	return nil
}

// isBucket reports whether user key u is a bucket's.
func (a *Array) isBucket(u []byte) bool {
	return a.tiny != nil && bytes.HasPrefix(u, []byte(tinyPrefix))
}

func bucketKey(b uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte(tinyPrefix), b)
}

// bucketOf returns the key of the bucket that holds key's tiny value.
func (a *Array) bucketOf(key []byte) []byte {
	return bucketKey(uint32(hash(key) % uint64(a.tiny.buckets)))
}

// isTiny reports whether a store of value with call c goes to a bucket.
func (a *Array) isTiny(value []byte, c call) bool {
	return a.tiny != nil && c.rm == "" && len(value) <= a.tiny.max
}

// tinyEntry is one key's entry in a bucket.
type tinyEntry struct {
	key, val []byte
	moving   bool
	version  uint64 // moving entries only
}

const (
	bucketFormat = 1
	// tinyEntryMoving is bit 0 of an entry's first uvarint, the key
	// length the bits above it.
	tinyEntryMoving = 1 << 0
)

func encodeBucket(es []tinyEntry) []byte {
	n := 1
	for _, e := range es {
		n += 8 + 2*binary.MaxVarintLen64 + len(e.key) + len(e.val)
	}
	b := make([]byte, 1, n)
	b[0] = bucketFormat
	for _, e := range es {
		head := uint64(len(e.key)) << 1
		if e.moving {
			head |= tinyEntryMoving
		}
		b = binary.AppendUvarint(b, head)
		if e.moving {
			b = binary.BigEndian.AppendUint64(b, e.version)
		}
		b = binary.AppendUvarint(b, uint64(len(e.val)))
		b = append(b, e.key...)
		b = append(b, e.val...)
	}
	return b
}

// decodeBucket parses a bucket's payload; the slices it returns alias b.
// The bucket's own checksum has been verified by the read: a failure here
// is a bug or a foreign value, reported as corrupt.
func decodeBucket(b []byte) ([]tinyEntry, error) {
	bad := func(what string) error {
		return fmt.Errorf("tiny bucket of %d bytes: %s: %w", len(b), what, format.ErrCorrupt)
	}
	if len(b) == 0 || b[0] != bucketFormat {
		return nil, bad("unknown format")
	}
	var es []tinyEntry
	p := b[1:]
	for len(p) > 0 {
		var e tinyEntry
		head, n := binary.Uvarint(p)
		if n <= 0 {
			return nil, bad("bad key length")
		}
		p = p[n:]
		kl := head >> 1
		if e.moving = head&tinyEntryMoving != 0; e.moving {
			if len(p) < 8 {
				return nil, bad("truncated entry")
			}
			e.version, p = binary.BigEndian.Uint64(p), p[8:]
		}
		vl, n := binary.Uvarint(p)
		if n <= 0 {
			return nil, bad("bad value length")
		}
		p = p[n:]
		if kl > uint64(len(p)) || vl > uint64(len(p))-kl {
			return nil, bad("truncated entry")
		}
		e.key, e.val, p = p[:kl:kl], p[kl:kl+vl:kl+vl], p[kl+vl:]
		es = append(es, e)
	}
	return es, nil
}

func findEntry(es []tinyEntry, key []byte) int {
	for i := range es {
		if bytes.Equal(es[i].key, key) {
			return i
		}
	}
	return -1
}

// bucket is a bucket read under its turn, to be changed and written back.
type bucket struct {
	key     []byte
	entries []tinyEntry
}

// withBucket runs fn holding the turn of key's bucket, with the bucket as
// read (empty if it does not exist). The caller holds key's turn: the lock
// order is user key, then bucket.
func (a *Array) withBucket(ctx context.Context, key []byte, fn func(b *bucket) error) error {
	return a.bucketTurn(ctx, key, false, fn)
}

// changeBucket is withBucket for a write of key: the bucket is settled
// first (settleFirst) when a crash or a failed write may have cut one of
// its writes short. Such a write can leave the bucket's member changed on
// its primary, which reads return, and its parities not: with the primary
// lost they decode the bucket as it was. A write of key that acts on what
// the bucket holds without writing it (a move to its own pieces, a delete
// of a key the bucket no longer holds) would be acknowledged on top of
// that, and an entry it meant to be gone would come back with the
// primary's loss. Settling makes the redundancy match what the read
// returns before anything is acknowledged on it.
func (a *Array) changeBucket(ctx context.Context, key []byte, fn func(b *bucket) error) error {
	return a.bucketTurn(ctx, key, true, fn)
}

// bucketTurn is withBucket, settling the bucket first when settle is set.
func (a *Array) bucketTurn(ctx context.Context, key []byte, settle bool, fn func(b *bucket) error) error {
	bk := a.bucketOf(key)
	tk, err := a.locks.Lock(ctx, bk)
	if err != nil {
		return err
	}
	defer tk.Release()
	if settle {
		a.settleFirst(ctx, bk)
	}
	b := &bucket{key: bk}
	v, err := a.retrieveValue(ctx, bk)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return fmt.Errorf("tiny bucket %x: %w", bk[len(tinyPrefix):], err)
	default:
		if b.entries, err = decodeBucket(v); err != nil {
			return err
		}
	}
	return fn(b)
}

// writeBucket stores the bucket as it now is (an empty bucket is
// deleted); of its entries, only key's may have come or gone since it was
// read (the listing index follows it).
func (a *Array) writeBucket(ctx context.Context, b *bucket, key []byte) (err error) {
	defer func() { a.tiny.index.note(key, findEntry(b.entries, key) >= 0, err) }()
	if len(b.entries) == 0 {
		if err = a.removeValue(ctx, b.key); errors.Is(err, ErrNotFound) {
			err = nil
		}
	} else {
		v := encodeBucket(b.entries)
		err = a.storeValue(ctx, b.key, v, a.tiny.m, call{})
	}
	if err != nil {
		return fmt.Errorf("tiny bucket %x: %w", b.key[len(tinyPrefix):], err)
	}
	return nil
}

// bigVersion locates key's own (non-tiny) value: its version, or found
// false when the key provably has none.
func (a *Array) bigVersion(ctx context.Context, key []byte) (version uint64, found bool, err error) {
	l, err := a.locate(ctx, a.key(key, 0))
	a.noted(key, l, err)
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return l.header().Version, true, nil
}

// hasBig reports whether key has a value of its own, from the metadata
// cache when it knows (it tracks only that value: every change of it goes
// through storeValue or removeValue under the key's turn).
func (a *Array) hasBig(ctx context.Context, key []byte) (bool, error) {
	if e, ok := a.meta.get(key); ok {
		return e.m != nil, nil
	}
	_, found, err := a.bigVersion(ctx, key)
	return found, err
}

// tinyLookup returns key's tiny value when its bucket holds the current
// one; found false when the key's value, if any, is its own (read it as
// without buckets). Runs under key's turn.
func (a *Array) tinyLookup(ctx context.Context, key []byte) (val []byte, found bool, err error) {
	var e tinyEntry
	err = a.withBucket(ctx, key, func(b *bucket) error {
		if i := findEntry(b.entries, key); i >= 0 {
			e, found = b.entries[i], true
		}
		return nil
	})
	if err != nil || !found || !e.moving {
		return e.val, found, err
	}
	// A move was cut short: the newer side is the value.
	v, big, err := a.bigVersion(ctx, key)
	if err != nil {
		return nil, false, err
	}
	if big && v > e.version {
		return nil, false, nil
	}
	return e.val, true, nil
}

// settle finishes a move of key that was cut short, so that the bucket's
// entry for key, if any, is not moving: the stale side is deleted first,
// so that a crash midway still reads the current one.
func (a *Array) settle(ctx context.Context, key []byte, b *bucket) error {
	i := findEntry(b.entries, key)
	if i < 0 || !b.entries[i].moving {
		return nil
	}
	v, big, err := a.bigVersion(ctx, key)
	if err != nil {
		return err
	}
	if big && v > b.entries[i].version {
		b.entries = append(b.entries[:i], b.entries[i+1:]...)
		return a.writeBucket(ctx, b, key)
	}
	if big {
		if err := a.removeValue(ctx, key); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	b.entries[i].moving, b.entries[i].version = false, 0
	return a.writeBucket(ctx, b, key)
}

// storeTiny is store on an array with tiny values; under key's turn.
func (a *Array) storeTiny(ctx context.Context, key, value []byte, m mechanism.Mechanism, c call) error {
	tiny := a.isTiny(value, c)
	return a.changeBucket(ctx, key, func(b *bucket) error {
		if err := a.settle(ctx, key, b); err != nil {
			return err
		}
		i := findEntry(b.entries, key)
		switch {
		case tiny && i >= 0:
			b.entries[i].val = value
			return a.writeBucket(ctx, b, key)
		case tiny:
			big, err := a.hasBig(ctx, key)
			if err != nil {
				return err
			}
			if !big {
				b.entries = append(b.entries, tinyEntry{key: key, val: value})
				return a.writeBucket(ctx, b, key)
			}
			b.entries = append(b.entries, tinyEntry{key: key, val: value, moving: true, version: a.env.Clock().Next()})
			if err := a.writeBucket(ctx, b, key); err != nil {
				return err
			}
			if err := a.removeValue(ctx, key); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			b.entries[len(b.entries)-1].moving = false
			b.entries[len(b.entries)-1].version = 0
			return a.writeBucket(ctx, b, key)
		case i >= 0:
			b.entries[i].moving, b.entries[i].version = true, a.env.Clock().Next()
			if err := a.writeBucket(ctx, b, key); err != nil {
				return err
			}
			if err := a.storeValue(ctx, key, value, m, c); err != nil {
				return err
			}
			b.entries = append(b.entries[:i], b.entries[i+1:]...)
			return a.writeBucket(ctx, b, key)
		}
		return a.storeValue(ctx, key, value, m, c)
	})
}

// removeTiny is remove on an array with tiny values; under key's turn.
func (a *Array) removeTiny(ctx context.Context, key []byte) error {
	return a.changeBucket(ctx, key, func(b *bucket) error {
		if err := a.settle(ctx, key, b); err != nil {
			return err
		}
		if i := findEntry(b.entries, key); i >= 0 {
			b.entries = append(b.entries[:i], b.entries[i+1:]...)
			return a.writeBucket(ctx, b, key)
		}
		return a.removeValue(ctx, key)
	})
}

// repairTiny repairs key's bucket and settles a move of key cut short;
// found reports whether the bucket holds key.
func (a *Array) repairTiny(ctx context.Context, key []byte) (n int, found bool, err error) {
	bk := a.bucketOf(key)
	tk, err := a.locks.Lock(ctx, bk)
	if err != nil {
		return 0, false, err
	}
	n, err = a.repair(ctx, bk)
	tk.Release()
	if err != nil && !errors.Is(err, ErrNotFound) {
		return n, false, err
	}
	err = a.withBucket(ctx, key, func(b *bucket) error {
		found = findEntry(b.entries, key) >= 0
		return a.settle(ctx, key, b)
	})
	return n, found, err
}

// tinyKeys returns the keys with prefix that buckets hold, from the
// listing index (built by reading every bucket on first use).
func (a *Array) tinyKeys(ctx context.Context, prefix []byte) ([][]byte, error) {
	return a.tinyKeysAfter(ctx, prefix, nil, 0)
}

// tinyKeysAfter returns, in ascending order, at most count (0: all) keys
// with prefix past after that buckets hold.
func (a *Array) tinyKeysAfter(ctx context.Context, prefix, after []byte, count int) ([][]byte, error) {
	for range 3 {
		if keys, ok := a.tiny.index.list(prefix, after, count); ok {
			return keys, nil
		}
		if err := a.buildTinyIndex(ctx); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("keys: tiny buckets' writes keep failing while their keys are listed: %w", ErrUnavailable)
}

// buildTinyIndex reads every bucket, each under its turn, into the
// listing index. Writers keep the index current from the moment the build
// starts (a bucket's changes and its read are serialised by its turn),
// so the index is exact once every bucket has been read, unless a bucket
// write failed meanwhile (the build starts over at the next listing).
func (a *Array) buildTinyIndex(ctx context.Context) error {
	x := &a.tiny.index
	gen := x.start()
	for b := range a.tiny.buckets {
		bk := bucketKey(b)
		tk, err := a.locks.Lock(ctx, bk)
		if err != nil {
			return err
		}
		v, err := a.retrieveValue(ctx, bk)
		var es []tinyEntry
		if err == nil {
			es, err = decodeBucket(v)
		}
		if err == nil {
			x.addAll(es)
		}
		tk.Release()
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			x.drop()
			return fmt.Errorf("keys: tiny bucket %d: %w", b, err)
		}
	}
	x.finish(gen)
	return nil
}

// tinyKey reports whether key may have a tiny value: the array has tiny
// values and key is not a bucket's own.
func (a *Array) tinyKey(key []byte) bool {
	return a.tiny != nil && !a.isBucket(key)
}
