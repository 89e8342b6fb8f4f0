package script

import (
	"bytes"
	"math"
	"strconv"

	lua "github.com/yuin/gopher-lua"
)

// Conversions between Redis replies and Lua values, as Redis 7's
// script_lua.c makes them.
//
// A command's reply (RESP2 or RESP3, as the script chose with
// redis.setresp) becomes: integer → number; bulk string → string; null
// bulk or null array → false; status → {ok=s}; error → {err=s}; array →
// table (a nil element leaves a hole); RESP3 null → nil, boolean →
// boolean, double → {double=n}, map → {map={k=v}}, set → {set={m=true}},
// big number → {big_number=s}, verbatim string →
// {verbatim_string={format=f, string=s}}; attributes are dropped.
//
// The script's return value becomes, in the caller's protocol: string →
// bulk string; number → integer (truncated toward zero); boolean → 1 or
// null when the script speaks RESP2, a boolean when RESP3; table → error
// ({err=s}), status ({ok=s}), double, big number, verbatim string, map,
// set, or an array of the elements 1..n before the first nil; anything
// else → null.

// toLua parses one reply from b into a Lua value and returns the rest.
func toLua(L *lua.LState, b []byte) (lua.LValue, []byte) {
	if len(b) < 3 {
		return lua.LNil, nil
	}
	i := bytes.Index(b, []byte("\r\n"))
	if i < 0 {
		return lua.LNil, nil
	}
	line, rest := b[1:i], b[i+2:]
	n := func() int64 { v, _ := strconv.ParseInt(string(line), 10, 64); return v }
	switch b[0] {
	case ':':
		return lua.LNumber(n()), rest
	case '$':
		l := n()
		if l < 0 {
			return lua.LFalse, rest
		}
		if int64(len(rest)) < l+2 {
			return lua.LNil, nil
		}
		return lua.LString(rest[:l]), rest[l+2:]
	case '+':
		t := L.NewTable()
		t.RawSetString("ok", lua.LString(line))
		return t, rest
	case '-':
		// A command's error reply was counted (INFO errorstats) when the
		// command answered: the script returning it, or raising it,
		// counts it no more (Redis's ignore_error_stats_update).
		t := errorTable(L, "-"+string(line))
		t.RawSetString(countedField, lua.LTrue)
		return t, rest
	case '*', '~', '%', '|':
		l := n()
		if l < 0 {
			return lua.LFalse, rest
		}
		switch b[0] {
		case '*':
			t := L.CreateTable(int(min(l, 1024)), 0)
			for j := int64(1); j <= l; j++ {
				var v lua.LValue
				v, rest = toLua(L, rest)
				t.RawSetInt(int(j), v)
			}
			return t, rest
		case '~':
			set := L.NewTable()
			for range l {
				var v lua.LValue
				v, rest = toLua(L, rest)
				set.RawSet(v, lua.LTrue)
			}
			t := L.NewTable()
			t.RawSetString("set", set)
			return t, rest
		case '%':
			m := L.NewTable()
			for range l {
				var k, v lua.LValue
				k, rest = toLua(L, rest)
				v, rest = toLua(L, rest)
				m.RawSet(k, v)
			}
			t := L.NewTable()
			t.RawSetString("map", m)
			return t, rest
		default: // attribute: dropped, the reply follows
			for range 2 * l {
				_, rest = toLua(L, rest)
			}
			return toLua(L, rest)
		}
	case '_':
		return lua.LNil, rest
	case '#':
		return lua.LBool(len(line) == 1 && line[0] == 't'), rest
	case ',':
		f, _ := strconv.ParseFloat(string(line), 64)
		switch string(line) {
		case "inf":
			f = math.Inf(1)
		case "-inf":
			f = math.Inf(-1)
		}
		t := L.NewTable()
		t.RawSetString("double", lua.LNumber(f))
		return t, rest
	case '(':
		t := L.NewTable()
		t.RawSetString("big_number", lua.LString(line))
		return t, rest
	case '=':
		l := n()
		if int64(len(rest)) < l+2 || l < 4 {
			return lua.LNil, nil
		}
		v := L.NewTable()
		v.RawSetString("format", lua.LString(rest[:3]))
		v.RawSetString("string", lua.LString(rest[4:l]))
		t := L.NewTable()
		t.RawSetString("verbatim_string", v)
		return t, rest[l+2:]
	}
	return lua.LNil, nil
}

// countedField marks an error table whose error was counted already.
const countedField = "ignore_error_stats_update"

// counted reports whether t, an error table, is marked so.
func counted(t *lua.LTable) bool { return t.RawGetString(countedField) == lua.LTrue }

// errorTable is Redis's luaPushErrorBuff: msg is "-CODE detail" (the
// code kept) or "detail" (code ERR); the table is {err="CODE detail"}.
func errorTable(L *lua.LState, msg string) *lua.LTable {
	code := "ERR"
	if len(msg) > 0 && msg[0] == '-' {
		msg = msg[1:]
		if i := bytes.IndexByte([]byte(msg), ' '); i >= 0 {
			code, msg = msg[:i], msg[i+1:]
		}
	}
	t := L.NewTable()
	t.RawSetString("err", lua.LString(code+" "+trimNewlines(msg)))
	return t
}

func trimNewlines(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	for len(s) > 0 && (s[0] == '\n' || s[0] == '\r') {
		s = s[1:]
	}
	return s
}

// writer appends replies in one protocol.
type writer struct {
	b     []byte
	proto int // the caller's: 2 or 3
	// onError is Call.ErrorReply.
	onError func(msg string, counted bool)
	// scriptProto is the script's (redis.setresp): it decides how a
	// boolean is returned.
	scriptProto int
}

func (w *writer) header(c byte, n int) {
	w.b = append(strconv.AppendInt(append(w.b, c), int64(n), 10), '\r', '\n')
}

func (w *writer) bulk(s string) {
	w.header('$', len(s))
	w.b = append(append(w.b, s...), '\r', '\n')
}

func (w *writer) null() {
	if w.proto == 3 {
		w.b = append(w.b, "_\r\n"...)
		return
	}
	w.b = append(w.b, "$-1\r\n"...)
}

// line writes a status or error reply: newlines become spaces, as Redis
// does.
func (w *writer) line(c byte, s string) {
	w.b = append(w.b, c)
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch == '\r' || ch == '\n' {
			ch = ' '
		}
		w.b = append(w.b, ch)
	}
	w.b = append(w.b, '\r', '\n')
}

// Error writes an error reply; msg has its code ("ERR ..."); counted:
// it is a command's, counted when the command answered.
func (w *writer) Error(msg string, counted bool) {
	if w.onError != nil {
		w.onError(msg, counted)
	}
	w.line('-', msg)
}

func (w *writer) double(f float64) {
	var s string
	switch {
	case math.IsInf(f, 1):
		s = "inf"
	case math.IsInf(f, -1):
		s = "-inf"
	default:
		s = strconv.FormatFloat(f, 'g', 17, 64)
	}
	if w.proto == 3 {
		w.line(',', s)
		return
	}
	w.bulk(s)
}

// value writes the Lua value v as a reply (luaReplyToRedisReply).
func (w *writer) value(v lua.LValue, depth int) {
	if depth > maxReplyDepth {
		w.Error("ERR reached lua stack limit", false)
		return
	}
	switch v := v.(type) {
	case lua.LString:
		w.bulk(string(v))
	case lua.LBool:
		switch {
		case w.scriptProto == 2 && bool(v):
			w.b = append(w.b, ":1\r\n"...)
		case w.scriptProto == 2:
			w.null()
		case w.proto == 3 && bool(v):
			w.b = append(w.b, "#t\r\n"...)
		case w.proto == 3:
			w.b = append(w.b, "#f\r\n"...)
		case bool(v):
			w.b = append(w.b, ":1\r\n"...)
		default:
			w.b = append(w.b, ":0\r\n"...)
		}
	case lua.LNumber:
		w.b = append(strconv.AppendInt(append(w.b, ':'), toInt64(float64(v)), 10), '\r', '\n')
	case *lua.LTable:
		w.table(v, depth)
	default:
		w.null()
	}
}

const maxReplyDepth = 1000

// toInt64 is C's (long long) cast of a double, defined for every input.
func toInt64(f float64) int64 {
	switch {
	case math.IsNaN(f):
		return math.MinInt64
	case f >= math.MaxInt64:
		return math.MinInt64 // what x86's conversion gives
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

func (w *writer) table(t *lua.LTable, depth int) {
	if e, ok := t.RawGetString("err").(lua.LString); ok {
		w.Error(string(e), counted(t))
		return
	}
	if s, ok := t.RawGetString("ok").(lua.LString); ok {
		w.line('+', string(s))
		return
	}
	if d, ok := t.RawGetString("double").(lua.LNumber); ok {
		w.double(float64(d))
		return
	}
	if s, ok := t.RawGetString("big_number").(lua.LString); ok {
		if w.proto == 3 {
			w.line('(', string(s))
		} else {
			w.bulk(string(s))
		}
		return
	}
	if vt, ok := t.RawGetString("verbatim_string").(*lua.LTable); ok {
		f, okf := vt.RawGetString("format").(lua.LString)
		s, oks := vt.RawGetString("string").(lua.LString)
		if okf && oks {
			if w.proto == 3 {
				f3 := (string(f) + "   ")[:3]
				w.header('=', len(s)+4)
				w.b = append(append(append(append(w.b, f3...), ':'), s...), '\r', '\n')
			} else {
				w.bulk(string(s))
			}
			return
		}
	}
	if m, ok := t.RawGetString("map").(*lua.LTable); ok {
		var kv []lua.LValue
		forEach(m, func(k, v lua.LValue) { kv = append(kv, k, v) })
		if w.proto == 3 {
			w.header('%', len(kv)/2)
		} else {
			w.header('*', len(kv))
		}
		for _, x := range kv {
			w.value(x, depth+1)
		}
		return
	}
	if s, ok := t.RawGetString("set").(*lua.LTable); ok {
		var ms []lua.LValue
		forEach(s, func(k, _ lua.LValue) { ms = append(ms, k) })
		if w.proto == 3 {
			w.header('~', len(ms))
		} else {
			w.header('*', len(ms))
		}
		for _, x := range ms {
			w.value(x, depth+1)
		}
		return
	}
	n := 0
	for t.RawGetInt(n+1) != lua.LNil {
		n++
	}
	w.header('*', n)
	for j := 1; j <= n; j++ {
		w.value(t.RawGetInt(j), depth+1)
	}
}

// forEach calls fn on t's pairs in next's order (LTable.ForEach walks Go
// maps, in an order that changes from call to call; next's is the
// table's own, so a table encodes the same way each time).
func forEach(t *lua.LTable, fn func(k, v lua.LValue)) {
	for k, v := t.Next(lua.LNil); k != lua.LNil; k, v = t.Next(k) {
		fn(k, v)
	}
}
