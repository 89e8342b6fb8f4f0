package packing

import (
	"bytes"
	"reflect"
	"testing"
)

func sampleParity() parityFields {
	return parityFields{
		geometry: geometry{set: 0x1122334455667788, k: 4, r: 2, shardSize: 4096, parity: []int{4, 5}},
		index:    1,
		members: []member{
			{slot: 0, dev: 0, key: []byte("alpha"), split: 0, splits: 1, splitLen: 4000, objectLen: 4000, version: 7},
			{slot: 2, dev: 3, key: []byte("beta"), split: 3, splits: 9, splitLen: 4096, objectLen: 36000, version: 9},
		},
	}
}

func TestFieldsRoundTrip(t *testing.T) {
	pf := sampleParity()
	got, err := decodeParity(pf.encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, pf) {
		t.Fatalf("parity fields\n got %+v\nwant %+v", got, pf)
	}
	mf := memberFields{geometry: pf.geometry, slot: 3, roster: rosterOf(pf.members)}
	gm, err := decodeMember(mf.encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gm, mf) {
		t.Fatalf("member fields\n got %+v\nwant %+v", gm, mf)
	}
	if _, err := decodeMember(pf.encode()); err == nil {
		t.Fatal("parity fields decoded as a member")
	}
	if _, err := decodeParity(mf.encode()); err == nil {
		t.Fatal("member fields decoded as a parity")
	}
	full := parityFields{geometry: pf.geometry}
	for i := 0; i < 4; i++ {
		full.members = append(full.members, member{slot: i, key: []byte("12345")})
	}
	if n, max := len(full.encode()), maxParityFields(4, 2, 5); n > max {
		t.Fatalf("parity fields of %d bytes, bound says %d", n, max)
	}
	if n, max := len((&memberFields{geometry: pf.geometry, roster: rosterOf(full.members)}).encode()), maxParityFields(4, 2, 5); n > max {
		t.Fatalf("member fields of %d bytes, bound says %d", n, max)
	}
}

// FuzzDecodeFields: no input panics the decoders, and what decodes
// re-encodes to the same bytes.
func FuzzDecodeFields(f *testing.F) {
	pf := sampleParity()
	f.Add(pf.encode())
	f.Add((&memberFields{geometry: pf.geometry, slot: 1, roster: rosterOf(pf.members)}).encode())
	f.Add([]byte{roleParity})
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, err := decodeParity(b); err == nil {
			if re := p.encode(); !bytes.Equal(re, b) {
				t.Fatalf("parity re-encodes differently")
			}
		}
		if m, err := decodeMember(b); err == nil {
			if re := m.encode(); !bytes.Equal(re, b) {
				t.Fatalf("member re-encodes differently")
			}
		}
	})
}
