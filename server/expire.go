package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/keyspace"
)

// The active expiry cycle reclaims keys whose expire-at has passed. It
// never scans the keys: it lists the expiry index (keyspace) bucket by
// bucket, 256 ms of expire-at times per listing, from the oldest bucket
// not yet done to now's. Once at start it lists the whole index (keys
// with an expiry only), so that keys that expired while the server was
// down are reclaimed too.
//
// Each due entry is checked against the value's own expire-at, under the
// key's write lock and the shared transaction lock, before the value is
// deleted; the entry is deleted in any case (it was due, so it is done or
// stale). Work goes in batches of expiryBatch keys, the transaction lock
// released between batches, so that clients and EXEC are never held up
// by more than one batch. A bucket is marked done only once now is past
// the bucket after it, so that an index entry being written when its
// bucket was listed is not skipped.
//
// Reads never need the cycle: an expired value is absent on access (lazy
// expiry in keyspace.Store.Get).

const (
	expiryPeriod = 100 * time.Millisecond
	expiryBatch  = 512
)

type expiry struct {
	life    sync.Mutex // guards stop, done, stopped: start and Shutdown may race
	stop    chan struct{}
	done    chan struct{}
	stopped bool
	once    sync.Once
	// cursor is the oldest bucket not yet done. It is atomic because
	// dueKeys reads it while a transaction (which excludes the cycle's
	// batches) runs: it must never wait for the cycle.
	cursor atomic.Int64
	mu     sync.Mutex // one pass of the cycle at a time
}

func (s *Server) startExpiry() {
	s.exp.life.Lock()
	defer s.exp.life.Unlock()
	if s.exp.stopped {
		return // shut down before it started
	}
	s.exp.stop = make(chan struct{})
	s.exp.done = make(chan struct{})
	// Older buckets are covered by the loop's first pass over the whole
	// index.
	s.exp.cursor.Store(keyspace.Bucket(keyspace.NowMs()) - 1)
	go s.expiryLoop()
}

func (s *Server) stopExpiry() {
	s.exp.once.Do(func() {
		s.exp.life.Lock()
		s.exp.stopped = true
		stop, done := s.exp.stop, s.exp.done
		s.exp.life.Unlock()
		if stop == nil {
			return
		}
		close(stop)
		<-done
	})
}

func (s *Server) expiryLoop() {
	defer close(s.exp.done)
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	go func() {
		select {
		case <-s.exp.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	// At start: every entry, whatever its bucket.
	if err := s.reclaimPrefix(ctx, keyspace.ExpiryPrefix(), keyspace.NowMs()); err != nil && ctx.Err() == nil {
		s.o.errorLog.Printf("kvarray server: expiry cycle: %v", err)
	}
	t := time.NewTicker(expiryPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.expireDue(ctx); err != nil && ctx.Err() == nil {
			s.o.errorLog.Printf("kvarray server: expiry cycle: %v", err)
		}
	}
}

// expireDue reclaims the due keys of the buckets from the cursor to now's.
func (s *Server) expireDue(ctx context.Context) error {
	s.exp.mu.Lock()
	defer s.exp.mu.Unlock()
	now := keyspace.NowMs()
	nowB := keyspace.Bucket(now)
	for b := s.exp.cursor.Load(); b <= nowB; b++ {
		if err := s.reclaimPrefix(ctx, keyspace.BucketPrefix(b), now); err != nil {
			return err
		}
		if b < nowB-1 {
			s.exp.cursor.Store(b + 1)
		}
	}
	return nil
}

// dueKeys lists db's keys whose index entries are due and not yet
// reclaimed (KEYS, SCAN, RANDOMKEY filter them out).
func (s *Server) dueKeys(ctx context.Context, db int) (map[string]bool, error) {
	from := s.exp.cursor.Load()
	now := keyspace.NowMs()
	due := map[string]bool{}
	for b := from; b <= keyspace.Bucket(now); b++ {
		ks, err := s.a.Keys(ctx, keyspace.BucketPrefix(b))
		if err != nil {
			return nil, err
		}
		for _, k := range ks {
			if at, d, key, ok := s.ks.ParseIndex(k); ok && d == db && at <= now {
				due[string(key)] = true
			}
		}
	}
	return due, nil
}

// reclaimPrefix reclaims the due entries of the index that start with
// prefix.
func (s *Server) reclaimPrefix(ctx context.Context, prefix []byte, now int64) error {
	entries, err := s.a.Keys(ctx, prefix)
	if err != nil {
		return err
	}
	var due [][]byte
	for _, k := range entries {
		if at, _, _, ok := keyspace.ParseExpiryKey(k); ok && at <= now {
			due = append(due, k)
		}
	}
	for len(due) > 0 {
		n := min(len(due), expiryBatch)
		if err := s.reclaimBatch(ctx, due[:n], now); err != nil {
			return err
		}
		due = due[n:]
	}
	return nil
}

func (s *Server) reclaimBatch(ctx context.Context, entries [][]byte, now int64) error {
	s.txmu.RLock()
	defer s.txmu.RUnlock()
	errs := forEach(len(entries), func(i int) error {
		e := entries[i]
		if _, db, key, ok := s.ks.ParseIndex(e); ok {
			if err := s.reclaim(ctx, db, key, now); err != nil {
				return err
			}
		}
		if err := s.a.Delete(ctx, e); err != nil && !errors.Is(err, array.ErrNotFound) {
			return err
		}
		return nil
	})
	_, err := firstError(errs)
	return err
}

// reclaim deletes key of db if its own expire-at has passed.
func (s *Server) reclaim(ctx context.Context, db int, key []byte, now int64) error {
	tk, err := s.locks.Lock(ctx, s.ks.Key(db, key))
	if err != nil {
		return err
	}
	defer tk.Release()
	_, at, err := s.ks.GetRaw(ctx, db, key)
	switch {
	case errors.Is(err, array.ErrNotFound):
		return nil
	case errors.Is(err, keyspace.ErrBadValue):
		return nil // not ours to delete
	case err != nil:
		return err
	case !keyspace.Expired(at, now):
		return nil // stale entry: the key was set again
	}
	if err := s.a.Delete(ctx, s.ks.Key(db, key)); err != nil && !errors.Is(err, array.ErrNotFound) {
		return err
	}
	s.stats.expired.Add(1)
	s.touch(db, key)
	return nil
}
