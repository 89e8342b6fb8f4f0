// Package keylock serialises operations on the same key in the order they
// were submitted: a ticket is taken synchronously when an operation is
// submitted (so asynchronous submissions keep their order) and waited on
// when the operation runs. Keys without waiters cost nothing.
package keylock

import (
	"context"
	"sync"
)

// Table holds the per-key queues.
type Table struct {
	mu sync.Mutex
	// tails holds, for each key with a turn not yet ended, the last turn
	// taken: a key's queue is its turns linked through their channels.
	tails  map[string]*Ticket
	holder Holder
}

// Holder is told of every turn while it is held: Begin when the turn
// comes (Wait returns), End with Begin's result at Release. It lets a
// caller wait for every turn held at some moment to end (see
// mechanism.Env.Quiesce) without knowing the keys.
type Holder interface {
	Begin() uint64
	End(uint64)
}

// Option configures a Table.
type Option func(*Table)

// WithHolder reports every turn held on the table to h.
func WithHolder(h Holder) Option { return func(t *Table) { t.holder = h } }

// Ticket is one turn on a key. A turn nobody waits behind costs one
// allocation besides its key: the channel the next turn waits on is made
// only when a next turn is taken.
type Ticket struct {
	t    *Table
	key  string        // the key as held in tails
	prev chan struct{} // closed when the previous turn ends; nil if none
	// done is closed when this turn ends; made by the next turn's
	// Enqueue (under the table's lock), nil while there is none.
	done   chan struct{}
	waited bool
	held   uint64 // Holder.Begin's result, while waited
}

// New returns an empty table.
func New(opts ...Option) *Table {
	t := &Table{tails: make(map[string]*Ticket)}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Enqueue takes the next turn on key.
func (t *Table) Enqueue(key []byte) *Ticket {
	t.mu.Lock()
	defer t.mu.Unlock()
	tk := &Ticket{t: t}
	if last := t.tails[string(key)]; last != nil {
		if last.done == nil {
			last.done = make(chan struct{})
		}
		tk.key, tk.prev = last.key, last.done
	} else {
		tk.key = string(key)
	}
	t.tails[tk.key] = tk
	return tk
}

// Lock takes a turn on key and waits for it.
func (t *Table) Lock(ctx context.Context, key []byte) (*Ticket, error) {
	tk := t.Enqueue(key)
	if err := tk.Wait(ctx); err != nil {
		tk.Release()
		return nil, err
	}
	return tk, nil
}

// Wait blocks until every earlier turn on the key has been released, or
// ctx is done.
func (tk *Ticket) Wait(ctx context.Context) error {
	if tk.prev != nil {
		select {
		case <-tk.prev:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	tk.waited = true
	if h := tk.t.holder; h != nil {
		tk.held = h.Begin()
	}
	return nil
}

// Release ends the turn. A turn released without having been waited for
// still ends only after the turns before it, so order is kept.
func (tk *Ticket) Release() {
	if h := tk.t.holder; h != nil && tk.waited {
		h.End(tk.held)
	}
	if tk.waited || tk.prev == nil {
		tk.t.end(tk)
		return
	}
	select {
	case <-tk.prev:
		tk.t.end(tk)
	default:
		go func() {
			<-tk.prev
			tk.t.end(tk)
		}()
	}
}

// end ends turn tk: the turn behind it, if any, goes on.
func (t *Table) end(tk *Ticket) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tk.done != nil {
		close(tk.done)
	}
	if t.tails[tk.key] == tk {
		delete(t.tails, tk.key)
	}
}

// Len returns the number of keys with a turn taken, for tests.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.tails)
}
