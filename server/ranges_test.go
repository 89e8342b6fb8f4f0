package server

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device/mem"
)

// TestRangeCommandsInPlace: STRLEN, GETRANGE, SETRANGE and APPEND on
// values of every mechanism of the hybrid test array (a 10 MiB value is a
// huge Splitting one, two splits) agree with a model, keep the key's TTL,
// mark the value raw, and a GETRANGE or STRLEN of a huge value reads a
// fraction of it from the devices.
func TestRangeCommandsInPlace(t *testing.T) {
	ts := startServer(t, "")
	c := ts.client()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	randBytes := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	model := map[string][]byte{}
	sizes := map[string]int{"repl": 300, "pack": 20 << 10, "split": 100 << 10, "huge": 10 << 20}
	for k, n := range sizes {
		model[k] = randBytes(n)
		ttl := time.Duration(0)
		if k != "repl" {
			ttl = time.Hour
		}
		if err := c.Set(ctx, k, model[k], ttl).Err(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(k, what string) {
		t.Helper()
		v := model[k]
		n, err := c.StrLen(ctx, k).Result()
		if err != nil || n != int64(len(v)) {
			t.Fatalf("%s: STRLEN %s = %d, %v; want %d", what, k, n, err, len(v))
		}
		for range 3 {
			start, end := int64(rng.IntN(len(v)+10))-5, int64(rng.IntN(len(v)+10))-5
			got, err := c.GetRange(ctx, k, start, end).Result()
			// Redis's rules, on the model.
			s, e, l := start, end, int64(len(v))
			if s < 0 {
				s = max(l+s, 0)
			}
			if e < 0 {
				e = max(l+e, 0)
			}
			e = min(e, l-1)
			want := ""
			if !(start < 0 && end < 0 && start > end) && s <= e && s < l {
				want = string(v[s : e+1])
			}
			if err != nil || got != want {
				t.Fatalf("%s: GETRANGE %s %d %d: %d bytes, %v; want %d", what, k, start, end, len(got), err, len(want))
			}
		}
	}
	for step := range 40 {
		k := []string{"repl", "pack", "split", "huge"}[rng.IntN(4)]
		what := fmt.Sprintf("step %d", step)
		v := model[k]
		if rng.IntN(2) == 0 {
			off := int64(rng.IntN(len(v) + 50))
			data := randBytes(1 + rng.IntN(5000))
			n, err := c.SetRange(ctx, k, off, string(data)).Result()
			nv := make([]byte, max(int64(len(v)), off+int64(len(data))))
			copy(nv, v)
			copy(nv[off:], data)
			model[k] = nv
			if err != nil || n != int64(len(nv)) {
				t.Fatalf("%s: SETRANGE %s %d: %d, %v", what, k, off, n, err)
			}
		} else {
			data := randBytes(1 + rng.IntN(5000))
			n, err := c.Append(ctx, k, string(data)).Result()
			model[k] = append(bytes.Clone(v), data...)
			if err != nil || n != int64(len(model[k])) {
				t.Fatalf("%s: APPEND %s: %d, %v", what, k, n, err)
			}
		}
		check(k, what)
		if enc, err := c.ObjectEncoding(ctx, k).Result(); err != nil || enc != "raw" {
			t.Fatalf("%s: OBJECT ENCODING %s = %q, %v; want raw", what, k, enc, err)
		}
		wantTTL := k != "repl"
		if ttl, err := c.PTTL(ctx, k).Result(); err != nil || (ttl > 0) != wantTTL {
			t.Fatalf("%s: PTTL %s = %v, %v; want a TTL %v", what, k, ttl, err, wantTTL)
		}
	}
	for k, v := range model {
		if got, err := c.Get(ctx, k).Bytes(); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("GET %s: %d bytes, %v; want %d", k, len(got), err, len(v))
		}
	}
	// Device bytes: a GETRANGE of 100 bytes and a STRLEN of the huge
	// value read its split 0's primary shard and the covering shard, not
	// the value.
	readBytes := func() int64 {
		var n int64
		for _, d := range ts.devs {
			m := d.(*mem.Device)
			n += m.Stats().BytesRead
			m.ResetStats()
		}
		return n
	}
	readBytes()
	off := int64(len(model["huge"]) - 1000)
	if got, err := c.GetRange(ctx, "huge", off, off+99).Result(); err != nil || got != string(model["huge"][off:off+100]) {
		t.Fatalf("GETRANGE huge: %v", err)
	}
	if n := readBytes(); n > int64(len(model["huge"]))/2 {
		t.Errorf("GETRANGE of 100 bytes of a %d-byte value read %d bytes from the devices", len(model["huge"]), n)
	}
	if _, err := c.StrLen(ctx, "huge").Result(); err != nil {
		t.Fatal(err)
	}
	if n := readBytes(); n > int64(len(model["huge"]))/4 {
		t.Errorf("STRLEN of a %d-byte value read %d bytes from the devices", len(model["huge"]), n)
	}
	// An expired key is absent to them all; SETRANGE and APPEND create it
	// anew without the old TTL.
	if err := c.Set(ctx, "gone", "abcdef", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.PExpire(ctx, "gone", time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if n, _ := c.StrLen(ctx, "gone").Result(); n != 0 {
		t.Fatalf("STRLEN of an expired key: %d", n)
	}
	if n, err := c.Append(ctx, "gone", "xy").Result(); err != nil || n != 2 {
		t.Fatalf("APPEND to an expired key: %d, %v", n, err)
	}
	if got, _ := c.Get(ctx, "gone").Result(); got != "xy" {
		t.Fatalf("GET after APPEND to an expired key: %q", got)
	}
	if ttl, _ := c.PTTL(ctx, "gone").Result(); ttl >= 0 {
		t.Fatalf("PTTL after APPEND to an expired key: %v", ttl)
	}
}
