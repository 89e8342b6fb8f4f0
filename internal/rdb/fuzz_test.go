package rdb_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kvarray/kvarray/internal/rdb"
	"github.com/kvarray/kvarray/internal/rdb/rdbtest"
)

// FuzzParseDump: a RESTORE payload is a client's bytes. Whatever they
// are, ParseDump returns an error or an Object, never panics, and an
// Object it returns survives Dump and ParseDump unchanged. (The checksum
// is recomputed over the fuzzed body, so that the fuzzer reaches the
// decoders behind it.)
func FuzzParseDump(f *testing.F) {
	for _, o := range []rdb.Object{
		{Kind: rdb.String, Str: []byte("value")},
		{Kind: rdb.List, Elems: [][]byte{[]byte("a"), []byte("12")}},
		{Kind: rdb.Set, Elems: [][]byte{[]byte("m")}},
		{Kind: rdb.Hash, Fields: []rdb.Field{{Name: []byte("f"), Value: []byte("v")}}},
		{Kind: rdb.ZSet, Members: []rdb.Member{{Member: []byte("m"), Score: 2}}},
	} {
		p := rdb.Dump(o)
		f.Add(p[:len(p)-10])
	}
	// The compact encodings, from the files redis-server wrote: each
	// value of each file is added as it stood there.
	files, _ := filepath.Glob("testdata/*.rdb")
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err == nil && len(b) > 20 {
			f.Add(b[9 : len(b)-9])
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		o, err := rdb.ParseDump(withFooter(body))
		if err != nil {
			return
		}
		back, err := rdb.ParseDump(rdb.Dump(o))
		if err != nil || !rdbtest.SameObject(rdbtest.Normalize(o), rdbtest.Normalize(back)) {
			t.Fatalf("%s does not survive Dump: %s, %v", rdbtest.Show(o), rdbtest.Show(back), err)
		}
	})
}

func withFooter(body []byte) []byte {
	p := append(append([]byte(nil), body...), rdb.Version, 0)
	return append(p, crcBytes(p)...)
}
