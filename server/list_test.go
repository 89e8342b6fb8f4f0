package server

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestListsSameAsRedis: the list commands' replies and errors, in RESP2
// and RESP3, against a real redis-server: fixed edge cases, then a random
// workload on a few lists made small enough to be stored as elements
// (list-max-listpack-size 4 on kvarray; Redis's encoding does not show).
func TestListsSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	script := [][]string{
		{"FLUSHALL"}, {"CONFIG", "SET", "list-max-listpack-size", "4"},
		{"RPUSH", "l", "a", "b", "c"}, {"LPUSH", "l", "z", "y"}, {"LRANGE", "l", "0", "-1"}, {"LRANGE", "l", "-100", "100"},
		{"LRANGE", "l", "3", "1"}, {"LRANGE", "l", "x", "1"}, {"LRANGE", "nokey", "0", "-1"}, {"LLEN", "l"}, {"LLEN", "nokey"},
		{"LINDEX", "l", "0"}, {"LINDEX", "l", "-1"}, {"LINDEX", "l", "99"}, {"LINDEX", "l", "x"}, {"LINDEX", "nokey", "0"},
		{"LPUSHX", "nokey", "a"}, {"RPUSHX", "nokey", "a"}, {"EXISTS", "nokey"}, {"LPUSHX", "l", "p"}, {"RPUSHX", "l", "q", "r"},
		{"LPOP", "l"}, {"RPOP", "l"}, {"LPOP", "l", "2"}, {"RPOP", "l", "0"}, {"LPOP", "l", "-1"}, {"LPOP", "nokey"},
		{"LPOP", "nokey", "2"}, {"LPOP", "nokey", "0"}, {"LPOP", "l", "1", "2"}, {"RPOP", "l", "x"},
		{"LSET", "l", "0", "S"}, {"LSET", "l", "-1", "T"}, {"LSET", "l", "99", "x"}, {"LSET", "nokey", "0", "x"}, {"LSET", "l", "x", "v"},
		{"LRANGE", "l", "0", "-1"},
		{"LINSERT", "l", "BEFORE", "S", "b0"}, {"LINSERT", "l", "after", "T", "t1"}, {"LINSERT", "l", "BEFORE", "none", "x"},
		{"LINSERT", "nokey", "BEFORE", "a", "x"}, {"LINSERT", "l", "MIDDLE", "a", "x"}, {"LRANGE", "l", "0", "-1"},
		{"RPUSH", "r", "a", "b", "a", "c", "a", "b", "a"}, {"LREM", "r", "2", "a"}, {"LREM", "r", "-1", "a"}, {"LREM", "r", "0", "b"},
		{"LREM", "r", "0", "zz"}, {"LREM", "r", "x", "a"}, {"LREM", "nokey", "0", "a"}, {"LRANGE", "r", "0", "-1"},
		{"RPUSH", "p", "a", "b", "c", "b", "a", "b"}, {"LPOS", "p", "b"}, {"LPOS", "p", "b", "RANK", "2"}, {"LPOS", "p", "b", "RANK", "-1"},
		{"LPOS", "p", "b", "COUNT", "0"}, {"LPOS", "p", "b", "COUNT", "2", "RANK", "-1"}, {"LPOS", "p", "b", "MAXLEN", "2"},
		{"LPOS", "p", "b", "RANK", "0"}, {"LPOS", "p", "b", "COUNT", "-1"}, {"LPOS", "p", "b", "MAXLEN", "-1"}, {"LPOS", "p", "zz"},
		{"LPOS", "p", "zz", "COUNT", "1"}, {"LPOS", "nokey", "a"}, {"LPOS", "nokey", "a", "COUNT", "1"}, {"LPOS", "p", "b", "FOO", "1"},
		{"LPOS", "p", "b", "RANK"}, {"LPOS", "p", "b", "RANK", "x"},
		{"LTRIM", "p", "1", "-2"}, {"LRANGE", "p", "0", "-1"}, {"LTRIM", "p", "5", "1"}, {"EXISTS", "p"}, {"LTRIM", "nokey", "0", "1"},
		{"LTRIM", "r", "x", "1"},
		{"RPUSH", "m", "1", "2", "3"}, {"LMOVE", "m", "m2", "LEFT", "RIGHT"}, {"LMOVE", "m", "m2", "RIGHT", "LEFT"},
		{"LMOVE", "m", "m", "LEFT", "RIGHT"}, {"LRANGE", "m", "0", "-1"}, {"LRANGE", "m2", "0", "-1"}, {"LMOVE", "nokey", "m", "LEFT", "LEFT"},
		{"LMOVE", "m", "m2", "UP", "LEFT"}, {"RPOPLPUSH", "m2", "m"}, {"RPOPLPUSH", "nokey", "m"}, {"LRANGE", "m", "0", "-1"},
		{"SET", "str", "v"}, {"LPUSH", "str", "a"}, {"LRANGE", "str", "0", "1"}, {"LMOVE", "m", "str", "LEFT", "LEFT"},
		{"LMOVE", "str", "m", "LEFT", "LEFT"}, {"LMOVE", "nokey", "str", "LEFT", "LEFT"}, {"GET", "m"}, {"TYPE", "m"}, {"TYPE", "str"},
		{"LMPOP", "2", "nokey", "m", "LEFT"}, {"LMPOP", "2", "nokey", "m2", "RIGHT", "COUNT", "10"}, {"LMPOP", "1", "nokey", "LEFT"},
		{"LMPOP", "0", "m", "LEFT"}, {"LMPOP", "5", "m", "LEFT"}, {"LMPOP", "1", "m", "LEFT", "COUNT", "0"}, {"LMPOP", "1", "m", "UP"},
		{"LMPOP", "1", "m", "LEFT", "COUNT"}, {"LMPOP", "2", "str", "m", "LEFT"}, {"LMPOP", "x", "m", "LEFT"},
		{"RPUSH", "r", "1", "2", "3", "4", "5", "6"},
		{"BLPOP", "nokey", "-1"}, {"BLPOP", "nokey", "x"}, {"BLPOP", "r", "0"}, {"BRPOP", "nokey", "r", "0.01"},
		{"BLMOVE", "r", "r2", "LEFT", "LEFT", "0.01"}, {"BRPOPLPUSH", "r", "r2", "0.01"}, {"BLMPOP", "0.01", "1", "r", "RIGHT", "COUNT", "5"},
		{"BLPOP", "str", "0.01"}, {"BLMOVE", "r2", "str", "LEFT", "LEFT", "0.01"}, {"BLPOP", "empty", "0.01"}, {"BLMPOP", "0.01", "1", "empty", "LEFT"},
		{"BLMOVE", "empty", "r", "LEFT", "LEFT", "0.01"},
		{"MULTI"}, {"BLPOP", "nokey", "0"}, {"BLMOVE", "nokey", "x", "LEFT", "LEFT", "0"}, {"BLMPOP", "0", "1", "nokey", "LEFT"},
		{"RPUSH", "tx", "a"}, {"BLPOP", "tx", "0"}, {"EXEC"},
		{"RPUSH", "c", "1", "2", "3", "4", "5", "6"}, {"COPY", "c", "c2"}, {"LRANGE", "c2", "0", "-1"}, {"RENAME", "c2", "c3"},
		{"LRANGE", "c3", "0", "-1"}, {"EXPIRE", "c3", "100"}, {"TTL", "c3"}, {"OBJECT", "ENCODING", "c3"}, {"DEL", "c", "c3"},
		{"SCAN", "0", "TYPE", "list", "MATCH", "m*", "COUNT", "1000"},
	}
	// A random workload on three keys.
	rng := rand.New(rand.NewPCG(7, 11))
	keys := []string{"x", "y", "z"}
	el := func() string {
		if rng.IntN(8) == 0 {
			return strings.Repeat("v", 100+rng.IntN(200))
		}
		return fmt.Sprint(rng.IntN(6))
	}
	idx := func() string { return fmt.Sprint(rng.IntN(12) - 6) }
	for range 400 {
		k, k2 := keys[rng.IntN(3)], keys[rng.IntN(3)]
		var cmd []string
		switch rng.IntN(14) {
		case 0:
			cmd = []string{"LPUSH", k, el(), el()}
		case 1:
			cmd = []string{"RPUSH", k, el()}
		case 2:
			cmd = []string{"LPOP", k}
		case 3:
			cmd = []string{"RPOP", k, fmt.Sprint(rng.IntN(3))}
		case 4:
			cmd = []string{"LSET", k, idx(), el()}
		case 5:
			cmd = []string{"LINSERT", k, []string{"BEFORE", "AFTER"}[rng.IntN(2)], el(), el()}
		case 6:
			cmd = []string{"LREM", k, fmt.Sprint(rng.IntN(5) - 2), el()}
		case 7:
			cmd = []string{"LTRIM", k, idx(), idx()}
		case 8:
			cmd = []string{"LMOVE", k, k2, []string{"LEFT", "RIGHT"}[rng.IntN(2)], []string{"LEFT", "RIGHT"}[rng.IntN(2)]}
		case 9:
			cmd = []string{"LPOS", k, el(), "RANK", []string{"1", "-1", "2"}[rng.IntN(3)], "COUNT", fmt.Sprint(rng.IntN(3))}
		case 10:
			cmd = []string{"LINDEX", k, idx()}
		case 11:
			cmd = []string{"LMPOP", "2", k, k2, "RIGHT", "COUNT", fmt.Sprint(1 + rng.IntN(3))}
		case 12:
			cmd = []string{"RPUSH", k, el(), el(), el(), el(), el()}
		default:
			cmd = []string{"LRANGE", k, idx(), idx()}
		}
		script = append(script, cmd, []string{"LRANGE", k, "0", "-1"}, []string{"LLEN", k2})
	}
	script = append(script, []string{"FLUSHALL"})
	// Redis gets the workload with its own default sizes.
	compareWithRedis(t, ts, redisAddr, script)
}

// TestBlockingOrder: clients blocked on a list are served in the order
// they blocked, one element each, when a push commits; a push inside
// MULTI wakes them only at EXEC; a timeout replies nil; a client that
// disconnects while blocked is no longer served (the element stays).
func TestBlockingOrder(t *testing.T) {
	ts := startServer(t, "")
	c, ic := ts.dial(), ts.dial()
	waitBlocked := func(n int) {
		t.Helper()
		waitBlockedClients(t, ic, n)
	}
	var bs []*rawConn
	for i := range 3 {
		b := ts.dial()
		b.send(encode("BLPOP", "q", "other", "0"))
		waitBlocked(i + 1)
		bs = append(bs, b)
	}
	if got := c.do("MULTI").String(); got != `+"OK"` {
		t.Fatal(got)
	}
	c.do("RPUSH", "q", "j0", "j1")
	c.do("RPUSH", "q", "j2", "j3")
	waitBlocked(3) // queued, not committed: nobody served
	if got := c.do("EXEC").String(); !strings.Contains(got, "4") {
		t.Fatalf("EXEC: %s", got)
	}
	for i, b := range bs {
		if got, want := b.read().String(), fmt.Sprintf(`[$"q" $"j%d"]`, i); got != want {
			t.Errorf("client %d blocked %d-th got %s, want %s", i, i, got, want)
		}
	}
	if got := c.do("LRANGE", "q", "0", "-1").String(); got != `[$"j3"]` {
		t.Errorf("left after serving three: %s", got)
	}
	// A timeout.
	b := ts.dial()
	if got := b.do("BRPOP", "empty", "0.05").String(); got != "(nil)" {
		t.Errorf("BRPOP timeout: %s", got)
	}
	// A disconnected client is unregistered and serves nothing.
	gone := ts.dial()
	gone.send(encode("BLMOVE", "src", "dst", "LEFT", "LEFT", "0"))
	waitBlocked(1)
	gone.Close()
	waitBlocked(0)
	c.do("RPUSH", "src", "kept")
	if got := c.do("LRANGE", "src", "0", "-1").String(); got != `[$"kept"]` {
		t.Errorf("after the blocked client left: src %s", got)
	}
	// BLMOVE chains: served before the pusher's reply.
	b1, b2 := ts.dial(), ts.dial()
	b1.send(encode("BLMOVE", "a", "b", "RIGHT", "LEFT", "0"))
	waitBlocked(1)
	b2.send(encode("BLMOVE", "b", "c", "LEFT", "RIGHT", "0"))
	waitBlocked(2)
	c.do("RPUSH", "a", "job")
	if got := c.do("LRANGE", "c", "0", "-1").String(); got != `[$"job"]` {
		t.Errorf("linked BLMOVEs: c holds %s", got)
	}
	b1.read()
	b2.read()
	// A push by a script wakes a waiter once the script has committed.
	sb := ts.dial()
	sb.send(encode("BRPOP", "s", "0"))
	waitBlocked(1)
	c.do("EVAL", "redis.call('rpush', KEYS[1], 'x') return 1", "1", "s")
	if got := sb.read().String(); got != `[$"s" $"x"]` {
		t.Errorf("woken by a script: %s", got)
	}
	// CLIENT UNBLOCK.
	u := ts.dial()
	id := u.do("CLIENT", "ID").str
	u.send(encode("BLPOP", "never", "0"))
	waitBlocked(1)
	if got := c.do("CLIENT", "UNBLOCK", id, "ERROR").String(); got != `:"1"` {
		t.Errorf("CLIENT UNBLOCK: %s", got)
	}
	if got := u.read(); !got.isError() || !strings.Contains(got.String(), "UNBLOCKED") {
		t.Errorf("unblocked client got %s", got)
	}
	if got := c.do("CLIENT", "UNBLOCK", id).String(); got != `:"0"` {
		t.Errorf("CLIENT UNBLOCK of a client not blocked: %s", got)
	}
}

// waitBlockedClients waits until INFO on ic shows n blocked clients.
func waitBlockedClients(t *testing.T, ic *rawConn, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		info := ic.do("INFO", "clients").String()
		if strings.Contains(info, fmt.Sprintf(`blocked_clients:%d\r`, n)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never %d blocked clients: %s", n, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
