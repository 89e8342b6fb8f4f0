package array

import (
	"context"
	"errors"

	"github.com/kvarray/kvarray/mechanism"
)

// Future is the completion of an asynchronous operation.
type Future struct {
	done  chan struct{}
	value []byte
	err   error
}

// Done is closed when the operation has completed.
func (f *Future) Done() <-chan struct{} { return f.done }

// Wait blocks until the operation completes and returns its result (the
// value, for a retrieve).
func (f *Future) Wait() ([]byte, error) {
	<-f.done
	return f.value, f.err
}

// Err blocks until the operation completes and returns its error.
func (f *Future) Err() error {
	<-f.done
	return f.err
}

func failed(err error) *Future {
	f := &Future{done: make(chan struct{}), err: err}
	close(f.done)
	return f
}

// submit takes key's turn now, so that operations on one key complete in
// submission order, and runs op in the background once the turn comes.
// Submission blocks while the array's queue of asynchronous operations is
// full.
func (a *Array) submit(ctx context.Context, key []byte, what string, op func() ([]byte, error)) *Future {
	if err := a.begin(); err != nil {
		return failed(err)
	}
	select {
	case a.async <- struct{}{}:
	case <-ctx.Done():
		a.end()
		return failed(ctx.Err())
	}
	tk := a.locks.Enqueue(key)
	f := &Future{done: make(chan struct{})}
	go func() {
		defer func() {
			tk.Release()
			<-a.async
			a.end()
			close(f.done)
		}()
		if err := tk.Wait(ctx); err != nil {
			f.err = opError(what, key, err)
			return
		}
		f.value, f.err = op()
		if f.err != nil {
			f.err = opError(what, key, f.err)
		}
	}()
	return f
}

// run runs op on the caller's goroutine in key's turn: the synchronous
// form of submit.
func (a *Array) run(ctx context.Context, key []byte, what string, op func() ([]byte, error)) ([]byte, error) {
	if err := a.begin(); err != nil {
		return nil, err
	}
	defer a.end()
	tk, err := a.locks.Lock(ctx, key)
	if err != nil {
		return nil, opError(what, key, err)
	}
	defer tk.Release()
	v, err := op()
	if err != nil {
		return nil, opError(what, key, err)
	}
	return v, nil
}

func callOf(opts []CallOption) call {
	var c call
	for _, o := range opts {
		o(&c)
	}
	return c
}

// StoreAsync submits a store and returns at once. value must not be
// modified until the Future completes.
func (a *Array) StoreAsync(ctx context.Context, key, value []byte, opts ...CallOption) *Future {
	c := callOf(opts)
	m, err := a.prepareStore(key, value, c)
	if err != nil {
		return failed(opError("store", key, err))
	}
	return a.submit(ctx, key, "store", func() ([]byte, error) {
		return nil, a.store(ctx, key, value, m, c)
	})
}

// RetrieveAsync submits a retrieve and returns at once.
func (a *Array) RetrieveAsync(ctx context.Context, key []byte) *Future {
	if err := a.checkUserKey(key); err != nil {
		return failed(opError("retrieve", key, err))
	}
	return a.submit(ctx, key, "retrieve", func() ([]byte, error) {
		return a.retrieve(ctx, key)
	})
}

// DeleteAsync submits a delete and returns at once.
func (a *Array) DeleteAsync(ctx context.Context, key []byte) *Future {
	if err := a.checkUserKey(key); err != nil {
		return failed(opError("delete", key, err))
	}
	return a.submit(ctx, key, "delete", func() ([]byte, error) {
		return nil, a.remove(ctx, key)
	})
}

// Repair brings every piece of key up to date: it rewrites missing,
// corrupt and stale pieces of the value, and deletes orphans (pieces that a
// failed write or delete left where the current value has none). It returns
// how many pieces it rewrote or deleted. A key that does not exist is swept
// of orphans and reported as ErrNotFound.
func (a *Array) Repair(ctx context.Context, key []byte) (int, error) {
	if err := a.checkKey(key); err != nil {
		return 0, opError("repair", key, err)
	}
	var total int
	_, err := a.run(ctx, key, "repair", func() ([]byte, error) {
		var err error
		total, err = a.repair(ctx, key)
		if a.tinyKey(key) && (err == nil || errors.Is(err, ErrNotFound)) {
			n, found, terr := a.repairTiny(ctx, key)
			total += n
			switch {
			case terr != nil:
				err = terr
			case found:
				err = nil
			}
		}
		return nil, err
	})
	return total, err
}

// SetDeviceState records what is known of device i; tests and the rebuild
// path use it to mark a swapped-in device as Rebuilding.
func (a *Array) SetDeviceState(i int, s mechanism.State) { a.env.SetState(i, s) }

// DeviceState returns what is known of device i.
func (a *Array) DeviceState(i int) mechanism.State { return a.env.State(i) }
