package keyspace

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvarray/kvarray/array"
)

// TestRanges: LoadRange, Len, SetRange and Append see and edit the Redis
// value, not the keyspace header in front of it, with and without an
// expiry; an edit marks the value raw and keeps its expiry; a key with no
// live value (absent, expired) is ErrNoValue to an edit and not found to
// a read; and the key counts do not move.
func TestRanges(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, openArray(t), 16)
	if err != nil {
		t.Fatal(err)
	}
	s.StartCounting(ctx)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, _, exact := s.Count(0); exact {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the counts never became exact")
		}
	}
	later := NowMs() + int64(time.Hour/time.Millisecond)
	for _, at := range []int64{0, later} {
		key := []byte("k")
		if err := s.Set(ctx, 0, key, []byte("hello world"), at); err != nil {
			t.Fatal(err)
		}
		keys0, expires0, _ := s.Count(0)
		part, n, head, err := s.LoadRange(ctx, 0, key, 6, 100)
		if err != nil || string(part) != "world" || n != 11 || head.At != at || head.Raw {
			t.Fatalf("at %d: LoadRange = %q, %d, %+v, %v", at, part, n, head, err)
		}
		if n, err := s.SetRange(ctx, 0, key, 6, []byte("WORLD!"), 100); err != nil || n != 12 {
			t.Fatalf("at %d: SetRange = %d, %v", at, n, err)
		}
		if n, err := s.Append(ctx, 0, key, []byte("?"), 100); err != nil || n != 13 {
			t.Fatalf("at %d: Append = %d, %v", at, n, err)
		}
		v, err := s.Load(ctx, 0, key)
		if err != nil || string(v.V) != "hello WORLD!?" || v.At != at || !v.Raw {
			t.Fatalf("at %d: after the edits %+v, %v", at, v, err)
		}
		if n, err := s.Len(ctx, 0, key); err != nil || n != 13 {
			t.Fatalf("at %d: Len = %d, %v", at, n, err)
		}
		if _, err := s.Append(ctx, 0, key, []byte("xx"), 14); !errors.Is(err, array.ErrValueTooLarge) {
			t.Fatalf("at %d: Append past the limit: %v", at, err)
		}
		if keys, expires, exact := s.Count(0); keys != keys0 || expires != expires0 || !exact {
			t.Fatalf("at %d: counts %d, %d (exact %v) after the edits, %d, %d before", at, keys, expires, exact, keys0, expires0)
		}
	}
	if err := s.Set(ctx, 0, []byte("gone"), []byte("abc"), NowMs()-1); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"gone", "absent"} {
		if _, err := s.SetRange(ctx, 0, []byte(k), 0, []byte("x"), 100); !errors.Is(err, ErrNoValue) {
			t.Errorf("SetRange of %s: %v, want ErrNoValue", k, err)
		}
		if _, err := s.Len(ctx, 0, []byte(k)); !errors.Is(err, array.ErrNotFound) {
			t.Errorf("Len of %s: %v, want not found", k, err)
		}
	}
	// Edits of no bytes write nothing, and keep the value not raw.
	if err := s.Set(ctx, 0, []byte("plain"), []byte("abc"), 0); err != nil {
		t.Fatal(err)
	}
	if n, err := s.SetRange(ctx, 0, []byte("plain"), 1, nil, 100); err != nil || n != 3 {
		t.Fatalf("empty SetRange = %d, %v", n, err)
	}
	if v, _ := s.Load(ctx, 0, []byte("plain")); v.Raw || !bytes.Equal(v.V, []byte("abc")) {
		t.Fatalf("after an empty SetRange: %+v", v)
	}
}

// TestDecodeHead agrees with DecodeValue on where the Redis value starts.
func TestDecodeHead(t *testing.T) {
	for _, v := range []Value{{V: []byte("x")}, {V: []byte("abc"), At: 7, Raw: true}, {}} {
		b := EncodeValue(v)
		h, n, err := DecodeHead(b[:min(len(b), headLen)])
		if err != nil || h.At != v.At || h.Raw != v.Raw || !bytes.Equal(b[n:], v.V) {
			t.Errorf("%+v: DecodeHead = %+v, %d, %v", v, h, n, err)
		}
	}
	if _, _, err := DecodeHead([]byte{tagExpiry, 0}); !errors.Is(err, ErrBadValue) {
		t.Errorf("a cut expiry: %v", err)
	}
}
