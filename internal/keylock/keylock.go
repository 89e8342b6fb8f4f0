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
	mu     sync.Mutex
	m      map[string]*queue
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

type queue struct {
	tail chan struct{} // closed when the last ticket taken is released
	refs int
}

// Ticket is one turn on a key.
type Ticket struct {
	t      *Table
	key    string
	prev   chan struct{} // closed when the previous turn ends; nil if none
	done   chan struct{}
	waited bool
	held   uint64 // Holder.Begin's result, while waited
}

// New returns an empty table.
func New(opts ...Option) *Table {
	t := &Table{m: make(map[string]*queue)}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Enqueue takes the next turn on key.
func (t *Table) Enqueue(key []byte) *Ticket {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.m[string(key)]
	if q == nil {
		q = &queue{}
		t.m[string(key)] = q
	}
	tk := &Ticket{t: t, key: string(key), prev: q.tail, done: make(chan struct{})}
	q.tail = tk.done
	q.refs++
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
		close(tk.done)
	} else {
		go func() {
			<-tk.prev
			close(tk.done)
		}()
	}
	t := tk.t
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.m[tk.key]
	if q.refs--; q.refs == 0 {
		delete(t.m, tk.key)
	}
}

// Len returns the number of keys with a turn taken, for tests.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
