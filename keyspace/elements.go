package keyspace

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/internal/fanout"
)

// Collections' values and elements. A collection (hash, set, sorted
// set: package collection says how each is encoded) is a value under its
// key like a string, with its type in the tag; a small one holds its
// elements inline, a large one keeps each element as an array value of
// its own under an element key, and its value holds their version.
//
// Invariants:
//   - Element key = Internal ‖ 'c' ‖ version (8 bytes, big-endian) ‖
//     what the collection puts there. Versions are random and never 0, so
//     a version names one collection's elements for ever: a value that
//     replaces a collection with another version (a DEL, an overwrite,
//     an expiry, FLUSHDB) leaves the old elements unreachable at once,
//     whatever their number. (Two collections drawing one version: odds of
//     2^-64 per pair.)
//   - Before a write removes a value with a version (delete, or store of
//     a value of another version, not marked Keep), it stores a garbage
//     record Internal ‖ 'g' ‖ version → db byte ‖ key. The reclaimer
//     (Reclaim) deletes the elements of a record's version, a page at a
//     time, then the record; a record whose key still holds that version
//     (the write that followed it failed) is dropped, decided under the
//     key's lock. The records are array values: a crash leaves them, and
//     the reclaimer resumes where it was (the deleted elements are gone).
//   - A value whose version moves to another key with it (RENAME, MOVE:
//     Op.Keep) deletes the version's garbage record first, if any: the
//     elements belong to the new key.
//   - Element values carry no keyspace header: they are not keys (not
//     listed, not counted, no expiry of their own); their collection's
//     value is.

// Types: a value's Redis type (Value.Type).
const (
	TypeString byte = 0
	TypeHash   byte = 1
	TypeSet    byte = 2
	TypeZSet   byte = 3
	TypeList   byte = 4
	TypeStream byte = 5
)

// ErrWrongType is an operation on a value of another type (Redis's
// WRONGTYPE error).
var ErrWrongType = errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")

const (
	recElement = 'c'
	recGarbage = 'g'
	// elementOverhead is how many bytes of an element key the mapping
	// takes (Internal, 'c', the version).
	elementOverhead = 10
)

// NewVersion is a fresh collection version.
func NewVersion() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:])
		if v := binary.BigEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// ElementPrefix is the prefix of every element key of version ver.
func ElementPrefix(ver uint64) []byte {
	k := make([]byte, elementOverhead, elementOverhead+32)
	k[0], k[1] = Internal, recElement
	binary.BigEndian.PutUint64(k[2:10], ver)
	return k
}

// ElementKey is the array key of element sub of version ver.
func ElementKey(ver uint64, sub []byte) []byte { return append(ElementPrefix(ver), sub...) }

// MaxElement is the longest sub an element key can have.
func (s *Store) MaxElement() int {
	k, _ := s.A.Limits()
	return k - elementOverhead
}

func garbageKey(ver uint64) []byte {
	k := make([]byte, 10)
	k[0], k[1] = Internal, recGarbage
	binary.BigEndian.PutUint64(k[2:], ver)
	return k
}

// discard records the elements of version ver, held by key of db byte
// p, as garbage (before the write that removes them).
func (s *Store) discard(ctx context.Context, ver uint64, p int, key []byte) error {
	if err := s.A.Store(ctx, garbageKey(ver), RawKey(p, key)); err != nil {
		return fmt.Errorf("garbage record of key %q's elements: %w", key, err)
	}
	s.gc.recorded.Add(1)
	return nil
}

// applyElement performs an element op.
func (s *Store) applyElement(ctx context.Context, op Op, opts []array.CallOption) error {
	k := op.ArrayKey()
	if op.Del {
		if err := s.A.Delete(ctx, k); err != nil && !errors.Is(err, array.ErrNotFound) {
			return fmt.Errorf("deleting an element: %w", err)
		}
		return nil
	}
	if err := s.A.Store(ctx, k, op.Val, opts...); err != nil {
		return fmt.Errorf("storing an element: %w", err)
	}
	return nil
}

// keepVersion deletes the garbage record of version ver, if any: its
// elements move to another key (see Keep).
func (s *Store) keepVersion(ctx context.Context, ver uint64) error {
	if err := s.A.Delete(ctx, garbageKey(ver)); err != nil && !errors.Is(err, array.ErrNotFound) {
		return fmt.Errorf("garbage record of moved elements: %w", err)
	}
	return nil
}

// gcStats is the reclaimer's progress.
type gcStats struct {
	started   atomic.Bool
	recorded  atomic.Int64 // garbage records stored by this process
	reclaimed atomic.Int64 // elements deleted
	finished  atomic.Int64 // records completed or dropped
	// left: records the last step saw and did not finish; since: what
	// recorded was when it listed them (records stored later are pending
	// too).
	left, since atomic.Int64
}

// GarbageStats is what INFO shows of the reclaimer.
type GarbageStats struct {
	Recorded, Reclaimed, Finished int64
	// Pending is how many garbage records wait: those the last step saw
	// (at most a page) and did not finish, and those stored since; -1
	// before the first step.
	Pending int64
}

// Garbage is the reclaimer's progress.
func (s *Store) Garbage() GarbageStats {
	p := int64(-1)
	if s.gc.started.Load() {
		p = s.gc.left.Load() + s.gc.recorded.Load() - s.gc.since.Load()
	}
	return GarbageStats{s.gc.recorded.Load(), s.gc.reclaimed.Load(), s.gc.finished.Load(), p}
}

// reclaimPage is how many garbage records one step looks at.
const reclaimPage = 16

// Reclaim deletes up to budget elements of collections removed since
// (garbage records, in version order) and reports how many it deleted
// and whether garbage is left. lock takes a key's write lock (the
// server's, so that a record's key is checked with no write in between).
func (s *Store) Reclaim(ctx context.Context, lock func(ak []byte) (func(), error), budget int) (int, bool, error) {
	since := s.gc.recorded.Load()
	recs, more, err := s.A.KeysFrom(ctx, []byte{Internal, recGarbage}, nil, reclaimPage, array.Fresh())
	if err != nil {
		return 0, true, fmt.Errorf("keyspace: listing garbage records: %w", err)
	}
	left := len(recs)
	defer func() {
		s.gc.left.Store(int64(left))
		s.gc.since.Store(since)
		s.gc.started.Store(true)
	}()
	done := 0
	for _, rk := range recs {
		if done >= budget {
			return done, true, nil
		}
		n, finished, err := s.reclaimRecord(ctx, rk, lock, budget-done)
		done += n
		if err != nil {
			return done, true, err
		}
		if !finished {
			return done, true, nil
		}
		left--
	}
	return done, more != nil, nil
}

// reclaimRecord works on garbage record rk: finished when the record is
// gone.
func (s *Store) reclaimRecord(ctx context.Context, rk []byte, lock func([]byte) (func(), error), budget int) (int, bool, error) {
	if len(rk) != 10 {
		return 0, true, s.dropRecord(ctx, rk)
	}
	ver := binary.BigEndian.Uint64(rk[2:])
	owner, err := s.A.Retrieve(ctx, rk)
	switch {
	case errors.Is(err, array.ErrNotFound):
		return 0, true, nil
	case err != nil:
		return 0, false, fmt.Errorf("keyspace: reading garbage record: %w", err)
	}
	if len(owner) >= 1 && owner[0] != Internal {
		unlock, err := lock(owner)
		if err != nil {
			return 0, false, err
		}
		st := s.before(ctx, int(owner[0]), owner[1:])
		unlock()
		switch {
		case st.unknown:
			return 0, false, fmt.Errorf("keyspace: reading the key of a garbage record: %w", st.err)
		case st.exists && st.ver == ver:
			// The write that was to remove it failed: still in use.
			return 0, true, s.dropRecord(ctx, rk)
		}
	}
	keys, next, err := s.A.KeysFrom(ctx, ElementPrefix(ver), nil, max(budget, 1), array.Fresh())
	if err != nil {
		return 0, false, fmt.Errorf("keyspace: listing garbage elements: %w", err)
	}
	first := fanout.Each(len(keys), 32, func(i int) error {
		err := s.A.Delete(ctx, keys[i])
		if errors.Is(err, array.ErrNotFound) {
			err = nil
		}
		return err
	})
	if first != nil {
		return 0, false, fmt.Errorf("keyspace: deleting garbage elements: %w", first)
	}
	s.gc.reclaimed.Add(int64(len(keys)))
	if next != nil {
		return len(keys), false, nil
	}
	return len(keys), true, s.dropRecord(ctx, rk)
}

func (s *Store) dropRecord(ctx context.Context, rk []byte) error {
	if err := s.A.Delete(ctx, rk); err != nil && !errors.Is(err, array.ErrNotFound) {
		return fmt.Errorf("keyspace: deleting garbage record: %w", err)
	}
	s.gc.finished.Add(1)
	return nil
}

// Element reads the element under element key ek.
func (s *Store) Element(ctx context.Context, ek []byte) ([]byte, bool, error) {
	v, err := s.A.Retrieve(ctx, ek)
	switch {
	case err == nil:
		return v, true, nil
	case errors.Is(err, array.ErrNotFound):
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("keyspace: reading an element: %w", err)
}
