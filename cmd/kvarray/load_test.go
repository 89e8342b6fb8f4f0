package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestLoad: `kvarray load N` stores N values as SET would (get reads them
// back through the keyspace, ls lists exactly N keys), reports what it did
// as JSON, and refuses a bad N.
func TestLoad(t *testing.T) {
	fresh(t, 6)
	r := kv(t, nil, "load", "300", "--size", "24", "--prefix", "k:", "--json")
	if r.code != 0 {
		t.Fatalf("load: exit %d, stderr %q", r.code, r.stderr)
	}
	var rep loadReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Keys != 300 || rep.Size != 24 || rep.Rate <= 0 {
		t.Fatalf("load report %q: %+v, %v", r.stdout, rep, err)
	}
	for _, i := range []int64{0, 123, 299} {
		key := fmt.Sprintf("k:%010d", i)
		if got, want := ok(t, nil, "get", key), string(loadValue(i, 24)); got != want {
			t.Errorf("get %s = %q, want %q", key, got, want)
		}
	}
	if n := strings.Count(ok(t, nil, "ls"), "\n"); n != 300 {
		t.Errorf("ls lists %d keys after loading 300", n)
	}
	fails(t, nil, []string{"load", "0"}, "not a positive number")
}
