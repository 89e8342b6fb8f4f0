package format

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
	"testing/quick"
)

func TestKeyRoundTrip(t *testing.T) {
	f := func(user []byte, split uint16, kind uint8) bool {
		k := Key(user, int(split), Kind(kind))
		if len(k) != len(user)+KeyOverhead {
			return false
		}
		u, s, kd, err := ParseKey(k)
		return err == nil && bytes.Equal(u, user) && s == int(split) && kd == Kind(kind)
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}

func TestKeyUserKeyPrefixOrder(t *testing.T) {
	// Internal keys of one user key share the user key as a prefix, so a
	// device's prefix iteration over a user-key prefix finds all of them.
	user := []byte("object")
	for s := 0; s < 3; s++ {
		if k := Key(user, s, KindData); !bytes.HasPrefix(k, user) {
			t.Fatalf("split %d key %q lacks the user key prefix", s, k)
		}
	}
	if _, _, _, err := ParseKey([]byte("ab")); !errors.Is(err, ErrBadKey) {
		t.Fatalf("short key: %v", err)
	}
}

func randomHeader(r *rand.Rand) Header {
	fields := make([]byte, r.IntN(20))
	for i := range fields {
		fields[i] = byte(r.Uint32())
	}
	obj := r.Uint64N(1 << 40)
	return Header{
		RM:        RM(r.Uint32()),
		EC:        EC(r.Uint32()),
		Splits:    1 + r.Uint32N(MaxSplits),
		SplitLen:  uint32(min(obj, uint64(r.Uint32()))),
		ObjectLen: obj,
		Version:   r.Uint64(),
		Fields:    fields,
	}
}

func TestValueRoundTrip(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	for i := 0; i < 2000; i++ {
		h := randomHeader(r)
		payload := make([]byte, r.IntN(300))
		for j := range payload {
			payload[j] = byte(r.Uint32())
		}
		enc := Encode(&h, payload)
		if len(enc) != EncodedLen(&h, len(payload)) {
			t.Fatalf("encoded %d bytes, EncodedLen says %d", len(enc), EncodedLen(&h, len(payload)))
		}
		v, err := Decode(enc)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !bytes.Equal(v.Payload, payload) || !bytes.Equal(v.Fields, h.Fields) {
			t.Fatalf("payload or fields differ")
		}
		if !reflect.DeepEqual(v.Header, h) {
			t.Fatalf("header %+v, want %+v", v.Header, h)
		}
	}
}

// Every single-byte change anywhere in a value is detected: CRC32C detects
// all errors in one byte, and structural checks catch the rest first.
func TestValueDetectsEveryByteFlip(t *testing.T) {
	h := Header{RM: RMReplication, Splits: 1, SplitLen: 5, ObjectLen: 5, Version: 7, Fields: []byte{3}}
	enc := Encode(&h, []byte("hello"))
	for i := range enc {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			b := bytes.Clone(enc)
			b[i] ^= x
			if _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("flip %#x at byte %d not detected: %v", x, i, err)
			}
		}
	}
	for n := 0; n < len(enc); n++ {
		if _, err := Decode(enc[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncation to %d bytes not detected: %v", n, err)
		}
	}
}

func TestAppendKeepsPrefix(t *testing.T) {
	h := Header{RM: RMHashing, Splits: 1, SplitLen: 1, ObjectLen: 1}
	out := Append([]byte("prefix"), &h, []byte("x"))
	if !bytes.HasPrefix(out, []byte("prefix")) {
		t.Fatal("prefix lost")
	}
	if _, err := Decode(out[len("prefix"):]); err != nil {
		t.Fatal(err)
	}
}

func FuzzDecode(f *testing.F) {
	h := Header{RM: RMSplitting, EC: 1, Splits: 2, SplitLen: 3, ObjectLen: 6, Version: 9, Fields: []byte{4, 2, 0}}
	f.Add(Encode(&h, []byte("abc")))
	f.Add([]byte{})
	f.Add([]byte("KV\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		// Whatever decodes must re-encode to the same bytes.
		if re := Encode(&v.Header, v.Payload); !bytes.Equal(re, b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func FuzzParseKey(f *testing.F) {
	f.Add([]byte("user\x00\x01\x00"))
	f.Fuzz(func(t *testing.T, k []byte) {
		u, s, kind, err := ParseKey(k)
		if err != nil {
			return
		}
		if !bytes.Equal(Key(u, s, kind), k) {
			t.Fatalf("ParseKey/Key do not round-trip %q", k)
		}
	})
}

func BenchmarkEncode4K(b *testing.B) {
	h := Header{RM: RMReplication, Splits: 1, SplitLen: 4096, ObjectLen: 4096, Fields: []byte{3}}
	payload := make([]byte, 4096)
	buf := make([]byte, 0, EncodedLen(&h, len(payload)))
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		buf = Append(buf[:0], &h, payload)
	}
}

func BenchmarkDecode4K(b *testing.B) {
	h := Header{RM: RMReplication, Splits: 1, SplitLen: 4096, ObjectLen: 4096, Fields: []byte{3}}
	enc := Encode(&h, make([]byte, 4096))
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// TestTag: a value's tag carries its RM id through TagRM, for every RM id a
// tag can hold; anything else tags 0, which TagRM refuses.
func TestTag(t *testing.T) {
	for rm := range RM(10) {
		h := Header{RM: rm, Splits: 1, SplitLen: 3, ObjectLen: 3, Version: 7}
		tag := Tag(Encode(&h, []byte("abc")))
		got, ok := TagRM(tag)
		if rm <= maxTagged && (!ok || got != rm || tag > 7) {
			t.Errorf("RM %d: tag %d, TagRM %d %v", rm, tag, got, ok)
		}
		if rm > maxTagged && (tag != 0 || ok) {
			t.Errorf("RM %d: tag %d, TagRM %v", rm, tag, ok)
		}
	}
	enc := Encode(&Header{RM: RMReplication, Splits: 1, SplitLen: 1, ObjectLen: 1, Version: 1}, []byte("x"))
	for _, b := range [][]byte{nil, enc[:HeaderLen-1], append([]byte("XV"), enc[2:]...), append([]byte{'K', 'V', Version + 1}, enc[3:]...)} {
		if tag := Tag(b); tag != 0 {
			t.Errorf("%q: tag %d, want 0", b, tag)
		}
	}
	if _, ok := TagRM(0); ok {
		t.Error("TagRM(0) says known")
	}
}
