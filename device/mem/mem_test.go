package mem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/devicetest"
	"github.com/kvarray/kvarray/device/mem"
)

func TestConformance(t *testing.T) {
	devicetest.Run(t, func(t *testing.T, l device.Limits) device.Device {
		return mem.New(mem.WithLimits(l))
	})
}

// TestConformancePerf runs the suite with the speed model on, so that its
// paths (delays, cancellation while waiting) see concurrent use too. The
// rates are far above what the suite needs, so it does not slow down.
func TestConformancePerf(t *testing.T) {
	devicetest.Run(t, func(t *testing.T, l device.Limits) device.Device {
		return mem.New(mem.WithLimits(l), mem.WithName("mem:perf"),
			mem.WithPerf(mem.Perf{Latency: time.Microsecond, OpsPerSec: 1e7, BytesPerSec: 1e11}))
	})
}

func TestDefaults(t *testing.T) {
	d := mem.New()
	info, err := d.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := device.Info{Name: "mem", MinKeyLen: 4, MaxKeyLen: 255, MaxValueLen: 2 << 20, Ordered: true}
	if info != want {
		t.Fatalf("Info = %+v, want %+v", info, want)
	}
	info, _ = mem.New(mem.WithName("mem:dev0")).Info(t.Context())
	if info.Name != "mem:dev0" {
		t.Fatalf("Name = %q, want mem:dev0", info.Name)
	}
}

func TestInvalidOptionsPanic(t *testing.T) {
	for name, opt := range map[string]mem.Option{
		"limits":   mem.WithLimits(device.Limits{MinKeyLen: 10, MaxKeyLen: 5}),
		"capacity": mem.WithCapacity(-1),
		"perf":     mem.WithPerf(mem.Perf{OpsPerSec: -1}),
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("New did not panic")
				}
			}()
			mem.New(opt)
		})
	}
}

func TestCapacity(t *testing.T) {
	ctx := t.Context()
	d := mem.New(mem.WithCapacity(100))
	k1, k2 := []byte("key1"), []byte("key2")
	if err := d.Store(ctx, k1, make([]byte, 50)); err != nil {
		t.Fatal(err)
	}
	err := d.Store(ctx, k2, make([]byte, 50)) // 54+54 > 100
	if !errors.Is(err, device.ErrNoSpace) {
		t.Fatalf("Store over capacity: %v, want ErrNoSpace", err)
	}
	if ok, _ := d.Exist(ctx, k2); ok {
		t.Fatal("refused Store stored its key")
	}
	// Overwriting counts only the growth: exactly filling the device is fine.
	if err := d.Store(ctx, k1, make([]byte, 96)); err != nil {
		t.Fatalf("overwrite to exactly the capacity: %v", err)
	}
	if err := d.Store(ctx, k1, make([]byte, 97)); !errors.Is(err, device.ErrNoSpace) {
		t.Fatalf("overwrite past capacity: %v, want ErrNoSpace", err)
	}
	if v, _ := d.Retrieve(ctx, k1); len(v) != 96 {
		t.Fatalf("refused overwrite changed the value to %d bytes", len(v))
	}
	// A full device still accepts a shrinking overwrite and deletes.
	if err := d.Store(ctx, k1, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	ops := []device.Op{
		{Kind: device.OpStore, Key: k2, Value: make([]byte, 90)}, // 14+94 > 100
		{Kind: device.OpDelete, Key: k1},
		{Kind: device.OpStore, Key: k2, Value: make([]byte, 90)}, // fits once k1 is gone
	}
	if err := d.Batch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(ops[0].Err, device.ErrNoSpace) || ops[1].Err != nil || ops[2].Err != nil {
		t.Fatalf("batch results: %v, %v, %v; want ErrNoSpace, nil, nil", ops[0].Err, ops[1].Err, ops[2].Err)
	}
	info, _ := d.Info(ctx)
	if info.Capacity != 100 || info.Used != 94 || info.Keys != 1 {
		t.Fatalf("Info = %+v, want Capacity 100, Used 94, Keys 1", info)
	}
}

func TestFailRecover(t *testing.T) {
	ctx := t.Context()
	d := mem.New()
	k := []byte("key-1")
	if err := d.Store(ctx, k, []byte("value")); err != nil {
		t.Fatal(err)
	}
	if d.Failed() {
		t.Fatal("new device reports Failed")
	}
	d.Fail()
	if !d.Failed() {
		t.Fatal("Failed() = false after Fail")
	}
	wantFailed(t, d, k)

	d.Recover()
	if d.Failed() {
		t.Fatal("Failed() = true after Recover")
	}
	if v, err := d.Retrieve(ctx, k); err != nil || string(v) != "value" {
		t.Fatalf("after Recover: Retrieve = %q, %v; want the data kept", v, err)
	}
	if ok, _ := d.Exist(ctx, []byte("key-2")); ok {
		t.Fatal("a store attempted while failed is present after Recover")
	}
}

// wantFailed checks that every call fails with ErrDeviceFailed and has no
// effect.
func wantFailed(t *testing.T, d *mem.Device, k []byte) {
	t.Helper()
	ctx := t.Context()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, device.ErrDeviceFailed) {
			t.Errorf("%s on a failed device: %v, want ErrDeviceFailed", what, err)
		}
	}
	check("Store", d.Store(ctx, []byte("key-2"), []byte("x")))
	_, err := d.Retrieve(ctx, k)
	check("Retrieve", err)
	check("Delete", d.Delete(ctx, k))
	_, err = d.Exist(ctx, k)
	check("Exist", err)
	check("Iterate", d.Iterate(ctx, nil, func([]byte) error { return nil }))
	_, err = d.Info(ctx)
	check("Info", err)
	ops := []device.Op{{Kind: device.OpRetrieve, Key: k}, {Kind: device.OpStore, Key: []byte("key-2")}}
	check("Batch", d.Batch(ctx, ops))
	for i := range ops {
		check(fmt.Sprintf("Batch op %d", i), ops[i].Err)
	}
}

func TestFailDuringIterate(t *testing.T) {
	ctx := t.Context()
	d := mem.New()
	for i := range 1000 {
		if err := d.Store(ctx, fmt.Appendf(nil, "key-%04d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	err := d.Iterate(ctx, nil, func([]byte) error {
		if n++; n == 10 {
			d.Fail()
		}
		return nil
	})
	if !errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("Iterate across a failure: %v after %d keys, want ErrDeviceFailed", err, n)
	}
	if n >= 1000 {
		t.Fatalf("Iterate yielded all %d keys across a failure", n)
	}
}

func TestReplace(t *testing.T) {
	ctx := t.Context()
	d := mem.New(mem.WithName("mem:slot3"), mem.WithCapacity(1000))
	k := []byte("key-1")
	if err := d.Store(ctx, k, []byte("value")); err != nil {
		t.Fatal(err)
	}
	d.Fail()
	d.Replace()
	if d.Failed() {
		t.Fatal("Failed() = true after Replace")
	}
	if _, err := d.Retrieve(ctx, k); !errors.Is(err, device.ErrNotFound) {
		t.Fatalf("Retrieve after Replace: %v, want ErrNotFound", err)
	}
	info, err := d.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Keys != 0 || info.Used != 0 || info.Name != "mem:slot3" || info.Capacity != 1000 {
		t.Fatalf("Info after Replace = %+v, want an empty device in the same slot", info)
	}
	if err := d.Store(ctx, k, []byte("new")); err != nil {
		t.Fatalf("Store on the replacement: %v", err)
	}
}

func TestCorrupt(t *testing.T) {
	ctx := t.Context()
	d := mem.New()
	k := []byte("key-1")
	orig := []byte("0123456789")
	if err := d.Store(ctx, k, orig); err != nil {
		t.Fatal(err)
	}
	if err := d.Corrupt(k); err != nil {
		t.Fatal(err)
	}
	got, err := d.Retrieve(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(orig) {
		t.Fatalf("Corrupt changed the size from %d to %d", len(orig), len(got))
	}
	diff := 0
	for i := range got {
		if got[i] != orig[i] {
			diff++
		}
	}
	if diff != 1 {
		t.Fatalf("Corrupt changed %d bytes, want 1: %q", diff, got)
	}
	if info, _ := d.Info(ctx); info.Used != int64(len(k)+len(orig)) {
		t.Fatalf("Corrupt changed Used to %d", info.Used)
	}
	if err := d.Corrupt([]byte("missing")); !errors.Is(err, device.ErrNotFound) {
		t.Fatalf("Corrupt of a missing key: %v, want ErrNotFound", err)
	}
	if err := d.Store(ctx, []byte("empty"), nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Corrupt([]byte("empty")); err == nil {
		t.Fatal("Corrupt of an empty value succeeded")
	}
	// Corruption is silent media damage: it does not wait for the device
	// to be reachable.
	d.Fail()
	if err := d.Corrupt(k); err != nil {
		t.Fatalf("Corrupt on a failed device: %v", err)
	}
	d.Recover()
	if got, _ := d.Retrieve(ctx, k); !bytes.Equal(got, orig) {
		t.Fatalf("corrupting twice did not restore the byte: %q", got)
	}
}

func TestClosedIsFinal(t *testing.T) {
	d := mem.New()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); !errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("second Close: %v, want ErrDeviceFailed", err)
	}
	d.Recover()
	d.Replace()
	if err := d.Store(t.Context(), []byte("key-1"), nil); !errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("Store after Close, Recover, Replace: %v, want ErrDeviceFailed", err)
	}
	if err := d.Corrupt([]byte("key-1")); !errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("Corrupt after Close: %v, want ErrDeviceFailed", err)
	}
}

func TestStats(t *testing.T) {
	ctx := t.Context()
	d := mem.New(mem.WithLimits(device.Limits{MaxValueLen: 100}))
	k := []byte("key-1")
	_ = d.Store(ctx, k, make([]byte, 10))
	_ = d.Store(ctx, k, make([]byte, 101)) // refused: counted, no bytes
	_, _ = d.Retrieve(ctx, k)
	_, _ = d.Retrieve(ctx, []byte("missing"))
	_ = d.Delete(ctx, []byte("missing"))
	_, _ = d.Exist(ctx, k)
	_ = d.Iterate(ctx, nil, func([]byte) error { return nil })
	_ = d.Batch(ctx, []device.Op{
		{Kind: device.OpStore, Key: []byte("key-2"), Value: make([]byte, 5)},
		{Kind: device.OpRetrieve, Key: k},
		{Kind: device.OpRetrieve, Key: []byte("key-2")},
		{Kind: device.OpDelete, Key: []byte("key-2")},
		{Kind: device.OpExist, Key: k},
		{Kind: device.OpExist, Key: []byte("x")}, // invalid key: still an attempt
	})
	d.Fail()
	_ = d.Store(ctx, k, nil) // failed device: still an attempt
	_, _ = d.Info(ctx)       // Info is not a data operation
	d.Recover()

	want := mem.Stats{Stores: 4, Retrieves: 4, Deletes: 2, Exists: 3, Iterates: 1, BytesWritten: 15, BytesRead: 25}
	if got := d.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
	d.ResetStats()
	if got := d.Stats(); got != (mem.Stats{}) {
		t.Fatalf("Stats after ResetStats = %+v", got)
	}
}

func TestPerfCancel(t *testing.T) {
	d := mem.New(mem.WithPerf(mem.Perf{Latency: time.Hour}))
	k := []byte("key-1")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Store(ctx, k, []byte("v")) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Store cancelled while waiting: %v, want DeadlineExceeded", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Store did not return when its context expired")
	}

	ctx2, cancel2 := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel2()
	ops := []device.Op{{Kind: device.OpStore, Key: k, Value: []byte("v")}, {Kind: device.OpExist, Key: k}}
	if err := d.Batch(ctx2, ops); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Batch cancelled while waiting: %v, want DeadlineExceeded", err)
	}
	for i, op := range ops {
		if !errors.Is(op.Err, context.DeadlineExceeded) {
			t.Fatalf("Batch op %d: %v, want DeadlineExceeded", i, op.Err)
		}
	}
	// A cancelled wait leaves nothing applied. Info does not wait, so it
	// can look without waiting an hour.
	info, err := d.Info(t.Context())
	if err != nil || info.Keys != 0 {
		t.Fatalf("after cancelled stores: Keys=%d, %v; want 0", info.Keys, err)
	}
}

// TestPerfRateLowerBound is the one wall-clock check: a rate limit can only
// make a run slower, so a lower bound holds on any machine.
func TestPerfRateLowerBound(t *testing.T) {
	d := mem.New(mem.WithPerf(mem.Perf{OpsPerSec: 1000}))
	ctx := t.Context()
	start := time.Now()
	for i := range 100 {
		if err := d.Store(ctx, fmt.Appendf(nil, "key-%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Fatalf("100 ops at 1000 ops/s took %v, want at least 50ms", took)
	}
}

func benchDevice(*testing.B) (*mem.Device, [][]byte, []byte) {
	d := mem.New()
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "bench-key-%06d", i)
	}
	return d, keys, bytes.Repeat([]byte{0xa5}, 4096)
}

func BenchmarkStore4K(b *testing.B) {
	d, keys, v := benchDevice(b)
	ctx := context.Background()
	b.SetBytes(int64(len(v)))
	i := 0
	for b.Loop() {
		if err := d.Store(ctx, keys[i%len(keys)], v); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkRetrieve4K(b *testing.B) {
	d, keys, v := benchDevice(b)
	ctx := context.Background()
	for _, k := range keys {
		if err := d.Store(ctx, k, v); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(v)))
	i := 0
	for b.Loop() {
		if _, err := d.Retrieve(ctx, keys[i%len(keys)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
