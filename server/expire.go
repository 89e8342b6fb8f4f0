package server

import (
	"context"
	"errors"
	"fmt"
	"github.com/kvarray/kvarray/pubsub"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/keyspace"
)

// The active expiry cycle reclaims keys whose expire-at has passed. It
// never scans the keys: it pages through the expiry index (keyspace),
// whose entries sort by expire-at, from the cursor up to the first entry
// not yet due, so a pass costs O(due entries + one page).
//
// The cursor is a bucket (256 ms of expire-at times) below which the
// index is known to hold no entry: every pass starts there. At start it
// is 0, so the first pass reaches keys that expired while the server was
// down. After a pass that reclaimed everything due at now, it moves to
// now less expiryLag: an index entry is written before its value, by a
// writer that saw its expire-at in the future, so an entry due at now can
// still appear after the pass went by only if its store took longer than
// the lag; such an entry is reclaimed at the next start (its value is
// invisible meanwhile: reads check the value's own expire-at). Starting
// at the cursor rather than at the index's beginning keeps a pass from
// seeking over the deletion marks (tombstones) that reclaimed entries
// leave on devices such as Pebble until they compact.
//
// Each due entry is checked against the value's own expire-at, under the
// key's write lock and the shared transaction lock, before the value is
// deleted; then the entry is deleted (it was due, so it is done or
// stale). The value goes first: an entry deleted before its value would
// leave a value no pass ever finds. Keys are reclaimed expiryWorkers at a
// time, each holding its key's lock and the transaction lock only for its
// own few array operations, so clients and EXEC wait for at most one
// key's reclaim, never for a batch; the next page is listed while the
// current one is reclaimed.
//
// Reads never need the cycle: an expired value is absent on access (lazy
// expiry in keyspace.Store.Get).

const (
	expiryPeriod = 100 * time.Millisecond
	// expiryPage is how many index entries a pass lists at a time.
	expiryPage = 1024
	// expiryWorkers is how many keys are reclaimed concurrently: enough
	// to keep devices with a per-write sync (Pebble) busy, few enough
	// that client commands queue behind little.
	expiryWorkers = 32
	// expiryLag: how far behind now a completed pass leaves the cursor.
	expiryLag = 10 * time.Second
)

type expiry struct {
	life    sync.Mutex // guards stop, done, stopped: start and Shutdown may race
	stop    chan struct{}
	done    chan struct{}
	stopped bool
	once    sync.Once
	// cursor is the bucket passes start at. It is atomic because dueKeys
	// reads it while a transaction (which excludes reclaims) runs: it
	// must never wait for the cycle.
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
	s.exp.cursor.Store(0) // the first pass covers the whole index
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
	t := time.NewTicker(expiryPeriod)
	defer t.Stop()
	for {
		start := time.Now()
		if err := s.expireDue(ctx); err != nil && ctx.Err() == nil {
			s.o.errorLog.Printf("kvarray server: expiry cycle: %v", err)
		}
		s.latencyEvent("expire-cycle", time.Since(start))
		if err := s.reclaimGarbage(ctx); err != nil && ctx.Err() == nil {
			s.o.errorLog.Printf("kvarray server: reclaiming removed collections' elements: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// expireDue is one pass: it reclaims every key due at now and, if all
// went well, moves the cursor up to now less the lag.
func (s *Server) expireDue(ctx context.Context) error {
	s.exp.mu.Lock()
	defer s.exp.mu.Unlock()
	now := keyspace.NowMs()
	jobs := make(chan []byte, expiryPage)
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range expiryWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range jobs {
				if failed.Load() != nil {
					continue // drain: the pass stops
				}
				if err := s.reclaimEntry(ctx, e, now); err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	err := s.eachDue(ctx, now, func(entries [][]byte) bool {
		for _, e := range entries {
			jobs <- e
		}
		return failed.Load() == nil
	})
	close(jobs)
	wg.Wait()
	if p := failed.Load(); p != nil && err == nil {
		err = *p
	}
	if err != nil {
		return err
	}
	if c := keyspace.Bucket(now - expiryLag.Milliseconds()); c > s.exp.cursor.Load() {
		s.exp.cursor.Store(c)
	}
	return nil
}

// eachDue lists the index entries due at now, from the cursor's bucket
// on, a page at a time, and hands each page's due entries to fn until fn
// returns false. Entries sort by expire-at, so the listing stops at the
// first page holding an entry that is not due.
func (s *Server) eachDue(ctx context.Context, now int64, fn func(entries [][]byte) bool) error {
	prefix := keyspace.ExpiryPrefix()
	// Every entry of the cursor's bucket and later sorts after the
	// bucket's prefix.
	after := keyspace.BucketPrefix(s.exp.cursor.Load())
	for {
		// Fresh: a pass mostly stops within its first page, and device
		// cursors kept for a next page it never asks for would stay open
		// until swept; a page's seek is nothing beside its deletes.
		page, next, err := s.a.KeysFrom(ctx, prefix, after, expiryPage, array.Fresh())
		if err != nil {
			return fmt.Errorf("listing the expiry index: %w", err)
		}
		due := page[:0]
		more := next != nil
		for _, k := range page {
			at, _, _, ok := keyspace.ParseExpiryKey(k)
			if !ok {
				continue
			}
			if at > now {
				more = false
				break
			}
			due = append(due, k)
		}
		if len(due) > 0 && !fn(due) || !more {
			return nil
		}
		after = next
	}
}

// dueKeys lists db's keys whose index entries are due and not yet
// reclaimed (KEYS and RANDOMKEY filter them out).
func (s *Server) dueKeys(ctx context.Context, db int) (map[string]bool, error) {
	due := map[string]bool{}
	var ferr error
	err := s.eachDue(ctx, keyspace.NowMs(), func(entries [][]byte) bool {
		var keys [][]byte
		for _, k := range entries {
			if _, d, key, ok := s.ks.ParseIndex(k); ok && d == db {
				keys = append(keys, key)
			}
		}
		if ferr = s.ks.FullKeys(ctx, db, keys); ferr != nil {
			return false
		}
		for _, k := range keys {
			due[string(k)] = true
		}
		return true
	})
	if err == nil {
		err = ferr
	}
	return due, err
}

// reclaimEntry reclaims the key of one due index entry, then deletes the
// entry.
func (s *Server) reclaimEntry(ctx context.Context, e []byte, now int64) error {
	if err := s.lockForWrite(ctx); err != nil {
		return err
	}
	defer s.txmu.RUnlock()
	if _, db, key, ok := s.ks.ParseIndex(e); ok {
		key, err := s.ks.FullKey(ctx, s.ks.Phys(db), key) // a long key's name
		if err != nil {
			return err
		}
		if err := s.reclaim(ctx, db, key, now); err != nil {
			return err
		}
	}
	if err := s.a.Delete(ctx, e); err != nil && !errors.Is(err, array.ErrNotFound) {
		return err
	}
	return nil
}

// reclaim deletes key of db if its own expire-at has passed.
func (s *Server) reclaim(ctx context.Context, db int, key []byte, now int64) error {
	tk, err := s.locks.Lock(ctx, s.ks.Key(db, key))
	if err != nil {
		return err
	}
	defer tk.Release()
	deleted, err := s.ks.DeleteExpired(ctx, db, key, now)
	if deleted {
		s.stats.expired.Add(1)
		s.touch(nil, db, key)
		s.hub.Notify(s.notifyConf(), pubsub.Expired, "expired", db, key)
	}
	return err
}
