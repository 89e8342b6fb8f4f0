package devicetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/kvarray/kvarray/device"
)

// RunScan checks device.Scan on a device made by open (empty, default
// limits): prefix, start, values and early stop, through the device's own
// Scanner when it has one and through the Iterate fallback otherwise. The
// fallback sorts nothing, so keys are checked in order only on ordered
// devices.
func RunScan(t *testing.T, d device.Device) {
	t.Helper()
	ctx := context.Background()
	defer func() { _ = d.Close() }()
	var want [][]byte
	for i := range 40 {
		k := key("scan/%03d", i)
		want = append(want, k)
		mustStore(t, d, k, val(i, 10+i))
	}
	mustStore(t, d, key("other/1"), val(99, 5))
	ordered := mustInfo(t, d).Ordered
	scan := func(prefix, start []byte, values bool) ([][]byte, [][]byte) {
		t.Helper()
		var ks, vs [][]byte
		err := device.Scan(ctx, d, prefix, start, values, func(k, v []byte) error {
			ks, vs = append(ks, bytes.Clone(k)), append(vs, bytes.Clone(v))
			return nil
		})
		if err != nil {
			t.Fatalf("scan %q from %q: %v", prefix, start, err)
		}
		return ks, vs
	}
	same := func(what string, got, want [][]byte) {
		t.Helper()
		if !ordered {
			got = sortedCopy(got)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d keys, want %d", what, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%s: key %d is %q, want %q", what, i, got[i], want[i])
			}
		}
	}
	ks, vs := scan([]byte("scan/"), nil, true)
	same("whole prefix", ks, want)
	for i, k := range ks {
		var n int
		if _, err := fmt.Sscanf(string(k), "scan/%03d", &n); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(vs[i], val(n, 10+n)) {
			t.Fatalf("scan: value of %q is %d bytes, not what was stored", k, len(vs[i]))
		}
	}
	ks, vs = scan([]byte("scan/"), key("scan/017"), false)
	same("from a stored key", ks, want[17:])
	for _, v := range vs {
		if v != nil {
			t.Fatalf("scan without values handed a value of %d bytes", len(v))
		}
	}
	ks, _ = scan([]byte("scan/"), key("scan/017\x00"), false)
	same("from between keys", ks, want[18:])
	ks, _ = scan([]byte("scan/"), key("scan/999"), false)
	same("from past the end", ks, nil)
	ks, _ = scan([]byte("scan/"), key("a"), false)
	same("from before the prefix", ks, want)
	stop := errors.New("stop")
	n := 0
	err := device.Scan(ctx, d, nil, nil, false, func(k, v []byte) error {
		if n++; n == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 3 {
		t.Fatalf("scan stopped by its callback: %v after %d keys, want the callback's error after 3", err, n)
	}
	runCursor(t, d)
}

// runCursor checks device.OpenCursor: every key with the prefix from
// start, in order (ordered devices: unordered ones are sorted by
// OpenCursor), across more keys than one chunk of the Scan fallback; and
// that keys stored or deleted after a cursor opened change nothing of
// what it yields of the others.
func runCursor(t *testing.T, d device.Device) {
	t.Helper()
	ctx := context.Background()
	var want [][]byte
	for i := range 300 {
		k := key("many/%04d", i)
		want = append(want, k)
		mustStore(t, d, k, val(i, 8))
	}
	walk := func(c device.Cursor, stopAt int) [][]byte {
		t.Helper()
		var got [][]byte
		for len(got) != stopAt {
			k, ok := c.Next(ctx)
			if !ok {
				break
			}
			got = append(got, bytes.Clone(k))
		}
		if err := c.Err(); err != nil {
			t.Fatalf("cursor: %v", err)
		}
		return got
	}
	open := func(prefix, start []byte) device.Cursor {
		t.Helper()
		c, err := device.OpenCursor(ctx, d, prefix, start)
		if err != nil {
			t.Fatalf("open cursor %q from %q: %v", prefix, start, err)
		}
		return c
	}
	for _, tc := range []struct {
		start []byte
		want  [][]byte
	}{
		{nil, want},
		{key("many/0150"), want[150:]},
		{key("many/0150\x00"), want[151:]},
		{key("many/9"), nil},
	} {
		c := open([]byte("many/"), tc.start)
		got := walk(c, -1)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(got, tc.want, bytes.Equal) {
			t.Fatalf("cursor from %q: %d keys (%q…), want %d", tc.start, len(got), got[:min(3, len(got))], len(tc.want))
		}
	}
	// Changes after the open: a key stored and one deleted, both past
	// where the cursor stands.
	c := open([]byte("many/"), nil)
	got := walk(c, 10)
	mustStore(t, d, key("many/0200a"), val(1, 8))
	if err := d.Delete(ctx, key("many/0250")); err != nil {
		t.Fatal(err)
	}
	got = append(got, walk(c, -1)...)
	_ = c.Close()
	got = slices.DeleteFunc(got, func(k []byte) bool {
		return bytes.Equal(k, key("many/0200a")) || bytes.Equal(k, key("many/0250"))
	})
	rest := slices.DeleteFunc(slices.Clone(want), func(k []byte) bool { return bytes.Equal(k, key("many/0250")) })
	if !slices.EqualFunc(got, rest, bytes.Equal) {
		t.Fatalf("cursor under changes: %d keys besides the two changed, want %d", len(got), len(rest))
	}
}

func sortedCopy(keys [][]byte) [][]byte {
	out := slices.Clone(keys)
	slices.SortFunc(out, bytes.Compare)
	return out
}
