package script

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"

	lua "github.com/yuin/gopher-lua"
)

// openCJSON is lua-cjson's cjson as Redis loads it: encode, decode and
// null (a value of its own that JSON null decodes to and encodes from).
// Encoding follows cjson's defaults: numbers as %.14g, '/' escaped, a
// table whose keys are all positive integers is an array (holes are null;
// one sparser than twice its count past index 10 is an error), an empty
// table is an object, at most 1000 levels.
func openCJSON(L *lua.LState) *lua.LTable {
	t := L.NewTable()
	null := L.NewUserData()
	encMax, decMax := jsonMaxDepth, jsonMaxDepth
	invalid := false // encode_invalid_numbers: NaN and Inf as nan, inf
	t.RawSetString("null", null)
	t.RawSetString("encode", L.NewFunction(func(L *lua.LState) int {
		if L.GetTop() != 1 {
			L.ArgError(1, "expected 1 argument")
		}
		var b []byte
		b, err := encodeJSON(b, L.Get(1), null, 0, encMax, invalid)
		if err != nil {
			L.RaiseError("%s", err.Error())
		}
		L.Push(lua.LString(b))
		return 1
	}))
	t.RawSetString("decode", L.NewFunction(func(L *lua.LState) int {
		if L.GetTop() != 1 {
			L.ArgError(1, "expected 1 argument")
		}
		d := json.NewDecoder(bytes.NewReader([]byte(L.CheckString(1))))
		d.UseNumber()
		v, err := decodeJSON(L, d, null, 0, decMax)
		if err == nil {
			if _, err2 := d.Token(); err2 != io.EOF {
				err = jsonError("Expected the end but found invalid token")
			}
		}
		if err != nil {
			L.RaiseError("%s", err.Error())
		}
		L.Push(v)
		return 1
	}))
	depth := func(p *int) lua.LGFunction {
		return func(L *lua.LState) int {
			if L.GetTop() >= 1 {
				*p = L.CheckInt(1)
			}
			L.Push(lua.LNumber(*p))
			return 1
		}
	}
	t.RawSetString("encode_max_depth", L.NewFunction(depth(&encMax)))
	t.RawSetString("decode_max_depth", L.NewFunction(depth(&decMax)))
	t.RawSetString("encode_invalid_numbers", L.NewFunction(func(L *lua.LState) int {
		if L.GetTop() >= 1 {
			invalid = lua.LVAsBool(L.Get(1))
		}
		L.Push(lua.LBool(invalid))
		return 1
	}))
	// Other configuration calls scripts make; kvarray keeps cjson's
	// defaults.
	for _, name := range []string{"encode_keep_buffer", "encode_number_precision",
		"decode_invalid_numbers", "encode_sparse_array"} {
		t.RawSetString(name, L.NewFunction(func(L *lua.LState) int { return 0 }))
	}
	return t
}

const jsonMaxDepth = 1000

// jsonError is a cjson error, worded as lua-cjson words it (capitalised).
type jsonError string

func (e jsonError) Error() string { return string(e) }

func jsonErrorf(format string, args ...any) error { return jsonError(fmt.Sprintf(format, args...)) }

func encodeJSON(b []byte, v lua.LValue, null *lua.LUserData, depth, maxDepth int, invalid bool) ([]byte, error) {
	switch v := v.(type) {
	case *lua.LNilType:
		return append(b, "null"...), nil
	case lua.LBool:
		return strconv.AppendBool(b, bool(v)), nil
	case lua.LNumber:
		f := float64(v)
		switch {
		case (math.IsNaN(f) || math.IsInf(f, 0)) && !invalid:
			return nil, jsonError("Cannot serialise number: must not be NaN or Inf")
		case math.IsNaN(f):
			return append(b, "nan"...), nil
		case math.IsInf(f, 1):
			return append(b, "inf"...), nil
		case math.IsInf(f, -1):
			return append(b, "-inf"...), nil
		}
		return append(b, fmtG14(f)...), nil
	case lua.LString:
		return quoteJSON(b, string(v)), nil
	case *lua.LUserData:
		if v == null {
			return append(b, "null"...), nil
		}
		return nil, jsonError("Cannot serialise userdata: type not supported")
	case *lua.LTable:
		depth++
		if depth > maxDepth {
			return nil, jsonErrorf("Cannot serialise, excessive nesting (%d)", depth)
		}
		max, items, isArray := 0, 0, true
		forEach(v, func(k, _ lua.LValue) {
			items++
			n, ok := k.(lua.LNumber)
			if !ok || float64(n) < 1 || float64(n) != math.Floor(float64(n)) {
				isArray = false
				return
			}
			max = int(math.Max(float64(max), float64(n)))
		})
		if isArray && items > 0 {
			if max > items*2 && max > 10 {
				return nil, jsonError("Cannot serialise table: excessively sparse array")
			}
			b = append(b, '[')
			for i := 1; i <= max; i++ {
				if i > 1 {
					b = append(b, ',')
				}
				var err error
				if b, err = encodeJSON(b, v.RawGetInt(i), null, depth, maxDepth, invalid); err != nil {
					return nil, err
				}
			}
			return append(b, ']'), nil
		}
		b = append(b, '{')
		first := true
		var err error
		forEach(v, func(k, val lua.LValue) {
			if err != nil {
				return
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			switch k := k.(type) {
			case lua.LString:
				b = quoteJSON(b, string(k))
			case lua.LNumber:
				b = quoteJSON(b, fmtG14(float64(k)))
			default:
				err = jsonError("Cannot serialise table: table key must be a number or string")
				return
			}
			b = append(b, ':')
			b, err = encodeJSON(b, val, null, depth, maxDepth, invalid)
		})
		if err != nil {
			return nil, err
		}
		return append(b, '}'), nil
	}
	return nil, jsonErrorf("Cannot serialise %s: type not supported", v.Type())
}

// fmtG14 is C's %.14g.
func fmtG14(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e14 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	s := strconv.FormatFloat(f, 'g', 14, 64)
	// %g drops trailing zeros of the fraction; Go's 'g' with a precision
	// keeps them.
	if i := bytes.IndexAny([]byte(s), "e"); i >= 0 {
		return trimZeros(s[:i]) + s[i:]
	}
	return trimZeros(s)
}

func trimZeros(s string) string {
	if !bytes.ContainsRune([]byte(s), '.') {
		return s
	}
	for s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	if s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	return s
}

func quoteJSON(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			b = append(b, `\"`...)
		case '\\':
			b = append(b, `\\`...)
		case '/':
			b = append(b, `\/`...)
		case '\b':
			b = append(b, `\b`...)
		case '\f':
			b = append(b, `\f`...)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		default:
			if c < 0x20 || c == 0x7f {
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			} else {
				b = append(b, c)
			}
		}
	}
	return append(b, '"')
}

func decodeJSON(L *lua.LState, d *json.Decoder, null *lua.LUserData, depth, maxDepth int) (lua.LValue, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, jsonErrorf("Expected value but found invalid token: %v", err)
	}
	switch tok := tok.(type) {
	case nil:
		return null, nil
	case bool:
		return lua.LBool(tok), nil
	case json.Number:
		f, err := strconv.ParseFloat(string(tok), 64)
		if err != nil {
			return nil, jsonErrorf("Expected value but found invalid number: %v", err)
		}
		return lua.LNumber(f), nil
	case string:
		return lua.LString(tok), nil
	case json.Delim:
		depth++
		if depth > maxDepth {
			return nil, jsonErrorf("Found too many nested data structures (%d)", depth)
		}
		t := L.NewTable()
		switch tok {
		case '[':
			for i := 1; d.More(); i++ {
				v, err := decodeJSON(L, d, null, depth, maxDepth)
				if err != nil {
					return nil, err
				}
				t.RawSetInt(i, v)
			}
		case '{':
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return nil, jsonErrorf("Expected object key string but found invalid token: %v", err)
				}
				v, err := decodeJSON(L, d, null, depth, maxDepth)
				if err != nil {
					return nil, err
				}
				t.RawSetString(fmt.Sprint(k), v)
			}
		}
		if _, err := d.Token(); err != nil {
			return nil, jsonErrorf("Expected comma or end but found invalid token: %v", err)
		}
		return t, nil
	}
	return nil, jsonError("Expected value but found invalid token")
}
