package packing

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/mechanism"
)

// TestGapRepairedFromMembers: a parity whose delta log does not chain (a
// change logged from a piece its set no longer listed, however that came
// about) reads as bad, and with every parity so the set has no redundancy.
// The set's repair must rebuild it from the pieces its members' primaries
// hold (what reads return), after which the member reads back with its
// primary's device failed.
func TestGapRepairedFromMembers(t *testing.T) {
	ctx := context.Background()
	devs := make([]device.Device, 6)
	mems := make([]*mem.Device, 6)
	names := make([]string, 6)
	for i := range devs {
		mems[i] = mem.New(mem.WithName(fmt.Sprintf("mem:%d", i)))
		devs[i], names[i] = mems[i], fmt.Sprintf("mem:%d", i)
	}
	env := mechanism.NewEnv(devs, names, device.DefaultLimits())
	mm, err := New(4, 2, 1)(env)
	if err != nil {
		t.Fatal(err)
	}
	m := mm.(*Mechanism)
	vals := map[string][]byte{}
	var keys []mechanism.Key
	for i := 0; len(keys) < 4; i++ {
		user := []byte(fmt.Sprintf("member-%d", i))
		k := mechanism.Key{User: user, Primary: len(keys)} // primaries 0..3: one set
		v := bytes.Repeat([]byte{byte('a' + i)}, 1000+i)
		if err := m.Store(ctx, k, mechanism.Object{Splits: 1, ObjectLen: uint64(len(v)), Version: env.Clock().Next()}, v, nil); err != nil {
			t.Fatal(err)
		}
		keys, vals[string(user)] = append(keys, k), v
	}
	p := env.Read(ctx, keys[0].Data(), []int{keys[0].Primary})[0]
	f, err := decodeMember(p.Value.Fields)
	if err != nil {
		t.Fatal(err)
	}
	// An entry that does not chain: a change of slot 0 from a version
	// the set never listed.
	e := &logEntry{g: f.geometry, slot: f.slot, from: p.Value.Version - 1, pv: env.Clock().Next(),
		mb:    member{slot: f.slot, dev: keys[0].Primary, key: keys[0].User, splits: 1, splitLen: 1000, objectLen: 1000, version: env.Clock().Next()},
		delta: make([]byte, 8)}
	for _, err := range m.appendEntry(ctx, f.parity, e) {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range m.readParities(ctx, f.geometry) {
		if p.ok || !errors.Is(p.Err, errLogGap) {
			t.Fatalf("parity on device %d reads %v, %v; want a log gap", p.Dev, p.ok, p.Err)
		}
	}
	if _, err := m.RepairKey(ctx, setKey(f.set)); err != nil {
		t.Fatalf("repair of the set: %v", err)
	}
	for _, p := range m.readParities(ctx, f.geometry) {
		if !p.ok {
			t.Fatalf("parity on device %d after the repair: %v", p.Dev, p.Err)
		}
	}
	// The member whose set it was reads from its set, its primary failed.
	k := keys[0]
	mems[k.Primary].Fail()
	got, _, err := m.Retrieve(ctx, k, env.Read(ctx, k.Data(), []int{k.Primary}))
	if err != nil || !bytes.Equal(got, vals[string(k.User)]) {
		t.Fatalf("%s with its primary failed: %d bytes, %v", k.User, len(got), err)
	}
}
