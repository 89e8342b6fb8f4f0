// Package device defines the Device interface that kvarray builds its array
// on: a small key-value API modelled on the KV-SSD command set (store,
// retrieve, delete, exist, ordered key iteration, info), plus a batched path
// so that remote and emulated devices can pipeline.
//
// Contract for every implementation:
//
//   - All methods are safe for concurrent use and take a context; a context
//     that is done makes the call return its error without side effects
//     having been acknowledged.
//   - Buffers passed in (keys, values) are owned by the caller and are not
//     retained after the call returns. Buffers returned (Retrieve's value) are
//     owned by the caller. Keys handed to an iteration callback are valid only
//     during that callback.
//   - Errors are the sentinels below, wrapped with detail: callers branch with
//     errors.Is. A device never retries silently; the array decides.
//   - Store is an upsert. Delete of a missing key succeeds (deletes are
//     idempotent, so that cleanup after a partial write can simply be rerun).
package device

import (
	"context"
	"errors"
	"fmt"
)

// Sentinel errors. Implementations wrap them with detail.
var (
	// ErrNotFound: the key does not exist on the device.
	ErrNotFound = errors.New("not found")
	// ErrKeyTooLong: the key is longer than Info.MaxKeyLen.
	ErrKeyTooLong = errors.New("key too long")
	// ErrKeyTooShort: the key is shorter than Info.MinKeyLen.
	ErrKeyTooShort = errors.New("key too short")
	// ErrValueTooLarge: the value is larger than Info.MaxValueLen.
	ErrValueTooLarge = errors.New("value too large")
	// ErrNoSpace: storing the value would exceed the device capacity.
	ErrNoSpace = errors.New("device full")
	// ErrFull: the device takes no writes at all until space is freed (a
	// file system out of space, a Redis server at its maxmemory): unlike
	// ErrNoSpace alone, which refuses one value, it says the device is
	// read-only-full. Reads are still served. Errors wrapping it wrap
	// ErrNoSpace too.
	ErrFull = errors.New("no space left")
	// ErrReopen: space is back on a device that went read-only-full, but
	// this device object cannot write again: it must be opened anew
	// (SpaceProber).
	ErrReopen = errors.New("space is back: the device must be opened again")
	// ErrDeviceFailed: the device cannot serve requests (failed, closed,
	// unreachable, timed out). Nothing about the key can be concluded.
	ErrDeviceFailed = errors.New("device failed")
	// ErrCorrupt: the device returned data that fails verification.
	ErrCorrupt = errors.New("corrupt")
)

// Info describes a device: its limits and its accounting. Used and Keys
// are exact on mem and redis devices and estimates on pebble devices,
// which keep no count of their own (see each package's doc).
type Info struct {
	Name        string // spec or name, for messages: "mem:dev0", "pebble:/data/dev0"
	Capacity    int64  // bytes; 0 means unlimited
	Used        int64  // bytes of keys and values stored (logical; pebble: on disk)
	Keys        int64  // number of keys stored
	MinKeyLen   int
	MaxKeyLen   int
	MaxValueLen int
	// Ordered reports whether Iterate yields keys in ascending byte order.
	Ordered bool
}

// Device is one key-value device.
type Device interface {
	// Store writes value under key, replacing any previous value.
	Store(ctx context.Context, key, value []byte) error
	// Retrieve returns the value stored under key, or ErrNotFound.
	Retrieve(ctx context.Context, key []byte) ([]byte, error)
	// Delete removes key; deleting a missing key is not an error.
	Delete(ctx context.Context, key []byte) error
	// Exist reports whether key is stored.
	Exist(ctx context.Context, key []byte) (bool, error)
	// Iterate calls fn for each key that starts with prefix (in ascending
	// order when Info().Ordered). The key passed to fn is only valid during
	// the call. A non-nil error from fn stops the iteration and is returned.
	// Keys stored or deleted during the iteration may or may not be seen.
	Iterate(ctx context.Context, prefix []byte, fn func(key []byte) error) error
	// Batch executes ops, filling in each op's result. The ops are
	// independent: a failing op does not stop the others, and no ordering or
	// atomicity across ops is promised, except that ops on the same key are
	// applied in slice order. Batch itself returns an error only when the
	// whole batch could not be attempted (e.g. the device failed); then every
	// op's Err is set too.
	Batch(ctx context.Context, ops []Op) error
	// Info returns the device's limits and accounting.
	Info(ctx context.Context) (Info, error)
	// Close releases the device. Calls after Close return ErrDeviceFailed.
	Close() error
}

// OpKind is the kind of one batched operation.
type OpKind uint8

// The batched operations.
const (
	OpStore OpKind = iota + 1
	OpRetrieve
	OpDelete
	OpExist
)

func (k OpKind) String() string {
	switch k {
	case OpStore:
		return "store"
	case OpRetrieve:
		return "retrieve"
	case OpDelete:
		return "delete"
	case OpExist:
		return "exist"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Op is one operation of a batch. Kind, Key and (for OpStore) Value are
// inputs; Result, Found and Err are outputs.
type Op struct {
	Kind  OpKind
	Key   []byte
	Value []byte // input for OpStore
	// Off and Len, for OpRetrieve with Len > 0, ask for bytes [Off,
	// Off+Len) of the value only (fewer where it ends, none past it: a
	// KV-SSD's retrieve with offset). A device that reads part of a value
	// returns just those bytes and sets Partial; one that cannot returns
	// the whole value and leaves Partial false, and the caller slices
	// (mechanism.Env does). Devices without it stay correct.
	Off, Len int

	Result  []byte // output of OpRetrieve
	Found   bool   // output of OpExist (and OpRetrieve: true when Result is valid)
	Partial bool   // output of OpRetrieve: Result is the range Off, Len asked for
	Err     error
}

// RunBatch executes ops one at a time through d's single-op methods. It is
// the Batch implementation of devices that gain nothing from batching.
func RunBatch(ctx context.Context, d Device, ops []Op) error {
	for i := range ops {
		op := &ops[i]
		if err := ctx.Err(); err != nil {
			op.Err = err
			continue
		}
		switch op.Kind {
		case OpStore:
			op.Err = d.Store(ctx, op.Key, op.Value)
		case OpRetrieve:
			op.Result, op.Err = d.Retrieve(ctx, op.Key)
			op.Found = op.Err == nil
		case OpDelete:
			op.Err = d.Delete(ctx, op.Key)
		case OpExist:
			op.Found, op.Err = d.Exist(ctx, op.Key)
		default:
			op.Err = fmt.Errorf("batch op %d: unknown kind %v", i, op.Kind)
		}
	}
	return nil
}

// Limits are the key and value limits every backend enforces, defaulting to
// the Samsung KV SSD's: keys of 4..255 bytes, values up to 2 MiB.
type Limits struct {
	MinKeyLen   int
	MaxKeyLen   int
	MaxValueLen int
}

// Default KV-SSD limits.
const (
	DefaultMinKeyLen   = 4
	DefaultMaxKeyLen   = 255
	DefaultMaxValueLen = 2 << 20
)

// DefaultLimits returns the KV-SSD limits.
func DefaultLimits() Limits {
	return Limits{MinKeyLen: DefaultMinKeyLen, MaxKeyLen: DefaultMaxKeyLen, MaxValueLen: DefaultMaxValueLen}
}

// WithDefaults fills zero fields with the defaults.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MinKeyLen == 0 {
		l.MinKeyLen = d.MinKeyLen
	}
	if l.MaxKeyLen == 0 {
		l.MaxKeyLen = d.MaxKeyLen
	}
	if l.MaxValueLen == 0 {
		l.MaxValueLen = d.MaxValueLen
	}
	return l
}

// CheckKey returns ErrKeyTooShort or ErrKeyTooLong, wrapped with the sizes,
// when key is outside the limits.
func (l Limits) CheckKey(key []byte) error {
	if len(key) < l.MinKeyLen {
		return fmt.Errorf("key of %d bytes, minimum %d: %w", len(key), l.MinKeyLen, ErrKeyTooShort)
	}
	if len(key) > l.MaxKeyLen {
		return fmt.Errorf("key of %d bytes, maximum %d: %w", len(key), l.MaxKeyLen, ErrKeyTooLong)
	}
	return nil
}

// CheckValue returns ErrValueTooLarge, wrapped with the sizes, when value is
// over the limit.
func (l Limits) CheckValue(value []byte) error {
	if len(value) > l.MaxValueLen {
		return fmt.Errorf("value of %d bytes, maximum %d: %w", len(value), l.MaxValueLen, ErrValueTooLarge)
	}
	return nil
}

// SpaceProber is an optional interface of devices that know better than
// a trial write whether they have space again after ErrFull: nil once
// writes would be taken, an error wrapping ErrFull while not, or one
// wrapping ErrReopen when the space is back but the device object stays
// read-only (a Pebble instance that met ENOSPC), so that its owner opens
// it again. A device without it is probed by a small write.
type SpaceProber interface {
	ProbeSpace(ctx context.Context) error
}

// AsSpaceProber returns the SpaceProber under d's decorators (each
// exposing Unwrap() Device), if any.
func AsSpaceProber(d Device) (SpaceProber, bool) {
	for d != nil {
		if p, ok := d.(SpaceProber); ok {
			return p, true
		}
		u, ok := d.(interface{ Unwrap() Device })
		if !ok {
			return nil, false
		}
		d = u.Unwrap()
	}
	return nil, false
}

// Deferred is an optional interface of devices whose writes can be made
// durable in bulk: a writer that can redo its writes after a crash (a
// rebuild, which resumes from its checkpoint) applies many batches
// without waiting for each to reach the disk, then syncs once.
type Deferred interface {
	// BatchDeferred is Batch, except that its writes may be lost in a
	// crash until a later Sync returns, and may stay invisible to reads
	// until then (a bulk load). Writes are durable in the order they were
	// applied: a crash never keeps a later write and loses an earlier
	// one; a write of the ordinary path (Store, Delete, Batch) after a
	// deferred one of the same key wins. Concurrent calls need no
	// batching by their callers: the device gathers them (a Pebble
	// device collects stores for a bulk load, with no commit per call).
	BatchDeferred(ctx context.Context, ops []Op) error
	// Sync makes every write applied before it durable.
	Sync(ctx context.Context) error
}

// gatheredKey marks a context Gathered.
type gatheredKey struct{}

// Gathered returns ctx marked as carrying writes their caller has already
// gathered into one batch (a list's group commit: server/listgroup.go). A
// device that waits for more writers to join a synced commit (Pebble's
// linger: device/pebble/commit.go) stops waiting when such a write joins:
// the batch it would wait for is the one that has just arrived.
func Gathered(ctx context.Context) context.Context {
	return context.WithValue(ctx, gatheredKey{}, true)
}

// IsGathered reports whether ctx was marked by Gathered.
func IsGathered(ctx context.Context) bool {
	v, _ := ctx.Value(gatheredKey{}).(bool)
	return v
}
