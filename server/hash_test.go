package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestHashCommands: the hash commands' replies, inline and past the
// conversion, as Redis 7 gives them (go-redis, RESP3 by default).
func TestHashCommands(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	r := ts.client()
	for _, big := range []bool{false, true} {
		k := fmt.Sprintf("h%v", big)
		if n, err := r.HSet(ctx, k, "a", "1", "b", "2").Result(); err != nil || n != 2 {
			t.Fatalf("HSET: %d %v", n, err)
		}
		if big {
			for i := range 200 {
				r.HSet(ctx, k, fmt.Sprintf("f%03d", i), i)
			}
		}
		want := int64(2)
		enc := "listpack"
		if big {
			want, enc = 202, "hashtable"
		}
		if n, err := r.HLen(ctx, k).Result(); err != nil || n != want {
			t.Errorf("HLEN: %d %v, want %d", n, err, want)
		}
		if e, err := r.ObjectEncoding(ctx, k).Result(); err != nil || e != enc {
			t.Errorf("OBJECT ENCODING: %q %v, want %s", e, err, enc)
		}
		if n, _ := r.HSet(ctx, k, "a", "10", "c", "3").Result(); n != 1 {
			t.Errorf("HSET of one old, one new field: %d", n)
		}
		if v, err := r.HGet(ctx, k, "a").Result(); err != nil || v != "10" {
			t.Errorf("HGET: %q %v", v, err)
		}
		if _, err := r.HGet(ctx, k, "nope").Result(); err != redis.Nil {
			t.Errorf("HGET of a missing field: %v", err)
		}
		if vs, _ := r.HMGet(ctx, k, "a", "x", "b").Result(); len(vs) != 3 || vs[0] != "10" || vs[1] != nil || vs[2] != "2" {
			t.Errorf("HMGET: %v", vs)
		}
		if ok, _ := r.HSetNX(ctx, k, "a", "x").Result(); ok {
			t.Error("HSETNX of an existing field set it")
		}
		if ok, _ := r.HSetNX(ctx, k, "d", "4").Result(); !ok {
			t.Error("HSETNX of a new field did not set it")
		}
		if n, _ := r.HIncrBy(ctx, k, "a", 5).Result(); n != 15 {
			t.Errorf("HINCRBY: %d", n)
		}
		if f, _ := r.HIncrByFloat(ctx, k, "z", 1.5).Result(); f != 1.5 {
			t.Errorf("HINCRBYFLOAT: %v", f)
		}
		if err := r.HIncrBy(ctx, k, "z", 1).Err(); err == nil || err.Error() != "ERR hash value is not an integer" {
			t.Errorf("HINCRBY of a float: %v", err)
		}
		if n, _ := r.HStrLen(ctx, k, "a").Result(); n != 2 {
			t.Errorf("HSTRLEN: %d", n)
		}
		if ok, _ := r.HExists(ctx, k, "b").Result(); !ok {
			t.Error("HEXISTS of a field: false")
		}
		all, err := r.HGetAll(ctx, k).Result()
		if err != nil || int64(len(all)) != want+3 || all["a"] != "15" || all["d"] != "4" {
			t.Errorf("HGETALL: %d fields %v", len(all), err)
		}
		keys, _ := r.HKeys(ctx, k).Result()
		vals, _ := r.HVals(ctx, k).Result()
		if len(keys) != len(all) || len(vals) != len(all) {
			t.Errorf("HKEYS %d, HVALS %d, HGETALL %d", len(keys), len(vals), len(all))
		}
		// HSCAN returns every field exactly once.
		seen := map[string]int{}
		var cur uint64
		for {
			page, next, err := r.HScan(ctx, k, cur, "*", 7).Result()
			if err != nil {
				t.Fatalf("HSCAN: %v", err)
			}
			for i := 0; i < len(page); i += 2 {
				seen[page[i]]++
			}
			if cur = next; cur == 0 {
				break
			}
		}
		if len(seen) != len(all) {
			t.Errorf("HSCAN saw %d fields, want %d", len(seen), len(all))
		}
		for f, n := range seen {
			if n != 1 {
				t.Errorf("HSCAN returned %q %d times", f, n)
			}
		}
		if fs, _ := r.HRandFieldWithValues(ctx, k, 3).Result(); len(fs) != 3 {
			t.Errorf("HRANDFIELD 3 WITHVALUES: %v", fs)
		}
		if fs, _ := r.HRandField(ctx, k, -500).Result(); len(fs) != 500 {
			t.Errorf("HRANDFIELD -500: %d", len(fs))
		}
		if n, _ := r.HDel(ctx, k, "a", "b", "nope").Result(); n != 2 {
			t.Errorf("HDEL: %d", n)
		}
		if typ, _ := r.Type(ctx, k).Result(); typ != "hash" {
			t.Errorf("TYPE: %q", typ)
		}
		if err := r.Get(ctx, k).Err(); err == nil || err.Error() != "WRONGTYPE Operation against a key holding the wrong kind of value" {
			t.Errorf("GET of a hash: %v", err)
		}
		if err := r.Append(ctx, k, "x").Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
			t.Errorf("APPEND to a hash: %v", err)
		}
		if vs, err := r.MGet(ctx, k, "nokey").Result(); err != nil || vs[0] != nil {
			t.Errorf("MGET of a hash: %v %v", vs, err)
		}
		r.Set(ctx, "s", "v", 0)
		if err := r.HGet(ctx, "s", "a").Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
			t.Errorf("HGET of a string: %v", err)
		}
		// RENAME keeps the fields, COPY copies them, DEL removes them.
		if err := r.Rename(ctx, k, k+"r").Err(); err != nil {
			t.Fatalf("RENAME: %v", err)
		}
		if err := r.Copy(ctx, k+"r", k+"c", 0, false).Err(); err != nil {
			t.Fatalf("COPY: %v", err)
		}
		if n, _ := r.Del(ctx, k+"r").Result(); n != 1 {
			t.Errorf("DEL: %d", n)
		}
		all2, _ := r.HGetAll(ctx, k+"c").Result()
		if len(all2) != len(all)-2 || all2["d"] != "4" {
			t.Errorf("the copy, after the original's DEL: %d fields", len(all2))
		}
		if err := r.Expire(ctx, k+"c", time.Hour).Err(); err != nil {
			t.Errorf("EXPIRE of a hash: %v", err)
		}
		if d, _ := r.TTL(ctx, k+"c").Result(); d <= 0 {
			t.Errorf("TTL of a hash: %v", d)
		}
		if v, _ := r.HGet(ctx, k+"c", "d").Result(); v != "4" {
			t.Errorf("HGET after EXPIRE: %q", v)
		}
		// HDEL of every field deletes the key.
		fs, _ := r.HKeys(ctx, k+"c").Result()
		r.HDel(ctx, k+"c", fs...)
		if n, _ := r.Exists(ctx, k+"c").Result(); n != 0 {
			t.Error("a hash with no fields left exists")
		}
	}
	// Argument errors, as Redis.
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"hset", "h", "a"}, "ERR wrong number of arguments for 'hset' command"},
		{[]any{"hset", "h", "a", "1", "b"}, "ERR wrong number of arguments for 'hset' command"},
		{[]any{"hincrby", "h", "a", "x"}, "ERR value is not an integer or out of range"},
		{[]any{"hincrbyfloat", "h", "a", "x"}, "ERR value is not a valid float"},
	} {
		if err := r.Do(ctx, tc.args...).Err(); err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	// The deleted hashes' elements are reclaimed in the background.
	deadline := time.Now().Add(10 * time.Second)
	for {
		g := ts.srv.ks.Garbage()
		if g.Pending == 0 && g.Finished >= 1 && g.Reclaimed >= 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("garbage not reclaimed: %+v", g)
		}
		time.Sleep(50 * time.Millisecond)
	}
	left, _ := ts.a.Keys(ctx, []byte{0xFF, 'c'})
	if len(left) != 0 {
		t.Errorf("%d elements left after every hash was deleted", len(left))
	}
}

// TestHashInTransaction: hash commands inside MULTI/EXEC read their own
// writes, across the conversion, and commit all or nothing.
func TestHashInTransaction(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	r := ts.client()
	var fields []any
	for i := range 150 {
		fields = append(fields, fmt.Sprintf("f%d", i), i)
	}
	var lenCmd *redis.IntCmd
	var getCmd *redis.StringCmd
	var allCmd *redis.MapStringStringCmd
	_, err := r.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, "h", fields...)
		p.HDel(ctx, "h", "f3")
		lenCmd = p.HLen(ctx, "h")
		getCmd = p.HGet(ctx, "h", "f7")
		allCmd = p.HGetAll(ctx, "h")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if lenCmd.Val() != 149 || getCmd.Val() != "7" || len(allCmd.Val()) != 149 {
		t.Errorf("inside EXEC: HLEN %d, HGET %q, HGETALL %d fields", lenCmd.Val(), getCmd.Val(), len(allCmd.Val()))
	}
	if n, _ := r.HLen(ctx, "h").Result(); n != 149 {
		t.Errorf("HLEN after EXEC: %d", n)
	}
	keys, _ := r.HKeys(ctx, "h").Result()
	if len(keys) != 149 || slices.Contains(keys, "f3") {
		t.Errorf("HKEYS after EXEC: %d", len(keys))
	}
	// WATCH of a hash: another client's HSET aborts the EXEC.
	err = r.Watch(ctx, func(tx *redis.Tx) error {
		ts.client().HSet(ctx, "h", "x", "1")
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, "h", "y", "1")
			return nil
		})
		return err
	}, "h")
	if err != redis.TxFailedErr {
		t.Errorf("EXEC after a watched hash changed: %v", err)
	}
	// ... and so does an HSET that changes an existing field of a
	// hashtable hash (an element's write alone), in EXEC or not.
	for _, inTx := range []bool{false, true} {
		err = r.Watch(ctx, func(tx *redis.Tx) error {
			other := ts.client()
			if inTx {
				other.TxPipelined(ctx, func(p redis.Pipeliner) error { p.HSet(ctx, "h", "f1", "new"); return nil })
			} else {
				other.HSet(ctx, "h", "f1", "new")
			}
			_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.HSet(ctx, "h", "y", "1")
				return nil
			})
			return err
		}, "h")
		if err != redis.TxFailedErr {
			t.Errorf("EXEC after a watched hash's field changed (in EXEC: %v): %v", inTx, err)
		}
	}
	if n, _ := r.Exists(ctx, "h").Result(); n != 1 {
		t.Error("EXISTS of a hash: 0")
	}
	if n, _ := r.DBSize(ctx).Result(); n != 1 {
		t.Errorf("DBSIZE: %d (elements counted as keys?)", n)
	}
	if ks, _, _ := r.Scan(ctx, 0, "*", 100).Result(); len(ks) != 1 {
		t.Errorf("SCAN: %v", ks)
	}
	if ks, _, _ := r.ScanType(ctx, 0, "*", 100, "hash").Result(); len(ks) != 1 {
		t.Errorf("SCAN TYPE hash: %v", ks)
	}
	if ks, _, _ := r.ScanType(ctx, 0, "*", 100, "string").Result(); len(ks) != 0 {
		t.Errorf("SCAN TYPE string: %v", ks)
	}
}

// TestHashCrash: an HSET that converts a hash writes its fields and value
// through one intent record: interrupted after the record, none of it is
// visible, and the restart completes all of it, count exact.
func TestHashCrash(t *testing.T) {
	crash := errors.New("simulated crash after the intent record")
	var armed atomic.Bool
	ts := startServer(t, "", withAfterIntent(func() error {
		if armed.Load() {
			return crash
		}
		return nil
	}))
	ctx := context.Background()
	r := ts.client()
	var fields []any
	for i := range 100 {
		fields = append(fields, fmt.Sprintf("f%d", i), i)
	}
	r.HSet(ctx, "h", fields...)
	fields = fields[:0]
	for i := 100; i < 200; i++ {
		fields = append(fields, fmt.Sprintf("f%d", i), i)
	}
	armed.Store(true)
	if err := r.HSet(ctx, "h", fields...).Err(); err == nil {
		t.Fatal("HSET succeeded though its commit was interrupted")
	}
	if n, _ := r.HLen(ctx, "h").Result(); n != 100 {
		t.Errorf("HLEN before the restart: %d, want 100", n)
	}
	if e, _ := r.ObjectEncoding(ctx, "h").Result(); e != "listpack" {
		t.Errorf("encoding before the restart: %s", e)
	}
	armed.Store(false)
	ts.restart()
	r = ts.client()
	if n, _ := r.HLen(ctx, "h").Result(); n != 200 {
		t.Errorf("HLEN after the restart: %d, want 200", n)
	}
	all, _ := r.HGetAll(ctx, "h").Result()
	if len(all) != 200 || all["f150"] != "150" || all["f5"] != "5" {
		t.Errorf("HGETALL after the restart: %d fields", len(all))
	}
}

// TestHashExpiryReclaims: a hashtable hash that expires is gone at once
// and its fields are reclaimed by the expiry cycle's turns; FLUSHDB and
// an overwrite by a string reclaim theirs too.
func TestHashExpiryReclaims(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	r := ts.client()
	fill := func(k string) {
		var fields []any
		for i := range 300 {
			fields = append(fields, fmt.Sprintf("f%d", i), i)
		}
		if err := r.HSet(ctx, k, fields...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	fill("e")
	fill("f")
	fill("o")
	r.PExpire(ctx, "e", 30*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	if n, _ := r.HLen(ctx, "e").Result(); n != 0 {
		t.Errorf("HLEN of an expired hash: %d", n)
	}
	r.Set(ctx, "o", "now a string", 0)
	r.Do(ctx, "select", "0")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left, _ := ts.a.Keys(ctx, []byte{0xFF, 'c'})
		if len(left) == 300 { // f's alone
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d elements left, want f's 300", len(left))
		}
	}
	r.FlushDB(ctx)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left, _ := ts.a.Keys(ctx, []byte{0xFF, 'c'})
		recs, _ := ts.a.Keys(ctx, []byte{0xFF, 'g'})
		if len(left) == 0 && len(recs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after FLUSHDB: %d elements, %d garbage records left", len(left), len(recs))
		}
	}
}
