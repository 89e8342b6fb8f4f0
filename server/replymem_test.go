package server

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// liveHeap is the heap in use after a collection: what the process holds.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// heldWhileStalled sends cmds on a new connection without reading the
// replies, waits until the server has done what it can (its heap stops
// changing), and returns how much more heap the process holds than before,
// then reads the n replies and returns them.
func heldWhileStalled(t *testing.T, ts *testServer, cmds []byte, n int) (int64, []reply) {
	t.Helper()
	before := liveHeap()
	c := ts.dial()
	c.send(cmds)
	// The server blocks once the socket's buffers are full; until then the
	// heap moves. Wait for three equal readings (or give up after 10 s:
	// the reading is then the most the server got to hold).
	var held, prev int64
	for same, deadline := 0, time.Now().Add(10*time.Second); same < 3 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		h := liveHeap() - before
		if same++; h-prev > 1<<20 || prev-h > 1<<20 {
			same = 0
		}
		held, prev = max(held, h), h
	}
	replies := make([]reply, n)
	for i := range replies {
		replies[i] = c.read()
	}
	return held, replies
}

// TestLargeRepliesBounded: a client that pipelines reads of 4 MiB values
// of different keys (or MGETs them) and does not read the replies makes
// the server hold a few replies, not the sixteen a pipeline window or an
// MGET chunk used to read at once (64 MiB), nor a copy of each; the
// replies then arrive whole and in order.
func TestLargeRepliesBounded(t *testing.T) {
	ts := startServer(t, "")
	c := ts.dial()
	const keys = 16
	vals := make([]string, keys)
	for i := range vals {
		vals[i] = string(randomBytes(uint64(i), 4<<20))
		if r := c.do("SET", fmt.Sprintf("big%d", i), vals[i]); r.str != "OK" {
			t.Fatal(r)
		}
	}
	if r := c.do("SET", "small", "s"); r.str != "OK" {
		t.Fatal(r)
	}
	// The keys read, in order, and the value each should return (nil:
	// none).
	var order []string
	want := map[string]*string{"small": new("s"), "nokey": nil}
	for i := range 3 * keys {
		k := fmt.Sprintf("big%d", i%keys)
		want[k] = &vals[i%keys]
		switch {
		case i%7 == 6:
			k = "small"
		case i == 3*keys-1:
			k = "nokey"
		}
		order = append(order, k)
	}
	check := func(what string, i int, r reply) {
		t.Helper()
		switch w := want[order[i]]; {
		case w == nil && !r.null, w != nil && r.str != *w:
			t.Fatalf("%s: reply %d (%s): %d bytes, null %v", what, i, order[i], len(r.str), r.null)
		}
	}
	// A window of 16 or a chunk of 16 holds 64 MiB; within the budget,
	// about 16 MiB (4 replies) and the one being sent.
	const limit = 40 << 20

	var pipe []byte
	for _, k := range order {
		pipe = append(pipe, encode("GET", k)...)
	}
	held, replies := heldWhileStalled(t, ts, pipe, len(order))
	t.Logf("pipelined GETs: %d MiB held while the client did not read", held>>20)
	if held > limit {
		t.Errorf("the server held %d MiB for a client that did not read its pipelined GETs of 4 MiB values", held>>20)
	}
	for i, r := range replies {
		check("GET", i, r)
	}

	held, replies = heldWhileStalled(t, ts, encode(append([]string{"MGET"}, order...)...), 1)
	t.Logf("MGET: %d MiB held while the client did not read", held>>20)
	if held > limit {
		t.Errorf("the server held %d MiB for a client that did not read an MGET of 4 MiB values", held>>20)
	}
	if len(replies[0].elems) != len(order) {
		t.Fatalf("MGET: %d elements, want %d", len(replies[0].elems), len(order))
	}
	for i, e := range replies[0].elems {
		check("MGET", i, e)
	}
}

// TestLargeRepliesEveryPath: a value past the size that is sent from the
// value itself comes back whole through every way a reply is made:
// written through, collected in a concurrent run, inside EXEC, in RESP3,
// after CLIENT REPLY OFF, mixed with small replies in one pipeline.
func TestLargeRepliesEveryPath(t *testing.T) {
	ts := startServer(t, "")
	c := ts.dial()
	vals := map[string]string{
		"edge": string(randomBytes(3, bigBulk)),
		"less": string(randomBytes(4, bigBulk-1)),
		"huge": string(randomBytes(5, 3<<20)),
	}
	for k, v := range vals {
		if r := c.do("SET", k, v); r.str != "OK" {
			t.Fatal(r)
		}
	}
	script := []struct {
		cmd  []string
		want string
	}{
		{[]string{"GET", "edge"}, vals["edge"]},
		{[]string{"GET", "less"}, vals["less"]},
		{[]string{"GET", "huge"}, vals["huge"]},
		{[]string{"GETRANGE", "huge", "1", "-2"}, vals["huge"][1 : len(vals["huge"])-1]},
		{[]string{"GET", "missing"}, "<nil>"},
		{[]string{"CLIENT", "REPLY", "OFF"}, ""},
		{[]string{"GET", "huge"}, ""},
		{[]string{"CLIENT", "REPLY", "ON"}, "OK"},
		{[]string{"MULTI"}, "OK"},
		{[]string{"GET", "huge"}, "QUEUED"},
		{[]string{"GET", "edge"}, "QUEUED"},
		{[]string{"EXEC"}, "[" + vals["huge"] + " " + vals["edge"] + "]"},
		{[]string{"MGET", "less", "huge", "missing"}, "[" + vals["less"] + " " + vals["huge"] + " <nil>]"},
		{[]string{"HELLO", "3"}, ""},
		{[]string{"GET", "huge"}, vals["huge"]},
		{[]string{"GET", "edge"}, vals["edge"]},
		{[]string{"PING"}, "PONG"},
	}
	var pipe []byte
	for _, s := range script {
		pipe = append(pipe, encode(s.cmd...)...)
	}
	c.send(pipe)
	for _, s := range script {
		if s.want == "" && s.cmd[0] != "HELLO" {
			continue // no reply
		}
		r := c.read()
		if s.cmd[0] == "HELLO" {
			continue
		}
		if got := flat(r); got != s.want {
			t.Errorf("%s: %d bytes (%q…), want %d", strings.Join(s.cmd, " "), len(got), got[:min(len(got), 20)], len(s.want))
		}
	}
	if !bytes.Equal([]byte(flat(c.do("GET", "huge"))), []byte(vals["huge"])) {
		t.Error("GET huge after the pipeline")
	}
}

// TestLargeReplyCut: clients that go away in the middle of large replies
// (pipelined GETs of different keys, an MGET), reading part of the first
// or nothing, leave the server serving, with no connection left behind.
func TestLargeReplyCut(t *testing.T) {
	ts := startServer(t, "")
	keep := string(randomBytes(9, 2<<20))
	c := ts.dial()
	for i := range 4 {
		if r := c.do("SET", fmt.Sprintf("cut%d", i), keep); r.str != "OK" {
			t.Fatal(r)
		}
	}
	if r := c.do("SET", "keep", keep); r.str != "OK" {
		t.Fatal(r)
	}
	c.Close()
	for round := range 6 {
		var pipe []byte
		for i := range 12 {
			pipe = append(pipe, encode("GET", fmt.Sprintf("cut%d", i%4))...)
		}
		if round%2 == 1 {
			pipe = encode("MGET", "cut0", "cut1", "cut2", "cut3", "cut0", "cut1")
		}
		d := ts.dial()
		d.send(pipe)
		if round >= 2 {
			buf := make([]byte, 100<<10*round)
			d.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(d.r, buf); err != nil {
				t.Fatal(err)
			}
		}
		if round%3 == 0 {
			d.Conn.(*net.TCPConn).SetLinger(0) // a reset rather than a close
		}
		d.Close()
	}
	open := func() int {
		ts.srv.mu.Lock()
		defer ts.srv.mu.Unlock()
		return len(ts.srv.conns)
	}
	for deadline := time.Now().Add(20 * time.Second); open() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := open(); n > 0 {
		t.Errorf("%d connections still open", n)
	}
	ts.healthy(keep)
}

// TestLargeArguments: values from asideFrom bytes on (held aside, see
// guard) are stored whole through a pipeline of concurrent SETs, MSET,
// MULTI/EXEC and APPEND, next to values just under it; a client that goes
// away in the middle of one leaves nothing held.
func TestLargeArguments(t *testing.T) {
	ts := startServer(t, "")
	vals := map[string]string{
		"a": string(randomBytes(11, 2<<20+3)),
		"b": string(randomBytes(12, asideFrom)),
		"c": string(randomBytes(13, asideFrom-1)),
		"d": string(randomBytes(14, 3<<20)),
		"e": string(randomBytes(15, asideFrom+1)),
	}
	script := [][]string{
		{"SET", "a", vals["a"]}, {"SET", "b", vals["b"]}, {"SET", "c", vals["c"]},
		{"MULTI"}, {"SET", "d", vals["d"][:1<<20]}, {"APPEND", "d", vals["d"][1<<20:]}, {"EXEC"},
		{"MSET", "e", vals["e"], "f", vals["a"]},
	}
	c := ts.dial()
	var pipe []byte
	for _, cmd := range script {
		pipe = append(pipe, encode(cmd...)...)
	}
	c.send(pipe)
	for _, cmd := range script {
		if r := c.read(); r.isError() {
			t.Fatalf("%s %s: %v", cmd[0], cmd[1%len(cmd)], r)
		}
	}
	vals["f"] = vals["a"]
	for k, v := range vals {
		if r := c.do("GET", k); r.str != v {
			t.Errorf("GET %s: %d bytes, want %d", k, len(r.str), len(v))
		}
	}
	d := ts.dial()
	d.send([]byte(fmt.Sprintf("*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$%d\r\n", 8<<20)))
	d.send(randomBytes(16, 3<<20))
	d.Close()
	for deadline := time.Now().Add(10 * time.Second); ts.srv.inputHeld.Load() != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := ts.srv.inputHeld.Load(); n != 0 {
		t.Errorf("%d bytes of input counted after the client went away", n)
	}
	if r := c.do("EXISTS", "x"); r.str != "0" {
		t.Errorf("EXISTS x after a half-sent SET: %v", r)
	}
}
