package pebble

import (
	"context"
	"fmt"
	"sync"
	"time"

	pdb "github.com/cockroachdb/pebble/v2"

	"github.com/kvarray/kvarray/internal/workers"
)

// Group commit. Every write of the device (Store, Delete, the writes of
// a Batch call) is appended to the group being collected; one goroutine
// per device commits one group at a time, synced, and the writes that
// arrive while it commits form the next group. So concurrent writers from
// every connection share one pebble.Batch, one commit and one fsync per
// device, however many they are, and each caller is answered only once
// the group holding its writes is durable (or failed: then every caller
// of the group gets the error, and none of its writes is acknowledged).
//
// Pebble also merges concurrent synced commits into one fsync; doing it
// here first costs one commit (one pass through Pebble's commit pipeline,
// one WAL record, one watchdog) per group instead of per caller.
//
// A group is applied atomically, so the writes of one caller are never
// split across commits, and writes of one key are applied in the order
// their callers joined (the array never has two writers of one key in
// flight anyway).
type committer struct {
	mu sync.Mutex
	// next collects the writes of the next commit; nil when none is
	// waiting.
	next *group
	// busy: the committing goroutine runs (it exits when no group waits).
	busy bool
}

// group is one commit's writes and, once done is closed, its outcome.
type group struct {
	b    *pdb.Batch
	done chan struct{}
	err  error
}

// commit appends b's writes to the next group, releases b, and waits
// until that group is committed and synced: it returns nil only once b's
// writes are durable. Like call, it returns without waiting for the
// commit when the device fails or turns read-only, ctx ends, or the time
// limit passes (which fails the device).
func (d *Device) commit(ctx context.Context, b *pdb.Batch) error {
	if err := d.refusal(true); err != nil {
		b.Close()
		return err
	}
	q := &d.queue
	q.mu.Lock()
	if q.next == nil {
		q.next = &group{b: d.db.NewBatch(), done: make(chan struct{})}
	}
	g := q.next
	err := g.b.Apply(b, nil)
	b.Close()
	if err != nil {
		q.mu.Unlock()
		return failed(err)
	}
	if !q.busy {
		q.busy = true
		d.running.Add(1)
		workers.Go(d.commitLoop)
	}
	q.mu.Unlock()

	t := time.NewTimer(d.timeout)
	defer t.Stop()
	select {
	case <-g.done:
		if g.err != nil {
			if herr := d.refusal(true); herr != nil {
				return herr // the reason beats the symptom Pebble saw
			}
			return classify(g.err)
		}
		return nil
	case <-d.h.dead:
		return d.h.err()
	case <-d.h.full:
		return d.h.writeable()
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		d.h.fail(fmt.Errorf("a commit waited over the %v time limit", d.timeout))
		return d.h.err()
	}
}

// commitLoop commits the waiting groups one after the other, each synced,
// until none waits. It counts in running (Close waits for it), and it
// never returns while Pebble holds it (a parked write), as call's
// goroutines.
func (d *Device) commitLoop() {
	defer d.running.Add(-1)
	q := &d.queue
	for {
		q.mu.Lock()
		g := q.next
		q.next = nil
		if g == nil {
			q.busy = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		if err := d.refusal(true); err != nil {
			g.err = err
		} else {
			g.err = g.b.Commit(pdb.Sync)
		}
		g.b.Close()
		close(g.done)
	}
}
