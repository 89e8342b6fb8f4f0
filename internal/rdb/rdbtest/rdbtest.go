// Package rdbtest fills a Redis-protocol server (redis-server or kvarray
// serve) with keys of every type package rdb moves, in every encoding
// Redis 7.0 picks for them, and reads a server's keys back as rdb
// Objects, so that tests compare what two servers hold, or a server and
// an RDB file, key by key.
package rdbtest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/internal/rdb"
)

// DBs are the databases Populate writes.
var DBs = []int{0, 1, 3}

// Item is one key's value and expiry (Unix ms, 0 for none).
type Item struct {
	Object   rdb.Object
	ExpireAt int64
}

// Snapshot is what a server holds: database, key, item.
type Snapshot map[int]map[string]Item

// Client connects to addr's database db.
func Client(t testing.TB, addr string, db int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db, Protocol: 2, DisableIdentity: true,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { c.Close() })
	return c
}

// Populate writes the keys of every type into DBs of the server at addr:
// small values (listpack, intset, embstr and int strings), large ones
// (hashtable, skiplist, quicklist of several nodes, LZF-compressible
// strings), binary and empty-ish members, special scores and expiries.
func Populate(t testing.TB, addr string) {
	ctx := context.Background()
	for _, db := range DBs {
		c := Client(t, addr, db)
		p := fmt.Sprintf("db%d:", db)
		do := func(args ...any) {
			t.Helper()
			if err := c.Do(ctx, args...).Err(); err != nil && err != redis.Nil {
				t.Fatalf("%v: %v", args, err)
			}
		}
		do("SET", p+"str", "hello")
		do("SET", p+"int", "12345")
		do("SET", p+"neg", "-9000000000")
		do("SET", p+"bin", "\x00\xff\r\n binary")
		do("SET", p+"long", strings.Repeat("abcdefgh", 2000)) // LZF in an RDB
		do("SET", p+"empty", "")
		// Fixed expiries far off, so that a fixture file stays valid.
		do("SET", p+"ttl", "expires", "PXAT", 4102444800123)
		do("PFADD", p+"hll", "a", "b", "c", "d")
		do("RPUSH", p+"list", "a", "b", "1", "-2", "300000", "c")
		big := make([]any, 0, 3000)
		for i := range 3000 {
			big = append(big, fmt.Sprintf("element-%d-%s", i, strings.Repeat("x", i%50)))
		}
		do(append([]any{"RPUSH", p + "biglist"}, big...)...)
		do("LPUSH", p+"biglist", strings.Repeat("L", 20000)) // a node of its own
		do("SADD", p+"intset", 1, 2, 3, -5, 1<<40)
		do("SADD", p+"set", "x", "y", "z", "")
		do(append([]any{"SADD", p + "bigset"}, big[:700]...)...)
		do("HSET", p+"hash", "f1", "v1", "f2", "2", "", "empty field")
		bigHash := []any{"HSET", p + "bighash"}
		for i := range 300 {
			bigHash = append(bigHash, fmt.Sprintf("field%d", i), fmt.Sprintf("value%d", i*7))
		}
		do(bigHash...)
		do("HSET", p+"longhash", "f", strings.Repeat("v", 100))
		do("ZADD", p+"zset", 1, "one", 2.5, "two", -3, "three", "+inf", "top", "-inf", "bottom", 0, "")
		bigZ := []any{"ZADD", p + "bigzset"}
		for i := range 300 {
			bigZ = append(bigZ, float64(i)/3, fmt.Sprintf("member%d", i))
		}
		do(bigZ...)
		do("ZADD", p+"ttlzset", 1e300, "huge")
		do("PEXPIREAT", p+"ttlzset", 4102444800000+int64(db)*1000)
		do("HSET", p+"ttlhash", "a", "b")
		do("EXPIREAT", p+"ttlhash", 4133980800)
	}
}

// Read reads every key of dbs from the server at addr.
func Read(t testing.TB, addr string, dbs ...int) Snapshot {
	t.Helper()
	ctx := context.Background()
	s := Snapshot{}
	for _, db := range dbs {
		c := Client(t, addr, db)
		var keys []string
		iter := c.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatalf("SCAN db %d: %v", db, err)
		}
		if len(keys) == 0 {
			continue
		}
		m := map[string]Item{}
		for _, k := range keys {
			it, err := ReadKey(ctx, c, k)
			if err != nil {
				t.Fatalf("db %d key %q: %v", db, k, err)
			}
			m[k] = it
		}
		s[db] = m
	}
	return s
}

// ReadKey reads key through c with the type's own commands.
func ReadKey(ctx context.Context, c *redis.Client, key string) (Item, error) {
	typ, err := c.Type(ctx, key).Result()
	if err != nil {
		return Item{}, err
	}
	var o rdb.Object
	switch typ {
	case "string":
		v, err := c.Get(ctx, key).Result()
		if err != nil {
			return Item{}, err
		}
		o = rdb.Object{Kind: rdb.String, Str: []byte(v)}
	case "list":
		v, err := c.LRange(ctx, key, 0, -1).Result()
		if err != nil {
			return Item{}, err
		}
		o = rdb.Object{Kind: rdb.List, Elems: bs(v)}
	case "set":
		v, err := c.SMembers(ctx, key).Result()
		if err != nil {
			return Item{}, err
		}
		o = rdb.Object{Kind: rdb.Set, Elems: bs(v)}
	case "hash":
		v, err := c.HGetAll(ctx, key).Result()
		if err != nil {
			return Item{}, err
		}
		o = rdb.Object{Kind: rdb.Hash}
		for f, x := range v {
			o.Fields = append(o.Fields, rdb.Field{Name: []byte(f), Value: []byte(x)})
		}
	case "zset":
		v, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
		if err != nil {
			return Item{}, err
		}
		o = rdb.Object{Kind: rdb.ZSet}
		for _, z := range v {
			o.Members = append(o.Members, rdb.Member{Member: []byte(z.Member.(string)), Score: z.Score})
		}
	default:
		return Item{}, fmt.Errorf("type %s", typ)
	}
	at, err := c.Do(ctx, "PEXPIRETIME", key).Int64()
	if err != nil {
		return Item{}, err
	}
	return Item{Normalize(o), max(at, 0)}, nil
}

func bs(v []string) [][]byte {
	out := make([][]byte, len(v))
	for i, s := range v {
		out[i] = []byte(s)
	}
	return out
}

// Normalize orders o's unordered elements (a set's, a hash's, a sorted
// set's by member) so that two reads compare equal.
func Normalize(o rdb.Object) rdb.Object {
	switch o.Kind {
	case rdb.Set:
		o.Elems = slices.Clone(o.Elems)
		slices.SortFunc(o.Elems, bytes.Compare)
	case rdb.Hash:
		o.Fields = slices.Clone(o.Fields)
		slices.SortFunc(o.Fields, func(a, b rdb.Field) int { return bytes.Compare(a.Name, b.Name) })
	case rdb.ZSet:
		o.Members = slices.Clone(o.Members)
		slices.SortFunc(o.Members, func(a, b rdb.Member) int { return bytes.Compare(a.Member, b.Member) })
	}
	return o
}

// FromFile reads an RDB file as a Snapshot, failing on an unsupported
// value.
func FromFile(t testing.TB, f *rdb.FileReader) Snapshot {
	t.Helper()
	s := Snapshot{}
	for {
		e, err := f.Next()
		if err == io.EOF {
			return s
		}
		if err != nil {
			t.Fatal(err)
		}
		if e.Unsupported != nil {
			t.Fatalf("key %q: %v", e.Key, e.Unsupported)
		}
		if s[e.DB] == nil {
			s[e.DB] = map[string]Item{}
		}
		s[e.DB][string(e.Key)] = Item{Normalize(e.Object), e.ExpireAt}
	}
}

// Equal fails t with every difference between want and got.
func Equal(t testing.TB, want, got Snapshot) {
	t.Helper()
	EqualWithin(t, want, got, 0)
}

// EqualWithin is Equal with expiries that may differ by slack (moved
// as relative TTLs, as MIGRATE moves them).
func EqualWithin(t testing.TB, want, got Snapshot, slack time.Duration) {
	t.Helper()
	dbs := map[int]bool{}
	for db := range want {
		dbs[db] = true
	}
	for db := range got {
		dbs[db] = true
	}
	bad := 0
	for db := range dbs {
		for k, w := range want[db] {
			g, ok := got[db][k]
			switch {
			case !ok:
				t.Errorf("db %d key %q: missing", db, k)
			case (w.ExpireAt == 0) != (g.ExpireAt == 0) || abs(w.ExpireAt-g.ExpireAt) > slack.Milliseconds():
				t.Errorf("db %d key %q: expires at %d, want %d", db, k, g.ExpireAt, w.ExpireAt)
			case !SameObject(w.Object, g.Object):
				t.Errorf("db %d key %q: %s, want %s", db, k, Show(g.Object), Show(w.Object))
			default:
				continue
			}
			if bad++; bad > 20 {
				t.Fatal("too many differences")
			}
		}
		for k := range got[db] {
			if _, ok := want[db][k]; !ok {
				t.Errorf("db %d key %q: not expected", db, k)
			}
		}
	}
}

func abs(n int64) int64 { return max(n, -n) }

// SameObject compares two normalized Objects (NaN scores equal).
func SameObject(a, b rdb.Object) bool {
	if a.Kind != b.Kind || a.Len() != b.Len() {
		return false
	}
	switch a.Kind {
	case rdb.String:
		return bytes.Equal(a.Str, b.Str)
	case rdb.List, rdb.Set:
		return slices.EqualFunc(a.Elems, b.Elems, bytes.Equal)
	case rdb.Hash:
		return slices.EqualFunc(a.Fields, b.Fields, func(x, y rdb.Field) bool {
			return bytes.Equal(x.Name, y.Name) && bytes.Equal(x.Value, y.Value)
		})
	}
	return slices.EqualFunc(a.Members, b.Members, func(x, y rdb.Member) bool {
		return bytes.Equal(x.Member, y.Member) && (x.Score == y.Score || math.IsNaN(x.Score) && math.IsNaN(y.Score))
	})
}

// Show is a short description of o for failures.
func Show(o rdb.Object) string {
	s := fmt.Sprintf("%s of %d", o.Kind, o.Len())
	switch o.Kind {
	case rdb.String:
		s += " " + strconv.Quote(string(o.Str[:min(len(o.Str), 40)]))
	case rdb.List, rdb.Set:
		if len(o.Elems) > 0 {
			s += fmt.Sprintf(" first %q", o.Elems[0])
		}
	}
	return s
}

// Count is the number of keys of s.
func (s Snapshot) Count() int {
	n := 0
	for _, m := range s {
		n += len(m)
	}
	return n
}

// Keys lists s's database and key pairs in order (for stable loops).
func (s Snapshot) Keys() [][2]string {
	var out [][2]string
	for db, m := range s {
		for k := range m {
			out = append(out, [2]string{strconv.Itoa(db), k})
		}
	}
	slices.SortFunc(out, func(a, b [2]string) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	return out
}
