package array

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

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
//	20  1    flags (flagMixed, flagRebuilding)
//
// The position makes the circular device order part of the array's
// identity: placement depends on it, so a shuffled order must be refused.
var headerKey = format.Key([]byte("kvarray"), 0, format.KindArray)

const (
	headerPayloadLen = 21
	// flagMixed: a store has used a per-call mechanism on a standalone
	// array, so standalone stores must read before writing from then on
	// (another mechanism's pieces may need cleaning up).
	flagMixed = 1 << 0
	// flagRebuilding: this device was swapped in and is not yet rebuilt
	// (a per-device flag: a not-found from it proves nothing).
	flagRebuilding = 1 << 1
)

// ID identifies an array.
type ID [16]byte

func (id ID) String() string { return hex.EncodeToString(id[:]) }

type header struct {
	id    ID
	n     int
	pos   int
	flags byte
}

func (h header) encode() []byte {
	p := make([]byte, headerPayloadLen)
	copy(p, h.id[:])
	binary.LittleEndian.PutUint16(p[16:], uint16(h.n))
	binary.LittleEndian.PutUint16(p[18:], uint16(h.pos))
	p[20] = h.flags
	fh := format.Header{RM: format.RMNone, Splits: 1, SplitLen: uint32(len(p)), ObjectLen: uint64(len(p))}
	return format.Encode(&fh, p)
}

func decodeHeader(b []byte) (header, error) {
	v, err := format.Decode(b)
	if err != nil {
		return header{}, err
	}
	if v.RM != format.RMNone || len(v.Payload) != headerPayloadLen {
		return header{}, fmt.Errorf("%w: array header of %d bytes", format.ErrCorrupt, len(v.Payload))
	}
	var h header
	copy(h.id[:], v.Payload)
	h.n = int(binary.LittleEndian.Uint16(v.Payload[16:]))
	h.pos = int(binary.LittleEndian.Uint16(v.Payload[18:]))
	h.flags = v.Payload[20]
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
	arr := header{id: id, n: env.N()}
	var bad []error
	for i := range hs {
		switch {
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
		default:
			arr.flags |= hs[i].flags &^ flagRebuilding
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
