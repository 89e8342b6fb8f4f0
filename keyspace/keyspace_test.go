package keyspace

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
)

func openArray(t *testing.T) *array.Array {
	t.Helper()
	return openArrayConfig(t, "devices: [mem:a, mem:b, mem:c, mem:d]\n")
}

// eachArray runs test over a plain array and over one whose small values
// (every value of these tests, keyspace header included) live in tiny
// buckets.
func eachArray(t *testing.T, test func(t *testing.T, a *array.Array)) {
	for name, y := range map[string]string{
		"plain": "devices: [mem:a, mem:b, mem:c, mem:d]\n",
		"tiny":  "devices: [mem:a, mem:b, mem:c, mem:d]\npacking: {k: 2, r: 2}\ntiny: {max: 64B, buckets: 4}\n",
	} {
		t.Run(name, func(t *testing.T) { test(t, openArrayConfig(t, y)) })
	}
}

func openArrayConfig(t *testing.T, y string) *array.Array {
	t.Helper()
	cfg, err := config.Parse([]byte(y), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, err := array.Create(context.Background(), config.OpenDevices(cfg, true), cfg.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func TestValueRoundTrip(t *testing.T) {
	for _, tc := range []Value{{}, {V: []byte("x")}, {V: []byte{0, 1, 0xff}, At: 1}, {V: []byte("12"), Raw: true},
		{V: []byte("34"), At: 5, Raw: true}, {V: bytes.Repeat([]byte("v"), 1000), At: 1 << 62}} {
		v, err := DecodeValue(EncodeValue(tc))
		if err != nil || !bytes.Equal(v.V, tc.V) || v.At != tc.At || v.Raw != tc.Raw {
			t.Errorf("round trip of %+v: %+v %v", tc, v, err)
		}
	}
	// Tag 4 and up are no value's; an expiry tag needs its 8 bytes.
	for _, bad := range [][]byte{nil, {4}, {1, 0, 0}, {3, 0}} {
		if _, err := DecodeValue(bad); !errors.Is(err, ErrBadValue) {
			t.Errorf("DecodeValue(%v) = %v, want ErrBadValue", bad, err)
		}
	}
}

// TestIndexOrder: index keys sort by expire-at, and a bucket's prefix
// holds exactly the entries whose expire-at is in it.
func TestIndexOrder(t *testing.T) {
	at := int64(1_700_000_000_123)
	k := ExpiryKey(at, 3, []byte("key"))
	if gat, db, key, ok := ParseExpiryKey(k); !ok || gat != at || db != 3 || string(key) != "key" {
		t.Fatalf("ParseExpiryKey = %d %d %q %v", gat, db, key, ok)
	}
	if !bytes.HasPrefix(k, BucketPrefix(Bucket(at))) || bytes.HasPrefix(k, BucketPrefix(Bucket(at)+1)) {
		t.Error("an entry is not under its own bucket's prefix only")
	}
	if bytes.Compare(ExpiryKey(at, 9, []byte("z")), ExpiryKey(at+1, 0, []byte("a"))) >= 0 {
		t.Error("index keys do not sort by expire-at")
	}
}

func TestIntentRoundTrip(t *testing.T) {
	ops := []Op{{Phys: 0, Key: []byte("a"), Val: []byte("1")}, {Phys: 5, Key: []byte("b"), Del: true},
		{Phys: 15, Key: []byte("c"), Val: []byte{}, At: 123, Using: "replication"}, {Phys: 2, Key: []byte("d"), Val: []byte("7"), Raw: true}}
	got, err := DecodeIntent(EncodeIntent(ops))
	if err != nil || len(got) != len(ops) {
		t.Fatalf("DecodeIntent: %v, %d ops", err, len(got))
	}
	for i := range ops {
		g, w := got[i], ops[i]
		if g.Phys != w.Phys || !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Val, w.Val) || g.At != w.At || g.Del != w.Del || g.Raw != w.Raw || g.Using != w.Using {
			t.Errorf("op %d: %+v, want %+v", i, g, w)
		}
	}
	rec := EncodeIntent(ops)
	for n := range len(rec) {
		if _, err := DecodeIntent(rec[:n]); err == nil {
			t.Errorf("a record cut to %d bytes decodes", n)
		}
	}
}

// TestStore: databases are separate, an expired value is absent, SWAPDB
// swaps what the databases hold and survives reopening.
func TestStore(t *testing.T) { eachArray(t, testStore) }

func testStore(t *testing.T, a *array.Array) {
	ctx := context.Background()
	s, err := Open(ctx, a, 16)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Set(ctx, 0, []byte("k"), []byte("zero"), 0))
	must(s.Set(ctx, 1, []byte("k"), []byte("one"), 0))
	must(s.Set(ctx, 0, []byte("gone"), []byte("x"), NowMs()-1))
	must(s.Set(ctx, 0, []byte("later"), []byte("x"), NowMs()+int64(time.Hour/time.Millisecond)))
	if v, _, err := s.Get(ctx, 0, []byte("k")); err != nil || string(v) != "zero" {
		t.Errorf("db 0 k = %q, %v", v, err)
	}
	if _, _, err := s.Get(ctx, 0, []byte("gone")); !errors.Is(err, array.ErrNotFound) {
		t.Errorf("an expired key: %v, want not found", err)
	}
	if ok, _ := s.Exists(ctx, 0, []byte("later")); !ok {
		t.Error("a key with a TTL an hour away does not exist")
	}
	must(s.Swap(ctx, 0, 1))
	s2, err := Open(ctx, a, 16)
	must(err)
	if v, _, err := s2.Get(ctx, 0, []byte("k")); err != nil || string(v) != "one" {
		t.Errorf("after SWAPDB 0 1 and reopening, db 0 k = %q, %v", v, err)
	}
	keys, err := s2.Keys(ctx, 1, nil)
	must(err)
	if len(keys) != 3 {
		t.Errorf("db 1 after the swap: %q", keys)
	}
	if err := s2.CheckKey(bytes.Repeat([]byte("k"), 242)); !errors.Is(err, array.ErrKeyTooLong) {
		t.Errorf("a 242-byte key: %v", err)
	}
	if _, err := Open(ctx, a, 256); !errors.Is(err, ErrBadDB) {
		t.Errorf("256 databases: %v", err)
	}
}
