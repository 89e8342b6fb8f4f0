package server

import (
	"sync"
	"sync/atomic"
)

// Scripts in a batch. A script is one unit towards other clients: it runs
// under the exclusive transaction lock, so no other command interleaves
// with it. Holding that lock through the script's commit too made
// scripts one at a time end to end, each waiting for its own synced
// writes: EVALSHA ran at a tenth of SET's rate. So scripts that arrive
// while others run join them in a batch that holds the lock once
// (enterScripts, leaveScripts), and while one script's writes are being
// committed the next one's Lua runs (one Lua at a time: luaMu).
//
// Invariants:
//   - Other clients' commands see either none or all of a script's
//     writes: the batch holds the exclusive lock until the last of its
//     scripts has committed.
//   - A script never reads what an earlier script of the batch has not
//     yet committed: every command a script runs first waits for the
//     commits in flight that write any of its keys (logical keys, by
//     database, from the command's key specs, as ACL key patterns find
//     them), and a command whose keys cannot be named that way (no key
//     specs: DBSIZE, SCAN, FLUSHDB; or keys in another database: MOVE,
//     COPY) waits for every commit in flight. So a commit that fails
//     leaves no later script acting on writes that never landed.
//   - Writes of one key land in the order the scripts ran: a commit
//     waits for the earlier commits in flight that write any of its keys
//     (and for all of them after a script that wrote without naming its
//     keys).
//   - Once another command waits for the transaction lock, a batch
//     admits no more than maxScriptBatch scripts, so that it gets the
//     lock soon; while none waits, a batch goes on admitting (ending it
//     would only make the next script wait for every commit in flight).
type scriptPipe struct {
	mu       sync.Mutex
	held     bool // the batch holds the transaction lock exclusively
	running  int  // scripts admitted that have not ended
	admitted int  // scripts admitted into this batch
	// opened, while a script waits for the transaction lock to start a
	// batch, is closed once it holds it: the scripts that arrive
	// meanwhile wait for it and join that batch.
	opened   chan struct{}
	inflight map[watchKey]*flight
	flights  map[*flight]bool // every commit in flight
	global   map[*flight]bool // commits in flight whose keys are not named
}

// maxScriptBatch bounds how many scripts one batch admits while other
// commands wait for the transaction lock.
const maxScriptBatch = 64

// txLock is the transaction lock (sync.RWMutex) counting the callers
// waiting for it, so that a batch of scripts knows whether to end.
type txLock struct {
	sync.RWMutex
	waiting atomic.Int32
}

// Lock takes the lock exclusively.
func (l *txLock) Lock() {
	if !l.TryLock() {
		l.waiting.Add(1)
		l.RWMutex.Lock()
		l.waiting.Add(-1)
	}
}

// RLock takes the lock shared.
func (l *txLock) RLock() {
	if !l.TryRLock() {
		l.waiting.Add(1)
		l.RWMutex.RLock()
		l.waiting.Add(-1)
	}
}

// flight is one script's commit in flight.
type flight struct {
	done chan struct{}
	keys []watchKey
}

// enterScripts admits a script into the running batch, or starts one by
// taking the exclusive transaction lock. Only one script waits on that
// lock for a batch: had every script that found the batch full waited on
// it, each would have taken it for a batch of its own (one script at a
// time again, each with its own synced commit).
func (s *Server) enterScripts() {
	p := &s.pipe
	p.mu.Lock()
	for {
		if p.held && (p.admitted < maxScriptBatch || s.txmu.waiting.Load() == 0) {
			p.running++
			p.admitted++
			p.mu.Unlock()
			return
		}
		if p.opened == nil {
			break
		}
		opened := p.opened
		p.mu.Unlock()
		<-opened
		p.mu.Lock()
	}
	opened := make(chan struct{})
	p.opened = opened
	p.mu.Unlock()
	s.txmu.Lock()
	p.mu.Lock()
	p.held, p.running, p.admitted = true, 1, 1
	p.opened = nil
	p.mu.Unlock()
	close(opened)
}

// leaveScripts ends an admitted script; the last one out of the batch
// lets the transaction lock go.
func (s *Server) leaveScripts() {
	p := &s.pipe
	p.mu.Lock()
	p.running--
	last := p.running == 0
	if last {
		p.held = false
	}
	p.mu.Unlock()
	if last {
		s.txmu.Unlock()
	}
}

// scriptKeys is what a script's commands named: the keys its write
// commands name, and whether one wrote without naming its keys.
type scriptKeys struct {
	writes map[watchKey]bool
	global bool
}

// keylessSafe are commands without keys that read or change nothing of
// the keyspace, so they need not wait for the commits in flight.
var keylessSafe = map[string]bool{"ping": true, "echo": true, "time": true, "select": true, "publish": true, "spublish": true}

// crossDB are commands whose key specs name keys of the script's database
// but that act on another one too.
var crossDB = map[string]bool{"move": true, "copy": true, "swapdb": true, "flushdb": true, "flushall": true}

// awaitKeys waits for the commits in flight that the script command argv
// (of entry e, run in database db) depends on, and notes what it writes
// in sk.
func (s *Server) awaitKeys(sk *scriptKeys, e *entry, db int, argv [][]byte) {
	var keys []watchKey
	if cmd := s.acl.Table().Resolve(argv); cmd != nil {
		for _, k := range cmd.KeysOf(argv) {
			keys = append(keys, watchKey{db, string(argv[k.Pos])})
		}
	}
	named := len(keys) > 0 && !crossDB[e.name]
	if e.write() {
		if named {
			if sk.writes == nil {
				sk.writes = map[watchKey]bool{}
			}
			for _, k := range keys {
				sk.writes[k] = true
			}
		} else {
			sk.global = true
		}
	}
	if !named && keylessSafe[e.name] {
		return
	}
	s.pipe.await(keys, !named)
}

// await waits for the commits in flight that write keys (all of them
// when every is set), and for those whose keys are not named.
func (p *scriptPipe) await(keys []watchKey, every bool) {
	for _, f := range p.ahead(keys, every) {
		<-f.done
	}
}

// ahead returns the commits in flight that a command or commit of keys
// must follow.
func (p *scriptPipe) ahead(keys []watchKey, every bool) []*flight {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*flight
	seen := map[*flight]bool{}
	add := func(f *flight) {
		if f != nil && !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	switch {
	case every:
		for f := range p.flights {
			add(f)
		}
	default:
		for f := range p.global {
			add(f)
		}
		for _, k := range keys {
			add(p.inflight[k])
		}
	}
	return out
}

// takeOff registers the commit of a script that wrote sk, before the next
// script's Lua may run (under luaMu), and returns it with the commits in
// flight it must follow.
func (p *scriptPipe) takeOff(sk *scriptKeys) (*flight, []*flight) {
	f := &flight{done: make(chan struct{})}
	for k := range sk.writes {
		f.keys = append(f.keys, k)
	}
	prev := p.ahead(f.keys, sk.global)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inflight == nil {
		p.inflight, p.flights, p.global = map[watchKey]*flight{}, map[*flight]bool{}, map[*flight]bool{}
	}
	p.flights[f] = true
	if sk.global {
		p.global[f] = true
	}
	for _, k := range f.keys {
		p.inflight[k] = f
	}
	return f, prev
}

// land ends commit f: the scripts waiting for it go on.
func (p *scriptPipe) land(f *flight) {
	p.mu.Lock()
	delete(p.flights, f)
	delete(p.global, f)
	for _, k := range f.keys {
		if p.inflight[k] == f {
			delete(p.inflight, k)
		}
	}
	p.mu.Unlock()
	close(f.done)
}
