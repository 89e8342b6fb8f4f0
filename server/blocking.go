package server

import (
	"errors"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Blocking commands (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP; the sorted
// sets' and streams' blocking forms plug into the same mechanism): a
// command that finds nothing to serve registers a waiter for its keys and
// its connection waits, holding no lock; a write that commits to a key
// signals it ready, and once that write's command has finished (after its
// EXEC, after its script) the ready keys' waiters are served.
//
// Invariants:
//   - A waiter is registered while its command holds its keys' locks (and
//     the transaction lock shared), after finding every key empty: a write
//     to one of them either came before (and was seen) or signals the
//     waiter.
//   - Waiters of a key are served in the order they blocked; one serving
//     at a time (serveMu), so that order holds across concurrent writers.
//     Serving a waiter runs its spec's serve under its keys' locks, as the
//     command would have, and it stops at the first waiter a key cannot
//     serve (empty again, or of a type the waiter does not take: that
//     waiter stays blocked, as in Redis).
//   - A waiter's reply is made by whoever serves or cancels it (timeout,
//     CLIENT UNBLOCK, the connection gone) and sent by the waiting
//     connection's goroutine: exactly one of them, decided under mu.
//   - Inside MULTI and scripts (c.tx set) a blocking command does not
//     block: it replies as on a timeout.
//   - Across a crash: a waiter is served by an ordinary write (the pop,
//     or for BLMOVE the pop and the push as one intent record) that
//     commits before its reply is sent. A BLMOVE's element is therefore
//     in the source or in the destination after any crash, never both or
//     neither; a BLPOP's element is gone once its pop committed, even if
//     the reply never reached the client (Redis's at-most-once for a pop:
//     reliable queues use BLMOVE).

// blockSpec is what a blocking command waits for and how it is served.
// A type's commands build one and call c.block.
type blockSpec struct {
	// keys are waited for, tried in this order; extra are locked too when
	// serving (BLMOVE's destination).
	keys, extra [][]byte
	// types are the value types a waiter is served from: a key holding
	// another type does not wake it.
	types []byte
	// timeout in milliseconds, 0: for ever.
	timeout int64
	// serve tries key, under the locks of keys and extra: false, with
	// no reply, when it has nothing to serve (empty or missing); true
	// when it replied (with what it popped, or an error).
	serve func(c *call, key []byte) bool
	// timedOut writes the reply of a timeout.
	timedOut func(w *respWriter)
	// anyValue: serve is tried on a key signalled ready whatever it holds
	// now, missing or of another type (XREADGROUP then fails the waiter).
	anyValue bool
}

// waiter is a blocked connection.
type waiter struct {
	cl   *conn
	db   int
	e    *entry
	args [][]byte
	spec *blockSpec
	// start: when the command began (the slow log's time, once served).
	start time.Time
	// done receives the reply, once.
	done chan *respWriter
	// serving: serveReady is trying it (cancel then waits for it);
	// cancel: why it is to stop (0: it is not).
	serving bool
	cancel  int
}

// Why a waiter stops without being served.
const (
	cancelTimeout = 1 + iota
	cancelError
	cancelGone
)

// blocker is the server's waiters.
type blocker struct {
	mu      sync.Mutex
	waiters map[watchKey][]*waiter
	byConn  map[*conn]*waiter
	ready   []watchKey // keys signalled, in order, each once
	isReady map[watchKey]bool
	nReady  atomic.Int32
	n       atomic.Int64 // blocked connections
	serveMu sync.Mutex
}

// blockedClients is INFO's blocked_clients.
func (s *Server) blockedClients() int64 { return s.blk.n.Load() }

// block runs a blocking command: spec.serve on each key, and when none
// serves, a timeout's reply inside MULTI or a script, else a waiter
// registered for the keys (the connection waits once the command has
// released its locks: afterCommand).
func (c *call) block(spec *blockSpec) {
	all := append(slices.Clone(spec.keys), spec.extra...)
	if !c.checkKeys(all...) {
		return
	}
	unlock, err := c.lockKeys(c.cl.db, all...)
	if err != nil {
		c.fail(err)
		return
	}
	defer unlock()
	c.held = true
	defer func() { c.held = false }()
	for _, k := range spec.keys {
		if spec.serve(c, k) {
			return
		}
	}
	if c.tx != nil {
		spec.timedOut(c.w)
		return
	}
	w := &waiter{cl: c.cl, db: c.cl.db, e: c.e, spec: spec, start: time.Now(), done: make(chan *respWriter, 1)}
	for _, a := range c.args {
		w.args = append(w.args, slices.Clone(a))
	}
	b := &c.s.blk
	b.mu.Lock()
	if b.waiters == nil {
		b.waiters, b.byConn, b.isReady = map[watchKey][]*waiter{}, map[*conn]*waiter{}, map[watchKey]bool{}
	}
	for _, k := range uniqueKeys(spec.keys) {
		wk := watchKey{w.db, string(k)}
		b.waiters[wk] = append(b.waiters[wk], w)
	}
	b.byConn[c.cl] = w
	b.n.Add(1)
	b.mu.Unlock()
	c.blocked = w
}

func uniqueKeys(keys [][]byte) [][]byte {
	out := slices.Clone(keys)
	slices.SortFunc(out, func(a, b []byte) int { return compareBytes(a, b) })
	return slices.CompactFunc(out, func(a, b []byte) bool { return string(a) == string(b) })
}

func compareBytes(a, b []byte) int {
	switch {
	case string(a) < string(b):
		return -1
	case string(a) > string(b):
		return 1
	}
	return 0
}

// signal marks key of db ready if a waiter waits for it (a write to it
// committed: Server.touch).
func (b *blocker) signal(db int, key []byte) {
	if b.n.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.signalLocked(watchKey{db, string(key)})
}

func (b *blocker) signalLocked(k watchKey) {
	if len(b.waiters[k]) > 0 && !b.isReady[k] {
		b.isReady[k] = true
		b.ready = append(b.ready, k)
		b.nReady.Add(1)
	}
}

// signalDB marks every waited key of db (-1: of every db) ready
// (FLUSHDB, SWAPDB).
func (b *blocker) signalDB(db int) {
	if b.n.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.waiters {
		if db < 0 || k.db == db {
			b.signalLocked(k)
		}
	}
}

// remove unregisters w; under mu.
func (b *blocker) remove(w *waiter) {
	for _, k := range uniqueKeys(w.spec.keys) {
		wk := watchKey{w.db, string(k)}
		ws := slices.DeleteFunc(b.waiters[wk], func(x *waiter) bool { return x == w })
		if len(ws) == 0 {
			delete(b.waiters, wk)
		} else {
			b.waiters[wk] = ws
		}
	}
	if b.byConn[w.cl] == w {
		delete(b.byConn, w.cl)
	}
	b.n.Add(-1)
}

// cancelReply is the reply of a waiter stopped for why.
func cancelReply(w *waiter, why int) *respWriter {
	out := &respWriter{proto: w.cl.proto}
	switch why {
	case cancelTimeout:
		w.spec.timedOut(out)
	case cancelError:
		out.WriteError("UNBLOCKED client unblocked via CLIENT UNBLOCK")
	}
	return out
}

// stop cancels w for why: it gets its reply at once, or when the serving
// in progress ends unserved. It reports whether w was still blocked.
func (b *blocker) stop(w *waiter, why int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byConn[w.cl] != w || w.cancel != 0 {
		return false
	}
	if w.serving {
		w.cancel = why
		return true
	}
	w.cancel = why
	b.remove(w)
	w.done <- cancelReply(w, why)
	return true
}

// unblock is CLIENT UNBLOCK's: it stops cl's wait, if it waits.
func (s *Server) unblock(cl *conn, why int) bool {
	b := &s.blk
	b.mu.Lock()
	w := b.byConn[cl]
	b.mu.Unlock()
	return w != nil && b.stop(w, why)
}

// afterCommand runs once a command has released its locks: it serves
// the keys signalled ready, then, if the command blocked, waits.
func (s *Server) afterCommand(c *call) {
	if s.blk.nReady.Load() > 0 {
		s.serveReady()
	}
	if w := c.blocked; w != nil {
		c.blocked = nil
		s.wait(c, w)
	}
	s.afterTracked(c)
	s.trackBroadcast()
}

// serveReady serves the waiters of the keys signalled ready, in order,
// each key's until one is not served; what they write signals more.
func (s *Server) serveReady() {
	b := &s.blk
	b.serveMu.Lock()
	defer b.serveMu.Unlock()
	for {
		b.mu.Lock()
		if len(b.ready) == 0 {
			b.mu.Unlock()
			return
		}
		k := b.ready[0]
		b.ready = b.ready[1:]
		delete(b.isReady, k)
		b.nReady.Add(-1)
		b.mu.Unlock()
		for {
			b.mu.Lock()
			var w *waiter
			for _, x := range b.waiters[k] {
				if x.cancel == 0 {
					w = x
					break
				}
			}
			if w == nil {
				b.mu.Unlock()
				break
			}
			w.serving = true
			b.mu.Unlock()
			out, served := s.tryServe(w, []byte(k.key))
			b.mu.Lock()
			w.serving = false
			switch {
			case served:
				b.remove(w)
				w.done <- out
			case w.cancel != 0:
				b.remove(w)
				w.done <- cancelReply(w, w.cancel)
			}
			b.mu.Unlock()
			if !served {
				break
			}
			s.logSlow(w.e, w.cl, w.args, time.Since(w.start))
		}
	}
}

// tryServe runs w's serve on key as its command would, under the locks.
func (s *Server) tryServe(w *waiter, key []byte) (*respWriter, bool) {
	out := &respWriter{proto: w.cl.proto}
	c := &call{s: s, cl: w.cl, args: w.args, ctx: s.ctx, e: w.e, w: out, running: true}
	if err := s.lockForWrite(c.ctx); err != nil {
		return nil, false
	}
	defer s.txmu.RUnlock()
	unlock, err := c.lockKeys(w.db, append(slices.Clone(w.spec.keys), w.spec.extra...)...)
	if err != nil {
		return nil, false
	}
	defer unlock()
	c.held = true
	v, found, err := c.getAny(w.db, key)
	if err != nil || !w.spec.anyValue && (!found || !slices.Contains(w.spec.types, v.typ)) {
		return nil, false
	}
	return out, w.spec.serve(c, key)
}

// wait blocks c's connection until w is served or stopped, and sends its
// reply.
func (s *Server) wait(c *call, w *waiter) {
	var timer <-chan time.Time
	if w.spec.timeout > 0 {
		t := time.NewTimer(time.Duration(w.spec.timeout) * time.Millisecond)
		defer t.Stop()
		timer = t.C
	}
	gone, stopPeek := c.cl.peek()
	defer stopPeek()
	for {
		select {
		case out := <-w.done:
			c.w.send(out)
			return
		case <-timer:
			timer = nil
			s.blk.stop(w, cancelTimeout)
		case <-gone:
			gone = nil
			s.blk.stop(w, cancelGone)
		case <-s.ctx.Done():
			s.blk.stop(w, cancelGone)
		}
	}
}

// peekLimit is how much a blocked client may send before its socket is
// no longer read (Redis buffers a blocked client's input too).
const peekLimit = 1 << 20

// peek reads cl's socket while its goroutine waits, so that a client
// that disconnects is seen: gone is closed then. What it reads is given
// to Read afterwards; stop ends the reading.
func (cl *conn) peek() (gone <-chan struct{}, stop func()) {
	g := make(chan struct{})
	if cl.Conn == nil || cl.readErr != nil {
		return g, func() {}
	}
	var stopping atomic.Bool
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		buf := make([]byte, 4096)
		for len(cl.peeked) < peekLimit {
			n, err := cl.Conn.Read(buf)
			cl.peeked = append(cl.peeked, buf[:n]...)
			if err != nil {
				if !stopping.Load() || !errors.Is(err, os.ErrDeadlineExceeded) {
					cl.peekErr = err
					close(g)
				}
				return
			}
		}
	}()
	return g, func() {
		stopping.Store(true)
		cl.Conn.SetReadDeadline(time.Now())
		<-exited
		cl.Conn.SetReadDeadline(time.Time{})
		if cl.draining.Load() {
			cl.Conn.SetReadDeadline(time.Now())
		}
	}
}

// timeoutArg parses a blocking command's timeout (seconds, fractional)
// into milliseconds, as Redis: negative is an error, 0 waits for ever.
func (c *call) timeoutArg(a []byte) (int64, bool) {
	f, err := strconv.ParseFloat(string(a), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		c.error("ERR timeout is not a float or out of range")
		return 0, false
	}
	ms := math.Ceil(f * 1000)
	switch {
	case ms < 0:
		c.error("ERR timeout is negative")
		return 0, false
	case ms > math.MaxInt64/4:
		c.error("ERR timeout is out of range")
		return 0, false
	}
	return int64(ms), true
}
