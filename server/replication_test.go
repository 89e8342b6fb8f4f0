package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvarray/kvarray/device/redis/redistest"
	"github.com/kvarray/kvarray/internal/rdb"
	"github.com/kvarray/kvarray/internal/rdb/rdbtest"
)

// infoField reads one field of INFO section from the server at addr.
func infoField(t *testing.T, c *redis.Client, section, field string) string {
	t.Helper()
	s, err := c.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatalf("INFO %s: %v", section, err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(field) + `:(.*?)\r?$`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("INFO %s has no %s:\n%s", section, field, s)
	}
	return m[1]
}

// await fails t unless cond holds within limit (waitFor's polling: a
// bound on the test, not an assertion on a timing).
func await(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !waitFor(int(limit/(20*time.Millisecond)), cond) {
		t.Fatalf("%s: not within %v", what, limit)
	}
}

// loadRDB starts a redis-server on the RDB file at path and returns its
// address.
func loadRDB(t *testing.T, path string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dump.rdb"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return redistest.Start(t, "--dir", dir, "--dbfilename", "dump.rdb").Addr()
}

// TestSyncUnderLoad: `redis-cli --rdb` against kvarray while clients
// write, loaded into a real redis-server, is the keyspace at one moment:
// every key the writes did not touch is equal, and each writer's
// transactions (set a counter to i, add member i to a set, delete the
// i-th of its keys) are in the file up to the same i for all three.
func TestSyncUnderLoad(t *testing.T) {
	cli := tool(t, "redis-cli")
	ts := startServer(t, "", WithRDBFile(t.TempDir(), "dump.rdb"))
	rdbtest.Populate(t, ts.addr)
	want := rdbtest.Read(t, ts.addr, rdbtest.DBs...)
	c := ts.client()
	ctx, cancel := context.WithCancel(context.Background())
	const writers, doomed = 4, 3000
	for w := range writers {
		p := c.Pipeline()
		for j := 1; j <= doomed; j++ {
			p.Set(ctx, fmt.Sprintf("del:%d:%d", w, j), j, 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var rounds atomic.Int64
	var started [writers]atomic.Bool // the writer's first transaction is in
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= doomed && ctx.Err() == nil; i++ {
				p := c.TxPipeline()
				p.Set(ctx, fmt.Sprintf("load:%d:str", w), i, 0)
				p.SAdd(ctx, fmt.Sprintf("load:%d:set", w), fmt.Sprintf("m%d", i))
				p.Del(ctx, fmt.Sprintf("del:%d:%d", w, i))
				if _, err := p.Exec(ctx); err != nil && ctx.Err() == nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				started[w].Store(true)
				rounds.Add(1)
			}
		}()
	}
	// Each writer's keys are in the file only once it has committed one
	// transaction: 4 rounds in all may be another writer's.
	await(t, 10*time.Second, "writers started", func() bool {
		for w := range started {
			if !started[w].Load() {
				return false
			}
		}
		return true
	})
	file := filepath.Join(t.TempDir(), "out.rdb")
	before := rounds.Load()
	out, err := exec.Command(cli, "-h", "127.0.0.1", "-p", ts.port(), "--rdb", file).CombinedOutput()
	during := rounds.Load() - before
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatalf("redis-cli --rdb: %v: %s", err, out)
	}
	t.Logf("%d transactions while the RDB was made", during)
	got := rdbtest.Read(t, loadRDB(t, file), rdbtest.DBs...)
	for w := range writers {
		str, set := fmt.Sprintf("load:%d:str", w), fmt.Sprintf("load:%d:set", w)
		s, ok := got[0][str]
		if !ok || s.Object.Kind != rdb.String {
			t.Fatalf("%s missing from the file, or not a string", str)
		}
		n, err := strconv.Atoi(string(s.Object.Str))
		if err != nil || n < 1 || n > doomed {
			t.Fatalf("%s = %q in the file", str, s.Object.Str)
		}
		m := got[0][set].Object.Elems
		if len(m) != n {
			t.Errorf("%s = %d but %s has %d members in the file: not one moment", str, n, set, len(m))
		}
		for i := 1; i <= len(m); i++ {
			if _, ok := slicesIndex(m, fmt.Sprintf("m%d", i)); !ok {
				t.Errorf("%s: %d members but no m%d: not a state the set went through", set, len(m), i)
				break
			}
		}
		for j := 1; j <= doomed; j++ {
			k := fmt.Sprintf("del:%d:%d", w, j)
			if _, ok := got[0][k]; ok != (j > n) {
				t.Errorf("%s = %d, yet %s is in the file: %v", str, n, k, ok)
			}
			delete(got[0], k)
		}
		delete(got[0], str)
		delete(got[0], set)
	}
	rdbtest.Equal(t, want, got)
}

func slicesIndex(elems [][]byte, s string) (int, bool) {
	for i, e := range elems {
		if string(e) == s {
			return i, true
		}
	}
	return 0, false
}

// TestSaveBgsave: SAVE and BGSAVE write every key to dir/dbfilename,
// which a real redis-server loads equal; INFO persistence and LASTSAVE
// report it; a data user may run none of SYNC, PSYNC, SAVE, BGSAVE or
// REPLICAOF.
func TestSaveBgsave(t *testing.T) {
	dir := t.TempDir()
	ts := startServer(t, "", WithRDBFile(dir, "snap.rdb"), WithAuth("", User{Name: "app", Password: "pw"}))
	rdbtest.Populate(t, ts.addr)
	want := rdbtest.Read(t, ts.addr, rdbtest.DBs...)
	c := ts.client()
	ctx := context.Background()
	if got, err := c.ConfigGet(ctx, "dbfilename").Result(); err != nil || got["dbfilename"] != "snap.rdb" {
		t.Fatalf("CONFIG GET dbfilename = %v, %v", got, err)
	}
	if got, _ := c.ConfigGet(ctx, "dir").Result(); got["dir"] != dir {
		t.Fatalf("CONFIG GET dir = %v, want %s", got, dir)
	}
	path := filepath.Join(dir, "snap.rdb")
	if err := c.Save(ctx).Err(); err != nil {
		t.Fatalf("SAVE: %v", err)
	}
	rdbtest.Equal(t, want, rdbtest.Read(t, loadRDB(t, path), rdbtest.DBs...))
	os.Remove(path)
	if got, err := c.BgSave(ctx).Result(); err != nil || got != "Background saving started" {
		t.Fatalf("BGSAVE = %q, %v", got, err)
	}
	await(t, 20*time.Second, "BGSAVE finished", func() bool { return infoField(t, c, "persistence", "rdb_bgsave_in_progress") == "0" })
	if st := infoField(t, c, "persistence", "rdb_last_bgsave_status"); st != "ok" {
		t.Fatalf("rdb_last_bgsave_status:%s", st)
	}
	last, err := c.LastSave(ctx).Result()
	if err != nil || infoField(t, c, "persistence", "rdb_last_save_time") != strconv.FormatInt(last, 10) {
		t.Fatalf("LASTSAVE %d (%v) differs from INFO's rdb_last_save_time", last, err)
	}
	rdbtest.Equal(t, want, rdbtest.Read(t, loadRDB(t, path), rdbtest.DBs...))

	app := ts.client(func(o *redis.Options) { o.Username, o.Password = "app", "pw" })
	for _, cmd := range [][]any{{"SYNC"}, {"PSYNC", "?", "-1"}, {"SAVE"}, {"BGSAVE"}, {"REPLICAOF", "127.0.0.1", "1"}, {"SLAVEOF", "NO", "ONE"}} {
		if err := app.Do(ctx, cmd...).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Errorf("%v by a data user: %v, want NOPERM", cmd, err)
		}
	}
}

// TestReplicaOfRedis is a live migration: a redis-server under a write
// load of every type, with expiries and in two databases; kvarray follows
// it as a replica (writes refused READONLY, reads served); once the
// writes stop and the offsets meet, REPLICAOF NO ONE promotes it, and it
// holds every key Redis holds, TTLs within a second.
func TestReplicaOfRedis(t *testing.T) {
	r := redistest.Start(t)
	rdbtest.Populate(t, r.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var rounds atomic.Int64
	for _, db := range []int{0, 1} {
		rc := rdbtest.Client(t, r.Addr(), db)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				k := fmt.Sprintf("w%d", i%97)
				p := rc.TxPipeline() // MULTI/EXEC in the stream
				p.Set(ctx, "s:"+k, i, 0)
				p.Set(ctx, "ttl:"+k, i, time.Duration(100+i%50)*time.Second)
				p.HSet(ctx, "h:"+k, fmt.Sprintf("f%d", i%13), i)
				p.SAdd(ctx, "set:"+k, i%31)
				p.ZAdd(ctx, "z:"+k, redis.Z{Score: float64(i) / 7, Member: i % 17})
				p.RPush(ctx, "l:"+k, i)
				if i%3 == 0 {
					p.LPop(ctx, "l:"+k)
					p.SRem(ctx, "set:"+k, (i+1)%31)
				}
				if i%11 == 0 {
					p.Del(ctx, "s:"+fmt.Sprintf("w%d", (i/11)%97))
					p.Expire(ctx, "h:"+k, 500*time.Second)
				}
				p.IncrBy(ctx, "counter", 3)
				if _, err := p.Exec(ctx); err != nil && ctx.Err() == nil {
					t.Errorf("writer db %d: %v", db, err)
					return
				}
				rounds.Add(1)
				// Redis takes transactions far faster than a replica
				// applies them durably: a bounded rate keeps the backlog
				// the replica must catch up on within the test's time.
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	await(t, 10*time.Second, "writers started", func() bool { return rounds.Load() >= 2 })

	ts := startServer(t, "")
	c := ts.client()
	if err := c.Do(context.Background(), "REPLICAOF", "127.0.0.1", strconv.Itoa(r.Port())).Err(); err != nil {
		t.Fatalf("REPLICAOF: %v", err)
	}
	await(t, 20*time.Second, "link up", func() bool { return infoField(t, c, "replication", "master_link_status") == "up" })
	if role := infoField(t, c, "replication", "role"); role != "slave" {
		t.Fatalf("role:%s", role)
	}
	if got := infoField(t, c, "replication", "master_port"); got != strconv.Itoa(r.Port()) {
		t.Fatalf("master_port:%s", got)
	}
	if err := c.Set(context.Background(), "mine", "x", 0).Err(); err == nil || err.Error() != readonlyReply {
		t.Fatalf("SET on a replica: %v, want %s", err, readonlyReply)
	}
	if err := c.Get(context.Background(), "db0:str").Err(); err != nil {
		t.Fatalf("GET on a replica: %v", err)
	}
	// The stream goes on a while after the full sync.
	after := rounds.Load()
	await(t, 10*time.Second, "writes after the sync", func() bool { return rounds.Load() > after+200 })
	cancel()
	wg.Wait()
	mc := rdbtest.Client(t, r.Addr(), 0)
	// The replica may still be applying a backlog (slowly under the race
	// detector): it is given as long as its offset keeps moving.
	var seen string
	stalled := time.Now()
	for deadline := time.Now().Add(3 * time.Minute); ; {
		got, want := infoField(t, c, "replication", "slave_repl_offset"), infoField(t, mc, "replication", "master_repl_offset")
		if got == want {
			break
		}
		if got != seen {
			seen, stalled = got, time.Now()
		}
		if time.Since(stalled) > 20*time.Second || time.Now().After(deadline) {
			t.Fatalf("replica offset %s, master's %s: not equal (the replica's unchanged for %v)", got, want, time.Since(stalled).Round(time.Second))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := c.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatalf("REPLICAOF NO ONE: %v", err)
	}
	if role := infoField(t, c, "replication", "role"); role != "master" {
		t.Fatalf("after REPLICAOF NO ONE, role:%s", role)
	}
	// rdbtest.DBs has the writers' 0 and 1.
	rdbtest.EqualWithin(t, rdbtest.Read(t, r.Addr(), rdbtest.DBs...), rdbtest.Read(t, ts.addr, rdbtest.DBs...), time.Second)
	if err := c.Set(context.Background(), "mine", "x", 0).Err(); err != nil {
		t.Fatalf("SET after promotion: %v", err)
	}
}

// TestReplicaOfAuth: a replica from the start (WithReplicaOf, the
// config's replicaof and masterauth) of a Redis that wants a password
// follows it; ROLE says so.
func TestReplicaOfAuth(t *testing.T) {
	r := redistest.Start(t)
	ctx := context.Background()
	// Set after the start: redistest PINGs without a password.
	if err := rdbtest.Client(t, r.Addr(), 0).ConfigSet(ctx, "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(&redis.Options{Addr: r.Addr(), Password: "secret"})
	t.Cleanup(func() { rc.Close() })
	if err := rc.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, "", WithReplicaOf("127.0.0.1", r.Port(), "", "secret"))
	c := ts.client()
	await(t, 20*time.Second, "link up", func() bool { return infoField(t, c, "replication", "master_link_status") == "up" })
	if err := rc.Set(ctx, "after", "2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	await(t, 20*time.Second, "the write after the sync", func() bool { return c.Get(ctx, "after").Val() == "2" })
	if got := c.Get(ctx, "before").Val(); got != "1" {
		t.Fatalf("GET before = %q", got)
	}
	role, err := c.Do(ctx, "ROLE").Slice()
	if err != nil || len(role) != 5 || role[0] != "slave" || role[3] != "connected" {
		t.Fatalf("ROLE = %v, %v", role, err)
	}
}
