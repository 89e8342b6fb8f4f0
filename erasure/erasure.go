// Package erasure maps the erasure-code id stored in every value header
// (format.EC) to a codec that splits a value into k data shards and r parity
// shards and rebuilds lost shards from any k survivors.
//
// Invariants every Codec keeps:
//
//   - Shards are positional: shards[0:K()] are data, shards[K():K()+R()] are
//     parity, and a shard's index is part of what must be stored with it.
//   - All shards of one encoding have the same length, ShardSize(n) for an
//     n-byte value, which is at least 1: a zero-length shard always means
//     "missing", never "empty value". The value is the concatenation of the
//     data shards truncated to n bytes; the padding is zeros, so the caller
//     must record n to strip it.
//   - An id names an exact on-disk encoding (the generator matrix, not just
//     the family): once released, what an id computes never changes, because
//     parity written years ago must still reconstruct. New variants get new
//     ids.
//   - Codecs are immutable and safe for concurrent use; Lookup caches them
//     per (id, k, r).
//
// Reconstruct trusts every shard that is present: a corrupt one yields
// wrong shards, not an error. Callers verify shards first (kvarray's
// per-piece checksums) and pass corrupt ones as missing.
package erasure

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/klauspost/reedsolomon"

	"github.com/kvarray/kvarray/format"
)

// Registered codec ids. The numbers are part of the on-disk format: never
// reuse one.
const (
	// ReedSolomon is systematic Reed-Solomon over GF(2^8) with
	// klauspost/reedsolomon's default (Vandermonde-derived) matrix, for any
	// k ≥ 1, r ≥ 0, k+r ≤ MaxShards.
	ReedSolomon format.EC = 1
)

// MaxShards is the largest k+r any registered codec supports: the order of
// GF(2^8).
const MaxShards = 256

var (
	// ErrUnknownCodec: the EC id is not registered in this build (a value
	// written by a newer kvarray, or a corrupt header that passed its
	// checksum, which is not expected).
	ErrUnknownCodec = errors.New("unknown erasure code")
	// ErrGeometry: k or r is outside what the codec supports.
	ErrGeometry = errors.New("unsupported erasure code geometry")
	// ErrTooFewShards: fewer than k shards were present to reconstruct
	// from.
	ErrTooFewShards = reedsolomon.ErrTooFewShards
)

// Codec encodes and reconstructs one (k, r) geometry of one code.
type Codec interface {
	// K is the number of data shards.
	K() int
	// R is the number of parity shards.
	R() int
	// ShardSize is the length of every shard of an n-byte value: the
	// smallest size ≥ 1 whose K() shards hold n bytes.
	ShardSize(n int) int
	// Encode fills the R parity shards from the K data shards. All K+R
	// shards must be allocated with the same non-zero length.
	Encode(shards [][]byte) error
	// Reconstruct rebuilds every missing shard (nil or zero-length) from the
	// others, in place when a missing entry has the capacity for it.
	Reconstruct(shards [][]byte) error
	// Verify reports whether the parity shards match the data shards.
	Verify(shards [][]byte) (bool, error)
	// Update rewrites the parity shards shards[K():] in place for data
	// shards that change to newData[i] (nil: unchanged), reading only the
	// old data shards that change, which it overwrites, and the parities:
	// a small write patches parity without reading the rest of the stripe.
	Update(shards, newData [][]byte) error
}

// geometry is a cache key: (id, k, r) packed into one word.
type geometry uint32

func geom(id format.EC, k, r int) geometry {
	return geometry(id)<<24 | geometry(k)<<12 | geometry(r)
}

// cache holds the built codecs in an immutable map that is replaced on
// insert, so the hot path (a hit) is one atomic load and a map lookup,
// without locks or allocations. Few geometries ever exist, so copying the
// map on a miss is cheap.
var (
	cache   atomic.Pointer[map[geometry]Codec]
	cacheMu sync.Mutex // serializes inserts
)

// Lookup returns the codec for id with k data and r parity shards. Unknown
// ids return an error wrapping ErrUnknownCodec, unsupported k or r one
// wrapping ErrGeometry.
func Lookup(id format.EC, k, r int) (Codec, error) {
	if id != ReedSolomon {
		return nil, fmt.Errorf("erasure: code id %d: %w", id, ErrUnknownCodec)
	}
	if k < 1 || r < 0 || k+r > MaxShards {
		return nil, fmt.Errorf("erasure: reed-solomon k=%d r=%d, want k ≥ 1, r ≥ 0, k+r ≤ %d: %w", k, r, MaxShards, ErrGeometry)
	}
	g := geom(id, k, r)
	if m := cache.Load(); m != nil {
		if c, ok := (*m)[g]; ok {
			return c, nil
		}
	}
	cacheMu.Lock()
	defer cacheMu.Unlock()
	old := cache.Load()
	if old != nil {
		if c, ok := (*old)[g]; ok {
			return c, nil
		}
	}
	enc, err := reedsolomon.New(k, r, reedsolomon.WithMinSplitSize(minSplitSize))
	if err != nil {
		return nil, fmt.Errorf("erasure: reed-solomon k=%d r=%d: %w", k, r, err)
	}
	c := &rsCodec{enc: enc, k: k, r: r}
	m := make(map[geometry]Codec, 1)
	if old != nil {
		for g, c := range *old {
			m[g] = c
		}
	}
	m[g] = c
	cache.Store(&m)
	return c, nil
}

// minSplitSize is the shard size below which one Encode or Reconstruct
// stays on its calling goroutine. reedsolomon's default (about L1 size /
// (r+1)) fans a 64 KiB 4+2 split out to goroutines, and waking them costs
// more than the SIMD work they share; kvarray gets its parallelism from
// concurrent requests instead. Measured on 2 cores: 64 KiB encode 7.7 µs
// with the default, 5.9 µs without the fan-out; 1 MiB 101 µs and 86 µs.
const minSplitSize = 1 << 20

// rsCodec adapts a reedsolomon.Encoder. Its options pick the fastest SIMD
// path the CPU has and only tune scheduling: options that change the
// matrix must never be added (see the package invariants).
type rsCodec struct {
	enc  reedsolomon.Encoder
	k, r int
}

func (c *rsCodec) K() int { return c.k }
func (c *rsCodec) R() int { return c.r }

func (c *rsCodec) ShardSize(n int) int {
	// reedsolomon rejects zero-length shard sets, and a zero-length shard
	// would read as missing: an empty value still gets 1-byte shards.
	return max(1, (n+c.k-1)/c.k)
}

func (c *rsCodec) Encode(shards [][]byte) error {
	if err := c.enc.Encode(shards); err != nil {
		return fmt.Errorf("erasure: reed-solomon %d+%d encode of %d shards: %w", c.k, c.r, len(shards), err)
	}
	return nil
}

func (c *rsCodec) Reconstruct(shards [][]byte) error {
	var err error
	if len(shards) == c.k+c.r && present(shards) < c.k {
		// Checked here because reedsolomon reports a set with no shard at
		// all as ErrShardNoData, and callers should need one sentinel.
		err = ErrTooFewShards
	} else {
		err = c.enc.Reconstruct(shards)
	}
	if err != nil {
		return fmt.Errorf("erasure: reed-solomon %d+%d reconstruct from %d of %d shards: %w",
			c.k, c.r, present(shards), len(shards), err)
	}
	return nil
}

func (c *rsCodec) Verify(shards [][]byte) (bool, error) {
	ok, err := c.enc.Verify(shards)
	if err != nil {
		return false, fmt.Errorf("erasure: reed-solomon %d+%d verify: %w", c.k, c.r, err)
	}
	return ok, nil
}

func present(shards [][]byte) int {
	n := 0
	for _, s := range shards {
		if len(s) > 0 {
			n++
		}
	}
	return n
}
