package server

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/device/redis/redistest"
	"github.com/kvarray/kvarray/internal/rdb/rdbtest"
)

// migrateAll moves every key of snap from the server at from to the one
// at to with one MIGRATE … KEYS per database, sent to from.
func migrateAll(t *testing.T, snap rdbtest.Snapshot, from, to string, opts ...any) {
	t.Helper()
	host, port, _ := net.SplitHostPort(to)
	for db, keys := range snap {
		args := append([]any{"MIGRATE", host, port, "", db, 10000}, opts...)
		args = append(args, "KEYS")
		for k := range keys {
			args = append(args, k)
		}
		if err := rdbtest.Client(t, from, db).Do(context.Background(), args...).Err(); err != nil {
			t.Fatalf("MIGRATE of db %d from %s: %v", db, from, err)
		}
	}
}

// TestMigrateRedis: MIGRATE moves every type from kvarray to a real
// redis-server (and deletes it here), and a redis-server's MIGRATE
// (COPY) moves it all back into kvarray.
func TestMigrateRedis(t *testing.T) {
	ts := startServer(t, "")
	r := redistest.Start(t)
	rdbtest.Populate(t, ts.addr)
	want := rdbtest.Read(t, ts.addr, rdbtest.DBs...)
	migrateAll(t, want, ts.addr, r.Addr())
	rdbtest.EqualWithin(t, want, rdbtest.Read(t, r.Addr(), rdbtest.DBs...), 5*time.Second)
	if left := rdbtest.Read(t, ts.addr, rdbtest.DBs...); left.Count() != 0 {
		t.Errorf("%d keys left in kvarray after MIGRATE", left.Count())
	}
	migrateAll(t, want, r.Addr(), ts.addr, "COPY")
	rdbtest.EqualWithin(t, want, rdbtest.Read(t, ts.addr, rdbtest.DBs...), 5*time.Second)
	if n := rdbtest.Read(t, r.Addr(), rdbtest.DBs...).Count(); n != want.Count() {
		t.Errorf("redis-server holds %d keys after MIGRATE COPY, want %d", n, want.Count())
	}
}

// TestMigrateOptions: NOKEY, the target's errors (the key stays here),
// REPLACE, COPY, AUTH and AUTH2, and a target that is not there.
func TestMigrateOptions(t *testing.T) {
	ts := startServer(t, "")
	r := redistest.Start(t)
	ctx := context.Background()
	if err := rdbtest.Client(t, r.Addr(), 0).ConfigSet(ctx, "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(&redis.Options{Addr: r.Addr(), Password: "secret"})
	defer rc.Close()
	host, port, _ := net.SplitHostPort(r.Addr())
	c := ts.dial()
	c.do("CONFIG", "SET", "slowlog-log-slower-than", "0")
	c.do("SET", "k", "here")
	rc.Set(ctx, "k", "there", 0)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"MIGRATE", host, port, "nosuch", "0", "1000"}, `+"NOKEY"`},
		{[]string{"MIGRATE", host, port, "k", "0", "1000"}, `-"ERR Target instance replied with error: NOAUTH Authentication required."`},
		{[]string{"MIGRATE", host, port, "k", "0", "1000", "AUTH", "secret"}, `-"ERR Target instance replied with error: BUSYKEY Target key name already exists."`},
		{[]string{"GET", "k"}, `$"here"`},
		{[]string{"MIGRATE", host, port, "k", "0", "1000", "COPY", "REPLACE", "AUTH2", "default", "secret"}, `+"OK"`},
		{[]string{"GET", "k"}, `$"here"`},
		{[]string{"MIGRATE", host, port, "k", "0", "1000", "REPLACE", "AUTH", "secret"}, `+"OK"`},
		{[]string{"EXISTS", "k"}, `:"0"`},
		{[]string{"MIGRATE", host, port, "k", "0", "1000", "KEYS", "a"}, `-"ERR When using MIGRATE KEYS option, the key argument must be set to the empty string"`},
		{[]string{"MIGRATE", host, port, "k", "0", "1000", "AUTH"}, `-"ERR syntax error"`},
	} {
		if got := c.do(tc.args...).String(); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.args, got, tc.want)
		}
	}
	hidden := 0
	for _, e := range rdbtest.Client(t, ts.addr, 0).SlowLogGet(ctx, -1).Val() {
		line := strings.Join(e.Args, " ")
		if strings.Contains(line, "secret") {
			t.Errorf("SLOWLOG keeps MIGRATE's password: %q", e.Args)
		}
		hidden += strings.Count(line, "(redacted)")
	}
	if hidden != 4 { // two AUTH, one AUTH2 (user and password)
		t.Errorf("SLOWLOG shows %d redacted MIGRATE credentials, want 4", hidden)
	}
	if v := rc.Get(ctx, "k").Val(); v != "here" {
		t.Errorf("redis-server's k = %q after MIGRATE REPLACE", v)
	}
	c.do("SET", "k", "v")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, dead, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	if got := c.do("MIGRATE", "127.0.0.1", dead, "k", "0", "500").String(); !strings.Contains(got, "IOERR") {
		t.Errorf("MIGRATE to a closed port: %s", got)
	}
}
