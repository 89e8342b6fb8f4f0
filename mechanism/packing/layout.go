package packing

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/kvarray/kvarray/format"
)

// Roles of a packing piece, the first byte of its RM fields.
const (
	roleMember = 0
	roleParity = 1
)

// kindParity is the internal-key kind of parity objects. Their key's user
// part is setKey(id), so they never collide with user data (KindData).
const kindParity = format.KindMechanism

// setKeyPrefix starts every parity object's key; a device's parities are
// found by iterating it.
var setKeyPrefix = []byte("\x00kvarray-set")

func setKey(id uint64) []byte {
	return format.Key(binary.BigEndian.AppendUint64(append([]byte(nil), setKeyPrefix...), id), 0, kindParity)
}

// geometry is what member and parity pieces both record about their set.
type geometry struct {
	set       uint64
	k, r      int
	shardSize int
	parity    []int // devices of parity 0..r-1
}

// memberFields is a member's RM fields. The roster lists the set's
// members as it was formed (slot, device, key, split; no versions), so
// that the set can be found again from any surviving member even when all
// r parities are lost: members only ever leave a set, and one that left no
// longer claims its slot.
type memberFields struct {
	geometry
	slot   int
	roster []member
}

// member describes one member in a parity's membership list.
type member struct {
	slot      int
	dev       int
	key       []byte
	split     int
	splits    uint32
	splitLen  uint32
	objectLen uint64
	version   uint64
}

// parityFields is a parity's RM fields: the set's geometry and
// membership, the set's metadata carried for free by the r parities.
type parityFields struct {
	geometry
	index   int
	members []member
}

// clone returns a copy of f that shares no memory with it: decoded member
// keys alias the parity they came from.
func (f *parityFields) clone() parityFields {
	own := *f
	own.members = slices.Clone(f.members)
	for i := range own.members {
		own.members[i].key = slices.Clone(own.members[i].key)
	}
	return own
}

// Layout of the geometry (shared prefix, after the role byte):
//
//	0  8  set id
//	8  1  k
//	9  1  r
//	10 4  shard size
//	14 2r parity devices
const geometryLen = 14

func (g *geometry) append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, g.set)
	b = append(b, byte(g.k), byte(g.r))
	b = binary.LittleEndian.AppendUint32(b, uint32(g.shardSize))
	for _, d := range g.parity {
		b = binary.LittleEndian.AppendUint16(b, uint16(d))
	}
	return b
}

func (g *geometry) decode(b []byte) ([]byte, error) {
	if len(b) < geometryLen {
		return nil, fmt.Errorf("%w: packing fields of %d bytes", format.ErrCorrupt, len(b))
	}
	g.set = binary.LittleEndian.Uint64(b)
	g.k, g.r = int(b[8]), int(b[9])
	g.shardSize = int(binary.LittleEndian.Uint32(b[10:]))
	b = b[geometryLen:]
	if g.k == 0 || len(b) < 2*g.r {
		return nil, fmt.Errorf("%w: packing geometry k=%d r=%d in %d bytes", format.ErrCorrupt, g.k, g.r, len(b))
	}
	g.parity = make([]int, g.r)
	for i := range g.parity {
		g.parity[i] = int(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return b[2*g.r:], nil
}

// Member fields: role, geometry, slot, roster count, then per roster
// entry:
//
//	0 1 slot
//	1 2 device
//	3 2 split
//	5 2 key length
//	7   key
const rosterEntryLen = 7

func (f *memberFields) encode() []byte {
	b := append(make([]byte, 0, 64), roleMember)
	b = append(f.geometry.append(b), byte(f.slot), byte(len(f.roster)))
	for _, m := range f.roster {
		b = append(b, byte(m.slot))
		b = binary.LittleEndian.AppendUint16(b, uint16(m.dev))
		b = binary.LittleEndian.AppendUint16(b, uint16(m.split))
		b = binary.LittleEndian.AppendUint16(b, uint16(len(m.key)))
		b = append(b, m.key...)
	}
	return b
}

func decodeMember(b []byte) (memberFields, error) {
	var f memberFields
	if len(b) == 0 || b[0] != roleMember {
		return f, fmt.Errorf("%w: not a packing member", format.ErrCorrupt)
	}
	rest, err := f.geometry.decode(b[1:])
	if err != nil {
		return f, err
	}
	if len(rest) < 2 || int(rest[0]) >= f.k || int(rest[1]) > f.k {
		return f, fmt.Errorf("%w: packing member slot", format.ErrCorrupt)
	}
	f.slot = int(rest[0])
	n := int(rest[1])
	rest = rest[2:]
	for i := 0; i < n; i++ {
		if len(rest) < rosterEntryLen {
			return f, fmt.Errorf("%w: packing roster entry %d", format.ErrCorrupt, i)
		}
		m := member{
			slot:  int(rest[0]),
			dev:   int(binary.LittleEndian.Uint16(rest[1:])),
			split: int(binary.LittleEndian.Uint16(rest[3:])),
		}
		kl := int(binary.LittleEndian.Uint16(rest[5:]))
		rest = rest[rosterEntryLen:]
		if len(rest) < kl || m.slot >= f.k {
			return f, fmt.Errorf("%w: packing roster entry %d", format.ErrCorrupt, i)
		}
		m.key = rest[:kl:kl]
		rest = rest[kl:]
		f.roster = append(f.roster, m)
	}
	if len(rest) != 0 {
		return f, fmt.Errorf("%w: %d bytes after the packing roster", format.ErrCorrupt, len(rest))
	}
	return f, nil
}

// Parity fields: role, geometry, index, member count, then per member:
//
//	0  1  slot
//	1  2  device
//	3  2  split
//	5  4  splits
//	9  4  split length
//	13 8  object length
//	21 8  version
//	29 2  key length
//	31    key
const memberEntryLen = 31

func (f *parityFields) encode() []byte {
	b := append(make([]byte, 0, 256), roleParity)
	b = f.geometry.append(b)
	b = append(b, byte(f.index), byte(len(f.members)))
	for i := range f.members {
		b = appendMember(b, &f.members[i])
	}
	return b
}

// appendMember appends one member entry (the layout above).
func appendMember(b []byte, m *member) []byte {
	b = append(b, byte(m.slot))
	b = binary.LittleEndian.AppendUint16(b, uint16(m.dev))
	b = binary.LittleEndian.AppendUint16(b, uint16(m.split))
	b = binary.LittleEndian.AppendUint32(b, m.splits)
	b = binary.LittleEndian.AppendUint32(b, m.splitLen)
	b = binary.LittleEndian.AppendUint64(b, m.objectLen)
	b = binary.LittleEndian.AppendUint64(b, m.version)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(m.key)))
	return append(b, m.key...)
}

// readMember decodes one member entry of a set of geometry g from the
// start of b and returns the rest. The key aliases b.
func readMember(b []byte, g *geometry) (member, []byte, error) {
	if len(b) < memberEntryLen {
		return member{}, nil, fmt.Errorf("%w: short packing member entry", format.ErrCorrupt)
	}
	m := member{
		slot:      int(b[0]),
		dev:       int(binary.LittleEndian.Uint16(b[1:])),
		split:     int(binary.LittleEndian.Uint16(b[3:])),
		splits:    binary.LittleEndian.Uint32(b[5:]),
		splitLen:  binary.LittleEndian.Uint32(b[9:]),
		objectLen: binary.LittleEndian.Uint64(b[13:]),
		version:   binary.LittleEndian.Uint64(b[21:]),
	}
	kl := int(binary.LittleEndian.Uint16(b[29:]))
	b = b[memberEntryLen:]
	if len(b) < kl || m.slot >= g.k || int(m.splitLen) > g.shardSize {
		return member{}, nil, fmt.Errorf("%w: packing member entry", format.ErrCorrupt)
	}
	m.key = b[:kl:kl]
	return m, b[kl:], nil
}

func decodeParity(b []byte) (parityFields, error) {
	var f parityFields
	if len(b) == 0 || b[0] != roleParity {
		return f, fmt.Errorf("%w: not a packing parity", format.ErrCorrupt)
	}
	rest, err := f.geometry.decode(b[1:])
	if err != nil {
		return f, err
	}
	if len(rest) < 2 {
		return f, fmt.Errorf("%w: packing parity header", format.ErrCorrupt)
	}
	f.index = int(rest[0])
	n := int(rest[1])
	rest = rest[2:]
	if f.index >= f.r || n > f.k {
		return f, fmt.Errorf("%w: packing parity %d of %d with %d members", format.ErrCorrupt, f.index, f.r, n)
	}
	for i := 0; i < n; i++ {
		m, more, err := readMember(rest, &f.geometry)
		if err != nil {
			return f, fmt.Errorf("entry %d: %w", i, err)
		}
		rest = more
		f.members = append(f.members, m)
	}
	if len(rest) != 0 {
		return f, fmt.Errorf("%w: %d bytes after packing members", format.ErrCorrupt, len(rest))
	}
	return f, nil
}

// maxParityFields is the largest parity fields for k members with keys of
// at most maxKey bytes; member fields (whose roster entries are shorter)
// never exceed it.
func maxParityFields(k, r, maxKey int) int {
	return 1 + geometryLen + 2*r + 2 + k*(memberEntryLen+maxKey)
}

// rosterOf strips members down to what a roster records.
func rosterOf(ms []member) []member {
	out := make([]member, len(ms))
	for i, m := range ms {
		out[i] = member{slot: m.slot, dev: m.dev, key: m.key, split: m.split}
	}
	return out
}

// Describe decodes an encoded parity value and returns the devices of its
// set's members and of its parities: for tests and tools that check a
// set's layout from outside.
func Describe(parityValue []byte) (members, parity []int, err error) {
	v, err := format.Decode(parityValue)
	if err != nil {
		return nil, nil, err
	}
	f, err := decodeParity(v.Fields)
	if err != nil {
		return nil, nil, err
	}
	for _, m := range f.members {
		members = append(members, m.dev)
	}
	return members, f.parity, nil
}

// MemberOf decodes the RM fields of a member's piece and returns its set
// and how many members the set was formed with: for tests and tools that
// check sets from outside.
func MemberOf(v format.Value) (set uint64, formedWith int, err error) {
	f, err := decodeMember(v.Fields)
	if err != nil {
		return 0, 0, err
	}
	return f.set, len(f.roster), nil
}
