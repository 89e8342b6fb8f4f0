package mechanism

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/format"
)

// gated is a device whose batches storing a record copy wait for release,
// and which reports the first batch deleting one.
type gated struct {
	device.Device
	stored, deleted, release chan struct{}
	once                     sync.Once
}

func (g *gated) Batch(ctx context.Context, ops []device.Op) error {
	for i := range ops {
		if !isRecordKey(ops[i].Key) {
			continue
		}
		switch ops[i].Kind {
		case device.OpStore:
			close(g.stored)
			<-g.release
		case device.OpDelete:
			g.once.Do(func() { close(g.deleted) })
		}
		break
	}
	return g.Device.Batch(ctx, ops)
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// waiters returns how many callers hold or wait for the lock of the
// record with key rk.
func (e *Env) waiters(rk []byte) int {
	e.rec.mu.Lock()
	defer e.rec.mu.Unlock()
	if l := e.rec.busy[string(rk)]; l != nil {
		return l.refs
	}
	return 0
}

// TestClearDuringRecordLeavesNoCopy: an online replace forgets the old
// device's records (Forget) while a write that missed that device is
// still recording its miss: the record is in memory, its copies not yet
// written. The clear must not delete the copies before they land, or
// they outlive the record: the serving process knows no miss, and the
// next open finds the device behind (TestAdminOnline's `kvarray status`
// after serve saw this about one run in thirty under load).
// Invariant: the records a fresh open loads from the devices are those
// the running array holds in memory.
func TestClearDuringRecordLeavesNoCopy(t *testing.T) {
	ctx := context.Background()
	const n = 6
	mems := make([]device.Device, n)
	devs := make([]device.Device, n)
	names := make([]string, n)
	for i := range n {
		mems[i] = mem.New()
		devs[i], names[i] = mems[i], fmt.Sprint("dev", i)
	}
	// Device 3 is the first to take device 2's record.
	gate := &gated{Device: mems[3], stored: make(chan struct{}), deleted: make(chan struct{}), release: make(chan struct{})}
	devs[3] = gate
	env := NewEnv(devs, names, device.Limits{}.WithDefaults())
	key := format.Key([]byte("k"), 0, format.KindData)

	recorded := make(chan error, 1)
	go func() {
		missed := []Op{{Dev: 2, Op: device.Op{Kind: device.OpStore, Key: key, Value: []byte("v"), Err: device.ErrDeviceFailed}}}
		recorded <- env.Acknowledge(ctx, missed)
	}()
	<-gate.stored // in memory, its copy on device 3 not yet written
	forgot := make(chan struct{})
	go func() {
		defer close(forgot)
		env.Forget(ctx, 2)
	}()
	// The clear either waits for the record (its lock) or has sent its
	// delete to device 3 ahead of the store.
	for rk := recordKey(2, key); env.waiters(rk) < 2 && !isClosed(gate.deleted); {
		time.Sleep(time.Millisecond)
	}
	close(gate.release)
	if err := <-recorded; err != nil {
		t.Fatal(err)
	}
	<-forgot

	fresh := NewEnv(mems, names, device.Limits{}.WithDefaults())
	if err := fresh.LoadRecords(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := fresh.Missed(2), env.Missed(2); len(got) != len(want) {
		t.Fatalf("device 2's records: %d in memory, %d on the devices (%q): a copy outlived its record", len(want), len(got), got)
	}
}

// refusing is a device that fails every batch while refuse is set.
type refusing struct {
	device.Device
	refuse bool
}

func (r *refusing) Batch(ctx context.Context, ops []device.Op) error {
	if r.refuse {
		return fmt.Errorf("refusing: %w", device.ErrDeviceFailed)
	}
	return r.Device.Batch(ctx, ops)
}

// TestRecordRewriteMissedByHolder: a device that missed a store misses
// the key's delete too; rewriting its record as a delete fails on one of
// the two holders, which keeps the old copy ("a store was missed").
// Invariant: the records a fresh open loads say what the last recorded
// miss was, whatever order it reads the copies in. (The property test's
// seed 7938204231755547888 read the stale copy first, took the missed
// delete for a missed store, and a deleted key's old piece on the device
// came back as data loss.)
func TestRecordRewriteMissedByHolder(t *testing.T) {
	ctx := context.Background()
	const n = 6
	mems := make([]device.Device, n)
	devs := make([]device.Device, n)
	names := make([]string, n)
	for i := range n {
		mems[i] = mem.New()
		devs[i], names[i] = mems[i], fmt.Sprint("dev", i)
	}
	// Devices 2 and 3 take device 1's records; 2 is read first at open.
	flaky := &refusing{Device: mems[2]}
	devs[2] = flaky
	env := NewEnv(devs, names, device.Limits{}.WithDefaults())
	key := format.Key([]byte("k"), 0, format.KindData)

	if err := env.recordMiss(ctx, 1, key, false); err != nil {
		t.Fatal(err)
	}
	flaky.refuse = true
	if err := env.recordMiss(ctx, 1, key, true); err != nil {
		t.Fatal(err)
	}
	if !env.MissedDelete(1, key) {
		t.Fatal("the running array lost the missed delete")
	}
	if env.recorded(1, key) && env.rec.missed[1][string(key)].fresh() < recordCopies {
		t.Fatalf("the delete's record has %d current copies, want %d", env.rec.missed[1][string(key)].fresh(), recordCopies)
	}

	fresh := NewEnv(mems, names, device.Limits{}.WithDefaults())
	if err := fresh.LoadRecords(ctx); err != nil {
		t.Fatal(err)
	}
	if !fresh.MissedDelete(1, key) {
		t.Fatal("a fresh open took device 1's missed delete for a missed store: the stale copy on device 2 won")
	}
}

// TestRecordNotRewrittenKeepsEarlier: when no holder takes a record's
// rewrite, the rewrite is not recorded (ErrNotRecorded) and the earlier
// record stands, in memory as on the devices.
func TestRecordNotRewrittenKeepsEarlier(t *testing.T) {
	ctx := context.Background()
	const n = 3
	mems := make([]device.Device, n)
	refs := make([]*refusing, n)
	devs := make([]device.Device, n)
	names := make([]string, n)
	for i := range n {
		mems[i] = mem.New()
		refs[i] = &refusing{Device: mems[i]}
		devs[i], names[i] = refs[i], fmt.Sprint("dev", i)
	}
	env := NewEnv(devs, names, device.Limits{}.WithDefaults())
	key := format.Key([]byte("k"), 0, format.KindData)
	if err := env.recordMiss(ctx, 0, key, false); err != nil {
		t.Fatal(err)
	}
	refs[1].refuse, refs[2].refuse = true, true
	if err := env.recordMiss(ctx, 0, key, true); !errors.Is(err, ErrNotRecorded) {
		t.Fatalf("rewrite with every holder refusing: %v, want ErrNotRecorded", err)
	}
	if !env.recorded(0, key) || env.MissedDelete(0, key) {
		t.Fatal("the earlier record (a missed store) should stand in memory")
	}
	fresh := NewEnv(mems, names, device.Limits{}.WithDefaults())
	if err := fresh.LoadRecords(ctx); err != nil {
		t.Fatal(err)
	}
	if len(fresh.Missed(0)) != 1 || fresh.MissedDelete(0, key) {
		t.Fatal("the devices should hold the earlier record")
	}
}
