package script

import (
	"encoding/binary"
	"math"

	lua "github.com/yuin/gopher-lua"
)

// openCmsgpack is lua-cmsgpack as Redis loads it: pack, unpack,
// unpack_one, unpack_limit. Numbers equal to an int64 pack as the
// smallest integer format, others as float32 when that is exact, else
// float64; a table whose keys are 1..n packs as an array (an empty one
// too), any other as a map; tables nested deeper than 16 pack as nil (so
// a cycle packs as a deep copy).
func openCmsgpack(L *lua.LState) *lua.LTable {
	t := L.NewTable()
	t.RawSetString("pack", L.NewFunction(func(L *lua.LState) int {
		n := L.GetTop()
		if n == 0 {
			L.ArgError(0, "MessagePack pack needs input.")
		}
		var b []byte
		for i := 1; i <= n; i++ {
			b = mpEncode(b, L.Get(i), 0)
		}
		L.Push(lua.LString(b))
		return 1
	}))
	t.RawSetString("unpack", L.NewFunction(func(L *lua.LState) int {
		s := L.CheckString(1)
		n := 0
		for off := 0; off < len(s); n++ {
			v, next := mpDecode(L, s, off)
			L.Push(v)
			off = next
		}
		return n
	}))
	limited := func(L *lua.LState, limit, off int) int {
		s := L.CheckString(1)
		if off < 0 || off > len(s) {
			L.ArgError(3, "Start offset greater than input length")
		}
		var vals []lua.LValue
		for (limit <= 0 || len(vals) < limit) && off < len(s) {
			v, next := mpDecode(L, s, off)
			vals = append(vals, v)
			off = next
		}
		if off >= len(s) {
			off = -1
		}
		L.Push(lua.LNumber(off))
		for _, v := range vals {
			L.Push(v)
		}
		return 1 + len(vals)
	}
	t.RawSetString("unpack_one", L.NewFunction(func(L *lua.LState) int {
		return limited(L, 1, L.OptInt(2, 0))
	}))
	t.RawSetString("unpack_limit", L.NewFunction(func(L *lua.LState) int {
		return limited(L, L.CheckInt(2), L.OptInt(3, 0))
	}))
	return t
}

const mpMaxNesting = 16

func mpEncode(b []byte, v lua.LValue, level int) []byte {
	switch v := v.(type) {
	case lua.LBool:
		if v {
			return append(b, 0xc3)
		}
		return append(b, 0xc2)
	case lua.LNumber:
		f := float64(v)
		if !math.IsInf(f, 0) && !math.IsNaN(f) && f >= math.MinInt64 && f < math.MaxInt64 && float64(int64(f)) == f {
			return mpInt(b, int64(f))
		}
		if f32 := float32(f); float64(f32) == f {
			return binary.BigEndian.AppendUint32(append(b, 0xca), math.Float32bits(f32))
		}
		return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(f))
	case lua.LString:
		n := len(v)
		switch {
		case n < 32:
			b = append(b, 0xa0|byte(n))
		case n <= 0xff:
			b = append(b, 0xd9, byte(n))
		case n <= 0xffff:
			b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
		default:
			b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
		}
		return append(b, v...)
	case *lua.LTable:
		if level == mpMaxNesting {
			return append(b, 0xc0)
		}
		count, max, array := 0, 0, true
		forEach(v, func(k, _ lua.LValue) {
			count++
			n, ok := k.(lua.LNumber)
			if !ok || n <= 0 || float64(n) != math.Floor(float64(n)) {
				array = false
				return
			}
			max = int(math.Max(float64(max), float64(n)))
		})
		if array && max == count {
			n := v.Len()
			b = mpHeader(b, n, 0x90, 0xdc, 0xdd)
			for i := 1; i <= n; i++ {
				b = mpEncode(b, v.RawGetInt(i), level+1)
			}
			return b
		}
		b = mpHeader(b, count, 0x80, 0xde, 0xdf)
		forEach(v, func(k, val lua.LValue) {
			b = mpEncode(b, k, level+1)
			b = mpEncode(b, val, level+1)
		})
		return b
	}
	return append(b, 0xc0)
}

// mpHeader is an array's or map's header: fix (n <= 15), 16 or 32 bits.
func mpHeader(b []byte, n int, fix, h16, h32 byte) []byte {
	switch {
	case n <= 15:
		return append(b, fix|byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, h16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, h32), uint32(n))
}

func mpInt(b []byte, n int64) []byte {
	switch {
	case n >= 0 && n <= 127:
		return append(b, byte(n))
	case n >= 0 && n <= 0xff:
		return append(b, 0xcc, byte(n))
	case n >= 0 && n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(n))
	case n >= 0 && n <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(n))
	case n >= 0:
		return binary.BigEndian.AppendUint64(append(b, 0xcf), uint64(n))
	case n >= -32:
		return append(b, byte(int8(n)))
	case n >= -128:
		return append(b, 0xd0, byte(int8(n)))
	case n >= -32768:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(int16(n)))
	case n >= -2147483648:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(int32(n)))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(n))
}

// mpDecode decodes the object at s[off:] and returns it and the offset
// after it; it raises a Lua error on malformed input.
func mpDecode(L *lua.LState, s string, off int) (lua.LValue, int) {
	need := func(n int) {
		if off+n > len(s) {
			L.RaiseError("Missing bytes in input.")
		}
	}
	u := func(n int) uint64 {
		need(n)
		var x uint64
		for i := range n {
			x = x<<8 | uint64(s[off+i])
		}
		off += n
		return x
	}
	need(1)
	c := s[off]
	off++
	str := func(n int) (lua.LValue, int) {
		need(n)
		return lua.LString(s[off : off+n]), off + n
	}
	array := func(n int) (lua.LValue, int) {
		t := L.CreateTable(min(n, 1024), 0)
		for i := 1; i <= n; i++ {
			var v lua.LValue
			v, off = mpDecode(L, s, off)
			t.RawSetInt(i, v)
		}
		return t, off
	}
	dict := func(n int) (lua.LValue, int) {
		t := L.NewTable()
		for range n {
			var k, v lua.LValue
			k, off = mpDecode(L, s, off)
			v, off = mpDecode(L, s, off)
			if k != lua.LNil {
				t.RawSet(k, v)
			}
		}
		return t, off
	}
	switch {
	case c <= 0x7f:
		return lua.LNumber(c), off
	case c >= 0xe0:
		return lua.LNumber(int8(c)), off
	case c&0xe0 == 0xa0:
		return str(int(c & 0x1f))
	case c&0xf0 == 0x90:
		return array(int(c & 0x0f))
	case c&0xf0 == 0x80:
		return dict(int(c & 0x0f))
	}
	switch c {
	case 0xc0:
		return lua.LNil, off
	case 0xc2:
		return lua.LFalse, off
	case 0xc3:
		return lua.LTrue, off
	case 0xca:
		return lua.LNumber(math.Float32frombits(uint32(u(4)))), off
	case 0xcb:
		return lua.LNumber(math.Float64frombits(u(8))), off
	case 0xcc, 0xcd, 0xce, 0xcf:
		return lua.LNumber(float64(u(1 << (c - 0xcc)))), off
	case 0xd0:
		return lua.LNumber(int8(u(1))), off
	case 0xd1:
		return lua.LNumber(int16(u(2))), off
	case 0xd2:
		return lua.LNumber(int32(u(4))), off
	case 0xd3:
		return lua.LNumber(float64(int64(u(8)))), off
	case 0xd9, 0xc4:
		return str(int(u(1)))
	case 0xda, 0xc5:
		return str(int(u(2)))
	case 0xdb, 0xc6:
		return str(int(u(4)))
	case 0xdc:
		return array(int(u(2)))
	case 0xdd:
		return array(int(u(4)))
	case 0xde:
		return dict(int(u(2)))
	case 0xdf:
		return dict(int(u(4)))
	}
	L.RaiseError("Bad data format in input.")
	return lua.LNil, off
}
