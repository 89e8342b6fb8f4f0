package mechanism

import (
	"context"
	"sync"

	"github.com/kvarray/kvarray/device"
)

type restoringKey struct{}

// restoring is what WithRestoring puts in a context.
type restoring struct {
	dev  int
	comb *combiner
	// sent: the reads were already skipped (Do's second pass).
	sent bool
}

// WithRestoring returns a context for rebuilding device dev. Under it:
//
//   - reads addressed to dev, while it is being rebuilt, are not sent:
//     each fails at once with ErrStale, as a read of a piece the device
//     lacks does. What dev must hold is decided from the other devices
//     alone (a read of the device being restored is one wasted operation
//     per piece), and a repair rewrites a piece it did not read.
//   - operations on dev from concurrent calls under the same context
//     share device batches: while one batch is being written, the ones
//     that arrive wait and go together in the next (one commit for many
//     restored pieces). Each call still returns only once its own
//     operations are applied. A device.Deferred gathers them itself:
//     its deferred batches go to it at once.
//   - on a device.Deferred, those batches are not synced: a restored
//     piece is durable only once the rebuild syncs the device (Rebuild
//     does before each checkpoint and before it marks the device healthy:
//     a crash before loses pieces the rebuild restores again when it
//     resumes). A batch that lands a write the device had missed (its
//     record is cleared when it lands) is synced, as the record goes.
//
// The context is meant for one rebuild: create it once and use it for
// all its repairs.
func WithRestoring(ctx context.Context, dev int) context.Context {
	return context.WithValue(ctx, restoringKey{}, &restoring{dev: dev, comb: &combiner{}})
}

// WithoutRestoring returns ctx with no restoring context: its writes to
// the device go as any other's, synced, as a write that ends a rebuild
// (its healthy mark) must be before the rebuild reports it done.
func WithoutRestoring(ctx context.Context) context.Context {
	return context.WithValue(ctx, restoringKey{}, (*restoring)(nil))
}

func restoringFrom(ctx context.Context) *restoring {
	r, _ := ctx.Value(restoringKey{}).(*restoring)
	return r
}

// skipRestoringReads answers the reads of ops that WithRestoring keeps
// from the device being restored, and returns the context and ops left
// to send, with their indices in ops; at is nil when nothing was skipped.
func (e *Env) skipRestoringReads(ctx context.Context, ops []Op) (context.Context, []Op, []int) {
	r := restoringFrom(ctx)
	if r == nil || r.sent || r.dev < 0 || r.dev >= e.N() || e.State(r.dev) != Rebuilding {
		return ctx, nil, nil
	}
	skip := false
	for i := range ops {
		if ops[i].Dev == r.dev && !isWrite(ops[i].Kind) {
			skip = true
			break
		}
	}
	if !skip {
		return ctx, nil, nil
	}
	var rest []Op
	at := []int{}
	for i := range ops {
		op := &ops[i]
		if op.Dev == r.dev && !isWrite(op.Kind) {
			op.Result, op.Found = nil, false
			op.Err = &DeviceError{Dev: r.dev, Name: e.names[r.dev], Op: op.Kind, Key: op.Key, Err: ErrStale}
			continue
		}
		rest = append(rest, *op)
		at = append(at, i)
	}
	sent := *r
	sent.sent = true
	return context.WithValue(ctx, restoringKey{}, &sent), rest, at
}

// combiner is a group commit for one device: calls that arrive while a
// batch is being written are sent together as the next batch.
type combiner struct {
	mu      sync.Mutex
	busy    bool
	waiting []*combined
}

type combined struct {
	ops  []device.Op
	sync bool
	err  error
	done chan struct{}
}

// do runs ops on d, in one batch with whatever other calls are waiting,
// and returns once they are done, with the batch's error. The batch is
// deferred (device.Deferred) unless d cannot defer or a call in it asked
// for sync; a deferred one is d's alone to gather.
func (c *combiner) do(ctx context.Context, d device.Device, ops []device.Op, sync bool) error {
	if dd, ok := d.(device.Deferred); ok && !sync {
		// The device gathers concurrent deferred calls itself
		// (device.Deferred): a leader batching them here made every
		// other worker wait on it (a Pebble rebuild of 4 KiB pieces:
		// 295 -> 370 MB/s without it).
		return dd.BatchDeferred(ctx, ops)
	}
	me := &combined{ops: ops, sync: sync, done: make(chan struct{})}
	c.mu.Lock()
	c.waiting = append(c.waiting, me)
	if c.busy {
		c.mu.Unlock()
		<-me.done
		return me.err
	}
	c.busy = true
	for len(c.waiting) > 0 {
		group := c.waiting
		c.waiting = nil
		c.mu.Unlock()
		var all []device.Op
		sync := false
		for _, g := range group {
			all = append(all, g.ops...)
			sync = sync || g.sync
		}
		// The calls share one rebuild's context: the leader's stands
		// for all of them.
		var err error
		if dd, ok := d.(device.Deferred); ok && !sync {
			err = dd.BatchDeferred(ctx, all)
		} else {
			err = d.Batch(ctx, all)
		}
		for _, g := range group {
			n := copy(g.ops, all)
			all = all[n:]
			g.err = err
			if g != me {
				close(g.done)
			}
		}
		c.mu.Lock()
	}
	c.busy = false
	c.mu.Unlock()
	return me.err
}

// clearsRecord reports whether ops write a key whose missed write dev has
// on record: landing it clears the record, so it must be durable.
func (e *Env) clearsRecord(dev int, ops []device.Op) bool {
	for i := range ops {
		if isWrite(ops[i].Kind) && e.missed(dev, ops[i].Key) {
			return true
		}
	}
	return false
}
