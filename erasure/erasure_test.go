package erasure

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// geometries is the (k, r) matrix the tests run over.
var geometries = [][2]int{
	{1, 0}, {1, 1}, {1, 2}, {2, 1}, {3, 0}, {3, 2}, {4, 1}, {4, 2}, {4, 3}, {6, 3}, {8, 4}, {10, 4}, {17, 3},
}

var sizes = []int{0, 1, 2, 3, 7, 63, 64, 65, 1000, 4096, 65536 + 3}

// split encodes value into a fresh set of shards and returns them.
func split(t testing.TB, c Codec, value []byte) [][]byte {
	t.Helper()
	s := c.ShardSize(len(value))
	if s < 1 || s*c.K() < len(value) {
		t.Fatalf("ShardSize(%d) = %d for k=%d", len(value), s, c.K())
	}
	buf := make([]byte, s*(c.K()+c.R()))
	copy(buf, value)
	shards := make([][]byte, c.K()+c.R())
	for i := range shards {
		shards[i] = buf[i*s : (i+1)*s : (i+1)*s]
	}
	if err := c.Encode(shards); err != nil {
		t.Fatal(err)
	}
	return shards
}

func join(c Codec, shards [][]byte, n int) []byte {
	var out []byte
	for _, s := range shards[:c.K()] {
		out = append(out, s...)
	}
	return out[:n]
}

func lookup(t testing.TB, k, r int) Codec {
	t.Helper()
	c, err := Lookup(ReedSolomon, k, r)
	if err != nil {
		t.Fatal(err)
	}
	if c.K() != k || c.R() != r {
		t.Fatalf("Lookup(%d, %d) gave k=%d r=%d", k, r, c.K(), c.R())
	}
	return c
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// combinations calls fn with every subset of {0..n-1} of size ≤ max.
func combinations(n, most int, fn func(lost []int)) {
	var rec func(start int, cur []int)
	rec = func(start int, cur []int) {
		fn(cur)
		if len(cur) == most {
			return
		}
		for i := start; i < n; i++ {
			rec(i+1, append(cur, i))
		}
	}
	rec(0, nil)
}

func TestRoundTrip(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for _, g := range geometries {
		k, r := g[0], g[1]
		for _, n := range sizes {
			if testing.Short() && n > 4096 {
				continue
			}
			t.Run(fmt.Sprintf("%dx%d/%d", k, r, n), func(t *testing.T) {
				c := lookup(t, k, r)
				value := randomBytes(rng, n)
				shards := split(t, c, value)
				if ok, err := c.Verify(shards); err != nil || !ok {
					t.Fatalf("verify after encode: %v %v", ok, err)
				}
				if got := join(c, shards, n); !bytes.Equal(got, value) {
					t.Fatal("data shards do not hold the value")
				}
				combinations(k+r, r, func(lost []int) {
					work := make([][]byte, len(shards))
					copy(work, shards)
					for _, i := range lost {
						// Alternate nil and zero-length-with-capacity: both
						// mean missing.
						if i%2 == 0 {
							work[i] = nil
						} else {
							work[i] = make([]byte, 0, len(shards[i]))
						}
					}
					if err := c.Reconstruct(work); err != nil {
						t.Fatalf("lost %v: %v", lost, err)
					}
					for i := range work {
						if !bytes.Equal(work[i], shards[i]) {
							t.Fatalf("lost %v: shard %d differs after reconstruction", lost, i)
						}
					}
				})
			})
		}
	}
}

func TestTooManyLost(t *testing.T) {
	for _, g := range geometries {
		k, r := g[0], g[1]
		t.Run(fmt.Sprintf("%dx%d", k, r), func(t *testing.T) {
			c := lookup(t, k, r)
			shards := split(t, c, bytes.Repeat([]byte("kvarray"), 100))
			combinations(k+r, r+1, func(lost []int) {
				if len(lost) != r+1 {
					return
				}
				work := make([][]byte, len(shards))
				copy(work, shards)
				for _, i := range lost {
					work[i] = nil
				}
				if err := c.Reconstruct(work); !errors.Is(err, ErrTooFewShards) {
					t.Fatalf("lost %v of %d+%d: got %v, want ErrTooFewShards", lost, k, r, err)
				}
			})
		})
	}
}

// TestGoldenParity pins what ReedSolomon computes: parity already on disk
// must reconstruct after any upgrade, so a change of matrix or library
// behaviour must fail here, not in the field.
func TestGoldenParity(t *testing.T) {
	for _, tc := range []struct {
		k, r   int
		parity []string
	}{
		{4, 2, []string{"e09d9a7820fed635", "a2f2f57d68469ead"}},
		{3, 3, []string{"493037dec5ecd3fa", "e14f48ab2044d68f", "d90700f3683c9ed7"}},
	} {
		c := lookup(t, tc.k, tc.r)
		value := make([]byte, tc.k*8)
		for i := range value {
			value[i] = byte(i*7 + 1)
		}
		shards := split(t, c, value)
		for i, want := range tc.parity {
			if got := fmt.Sprintf("%x", shards[tc.k+i]); got != want {
				t.Errorf("%dx%d parity %d = %s, want %s", tc.k, tc.r, i, got, want)
			}
		}
	}
}

func TestVerifyDetectsChange(t *testing.T) {
	c := lookup(t, 4, 2)
	shards := split(t, c, bytes.Repeat([]byte{7}, 1000))
	for i := range shards {
		shards[i][3] ^= 1
		if ok, err := c.Verify(shards); err != nil || ok {
			t.Fatalf("flip in shard %d: verify = %v, %v", i, ok, err)
		}
		shards[i][3] ^= 1
	}
}

func TestShardSize(t *testing.T) {
	c := lookup(t, 4, 2)
	for n, want := range map[int]int{0: 1, 1: 1, 4: 1, 5: 2, 4096: 1024, 4097: 1025} {
		if got := c.ShardSize(n); got != want {
			t.Errorf("ShardSize(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestLookup(t *testing.T) {
	a, _ := Lookup(ReedSolomon, 4, 2)
	b, _ := Lookup(ReedSolomon, 4, 2)
	if a != b {
		t.Error("codecs are not cached")
	}
	if _, err := Lookup(0, 4, 2); !errors.Is(err, ErrUnknownCodec) {
		t.Errorf("id 0: %v", err)
	}
	if _, err := Lookup(99, 4, 2); !errors.Is(err, ErrUnknownCodec) {
		t.Errorf("id 99: %v", err)
	}
	for _, g := range [][2]int{{0, 2}, {-1, 0}, {4, -1}, {200, 57}, {256, 1}} {
		if _, err := Lookup(ReedSolomon, g[0], g[1]); !errors.Is(err, ErrGeometry) {
			t.Errorf("k=%d r=%d: %v", g[0], g[1], err)
		}
	}
	if _, err := Lookup(ReedSolomon, 200, 56); err != nil {
		t.Errorf("k+r = 256: %v", err)
	}
}

func TestEncodeRejectsBadShards(t *testing.T) {
	c := lookup(t, 4, 2)
	if err := c.Encode(make([][]byte, 5)); err == nil {
		t.Error("5 shards for 4+2 accepted")
	}
	shards := make([][]byte, 6)
	for i := range shards {
		shards[i] = make([]byte, 8+i%2)
	}
	if err := c.Encode(shards); err == nil {
		t.Error("shards of unequal sizes accepted")
	}
}

func TestConcurrentLookup(t *testing.T) {
	done := make(chan Codec)
	for i := 0; i < 8; i++ {
		go func() {
			c, err := Lookup(ReedSolomon, 5, 3)
			if err != nil {
				t.Error(err)
			}
			done <- c
		}()
	}
	first := <-done
	for i := 1; i < 8; i++ {
		if c := <-done; c != first {
			t.Error("concurrent lookups built different codecs")
		}
	}
}

// FuzzReconstruct encodes arbitrary data with a fuzzed geometry, drops up to
// r shards chosen by the fuzzer and checks the rebuild is byte-exact.
func FuzzReconstruct(f *testing.F) {
	f.Add([]byte("hello, kvarray"), uint8(4), uint8(2), uint64(0b11))
	f.Add([]byte{}, uint8(1), uint8(0), uint64(0))
	f.Add([]byte{0xff}, uint8(3), uint8(3), uint64(0b101010))
	f.Fuzz(func(t *testing.T, data []byte, kb, rb uint8, drop uint64) {
		k := 1 + int(kb)%20
		r := int(rb) % 8
		c := lookup(t, k, r)
		shards := split(t, c, data)
		want := make([][]byte, len(shards))
		for i := range shards {
			want[i] = bytes.Clone(shards[i])
		}
		rng := rand.New(rand.NewPCG(drop, uint64(len(data))))
		dropped := 0
		for _, i := range rng.Perm(k + r) {
			if dropped == r || drop&(1<<(i%64)) == 0 {
				continue
			}
			shards[i] = nil
			dropped++
		}
		if err := c.Reconstruct(shards); err != nil {
			t.Fatalf("%d+%d, %d dropped: %v", k, r, dropped, err)
		}
		for i := range shards {
			if !bytes.Equal(shards[i], want[i]) {
				t.Fatalf("%d+%d: shard %d differs", k, r, i)
			}
		}
		if got := join(c, shards, len(data)); !bytes.Equal(got, data) {
			t.Fatal("reassembled value differs")
		}
	})
}

var benchSizes = []struct {
	name string
	n    int
}{{"1KiB", 1 << 10}, {"4KiB", 4 << 10}, {"16KiB", 16 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}}

// BenchmarkEncode is the codec's own speed for a k=4, r=2 split: the
// baseline the Splitting mechanism's overhead is measured against.
func BenchmarkEncode(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) { benchCodec(b, s.n, false) })
	}
}

// BenchmarkReconstruct rebuilds two lost data shards (the worst case for
// 4+2: both must be decoded, not just re-encoded).
func BenchmarkReconstruct(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) { benchCodec(b, s.n, true) })
	}
}

func benchCodec(b *testing.B, n int, reconstruct bool) {
	c := lookup(b, 4, 2)
	shards := split(b, c, randomBytes(rand.New(rand.NewPCG(1, 2)), n))
	work := make([][]byte, len(shards))
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		if !reconstruct {
			if err := c.Encode(shards); err != nil {
				b.Fatal(err)
			}
			continue
		}
		copy(work, shards)
		work[0], work[2] = shards[0][:0], shards[2][:0]
		if err := c.Reconstruct(work); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLookup(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Lookup(ReedSolomon, 4, 2); err != nil {
			b.Fatal(err)
		}
	}
}

// TestUpdateMatchesEncode: patching parity with Update gives the parity a
// full Encode of the new data gives.
func TestUpdateMatchesEncode(t *testing.T) {
	for _, g := range [][2]int{{4, 2}, {1, 1}, {6, 3}} {
		c, err := Lookup(ReedSolomon, g[0], g[1])
		if err != nil {
			t.Fatal(err)
		}
		const size = 100
		shards := make([][]byte, g[0]+g[1])
		for i := range shards {
			shards[i] = make([]byte, size)
			if i < g[0] {
				for j := range shards[i] {
					shards[i][j] = byte(i*31 + j)
				}
			}
		}
		if err := c.Encode(shards); err != nil {
			t.Fatal(err)
		}
		slot := g[0] - 1
		fresh := make([]byte, size)
		for j := range fresh {
			fresh[j] = byte(7*j + 3)
		}
		newData := make([][]byte, g[0])
		newData[slot] = fresh
		patched := make([][]byte, len(shards))
		for i := range shards {
			patched[i] = append([]byte(nil), shards[i]...)
		}
		if err := c.Update(patched, newData); err != nil {
			t.Fatal(err)
		}
		want := make([][]byte, len(shards))
		for i := range shards {
			want[i] = append([]byte(nil), shards[i]...)
		}
		want[slot] = fresh
		if err := c.Encode(want); err != nil {
			t.Fatal(err)
		}
		for j := g[0]; j < len(shards); j++ {
			if string(patched[j]) != string(want[j]) {
				t.Fatalf("%dx%d: parity %d after Update differs from Encode", g[0], g[1], j)
			}
		}
	}
}
