package faultdev_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/devicetest"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
)

// TestConformance checks that a wrapper injecting nothing is transparent.
func TestConformance(t *testing.T) {
	devicetest.Run(t, func(t *testing.T, l device.Limits) device.Device {
		return faultdev.Wrap(mem.New(mem.WithLimits(l)), &faultdev.Toggle{})
	})
}

var (
	keyA = []byte("key-a")
	keyB = []byte("key-b")
)

// probe runs one operation of each kind and returns which failed with an
// injected error.
func probe(t *testing.T, d device.Device) map[string]bool {
	t.Helper()
	ctx := t.Context()
	injected := func(err error) bool {
		if err != nil && !errors.Is(err, faultdev.ErrInjected) && !errors.Is(err, device.ErrNotFound) {
			t.Fatalf("unexpected error: %v", err)
		}
		return errors.Is(err, faultdev.ErrInjected)
	}
	got := map[string]bool{}
	got["store"] = injected(d.Store(ctx, keyA, []byte("v")))
	_, err := d.Retrieve(ctx, keyA)
	got["retrieve"] = injected(err)
	_, err = d.Exist(ctx, keyA)
	got["exist"] = injected(err)
	got["iterate"] = injected(d.Iterate(ctx, nil, func([]byte) error { return nil }))
	_, err = d.Info(ctx)
	got["info"] = injected(err)
	got["delete"] = injected(d.Delete(ctx, keyA))
	return got
}

func wantFailures(t *testing.T, got map[string]bool, want ...string) {
	t.Helper()
	w := map[string]bool{}
	for _, k := range want {
		w[k] = true
	}
	for _, k := range []string{"store", "retrieve", "exist", "iterate", "info", "delete"} {
		if got[k] != w[k] {
			t.Errorf("%s: injected=%v, want %v", k, got[k], w[k])
		}
	}
}

func TestErrInjectedIsDeviceFailed(t *testing.T) {
	if !errors.Is(faultdev.ErrInjected, device.ErrDeviceFailed) {
		t.Fatal("ErrInjected does not wrap ErrDeviceFailed")
	}
}

func TestAlways(t *testing.T) {
	m := mem.New()
	d := faultdev.Wrap(m, faultdev.Always(nil))
	wantFailures(t, probe(t, d), "store", "retrieve", "exist", "iterate", "info", "delete")
	if s := m.Stats(); s != (mem.Stats{}) {
		t.Fatalf("injected ops reached the device: %+v", s)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close is never injected: %v", err)
	}

	custom := errors.New("custom")
	d = faultdev.Wrap(mem.New(), faultdev.Always(custom))
	if err := d.Store(t.Context(), keyA, nil); !errors.Is(err, custom) {
		t.Fatalf("Always(custom): %v", err)
	}
}

func TestOnIndex(t *testing.T) {
	ctx := t.Context()
	inj := faultdev.OnIndex(2, nil)
	d := faultdev.Wrap(mem.New(), inj)
	var errs []error
	for range 5 {
		_, err := d.Exist(ctx, keyA)
		errs = append(errs, err)
	}
	for i, err := range errs {
		if (i == 2) != errors.Is(err, faultdev.ErrInjected) {
			t.Errorf("op %d: %v", i, err)
		}
	}
	if inj.Count() != 5 {
		t.Fatalf("Count = %d, want 5", inj.Count())
	}

	// Among concurrent operations exactly one fails.
	inj = faultdev.OnIndex(37, nil)
	d = faultdev.Wrap(mem.New(), inj)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures int
	)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := d.Exist(ctx, keyA); err != nil {
				mu.Lock()
				failures++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failures != 1 {
		t.Fatalf("%d concurrent ops failed, want exactly 1", failures)
	}
}

func TestToggle(t *testing.T) {
	var tog faultdev.Toggle
	d := faultdev.Wrap(mem.New(), &tog)
	wantFailures(t, probe(t, d))
	tog.On()
	if !tog.Enabled() {
		t.Fatal("Enabled() = false after On")
	}
	wantFailures(t, probe(t, d), "store", "retrieve", "exist", "iterate", "info", "delete")
	tog.Off()
	wantFailures(t, probe(t, d))

	narrow := &faultdev.Toggle{Injector: faultdev.OnWrites(faultdev.Always(nil))}
	d = faultdev.Wrap(mem.New(), narrow)
	narrow.On()
	wantFailures(t, probe(t, d), "store", "delete")
}

func TestOnReads(t *testing.T) {
	d := faultdev.Wrap(mem.New(), faultdev.OnReads(faultdev.Always(nil)))
	wantFailures(t, probe(t, d), "retrieve", "exist", "iterate")

	// Writes are not counted by an index inside: the second read fails.
	d = faultdev.Wrap(mem.New(), faultdev.OnReads(faultdev.OnIndex(1, nil)))
	ctx := t.Context()
	if err := d.Store(ctx, keyA, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exist(ctx, keyA); err != nil {
		t.Fatalf("first read: %v", err)
	}
	if err := d.Store(ctx, keyA, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Retrieve(ctx, keyA); !errors.Is(err, faultdev.ErrInjected) {
		t.Fatalf("second read: %v, want injected", err)
	}
}

func TestOnWrites(t *testing.T) {
	d := faultdev.Wrap(mem.New(), faultdev.OnWrites(faultdev.Always(nil)))
	wantFailures(t, probe(t, d), "store", "delete")
}

func TestOnPrefix(t *testing.T) {
	ctx := t.Context()
	m := mem.New()
	d := faultdev.Wrap(m, faultdev.OnPrefix([]byte("key-a"), faultdev.Always(nil)))
	if err := d.Store(ctx, keyA, nil); !errors.Is(err, faultdev.ErrInjected) {
		t.Fatalf("Store under the prefix: %v", err)
	}
	if err := d.Store(ctx, []byte("key-ab"), nil); !errors.Is(err, faultdev.ErrInjected) {
		t.Fatalf("Store under the prefix: %v", err)
	}
	if err := d.Store(ctx, keyB, nil); err != nil {
		t.Fatalf("Store outside the prefix: %v", err)
	}
	if _, err := d.Info(ctx); err != nil {
		t.Fatalf("Info: %v", err)
	}
	for prefix, want := range map[string]bool{"": true, "key": true, "key-a": true, "key-ax": true, "key-b": false, "x": false} {
		err := d.Iterate(ctx, []byte(prefix), func([]byte) error { return nil })
		if errors.Is(err, faultdev.ErrInjected) != want {
			t.Errorf("Iterate(%q): %v, want injected=%v", prefix, err, want)
		}
	}
}

func TestBatch(t *testing.T) {
	ctx := t.Context()
	m := mem.New()
	inj := faultdev.OnWrites(faultdev.OnIndex(1, nil))
	d := faultdev.Wrap(m, inj)
	ops := []device.Op{
		{Kind: device.OpStore, Key: keyA, Value: []byte("a")},
		{Kind: device.OpStore, Key: keyB, Value: []byte("b")}, // second write: injected
		{Kind: device.OpRetrieve, Key: keyA},
		{Kind: device.OpExist, Key: keyB},
		{Kind: device.OpStore, Key: []byte("key-c"), Value: []byte("c")},
	}
	if err := d.Batch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	for i, op := range ops {
		if (i == 1) != errors.Is(op.Err, faultdev.ErrInjected) {
			t.Errorf("op %d: %v", i, op.Err)
		}
		if i != 1 && op.Err != nil {
			t.Errorf("op %d: %v", i, op.Err)
		}
	}
	if string(ops[2].Result) != "a" || !ops[2].Found {
		t.Errorf("retrieve in a partly injected batch: %q, %v", ops[2].Result, ops[2].Found)
	}
	if ops[3].Found {
		t.Error("the injected store of key-b took effect")
	}
	if s := m.Stats(); s.Stores != 2 || s.Retrieves != 1 || s.Exists != 1 {
		t.Errorf("device saw %+v, want 2 stores, 1 retrieve, 1 exist", s)
	}

	// Each op of a batch is one operation for OnIndex.
	idx := faultdev.OnIndex(2, nil)
	d = faultdev.Wrap(mem.New(), idx)
	ops = []device.Op{{Kind: device.OpExist, Key: keyA}, {Kind: device.OpExist, Key: keyA}, {Kind: device.OpExist, Key: keyA}}
	if err := d.Batch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	if ops[0].Err != nil || ops[1].Err != nil || !errors.Is(ops[2].Err, faultdev.ErrInjected) || idx.Count() != 3 {
		t.Errorf("OnIndex(2) over a 3-op batch: %v, %v, %v; count %d", ops[0].Err, ops[1].Err, ops[2].Err, idx.Count())
	}

	// A batch the device cannot attempt fails as a whole; injected ops keep
	// their injected error.
	m = mem.New()
	m.Fail()
	d = faultdev.Wrap(m, faultdev.OnPrefix(keyB, faultdev.Always(nil)))
	ops = []device.Op{{Kind: device.OpExist, Key: keyA}, {Kind: device.OpExist, Key: keyB}}
	if err := d.Batch(ctx, ops); !errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("Batch on a failed device: %v", err)
	}
	if !errors.Is(ops[0].Err, device.ErrDeviceFailed) || !errors.Is(ops[1].Err, faultdev.ErrInjected) {
		t.Errorf("ops: %v, %v", ops[0].Err, ops[1].Err)
	}

	// All ops injected: the device is not called.
	m = mem.New()
	d = faultdev.Wrap(m, faultdev.Always(nil))
	ops = []device.Op{{Kind: device.OpStore, Key: keyA}}
	if err := d.Batch(ctx, ops); err != nil || !errors.Is(ops[0].Err, faultdev.ErrInjected) {
		t.Fatalf("fully injected batch: %v, %v", err, ops[0].Err)
	}
	if m.Stats().Stores != 0 {
		t.Fatal("fully injected batch reached the device")
	}
}

func TestInjectorFuncAndOp(t *testing.T) {
	var seen []string
	d := faultdev.Wrap(mem.New(), faultdev.InjectorFunc(func(op faultdev.Op) error {
		seen = append(seen, op.String())
		return nil
	}))
	probe(t, d)
	want := []string{`store "key-a"`, `retrieve "key-a"`, `exist "key-a"`, `iterate ""`, "info", `delete "key-a"`}
	if len(seen) != len(want) {
		t.Fatalf("seen %q, want %q", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("op %d = %q, want %q", i, seen[i], want[i])
		}
	}
}

// TestCrash: one crash point over two devices counts their operations
// together; from the crash point on every operation on either fails and
// nothing reaches the devices, while everything before it landed.
func TestCrash(t *testing.T) {
	ctx := t.Context()
	ma, mb := mem.New(), mem.New()
	c := faultdev.CrashAt(3)
	da, db := faultdev.Wrap(ma, c), faultdev.Wrap(mb, c)
	for i, step := range []struct {
		d   device.Device
		key []byte
	}{{da, keyA}, {db, keyA}, {da, keyB}, {db, keyB}, {da, []byte("key-c")}} {
		err := step.d.Store(ctx, step.key, []byte("v"))
		if crashed := i >= 3; crashed != errors.Is(err, faultdev.ErrCrashed) || crashed != c.Crashed() {
			t.Fatalf("store %d: %v (crashed %v)", i, err, c.Crashed())
		}
		if err != nil && !errors.Is(err, device.ErrDeviceFailed) {
			t.Fatalf("store %d: %v does not wrap ErrDeviceFailed", i, err)
		}
	}
	if _, err := da.Retrieve(ctx, keyA); !errors.Is(err, faultdev.ErrCrashed) {
		t.Fatalf("read after the crash: %v", err)
	}
	if got := c.Count(); got != 6 {
		t.Fatalf("count %d, want 6", got)
	}
	// What the devices hold is what landed before the crash point.
	for _, want := range []struct {
		d     *mem.Device
		key   []byte
		found bool
	}{{ma, keyA, true}, {mb, keyA, true}, {ma, keyB, true}, {mb, keyB, false}, {ma, []byte("key-c"), false}} {
		if ok, err := want.d.Exist(ctx, want.key); err != nil || ok != want.found {
			t.Fatalf("%q after the crash: exist %v, %v; want %v", want.key, ok, err, want.found)
		}
	}
	never := faultdev.CrashAt(-1)
	for range 10 {
		if err := never.MaybeError(faultdev.Op{Kind: device.OpStore}); err != nil || never.Crashed() {
			t.Fatalf("CrashAt(-1) crashed: %v", err)
		}
	}
}

// TestWrapAfter: a failure injected after the op reached the device loses
// the answer, not the effect.
func TestWrapAfter(t *testing.T) {
	devicetest.Run(t, func(t *testing.T, l device.Limits) device.Device {
		return faultdev.WrapAfter(mem.New(mem.WithLimits(l)), &faultdev.Toggle{})
	})
	ctx := t.Context()
	m := mem.New()
	wantFailures(t, probe(t, faultdev.WrapAfter(m, faultdev.Always(nil))),
		"store", "retrieve", "exist", "iterate", "info", "delete")
	if st := m.Stats(); st.Stores != 1 || st.Deletes != 1 || st.Retrieves != 1 {
		t.Fatalf("device saw %+v: every probed op must reach it", st)
	}

	m = mem.New()
	d := faultdev.WrapAfter(m, faultdev.OnWrites(faultdev.Always(nil)))
	if err := d.Store(ctx, keyA, []byte("a")); !errors.Is(err, faultdev.ErrInjected) {
		t.Fatalf("store: %v, want the injected failure", err)
	}
	if b, err := d.Retrieve(ctx, keyA); err != nil || string(b) != "a" {
		t.Fatalf("the store whose answer was lost: %q, %v; want it landed", b, err)
	}
	ops := []device.Op{
		{Kind: device.OpStore, Key: keyB, Value: []byte("b")},
		{Kind: device.OpRetrieve, Key: keyB},
		{Kind: device.OpRetrieve, Key: []byte("key-none")},
	}
	if err := d.Batch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(ops[0].Err, faultdev.ErrInjected) || ops[1].Err != nil || string(ops[1].Result) != "b" ||
		!errors.Is(ops[2].Err, device.ErrNotFound) {
		t.Fatalf("batch: %v; %v %q; %v", ops[0].Err, ops[1].Err, ops[1].Result, ops[2].Err)
	}
}
