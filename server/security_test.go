package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// forbiddenForData lists, from the command table itself, a call of every
// command a data user may not run (with enough arguments for its arity):
// what the two roles refused before the ACL, which the data preset must
// still refuse,
// so that a command added later with the admin flag is covered too.
func forbiddenForData(t *testing.T) [][]string {
	var out [][]string
	for _, cmd := range commands {
		args := []string{cmd.name}
		if cmd.name == "config" {
			for _, sub := range []string{"SET", "REWRITE", "RESETSTAT"} {
				out = append(out, []string{"config", sub, "maxclients", "1"}[:map[string]int{"SET": 4, "REWRITE": 2, "RESETSTAT": 2}[sub]])
			}
			continue
		}
		// Containers whose every subcommand is admin: one of them (an
		// unknown subcommand is refused as unknown, before the ACL).
		if sub, ok := map[string]string{"slowlog": "reset", "latency": "reset", "module": "list"}[cmd.name]; ok {
			out = append(out, []string{cmd.name, sub})
			continue
		}
		n := cmd.arity
		if n < 0 {
			n = -n
		}
		for len(args) < n {
			args = append(args, "1")
		}
		if slices.Contains(cmd.flags, "admin") || slices.Contains([]string{"flushall", "flushdb", "shutdown", "debug", "swapdb"}, cmd.name) {
			out = append(out, args)
		}
	}
	if len(out) < 10 {
		t.Fatalf("only %d forbidden commands found in the table: %v", len(out), out)
	}
	return out
}

// TestDataUserEveryRoute: a data user is refused every admin and
// destructive command by every route: sent directly (NOPERM), queued in
// MULTI (NOPERM at queue time, then EXECABORT, nothing run), and queued
// by an admin connection that then becomes the data user inside the
// transaction (refused when EXEC runs it). The checks are on effects too:
// the key the FLUSHes would remove is still there, maxclients unchanged.
func TestDataUserEveryRoute(t *testing.T) {
	ts := startServer(t, "", WithAuth("s3cret", User{Name: "app", Password: "app-pw"}, User{Name: "ops", Password: "ops-pw", Admin: true}))
	admin := ts.dial()
	if r := admin.do("AUTH", "ops", "ops-pw"); r.line() != "+OK" {
		t.Fatalf("AUTH ops: %s", r)
	}
	if r := admin.do("SET", "keep", "v"); r.line() != "+OK" {
		t.Fatalf("SET keep: %s", r)
	}
	d := ts.dial()
	if r := d.do("AUTH", "app", "app-pw"); r.line() != "+OK" {
		t.Fatalf("AUTH app: %s", r)
	}
	noperm := "-NOPERM this user has no permissions to run the '"
	for _, cmd := range forbiddenForData(t) {
		if r := d.do(cmd...); !strings.HasPrefix(r.line(), noperm) {
			t.Errorf("direct %v: %s, want NOPERM", cmd, r)
		}
		if r := d.do("MULTI"); r.line() != "+OK" {
			t.Fatalf("MULTI: %s", r)
		}
		if r := d.do(cmd...); !strings.HasPrefix(r.line(), noperm) {
			t.Errorf("queued %v: %s, want NOPERM at queue time", cmd, r)
		}
		if r := d.do("EXEC"); r.line() != "-EXECABORT Transaction discarded because of previous errors." {
			t.Errorf("EXEC after queued %v: %s, want EXECABORT", cmd, r)
		}
	}
	// The sequence, checked by its effects.
	d.do("MULTI")
	for _, cmd := range [][]string{{"FLUSHALL"}, {"CONFIG", "SET", "maxclients", "1"}, {"KVARRAY.STATUS"}, {"SET", "x", "1"}} {
		d.do(cmd...)
	}
	if r := d.do("EXEC"); !strings.HasPrefix(r.line(), "-EXECABORT") {
		t.Errorf("EXEC: %s", r)
	}
	if r := admin.do("GET", "keep"); r.line() != "$v" {
		t.Errorf("after the data user's transaction, GET keep: %s (flushed?)", r)
	}
	if r := admin.do("CONFIG", "GET", "maxclients"); len(r.elems) != 2 || r.elems[1].str == "1" {
		t.Errorf("after the data user's transaction, maxclients: %s", r)
	}
	if r := admin.do("EXISTS", "x"); r.line() != ":0" {
		t.Errorf("the aborted transaction's SET ran: EXISTS x = %s", r)
	}

	// Queued as the admin, run as the data user: EXEC checks again.
	admin.do("MULTI")
	for _, cmd := range [][]string{{"AUTH", "app", "app-pw"}, {"FLUSHALL"}, {"SET", "y", "1"}} {
		if r := admin.do(cmd...); r.line() != "+QUEUED" {
			t.Fatalf("queue %v: %s", cmd, r)
		}
	}
	r := admin.do("EXEC")
	if len(r.elems) != 3 || r.elems[0].line() != "+OK" || !strings.HasPrefix(r.elems[1].line(), "-NOPERM ACLs rules changed") || r.elems[2].line() != "+OK" {
		t.Errorf("EXEC of AUTH app, FLUSHALL, SET: %s", r)
	}
	if r := d.do("GET", "keep"); r.line() != "$v" {
		t.Errorf("FLUSHALL ran inside EXEC as the data user: GET keep = %s", r)
	}
}

// TestUnauthenticatedInput: before AUTH a client may send only Redis 7's
// small commands (at most 10 arguments, bulks of at most 16 KiB); more
// ends its connection with Redis's protocol errors. Connections that never
// authenticate announce large bulks and stall: they no longer hold the
// input budget that an authenticated client's large SET needs. And an
// unauthenticated connection that sends nothing is closed after the
// auth timeout.
func TestUnauthenticatedInput(t *testing.T) {
	const budget = 8 << 20
	ts := startServer(t, "", WithAuth("s3cret"), WithMaxBulk(4<<20), WithMaxRequest(5<<20), WithMaxInput(budget),
		WithAuthTimeout(time.Second))

	c := ts.dial()
	c.send([]byte("*11\r\n"))
	if r := c.read(); r.line() != "-ERR Protocol error: unauthenticated multibulk length" {
		t.Errorf("11 arguments before AUTH: %s", r)
	}
	c.expectEOF()
	c = ts.dial()
	c.send([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$16385\r\n"))
	if r := c.read(); r.line() != "-ERR Protocol error: unauthenticated bulk length" {
		t.Errorf("a 16385-byte bulk before AUTH: %s", r)
	}
	c.expectEOF()

	// The case: unauthenticated connections announce bulks that
	// would take nearly the whole budget and stall.
	var stalled []net.Conn
	for range 2 {
		nc, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		fmt.Fprintf(nc, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n", budget/2-1000)
		nc.Write(bytes.Repeat([]byte("x"), 64<<10))
		stalled = append(stalled, nc)
	}
	// Many small stalled ones: they fill the unauthenticated budget, not
	// the shared one.
	for range 12 {
		nc, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		fmt.Fprintf(nc, "*10\r\n$3\r\nSET\r\n")
		for range 8 {
			fmt.Fprintf(nc, "$16384\r\n%s\r\n", bytes.Repeat([]byte("y"), 16384))
		}
		fmt.Fprintf(nc, "$16384\r\nzz")
		stalled = append(stalled, nc)
	}
	time.Sleep(100 * time.Millisecond)
	cl := ts.client(func(o *redis.Options) { o.Password = "s3cret" })
	big := strings.Repeat("v", 3<<20)
	ctx := context.Background()
	if err := cl.Set(ctx, "big", big, 0).Err(); err != nil {
		t.Fatalf("an authenticated 3 MiB SET while unauthenticated connections stall: %v", err)
	}
	if v, err := cl.Get(ctx, "big").Result(); err != nil || v != big {
		t.Errorf("GET big: %d bytes, %v", len(v), err)
	}
	// The stalled connections end on their own: the first two at once
	// (bulk length), the rest at the auth timeout.
	for i, nc := range stalled {
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		// A close with bytes unread is a reset: closed all the same.
		if _, err := io.ReadAll(nc); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("stalled connection %d still open after the auth timeout: %v", i, err)
		}
	}
}

// TestHelloBeforeAuth: HELLO without AUTH answers NOAUTH when a password
// is required, as Redis 7 does (the server map only to authenticated
// clients); HELLO 3 AUTH authenticates and switches protocol at once.
func TestHelloBeforeAuth(t *testing.T) {
	ts := startServer(t, "", WithAuth("s3cret"))
	c := ts.dial()
	for _, cmd := range [][]string{{"HELLO"}, {"HELLO", "3"}, {"HELLO", "3", "SETNAME", "x"}} {
		if r := c.do(cmd...); !strings.HasPrefix(r.line(), "-NOAUTH HELLO must be called with the client already authenticated") {
			t.Errorf("%v before AUTH: %s", cmd, r)
		}
	}
	if r := c.do("CLIENT", "GETNAME"); !strings.HasPrefix(r.line(), "-NOAUTH") {
		t.Errorf("CLIENT GETNAME: %s", r)
	}
	if r := c.do("HELLO", "3", "AUTH", "default", "s3cret"); r.kind != '%' {
		t.Errorf("HELLO 3 AUTH: %s, want a map", r)
	}
	if r := c.do("HELLO"); r.kind != '%' {
		t.Errorf("HELLO once authenticated: %s", r)
	}
}

// TestDataUserClientKillAndSwapDB: a data user kills only its own
// connections (not the admin's), and SWAPDB is refused to it; CLIENT KILL
// USER kills the named user's connections only.
func TestDataUserClientKillAndSwapDB(t *testing.T) {
	ts := startServer(t, "", WithAuth("s3cret", User{Name: "app", Password: "app-pw"}))
	admin := ts.dial()
	admin.do("AUTH", "s3cret")
	adminID := admin.do("CLIENT", "ID").str
	d := ts.dial()
	d.do("AUTH", "app", "app-pw")
	d2 := ts.dial()
	d2.do("AUTH", "app", "app-pw")
	d2ID := d2.do("CLIENT", "ID").str

	if r := d.do("CLIENT", "KILL", "ID", adminID); r.line() != ":0" {
		t.Errorf("data user CLIENT KILL ID <admin>: %s, want :0", r)
	}
	if r := d.do("CLIENT", "KILL", "USER", "default"); r.line() != ":0" {
		t.Errorf("data user CLIENT KILL USER default: %s, want :0", r)
	}
	if r := admin.do("PING"); r.line() != "+PONG" {
		t.Errorf("the admin's connection after the data user's kills: %s", r)
	}
	if r := d.do("SWAPDB", "0", "1"); !strings.HasPrefix(r.line(), "-NOPERM this user has no permissions to run the 'swapdb' command") {
		t.Errorf("data user SWAPDB: %s", r)
	}
	if r := d.do("CLIENT", "KILL", "ID", d2ID); r.line() != ":1" {
		t.Errorf("data user CLIENT KILL of its own other connection: %s", r)
	}
	d2.expectEOF()
	if r := admin.do("CLIENT", "KILL", "USER", "app"); r.line() != ":1" {
		t.Errorf("admin CLIENT KILL USER app: %s, want :1", r)
	}
	d.expectEOF()
}
