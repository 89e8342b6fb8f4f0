package server

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// healthy checks that the server still serves a new client and that the
// value stored under "keep" is intact.
func (ts *testServer) healthy(keep string) {
	ts.t.Helper()
	c := ts.dial()
	if r := c.do("PING"); r.str != "PONG" {
		ts.t.Fatalf("PING: %v", r)
	}
	if r := c.do("GET", "keep"); r.str != keep {
		ts.t.Fatalf("GET keep: %d bytes, want the %d stored", len(r.str), len(keep))
	}
	c.Close()
}

// TestMalformedRESP: each kind of malformed input gets a protocol error
// (after the replies to the commands before it) and a clean close, or
// just a close; the server keeps serving and the data is intact.
func TestMalformedRESP(t *testing.T) {
	ts := startServer(t, "")
	keep := string(randomBytes(1, 50<<10))
	if r := ts.dial().do("SET", "keep", keep); r.str != "OK" {
		t.Fatal(r)
	}
	for _, tc := range []struct {
		name, in string
		want     []string // replies in order; the last one may be "EOF"
	}{
		{"negative bulk length", "*2\r\n$3\r\nGET\r\n$-5\r\n", []string{"-ERR Protocol error: invalid bulk length"}},
		{"huge multibulk count", "*99999999999\r\n", []string{"-ERR Protocol error: invalid multibulk length"}},
		{"no $", "*1\r\nx", []string{"-ERR Protocol error: expected '$', got 'x'"}},
		{"bulk without CRLF", "*1\r\n$3\r\nabcd\r\n", []string{"-ERR Protocol error: invalid bulk length"}},
		// redcon alone indexes out of range on this length and panics.
		{"bulk length near MaxInt64", "*1\r\n$9223372036854775800\r\n", []string{"-ERR Protocol error: invalid bulk length"}},
		{"bulk length overflowing int64", "*1\r\n$99999999999999999999\r\n", []string{"-ERR Protocol error: invalid bulk length"}},
		// Past Redis's proto-max-bulk-len (512 MiB), as Redis.
		{"bulk length over 512 MiB", "*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n", []string{"-ERR Protocol error: invalid bulk length"}},
		{"unbalanced quotes", "SET \"a b\r\n", []string{"-ERR Protocol error: unbalanced quotes in request"}},
		{"inline too long", strings.Repeat("a", 70<<10), []string{"-ERR Protocol error: too big inline request"}},
		{"replies before the error", "PING\r\n" + string(encode("SET", "x", "y")) + "*1\r\nx",
			[]string{"+PONG", "+OK", "-ERR Protocol error: expected '$', got 'x'"}},
		{"empty multibulks ignored", "*0\r\n*-1\r\nPING\r\n", []string{"+PONG", "open"}},
		{"inline $ is a command", "$5\r\nabc", []string{"-ERR unknown command '$5', with args beginning with: ", "open"}},
		{"binary junk", strings.Repeat("\x00\xff", 1000), []string{"open"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ts.dial()
			c.send([]byte(tc.in))
			for _, want := range tc.want {
				if want == "open" {
					// No reply owed: the server waits for more.
					c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
					if n, err := c.r.Read(make([]byte, 1)); n > 0 || err == io.EOF {
						t.Errorf("the server sent more or closed: %d, %v", n, err)
					}
					c.Close()
					break
				}
				r := c.read()
				if got := string(r.kind) + r.str; got != want {
					t.Errorf("reply %v, want %s", r, want)
				}
			}
			if tc.want[len(tc.want)-1] != "open" {
				c.expectEOF()
			}
			ts.healthy(keep)
		})
	}
}

// TestHugeBulk: a bulk header announcing 256 MiB, over the value limit
// (but under Redis's 512 MiB protocol limit), makes the server neither
// allocate it nor keep what arrives; the command then fails with "value
// too large" and the connection goes on.
func TestHugeBulk(t *testing.T) {
	ts := startServer(t, memHybrid+"max_value: 1MiB\n")
	keep := "safe"
	if r := ts.dial().do("SET", "keep", keep); r.str != "OK" {
		t.Fatal(r)
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	c := ts.dial()
	before := heap()
	const sent = 64 << 20
	c.send([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$268435456\r\n"))
	chunk := bytes.Repeat([]byte("v"), 1<<20)
	for range sent / len(chunk) {
		c.send(chunk)
	}
	if after := heap(); after > before+16<<20 {
		t.Errorf("heap grew from %d to %d MiB while %d MiB of an oversized bulk arrived", before>>20, after>>20, sent>>20)
	}
	// Send the rest; the command fails and the connection goes on.
	rest := 1<<28 - sent
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for rest > 0 {
			n := min(rest, len(chunk))
			if _, err := c.Write(chunk[:n]); err != nil {
				t.Error(err)
				return
			}
			rest -= n
		}
		c.Write([]byte("\r\n"))
	}()
	r := c.read()
	wg.Wait()
	if !r.isError() || !strings.HasPrefix(r.str, "ERR value too large: an argument of 268435456 bytes") {
		t.Errorf("SET of a 256 MiB value: %v", r)
	}
	if r := c.do("EXISTS", "k"); r.str != "0" {
		t.Errorf("EXISTS k = %v", r)
	}
	if after := heap(); after > before+16<<20 {
		t.Errorf("heap grew from %d to %d MiB for a dropped 256 MiB bulk", before>>20, after>>20)
	}
	// A client that announces a huge bulk and goes away.
	d := ts.dial()
	d.send([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$400000000\r\n"))
	d.send(chunk)
	d.Close()
	ts.healthy(keep)
}

// TestDisconnectMidPipeline: clients that send a pipeline of stores and
// close without reading, cut anywhere (even inside a command): the server
// goes on, no connection is left behind, and every key holds its whole
// value or nothing.
func TestDisconnectMidPipeline(t *testing.T) {
	ts := startServer(t, "")
	keep := string(randomBytes(2, 40<<10))
	k := ts.dial()
	if r := k.do("SET", "keep", keep); r.str != "OK" {
		t.Fatal(r)
	}
	k.Close()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	value := func(i int) []byte { return randomBytes(uint64(1000+i), 1000+i%3*10000) }
	for round := range 10 {
		var pipe []byte
		for i := range 100 {
			pipe = append(pipe, encode("SET", fmt.Sprintf("mid%d", i), string(value(i)))...)
		}
		pipe = pipe[:rng.IntN(len(pipe))]
		nc, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(pipe)
		if round%2 == 0 {
			nc.(*net.TCPConn).SetLinger(0) // a reset rather than a close
		}
		nc.Close()
	}
	// Every connection ends.
	deadline := time.Now().Add(20 * time.Second)
	for {
		ts.srv.mu.Lock()
		n := len(ts.srv.conns)
		ts.srv.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := ts.dial()
	for i := range 100 {
		r := c.do("GET", fmt.Sprintf("mid%d", i))
		if !r.null && r.str != string(value(i)) {
			t.Errorf("mid%d holds %d bytes, not its %d-byte value", i, len(r.str), len(value(i)))
		}
	}
	ts.healthy(keep)
}

// TestManyConnections: 1,000 clients connected at once, all served.
func TestManyConnections(t *testing.T) {
	ts := startServer(t, "")
	const n = 1000
	conns := make([]*rawConn, n)
	for i := range conns {
		conns[i] = ts.dial()
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, v := fmt.Sprintf("conn%d", i), fmt.Sprintf("value%d", i)
			c.send(append(encode("SET", k, v), encode("GET", k)...))
			c.SetReadDeadline(time.Now().Add(60 * time.Second))
			r1, err1 := readReply(c.r)
			r2, err2 := readReply(c.r)
			if err1 != nil || err2 != nil || r1.str != "OK" || r2.str != v {
				errs <- fmt.Errorf("conn %d: %v %v, %v %v", i, r1, err1, r2, err2)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	info := ts.dial().do("INFO", "clients")
	if !strings.Contains(info.str, fmt.Sprintf("connected_clients:%d\r\n", n+1)) {
		t.Errorf("INFO clients with %d connections:\n%s", n+1, info.str)
	}
	for _, c := range conns {
		c.Close()
	}
	if r := ts.dial().do("DBSIZE"); r.str != fmt.Sprint(n) {
		t.Errorf("DBSIZE = %v", r)
	}
}

// TestInputLimitAcrossClients: clients that each hold an unfinished large
// SET (header sent, value half sent) cannot make the server hold more
// than its input limit: the connection that would pass it ends with a
// protocol error, the others finish, and the bytes held go back to zero
// once the commands are done or their connections gone.
func TestInputLimitAcrossClients(t *testing.T) {
	const value = 1<<20 - 64 // under max_value less the keyspace's header
	ts := startServer(t, memHybrid+"max_value: 1MiB\n", WithMaxRequest(1<<20+64<<10), WithMaxInput(3*value))
	half := bytes.Repeat([]byte("v"), value/2)
	header := []byte(fmt.Sprintf("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n", value))
	var held []*rawConn
	for range 5 {
		c := ts.dial()
		c.send(header)
		c.send(half)
		held = append(held, c)
	}
	// Finish each value: a refused connection answers with the protocol
	// error (or is already closed).
	refused := 0
	for i, c := range held {
		if _, err := c.Write(append(bytes.Clone(half), '\r', '\n')); err != nil {
			refused++
			continue
		}
		r := c.read()
		switch {
		case r.str == "OK":
		case r.isError() && strings.Contains(r.str, "unfinished commands across its clients"):
			refused++
		default:
			t.Errorf("connection %d: %v", i, r)
		}
	}
	if refused == 0 {
		t.Errorf("5 clients held 5 MiB of unfinished commands under a 3 MiB input limit, none refused")
	}
	for _, c := range held {
		c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for ts.srv.inputHeld.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := ts.srv.inputHeld.Load(); n != 0 {
		t.Errorf("%d bytes of input still counted after every connection closed", n)
	}
	ts.healthy("")
}
