package script

import (
	"math"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// openBit is Lua BitOp's bit library, which Redis loads: 32-bit
// operations on numbers, results as signed 32-bit integers.
func openBit(L *lua.LState) *lua.LTable {
	t := L.NewTable()
	arg := func(L *lua.LState, i int) uint32 { return tobit(float64(L.CheckNumber(i))) }
	ret := func(L *lua.LState, x uint32) int { L.Push(lua.LNumber(int32(x))); return 1 }
	fold := func(op func(a, b uint32) uint32) lua.LGFunction {
		return func(L *lua.LState) int {
			x := arg(L, 1)
			for i := 2; i <= L.GetTop(); i++ {
				x = op(x, arg(L, i))
			}
			return ret(L, x)
		}
	}
	shift := func(op func(x uint32, n uint) uint32) lua.LGFunction {
		return func(L *lua.LState) int { return ret(L, op(arg(L, 1), uint(arg(L, 2)&31))) }
	}
	fns := map[string]lua.LGFunction{
		"tobit":   func(L *lua.LState) int { return ret(L, arg(L, 1)) },
		"bnot":    func(L *lua.LState) int { return ret(L, ^arg(L, 1)) },
		"band":    fold(func(a, b uint32) uint32 { return a & b }),
		"bor":     fold(func(a, b uint32) uint32 { return a | b }),
		"bxor":    fold(func(a, b uint32) uint32 { return a ^ b }),
		"lshift":  shift(func(x uint32, n uint) uint32 { return x << n }),
		"rshift":  shift(func(x uint32, n uint) uint32 { return x >> n }),
		"arshift": shift(func(x uint32, n uint) uint32 { return uint32(int32(x) >> n) }),
		"rol":     shift(func(x uint32, n uint) uint32 { return x<<n | x>>(32-n) }),
		"ror":     shift(func(x uint32, n uint) uint32 { return x>>n | x<<(32-n) }),
		"bswap": func(L *lua.LState) int {
			x := arg(L, 1)
			return ret(L, x>>24|x>>8&0xff00|x<<8&0xff0000|x<<24)
		},
		"tohex": func(L *lua.LState) int {
			x := arg(L, 1)
			n := 8
			if L.GetTop() >= 2 {
				n = int(int32(arg(L, 2)))
			}
			digits := "0123456789abcdef"
			if n < 0 {
				n, digits = -n, strings.ToUpper(digits)
			}
			n = min(n, 8)
			b := make([]byte, n)
			for i := n - 1; i >= 0; i-- {
				b[i] = digits[x&15]
				x >>= 4
			}
			L.Push(lua.LString(b))
			return 1
		},
	}
	for name, fn := range fns {
		t.RawSetString(name, L.NewFunction(fn))
	}
	return t
}

// tobit is BitOp's normalisation: rounded to an integer, modulo 2^32.
func tobit(f float64) uint32 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	f = math.RoundToEven(f)
	if f >= -(1<<62) && f <= 1<<62 {
		return uint32(int64(f))
	}
	return uint32(int64(math.Mod(f, 1<<32)))
}
