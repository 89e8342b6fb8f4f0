package bench

// Benchmarks of the hot paths that the format and erasure packages do not
// already have (they have format's Encode4K/Decode4K and erasure's
// Encode, Reconstruct and Lookup): internal keys, encode and decode at
// the other sizes, the checksum alone, the placement hash, and parity
// patching. Each reports allocations. Compare two commits with benchstat
// (see the README).
//
//	go test -run '^$' -bench . -benchmem ./bench/ ./format/ ./erasure/

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/kvarray/kvarray/erasure"
	"github.com/kvarray/kvarray/format"
)

var hotSizes = []int{1 << 10, 4 << 10, 64 << 10}

func randomValue(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(n), 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// perSize runs fn as a sub-benchmark per size, with SetBytes and
// ReportAllocs.
func perSize(b *testing.B, sizes []int, fn func(b *testing.B, n int)) {
	for _, n := range sizes {
		b.Run(sizeLabelShort(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			fn(b, n)
		})
	}
}

func sizeLabelShort(n int) string {
	if n >= 1<<10 && n%(1<<10) == 0 {
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

var sink any

func BenchmarkFormatAppendKey(b *testing.B) {
	user := []byte("user:0000000042:profile")
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = format.AppendKey(buf[:0], user, 3, format.KindData)
	}
	sink = buf
}

func BenchmarkFormatParseKey(b *testing.B) {
	k := format.Key([]byte("user:0000000042:profile"), 3, format.KindData)
	b.ReportAllocs()
	for b.Loop() {
		u, s, _, err := format.ParseKey(k)
		if err != nil || s != 3 {
			b.Fatal(u, s, err)
		}
	}
}

// BenchmarkFormatEncode appends header and payload into a reused buffer
// (4 KiB is format's own BenchmarkEncode4K).
func BenchmarkFormatEncode(b *testing.B) {
	perSize(b, []int{1 << 10, 64 << 10}, func(b *testing.B, n int) {
		h := format.Header{RM: format.RMReplication, Splits: 1, SplitLen: uint32(n), ObjectLen: uint64(n), Fields: []byte{3}}
		payload := randomValue(n)
		buf := make([]byte, 0, format.EncodedLen(&h, n))
		for b.Loop() {
			buf = format.Append(buf[:0], &h, payload)
		}
		sink = buf
	})
}

// BenchmarkFormatDecode parses and verifies (the checksum dominates).
func BenchmarkFormatDecode(b *testing.B) {
	perSize(b, []int{1 << 10, 64 << 10}, func(b *testing.B, n int) {
		h := format.Header{RM: format.RMReplication, Splits: 1, SplitLen: uint32(n), ObjectLen: uint64(n), Fields: []byte{3}}
		enc := format.Encode(&h, randomValue(n))
		for b.Loop() {
			if _, err := format.Decode(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkChecksum is the CRC32C (Castagnoli) every value carries, alone.
func BenchmarkChecksum(b *testing.B) {
	table := crc32.MakeTable(crc32.Castagnoli)
	perSize(b, hotSizes, func(b *testing.B, n int) {
		v := randomValue(n)
		var c uint32
		for b.Loop() {
			c = crc32.Update(0, table, v)
		}
		sink = c
	})
}

// BenchmarkPlacement is the array's placement: the xxhash of the user key
// modulo the number of devices, and the internal key of split 0.
func BenchmarkPlacement(b *testing.B) {
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = key(nil, int64(i))
	}
	buf := make([]byte, 0, 64)
	var primary uint64
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := keys[i&1023]
		primary += xxhash.Sum64(k) % 6
		buf = format.AppendKey(buf[:0], k, 0, format.KindData)
		i++
	}
	sink = primary
}

// BenchmarkCodecUpdate patches the parities of a 4+2 stripe for one
// changed data shard, as Packing does on an update (erasure has Encode
// and Reconstruct but no Update benchmark).
func BenchmarkCodecUpdate(b *testing.B) {
	c, err := erasure.Lookup(erasure.ReedSolomon, 4, 2)
	if err != nil {
		b.Fatal(err)
	}
	perSize(b, hotSizes, func(b *testing.B, n int) {
		shards := make([][]byte, 6)
		for i := range shards {
			shards[i] = randomValue(n)
		}
		if err := c.Encode(shards); err != nil {
			b.Fatal(err)
		}
		// Shard 1 alternates between two values (Update overwrites the
		// old shard with the new one), so every iteration patches the
		// same difference without copying.
		a, z := append([]byte(nil), shards[1]...), randomValue(n + 1)[:n]
		toZ, toA := make([][]byte, 4), make([][]byte, 4)
		toZ[1], toA[1] = z, a
		i := 0
		for b.Loop() {
			nd := toZ
			if i&1 == 1 {
				nd = toA
			}
			if err := c.Update(shards, nd); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
