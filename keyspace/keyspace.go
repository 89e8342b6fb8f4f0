// Package keyspace maps Redis databases, keys, values and expiry onto the
// array's keys and values. The server (package server) and the CLI's data
// commands both use it, so they always see the same data.
//
// Invariants:
//   - An array key is one database byte followed by the Redis key:
//     db ‖ key, db in 0..MaxDatabases-1. The byte Internal (0xFF) is no
//     database: it holds kvarray's own records (the expiry index,
//     transaction intents, the database map, the function libraries, the key counts a clean
//     shutdown saved: counts.go), so no Redis key can collide with them.
//   - An array value is a one-byte tag followed, when the tag has
//     tagExpiry, by the expire-at time (Unix milliseconds, big-endian, 8
//     bytes), when it has tagVersion by the value's version (8 bytes,
//     big-endian), then the Redis value. Tag bit tagRaw is the encoding flag
//     (Value.Raw); values written before it existed have it clear. Tag
//     bits 2-4 are the value's type (Value.Type: 0 a string, others
//     collections: elements.go). The expiry is bytes of the value: it is stored, checked,
//     replicated, split, rebuilt and resynced exactly as the value is, so
//     it survives restarts, rebuilds and mechanism changes with no extra
//     work, and a value and its expiry can never disagree.
//   - A value whose expire-at is at or before now does not exist: Get
//     reports ErrNotFound for it whether or not it has been reclaimed yet.
//   - The expiry index (Internal ‖ 'e' ‖ expire-at ‖ db ‖ key, empty
//     value) is written BEFORE the value it indexes and may outlive it: a
//     stale entry is harmless, because the reclaimer checks the value's
//     own expire-at before deleting. An entry missing for a value with an
//     expiry cannot happen unless the index store failed, in which case
//     the value store was not attempted.
//   - Index keys sort by expire-at: bucket prefixes (the expire-at in
//     units of 256 ms, the top 7 bytes of the expire-at) let the reclaimer list only the
//     entries that are due, never every key.
//   - Databases are logical: a record (Internal ‖ 'm') maps each database
//     number to the db byte its keys use, so that SWAPDB is one write of
//     that record (atomic, O(1)) rather than a rewrite of two databases.
//     Keys, index entries and intents hold the db byte, not the number.
package keyspace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/internal/fanout"
)

const (
	// MaxDatabases is the most databases a keyspace can have: every db
	// byte but Internal.
	MaxDatabases = 255
	// DefaultDatabases is Redis's default.
	DefaultDatabases = 16
	// Internal is the db byte of kvarray's own records.
	Internal = 0xFF
	// KeyOverhead is how many bytes of the array's largest key the mapping
	// takes: the expiry index's key (Internal, 'e', 8 bytes of expire-at,
	// the db byte) is the longest, so that every key can have a TTL.
	// ValueOverhead is how many of its largest value it takes (with an
	// expiry).
	KeyOverhead   = 11
	ValueOverhead = 9

	tagPlain   = 0
	tagExpiry  = 1 << 0
	tagRaw     = 1 << 1
	tagType    = 7 << 2
	tagVersion = 1 << 5
	tagKnown   = tagExpiry | tagRaw | tagType | tagVersion
	typeShift  = 2

	recExpiry = 'e'
	recIntent = 't'
	recDBMap  = 'm'
	recFuncs  = 'f'
	recName   = 'n'
	// bucketShift: index buckets are 2^8 ms, one byte of the expire-at.
	bucketShift = 8
)

// ErrBadValue means an array value is not in the keyspace's format (it
// was written by something else, e.g. an older kvarray).
var ErrBadValue = errors.New("keyspace: value not in the keyspace format")

// ErrBadDB is a database number out of range.
var ErrBadDB = errors.New("keyspace: database out of range")

// Long keys. A Redis key longer than NameLen bytes is stored under its
// name: its first NameLen-32 bytes, then its SHA-256 (NameLen bytes in
// all, so its array key and expiry index entry fit the devices' limits);
// the whole key is kept in a name record (Internal, 'n', the db byte,
// the name), written before the key's value, so that a listing (SCAN,
// KEYS, the expiry index) turns a name back into the key (FullKey).
// Invariants:
//   - The mapping is idempotent: keys of at most NameLen bytes are their
//     own names, so a key taken from a listing (a name) maps to itself,
//     and code below the server may pass names and keys alike.
//   - A listed key of NameLen bytes is a name when a name record holds
//     it, else a key of exactly NameLen bytes.
//   - Two long keys share a name only with a SHA-256 collision. A key of
//     exactly NameLen bytes equal to a long key's name (made on purpose:
//     it ends in that key's digest) is that key, and a write of it is
//     refused (ErrKeyCollision) once the long key exists.
const NameLen = 241

// digestLen is the SHA-256 a name ends with.
const digestLen = sha256.Size

// ErrKeyCollision: a key's name is another key's (see NameLen).
var ErrKeyCollision = errors.New("keyspace: the key's name is another key's")

// Name is the name key is stored under (see NameLen).
func Name(key []byte) []byte {
	if len(key) <= NameLen {
		return key
	}
	sum := sha256.Sum256(key)
	return append(slices.Clip(key[:NameLen-digestLen:NameLen-digestLen]), sum[:]...)
}

// RawKey is the array key of Redis key key under db byte db: the db byte
// and the key's name. Under Internal (a collection's element) key is the
// rest of the array key as it is.
func RawKey(db int, key []byte) []byte {
	if db != Internal {
		key = Name(key)
	}
	k := make([]byte, 1+len(key))
	k[0] = byte(db)
	copy(k[1:], key)
	return k
}

// PrefixKey is the array key prefix under which db byte db's keys that
// start with prefix are listed: a prefix longer than what names keep of
// their key is cut there (callers match the full keys).
func PrefixKey(db int, prefix []byte) []byte {
	return RawKey(db, prefix[:min(len(prefix), NameLen-digestLen)])
}

// nameRecord is the array key of the name record of name nm under db
// byte p.
func nameRecord(p int, nm []byte) []byte {
	return append([]byte{Internal, recName, byte(p)}, nm...)
}

// FullKey is the Redis key that k, a key of db byte p as a listing gives
// it (a name), stands for: k itself unless a name record says otherwise.
func (s *Store) FullKey(ctx context.Context, p int, k []byte) ([]byte, error) {
	if len(k) != NameLen {
		return k, nil
	}
	full, err := s.A.Retrieve(ctx, nameRecord(p, k))
	switch {
	case err == nil:
		return full, nil
	case errors.Is(err, array.ErrNotFound):
		return k, nil
	}
	return nil, fmt.Errorf("keyspace: reading the name record of a long key: %w", err)
}

// FullKeys is FullKey of each of keys, in place, read concurrently.
func (s *Store) FullKeys(ctx context.Context, db int, keys [][]byte) error {
	p := s.Phys(db)
	return fanout.Each(len(keys), 32, func(i int) error {
		if len(keys[i]) != NameLen {
			return nil
		}
		var err error
		keys[i], err = s.FullKey(ctx, p, keys[i])
		return err
	})
}

// name writes the name record of key of db byte p, if it has one, or
// refuses a key that is another's name.
func (s *Store) name(ctx context.Context, p int, key []byte) error {
	if len(key) < NameLen {
		return nil
	}
	nm := Name(key)
	full, err := s.A.Retrieve(ctx, nameRecord(p, nm))
	switch {
	case err == nil && bytes.Equal(full, key):
		return nil
	case err == nil:
		return fmt.Errorf("key of %d bytes (%q…): its name is that of a key of %d bytes: %w", len(key), key[:32], len(full), ErrKeyCollision)
	case !errors.Is(err, array.ErrNotFound):
		return fmt.Errorf("keyspace: reading the name record of a long key: %w", err)
	case len(key) == NameLen:
		return nil // a key of exactly NameLen bytes that is no name
	}
	if err := s.A.Store(ctx, nameRecord(p, nm), key); err != nil {
		return fmt.Errorf("keyspace: storing the name record of a long key: %w", err)
	}
	return nil
}

// Value is a Redis value as the keyspace stores it.
type Value struct {
	V  []byte
	At int64 // expire-at, Unix ms; 0 for none
	// Raw is Redis's encoding flag: the value was changed in place
	// (APPEND, SETRANGE, SETBIT), which Redis stores as a raw string
	// whatever its bytes, so OBJECT ENCODING says raw until the value
	// is replaced. It is part of the value (one tag bit), so it survives
	// restarts like the bytes do.
	Raw bool
	// Type is the value's Redis type: TypeString, or a collection's
	// (elements.go). Ver, of a collection whose elements are array values
	// of their own, is the version their keys hold (ElementKey); 0 for
	// none.
	Type byte
	Ver  uint64
}

// EncodeValue is the array value of v.
func EncodeValue(v Value) []byte {
	tag, n := byte(tagPlain), 1
	if v.At != 0 {
		tag, n = tagExpiry, 9
	}
	if v.Ver != 0 {
		tag |= tagVersion
		n += 8
	}
	if v.Raw {
		tag |= tagRaw
	}
	tag |= v.Type << typeShift & tagType
	b := make([]byte, n+len(v.V))
	b[0] = tag
	o := 1
	if v.At != 0 {
		binary.BigEndian.PutUint64(b[o:o+8], uint64(v.At))
		o += 8
	}
	if v.Ver != 0 {
		binary.BigEndian.PutUint64(b[o:o+8], v.Ver)
	}
	copy(b[n:], v.V)
	return b
}

// DecodeValue reverses EncodeValue. The value's bytes alias b.
func DecodeValue(b []byte) (Value, error) {
	v, n, err := DecodeHead(b)
	if err != nil {
		return Value{}, err
	}
	v.V = b[n:]
	return v, nil
}

// headLen is how many bytes of an array value hold its keyspace header at
// most but for a version (the tag and an expire-at): a range read of them
// is enough to decode the header of a value without one (a string's),
// headVerLen of any.
const (
	headLen    = 9
	headVerLen = 17
)

// errShortHead: the bytes given end before the header does.
var errShortHead = fmt.Errorf("header cut short: %w", ErrBadValue)

// DecodeHead decodes the keyspace header at the start of an array value
// (b: its first bytes, at least headVerLen when the value has that many)
// and returns it (V nil) and its length: the offset of the Redis value's
// bytes.
func DecodeHead(b []byte) (Value, int, error) {
	if len(b) < 1 || b[0]&^tagKnown != 0 {
		return Value{}, 0, ErrBadValue
	}
	v := Value{Raw: b[0]&tagRaw != 0, Type: b[0] & tagType >> typeShift}
	n := 1
	if b[0]&tagExpiry != 0 {
		n += 8
	}
	if b[0]&tagVersion != 0 {
		n += 8
	}
	if len(b) < n {
		return Value{}, 0, errShortHead
	}
	o := 1
	if b[0]&tagExpiry != 0 {
		v.At = int64(binary.BigEndian.Uint64(b[o : o+8]))
		o += 8
	}
	if b[0]&tagVersion != 0 {
		v.Ver = binary.BigEndian.Uint64(b[o : o+8])
	}
	return v, n, nil
}

// ExpiryKey is the index entry of db's key expiring at at (under the
// key's name).
func ExpiryKey(at int64, db int, key []byte) []byte {
	key = Name(key)
	k := make([]byte, 2+8+1+len(key))
	k[0], k[1] = Internal, recExpiry
	binary.BigEndian.PutUint64(k[2:10], uint64(at))
	k[10] = byte(db)
	copy(k[11:], key)
	return k
}

// ParseExpiryKey reverses ExpiryKey, to the key's name.
func ParseExpiryKey(k []byte) (at int64, db int, key []byte, ok bool) {
	if len(k) < 12 || k[0] != Internal || k[1] != recExpiry {
		return 0, 0, nil, false
	}
	return int64(binary.BigEndian.Uint64(k[2:10])), int(k[10]), k[11:], true
}

// Bucket is the index bucket of expire-at at.
func Bucket(at int64) int64 { return at >> bucketShift }

// BucketPrefix is the key prefix of the index entries in bucket b: the
// top 7 bytes of the expire-at, which all times of a bucket share.
func BucketPrefix(b int64) []byte {
	k := make([]byte, 2+7)
	k[0], k[1] = Internal, recExpiry
	var t [8]byte
	binary.BigEndian.PutUint64(t[:], uint64(b)<<bucketShift)
	copy(k[2:], t[:7])
	return k
}

// ExpiryPrefix is the prefix of the whole expiry index.
func ExpiryPrefix() []byte { return []byte{Internal, recExpiry} }

// IntentKey is the array key of transaction intent id.
func IntentKey(id []byte) []byte { return append([]byte{Internal, recIntent}, id...) }

// FunctionsKey is the array key of the server's function libraries
// (FUNCTION LOAD), one record holding them all.
func FunctionsKey() []byte { return []byte{Internal, recFuncs} }

// IntentPrefix is the prefix of every intent record.
func IntentPrefix() []byte { return []byte{Internal, recIntent} }

// NowMs is the current time in Unix milliseconds.
func NowMs() int64 { return time.Now().UnixMilli() }

// Store reads and writes Redis keys in an array. It takes no locks on
// keys: callers that read, modify and write serialise themselves (the
// server holds per-key locks).
type Store struct {
	A  *array.Array
	mu sync.RWMutex
	// phys[db] is the db byte of database db; logical is its inverse.
	phys    []byte
	logical map[byte]int
	mapErr  error   // why the database map could not be read
	cnt     counts  // counts.go
	gc      gcStats // elements.go
}

// Open returns the store of a's keyspace with dbs databases (1 to
// MaxDatabases), reading the database map.
func Open(ctx context.Context, a *array.Array, dbs int) (*Store, error) {
	if dbs < 1 || dbs > MaxDatabases {
		return nil, fmt.Errorf("keyspace: %d databases: there can be 1 to %d: %w", dbs, MaxDatabases, ErrBadDB)
	}
	s := &Store{A: a}
	b, err := a.Retrieve(ctx, []byte{Internal, recDBMap})
	switch {
	case errors.Is(err, array.ErrNotFound):
		b = nil
	case errors.Is(err, array.ErrUnavailable):
		// Too many devices are down to read the map (or to tell that
		// there is none, as when SWAPDB was never used): databases are
		// taken as never swapped, and SWAPDB is refused until it can be
		// read.
		b, s.mapErr = nil, err
	case err != nil:
		return nil, fmt.Errorf("keyspace: reading the database map: %w", err)
	}
	s.phys = make([]byte, dbs)
	for i := range s.phys {
		s.phys[i] = byte(i)
	}
	// A map written for more databases keeps its swaps for those that
	// remain; one for fewer is extended with identity entries.
	if len(b) > 0 {
		used := map[byte]bool{}
		for i := 0; i < dbs && i < len(b); i++ {
			s.phys[i] = b[i]
			used[b[i]] = true
		}
		if len(b) < dbs {
			// Bytes not used by the stored map, in order.
			next := 0
			for i := len(b); i < dbs; i++ {
				for used[byte(next)] {
					next++
				}
				s.phys[i] = byte(next)
				used[byte(next)] = true
			}
		}
	}
	s.logical = map[byte]int{}
	for i, p := range s.phys {
		s.logical[p] = i
	}
	return s, nil
}

// DBs is how many databases there are.
func (s *Store) DBs() int { return len(s.phys) }

// CheckDB rejects a database number out of range.
func (s *Store) CheckDB(db int) error {
	if db < 0 || db >= len(s.phys) {
		return fmt.Errorf("database %d: there are databases 0 to %d: %w", db, len(s.phys)-1, ErrBadDB)
	}
	return nil
}

// Phys is the db byte of database db.
func (s *Store) Phys(db int) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return int(s.phys[db])
}

// Logical is the database of db byte p; ok false if no database uses it.
func (s *Store) Logical(p int) (int, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	db, ok := s.logical[byte(p)]
	return db, ok
}

// Key is the array key of key in database db.
func (s *Store) Key(db int, key []byte) []byte { return RawKey(s.Phys(db), key) }

// Swap swaps databases x and y: one write of the database map.
func (s *Store) Swap(ctx context.Context, x, y int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mapErr != nil {
		return fmt.Errorf("keyspace: the database map could not be read when the server started: %w", s.mapErr)
	}
	next := slices.Clone(s.phys)
	next[x], next[y] = next[y], next[x]
	if err := s.A.Store(ctx, []byte{Internal, recDBMap}, next); err != nil {
		return fmt.Errorf("keyspace: writing the database map: %w", err)
	}
	s.phys = next
	s.logical[next[x]], s.logical[next[y]] = x, y
	return nil
}

// Limits are the largest Redis key and value the array can hold under
// this mapping: a key of any length up to the largest value when the
// devices take names (NameLen), else as long as they take.
func (s *Store) Limits() (maxKey int, maxValue int64) {
	k, v := s.A.Limits()
	maxKey, maxValue = k-KeyOverhead, v-ValueOverhead
	if maxKey >= NameLen {
		maxKey = int(min(maxValue, math.MaxInt32))
	}
	return maxKey, maxValue
}

// CheckKey rejects a key the mapping cannot hold, with the array's
// sentinel: keys are 0 to Limits() bytes (the empty key is its database
// byte alone in the array).
func (s *Store) CheckKey(key []byte) error {
	maxKey, _ := s.Limits()
	if len(key) > maxKey {
		return fmt.Errorf("key of %d bytes (%q…), maximum %d: %w", len(key), key[:min(len(key), 32)], maxKey, array.ErrKeyTooLong)
	}
	return nil
}

// keyError is an error of a key in a database, formatted only when
// shown: a read of a missing key is answered by errors.Is alone, and
// fmt.Errorf quoting the key was a tenth of such a read's CPU.
type keyError struct {
	db   int
	key  []byte // a copy: the caller may reuse its buffer
	what string // after the key: "" or " expired"
	err  error
}

func (e *keyError) Error() string {
	return fmt.Sprintf("key %q in db %d%s: %v", e.key, e.db, e.what, e.err)
}
func (e *keyError) Unwrap() error { return e.err }

func keyErr(db int, key []byte, what string, err error) error {
	return &keyError{db: db, key: bytes.Clone(key), what: what, err: err}
}

// LoadRaw returns key's value, expired or not.
func (s *Store) LoadRaw(ctx context.Context, db int, key []byte) (Value, error) {
	b, err := s.A.Retrieve(ctx, s.Key(db, key))
	if err != nil {
		return Value{}, keyErr(db, key, "", err)
	}
	v, err := DecodeValue(b)
	if err != nil {
		return Value{}, keyErr(db, key, "", err)
	}
	return v, nil
}

// Load returns key's value. An expired value is array.ErrNotFound
// (wrapped), whether reclaimed or not.
func (s *Store) Load(ctx context.Context, db int, key []byte) (Value, error) {
	v, err := s.LoadRaw(ctx, db, key)
	if err == nil && Expired(v.At, NowMs()) {
		return Value{}, keyErr(db, key, " expired", array.ErrNotFound)
	}
	return v, err
}

// Get is Load's bytes and expire-at, of a string: ErrWrongType (wrapped)
// for a collection.
func (s *Store) Get(ctx context.Context, db int, key []byte) (v []byte, at int64, err error) {
	val, err := s.Load(ctx, db, key)
	if err == nil && val.Type != TypeString {
		return nil, 0, keyErr(db, key, "", ErrWrongType)
	}
	return val.V, val.At, err
}

// Expired reports whether expire-at at has passed at now.
func Expired(at, now int64) bool { return at != 0 && at <= now }

// Set stores v under key with expire-at at (0: none): Save of a value
// that is not raw.
func (s *Store) Set(ctx context.Context, db int, key, v []byte, at int64, opts ...array.CallOption) error {
	return s.Save(ctx, db, key, Value{V: v, At: at}, opts...)
}

// Save stores v under key, writing its index entry first.
func (s *Store) Save(ctx context.Context, db int, key []byte, v Value, opts ...array.CallOption) error {
	return s.apply(ctx, s.Op(db, key, v, false), opts)
}

// Delete removes key and reports whether it existed (an expired key not
// yet reclaimed is removed and reported absent).
func (s *Store) Delete(ctx context.Context, db int, key []byte) (existed bool, err error) {
	return s.DeleteKeep(ctx, db, key, false)
}

// DeleteKeep is Delete; keep says a collection's elements moved to
// another key with its value (Op.Keep).
func (s *Store) DeleteKeep(ctx context.Context, db int, key []byte, keep bool) (existed bool, err error) {
	old, err := s.remove(ctx, s.Phys(db), key, keep, nil)
	return old.exists && !old.unknown && !Expired(old.at, NowMs()), err
}

// DeleteExpired deletes key of db if its value's expire-at is at or
// before now, and reports whether it did (the expiry cycle's reclaim:
// the caller holds the key's lock). A value not in the keyspace's format
// is not its to delete.
func (s *Store) DeleteExpired(ctx context.Context, db int, key []byte, now int64) (bool, error) {
	old, err := s.remove(ctx, s.Phys(db), key, false, func(old state) error {
		switch {
		case old.unknown:
			return old.err
		case !old.exists, old.foreign, !Expired(old.at, now):
			return errUnchanged
		}
		return nil
	})
	return err == nil && old.exists && !old.foreign && Expired(old.at, now), err
}

// remove deletes key of db byte p, if check (nil: always) agrees. The
// elements of a collection it deletes become garbage (elements.go),
// unless keep (they moved to another key with its value).
func (s *Store) remove(ctx context.Context, p int, key []byte, keep bool, check func(old state) error) (state, error) {
	return s.write(ctx, p, key, func(old state) (state, error) {
		if check != nil {
			if err := check(old); err != nil {
				return old, err
			}
		}
		if old.ver != 0 {
			discard := s.discard
			if keep {
				discard = func(ctx context.Context, ver uint64, _ int, _ []byte) error { return s.keepVersion(ctx, ver) }
			}
			if err := discard(ctx, old.ver, p, key); err != nil {
				return old, err
			}
		}
		err := s.A.Delete(ctx, RawKey(p, key))
		if errors.Is(err, array.ErrNotFound) {
			err = nil
		}
		if err == nil && len(key) > NameLen {
			// After the value: a crash between leaves a record no key
			// names, which a later store of the key writes again.
			if err := s.A.Delete(ctx, nameRecord(p, Name(key))); err != nil && !errors.Is(err, array.ErrNotFound) {
				return state{}, fmt.Errorf("keyspace: deleting the name record of a long key: %w", err)
			}
		}
		return state{}, err
	}, true, true)
}

// Exists reports whether key exists (and has not expired).
func (s *Store) Exists(ctx context.Context, db int, key []byte) (bool, error) {
	_, err := s.Load(ctx, db, key)
	if errors.Is(err, array.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Keys lists db's keys that start with prefix, in byte order of their
// names. It reads no values (a long key's name record only): keys that
// expired but are not yet reclaimed are listed.
func (s *Store) Keys(ctx context.Context, db int, prefix []byte) ([][]byte, error) {
	aks, err := s.A.Keys(ctx, PrefixKey(s.Phys(db), prefix))
	if err != nil {
		return nil, err
	}
	for i, ak := range aks {
		aks[i] = ak[1:]
	}
	if err := s.FullKeys(ctx, db, aks); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(aks, func(k []byte) bool { return !bytes.HasPrefix(k, prefix) }), nil
}

// Counts is how many keys each database has (expired ones not yet
// reclaimed included), from one listing of the array's keys.
func (s *Store) Counts(ctx context.Context) ([]int, error) {
	aks, err := s.A.Keys(ctx, nil)
	if err != nil {
		return nil, err
	}
	n := make([]int, len(s.phys))
	for _, ak := range aks {
		if db, ok := s.Logical(int(ak[0])); ok && ak[0] != Internal {
			n[db]++
		}
	}
	return n, nil
}

// ParseIndex returns the database and key of an expiry index entry; ok is
// false when it is not one, or its db byte is no database's.
func (s *Store) ParseIndex(k []byte) (at int64, db int, key []byte, ok bool) {
	at, p, key, ok := ParseExpiryKey(k)
	if !ok {
		return 0, 0, nil, false
	}
	db, ok = s.Logical(p)
	return at, db, key, ok
}

// Op is one write of a transaction, in an intent record: a store (Val,
// At, Raw, Type, Ver, Using) or a delete of Key under db byte Phys. An op
// with Phys Internal writes a collection's element: array key Internal ‖
// Key, value Val as it is (no keyspace header, not counted). Keep, on a
// delete, says the old value's elements are not garbage: they moved to
// another key with the value (RENAME, MOVE).
type Op struct {
	Phys  int
	Key   []byte
	Val   []byte
	At    int64
	Raw   bool
	Del   bool
	Keep  bool
	Type  byte
	Ver   uint64
	Using string // mechanism, "" for the mode's choice
}

// Op is the op that stores v (or deletes, when del) under key of db.
func (s *Store) Op(db int, key []byte, v Value, del bool) Op {
	return Op{Phys: s.Phys(db), Key: key, Val: v.V, At: v.At, Raw: v.Raw, Type: v.Type, Ver: v.Ver, Del: del}
}

// ElementOp is the op that stores val (or deletes, when del) under
// element key ek (ElementKey).
func ElementOp(ek, val []byte, del bool) Op {
	return Op{Phys: Internal, Key: ek[1:], Val: val, Del: del}
}

// ArrayKey is the array key op writes.
func (op Op) ArrayKey() []byte { return RawKey(op.Phys, op.Key) }

// Apply performs op. It is idempotent, so an intent may be replayed any
// number of times.
func (s *Store) Apply(ctx context.Context, op Op) error {
	var opts []array.CallOption
	if op.Using != "" {
		opts = append(opts, array.Using(op.Using))
	}
	return s.apply(ctx, op, opts)
}

// apply performs op and counts it (counts.go).
func (s *Store) apply(ctx context.Context, op Op, opts []array.CallOption) error {
	if op.Phys == Internal {
		return s.applyElement(ctx, op, opts)
	}
	if op.Del {
		_, err := s.remove(ctx, op.Phys, op.Key, op.Keep, nil)
		return err
	}
	if err := s.name(ctx, op.Phys, op.Key); err != nil {
		return err
	}
	_, err := s.write(ctx, op.Phys, op.Key, func(old state) (state, error) {
		if old.ver != 0 && old.ver != op.Ver {
			if err := s.discard(ctx, old.ver, op.Phys, op.Key); err != nil {
				return state{}, err
			}
		}
		if op.At != 0 {
			if err := s.A.Store(ctx, ExpiryKey(op.At, op.Phys, op.Key), nil); err != nil {
				return state{}, fmt.Errorf("expiry index of key %q: %w", op.Key, err)
			}
		}
		v := EncodeValue(Value{V: op.Val, At: op.At, Raw: op.Raw, Type: op.Type, Ver: op.Ver})
		return state{exists: true, at: op.At, typ: op.Type, ver: op.Ver}, s.A.Store(ctx, RawKey(op.Phys, op.Key), v, opts...)
	}, false, true)
	return err
}

// An intent op's flag bits.
const (
	intentDel  = 1 << 0
	intentRaw  = 1 << 1
	intentKeep = 1 << 2
	// intentTyped: the type byte and the version (uvarint) follow the
	// expire-at (records written before collections have it clear).
	intentTyped = 1 << 3
)

// EncodeIntent is the intent record of ops.
func EncodeIntent(ops []Op) []byte {
	b := binary.AppendUvarint(nil, uint64(len(ops)))
	for _, op := range ops {
		flag := byte(0)
		if op.Del {
			flag |= intentDel
		}
		if op.Raw {
			flag |= intentRaw
		}
		if op.Keep {
			flag |= intentKeep
		}
		if op.Type != 0 || op.Ver != 0 {
			flag |= intentTyped
		}
		b = append(b, flag, byte(op.Phys))
		b = binary.AppendVarint(b, op.At)
		if flag&intentTyped != 0 {
			b = append(b, op.Type)
			b = binary.AppendUvarint(b, op.Ver)
		}
		for _, f := range [][]byte{op.Key, []byte(op.Using), op.Val} {
			b = binary.AppendUvarint(b, uint64(len(f)))
			b = append(b, f...)
		}
	}
	return b
}

// ErrBadIntent is an intent record that does not decode.
var ErrBadIntent = errors.New("keyspace: malformed intent record")

// DecodeIntent reverses EncodeIntent.
func DecodeIntent(b []byte) ([]Op, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, ErrBadIntent
	}
	b = b[k:]
	ops := make([]Op, 0, n)
	for range n {
		if len(b) < 2 {
			return nil, ErrBadIntent
		}
		flag := b[0]
		op := Op{Del: flag&intentDel != 0, Raw: flag&intentRaw != 0, Keep: flag&intentKeep != 0, Phys: int(b[1])}
		b = b[2:]
		at, k := binary.Varint(b)
		if k <= 0 {
			return nil, ErrBadIntent
		}
		op.At, b = at, b[k:]
		if flag&intentTyped != 0 {
			if len(b) < 1 {
				return nil, ErrBadIntent
			}
			op.Type, b = b[0], b[1:]
			ver, k := binary.Uvarint(b)
			if k <= 0 {
				return nil, ErrBadIntent
			}
			op.Ver, b = ver, b[k:]
		}
		var fields [3][]byte
		for i := range fields {
			l, k := binary.Uvarint(b)
			if k <= 0 || l > uint64(len(b)-k) {
				return nil, ErrBadIntent
			}
			fields[i], b = b[k:k+int(l)], b[k+int(l):]
		}
		op.Key, op.Using, op.Val = fields[0], string(fields[1]), fields[2]
		ops = append(ops, op)
	}
	return ops, nil
}
