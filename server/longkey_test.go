package server

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvarray/kvarray/keyspace"
)

// TestLongKeysSameAsRedis: keys longer than the devices take (a 5,000-byte
// key, keys that share their first 300 bytes, a key of exactly
// keyspace.NameLen bytes and one more) answer as in Redis, for every
// type, listed whole by KEYS and SCAN (MATCH on the part past the name's
// prefix too), renamed to and from short keys, with TTLs.
func TestLongKeysSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	long := strings.Repeat("k", 5000)
	a, b := strings.Repeat("p", 300)+"a", strings.Repeat("p", 300)+"b"
	exact, over := strings.Repeat("e", keyspace.NameLen), strings.Repeat("e", keyspace.NameLen+1)
	compareWithRedis(t, ts, redisAddr, [][]string{
		{"FLUSHALL"}, {"GET", long}, {"EXISTS", long}, {"SET", long, "v"}, {"GET", long}, {"EXISTS", long}, {"STRLEN", long},
		{"SET", a, "va"}, {"SET", b, "vb"}, {"GET", a}, {"GET", b}, {"SET", exact, "x"}, {"SET", over, "o"}, {"GET", exact}, {"GET", over},
		{"KEYS", "p*b"}, {"DBSIZE"}, {"SCAN", "0", "MATCH", "*a", "COUNT", "100"},
		{"APPEND", long, "w"}, {"GETRANGE", long, "0", "-1"}, {"INCR", a}, {"EXPIRE", long, "100"}, {"TTL", long},
		{"RENAME", long, "short"}, {"GET", "short"}, {"EXISTS", long}, {"RENAME", "short", long}, {"GET", long}, {"TTL", long},
		{"DEL", a, b}, {"EXISTS", a, b}, {"TYPE", long},
		{"HSET", a, "f", "1", "g", "2"}, {"HGET", a, "g"}, {"HGETALL", a}, {"TYPE", a}, {"SADD", b, "m"}, {"SMEMBERS", b},
		{"COPY", a, "ca"}, {"HGETALL", "ca"}, {"COPY", "ca", b + "copy"}, {"HGETALL", b + "copy"},
		{"DEL", long, exact, over, a, b, "ca", b + "copy"}, {"DBSIZE"}, {"KEYS", "*"},
	})
	// Listings of several keys, whose order Redis does not fix.
	for _, addr := range []string{redisAddr, ts.addr} {
		c := (&testServer{t: t, addr: addr}).dial()
		for _, k := range []string{long, a, b, exact, over} {
			c.do("SET", k, "v")
		}
		want := []string{a, b, exact, over, long}
		slices.Sort(want)
		for _, cmd := range [][]string{{"KEYS", "*"}, {"SCAN", "0", "COUNT", "100"}, {"KEYS", strings.Repeat("p", 300) + "*"}} {
			r := c.do(cmd...)
			if cmd[0] == "SCAN" {
				r = r.elems[1]
			}
			var got []string
			for _, e := range r.elems {
				got = append(got, e.str)
			}
			slices.Sort(got)
			w := want
			if strings.HasPrefix(cmd[1], "ppp") {
				w = []string{a, b}
			}
			if !slices.Equal(got, w) {
				t.Errorf("%s: %s lists %d keys %.80q, want %d", addr, cmd[0], len(got), got, len(w))
			}
		}
	}
}

// TestLongKeyExpiresAndRestarts: a long key's TTL runs out as a short
// one's: the reclaim deletes it (and its name record) and publishes its
// whole name; a long key survives a restart, listed whole.
func TestLongKeyExpiresAndRestarts(t *testing.T) {
	ts := startServer(t, "")
	c, sub := ts.dial(), ts.dial()
	long := strings.Repeat("x", 1000)
	c.do("CONFIG", "SET", "notify-keyspace-events", "Ex")
	sub.do("SUBSCRIBE", "__keyevent@0__:expired")
	if r := c.do("SET", long, "v", "PX", "50"); r.str != "OK" {
		t.Fatalf("SET: %s", r)
	}
	sub.SetReadDeadline(time.Now().Add(20 * time.Second))
	if r := sub.read(); len(r.elems) != 3 || r.elems[2].str != long {
		t.Fatalf("expired event: %.200s", r)
	}
	kept := strings.Repeat("y", 3000)
	c.do("SET", kept, "w")
	ts.restart()
	c = ts.dial()
	if r := c.do("KEYS", "*"); len(r.elems) != 1 || r.elems[0].str != kept {
		t.Fatalf("KEYS after the restart: %.200s", r)
	}
	if r := c.do("GET", kept); r.str != "w" {
		t.Fatalf("GET after the restart: %s", r)
	}
	if r := c.do("DBSIZE"); r.str != "1" {
		t.Fatalf("DBSIZE: %s", r)
	}
}

// TestLongKeyNameCollision: a key of exactly NameLen bytes made equal to
// a long key's name (its first bytes, then its digest) is refused once
// the long key exists, and the long key is unchanged.
func TestLongKeyNameCollision(t *testing.T) {
	ts := startServer(t, "")
	c := ts.dial()
	long := strings.Repeat("z", 500)
	c.do("SET", long, "the long key's")
	forged := string(keyspace.Name([]byte(long)))
	if r := c.do("SET", forged, "forged"); !r.isError() || !strings.Contains(r.str, "another key's") {
		t.Fatalf("SET of a key that is a long key's name: %s", r)
	}
	if r := c.do("GET", long); r.str != "the long key's" {
		t.Fatalf("GET of the long key: %s", r)
	}
}

// TestLongFieldsSameAsRedis: hash fields and set members longer than an
// element key takes (5,000 bytes; fields sharing their first 300 bytes;
// one of exactly the element limit) answer as in Redis, in an external
// hash and set, across HSCAN, HGETALL, SMEMBERS, COPY and a restart.
func TestLongFieldsSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	long := strings.Repeat("f", 5000)
	a, b := strings.Repeat("p", 300)+"a", strings.Repeat("p", 300)+"b"
	exact := strings.Repeat("e", 242) // the element limit with default devices
	many := []string{"SADD", "s"}     // past set-max-intset-entries: external
	for i := range 600 {
		many = append(many, strconv.Itoa(i))
	}
	script := [][]string{
		{"FLUSHALL"}, {"HSET", "h", long, "lv", "short", "sv"}, {"HGET", "h", long}, {"HEXISTS", "h", long}, {"HSTRLEN", "h", long},
		{"HSET", "h", a, "va", b, "vb", exact, "ve"}, {"HGET", "h", a}, {"HGET", "h", b}, {"HGET", "h", exact}, {"HLEN", "h"},
		{"HMGET", "h", long, a, "nofield", b}, {"HINCRBY", "h", long + "n", "5"}, {"HGET", "h", long + "n"},
		{"HDEL", "h", a}, {"HGET", "h", a}, {"HGET", "h", b}, {"HLEN", "h"}, {"HSETNX", "h", long, "x"}, {"HGET", "h", long},
		many, {"SADD", "s", long, a, b, exact, "m"}, {"SISMEMBER", "s", long}, {"SISMEMBER", "s", a}, {"SMISMEMBER", "s", b, long + "x"},
		{"SREM", "s", a}, {"SCARD", "s"}, {"SMOVE", "s", "t", long}, {"SISMEMBER", "t", long}, {"SISMEMBER", "s", long},
		{"COPY", "h", "hc"}, {"HGET", "hc", long}, {"HLEN", "hc"},
	}
	for n := 230; n < 250; n++ { // every length around the element limit
		f := strings.Repeat("b", n)
		script = append(script, []string{"HSET", "h", f, strconv.Itoa(n)}, []string{"HGET", "h", f}, []string{"SADD", "s", f},
			[]string{"SISMEMBER", "s", f})
	}
	script = append(script, []string{"HLEN", "h"}, []string{"SCARD", "s"})
	for n := 230; n < 250; n += 2 {
		f := strings.Repeat("b", n)
		script = append(script, []string{"HDEL", "h", f}, []string{"SREM", "s", f})
	}
	script = append(script, []string{"HLEN", "h"}, []string{"SCARD", "s"})
	compareWithRedis(t, ts, redisAddr, script)
	ts.restart()
	c := ts.dial()
	all := c.do("HGETALL", "h")
	got := map[string]string{}
	for i := 0; i+1 < len(all.elems); i += 2 {
		got[all.elems[i].str] = all.elems[i+1].str
	}
	want := map[string]string{long: "lv", "short": "sv", b: "vb", exact: "ve", long + "n": "5"}
	for n := 231; n < 250; n += 2 {
		want[strings.Repeat("b", n)] = strconv.Itoa(n)
	}
	if !maps.Equal(got, want) {
		t.Errorf("HGETALL after the restart: %d fields, want %d", len(got), len(want))
	}
	var members []string
	for _, e := range c.do("SMEMBERS", "s").elems {
		if len(e.str) > 3 && e.str[0] != 'b' {
			members = append(members, e.str)
		}
	}
	slices.Sort(members)
	if w := []string{exact, b}; !slices.Equal(members, w) {
		t.Errorf("SMEMBERS after the restart: %.60q", members)
	}
	if r := c.do("OBJECT", "ENCODING", "s"); r.str != "hashtable" {
		t.Errorf("OBJECT ENCODING s: %s", r)
	}
	seen := map[string]bool{}
	for cursor := "0"; ; {
		r := c.do("HSCAN", "h", cursor, "COUNT", "2")
		for i := 0; i+1 < len(r.elems[1].elems); i += 2 {
			seen[r.elems[1].elems[i].str] = true
		}
		if cursor = r.elems[0].str; cursor == "0" {
			break
		}
	}
	if len(seen) != len(want) || !seen[long] {
		t.Errorf("HSCAN: %d fields, want %d", len(seen), len(want))
	}
}
