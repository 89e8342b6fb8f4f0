package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestSetCommands: the set commands' replies, intset, small and past the
// conversion, as Redis 7 gives them (go-redis, RESP3).
func TestSetCommands(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	r := ts.client()
	if n, _ := r.SAdd(ctx, "i", 3, 1, 2, 2).Result(); n != 3 {
		t.Errorf("SADD: %d", n)
	}
	if e, _ := r.ObjectEncoding(ctx, "i").Result(); e != "intset" {
		t.Errorf("encoding of integers: %s", e)
	}
	if ms, _ := r.SMembers(ctx, "i").Result(); !slices.Equal(ms, []string{"1", "2", "3"}) {
		t.Errorf("SMEMBERS of an intset: %v", ms)
	}
	r.SAdd(ctx, "i", "x")
	if e, _ := r.ObjectEncoding(ctx, "i").Result(); e != "hashtable" {
		t.Errorf("encoding with a string: %s", e)
	}
	r.SRem(ctx, "i", "x")
	if e, _ := r.ObjectEncoding(ctx, "i").Result(); e != "hashtable" {
		t.Errorf("encoding after the string left: %s (Redis never converts back)", e)
	}
	var big []any
	for i := range 300 {
		big = append(big, fmt.Sprintf("m%03d", i))
	}
	r.SAdd(ctx, "b", big...)
	if n, _ := r.SCard(ctx, "b").Result(); n != 300 {
		t.Errorf("SCARD: %d", n)
	}
	r.SAdd(ctx, "c", "m001", "m002", "zz")
	if ms, _ := r.SInter(ctx, "b", "c").Result(); len(ms) != 2 {
		t.Errorf("SINTER: %v", ms)
	}
	if ms, _ := r.SUnion(ctx, "b", "c").Result(); len(ms) != 301 {
		t.Errorf("SUNION: %d", len(ms))
	}
	if ms, _ := r.SDiff(ctx, "c", "b").Result(); !slices.Equal(ms, []string{"zz"}) {
		t.Errorf("SDIFF: %v", ms)
	}
	if n, _ := r.SInterCard(ctx, 1, "b", "c").Result(); n != 1 {
		t.Errorf("SINTERCARD LIMIT 1: %d", n)
	}
	if n, _ := r.SUnionStore(ctx, "u", "b", "c").Result(); n != 301 {
		t.Errorf("SUNIONSTORE: %d", n)
	}
	if n, _ := r.SCard(ctx, "u").Result(); n != 301 {
		t.Errorf("SCARD of the stored union: %d", n)
	}
	if n, _ := r.SInterStore(ctx, "u", "c", "nokey").Result(); n != 0 {
		t.Errorf("SINTERSTORE with a missing key: %d", n)
	}
	if n, _ := r.Exists(ctx, "u").Result(); n != 0 {
		t.Error("an empty SINTERSTORE result left its destination")
	}
	if ok, _ := r.SMove(ctx, "b", "c", "m100").Result(); !ok {
		t.Error("SMOVE: false")
	}
	if ok, _ := r.SIsMember(ctx, "c", "m100").Result(); !ok {
		t.Error("SMOVE's member is not in the destination")
	}
	if ms, _ := r.SMIsMember(ctx, "b", "m100", "m101").Result(); !slices.Equal(ms, []bool{false, true}) {
		t.Errorf("SMISMEMBER: %v", ms)
	}
	popped, _ := r.SPopN(ctx, "b", 10).Result()
	if len(popped) != 10 {
		t.Errorf("SPOP 10: %v", popped)
	}
	if n, _ := r.SCard(ctx, "b").Result(); n != 289 {
		t.Errorf("SCARD after SPOP: %d", n)
	}
	if ms, _ := r.SRandMemberN(ctx, "b", -400).Result(); len(ms) != 400 {
		t.Errorf("SRANDMEMBER -400: %d", len(ms))
	}
	seen := map[string]bool{}
	var cur uint64
	for {
		page, next, err := r.SScan(ctx, "b", cur, "", 20).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page {
			seen[m] = true
		}
		if cur = next; cur == 0 {
			break
		}
	}
	if len(seen) != 289 {
		t.Errorf("SSCAN saw %d members", len(seen))
	}
	r.Set(ctx, "s", "v", 0)
	for _, err := range []error{r.SAdd(ctx, "s", "x").Err(), r.SInter(ctx, "b", "s").Err(), r.HGet(ctx, "b", "x").Err()} {
		if err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
			t.Errorf("a set command on a string, or a hash command on a set: %v", err)
		}
	}
	if typ, _ := r.Type(ctx, "b").Result(); typ != "set" {
		t.Errorf("TYPE: %s", typ)
	}
	if err := r.Do(ctx, "sintercard", "0", "a").Err(); err == nil || err.Error() != "ERR numkeys should be greater than 0" {
		t.Errorf("SINTERCARD 0: %v", err)
	}
	if err := r.Do(ctx, "spop", "b", "-1").Err(); err == nil || err.Error() != "ERR value is out of range, must be positive" {
		t.Errorf("SPOP -1: %v", err)
	}
}
