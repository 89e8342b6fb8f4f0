package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/keyspace"
)

// Transactions (MULTI, EXEC, DISCARD, WATCH, UNWATCH), with Redis's
// semantics:
//   - After MULTI, commands are checked (known, right arity) and queued,
//     each answered QUEUED; one that fails the check is answered with its
//     error and makes EXEC answer EXECABORT and run nothing.
//   - Isolation: every command other than the admin ones holds the
//     server's transaction lock shared; EXEC holds it exclusively while it
//     runs and commits its queue, so no client sees half a transaction and
//     no write interleaves with one.
//   - WATCH: a watched key written by anyone (any write command, the
//     expiry cycle reclaiming it, FLUSHDB, FLUSHALL, SWAPDB), or expired
//     since it was watched, makes EXEC reply with a null array and run
//     nothing.
//   - Atomicity across a crash: the queue runs against an overlay (data.go)
//     and writes nothing; its writes are then stored as ONE intent record
//     (keyspace.EncodeIntent, key Internal ‖ 't' ‖ id) before any is
//     applied, and the record is deleted once all are. A crash before the
//     record is stored leaves none of the transaction; after, the record
//     is replayed when the server starts (Serve), before any command:
//     all of it. Replay is idempotent (stores and deletes of whole
//     values). A transaction whose writes do not fit in one array value
//     fails with an error and writes nothing.
//   - Errors inside EXEC (a wrong-type value, an integer overflow) are the
//     command's reply in EXEC's array; the other commands still run, as
//     in Redis. An array error while committing fails the whole EXEC
//     (no reply for each command): if it happened after the intent
//     record was stored, the rest is applied before the next write
//     (leftBehind).

// txCommands run at once even inside MULTI.
var txCommands = map[string]bool{"exec": true, "discard": true, "multi": true, "watch": true, "quit": true, "reset": true}

// queue handles a command sent after MULTI that passed serveOne's checks
// (known, right arity, permitted); it reports whether it did.
func (c *call) queue(e *entry) bool {
	cl := c.cl
	if !cl.multi || txCommands[e.name] {
		return false
	}
	if e.noTx {
		c.error(fmt.Sprintf("ERR Command not allowed inside a transaction: '%s' (kvarray)", e.name))
		cl.txFailed = true
		return true
	}
	args := make([][]byte, len(c.args))
	for i, a := range c.args {
		args[i] = append([]byte(nil), a...)
	}
	cl.queued = append(cl.queued, args)
	cl.txShown.Add(1)
	c.w.WriteString("QUEUED")
	return true
}

// abortTx makes the connection's transaction, if one is open, end in
// EXECABORT: c was refused before it could be queued.
func (c *call) abortTx() {
	if c.cl.multi {
		c.cl.txFailed = true
	}
}

func cmdMulti(c *call) {
	if c.cl.multi {
		c.error("ERR MULTI calls can not be nested")
		return
	}
	c.cl.multi = true
	c.cl.txShown.Store(1)
	c.ok()
}

func (cl *conn) endMulti() {
	cl.multi, cl.txFailed, cl.queued = false, false, nil
	cl.txShown.Store(0)
}

func cmdDiscard(c *call) {
	if !c.cl.multi {
		c.error("ERR DISCARD without MULTI")
		return
	}
	c.cl.endMulti()
	c.s.unwatch(c.cl)
	c.ok()
}

func cmdWatch(c *call) {
	if c.cl.multi {
		c.error("ERR WATCH inside MULTI is not allowed")
		return
	}
	for _, k := range c.args[1:] {
		wk := watchKey{c.cl.db, string(k)}
		if _, ok := c.cl.watching[wk]; ok {
			continue
		}
		// The expire-at at WATCH time: a key that expires later counts
		// as modified (Redis 7).
		v, found, err := c.getAny(c.cl.db, k)
		if err != nil {
			c.fail(err)
			return
		}
		if c.cl.watching == nil {
			c.cl.watching = map[watchKey]int64{}
		}
		at := int64(0)
		if found {
			at = v.at
		}
		c.cl.watching[wk] = at
		c.s.watchAdd(c.cl, wk)
	}
	c.ok()
}

func cmdUnwatch(c *call) {
	c.s.unwatch(c.cl)
	c.ok()
}

// watchedExpired reports whether a key watched while it had an expiry
// has expired since.
func (c *call) watchedExpired() bool {
	now := keyspace.NowMs()
	for _, at := range c.cl.watching {
		if keyspace.Expired(at, now) {
			return true
		}
	}
	return false
}

// cmdExec runs the queue under the exclusive transaction lock (serveRESP
// does not take the shared one for EXEC).
func cmdExec(c *call) {
	cl := c.cl
	if !cl.multi {
		c.error("ERR EXEC without MULTI")
		return
	}
	queued, failed := cl.queued, cl.txFailed
	cl.endMulti()
	if failed {
		c.s.unwatch(cl)
		c.error("EXECABORT Transaction discarded because of previous errors.")
		return
	}
	c.s.txmu.Lock()
	defer c.s.txmu.Unlock()
	if err := c.s.completeLeftBehind(c.ctx); err != nil {
		c.s.unwatch(cl)
		c.fail(err)
		return
	}
	dirty := cl.dirty.Load() || c.watchedExpired()
	c.s.unwatch(cl)
	if dirty {
		c.w.WriteNullArray()
		return
	}
	tx := &txn{}
	out := &respWriter{proto: c.w.proto}
	for _, args := range queued {
		e := c.s.lookup(args[0])
		sub := &call{s: c.s, rc: c.rc, cl: cl, args: args, ctx: c.ctx, e: e, w: out, tx: tx}
		// Checked when queued, and again now: an AUTH queued before it
		// may have changed the connection's user.
		if !c.s.permitQueued(sub) {
			continue
		}
		e.calls.Add(1)
		sub.running = true
		if cl.tracking.Load() && readTracked(e) {
			c.s.trackKeys(cl, args)
		}
		c.s.feedMonitorsFirst(sub)
		e.run(sub)
		c.s.feedMonitors(sub)
	}
	if err := c.s.commit(c, tx); err != nil {
		c.error(fmt.Sprintf("%s (transaction not applied; if its intent record was stored it is completed before the next write)", errorReply(err)))
		return
	}
	c.s.publishEvents(tx.events)
	c.w.WriteArray(len(queued))
	c.w.send(out)
}

// errTxTooLarge: a transaction's writes must fit in one array value.
var errTxTooLarge = errors.New("transaction too large")

// commit makes the overlay's writes durable, all or nothing (see the
// package comment of this file).
func (s *Server) commit(c *call, tx *txn) error {
	err := s.commitOps(c.ctx, tx.list)
	if tx.flushed {
		c.noTrack = true
		defer s.trackFlushed()
	}
	for i, op := range tx.list {
		s.touch(c, tx.dbs[i], op.Key)
	}
	for _, k := range tx.touched {
		s.touch(c, k.db, []byte(k.key))
	}
	return err
}

// commitOps applies ops all or nothing: more than one through an intent
// record (a transaction's, or one command's writes of a collection and
// its elements), under the transaction lock (shared or exclusive).
func (s *Server) commitOps(ctx context.Context, ops []keyspace.Op) error {
	if len(ops) == 0 {
		return nil
	}
	var ik []byte
	if len(ops) > 1 {
		rec := keyspace.EncodeIntent(ops)
		if int64(len(rec)) > s.maxValue {
			return fmt.Errorf("its writes take %d bytes, the array's largest value is %d: %w: %w", len(rec), s.maxValue, errTxTooLarge, array.ErrValueTooLarge)
		}
		var id [16]byte
		rand.Read(id[:])
		ik = keyspace.IntentKey([]byte(hex.EncodeToString(id[:])))
		if err := s.a.Store(ctx, ik, rec); err != nil {
			return fmt.Errorf("storing the transaction's intent record: %w", err)
		}
		if s.o.afterIntent != nil {
			if err := s.o.afterIntent(); err != nil {
				s.leftBehind(ik)
				return err
			}
		}
	}
	errs := forEach(len(ops), func(i int) error {
		s.stats.stores.Add(1)
		return s.ks.Apply(ctx, ops[i])
	})
	if _, err := firstError(errs); err != nil {
		s.leftBehind(ik)
		return err
	}
	if ik != nil {
		if err := s.a.Delete(ctx, ik); err != nil && !errors.Is(err, array.ErrNotFound) {
			s.o.errorLog.Printf("kvarray server: deleting intent record %q: %v (writes wait until it is deleted)", ik, err)
			s.leftBehind(ik)
		}
	}
	return nil
}

// Intents left behind. A transaction whose writes failed midway, or
// whose intent record could not be deleted, leaves the record stored, and
// the next start replays it. Any write acknowledged after it would then be
// rolled back to the transaction's value (the replay applies whole
// values), so the record is completed (replayed, then deleted) before
// the next write runs: until that succeeds, writes fail with its error
// (reads go on). The list is changed under the exclusive transaction lock
// and read under either.

// leftBehind records intent record ik (nil: none) as left behind; under
// the transaction lock, shared (a command's own intent: pendMu orders
// those) or exclusive.
func (s *Server) leftBehind(ik []byte) {
	if ik == nil {
		return
	}
	s.pendMu.Lock()
	s.pending = append(s.pending, ik)
	s.pendingN.Store(int32(len(s.pending)))
	s.pendMu.Unlock()
}

// completeLeftBehind replays and deletes the intents left behind; under
// the exclusive transaction lock.
func (s *Server) completeLeftBehind(ctx context.Context) error {
	for {
		// pendMu: a batch's scripts commit while the next one runs
		// (scriptpipe.go), and a failed commit appends meanwhile.
		s.pendMu.Lock()
		if len(s.pending) == 0 {
			s.pendMu.Unlock()
			return nil
		}
		ik := s.pending[0]
		s.pendMu.Unlock()
		if err := s.replayIntent(ctx, ik); err != nil {
			return fmt.Errorf("completing a transaction whose commit failed: %w", err)
		}
		s.pendMu.Lock()
		s.pending = s.pending[1:]
		s.pendingN.Store(int32(len(s.pending)))
		s.pendMu.Unlock()
		// Its writes may land only now: every watcher is told (the
		// record's writes name physical keys, and this is rare).
		s.touchDB(-1)
		s.trackFlushed()
	}
}

// lockForWrite takes the transaction lock shared for a write, once no
// intent is left behind (completing them first); it fails, holding
// nothing, when one cannot be completed.
func (s *Server) lockForWrite(ctx context.Context) error {
	for {
		s.txmu.RLock()
		if s.pendingN.Load() == 0 {
			return nil
		}
		s.txmu.RUnlock()
		s.txmu.Lock()
		err := s.completeLeftBehind(ctx)
		s.txmu.Unlock()
		if err != nil {
			return err
		}
	}
}

// replayIntents completes the transactions a crash interrupted: every
// intent record still stored is applied again, then deleted.
func (s *Server) replayIntents() error {
	keys, err := s.a.Keys(s.ctx, keyspace.IntentPrefix())
	if err != nil {
		return fmt.Errorf("listing transaction intents: %w", err)
	}
	for _, ik := range keys {
		if err := s.replayIntent(s.ctx, ik); err != nil {
			return err
		}
	}
	return nil
}

// replayIntent applies the writes of intent record ik again, if it is
// stored, then deletes it. A record that reads as absent may still have
// pieces that a delete cut short left (a read takes the primary's word):
// they are swept, as a repair does, or a device lost later could bring
// the record back to be replayed over newer writes.
func (s *Server) replayIntent(ctx context.Context, ik []byte) error {
	rec, err := s.a.Retrieve(ctx, ik)
	if errors.Is(err, array.ErrNotFound) {
		if _, err := s.a.Repair(ctx, ik); err != nil && !errors.Is(err, array.ErrNotFound) {
			return fmt.Errorf("sweeping deleted transaction intent %q: %w", ik, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading transaction intent %q: %w", ik, err)
	}
	ops, err := keyspace.DecodeIntent(rec)
	if err != nil {
		return fmt.Errorf("transaction intent %q: %w", ik, err)
	}
	for _, op := range ops {
		if err := s.ks.Apply(ctx, op); err != nil {
			return fmt.Errorf("replaying transaction intent %q: %w", ik, err)
		}
	}
	if err := s.a.Delete(ctx, ik); err != nil && !errors.Is(err, array.ErrNotFound) {
		return fmt.Errorf("deleting replayed transaction intent %q: %w", ik, err)
	}
	s.o.errorLog.Printf("kvarray server: completed a transaction whose commit was interrupted (%d writes)", len(ops))
	return nil
}
