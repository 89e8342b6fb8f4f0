// Package mechanism defines the contract between the array and its
// reliability mechanisms (RMs), and the I/O layer they share.
//
// A mechanism stores one split of a user value: a Key names the user key,
// the split number and the split's primary device. Every mechanism keeps the
// KVMD placement rules, on which the array's stateless lookup depends:
//
//  1. the first piece (copy, shard, member) of a split is on the primary
//     device, stored under the data key format.Key(user, split, KindData);
//  2. every piece starts with a format.Header naming the mechanism, so one
//     read of the primary tells the array which mechanism to ask;
//  3. pieces under the data key only ever occupy the devices at offsets
//     0, 1, ..., Width()-1 of the split's placement (Env.At: Primary,
//     Primary+1, ... mod N on an unweighted array): Width is KVMD's
//     num_user_key, and what a changing mechanism must clean up.
//
// Mechanisms decide what to read and write; Env executes it, concurrently
// across devices, and wraps every error with the device it came from.
package mechanism

import (
	"context"
	"errors"

	"github.com/kvarray/kvarray/format"
)

// ErrDataLoss is returned when too few good pieces of a split remain to
// return its value. The array never returns wrong bytes instead.
var ErrDataLoss = errors.New("data loss")

// Key names one split of a user value and where it lives.
type Key struct {
	User    []byte
	Split   int
	Primary int // index of the split's primary device
	// Point is the split's point on a weighted array's capacity ring
	// (see Placement); with Primary, what Env.At places pieces by.
	Point uint64
	// Want, when non-zero, is the write version the caller expects (the
	// version of split 0 when reading the other splits of a huge value);
	// pieces of other versions are treated as stale.
	Want uint64
}

// Data returns the internal key the split's pieces are stored under.
func (k Key) Data() []byte { return format.Key(k.User, k.Split, format.KindData) }

// Bank returns the internal key of the split's pieces written out of place
// (format.KindBank).
func (k Key) Bank() []byte { return format.Key(k.User, k.Split, format.KindBank) }

// Banked reports whether a mechanism that writes out of place (Splitting)
// puts the piece at offset off from the primary of a write of version v
// under the bank key: every piece but the primary's, when v has bit 1
// set. A store then alternates between the data key and the bank key (the
// array picks its version so), so that an overwrite never touches the
// pieces of the value it replaces but the primary's, and a store cut short
// leaves the old value whole. Bit 1, not bit 0: bit 0 selects the bank of
// a huge value's splits (see array's bankBit), and the two choices are
// made independently.
func Banked(off int, v uint64) bool { return off > 0 && v&BankBit != 0 }

// BankBit is the version bit that Banked tests.
const BankBit = 2

// PieceKey returns the internal key of the piece at offset off from the
// primary of a write of version v by a mechanism that writes out of place.
func (k Key) PieceKey(off int, v uint64) []byte {
	if Banked(off, v) {
		return k.Bank()
	}
	return k.Data()
}

// Object describes the whole user value a split belongs to; Store copies it
// into every piece's header.
type Object struct {
	Splits    uint32
	ObjectLen uint64
	Version   uint64

	// Precommit, when set, is what the caller must do before the store
	// overwrites the primary's piece (the array: release an old Packing
	// member there, which its set may still need). A mechanism that can
	// write its other pieces first calls it once, just before writing
	// the primary's, with ready reporting whether those pieces can be
	// read without that one (then a primary failing under its write costs
	// nothing); an error fails the store with the primary untouched. One
	// that does not call it (Packing) leaves the work to the caller, after
	// the store.
	Precommit func(ctx context.Context, ready bool) error
}

// Prev is what the array knows of the previous value of a split that is
// being overwritten or released: the header of its split 0 (geometry of the
// old object) and, for split 0, the old payload when it was read. Payload
// is nil when it was not read.
type Prev struct {
	Header  format.Header
	Payload []byte
}

// Mechanism is one reliability mechanism bound to the array's devices.
type Mechanism interface {
	// RM is the id written in headers.
	RM() format.RM
	// Name is the name used in configs and messages ("replication").
	Name() string
	// SplitCap is the largest number of user bytes one split holds.
	SplitCap() int
	// Width is the number of consecutive devices, from the primary, that
	// hold pieces under the data key (KVMD's num_user_key).
	Width() int
	// Tolerates is how many failed or corrupt pieces a split survives.
	Tolerates() int

	// Store writes split k of obj. prev is non-nil when the split existed
	// and was written by this same mechanism; the mechanism then also
	// removes whatever the old geometry left beyond the new one.
	Store(ctx context.Context, k Key, obj Object, value []byte, prev *Prev) error
	// Retrieve returns the user bytes of split k and the header they were
	// found with. have holds the pieces the array already read, have[0]
	// being the primary's; the mechanism reads the rest it needs, repairs
	// bad pieces it meets, and returns ErrDataLoss (wrapped) when the split
	// cannot be recovered.
	Retrieve(ctx context.Context, k Key, have []Piece) ([]byte, format.Header, error)
	// Release removes what this mechanism stored for split k, except the
	// data-key pieces on the first keep devices from the primary, which a
	// new value has already overwritten (keep = 0: delete everything).
	// prev describes the value being released: its split 0 header, and
	// the split's old payload when the array read it.
	Release(ctx context.Context, k Key, prev *Prev, keep int) error
	// Repair reads every piece of split k, rewrites missing, corrupt and
	// stale ones, and returns how many pieces it rewrote.
	Repair(ctx context.Context, k Key, hint *format.Header) (int, error)
}

// Factory builds a mechanism over an Env. Mechanism packages export
// constructors returning a Factory, so that configuration (copies, k, r) is
// separate from binding to devices.
type Factory func(env *Env) (Mechanism, error)
