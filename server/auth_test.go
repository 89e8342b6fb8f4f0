package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/array"
)

// TestAuth: with requirepass and ACL users, a connection runs nothing
// but AUTH, HELLO and QUIT before authenticating (NOAUTH), a wrong
// password changes nothing (WRONGPASS), a data user gets NOPERM for
// admin and destructive commands and runs data commands, an admin user
// runs everything.
func TestAuth(t *testing.T) {
	ts := startServer(t, "", WithAuth("s3cret", User{Name: "app", Password: "app-pw"}, User{Name: "ops", Password: "ops-pw", Admin: true}))
	c := ts.dial()
	for _, cmd := range [][]string{{"GET", "a"}, {"PING"}, {"SET", "a", "b"}, {"KVARRAY.STATUS"}} {
		if r := c.do(cmd...); r.line() != "-NOAUTH Authentication required." {
			t.Errorf("%v before AUTH: %s", cmd, r)
		}
	}
	wrong := "-WRONGPASS invalid username-password pair or user is disabled."
	for _, cmd := range [][]string{{"AUTH", "nope"}, {"AUTH", "default", "nope"}, {"AUTH", "app", "s3cret"}, {"AUTH", "nobody", "app-pw"}} {
		if r := c.do(cmd...); r.line() != wrong {
			t.Errorf("%v: %s, want WRONGPASS", cmd, r)
		}
	}
	if r := c.do("GET", "a"); !strings.HasPrefix(r.line(), "-NOAUTH") {
		t.Errorf("after failed AUTHs, GET: %s", r)
	}
	if r := c.do("AUTH", "s3cret"); r.line() != "+OK" {
		t.Fatalf("AUTH s3cret: %s", r)
	}
	if r := c.do("SET", "a", "b"); r.line() != "+OK" {
		t.Errorf("default user SET: %s", r)
	}
	if r := c.do("KVARRAY.STATUS"); r.isError() {
		t.Errorf("default user KVARRAY.STATUS: %s", r)
	}

	// A data user.
	d := ts.dial()
	if r := d.do("AUTH", "app", "app-pw"); r.line() != "+OK" {
		t.Fatalf("AUTH app: %s", r)
	}
	for _, cmd := range [][]string{{"SET", "k", "v"}, {"GET", "k"}, {"MSET", "x", "1", "y", "2"}, {"DEL", "x"}, {"KVARRAY.SET", "z", "v", "replication"}, {"CONFIG", "GET", "maxmemory"}, {"PING"}} {
		if r := d.do(cmd...); r.isError() {
			t.Errorf("data user %v: %s", cmd, r)
		}
	}
	for _, cmd := range [][]string{{"KVARRAY.STATUS"}, {"KVARRAY.SCRUB"}, {"KVARRAY.REBUILD", "1"}, {"KVARRAY.FAIL", "1"}, {"KVARRAY.PROGRESS"}, {"CONFIG", "SET", "maxmemory", "1"}} {
		r := d.do(cmd...)
		if !strings.HasPrefix(r.line(), "-NOPERM this user has no permissions to run the '") {
			t.Errorf("data user %v: %s, want NOPERM", cmd, r)
		}
	}
	if r := d.do("AUTH", "ops", "wrong"); r.line() != wrong {
		t.Errorf("AUTH ops wrong: %s", r)
	}
	if r := d.do("KVARRAY.STATUS"); !strings.HasPrefix(r.line(), "-NOPERM") {
		t.Errorf("a failed AUTH changed the user: %s", r)
	}
	if r := d.do("AUTH", "ops", "ops-pw"); r.line() != "+OK" {
		t.Fatalf("AUTH ops: %s", r)
	}
	if r := d.do("KVARRAY.STATUS"); r.isError() {
		t.Errorf("admin user KVARRAY.STATUS: %s", r)
	}

	// go-redis with a username and password, and with the wrong one.
	ctx := context.Background()
	good := ts.client(func(o *redis.Options) { o.Username, o.Password = "app", "app-pw" })
	if v, err := good.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Errorf("go-redis as app: GET k = %q, %v", v, err)
	}
	if err := good.Do(ctx, "kvarray.status").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("go-redis as app: KVARRAY.STATUS: %v", err)
	}
	bad := ts.client(func(o *redis.Options) { o.Password = "wrong" })
	if err := bad.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("go-redis with a wrong password: %v", err)
	}
}

// TestAuthNoPassword: without requirepass every connection is the default
// user, as in Redis: AUTH <password> is an error saying so, AUTH default
// <anything> is accepted, and ACL users still authenticate.
func TestAuthNoPassword(t *testing.T) {
	ts := startServer(t, "", WithAuth("", User{Name: "app", Password: "pw"}))
	c := ts.dial()
	if r := c.do("KVARRAY.STATUS"); r.isError() {
		t.Errorf("no requirepass: KVARRAY.STATUS: %s", r)
	}
	if r := c.do("AUTH", "x"); !strings.HasPrefix(r.line(), "-ERR AUTH <password> called without any password configured") {
		t.Errorf("AUTH x: %s", r)
	}
	if r := c.do("AUTH", "default", "anything"); r.line() != "+OK" {
		t.Errorf("AUTH default anything: %s", r)
	}
	if r := c.do("AUTH", "app", "pw"); r.line() != "+OK" {
		t.Errorf("AUTH app pw: %s", r)
	}
	if r := c.do("KVARRAY.STATUS"); !strings.HasPrefix(r.line(), "-NOPERM") {
		t.Errorf("as app: %s", r)
	}
}

// TestServeAdmin: connections from the admin listener are the default
// user, authenticated, whatever requirepass says.
func TestServeAdmin(t *testing.T) {
	ts := startServer(t, "", WithAuth("s3cret"))
	sock := t.TempDir() + "/admin.sock"
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ts.srv.ServeAdmin(l) }()
	cl := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, MaxRetries: -1})
	defer cl.Close()
	ctx := context.Background()
	if err := cl.Do(ctx, "kvarray.status").Err(); err != nil {
		t.Errorf("admin socket: KVARRAY.STATUS: %v", err)
	}
	if err := ts.client().Do(ctx, "kvarray.status").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Errorf("TCP without AUTH: %v", err)
	}
	ts.stop()
	select {
	case err := <-done:
		if !errors.Is(err, ErrServerClosed) {
			t.Errorf("ServeAdmin returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("ServeAdmin did not return after Shutdown")
	}
}

// line is a simple reply as it is on the wire, without CRLF.
func (r reply) line() string { return string(r.kind) + r.str }

// TestReplaceSpecAdminSocketOnly: no network client can make the server
// open a device spec of its choosing: KVARRAY.REPLACE with a SPEC is taken
// from the admin socket only; without one, the config's spec is used.
func TestReplaceSpecAdminSocketOnly(t *testing.T) {
	var got []string
	ts := startServer(t, "", WithReplacer(func(_ context.Context, _ *array.Array, dev int, spec string, force bool) (string, error) {
		got = append(got, fmt.Sprintf("%d %q %v", dev, spec, force))
		return "replaced\n", nil
	}))
	c := ts.dial()
	if r := c.do("KVARRAY.REPLACE", "1", "pebble:/etc", "FORCE"); !strings.Contains(r.line(), "admin socket only") {
		t.Errorf("KVARRAY.REPLACE with a spec over TCP: %s", r)
	}
	if r := c.do("KVARRAY.REPLACE", "1", "FORCE"); r.line() != "$replaced\n" {
		t.Errorf("KVARRAY.REPLACE 1 FORCE over TCP: %s", r)
	}
	sock := t.TempDir() + "/admin.sock"
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go ts.srv.ServeAdmin(l)
	cl := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, MaxRetries: -1})
	defer cl.Close()
	if err := cl.Do(context.Background(), "kvarray.replace", 2, "mem:new").Err(); err != nil {
		t.Errorf("KVARRAY.REPLACE with a spec on the admin socket: %v", err)
	}
	if want := []string{`1 "" true`, `2 "mem:new" false`}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("replacer calls %v, want %v", got, want)
	}
}
