package transfer

import (
	"context"
	"fmt"
	"sync"

	"github.com/kvarray/kvarray/collection"
	"github.com/kvarray/kvarray/internal/rdb"
	"github.com/kvarray/kvarray/keyspace"
)

// A Snapshot makes an export the keyspace at one moment while writers go
// on, as a fork does for Redis, by copy on write: from its start (taken
// when no write is in flight), a writer calls Preserve for each key
// before it changes it, under the key's lock, and the key's state at the
// start is kept until the export reads it; the export reads a key
// under the same lock, so it sees either the key untouched since the
// start or the kept state. Keys the export has read, and keys of
// databases it has finished, are not kept again: the memory is that of
// the keys written during the export before it reached them.
type Snapshot struct {
	mu     sync.Mutex
	read   map[dbKey]bool
	kept   map[dbKey]item
	closed map[int]bool
	err    error
}

type dbKey struct {
	db  int
	key string
}

type item struct {
	obj   rdb.Object
	at    int64
	found bool
}

// NewSnapshot starts a snapshot: the caller makes sure no write is in
// flight then.
func NewSnapshot() *Snapshot {
	return &Snapshot{read: map[dbKey]bool{}, kept: map[dbKey]item{}, closed: map[int]bool{}}
}

// Preserve keeps key's state before a write changes it; the caller holds
// key's lock.
func (s *Snapshot) Preserve(ctx context.Context, ks *keyspace.Store, db int, key []byte) {
	k := dbKey{db, string(key)}
	s.mu.Lock()
	skip := s.closed[db] || s.read[k] || s.err != nil
	if _, ok := s.kept[k]; ok {
		skip = true
	}
	s.mu.Unlock()
	if skip {
		return
	}
	o, at, found, err := readKey(ctx, ks, collection.StoreSource(ks), db, key, nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.err = fmt.Errorf("keeping db %d key %q for the export: %w", db, TruncKey(key), err)
		return
	}
	s.kept[k] = item{o, at, found}
}

// Fail ends the snapshot with err (a change it cannot follow, as
// SWAPDB): the export fails.
func (s *Snapshot) Fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// take is the export's read of key, under its lock: the kept state when
// the key changed since the start (ok), and the key marked read.
func (s *Snapshot) take(db int, key []byte) (item, bool, error) {
	k := dbKey{db, string(key)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.read[k] = true
	it, ok := s.kept[k]
	delete(s.kept, k)
	return it, ok, s.err
}

// rest closes db: the keys it held at the start that the export's
// listing did not see (deleted or renamed since), sorted by nothing.
func (s *Snapshot) rest(db int) (keys []string, items []item, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed[db] = true
	for k, it := range s.kept {
		if k.db == db {
			delete(s.kept, k)
			if it.found {
				keys, items = append(keys, k.key), append(items, it)
			}
		}
	}
	return keys, items, s.err
}
