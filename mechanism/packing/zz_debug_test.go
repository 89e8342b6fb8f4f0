package packing

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"testing"

	pdb "github.com/cockroachdb/pebble/v2"

	"github.com/kvarray/kvarray/format"
)

func TestZZDebugDump(t *testing.T) {
	dir := os.Getenv("DUMP_DIR")
	if dir == "" {
		t.Skip()
	}
	want, _ := strconv.ParseUint(os.Getenv("DUMP_SET"), 16, 64)
	for d := 0; d < 6; d++ {
		db, err := pdb.Open(fmt.Sprintf("%s/data/dev%d", dir, d), &pdb.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		it, _ := db.NewIter(nil)
		for it.First(); it.Valid(); it.Next() {
			k := it.Key()
			v, err := format.Decode(it.Value())
			if err != nil {
				continue
			}
			user, split, kind, _ := format.ParseKey(k)
			switch {
			case kind == kindParity && bytes.HasPrefix(user, setKeyPrefix):
				f, err := decodeParity(v.Fields)
				if err != nil || f.set != want {
					continue
				}
				fmt.Printf("dev%d PARITY %d version %d members:", d, f.index, v.Version)
				for _, mb := range f.members {
					fmt.Printf(" [slot %d dev %d %q v%d]", mb.slot, mb.dev, mb.key, mb.version)
				}
				fmt.Println()
			case bytes.HasPrefix(user, logKeyPrefix):
				for rest := v.Payload; len(rest) > 0; {
					e, r2, err := readEntry(rest)
					if err != nil {
						break
					}
					rest = r2
					if e.g.set == want {
						fmt.Printf("dev%d SEG %x entry pv %d slot %d from %d to %d leave %v key %q\n", d, user[len(logKeyPrefix):], e.pv, e.slot, e.from, e.mb.version, e.leave, e.mb.key)
					}
				}
			case kind == format.KindData && len(v.Fields) > 0 && v.Fields[0] == roleMember:
				f, err := decodeMember(v.Fields)
				if err != nil || f.set != want {
					continue
				}
				fmt.Printf("dev%d MEMBER %q split %d slot %d version %d len %d\n", d, user, split, f.slot, v.Version, len(v.Payload))
			}
		}
		it.Close()
		db.Close()
	}
}
