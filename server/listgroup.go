package server

import (
	"context"
	"sync"
	"time"

	"github.com/kvarray/kvarray/collection"
	"github.com/kvarray/kvarray/device"
)

// Group commit of one list's pushes and pops (issue 37). A queue is one
// hot key: every LPUSH or RPOP of it waited for the key's lock, then for
// its own two rounds of device syncs (elements, then the value), so 16
// producers pushed 1,100 elements/s where SETs of 16 keys ran nine times
// faster. Now the pushes and pops of a list that arrive while a batch of
// them is being written wait in the list's group, and the next batch
// takes them all: it opens the list once, runs each command's step on it
// in arrival order, and writes the result once (collection.List.Commit:
// their elements, then the value, then the popped elements' deletes).
//
// Contract, as each command's client sees it:
//   - A step runs as if its command had run alone at its place in the
//     batch: it sees the list the steps before it left, and its reply
//     (a push's length, a pop's elements) is what it would have been.
//   - Each reply goes out after the batch is durable; a failed write
//     fails every command of the batch (none acknowledged).
//   - The batch holds the key's lock while it runs and writes, so other
//     commands on the key (LRANGE, MULTI/EXEC, a blocked BLPOP's try) see
//     the list before or after a whole batch. A batch of pushes only, or
//     of pops only, is phased; a pop then a push at the same end writes
//     inside the old range, which Commit reports, and the batch goes
//     through the intent record like any other change of several values.
//   - Commands of one connection on one key run one after another
//     (pipeline.go), so a connection has at most one step in a group and
//     its commands keep their order.
//
// Only plain commands are grouped: inside MULTI/EXEC or a script (c.tx),
// or a blocked command's retry (c.held), they run as before.

// listGroups are the groups of the lists being written to now.
type listGroups struct {
	mu sync.Mutex
	m  map[string]*listGroup // by array key
}

// listGroup is one list's steps waiting for the next batch.
type listGroup struct {
	queue   []*listStep
	leading bool // a batch is being made or written
	// last is how many steps the last batch had; full is closed when as
	// many wait again (nil: no batch is lingering).
	last int
	full chan struct{}
}

// Lingering. Clients answered by one batch come back at about the same
// time, but the first of them to arrive would lead a batch of its own,
// and the rest the next: batches of 1 and 15 in turn where 16 clients
// push. So a leader whose list's last batch had two steps or more waits
// until as many have arrived, or listLingerPerStep for each of them at
// most (listLingerMax in all), before it takes them. A lone client never
// waits: its batches have one step.
const (
	listLingerPerStep = 50 * time.Microsecond
	listLingerMax     = time.Millisecond
)

// listGroupsKept is how many idle groups are kept for their last batch's
// size at most: past it, a group goes once idle.
const listGroupsKept = 1024

// listStep is one command's change of a list. apply runs on the batch
// leader's goroutine while the command's own waits; it returns an error
// only when it changed nothing (the command fails alone).
type listStep struct {
	apply func(l *collection.List) error
	err   error
	done  chan bool // true: lead the next batch; false: done, err set
}

// grouped runs apply on key's list in the list's next batch and returns
// once the batch is written (see above).
func (c *call) grouped(key []byte, apply func(l *collection.List) error) error {
	g := &c.s.lists
	id := string(c.s.ks.Key(c.cl.db, key))
	st := &listStep{apply: apply, done: make(chan bool, 1)}
	g.mu.Lock()
	lg := g.m[id]
	if lg == nil {
		if g.m == nil {
			g.m = map[string]*listGroup{}
		}
		lg = &listGroup{}
		g.m[id] = lg
	}
	busy := lg.leading
	lg.leading = true
	lg.queue = append(lg.queue, st)
	if lg.full != nil && len(lg.queue) >= lg.last {
		close(lg.full)
		lg.full = nil
	}
	g.mu.Unlock()
	if busy {
		if lead := <-st.done; !lead {
			return st.err
		}
	}
	g.mu.Lock()
	if n := lg.last; n >= 2 && len(lg.queue) < n {
		full := make(chan struct{})
		lg.full = full
		g.mu.Unlock()
		t := time.NewTimer(min(listLingerMax, time.Duration(n)*listLingerPerStep))
		select {
		case <-full:
		case <-t.C:
		}
		t.Stop()
		g.mu.Lock()
		lg.full = nil
	}
	batch := lg.queue
	lg.queue = nil
	lg.last = len(batch)
	g.mu.Unlock()

	c.runSteps(key, batch)

	g.mu.Lock()
	switch {
	case len(lg.queue) > 0:
		lg.queue[0].done <- true // arrived meanwhile: it leads the next
	case lg.last < 2 || len(g.m) > listGroupsKept:
		delete(g.m, id) // a lone client's list: nobody to wait for
	default:
		lg.leading = false // kept for its last batch's size
	}
	g.mu.Unlock()
	for _, b := range batch {
		if b != st {
			b.done <- false
		}
	}
	return st.err
}

// runSteps is one batch: steps on key's list, written once. The batch
// goes on if its leader's client goes away: the others wait for it. Its
// writes are Gathered: a device does not wait for more to join them.
func (c *call) runSteps(key []byte, steps []*listStep) {
	bc := *c
	bc.ctx = device.Gathered(context.WithoutCancel(c.ctx))
	keys := [][]byte{key}
	err := func() error {
		unlock, err := bc.lockKeys(bc.cl.db, keys...)
		if err != nil {
			return err
		}
		defer unlock()
		ls, first, err := bc.openLists(keys, false)
		if err != nil {
			return err
		}
		for _, st := range steps {
			st.err = st.apply(ls[0])
		}
		return bc.commitLists(keys, ls, first)
	}()
	if err != nil {
		for _, st := range steps {
			if st.err == nil {
				st.err = err
			}
		}
	}
}

// groupable reports whether c's list commands may join a group: plain
// commands only (see above).
func (c *call) groupable() bool { return c.tx == nil && !c.held }
