package rdb

import (
	"encoding/binary"
	"fmt"
	"strconv"
)

// The compact encodings Redis stores inside a string: ziplist (before
// 7.0), listpack (7.0 on) and intset. Each returns its entries in order,
// integers as their decimal text (as Redis returns them).

func packedError(what string, off int) error {
	return fmt.Errorf("rdb: %s at offset %d: %w", what, off, ErrCorrupt)
}

// leInt is the signed little-endian integer of 1, 2, 3, 4 or 8 bytes d.
func leInt(d []byte) int64 {
	switch len(d) {
	case 1:
		return int64(int8(d[0]))
	case 2:
		return int64(int16(binary.LittleEndian.Uint16(d)))
	case 3:
		return int64(int32(uint32(d[0])<<8|uint32(d[1])<<16|uint32(d[2])<<24) >> 8)
	case 4:
		return int64(int32(binary.LittleEndian.Uint32(d)))
	}
	return int64(binary.LittleEndian.Uint64(d))
}

// ziplistEntries decodes a ziplist (ziplist.c).
func ziplistEntries(b []byte) ([][]byte, error) {
	if len(b) < 11 || int(binary.LittleEndian.Uint32(b)) != len(b) || b[len(b)-1] != 0xff {
		return nil, packedError("ziplist header", 0)
	}
	var out [][]byte
	i := 10
	for {
		if i >= len(b) {
			return nil, packedError("ziplist without its end", i)
		}
		if b[i] == 0xff {
			break
		}
		// The previous entry's length: 1 byte, or 0xfe and 4.
		if b[i] == 0xfe {
			i += 5
		} else {
			i++
		}
		if i >= len(b) {
			return nil, packedError("ziplist entry", i)
		}
		enc := b[i]
		var n, hdr int
		var v int64
		isInt := true
		switch {
		case enc>>6 == 0:
			n, hdr, isInt = int(enc&0x3f), 1, false
		case enc>>6 == 1:
			if i+1 >= len(b) {
				return nil, packedError("ziplist entry", i)
			}
			n, hdr, isInt = int(enc&0x3f)<<8|int(b[i+1]), 2, false
		case enc>>6 == 2:
			if i+4 >= len(b) {
				return nil, packedError("ziplist entry", i)
			}
			n, hdr, isInt = int(binary.BigEndian.Uint32(b[i+1:])), 5, false
		case enc == 0xc0:
			n, hdr = 2, 1
		case enc == 0xd0:
			n, hdr = 4, 1
		case enc == 0xe0:
			n, hdr = 8, 1
		case enc == 0xf0:
			n, hdr = 3, 1
		case enc == 0xfe:
			n, hdr = 1, 1
		case enc >= 0xf1 && enc <= 0xfd:
			n, hdr, v = 0, 1, int64(enc&0x0f)-1
		default:
			return nil, packedError(fmt.Sprintf("ziplist encoding %#x", enc), i)
		}
		p := i + hdr
		if n < 0 || p+n > len(b)-1 {
			return nil, packedError("ziplist entry past the end", i)
		}
		d := b[p : p+n]
		if !isInt {
			out = append(out, d)
		} else {
			if n > 0 {
				v = leInt(d)
			}
			out = append(out, strconv.AppendInt(nil, v, 10))
		}
		i = p + n
	}
	return out, nil
}

// listpackEntries decodes a listpack (listpack.c).
func listpackEntries(b []byte) ([][]byte, error) {
	if len(b) < 7 || int(binary.LittleEndian.Uint32(b)) != len(b) || b[len(b)-1] != 0xff {
		return nil, packedError("listpack header", 0)
	}
	var out [][]byte
	i := 6
	for {
		if i >= len(b) {
			return nil, packedError("listpack without its end", i)
		}
		enc := b[i]
		if enc == 0xff {
			break
		}
		need := func(k int) bool { return i+k <= len(b)-1 }
		var hdr, n int
		var v int64
		isInt := true
		switch {
		case enc&0x80 == 0:
			hdr, v = 1, int64(enc&0x7f)
		case enc&0xc0 == 0x80:
			hdr, n, isInt = 1, int(enc&0x3f), false
		case enc&0xe0 == 0xc0:
			if !need(2) {
				return nil, packedError("listpack entry", i)
			}
			u := int64(enc&0x1f)<<8 | int64(b[i+1])
			if u >= 1<<12 {
				u -= 1 << 13
			}
			hdr, v = 2, u
		case enc&0xf0 == 0xe0:
			if !need(2) {
				return nil, packedError("listpack entry", i)
			}
			hdr, n, isInt = 2, int(enc&0x0f)<<8|int(b[i+1]), false
		case enc == 0xf0:
			if !need(5) {
				return nil, packedError("listpack entry", i)
			}
			hdr, n, isInt = 5, int(binary.LittleEndian.Uint32(b[i+1:])), false
		case enc >= 0xf1 && enc <= 0xf4:
			w := map[byte]int{0xf1: 2, 0xf2: 3, 0xf3: 4, 0xf4: 8}[enc]
			if !need(1 + w) {
				return nil, packedError("listpack entry", i)
			}
			v, hdr = leInt(b[i+1:i+1+w]), 1+w
		default:
			return nil, packedError(fmt.Sprintf("listpack encoding %#x", enc), i)
		}
		if n < 0 || !need(hdr+n) {
			return nil, packedError("listpack entry past the end", i)
		}
		if isInt {
			out = append(out, strconv.AppendInt(nil, v, 10))
		} else {
			out = append(out, b[i+hdr:i+hdr+n])
		}
		l := hdr + n
		i += l + backlenSize(l)
	}
	return out, nil
}

// backlenSize is the size of the back-length after a listpack entry of
// l bytes.
func backlenSize(l int) int {
	switch {
	case l < 1<<7:
		return 1
	case l < 1<<14:
		return 2
	case l < 1<<21:
		return 3
	case l < 1<<28:
		return 4
	}
	return 5
}

// intsetEntries decodes an intset (intset.c).
func intsetEntries(b []byte) ([][]byte, error) {
	if len(b) < 8 {
		return nil, packedError("intset header", 0)
	}
	w := int(binary.LittleEndian.Uint32(b))
	n := int(binary.LittleEndian.Uint32(b[4:]))
	if w != 2 && w != 4 && w != 8 || len(b) != 8+w*n {
		return nil, packedError("intset header", 0)
	}
	out := make([][]byte, n)
	for k := range n {
		out[k] = strconv.AppendInt(nil, leInt(b[8+k*w:8+k*w+w]), 10)
	}
	return out, nil
}

// zipmapObject decodes a zipmap hash (zipmap.c, Redis before 2.6).
func zipmapObject(b []byte) (Object, error) {
	o := Object{Kind: Hash}
	i := 1 // the entry count, which saturates at 254
	length := func() (int, bool) {
		if i >= len(b) {
			return 0, false
		}
		switch c := b[i]; {
		case c < 254:
			i++
			return int(c), true
		case c == 254 && i+5 <= len(b):
			n := int(binary.LittleEndian.Uint32(b[i+1:]))
			i += 5
			return n, true
		}
		return 0, false
	}
	for {
		if i >= len(b) {
			return Object{}, packedError("zipmap without its end", i)
		}
		if b[i] == 0xff {
			return o, nil
		}
		kl, ok := length()
		if !ok || kl < 0 || i+kl > len(b) {
			return Object{}, packedError("zipmap key", i)
		}
		k := b[i : i+kl]
		i += kl
		vl, ok := length()
		if !ok || vl < 0 || i+1+vl > len(b) {
			return Object{}, packedError("zipmap value", i)
		}
		free := int(b[i])
		v := b[i+1 : i+1+vl]
		i += 1 + vl + free
		o.Fields = append(o.Fields, Field{k, v})
	}
}
