package keyspace

import (
	"bytes"
	"context"
	"errors"
	"slices"
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
		{V: []byte("34"), At: 5, Raw: true}, {V: bytes.Repeat([]byte("v"), 1000), At: 1 << 62},
		{V: []byte("h"), Type: TypeHash}, {V: []byte("z"), Type: TypeZSet, Ver: 7, At: 9}, {Type: TypeSet, Ver: 1 << 63}} {
		v, err := DecodeValue(EncodeValue(tc))
		if err != nil || !bytes.Equal(v.V, tc.V) || v.At != tc.At || v.Raw != tc.Raw || v.Type != tc.Type || v.Ver != tc.Ver {
			t.Errorf("round trip of %+v: %+v %v", tc, v, err)
		}
	}
	// Tag 64 and up are no value's; an expiry or version tag needs its 8
	// bytes.
	for _, bad := range [][]byte{nil, {64}, {1, 0, 0}, {3, 0}, {tagVersion | 4, 0, 0}, {tagVersion | tagExpiry, 0, 0, 0, 0, 0, 0, 0, 0, 1}} {
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
		{Phys: 15, Key: []byte("c"), Val: []byte{}, At: 123, Using: "replication"}, {Phys: 2, Key: []byte("d"), Val: []byte("7"), Raw: true},
		{Phys: 3, Key: []byte("h"), Val: []byte("m"), Type: TypeHash, Ver: 1 << 40}, {Phys: 3, Key: []byte("r"), Del: true, Keep: true},
		{Phys: Internal, Key: []byte("c12345678f"), Val: []byte("v")}}
	got, err := DecodeIntent(EncodeIntent(ops))
	if err != nil || len(got) != len(ops) {
		t.Fatalf("DecodeIntent: %v, %d ops", err, len(got))
	}
	for i := range ops {
		g, w := got[i], ops[i]
		if g.Phys != w.Phys || !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Val, w.Val) || g.At != w.At || g.Del != w.Del || g.Raw != w.Raw || g.Using != w.Using ||
			g.Type != w.Type || g.Ver != w.Ver || g.Keep != w.Keep {
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
	_, maxValue := s2.Limits()
	if err := s2.CheckKey(bytes.Repeat([]byte("k"), int(maxValue)+1)); !errors.Is(err, array.ErrKeyTooLong) {
		t.Errorf("a key longer than the largest value: %v", err)
	}
	// Long keys: stored under their names, listed whole, after a reopen.
	long := [][]byte{bytes.Repeat([]byte("k"), NameLen+1), bytes.Repeat([]byte("k"), 5000), append(bytes.Repeat([]byte("k"), 5000), 'x')}
	for i, k := range long {
		must(s2.CheckKey(k))
		must(s2.Set(ctx, 2, k, []byte{byte(i)}, 0))
	}
	s3, err := Open(ctx, a, 16)
	must(err)
	for i, k := range long {
		if v, _, err := s3.Get(ctx, 2, k); err != nil || !bytes.Equal(v, []byte{byte(i)}) {
			t.Errorf("long key %d: %q, %v", i, v, err)
		}
	}
	if keys, err := s3.Keys(ctx, 2, bytes.Repeat([]byte("k"), 4000)); err != nil || len(keys) != 2 {
		t.Errorf("Keys of a 4,000-byte prefix: %d keys, %v; want the two long keys", len(keys), err)
	}
	if keys, err := s3.Keys(ctx, 2, nil); err != nil || len(keys) != 3 || !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, long[2]) }) {
		t.Errorf("Keys: %d keys, %v", len(keys), err)
	}
	if existed, err := s3.Delete(ctx, 2, long[1]); err != nil || !existed {
		t.Errorf("Delete of a long key: %v, %v", existed, err)
	}
	if recs, err := a.Keys(ctx, []byte{Internal, recName}); err != nil || len(recs) != 2 {
		t.Errorf("name records after a delete: %d, %v; want 2", len(recs), err)
	}
	if _, err := Open(ctx, a, 256); !errors.Is(err, ErrBadDB) {
		t.Errorf("256 databases: %v", err)
	}
}

// TestName: a key of at most NameLen bytes is its own name; a longer one's
// name is NameLen bytes, its first ones then its digest, and a name is
// its own name (listings give names back).
func TestName(t *testing.T) {
	short := bytes.Repeat([]byte("a"), NameLen)
	if !bytes.Equal(Name(short), short) {
		t.Error("a key of NameLen bytes is not its own name")
	}
	long := bytes.Repeat([]byte("a"), NameLen+1)
	n := Name(long)
	if len(n) != NameLen || !bytes.Equal(n[:NameLen-digestLen], long[:NameLen-digestLen]) || bytes.Equal(n, short) {
		t.Errorf("name of a long key: %q", n)
	}
	if !bytes.Equal(Name(n), n) {
		t.Error("a name is not its own name")
	}
	if bytes.Equal(Name(append(long, 'b')), n) || len(long) != NameLen+1 {
		t.Error("two long keys share a name (or Name changed its argument)")
	}
}
