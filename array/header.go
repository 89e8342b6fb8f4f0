package array

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// The array header is stored on every device under headerKey, framed as a
// format value (so it is checksummed like everything else) whose payload is:
//
//	off size field
//	0   16   array id (random at creation)
//	16  2    device count N
//	18  2    this device's position
//	20  1    flags (flagMixed, flagRebuilding, flagBanked, ...)
//	21  8    epoch: the array's epoch when this header was written
//	29  8·N  per device, the newest epoch this device knows that device's
//	         own header to hold
//	29+8·N   8·N  per device, its placement weight (weighted arrays
//	              only, see placement.go; absent: unweighted placement)
//	end-16   8    tiny values (flagTiny only, see tiny.go): largest tiny
//	              value (4 bytes), bucket count (4 bytes); the last 8
//	              bytes without a clock lease
//	last     8    clock lease (flagClock only): a version the process
//	              that wrote it issues none at or above
//
// The position makes the circular device order part of the array's
// identity: placement depends on it, so a shuffled order must be refused.
//
// Epochs catch a device put back from an older copy (a disk back from
// the shelf, a directory restored from a backup): it would otherwise
// serve the values it held then as current, since the array wrote them
// successfully and no resync record says it missed anything. Every open
// and every close advances the epoch and writes it, in two rounds, to the
// devices that answer: first the new epoch, then, to the devices that
// took it, the vector recording that they did. At open, a device whose
// own epoch is older than what another device records for it is a stale
// copy: it is failed with the reason, never resynced (Resync refuses it),
// and must be replaced and rebuilt. A device that was merely down keeps
// the epoch the others recorded for it and is resynced from the records
// as before. Headers of 21 bytes (before epochs) read as epoch 0.
//
// The clock lease keeps versions moving forward across processes. The
// version clock (mechanism.Env.Clock) follows the wall clock, which may
// stand still across a quick restart or go back (a VM migrated, NTP),
// and an older version must never win over a newer one: a piece, a
// Packing set's parity and its log entries are ordered by version, and
// Packing's logged updates do not read the parity they chain to. So open
// observes the greatest lease any header holds before anything issues a
// version, and writes a new lease, leaseSpan ahead, renewed in the
// background while the array runs (Array.renewLease) and brought down to
// the last version issued at close.
//
// The weights are written at creation and never change: placement depends
// on them as on the order. Code from before weights reads a weighted
// header as corrupt and so refuses the array rather than misplace keys.
var headerKey = format.Key([]byte("kvarray"), 0, format.KindArray)

const (
	headerPayloadLen = 21 // without epochs; with them, 29 + 8·N
	// flagMixed: a store has used a per-call mechanism on a standalone
	// array, so standalone stores must read before writing from then on
	// (another mechanism's pieces may need cleaning up).
	flagMixed = 1 << 0
	// flagRebuilding: this device was swapped in and is not yet rebuilt
	// (a per-device flag: a not-found from it proves nothing).
	flagRebuilding = 1 << 1
	// flagBanked: splits 1.. of a huge value are written out of place, in
	// the bank its version selects (see Array.splitKey). Arrays created
	// before banks keep writing huge values in place.
	flagBanked = 1 << 2
	// flagUnprotected: a value was stored with a mechanism that tolerates
	// no loss (Hashing). Until then, a key no answering device holds
	// while its primary is down is known to be absent.
	flagUnprotected = 1 << 3
	// flagClock: the header ends with a clock lease. Per header, not
	// array-wide.
	flagClock = 1 << 4
	// flagTiny: values up to a size live in buckets (tiny.go); the
	// header holds the tiny geometry, which never changes. Code from
	// before tiny values reads such a header as corrupt (its length does
	// not match), so it refuses the array rather than miss its values.
	flagTiny = 1 << 5
	// flagOpen: a process has the array open. Open sets it and Close
	// clears it, unless the array opened with it set and no scrub
	// --repair has completed since: then the process before did not
	// close it, and the writes it had in flight may have landed on too
	// few devices (the write hole, docs/ARCHITECTURE.md "Known limits")
	// until a scrub settles them (Array.Unclean). Code from before it
	// carries the bit along unread.
	flagOpen = 1 << 6
)

// leaseSpan is how far ahead of the clock a lease is written; it is
// renewed once the clock is within half of it.
const leaseSpan = time.Minute

// tinyTrailerLen is the tiny geometry's size in the header.
const tinyTrailerLen = 8

// ID identifies an array.
type ID [16]byte

func (id ID) String() string { return hex.EncodeToString(id[:]) }

type header struct {
	id    ID
	n     int
	pos   int
	flags byte
	epoch uint64
	vec   []uint64 // len n, or nil in a header from before epochs
	// weights of the devices' placement, len n; nil: unweighted (and in
	// every header from before weights)
	weights []uint64
	// tiny geometry (flagTiny): values of at most tinyMax bytes live in
	// tinyBuckets buckets
	tinyMax, tinyBuckets uint32
	// clock: a version lease (see the layout); 0 in headers from before.
	clock uint64
}

// ErrStaleCopy: a device holds an older copy of its contents than the
// array last wrote to it.
var ErrStaleCopy = errors.New("restored from an older copy")

func (h header) encode() []byte {
	p := make([]byte, headerPayloadLen, headerPayloadLen+8+8*len(h.vec))
	copy(p, h.id[:])
	binary.LittleEndian.PutUint16(p[16:], uint16(h.n))
	binary.LittleEndian.PutUint16(p[18:], uint16(h.pos))
	p[20] = h.flags
	if h.vec != nil {
		p = binary.LittleEndian.AppendUint64(p, h.epoch)
		for _, e := range h.vec {
			p = binary.LittleEndian.AppendUint64(p, e)
		}
		for _, w := range h.weights {
			p = binary.LittleEndian.AppendUint64(p, w)
		}
	}
	if h.flags&flagTiny != 0 {
		p = binary.LittleEndian.AppendUint32(p, h.tinyMax)
		p = binary.LittleEndian.AppendUint32(p, h.tinyBuckets)
	}
	if h.clock != 0 {
		p[20] |= flagClock
		p = binary.LittleEndian.AppendUint64(p, h.clock)
	}
	fh := format.Header{RM: format.RMNone, Splits: 1, SplitLen: uint32(len(p)), ObjectLen: uint64(len(p))}
	return format.Encode(&fh, p)
}

func decodeHeader(b []byte) (header, error) {
	v, err := format.Decode(b)
	if err != nil {
		return header{}, err
	}
	if v.RM != format.RMNone || len(v.Payload) < headerPayloadLen {
		return header{}, fmt.Errorf("%w: array header of %d bytes", format.ErrCorrupt, len(v.Payload))
	}
	var h header
	copy(h.id[:], v.Payload)
	h.n = int(binary.LittleEndian.Uint16(v.Payload[16:]))
	h.pos = int(binary.LittleEndian.Uint16(v.Payload[18:]))
	h.flags = v.Payload[20] &^ flagClock
	rest := v.Payload[headerPayloadLen:]
	if v.Payload[20]&flagClock != 0 {
		if len(rest) < 8 {
			return header{}, fmt.Errorf("%w: array header of %d bytes with a clock lease", format.ErrCorrupt, len(v.Payload))
		}
		h.clock = binary.LittleEndian.Uint64(rest[len(rest)-8:])
		rest = rest[:len(rest)-8]
	}
	if h.flags&flagTiny != 0 {
		if len(rest) < tinyTrailerLen {
			return header{}, fmt.Errorf("%w: array header of %d bytes with tiny values", format.ErrCorrupt, len(v.Payload))
		}
		t := rest[len(rest)-tinyTrailerLen:]
		h.tinyMax, h.tinyBuckets = binary.LittleEndian.Uint32(t), binary.LittleEndian.Uint32(t[4:])
		if h.tinyBuckets == 0 {
			return header{}, fmt.Errorf("%w: array header with tiny values in 0 buckets", format.ErrCorrupt)
		}
		rest = rest[:len(rest)-tinyTrailerLen]
	}
	if len(rest) > 0 {
		if len(rest) != 8+8*h.n && len(rest) != 8+16*h.n {
			return header{}, fmt.Errorf("%w: array header of %d bytes for %d devices", format.ErrCorrupt, len(v.Payload), h.n)
		}
		h.epoch = binary.LittleEndian.Uint64(rest)
		h.vec = make([]uint64, h.n)
		for j := range h.vec {
			h.vec[j] = binary.LittleEndian.Uint64(rest[8+8*j:])
		}
		if len(rest) == 8+16*h.n {
			h.weights = make([]uint64, h.n)
			for j := range h.weights {
				h.weights[j] = binary.LittleEndian.Uint64(rest[8+8*h.n+8*j:])
			}
		}
	}
	return h, nil
}

func newID() ID {
	var id ID
	_, _ = rand.Read(id[:])
	return id
}

// readHeaders reads every device's array header.
func readHeaders(ctx context.Context, env *mechanism.Env) ([]header, []error) {
	devs := make([]int, env.N())
	ops := make([]mechanism.Op, env.N())
	for i := range devs {
		ops[i] = mechanism.Op{Dev: i, Op: device.Op{Kind: device.OpRetrieve, Key: headerKey}}
	}
	env.Do(ctx, ops)
	hs := make([]header, env.N())
	errs := make([]error, env.N())
	for i := range ops {
		if ops[i].Err != nil {
			errs[i] = ops[i].Err
			continue
		}
		hs[i], errs[i] = decodeHeader(ops[i].Result)
		if errs[i] != nil {
			errs[i] = fmt.Errorf("device %d (%s): array header: %w", i, env.Name(i), errs[i])
		}
	}
	return hs, errs
}

// verifyHeaders checks that the devices form one array in the configured
// order. It returns the array's header (with pos unset and array-wide
// flags only) and, per device, why it cannot serve (nil when it can); it
// marks devices whose header says they are being rebuilt. Foreign and
// shuffled devices are an error: serving with them would misplace data.
func verifyHeaders(ctx context.Context, env *mechanism.Env) (header, []error, error) {
	hs, errs := readHeaders(ctx, env)
	votes := map[ID]int{}
	for i := range hs {
		if errs[i] == nil {
			votes[hs[i].id]++
		}
	}
	var id ID
	best := 0
	tie := false
	for v, n := range votes {
		switch {
		case n > best:
			id, best, tie = v, n, false
		case n == best:
			tie = true
		}
	}
	if best == 0 {
		return header{}, nil, fmt.Errorf("no device holds an array header (is this array initialised?): %w", errors.Join(errs...))
	}
	if tie {
		return header{}, nil, fmt.Errorf("devices hold headers of %d different arrays in equal numbers: cannot tell which array this is", len(votes))
	}
	arr := header{id: id, n: env.N(), vec: make([]uint64, env.N())}
	ref := -1 // the device whose weights the others must record
	for i := range hs {
		if errs[i] == nil && hs[i].id == id && hs[i].n == env.N() {
			if ref < 0 {
				arr.weights, ref = hs[i].weights, i
				arr.tinyMax, arr.tinyBuckets = hs[i].tinyMax, hs[i].tinyBuckets
			}
			arr.epoch = max(arr.epoch, hs[i].epoch)
			arr.clock = max(arr.clock, hs[i].clock)
			for j, e := range hs[i].vec {
				arr.vec[j] = max(arr.vec[j], e)
			}
		}
	}
	for i := range hs {
		if errs[i] == nil && hs[i].id == id && hs[i].epoch < arr.vec[i] {
			errs[i] = fmt.Errorf("device %d (%s) is %w: its header is of epoch %d, the array last wrote epoch %d to it, so it may hold old values; "+
				"remove its data, then replace and rebuild it (kvarray replace %d, kvarray rebuild %d): %w",
				i, env.Name(i), ErrStaleCopy, hs[i].epoch, arr.vec[i], i, i, device.ErrDeviceFailed)
		}
	}
	var bad []error
	for i := range hs {
		switch {
		case errors.Is(errs[i], ErrStaleCopy):
		case errs[i] != nil:
			cause := errs[i]
			var de *mechanism.DeviceError
			if errors.As(cause, &de) {
				cause = de.Err
			}
			if errors.Is(cause, device.ErrNotFound) {
				errs[i] = fmt.Errorf("device %d (%s) holds no array header (empty or replaced device: rebuild it): %w", i, env.Name(i), device.ErrDeviceFailed)
			} else {
				errs[i] = fmt.Errorf("device %d (%s) cannot be read: %w", i, env.Name(i), cause)
			}
		case hs[i].id != id:
			bad = append(bad, fmt.Errorf("device %d (%s) belongs to another array (%s, not %s)", i, env.Name(i), hs[i].id, id))
		case hs[i].n != env.N():
			bad = append(bad, fmt.Errorf("device %d (%s) belongs to an array of %d devices, the config lists %d", i, env.Name(i), hs[i].n, env.N()))
		case hs[i].pos != i:
			bad = append(bad, fmt.Errorf("device %d (%s) holds position %d of array %s: devices are out of order (the config must list them in creation order)", i, env.Name(i), hs[i].pos, id))
		case !slices.Equal(hs[i].weights, arr.weights):
			// Never written so by the array: which weights place the
			// keys cannot be told.
			bad = append(bad, fmt.Errorf("device %d (%s) records placement weights %v, device %d %v", i, env.Name(i), hs[i].weights, ref, arr.weights))
		case hs[i].tinyBuckets != arr.tinyBuckets || hs[i].tinyMax != arr.tinyMax:
			// Likewise: which bucket holds a key cannot be told.
			bad = append(bad, fmt.Errorf("device %d (%s) records tiny values up to %d bytes in %d buckets, device %d up to %d in %d",
				i, env.Name(i), hs[i].tinyMax, hs[i].tinyBuckets, ref, arr.tinyMax, arr.tinyBuckets))
		default:
			arr.flags |= hs[i].flags &^ (flagRebuilding | flagOpen)
			if hs[i].epoch == arr.epoch {
				// What the last open or close wrote: a device that
				// was down then keeps an older open's flag.
				arr.flags |= hs[i].flags & flagOpen
			}
			if hs[i].flags&flagRebuilding != 0 {
				env.SetState(i, mechanism.Rebuilding)
			}
		}
	}
	if len(bad) > 0 {
		return header{}, nil, errors.Join(bad...)
	}
	return arr, errs, nil
}

// advanceEpoch moves the array to a new epoch, written to every device
// not failed (see the layout above). Devices that miss it are failed by
// the write, and keep the older epoch the others record for them.
//
// It writes lease as the headers' clock lease.
func (a *Array) advanceEpoch(ctx context.Context, lease uint64) {
	a.hdrMu.Lock()
	defer a.hdrMu.Unlock()
	h := a.hdr
	h.epoch++
	h.clock = lease
	h.vec = slices.Clone(h.vec)
	if h.vec == nil {
		h.vec = make([]uint64, a.env.N())
	}
	up := a.upDevices()
	_ = writeHeaders(ctx, a.env, h, up)
	var took []int
	for _, i := range up {
		if a.env.Writable(i) {
			took = append(took, i)
			h.vec[i] = h.epoch
		}
	}
	_ = writeHeaders(ctx, a.env, h, took)
	a.hdr = h
}

// renewLease writes a new clock lease, leaseSpan ahead, once the clock is
// within half a span of the current one. A device that misses it keeps
// an older lease, which is fine: open takes the greatest.
func (a *Array) renewLease(ctx context.Context) {
	a.hdrMu.Lock()
	defer a.hdrMu.Unlock()
	if a.env.Clock().Lease(leaseSpan/2) < a.hdr.clock {
		return
	}
	h := a.hdr
	h.clock = a.env.Clock().Lease(leaseSpan)
	up := a.upDevices()
	if writeHeaders(ctx, a.env, h, up) == nil {
		a.hdr = h
	}
}

// upDevices lists the devices writes are sent to: not marked failed or
// full (a full device that took no epoch must not be recorded as having
// taken it, or it would read as restored from an older copy).
func (a *Array) upDevices() []int {
	var up []int
	for i := range a.env.N() {
		if a.env.Writable(i) {
			up = append(up, i)
		}
	}
	return up
}

// writeHeaders writes the array header to the given devices.
func writeHeaders(ctx context.Context, env *mechanism.Env, h header, devs []int) error {
	vals := make([][]byte, len(devs))
	for j, i := range devs {
		hi := h
		hi.pos = i
		if env.State(i) == mechanism.Rebuilding {
			hi.flags |= flagRebuilding
		}
		vals[j] = hi.encode()
	}
	ops := make([]mechanism.Op, len(devs))
	for j, i := range devs {
		ops[j] = mechanism.Op{Dev: i, Op: device.Op{Kind: device.OpStore, Key: headerKey, Value: vals[j]}}
	}
	env.Do(ctx, ops)
	var errs []error
	for i := range ops {
		if ops[i].Err != nil {
			errs = append(errs, ops[i].Err)
		}
	}
	return errors.Join(errs...)
}
