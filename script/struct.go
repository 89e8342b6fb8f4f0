package script

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	lua "github.com/yuin/gopher-lua"
)

// openStruct is Roberto Ierusalimschy's struct library as Redis ships it
// (deps/lua/src/lua_struct.c): struct.pack, struct.unpack and
// struct.size, with the sizes, alignment and results of Redis built for
// x86-64 Linux (little endian; short 2, int 4, long and size_t 8 bytes;
// integers of up to 32 bytes through a 64-bit long; maximum alignment 8),
// so that a script packs the same bytes on kvarray as on Redis.
//
// Format options: '<' little endian, '>' big, '!n' maximum alignment n
// (a power of two; '!' alone: 8), ' ' ignored; 'b'/'B' signed/unsigned
// char, 'h'/'H' short, 'l'/'L' long, 'T' size_t, 'i'/'I' int, or 'in' an
// integer of n bytes; 'f' float, 'd' double; 'x' a zero byte; 's' a
// zero-terminated string; 'cn' n bytes ('c0' packs a whole string; unpacks
// as many bytes as the number before it said).
func openStruct(L *lua.LState) *lua.LTable {
	t := L.NewTable()
	t.RawSetString("pack", L.NewFunction(structPack))
	t.RawSetString("unpack", L.NewFunction(structUnpack))
	t.RawSetString("size", L.NewFunction(structSize))
	return t
}

const (
	structMaxInt   = 32 // bytes, the largest integral size
	structMaxAlign = 8
)

// structFormat walks a format string as lua_struct.c does.
type structFormat struct {
	L      *lua.LState
	fmt    string
	i      int
	little bool
	align  int
}

func newStructFormat(L *lua.LState, f string) *structFormat {
	return &structFormat{L: L, fmt: f, little: true, align: 1}
}

func (f *structFormat) more() bool { return f.i < len(f.fmt) }

func (f *structFormat) next() byte {
	c := f.fmt[f.i]
	f.i++
	return c
}

// num reads the decimal number at the cursor, or returns df.
func (f *structFormat) num(df int) int {
	if !f.more() || !isDigit(f.fmt[f.i]) {
		return df
	}
	a := 0
	for f.more() && isDigit(f.fmt[f.i]) {
		d := int(f.fmt[f.i] - '0')
		if a > (math.MaxInt32/10) || a*10 > math.MaxInt32-d {
			f.L.RaiseError("integral size overflow")
		}
		a = a*10 + d
		f.i++
	}
	return a
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// size is optsize: the bytes option opt takes (0 for control options and
// strings).
func (f *structFormat) size(opt byte) int {
	switch opt {
	case 'B', 'b', 'x':
		return 1
	case 'H', 'h':
		return 2
	case 'L', 'l', 'T', 'd':
		return 8
	case 'f':
		return 4
	case 'c':
		return f.num(1)
	case 'i', 'I':
		sz := f.num(4)
		if sz > structMaxInt {
			f.L.RaiseError("integral size %d is larger than limit of %d", sz, structMaxInt)
		}
		return sz
	}
	return 0
}

// toAlign is gettoalign: the padding before an element of size at pos.
func (f *structFormat) toAlign(pos, opt, size int) int {
	if size == 0 || opt == 'c' {
		return 0
	}
	size = min(size, f.align)
	return (size - (pos & (size - 1))) & (size - 1)
}

// control is controloptions: endianness, alignment and spaces.
func (f *structFormat) control(opt byte) {
	switch opt {
	case ' ':
	case '>':
		f.little = false
	case '<':
		f.little = true
	case '!':
		a := f.num(structMaxAlign)
		if a <= 0 || a&(a-1) != 0 {
			f.L.RaiseError("alignment %d is not a power of 2", a)
		}
		f.align = a
	default:
		f.L.ArgError(1, fmt.Sprintf("invalid format option '%c'", opt))
	}
}

// putInt appends the size-byte integer of n (through a 64-bit long, as
// lua_struct.c does: bytes past the eighth are zero).
func (f *structFormat) putInt(b *bytes.Buffer, n float64, size int) {
	var v uint64
	if n < 0 {
		v = uint64(int64(n))
	} else {
		v = uint64(n)
	}
	buf := make([]byte, size)
	for i := range size {
		j := i
		if !f.little {
			j = size - 1 - i
		}
		buf[j] = byte(v)
		if i < 8 {
			v >>= 8
		} else {
			v = 0
		}
	}
	b.Write(buf)
}

// getInt reads a size-byte integer (getinteger).
func (f *structFormat) getInt(data []byte, signed bool, size int) float64 {
	var l uint64
	for i := range size {
		j := size - 1 - i
		if !f.little {
			j = i
		}
		l = l<<8 | uint64(data[j])
	}
	if !signed {
		return float64(l)
	}
	if bits := size*8 - 1; bits < 64 {
		if mask := ^uint64(0) << bits; l&mask != 0 {
			l |= mask
		}
	}
	return float64(int64(l))
}

func (f *structFormat) putFloat(b *bytes.Buffer, bits uint64, size int) {
	buf := make([]byte, 8)
	if f.little {
		binary.LittleEndian.PutUint64(buf, bits)
		b.Write(buf[:size])
		return
	}
	binary.BigEndian.PutUint64(buf, bits<<(64-8*size))
	b.Write(buf[:size])
}

func (f *structFormat) getFloat(data []byte, size int) uint64 {
	var bits uint64
	for i := range size {
		j := size - 1 - i
		if !f.little {
			j = i
		}
		bits = bits<<8 | uint64(data[j])
	}
	return bits
}

func structPack(L *lua.LState) int {
	f := newStructFormat(L, L.CheckString(1))
	arg := 2
	var b bytes.Buffer
	for f.more() {
		opt := f.next()
		size := f.size(opt)
		pad := f.toAlign(b.Len(), int(opt), size)
		b.Write(make([]byte, pad))
		switch opt {
		case 'b', 'B', 'h', 'H', 'l', 'L', 'T', 'i', 'I':
			f.putInt(&b, float64(L.CheckNumber(arg)), size)
			arg++
		case 'x':
			b.WriteByte(0)
		case 'f':
			f.putFloat(&b, uint64(math.Float32bits(float32(L.CheckNumber(arg)))), 4)
			arg++
		case 'd':
			f.putFloat(&b, math.Float64bits(float64(L.CheckNumber(arg))), 8)
			arg++
		case 'c', 's':
			s := L.CheckString(arg)
			arg++
			if size == 0 {
				size = len(s)
			}
			if len(s) < size {
				L.ArgError(arg, "string too short")
			}
			b.WriteString(s[:size])
			if opt == 's' {
				b.WriteByte(0)
			}
		default:
			f.control(opt)
		}
	}
	L.Push(lua.LString(b.String()))
	return 1
}

func structUnpack(L *lua.LState) int {
	f := newStructFormat(L, L.CheckString(1))
	data := []byte(L.CheckString(2))
	pos := L.OptInt(3, 1)
	if pos <= 0 {
		L.ArgError(3, "offset must be 1 or greater")
	}
	pos--
	ld := len(data)
	var out []lua.LValue
	short := func(size int) {
		if size > ld || pos > ld-size {
			L.ArgError(2, "data string too short")
		}
	}
	for f.more() {
		opt := f.next()
		size := f.size(opt)
		pos += f.toAlign(pos, int(opt), size)
		short(size)
		switch opt {
		case 'b', 'B', 'h', 'H', 'l', 'L', 'T', 'i', 'I':
			signed := opt >= 'a' && opt <= 'z'
			out = append(out, lua.LNumber(f.getInt(data[pos:], signed, size)))
		case 'x':
		case 'f':
			out = append(out, lua.LNumber(math.Float32frombits(uint32(f.getFloat(data[pos:], 4)))))
		case 'd':
			out = append(out, lua.LNumber(math.Float64frombits(f.getFloat(data[pos:], 8))))
		case 'c':
			if size == 0 {
				var n lua.LNumber
				ok := len(out) > 0
				if ok {
					n, ok = out[len(out)-1].(lua.LNumber)
				}
				if !ok {
					L.RaiseError("format 'c0' needs a previous size")
				}
				size = int(n)
				out = out[:len(out)-1]
				short(size)
			}
			out = append(out, lua.LString(data[pos:pos+size]))
		case 's':
			e := bytes.IndexByte(data[pos:], 0)
			if e < 0 {
				L.RaiseError("unfinished string in data")
			}
			size = e + 1
			out = append(out, lua.LString(data[pos:pos+e]))
		default:
			f.control(opt)
		}
		pos += size
	}
	for _, v := range out {
		L.Push(v)
	}
	L.Push(lua.LNumber(pos + 1))
	return len(out) + 1
}

func structSize(L *lua.LState) int {
	f := newStructFormat(L, L.CheckString(1))
	pos := 0
	for f.more() {
		opt := f.next()
		size := f.size(opt)
		pos += f.toAlign(pos, int(opt), size)
		switch {
		case opt == 's':
			L.ArgError(1, "option 's' has no fixed size")
		case opt == 'c' && size == 0:
			L.ArgError(1, "option 'c0' has no fixed size")
		}
		if !isAlnum(opt) {
			f.control(opt)
		}
		pos += size
	}
	L.Push(lua.LNumber(pos))
	return 1
}

func isAlnum(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
