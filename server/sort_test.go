package server

import (
	"strconv"
	"testing"
)

// TestSortSameAsRedis compares SORT and SORT_RO with a real redis-server:
// lists, sets and sorted sets, numeric and ALPHA, BY keys and hash
// fields, no-sort, LIMIT windows, GET patterns, STORE and its errors.
// (A set's own order differs between the two servers: no test reads a
// set unsorted or sorts it with ties. Nor is a value out of a double's
// range sorted: Redis's strtod leaves errno ERANGE behind and its next
// numeric SORTs fail too.)
func TestSortSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	script := [][]string{
		{"FLUSHALL"},
		{"RPUSH", "l", "3", "1", "2", "10", "-1.5", "1e2"}, {"SORT", "l"}, {"SORT", "l", "DESC"}, {"SORT", "l", "ALPHA"},
		{"SORT", "l", "LIMIT", "1", "2"}, {"SORT", "l", "LIMIT", "-5", "2"}, {"SORT", "l", "LIMIT", "10", "2"}, {"SORT", "l", "LIMIT", "0", "-1"},
		{"SORT", "l", "LIMIT", "2", "0"}, {"SORT", "l", "LIMIT", "x", "1"}, {"SORT", "l", "LIMIT", "1"}, {"SORT", "l", "BOGUS"},
		{"SORT", "l", "BY", "nosort"}, {"SORT", "l", "BY", "nosort", "DESC"}, {"SORT", "l", "BY", "nosort", "LIMIT", "1", "3"},
		{"SORT", "l", "BY", "nosort", "DESC", "LIMIT", "1", "3"}, {"SORT", "l", "BY", "nosort", "LIMIT", "9", "3"},
		{"MSET", "w_3", "30", "w_1", "10", "w_2", "5", "w_10", "bad"}, {"SORT", "l", "BY", "w_*"}, {"SORT", "l", "BY", "w_*", "ALPHA"},
		{"SET", "w_10", "1"}, {"SORT", "l", "BY", "w_*"}, {"SORT", "l", "BY", "w_*", "GET", "#", "GET", "w_*", "GET", "nostar"},
		{"HSET", "h_3", "f", "c"}, {"HSET", "h_1", "f", "a"}, {"HSET", "h_2", "g", "b"},
		{"SORT", "l", "BY", "h_*->f", "ALPHA", "GET", "h_*->f", "GET", "h_*->", "GET", "#"}, {"SORT", "l", "BY", "h_*->f", "ALPHA", "DESC"},
		{"SORT", "l", "GET", "h_*->g", "GET", "w_*->f"}, {"SORT", "l", "BY", "w_*", "STORE", "dst"}, {"LRANGE", "dst", "0", "-1"}, {"TYPE", "dst"},
		{"SORT", "l", "BY", "w_*", "GET", "h_*->f", "STORE", "dst"}, {"LRANGE", "dst", "0", "-1"},
		{"SORT", "l", "LIMIT", "9", "1", "STORE", "dst"}, {"EXISTS", "dst"}, {"SORT", "nokey"}, {"SORT", "nokey", "STORE", "dst"},
		{"SORT_RO", "l", "STORE", "dst"}, {"SORT_RO", "l", "DESC", "LIMIT", "0", "2"},
		{"RPUSH", "bad", "1", "x", "2"}, {"SORT", "bad"}, {"SORT", "bad", "ALPHA"}, {"SORT", "bad", "BY", "nosort"},
		{"RPUSH", "nan", "nan"}, {"SORT", "nan"}, {"RPUSH", "empty", ""}, {"SORT", "empty"},
		{"SET", "str", "x"}, {"SORT", "str"}, {"HSET", "hh", "a", "1"}, {"SORT", "hh"},
		{"SADD", "s", "5", "2", "9", "-3", "0"}, {"SORT", "s"}, {"SORT", "s", "DESC", "LIMIT", "1", "2"}, {"SORT", "s", "ALPHA"},
		{"SORT", "s", "BY", "nosort", "STORE", "dst"}, {"LRANGE", "dst", "0", "-1"},
		{"SADD", "sw", "a", "b", "c"}, {"MSET", "k_a", "3", "k_b", "1", "k_c", "2"}, {"SORT", "sw", "BY", "k_*"}, {"SORT", "sw", "BY", "k_*", "GET", "k_*"},
		{"ZADD", "z", "3", "c", "1", "a", "2", "b", "2", "bb", "-inf", "m", "+inf", "p"}, {"SORT", "z", "ALPHA"}, {"SORT", "z", "BY", "nosort"},
		{"SORT", "z", "BY", "nosort", "DESC"}, {"SORT", "z", "BY", "nosort", "LIMIT", "1", "2"}, {"SORT", "z", "BY", "nosort", "DESC", "LIMIT", "1", "10"},
		{"SORT", "z", "BY", "nosort", "GET", "#", "GET", "k_*"},
		{"ZADD", "zn", "1", "10", "2", "9", "3", "8"}, {"SORT", "zn"}, {"SORT", "zn", "BY", "nosort", "STORE", "dst"}, {"LRANGE", "dst", "0", "-1"},
		{"COMMAND", "GETKEYS", "SORT", "abc", "STORE", "def"},
	}
	r := randomSource(t)
	for round := range 20 {
		key := "r" + strconv.Itoa(round)
		push := []string{"RPUSH", key}
		for i := range 1 + r.IntN(60) {
			e := strconv.Itoa(i)
			push = append(push, e)
			script = append(script, []string{"SET", "rw_" + e, strconv.FormatFloat(r.NormFloat64()*100, 'g', -1, 64)},
				[]string{"HSET", "rh_" + e, "f", strconv.Itoa(r.IntN(1000000))})
		}
		off, cnt := strconv.Itoa(r.IntN(70)-5), strconv.Itoa(r.IntN(70)-5)
		script = append(script, push,
			[]string{"SORT", key, "BY", "rw_*", "LIMIT", off, cnt, "GET", "#", "GET", "rh_*->f"},
			[]string{"SORT", key, "BY", "rh_*->f", "DESC", "LIMIT", off, cnt},
			[]string{"SORT", key, "BY", "rh_*->f", "ALPHA", "LIMIT", off, cnt},
			[]string{"SORT", key, "BY", "nosort", "DESC", "LIMIT", off, cnt, "GET", "rw_*"},
			[]string{"SORT", key, "BY", "rw_*", "STORE", "rdst"}, []string{"LRANGE", "rdst", "0", "-1"})
	}
	compareWithRedis(t, ts, redisAddr, script)
}

// TestSortACL is acl-v2.tcl's `Test sort with ACL permissions`: BY and
// GET patterns need a selector that reads every key.
func TestSortACL(t *testing.T) {
	ts := startServer(t, "")
	r, r2 := ts.dial(), ts.dial()
	expect(t, r, "+OK", "SET", "v1", "1")
	expect(t, r, ":1", "LPUSH", "mylist", "1")
	denied := func() {
		t.Helper()
		expect(t, r2, "ERR BY option of SORT denied due to insufficient ACL permissions.", "SORT", "mylist", "BY", "v*")
		expect(t, r2, "ERR GET option of SORT denied due to insufficient ACL permissions.", "SORT", "mylist", "GET", "v*")
	}
	expect(t, r, "+OK", "ACL", "SETUSER", "test-sort-acl", "on", "nopass", "(+sort ~mylist)")
	expect(t, r2, "+OK", "AUTH", "test-sort-acl", "nopass")
	denied()
	expect(t, r, "+OK", "ACL", "SETUSER", "test-sort-acl", "(+sort ~mylist ~v*)")
	denied()
	expect(t, r, "+OK", "ACL", "SETUSER", "test-sort-acl", "(+sort ~mylist %W~*)")
	denied()
	expect(t, r, "+OK", "ACL", "SETUSER", "test-sort-acl", "(+sort ~mylist %R~*)")
	for _, by := range []string{"v*", "nosort"} {
		if got := r2.do("SORT", "mylist", "BY", by).String(); got != `[$"1"]` {
			t.Errorf("SORT mylist BY %s: %s", by, got)
		}
	}
}
