package pebble

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pdb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/devicetest"
)

func TestConformance(t *testing.T) {
	devicetest.Run(t, func(t *testing.T, l device.Limits) device.Device {
		d, err := Open(t.TempDir(), WithCreate(true), WithLimits(l))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}, devicetest.Estimated())
}

func mustOpen(t *testing.T, dir string, opts ...Option) *Device {
	t.Helper()
	d, err := Open(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func info(t *testing.T, d *Device) device.Info {
	t.Helper()
	i, err := d.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func TestPersist(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d := mustOpen(t, dir, WithCreate(true))
	want := map[string][]byte{}
	for i := range 50 {
		k, v := fmt.Sprintf("key-%03d", i), bytes.Repeat([]byte{byte(i)}, i*10)
		if err := d.Store(ctx, []byte(k), v); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	for i := range 10 {
		k := fmt.Sprintf("key-%03d", i)
		if err := d.Delete(ctx, []byte(k)); err != nil {
			t.Fatal(err)
		}
		delete(want, k)
	}
	ops := []device.Op{
		{Kind: device.OpStore, Key: []byte("batch-1"), Value: []byte("one")},
		{Kind: device.OpDelete, Key: []byte("key-020")},
	}
	if err := d.Batch(ctx, ops); err != nil || ops[0].Err != nil || ops[1].Err != nil {
		t.Fatal(err, ops[0].Err, ops[1].Err)
	}
	want["batch-1"] = []byte("one")
	delete(want, "key-020")
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	d = mustOpen(t, dir) // no create: it exists now
	for k, v := range want {
		got, err := d.Retrieve(ctx, []byte(k))
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("after reopen: Retrieve(%q) = %d bytes, %v; want %d bytes", k, len(got), err, len(v))
		}
	}
	wantKeysAfterCompaction(t, d, int64(len(want)))
	if _, err := d.Retrieve(ctx, []byte("key-005")); !errors.Is(err, device.ErrNotFound) {
		t.Fatalf("deleted key after reopen: %v, want ErrNotFound", err)
	}
}

func wantRefused(t *testing.T, dir string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("Open(%s) without create succeeded", dir)
	}
	if !errors.Is(err, device.ErrDeviceFailed) {
		t.Errorf("Open(%s): %v, want ErrDeviceFailed", dir, err)
	}
	if !strings.Contains(err.Error(), dir) {
		t.Errorf("Open error %q does not name the directory %s", err, dir)
	}
}

func TestOpenMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev0")
	_, err := Open(dir)
	wantRefused(t, dir, err)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused Open left %s behind (stat: %v)", dir, err)
	}
}

func TestOpenEmptyDir(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(dir, WithCreate(false))
	wantRefused(t, dir, err)
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("refused Open created %d files in %s", len(ents), dir)
	}
}

func TestOpenNotADatabase(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir)
	wantRefused(t, dir, err)
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("refused Open changed %s: %d entries", dir, len(ents))
	}

	file := filepath.Join(dir, "notes.txt")
	_, err = Open(file, WithCreate(true))
	wantRefused(t, file, err)
}

func TestCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "dev0")
	d, err := Open(dir, WithCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	i := info(t, d)
	if i.Name != "pebble:"+dir || !i.Ordered || i.Keys != 0 {
		t.Fatalf("new device: %+v", i)
	}
	if d.Dir() != dir {
		t.Fatalf("Dir() = %q, want %q", d.Dir(), dir)
	}
	if err := d.Store(t.Context(), []byte("key-1"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// Create on an existing device opens it as it is.
	d = mustOpen(t, dir, WithCreate(true))
	if v, err := d.Retrieve(t.Context(), []byte("key-1")); err != nil || string(v) != "v" {
		t.Fatalf("WithCreate(true) on an existing device: %q, %v", v, err)
	}
}

func TestOpenTwice(t *testing.T) {
	dir := t.TempDir()
	mustOpen(t, dir, WithCreate(true))
	_, err := Open(dir)
	wantRefused(t, dir, err)
}

func TestInvalidOptions(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, WithCreate(true), WithCapacity(-1)); err == nil {
		t.Error("negative capacity accepted")
	}
	if _, err := Open(dir, WithCreate(true), WithLimits(device.Limits{MinKeyLen: 9, MaxKeyLen: 8})); err == nil {
		t.Error("MinKeyLen > MaxKeyLen accepted")
	}
	if _, err := Open(dir, WithCreate(true), WithCacheSize(-1)); err == nil {
		t.Error("negative cache size accepted")
	}
}

// TestCacheSize: reads of tables fill the cache beside the memtables,
// which Pebble counts against it, up to its size.
func TestCacheSize(t *testing.T) {
	ctx := t.Context()
	cached := func(size int64) int64 {
		d := mustOpen(t, t.TempDir(), WithCreate(true), WithCacheSize(size))
		var keys [][]byte
		for i := range 1000 { // 4 MiB that do not compress
			k := []byte(fmt.Sprintf("key-%04d", i))
			if err := d.Store(ctx, k, []byte(rand.Text()+strings.Repeat(rand.Text(), 155))); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		if err := d.db.Flush(); err != nil { // reads now go to the tables
			t.Fatal(err)
		}
		for _, k := range keys {
			if _, err := d.Retrieve(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		return d.db.Metrics().BlockCache.Size
	}
	if got := cached(64 << 20); got < 4<<20 {
		t.Errorf("64 MiB cache: %d bytes of blocks after reading 4 MiB from tables, want them all", got)
	}
	if got := cached(2 << 20); got > 2<<20 {
		t.Errorf("2 MiB cache: %d bytes of blocks", got)
	}
}

func TestSecondClose(t *testing.T) {
	d, err := Open(t.TempDir(), WithCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); !errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("second Close: %v, want ErrDeviceFailed", err)
	}
}

// TestCapacity: the capacity bounds the disk footprint. Stores fill the
// device until one is refused with ErrNoSpace; the refused value is not
// stored, Used stays near the capacity, and a reopened device refuses too.
func TestCapacity(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	const capacity = 256 << 10
	d := mustOpen(t, dir, WithCreate(true), WithCapacity(capacity))
	v := random(4 << 10)
	var stored int
	var err error
	for ; stored < 1000; stored++ {
		if err = d.Store(ctx, fmt.Appendf(nil, "key-%04d", stored), v); err != nil {
			break
		}
	}
	if !errors.Is(err, device.ErrNoSpace) || errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("store %d of 4 KiB into %d bytes: %v, want ErrNoSpace (a refused value, not a failed device)", stored, capacity, err)
	}
	if stored*len(v) > capacity || stored*len(v) < capacity/2 {
		t.Fatalf("%d values of 4 KiB stored under a capacity of %d bytes", stored, capacity)
	}
	if ok, err := d.Exist(ctx, fmt.Appendf(nil, "key-%04d", stored)); ok || err != nil {
		t.Fatalf("refused Store stored its key: %v, %v", ok, err)
	}
	ops := []device.Op{
		{Kind: device.OpStore, Key: []byte("batch-1"), Value: v},
		{Kind: device.OpRetrieve, Key: []byte("key-0000")},
	}
	if err := d.Batch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(ops[0].Err, device.ErrNoSpace) || ops[1].Err != nil || !bytes.Equal(ops[1].Result, v) {
		t.Fatalf("batch on a full device: %v, %v; want ErrNoSpace, the value", ops[0].Err, ops[1].Err)
	}
	// Files cost a little more than the bytes admitted (record headers).
	if i := info(t, d); i.Capacity != capacity || i.Used > capacity+int64(len(v)) || i.Used < int64(stored*len(v)) {
		t.Fatalf("Info = %+v after %d values of %d bytes, want Used within [%d, %d]", i, stored, len(v), stored*len(v), capacity+len(v))
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = mustOpen(t, dir, WithCapacity(capacity))
	if err := d.Store(ctx, []byte("key-more"), v); !errors.Is(err, device.ErrNoSpace) {
		t.Fatalf("Store over capacity after reopen: %v, want ErrNoSpace", err)
	}
}

// random returns n incompressible bytes.
func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// wantKeysAfterCompaction compacts d fully and checks that the estimate of
// Keys is then exact: no table holds an older version or a tombstone. The
// table statistics it sums are loaded in the background, hence the wait.
func wantKeysAfterCompaction(t *testing.T, d *Device, keys int64) {
	t.Helper()
	if err := d.db.Compact(t.Context(), []byte{0}, bytes.Repeat([]byte{0xff}, 300), false); err != nil {
		t.Fatal(err)
	}
	var got int64
	for range 500 {
		if got = info(t, d).Keys; got == keys {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("after a full compaction Keys = %d, want %d", got, keys)
}

// TestConcurrentSameKey hammers a few keys from many writers with values of
// different sizes, single and batched: every write succeeds, and the key
// count is exact once compacted.
func TestConcurrentSameKey(t *testing.T) {
	ctx := t.Context()
	d := mustOpen(t, t.TempDir(), WithCreate(true))
	keys := [][]byte{[]byte("hot-0"), []byte("hot-1"), []byte("hot-2")}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				k := keys[(g+i)%len(keys)]
				v := make([]byte, (g*7+i*13)%200)
				var err error
				switch i % 4 {
				case 0, 1:
					err = d.Store(ctx, k, v)
				case 2:
					err = d.Delete(ctx, k)
				case 3:
					ops := []device.Op{
						{Kind: device.OpStore, Key: k, Value: v},
						{Kind: device.OpDelete, Key: keys[(g+i+1)%len(keys)]},
						{Kind: device.OpStore, Key: keys[(g+i+2)%len(keys)], Value: v[:len(v)/2]},
					}
					err = d.Batch(ctx, ops)
					for _, op := range ops {
						err = errors.Join(err, op.Err)
					}
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var n int64
	for _, k := range keys {
		_, err := d.Retrieve(ctx, k)
		if errors.Is(err, device.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	wantKeysAfterCompaction(t, d, n)
}

// TestAccountingEstimate: with distinct keys and incompressible values,
// Keys is exact before and after a flush and a reopen, and Used covers the
// bytes stored; no key is read to find either.
func TestAccountingEstimate(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d := mustOpen(t, dir, WithCreate(true))
	const n, size = 200, 1000
	for i := range n {
		if err := d.Store(ctx, fmt.Appendf(nil, "key-%04d", i), random(size)); err != nil {
			t.Fatal(err)
		}
	}
	if i := info(t, d); i.Keys != n || i.Used < n*size {
		t.Fatalf("before a flush: Keys=%d Used=%d, want %d, >= %d", i.Keys, i.Used, n, n*size)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = mustOpen(t, dir)
	wantKeysAfterCompaction(t, d, n)
	if i := info(t, d); i.Used < n*size {
		t.Fatalf("after reopen: Used=%d, want >= %d", i.Used, n*size)
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ in, want []byte }{
		{nil, nil},
		{[]byte{}, nil},
		{[]byte("a"), []byte("b")},
		{[]byte("ab"), []byte("ac")},
		{[]byte{'a', 0xff}, []byte("b")},
		{[]byte{0xff, 0xff}, nil},
		{[]byte{0x01, 0xfe}, []byte{0x01, 0xff}},
	} {
		if got := prefixEnd(tc.in); !bytes.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("prefixEnd(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// fsSpy watches Pebble's file system calls: it counts WAL syncs and fails
// sstable reads on demand.
type fsSpy struct {
	walSyncs  atomic.Int64
	failReads atomic.Bool
}

func (s *fsSpy) String() string { return "fsSpy" }

func (s *fsSpy) MaybeError(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		if strings.HasSuffix(op.Path, ".log") {
			s.walSyncs.Add(1)
		}
	case errorfs.OpFileRead, errorfs.OpFileReadAt:
		if s.failReads.Load() && strings.HasSuffix(op.Path, ".sst") {
			return errorfs.ErrInjected
		}
	}
	return nil
}

func TestDurability(t *testing.T) {
	ctx := t.Context()
	spy := &fsSpy{}
	d := mustOpen(t, t.TempDir(), WithCreate(true), withFS(errorfs.Wrap(vfs.Default, spy)))

	before := spy.walSyncs.Load()
	if err := d.Store(ctx, []byte("key-1"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if spy.walSyncs.Load() == before {
		t.Fatal("Store returned without syncing the WAL")
	}
	before = spy.walSyncs.Load()
	if err := d.Delete(ctx, []byte("key-1")); err != nil {
		t.Fatal(err)
	}
	if spy.walSyncs.Load() == before {
		t.Fatal("Delete returned without syncing the WAL")
	}

	var ops []device.Op
	for i := range 50 {
		ops = append(ops, device.Op{Kind: device.OpStore, Key: fmt.Appendf(nil, "key-%d", i), Value: []byte("v")})
	}
	before = spy.walSyncs.Load()
	if err := d.Batch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	if n := spy.walSyncs.Load() - before; n != 1 {
		t.Fatalf("a batch of 50 stores synced the WAL %d times, want once", n)
	}
}

func TestReadErrorIsDeviceFailed(t *testing.T) {
	ctx := t.Context()
	spy := &fsSpy{}
	d := mustOpen(t, t.TempDir(), WithCreate(true), withFS(errorfs.Wrap(vfs.Default, spy)))
	k := []byte("key-1")
	if err := d.Store(ctx, k, bytes.Repeat([]byte("v"), 1000)); err != nil {
		t.Fatal(err)
	}
	// Move the value from the memtable into an sstable, where reads go to
	// the file system.
	if err := d.db.Flush(); err != nil {
		t.Fatal(err)
	}
	spy.failReads.Store(true)
	_, err := d.Retrieve(ctx, k)
	spy.failReads.Store(false)
	if !errors.Is(err, device.ErrDeviceFailed) || errors.Is(err, device.ErrNotFound) {
		t.Fatalf("Retrieve with failing reads: %v, want ErrDeviceFailed", err)
	}
	if v, err := d.Retrieve(ctx, k); err != nil || len(v) != 1000 {
		t.Fatalf("Retrieve after reads recover: %d bytes, %v", len(v), err)
	}
}

// TestCloseWaitsForCalls: Close must not close the database under a call in
// flight, and calls that start once Close has begun are refused.
func TestCloseWaitsForCalls(t *testing.T) {
	ctx := t.Context()
	d, err := Open(t.TempDir(), WithCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := d.Store(ctx, fmt.Appendf(nil, "key-%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	inside, release := make(chan struct{}), make(chan struct{})
	iterDone := make(chan error, 1)
	var afterClose []error
	go func() {
		first := true
		iterDone <- d.Iterate(ctx, nil, func([]byte) error {
			if first {
				first = false
				close(inside)
				<-release
				// Close has begun: new calls are refused, and the
				// iteration itself still runs on an open database.
				afterClose = append(afterClose, d.Store(ctx, []byte("key-x"), nil))
			}
			return nil
		})
	}()
	<-inside
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	// Wait until Close has marked the device closed.
	for {
		if _, err := d.Info(ctx); errors.Is(err, device.ErrDeviceFailed) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while an Iterate was in flight", err)
	default:
	}
	close(release)
	if err := <-iterDone; err != nil {
		t.Fatalf("Iterate in flight during Close: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if len(afterClose) != 1 || !errors.Is(afterClose[0], device.ErrDeviceFailed) {
		t.Fatalf("Store after Close began: %v, want ErrDeviceFailed", afterClose)
	}
}

// TestDiskUsageNeverNegative: Pebble's figures that diskUsage combines
// include a signed one (compactions in progress); a sum below zero must
// read as nothing used, not as 16 EiB (or, with a capacity, a full device).
func TestDiskUsageNeverNegative(t *testing.T) {
	var m pdb.Metrics
	m.Compact.InProgressBytes = -4096
	if got := diskUsage(&m); got != 0 {
		t.Fatalf("diskUsage with -4096 bytes of compactions in progress: %d, want 0", got)
	}
	m.Compact.InProgressBytes = 0
	m.WAL.Size = 1000 // the WAL being written, not yet in the physical size
	if got := diskUsage(&m); got != 1000 {
		t.Fatalf("diskUsage of a 1000-byte WAL: %d", got)
	}
}
