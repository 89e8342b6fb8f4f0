package collection

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/keyspace"
)

// eachArray runs test on a mem array and on a Pebble one; open returns
// the keyspace, the first time of a new array, then as a restart finds it
// (Pebble: the array closed and its directories opened again).
func eachArray(t *testing.T, test func(t *testing.T, open func() *keyspace.Store)) {
	for _, kind := range []string{"mem", "pebble"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			var y string
			for i := range 4 {
				if kind == "mem" {
					y += fmt.Sprintf("mem:d%d, ", i)
				} else {
					y += fmt.Sprintf("pebble:%s, ", filepath.Join(dir, fmt.Sprint(i)))
				}
			}
			y = "devices: [" + y[:len(y)-2] + "]\n"
			cfg, err := config.Parse([]byte(y), dir)
			if err != nil {
				t.Fatal(err)
			}
			var a *array.Array
			var devs []device.Device
			open := func() *keyspace.Store {
				ctx := context.Background()
				switch {
				case devs == nil:
					devs = config.OpenDevices(cfg, true)
					a, err = array.Create(ctx, devs, cfg.Options()...)
				case kind == "pebble":
					// A restart: the devices are closed and opened again.
					if err := a.Close(); err != nil {
						t.Fatal(err)
					}
					devs = config.OpenDevices(cfg, false)
					a, err = array.Open(ctx, devs, cfg.Options()...)
				}
				// mem devices end with their array: a new Store over the
				// same array is the restart there.
				if err != nil {
					t.Fatal(err)
				}
				s, err := keyspace.Open(ctx, a, keyspace.DefaultDatabases)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			t.Cleanup(func() {
				if a != nil {
					a.Close()
				}
			})
			test(t, open)
		})
	}
}

// write opens key's hash, runs fn on it and applies what it changed.
func write(t *testing.T, s *keyspace.Store, key string, fn func(h *Hash)) {
	t.Helper()
	ctx := context.Background()
	v, err := s.Load(ctx, 0, []byte(key))
	found := err == nil
	h, err := OpenHash(ctx, StoreSource(s), v, found, DefaultLimits, s.MaxElement())
	if err != nil {
		t.Fatal(err)
	}
	fn(h)
	commit(t, s, key, h)
}

// commit applies what a command changed of key's collection x.
func commit(t *testing.T, s *keyspace.Store, key string, x interface {
	Changed() bool
	Commit() (keyspace.Value, bool, bool, []keyspace.Op)
}) {
	t.Helper()
	if !x.Changed() {
		return
	}
	nv, del, changed, ops := x.Commit()
	if changed {
		ops = append(ops, s.Op(0, []byte(key), nv, del))
	}
	for _, op := range ops {
		if err := s.Apply(context.Background(), op); err != nil {
			t.Fatal(err)
		}
	}
}

func open(t *testing.T, s *keyspace.Store, key string) *Hash {
	t.Helper()
	ctx := context.Background()
	v, err := s.Load(ctx, 0, []byte(key))
	h, err2 := OpenHash(ctx, StoreSource(s), v, err == nil, DefaultLimits, s.MaxElement())
	if err2 != nil {
		t.Fatal(err2)
	}
	return h
}

// TestHash: fields read back, counts are exact and the encoding converts
// at Redis's thresholds; all of it after the array is reopened.
func TestHash(t *testing.T) {
	eachArray(t, func(t *testing.T, reopen func() *keyspace.Store) {
		s := reopen()
		model := map[string]string{}
		set := func(h *Hash, f, v string) {
			isNew, err := h.Set([]byte(f), []byte(v))
			if err != nil {
				t.Fatal(err)
			}
			if _, had := model[f]; had == isNew {
				t.Fatalf("Set(%q): new %v, but the model had it: %v", f, isNew, had)
			}
			model[f] = v
		}
		for i := range DefaultLimits.HashEntries {
			write(t, s, "h", func(h *Hash) { set(h, fmt.Sprintf("f%d", i), fmt.Sprint(i)) })
		}
		if h := open(t, s, "h"); h.Encoding() != "listpack" || h.Len() != 128 {
			t.Fatalf("128 fields: %s, %d", h.Encoding(), h.Len())
		}
		write(t, s, "h", func(h *Hash) { set(h, "one more", "x") })
		if h := open(t, s, "h"); h.Encoding() != "hashtable" || h.Len() != 129 {
			t.Fatalf("129 fields: %s, %d", h.Encoding(), h.Len())
		}
		write(t, s, "h", func(h *Hash) {
			set(h, "f1", "changed")
			if ok, err := h.Delete([]byte("f2")); !ok || err != nil {
				t.Fatalf("Delete: %v %v", ok, err)
			}
			delete(model, "f2")
			set(h, "f1", "twice") // a second write of one field in one command
		})
		// A long value converts a small hash.
		write(t, s, "long", func(h *Hash) { h.Set([]byte("a"), bytes.Repeat([]byte("v"), 65)) })
		if h := open(t, s, "long"); h.Encoding() != "hashtable" {
			t.Errorf("a 65-byte value: %s", h.Encoding())
		}
		s = reopen()
		h := open(t, s, "h")
		if h.Len() != int64(len(model)) {
			t.Errorf("after reopening: %d fields, want %d", h.Len(), len(model))
		}
		all, err := h.All()
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != len(model) {
			t.Errorf("All: %d fields, want %d", len(all), len(model))
		}
		for _, f := range all {
			if model[string(f.Name)] != string(f.Value) {
				t.Errorf("field %q = %q, want %q", f.Name, f.Value, model[string(f.Name)])
			}
		}
		// Scan pages cover every field once, in order.
		var after []byte
		seen := 0
		for {
			page, next, err := h.Scan(after, 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range page {
				if after != nil && bytes.Compare(f.Name, after) <= 0 {
					t.Fatalf("Scan went back: %q after %q", f.Name, after)
				}
				seen++
			}
			if next == nil {
				break
			}
			after = next
		}
		if seen != len(model) {
			t.Errorf("Scan saw %d fields, want %d", seen, len(model))
		}
		// Deleting every field deletes the key.
		write(t, s, "h", func(h *Hash) {
			for f := range model {
				h.Delete([]byte(f))
			}
		})
		if _, err := s.Load(context.Background(), 0, []byte("h")); err == nil {
			t.Error("an emptied hash still exists")
		}
	})
}

// TestHashWrongType: a value of another type is refused.
func TestHashWrongType(t *testing.T) {
	if _, err := OpenHash(context.Background(), nil, keyspace.Value{V: []byte("s")}, true, DefaultLimits, 100); err != keyspace.ErrWrongType {
		t.Errorf("OpenHash of a string: %v", err)
	}
	for _, bad := range [][]byte{nil, {2, 0}, {0, 3, 1}, {1, 1}} {
		if _, err := OpenHash(context.Background(), nil, keyspace.Value{V: bad, Type: keyspace.TypeHash}, true, DefaultLimits, 100); err == nil {
			t.Errorf("OpenHash of %v: no error", bad)
		}
	}
}
