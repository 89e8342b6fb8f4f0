package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device/redis/redistest"
	"github.com/kvarray/kvarray/internal/rdb/rdbtest"
)

// TestImportExport: a file redis-server 7.0 SAVEs with every type,
// encoding, expiry and several databases imports into the array as
// what that Redis held (read through kvarray serve), and the file
// `kvarray export` writes loads in another redis-server as the same.
func TestImportExport(t *testing.T) {
	r1 := redistest.Start(t)
	rdbtest.Populate(t, r1.Addr())
	want := rdbtest.Read(t, r1.Addr(), rdbtest.DBs...)
	if err := rdbtest.Client(t, r1.Addr(), 0).Save(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	dir := fresh(t, 6)
	r := kv(t, nil, "import", filepath.Join(r1.Dir(), "dump.rdb"), "--json")
	if r.code != 0 {
		t.Fatalf("import: exit %d, stderr %q", r.code, r.stderr)
	}
	var rep importReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Keys != int64(want.Count()) || rep.RDBVersion != 10 ||
		rep.ByType["zset"] == 0 || rep.WithTTL == 0 || len(rep.ByDB) != len(rdbtest.DBs) {
		t.Fatalf("import report %s: %+v, %v", r.stdout, rep, err)
	}
	s := serve(t)
	rdbtest.Equal(t, want, rdbtest.Read(t, s.addr, rdbtest.DBs...))
	s.stop(t)

	out := filepath.Join(dir, "out.rdb")
	r = kv(t, nil, "export", out, "--json")
	var erep exportReport
	if err := json.Unmarshal([]byte(r.stdout), &erep); r.code != 0 || err != nil || erep.Keys != int64(want.Count()) {
		t.Fatalf("export: exit %d, %s, stderr %q", r.code, r.stdout, r.stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	ldir := t.TempDir()
	if err := os.WriteFile(filepath.Join(ldir, "in.rdb"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	r2 := redistest.Start(t, "--dir", ldir, "--dbfilename", "in.rdb")
	rdbtest.Equal(t, want, rdbtest.Read(t, r2.Addr(), rdbtest.DBs...))

	// Importing again replaces every key with the same (a resumed import).
	if r := kv(t, nil, "import", filepath.Join(r1.Dir(), "dump.rdb")); r.code != 0 {
		t.Fatalf("second import: exit %d, stderr %q", r.code, r.stderr)
	}
	s = serve(t)
	rdbtest.Equal(t, want, rdbtest.Read(t, s.addr, rdbtest.DBs...))
	s.stop(t)
}

// TestImportUnsupported: a stream in the file is counted and named, the
// keys around it imported, and the exit status is 1 unless
// --skip-unsupported; a file that is not an RDB is an error.
func TestImportUnsupported(t *testing.T) {
	path, err := filepath.Abs(filepath.Join("..", "..", "internal", "rdb", "testdata", "unsupported", "redis-7.0-stream.rdb"))
	if err != nil {
		t.Fatal(err)
	}
	fresh(t, 6)
	r := kv(t, nil, "import", path, "--json")
	var rep importReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != exitUnsupported || err != nil || rep.Unsupported["stream"] != 1 ||
		rep.Keys != 2 || rep.ExitCode != exitUnsupported || len(rep.UnsupportedKeys) != 1 || rep.UnsupportedKeys[0] != "stream" {
		t.Fatalf("import: exit %d, %s, %v, stderr %q", r.code, r.stdout, err, r.stderr)
	}
	if got := ok(t, nil, "get", "a"); got != "before" {
		t.Errorf("get a = %q", got)
	}
	if got := ok(t, nil, "get", "z"); got != "after" {
		t.Errorf("get z = %q", got)
	}
	if r := kv(t, nil, "import", path, "--skip-unsupported"); r.code != 0 {
		t.Errorf("import --skip-unsupported: exit %d, stderr %q", r.code, r.stderr)
	}
	if err := os.WriteFile("bad.rdb", []byte("not an rdb file"), 0o600); err != nil {
		t.Fatal(err)
	}
	fails(t, nil, []string{"import", "bad.rdb"}, "not an RDB file")
}

// TestImportInterrupted: an import stopped midway (its context
// cancelled, as ^C does) leaves only whole keys: every key the array
// then holds equals the file's, none half written; running it again
// completes it.
func TestImportInterrupted(t *testing.T) {
	r1 := redistest.Start(t)
	rdbtest.Populate(t, r1.Addr())
	// More keys, so that the cancel lands inside the import.
	c := rdbtest.Client(t, r1.Addr(), 0)
	for i := range 20 {
		args := []any{"RPUSH", fmt.Sprintf("more:%d", i)}
		for j := range 500 {
			args = append(args, fmt.Sprintf("%d-%d", i, j))
		}
		if err := c.Do(t.Context(), args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	want := rdbtest.Read(t, r1.Addr(), rdbtest.DBs...)
	if err := c.Save(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(r1.Dir(), "dump.rdb")
	fresh(t, 6)
	for _, after := range []time.Duration{20 * time.Millisecond, 100 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(t.Context(), after)
		var out, errOut bytes.Buffer
		code := run(ctx, []string{"import", file}, bytes.NewReader(nil), &out, &errOut)
		cancel()
		t.Logf("import cancelled after %v: exit %d, %s", after, code, strings.TrimSpace(errOut.String()))
		s := serve(t)
		got := rdbtest.Read(t, s.addr, rdbtest.DBs...)
		s.stop(t)
		for db, keys := range got {
			for k, it := range keys {
				w, ok := want[db][k]
				if !ok || w.ExpireAt != it.ExpireAt || !rdbtest.SameObject(w.Object, it.Object) {
					t.Errorf("after an interrupted import, db %d key %q is %s, want %s", db, k, rdbtest.Show(it.Object), rdbtest.Show(w.Object))
				}
			}
		}
	}
	if r := kv(t, nil, "import", file); r.code != 0 {
		t.Fatalf("import after the interrupted ones: exit %d, %s", r.code, r.stderr)
	}
	s := serve(t)
	rdbtest.Equal(t, want, rdbtest.Read(t, s.addr, rdbtest.DBs...))
	s.stop(t)
}

// TestImportSync: `kvarray import redis://…` copies a running
// redis-server's every key through SYNC (with AUTH), as equal as from
// its file; a wrong password is an error.
func TestImportSync(t *testing.T) {
	r := redistest.Start(t)
	rdbtest.Populate(t, r.Addr())
	want := rdbtest.Read(t, r.Addr(), rdbtest.DBs...)
	if err := rdbtest.Client(t, r.Addr(), 0).ConfigSet(t.Context(), "requirepass", "pw").Err(); err != nil {
		t.Fatal(err)
	}
	fresh(t, 6)
	fails(t, nil, []string{"import", "redis://:wrong@" + r.Addr()}, "AUTH", "WRONGPASS")
	res := kv(t, nil, "import", "redis://default:pw@"+r.Addr(), "--json")
	var rep importReport
	if err := json.Unmarshal([]byte(res.stdout), &rep); res.code != 0 || err != nil || rep.Keys != int64(want.Count()) {
		t.Fatalf("import: exit %d, %s, %v, stderr %q", res.code, res.stdout, err, res.stderr)
	}
	s := serve(t)
	rdbtest.Equal(t, want, rdbtest.Read(t, s.addr, rdbtest.DBs...))
	s.stop(t)
}
