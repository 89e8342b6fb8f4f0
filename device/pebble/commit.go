package pebble

import (
	"context"
	"fmt"
	"sync"
	"time"

	pdb "github.com/cockroachdb/pebble/v2"

	"github.com/kvarray/kvarray/device"
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
	// joined counts the callers in next.
	joined int
	// gathered: a device.Gathered write is in next. hurry, while the
	// committer lingers, ends the linger when closed (nil: no linger).
	gathered bool
	hurry    chan struct{}
}

// Lingering. Under a concurrent load many device writes are still the
// lone write of their group, and each costs an fsync, which on a VM costs
// much CPU (the kernel's writeback and the virtual disk's
// notifications). So when the load is concurrent (the group just
// committed had lingerAt writers or more, or as many already wait for the
// next), the committer waits before sealing the next group, so that more
// join it: lingerPerWriter for each writer of the larger of those two
// groups, at most lingerMax. A lone writer (and the first write after an
// idle spell) never waits, nor does the group a device.Gathered write
// joins: its caller batched already (a list's pushes: 16 clients pushing
// to one list ran at 4,000 LPUSH/s with the linger, 6,200 without).
//
// The wait grows with the load because its gain does: a few writers gain
// little from sharing an fsync and lose most to waiting, many gain the
// most. Measured on the 2-core VM with redis-benchmark SET 4 KiB against
// `kvarray serve`, alternating, two rounds each, SET/s (CPU per SET):
//
//	                   -c 4          -c 16         -c 50 -P 16
//	2 ms always        1,617 (514µs) 4,594 (215µs) 7,938 (179µs)
//	200 µs per writer  2,404 (447µs) 4,874 (250µs) 8,008 (180µs)
//
// Before the linger (fsyncs counted with perf): fsyncs per SET at -c 16
// 1.5 -> 0.64 with 2 ms, CPU per SET 0.52 -> 0.44 ms; at -c 50 -P 16 0.42
// -> 0.18 fsyncs, 0.35 -> 0.28 ms, SET/s +50%. Waiting on a grid common
// to all devices (so that the pieces of one store commit together) was
// tried and measured worse: more fsyncs, no more SET/s; so was lingering
// only until as many writers as the last group had have joined (smaller
// groups, more fsyncs).
//
// Since serve runs with 8 Ps (cmd/kvarray/gc.go) a commit loop no longer
// waits for a P behind goroutines in fdatasync, so the groups fill sooner
// and a shorter wait does as well. bench/serve.sh, the binaries
// alternating in one evening, means of 2 to 6 runs (CPU per SET):
//
//	                   -c 4          -c 16         -c 50 -P 16
//	200 µs per writer  2,983 (388µs) 5,402 (199µs) 12,028 (140µs)
//	100 µs per writer  3,202 (392µs) 7,013 (199µs) 11,945 (143µs)
//	no linger          -             6,382 (241µs) 11,382 (150µs)
//
// (50 µs per writer did as well as 100 at -c 16; a cap of 1 ms in place
// of 2 changed nothing.)
const (
	lingerAt        = 2
	lingerPerWriter = 100 * time.Microsecond
	lingerMax       = 2 * time.Millisecond
)

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
	defer d.bulk.writing(b)()
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
	q.joined++
	if device.IsGathered(ctx) {
		q.gathered = true
		if q.hurry != nil {
			close(q.hurry)
			q.hurry = nil
		}
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
		g, size := q.next, q.joined
		q.next, q.joined, q.gathered = nil, 0, false
		if g == nil {
			q.busy = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		if err := d.refusal(true); err != nil {
			g.err = err
		} else {
			g.err = d.survive(func() error { return g.b.Commit(pdb.Sync) })
		}
		g.b.Close()
		close(g.done)
		q.mu.Lock()
		writers := max(size, q.joined)
		if writers < lingerAt || q.gathered {
			q.mu.Unlock()
			continue
		}
		hurry := make(chan struct{})
		q.hurry = hurry
		q.mu.Unlock()
		t := time.NewTimer(min(lingerMax, time.Duration(writers)*lingerPerWriter))
		select {
		case <-t.C:
		case <-hurry:
		}
		t.Stop()
		q.mu.Lock()
		q.hurry = nil
		q.mu.Unlock()
	}
}

// commitDeferred commits b unsynced under the watchdog, and releases it:
// BatchDeferred's commit, which waits for no fsync and so joins no group.
func (d *Device) commitDeferred(ctx context.Context, b *pdb.Batch) error {
	if err := d.refusal(true); err != nil {
		b.Close()
		return err
	}
	defer d.bulk.writing(b)()
	err := d.call(ctx, true, func() error {
		defer b.Close()
		return b.Commit(pdb.NoSync)
	})
	if err != nil {
		return classify(err)
	}
	return nil
}
