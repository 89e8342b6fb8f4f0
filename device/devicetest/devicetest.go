// Package devicetest is the conformance suite for device.Device
// implementations. Every backend runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		devicetest.Run(t, func(t *testing.T, l device.Limits) device.Device {
//			return mem.New(mem.WithLimits(l))
//		})
//	}
//
// The suite checks the contract written in package device, not any one
// backend's choices, so that the array can rely on that contract alone:
// limits and their sentinels, upsert and idempotent delete, ordered prefix
// iteration, per-op batch results with same-key ordering, exact Keys/Used
// accounting (unless the backend declares it estimated, see Estimated),
// buffer ownership, concurrency safety (run it under -race),
// context cancellation, and ErrDeviceFailed after Close.
//
// Invariants the suite relies on from open:
//   - every call returns a fresh, empty device (Keys == 0, Used == 0) that
//     enforces exactly the limits given, where zero fields mean the
//     device.DefaultLimits values;
//   - the device has no capacity limit, or one far above the few MiB the
//     suite stores.
//
// The suite closes each device it opens, and tolerates open registering
// its own cleanups (a temporary directory, say): those run after the Close.
package devicetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/kvarray/kvarray/device"
)

// small limits keep values cheap while leaving room for a 4 KiB value; the
// exact-maximum cases are covered at these limits and, once, at the
// defaults.
var small = device.Limits{MinKeyLen: 4, MaxKeyLen: 32, MaxValueLen: 8 << 10}

// Option adjusts the suite to a backend's documented choices.
type Option func(*suite)

// Estimated declares that the backend's Keys and Used are estimates (a
// device that keeps no exact count, to spare a read per write): the suite
// then checks only that they are not negative, and the backend's own tests
// check how close they are.
func Estimated() Option { return func(s *suite) { s.estimated = true } }

// Run runs the conformance suite against devices made by open.
func Run(t *testing.T, open func(t *testing.T, l device.Limits) device.Device, opts ...Option) {
	s := suite{open: open}
	for _, o := range opts {
		o(&s)
	}
	tests := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"Info", s.testInfo},
		{"DefaultLimits", s.testDefaultLimits},
		{"RoundTrip", s.testRoundTrip},
		{"Overwrite", s.testOverwrite},
		{"Delete", s.testDelete},
		{"Exist", s.testExist},
		{"NotFound", s.testNotFound},
		{"Limits", s.testLimits},
		{"Iterate", s.testIterate},
		{"IterateStop", s.testIterateStop},
		{"IterateMutate", s.testIterateMutate},
		{"Batch", s.testBatch},
		{"BatchOwnership", s.testBatchOwnership},
		{"PartialRetrieve", s.testPartialRetrieve},
		{"Accounting", s.testAccounting},
		{"Ownership", s.testOwnership},
		{"Concurrent", s.testConcurrent},
		{"Context", s.testContext},
		{"Closed", s.testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.fn)
	}
}

type suite struct {
	open      func(t *testing.T, l device.Limits) device.Device
	estimated bool
}

// dev opens a device and closes it at the end of the test. Cleanups run
// last-in first-out, so this Close runs before anything open registered.
func (s suite) dev(t *testing.T, l device.Limits) device.Device {
	t.Helper()
	d := s.open(t, l)
	if d == nil {
		t.Fatal("open returned a nil device")
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// val returns n bytes that depend on seed, so that a value read back under
// the wrong key or from a stale write is told apart from the right one.
func val(seed, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func key(format string, args ...any) []byte { return []byte(fmt.Sprintf(format, args...)) }

func mustStore(t *testing.T, d device.Device, k, v []byte) {
	t.Helper()
	if err := d.Store(t.Context(), k, v); err != nil {
		t.Fatalf("Store(%q, %d bytes): %v", k, len(v), err)
	}
}

func mustRetrieve(t *testing.T, d device.Device, k []byte) []byte {
	t.Helper()
	v, err := d.Retrieve(t.Context(), k)
	if err != nil {
		t.Fatalf("Retrieve(%q): %v", k, err)
	}
	return v
}

func wantValue(t *testing.T, d device.Device, k, want []byte) {
	t.Helper()
	got := mustRetrieve(t, d, k)
	if !bytes.Equal(got, want) {
		t.Fatalf("Retrieve(%q) = %d bytes %.16x..., want %d bytes %.16x...", k, len(got), got, len(want), want)
	}
}

func wantAbsent(t *testing.T, d device.Device, k []byte) {
	t.Helper()
	v, err := d.Retrieve(t.Context(), k)
	if !errors.Is(err, device.ErrNotFound) {
		t.Fatalf("Retrieve(%q) = %d bytes, %v; want ErrNotFound", k, len(v), err)
	}
	ok, err := d.Exist(t.Context(), k)
	if err != nil || ok {
		t.Fatalf("Exist(%q) = %v, %v; want false, nil", k, ok, err)
	}
}

func mustInfo(t *testing.T, d device.Device) device.Info {
	t.Helper()
	info, err := d.Info(t.Context())
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	return info
}

func (s suite) wantAccounting(t *testing.T, d device.Device, keys, used int64) {
	t.Helper()
	info := mustInfo(t, d)
	if s.estimated {
		if info.Keys < 0 || info.Used < 0 {
			t.Fatalf("Info: Keys=%d Used=%d, want estimates >= 0", info.Keys, info.Used)
		}
		return
	}
	if info.Keys != keys || info.Used != used {
		t.Fatalf("Info: Keys=%d Used=%d, want Keys=%d Used=%d", info.Keys, info.Used, keys, used)
	}
}

func collect(t *testing.T, d device.Device, prefix []byte) [][]byte {
	t.Helper()
	var keys [][]byte
	err := d.Iterate(t.Context(), prefix, func(k []byte) error {
		keys = append(keys, bytes.Clone(k)) // k is only valid during the call
		return nil
	})
	if err != nil {
		t.Fatalf("Iterate(%q): %v", prefix, err)
	}
	return keys
}

func (s suite) testInfo(t *testing.T) {
	d := s.dev(t, small)
	info := mustInfo(t, d)
	if info.Name == "" {
		t.Error("Info.Name is empty")
	}
	if info.MinKeyLen != small.MinKeyLen || info.MaxKeyLen != small.MaxKeyLen || info.MaxValueLen != small.MaxValueLen {
		t.Errorf("Info limits = %d..%d/%d, want %d..%d/%d", info.MinKeyLen, info.MaxKeyLen, info.MaxValueLen,
			small.MinKeyLen, small.MaxKeyLen, small.MaxValueLen)
	}
	if !s.estimated && (info.Keys != 0 || info.Used != 0) {
		t.Errorf("fresh device: Keys=%d Used=%d, want 0, 0", info.Keys, info.Used)
	}
	if info.Capacity < 0 {
		t.Errorf("Info.Capacity = %d, want >= 0", info.Capacity)
	}
}

func (s suite) testDefaultLimits(t *testing.T) {
	d := s.dev(t, device.Limits{})
	info := mustInfo(t, d)
	def := device.DefaultLimits()
	if info.MinKeyLen != def.MinKeyLen || info.MaxKeyLen != def.MaxKeyLen || info.MaxValueLen != def.MaxValueLen {
		t.Fatalf("zero Limits: Info limits = %d..%d/%d, want the defaults %d..%d/%d",
			info.MinKeyLen, info.MaxKeyLen, info.MaxValueLen, def.MinKeyLen, def.MaxKeyLen, def.MaxValueLen)
	}
	ctx := t.Context()
	longest := bytes.Repeat([]byte{'k'}, def.MaxKeyLen)
	big := val(1, def.MaxValueLen)
	mustStore(t, d, longest, big)
	wantValue(t, d, longest, big)
	if err := d.Store(ctx, append(longest, 'k'), nil); !errors.Is(err, device.ErrKeyTooLong) {
		t.Errorf("Store with a %d-byte key: %v, want ErrKeyTooLong", def.MaxKeyLen+1, err)
	}
	if err := d.Store(ctx, longest[:def.MinKeyLen-1], nil); !errors.Is(err, device.ErrKeyTooShort) {
		t.Errorf("Store with a %d-byte key: %v, want ErrKeyTooShort", def.MinKeyLen-1, err)
	}
	if err := d.Store(ctx, longest[:def.MinKeyLen], append(big, 0)); !errors.Is(err, device.ErrValueTooLarge) {
		t.Errorf("Store of %d bytes: %v, want ErrValueTooLarge", def.MaxValueLen+1, err)
	}
	s.wantAccounting(t, d, 1, int64(len(longest)+len(big)))
}

func (s suite) testRoundTrip(t *testing.T) {
	d := s.dev(t, small)
	for i, n := range []int{0, 1, 4096, small.MaxValueLen} {
		k := key("rt-%d", n)
		v := val(i, n)
		mustStore(t, d, k, v)
		got := mustRetrieve(t, d, k)
		if len(got) != n || !bytes.Equal(got, v) {
			t.Fatalf("value of %d bytes came back as %d bytes (equal=%v)", n, len(got), bytes.Equal(got, v))
		}
	}
	// Keys at exactly the minimum and maximum length are valid.
	for _, n := range []int{small.MinKeyLen, small.MaxKeyLen} {
		k := bytes.Repeat([]byte{'m'}, n)
		mustStore(t, d, k, val(n, 3))
		wantValue(t, d, k, val(n, 3))
	}
	// Arbitrary bytes are valid in keys, including 0x00 and 0xff.
	k := []byte{0, 0xff, 0, 0xff, 1}
	mustStore(t, d, k, []byte("binary"))
	wantValue(t, d, k, []byte("binary"))
}

func (s suite) testOverwrite(t *testing.T) {
	d := s.dev(t, small)
	k := key("over")
	for i, n := range []int{100, 4000, 10, 0, 7} {
		v := val(i, n)
		mustStore(t, d, k, v)
		wantValue(t, d, k, v)
	}
	if keys := collect(t, d, nil); len(keys) != 1 {
		t.Fatalf("after overwrites the device holds %d keys, want 1", len(keys))
	}
}

func (s suite) testDelete(t *testing.T) {
	d := s.dev(t, small)
	ctx := t.Context()
	k, other := key("del-a"), key("del-b")
	mustStore(t, d, k, val(1, 10))
	mustStore(t, d, other, val(2, 10))
	if err := d.Delete(ctx, k); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantAbsent(t, d, k)
	wantValue(t, d, other, val(2, 10))
	if err := d.Delete(ctx, k); err != nil {
		t.Fatalf("second Delete of the same key: %v, want nil", err)
	}
	if err := d.Delete(ctx, key("never-stored")); err != nil {
		t.Fatalf("Delete of a missing key: %v, want nil", err)
	}
	// A deleted key can be stored again.
	mustStore(t, d, k, val(3, 5))
	wantValue(t, d, k, val(3, 5))
}

func (s suite) testExist(t *testing.T) {
	d := s.dev(t, small)
	ctx := t.Context()
	k := key("exist")
	if ok, err := d.Exist(ctx, k); err != nil || ok {
		t.Fatalf("Exist before Store = %v, %v; want false, nil", ok, err)
	}
	mustStore(t, d, k, nil) // an empty value still makes the key exist
	if ok, err := d.Exist(ctx, k); err != nil || !ok {
		t.Fatalf("Exist after Store = %v, %v; want true, nil", ok, err)
	}
	if ok, err := d.Exist(ctx, key("exis")); err != nil || ok {
		t.Fatalf("Exist of a prefix of a stored key = %v, %v; want false, nil", ok, err)
	}
	if ok, err := d.Exist(ctx, key("exist2")); err != nil || ok {
		t.Fatalf("Exist of an extension of a stored key = %v, %v; want false, nil", ok, err)
	}
}

func (s suite) testNotFound(t *testing.T) {
	d := s.dev(t, small)
	_, err := d.Retrieve(t.Context(), key("missing"))
	if !errors.Is(err, device.ErrNotFound) {
		t.Fatalf("Retrieve of a missing key: %v, want ErrNotFound", err)
	}
	if errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("Retrieve of a missing key: %v also wraps ErrDeviceFailed", err)
	}
}

func (s suite) testLimits(t *testing.T) {
	d := s.dev(t, small)
	ctx := t.Context()
	short := bytes.Repeat([]byte{'s'}, small.MinKeyLen-1)
	long := bytes.Repeat([]byte{'l'}, small.MaxKeyLen+1)
	good := bytes.Repeat([]byte{'g'}, small.MinKeyLen)
	big := val(1, small.MaxValueLen+1)

	for _, bad := range []struct {
		key  []byte
		want error
	}{{nil, device.ErrKeyTooShort}, {short, device.ErrKeyTooShort}, {long, device.ErrKeyTooLong}} {
		if err := d.Store(ctx, bad.key, []byte("v")); !errors.Is(err, bad.want) {
			t.Errorf("Store(%d-byte key): %v, want %v", len(bad.key), err, bad.want)
		}
		if _, err := d.Retrieve(ctx, bad.key); !errors.Is(err, bad.want) {
			t.Errorf("Retrieve(%d-byte key): %v, want %v", len(bad.key), err, bad.want)
		}
		if err := d.Delete(ctx, bad.key); !errors.Is(err, bad.want) {
			t.Errorf("Delete(%d-byte key): %v, want %v", len(bad.key), err, bad.want)
		}
		if _, err := d.Exist(ctx, bad.key); !errors.Is(err, bad.want) {
			t.Errorf("Exist(%d-byte key): %v, want %v", len(bad.key), err, bad.want)
		}
	}
	if err := d.Store(ctx, good, big); !errors.Is(err, device.ErrValueTooLarge) {
		t.Errorf("Store of %d bytes: %v, want ErrValueTooLarge", len(big), err)
	}
	// A rejected Store of an existing key leaves the old value in place.
	mustStore(t, d, good, []byte("old"))
	if err := d.Store(ctx, good, big); !errors.Is(err, device.ErrValueTooLarge) {
		t.Errorf("overwrite with %d bytes: %v, want ErrValueTooLarge", len(big), err)
	}
	wantValue(t, d, good, []byte("old"))

	// Nothing of the rejected calls was stored.
	keys := collect(t, d, nil)
	if len(keys) != 1 || !bytes.Equal(keys[0], good) {
		t.Fatalf("after rejected stores the device holds %q, want only %q", keys, good)
	}
	s.wantAccounting(t, d, 1, int64(len(good)+len("old")))
}

// iterKeys exercise the prefix upper bound: prefixes ending in 0xff and
// prefixes that are entirely 0xff have no simple successor.
var iterKeys = [][]byte{
	[]byte("aaa0"), []byte("aaa1"), []byte("aab0"), []byte("ab00"), []byte("b000"),
	{0x01, 0xff, 0x00, 0x00}, {0x01, 0xff, 0xff, 0xff}, {0x02, 0x00, 0x00, 0x00},
	{0xff, 0xff, 0xff, 0xff}, {0xff, 0xff, 0xff, 0xff, 0x00}, {0xff, 0xff, 0xff, 0xfe},
}

func (s suite) testIterate(t *testing.T) {
	d := s.dev(t, small)
	ordered := mustInfo(t, d).Ordered
	// Store out of order so that an unordered backend is not ordered by luck.
	for i := len(iterKeys) - 1; i >= 0; i-- {
		mustStore(t, d, iterKeys[i], val(i, i))
	}
	sorted := slices.Clone(iterKeys)
	slices.SortFunc(sorted, bytes.Compare)

	prefixes := [][]byte{nil, {}, []byte("a"), []byte("aa"), []byte("aaa"), []byte("aaa0"), []byte("aaa00"),
		[]byte("c"), {0x01}, {0x01, 0xff}, {0x01, 0xff, 0xff}, {0xff}, {0xff, 0xff, 0xff, 0xff}, {0x00}}
	for _, p := range prefixes {
		var want [][]byte
		for _, k := range sorted {
			if bytes.HasPrefix(k, p) {
				want = append(want, k)
			}
		}
		got := collect(t, d, p)
		if !ordered {
			slices.SortFunc(got, bytes.Compare)
		}
		if !slices.EqualFunc(got, want, bytes.Equal) {
			t.Errorf("Iterate(%q) = %q, want %q", p, got, want)
		}
	}
}

func (s suite) testIterateStop(t *testing.T) {
	d := s.dev(t, small)
	for i := range 10 {
		mustStore(t, d, key("stop-%02d", i), nil)
	}
	errStop := errors.New("stop here")
	calls := 0
	err := d.Iterate(t.Context(), key("stop-"), func([]byte) error {
		calls++
		if calls == 3 {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) {
		t.Fatalf("Iterate returned %v, want the callback's error", err)
	}
	if calls != 3 {
		t.Fatalf("callback called %d times after returning an error at call 3", calls)
	}

	// A context cancelled during the iteration ends it with the context's
	// error.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	err = d.Iterate(ctx, key("stop-"), func([]byte) error {
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Iterate with a context cancelled during iteration returned %v, want context.Canceled", err)
	}
}

// testIterateMutate checks that the callback may call back into the device,
// as cleanup and rebuild do (delete what is found, write elsewhere).
func (s suite) testIterateMutate(t *testing.T) {
	d := s.dev(t, small)
	ctx := t.Context()
	const n = 300 // more than one chunk of a backend that iterates in chunks
	for i := range n {
		mustStore(t, d, key("mut-%04d", i), val(i, 8))
	}
	seen := map[string]int{}
	err := d.Iterate(ctx, key("mut-"), func(k []byte) error {
		seen[string(k)]++
		if err := d.Delete(ctx, k); err != nil {
			return err
		}
		if err := d.Store(ctx, append(key("new-"), k...), nil); err != nil {
			return err
		}
		_, err := d.Exist(ctx, k)
		return err
	})
	if err != nil {
		t.Fatalf("Iterate with mutating callback: %v", err)
	}
	if len(seen) != n {
		t.Fatalf("iteration saw %d distinct keys, want %d", len(seen), n)
	}
	for k, c := range seen {
		if c != 1 {
			t.Fatalf("key %q seen %d times", k, c)
		}
	}
	if left := collect(t, d, key("mut-")); len(left) != 0 {
		t.Fatalf("%d keys left after deleting each during iteration", len(left))
	}
	if got := collect(t, d, key("new-")); len(got) != n {
		t.Fatalf("%d keys stored during iteration, want %d", len(got), n)
	}
}

func (s suite) testBatch(t *testing.T) {
	d := s.dev(t, small)
	ctx := t.Context()
	if err := d.Batch(ctx, nil); err != nil {
		t.Fatalf("empty Batch: %v", err)
	}
	a, b, c, e, pre := key("bat-a"), key("bat-b"), key("bat-c"), key("bat-e"), key("bat-pre")
	mustStore(t, d, pre, []byte("before"))
	mustStore(t, d, e, []byte("e-old"))
	va1, va2, vb, ve := val(1, 100), val(2, 50), val(3, 30), val(4, 20)

	ops := []device.Op{
		0:  {Kind: device.OpStore, Key: a, Value: va1},
		1:  {Kind: device.OpStore, Key: b, Value: vb},
		2:  {Kind: device.OpRetrieve, Key: a},
		3:  {Kind: device.OpExist, Key: b},
		4:  {Kind: device.OpDelete, Key: b},
		5:  {Kind: device.OpExist, Key: b},
		6:  {Kind: device.OpRetrieve, Key: b},
		7:  {Kind: device.OpStore, Key: a, Value: va2},
		8:  {Kind: device.OpRetrieve, Key: a},
		9:  {Kind: device.OpStore, Key: c, Value: val(5, small.MaxValueLen+1)},
		10: {Kind: device.OpRetrieve, Key: []byte("x")},
		11: {Kind: device.OpDelete, Key: key("bat-missing")},
		12: {Kind: device.OpExist, Key: c},
		13: {Kind: device.OpRetrieve, Key: pre},
		14: {Kind: device.OpDelete, Key: e},
		15: {Kind: device.OpRetrieve, Key: e},
		16: {Kind: device.OpStore, Key: e, Value: ve},
		17: {Kind: device.OpExist, Key: e},
		18: {Kind: device.OpStore, Key: bytes.Repeat([]byte{'L'}, small.MaxKeyLen+1), Value: nil},
		19: {Kind: device.OpKind(0), Key: key("bat-bad-kind")},
		20: {Kind: device.OpRetrieve, Key: key("bat-missing")},
	}
	if err := d.Batch(ctx, ops); err != nil {
		t.Fatalf("Batch: %v", err)
	}
	wantOK := func(i int) {
		t.Helper()
		if ops[i].Err != nil {
			t.Errorf("op %d (%v %q): %v", i, ops[i].Kind, ops[i].Key, ops[i].Err)
		}
	}
	wantErr := func(i int, want error) {
		t.Helper()
		if !errors.Is(ops[i].Err, want) {
			t.Errorf("op %d (%v %q): err %v, want %v", i, ops[i].Kind, ops[i].Key, ops[i].Err, want)
		}
	}
	wantResult := func(i int, want []byte) {
		t.Helper()
		wantOK(i)
		if !ops[i].Found || !bytes.Equal(ops[i].Result, want) {
			t.Errorf("op %d (retrieve %q): Found=%v, %d bytes; want Found, %d bytes", i, ops[i].Key, ops[i].Found, len(ops[i].Result), len(want))
		}
	}
	wantFound := func(i int, want bool) {
		t.Helper()
		wantOK(i)
		if ops[i].Found != want {
			t.Errorf("op %d (exist %q): Found=%v, want %v", i, ops[i].Key, ops[i].Found, want)
		}
	}
	wantOK(0)
	wantOK(1)
	wantResult(2, va1)
	wantFound(3, true)
	wantOK(4)
	wantFound(5, false)
	wantErr(6, device.ErrNotFound)
	if ops[6].Found {
		t.Errorf("op 6: Found set on a not-found retrieve")
	}
	wantOK(7)
	wantResult(8, va2)
	wantErr(9, device.ErrValueTooLarge)
	wantErr(10, device.ErrKeyTooShort)
	wantOK(11)
	wantFound(12, false)
	wantResult(13, []byte("before"))
	wantOK(14)
	wantErr(15, device.ErrNotFound)
	wantOK(16)
	wantFound(17, true)
	wantErr(18, device.ErrKeyTooLong)
	if ops[19].Err == nil {
		t.Errorf("op 19 of unknown kind succeeded")
	}
	wantErr(20, device.ErrNotFound)

	// The batch's effects are visible to single ops afterwards.
	wantValue(t, d, a, va2)
	wantAbsent(t, d, b)
	wantAbsent(t, d, c)
	wantValue(t, d, e, ve)
	wantValue(t, d, pre, []byte("before"))
	s.wantAccounting(t, d, 3, int64(len(a)+len(va2)+len(e)+len(ve)+len(pre)+len("before")))
}

// testPartialRetrieve: a retrieve with Off and Len returns either just
// that range (Partial set) or the whole value (Partial clear), never
// anything else; past the end the range is short or empty; a missing key
// is not found either way.
func (s suite) testPartialRetrieve(t *testing.T) {
	d := s.dev(t, device.Limits{})
	ctx := context.Background()
	v := val(7, 10000)
	mustStore(t, d, key("part"), v)
	for _, r := range []struct{ off, n int }{{0, 1}, {100, 4096}, {9990, 100}, {10000, 5}, {20000, 5}} {
		ops := []device.Op{{Kind: device.OpRetrieve, Key: key("part"), Off: r.off, Len: r.n}, {Kind: device.OpRetrieve, Key: key("nopart"), Off: r.off, Len: r.n}}
		if err := d.Batch(ctx, ops); err != nil {
			t.Fatalf("batch: %v", err)
		}
		want := v
		if ops[0].Partial {
			lo := min(r.off, len(v))
			want = v[lo : lo+min(r.n, len(v)-lo)]
		}
		if ops[0].Err != nil || !ops[0].Found || !bytes.Equal(ops[0].Result, want) {
			t.Errorf("range %d+%d: %d bytes (partial %v), %v; want %d", r.off, r.n, len(ops[0].Result), ops[0].Partial, ops[0].Err, len(want))
		}
		if !errors.Is(ops[1].Err, device.ErrNotFound) || ops[1].Found || ops[1].Partial {
			t.Errorf("range %d+%d of a missing key: %v, found %v", r.off, r.n, ops[1].Err, ops[1].Found)
		}
	}
}

func (s suite) testBatchOwnership(t *testing.T) {
	d := s.dev(t, small)
	ctx := t.Context()
	k := key("own-batch")
	v := val(7, 64)
	orig := bytes.Clone(v)
	ops := []device.Op{{Kind: device.OpStore, Key: bytes.Clone(k), Value: v}}
	if err := d.Batch(ctx, ops); err != nil || ops[0].Err != nil {
		t.Fatalf("Batch store: %v, %v", err, ops[0].Err)
	}
	v[0] ^= 0xff
	ops[0].Key[0] ^= 0xff
	wantValue(t, d, k, orig)

	ops = []device.Op{{Kind: device.OpRetrieve, Key: k}}
	if err := d.Batch(ctx, ops); err != nil || ops[0].Err != nil {
		t.Fatalf("Batch retrieve: %v, %v", err, ops[0].Err)
	}
	ops[0].Result[0] ^= 0xff
	wantValue(t, d, k, orig)
}

func (s suite) testAccounting(t *testing.T) {
	d := s.dev(t, small)
	ctx := t.Context()
	k1, k2, k3 := key("acc1"), key("acc-2"), key("acc--3")
	s.wantAccounting(t, d, 0, 0)
	mustStore(t, d, k1, val(1, 10))
	s.wantAccounting(t, d, 1, 4+10)
	mustStore(t, d, k1, val(2, 3)) // overwrite: same key count, new size
	s.wantAccounting(t, d, 1, 4+3)
	mustStore(t, d, k1, val(2, 300))
	s.wantAccounting(t, d, 1, 4+300)
	mustStore(t, d, k2, nil)
	s.wantAccounting(t, d, 2, 4+300+5)
	if err := d.Store(ctx, k3, val(3, small.MaxValueLen+1)); !errors.Is(err, device.ErrValueTooLarge) {
		t.Fatalf("oversize Store: %v", err)
	}
	s.wantAccounting(t, d, 2, 4+300+5)
	if err := d.Delete(ctx, k1); err != nil {
		t.Fatal(err)
	}
	s.wantAccounting(t, d, 1, 5)
	if err := d.Delete(ctx, k1); err != nil {
		t.Fatal(err)
	}
	s.wantAccounting(t, d, 1, 5)
	ops := []device.Op{
		{Kind: device.OpStore, Key: k3, Value: val(4, 4)},
		{Kind: device.OpDelete, Key: k2},
		{Kind: device.OpStore, Key: k1, Value: val(5, 1)},
		{Kind: device.OpStore, Key: k1, Value: val(5, 2)},
		{Kind: device.OpDelete, Key: key("acc-missing")},
		{Kind: device.OpStore, Key: k2, Value: val(6, small.MaxValueLen+1)},
	}
	if err := d.Batch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	s.wantAccounting(t, d, 2, 6+4+4+2)
}

func (s suite) testOwnership(t *testing.T) {
	d := s.dev(t, small)
	k := key("owner")
	v := val(9, 128)
	orig := bytes.Clone(v)
	kk := bytes.Clone(k)
	mustStore(t, d, kk, v)
	// The device must have copied both buffers.
	v[0] ^= 0xff
	v[127] ^= 0xff
	kk[0] ^= 0xff
	wantValue(t, d, k, orig)
	wantAbsent(t, d, kk)

	got := mustRetrieve(t, d, k)
	for i := range got {
		got[i] = 0
	}
	wantValue(t, d, k, orig)

	// Two retrieves must not share a buffer either.
	r1, r2 := mustRetrieve(t, d, k), mustRetrieve(t, d, k)
	r1[5] ^= 0xff
	if !bytes.Equal(r2, orig) {
		t.Fatal("two Retrieve results share memory")
	}
}

func (s suite) testConcurrent(t *testing.T) {
	d := s.dev(t, small)
	const (
		workers = 8
		rounds  = 60
		perG    = 6 // keys each worker owns
		sharedN = 64
	)
	shared := key("shared-key")
	var wg sync.WaitGroup
	models := make([]map[string][]byte, workers)
	for g := range workers {
		models[g] = map[string][]byte{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := t.Context()
			model := models[g]
			for i := range rounds {
				k := key("con-%02d-%02d", g, i%perG)
				v := val(g*1000+i, 16+i%40)
				switch i % 5 {
				case 0, 1:
					if err := d.Store(ctx, k, v); err != nil {
						t.Errorf("worker %d: Store: %v", g, err)
						return
					}
					model[string(k)] = v
				case 2:
					if err := d.Delete(ctx, k); err != nil {
						t.Errorf("worker %d: Delete: %v", g, err)
						return
					}
					delete(model, string(k))
				case 3:
					ops := []device.Op{
						{Kind: device.OpStore, Key: k, Value: v},
						{Kind: device.OpRetrieve, Key: k},
						{Kind: device.OpExist, Key: k},
					}
					if err := d.Batch(ctx, ops); err != nil {
						t.Errorf("worker %d: Batch: %v", g, err)
						return
					}
					for j, op := range ops {
						if op.Err != nil {
							t.Errorf("worker %d: Batch op %d: %v", g, j, op.Err)
							return
						}
					}
					if !bytes.Equal(ops[1].Result, v) || !ops[2].Found {
						t.Errorf("worker %d: Batch read its own write wrong", g)
					}
					model[string(k)] = v
				case 4:
					n := 0
					if err := d.Iterate(ctx, key("con-%02d-", g), func([]byte) error { n++; return nil }); err != nil {
						t.Errorf("worker %d: Iterate: %v", g, err)
						return
					}
					if n != len(model) {
						t.Errorf("worker %d: Iterate saw %d own keys, model has %d", g, n, len(model))
					}
					if _, err := d.Info(ctx); err != nil {
						t.Errorf("worker %d: Info: %v", g, err)
					}
				}
				// Each worker's own keys are written only by it, so reads
				// must match its model exactly.
				got, err := d.Retrieve(ctx, k)
				want, ok := model[string(k)]
				switch {
				case ok && (err != nil || !bytes.Equal(got, want)):
					t.Errorf("worker %d: Retrieve(%q) = %d bytes, %v; want %d bytes", g, k, len(got), err, len(want))
				case !ok && !errors.Is(err, device.ErrNotFound):
					t.Errorf("worker %d: Retrieve(%q) of a deleted key: %v", g, k, err)
				}
				// The shared key is overwritten by everyone; a read must see
				// one whole write, never a mix.
				if err := d.Store(ctx, shared, bytes.Repeat([]byte{byte(g)}, sharedN)); err != nil {
					t.Errorf("worker %d: Store shared: %v", g, err)
				}
				sv, err := d.Retrieve(ctx, shared)
				if err != nil || len(sv) != sharedN || !bytes.Equal(sv, bytes.Repeat(sv[:1], sharedN)) {
					t.Errorf("worker %d: torn or failed read of the shared key: %d bytes, %v", g, len(sv), err)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	keys, used := int64(1), int64(len(shared)+sharedN)
	for _, m := range models {
		for k, v := range m {
			keys++
			used += int64(len(k) + len(v))
			wantValue(t, d, []byte(k), v)
		}
	}
	s.wantAccounting(t, d, keys, used)
}

func (s suite) testContext(t *testing.T) {
	d := s.dev(t, small)
	k := key("ctx-key")
	mustStore(t, d, k, []byte("v"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want context.Canceled", what, err)
		}
	}
	eachCall(t, ctx, d, k, "with a cancelled context", check, true)
	// The device still works with a live context. (Whether the cancelled
	// writes took effect is not specified: only that none was acknowledged.)
	k2 := key("ctx-after")
	mustStore(t, d, k2, []byte("live"))
	wantValue(t, d, k2, []byte("live"))
}

func (s suite) testClosed(t *testing.T) {
	d := s.dev(t, small)
	ctx := t.Context()
	k := key("closed")
	mustStore(t, d, k, []byte("v"))
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, device.ErrDeviceFailed) {
			t.Errorf("%s after Close: %v, want ErrDeviceFailed", what, err)
		}
	}
	eachCall(t, ctx, d, k, "after Close", check, false)
}

// eachCall makes every call of the Device API on key k and passes each
// error to check; Iterate's callback must not run. batchMayWork lets a
// Batch call itself succeed as long as its ops carry the errors.
func eachCall(t *testing.T, ctx context.Context, d device.Device, k []byte, when string, check func(string, error), batchMayWork bool) {
	t.Helper()
	check("Store", d.Store(ctx, k, []byte("w")))
	_, err := d.Retrieve(ctx, k)
	check("Retrieve", err)
	check("Delete", d.Delete(ctx, k))
	_, err = d.Exist(ctx, k)
	check("Exist", err)
	called := false
	check("Iterate", d.Iterate(ctx, nil, func([]byte) error { called = true; return nil }))
	if called {
		t.Errorf("Iterate %s called the callback", when)
	}
	_, err = d.Info(ctx)
	check("Info", err)
	ops := []device.Op{{Kind: device.OpStore, Key: k, Value: []byte("w")}, {Kind: device.OpRetrieve, Key: k}}
	if err := d.Batch(ctx, ops); err != nil || !batchMayWork {
		check("Batch", err)
	}
	for i, op := range ops {
		check(fmt.Sprintf("Batch op %d", i), op.Err)
	}
}
