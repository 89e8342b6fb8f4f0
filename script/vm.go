package script

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// vm is the Lua state and the sandbox built in it (Redis's
// luaRegisterRedisAPI and scriptingInit):
//   - the globals live in a table no script can reach (hidden); scripts
//     see globals, an empty table whose __index reads hidden and raises
//     "Script attempted to access nonexistent global variable" for a
//     name it lacks, and whose __newindex raises "Attempt to modify a
//     readonly table";
//   - each library table (redis, string, table, math, cjson, bit,
//     coroutine) is seen through such a read-only view, and rawset and
//     setmetatable refuse the views;
//   - chunks that loadstring and load compile run in the same globals.
type vm struct {
	e         *Engine
	L         *lua.LState
	hidden    *lua.LTable
	globals   *lua.LTable
	protected map[*lua.LTable]bool
	handler   *lua.LFunction
	// cur is the run in progress, nil between runs; resp its protocol.
	cur  *Call
	resp int
	// loading is the library FUNCTION LOAD is loading, if any.
	loading *Library
	// rng is math.random's generator: seeded at random, reseeded by
	// math.randomseed (the same seed gives the same numbers).
	rng *rand.Rand
}

// checkInt is luaL_checkint: a number, or a string that is one,
// truncated.
func checkInt(L *lua.LState, i int) int64 {
	switch v := L.Get(i).(type) {
	case lua.LNumber:
		return int64(v)
	case lua.LString:
		if f, err := strconv.ParseFloat(strings.TrimSpace(string(v)), 64); err == nil {
			return int64(f)
		}
	}
	L.ArgError(i, "number expected, got "+L.Get(i).Type().String())
	return 0
}

// random is Lua 5.1's math.random over the VM's generator.
func (v *vm) random(L *lua.LState) int {
	r := v.rng.Float64()
	switch L.GetTop() {
	case 0:
		L.Push(lua.LNumber(r))
	case 1:
		u := checkInt(L, 1)
		if u < 1 {
			L.ArgError(1, "interval is empty")
		}
		L.Push(lua.LNumber(math.Floor(r*float64(u)) + 1))
	case 2:
		l, u := checkInt(L, 1), checkInt(L, 2)
		if l > u {
			L.ArgError(2, "interval is empty")
		}
		L.Push(lua.LNumber(math.Floor(r*float64(u-l+1)) + float64(l)))
	default:
		L.RaiseError("wrong number of arguments")
	}
	return 1
}

// Redis's version as scripts see it (redis.REDIS_VERSION).
const (
	redisVersion    = "7.4.0" // as the server reports it (server.redisVersion)
	redisVersionNum = 0x00070400
)

func newVM(e *Engine) *vm {
	L := lua.NewState(lua.Options{SkipOpenLibs: true, CallStackSize: 256, RegistrySize: 1024 * 20, RegistryMaxSize: 1 << 20})
	v := &vm{e: e, L: L, protected: map[*lua.LTable]bool{}}
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{"", lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath}, {lua.CoroutineLibName, lua.OpenCoroutine}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	h := L.G.Global
	v.hidden = h
	for _, name := range []string{"dofile", "loadfile", "print", "module", "require", "_printregs"} {
		h.RawSetString(name, lua.LNil)
	}
	h.RawSetString("cjson", openCJSON(L))
	h.RawSetString("bit", openBit(L))
	h.RawSetString("cmsgpack", openCmsgpack(L))
	h.RawSetString("struct", openStruct(L))
	h.RawSetString("redis", v.redisTable())
	str := h.RawGetString("string").(*lua.LTable)
	str.RawSetString("rep", L.NewFunction(v.strRep))
	str.RawSetString("dump", lua.LNil) // as Redis: no bytecode in or out
	v.rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	m := h.RawGetString("math").(*lua.LTable)
	m.RawSetString("random", L.NewFunction(v.random))
	m.RawSetString("randomseed", L.NewFunction(func(L *lua.LState) int {
		v.rng = rand.New(rand.NewPCG(uint64(checkInt(L, 1)), 0))
		return 0
	}))
	h.RawSetString("pcall", L.NewFunction(luaPcall))
	h.RawSetString("loadstring", L.NewFunction(v.loadString))
	h.RawSetString("load", L.NewFunction(v.load(h.RawGetString("load").(*lua.LFunction))))
	h.RawSetString("rawset", L.NewFunction(v.rawSet))
	h.RawSetString("setmetatable", L.NewFunction(v.setMetatable(h.RawGetString("setmetatable").(*lua.LFunction))))

	// The read-only views.
	readonly := L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Attempt to modify a readonly table")
		return 0
	})
	view := func(index lua.LValue, meta lua.LValue) *lua.LTable {
		p := L.NewTable()
		mt := L.NewTable()
		mt.RawSetString("__index", index)
		mt.RawSetString("__newindex", readonly)
		mt.RawSetString("__metatable", meta)
		L.SetMetatable(p, mt)
		v.protected[p] = true
		return p
	}
	realRedis := h.RawGetString("redis").(*lua.LTable)
	var libs []string
	forEach(h, func(k, val lua.LValue) {
		if _, ok := val.(*lua.LTable); ok {
			libs = append(libs, k.String())
		}
	})
	for _, name := range libs {
		if name == "_G" {
			continue
		}
		t := h.RawGetString(name).(*lua.LTable)
		h.RawSetString(name, view(t, lua.LFalse))
	}
	if smt, ok := L.GetMetatable(lua.LString("")).(*lua.LTable); ok {
		smt.RawSetString("__index", h.RawGetString("string"))
	}
	// While FUNCTION LOAD runs a library's code, its globals are Redis's
	// library API only: redis.register_function, log and the version.
	loadAPI := L.NewTable()
	loadRedis := L.NewTable()
	loadRedis.RawSetString("register_function", L.NewFunction(v.registerFunction))
	for _, name := range []string{"log", "LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING", "REDIS_VERSION", "REDIS_VERSION_NUM"} {
		loadRedis.RawSetString(name, realRedis.RawGetString(name))
	}
	strict := func(t *lua.LTable) *lua.LFunction {
		return L.NewFunction(func(L *lua.LState) int {
			k := L.Get(2)
			val := t.RawGet(k)
			if val == lua.LNil {
				L.RaiseError("Script attempted to access nonexistent global variable '%s'", lua.LVAsString(k))
			}
			L.Push(val)
			return 1
		})
	}
	loadAPI.RawSetString("redis", view(strict(loadRedis), lua.LFalse))
	lookup := L.NewFunction(func(L *lua.LState) int {
		k := L.Get(2)
		val := h.RawGet(k)
		if v.loading != nil {
			val = loadAPI.RawGet(k)
		}
		if val == lua.LNil {
			L.RaiseError("Script attempted to access nonexistent global variable '%s'", lua.LVAsString(k))
		}
		L.Push(val)
		return 1
	})
	metaView := L.NewTable()
	metaView.RawSetString("__index", lookup)
	metaView.RawSetString("__newindex", readonly)
	v.globals = view(lookup, view(metaView, lua.LFalse))
	h.RawSetString("_G", v.globals)
	L.G.Global = v.globals
	L.Env = v.globals
	v.handler = L.NewFunction(v.errorHandler)
	return v
}

// run runs s (the engine's lock held).
func (v *vm) run(ctx context.Context, s *Script, c Call) []byte {
	v.hidden.RawSetString("KEYS", v.array(c.Keys))
	v.hidden.RawSetString("ARGV", v.array(c.Args))
	fn := v.L.NewFunctionFromProto(s.proto)
	fn.Env = v.globals
	return v.exec(ctx, fn, "f_"+s.SHA, c)
}

// call runs function fn as callback(KEYS, ARGV) (the engine's lock held).
func (v *vm) call(ctx context.Context, fn *lua.LFunction, name string, c Call) []byte {
	return v.exec(ctx, fn, name, c, v.array(c.Keys), v.array(c.Args))
}

// exec calls fn with args and returns its reply; name is how errors name
// it.
func (v *vm) exec(ctx context.Context, fn *lua.LFunction, name string, c Call, args ...lua.LValue) []byte {
	L := v.L
	L.SetContext(ctx)
	defer L.RemoveContext()
	v.cur, v.resp = &c, 2
	defer func() { v.cur = nil }()
	L.Env = v.globals
	L.SetTop(0)
	L.Push(fn)
	for _, a := range args {
		L.Push(a)
	}
	err := L.PCall(len(args), 1, v.handler)
	w := &writer{proto: c.Proto, onError: c.ErrorReply}
	defer L.SetTop(0)
	if reason := stopReason(ctx); reason != "" {
		w.Error(reason, false)
		return w.b
	}
	if err != nil {
		msg, already := errorMessage(name, err)
		w.Error(msg, already)
		return w.b
	}
	w.scriptProto = v.resp
	w.value(L.Get(-1), 0)
	return w.b
}

func (v *vm) array(items [][]byte) *lua.LTable {
	t := v.L.CreateTable(len(items), 0)
	for i, it := range items {
		t.RawSetInt(i+1, lua.LString(it))
	}
	return t
}

// errorHandler is Redis's __redis__err__handler: the error as a table
// {err=..., source=..., line=...}, where the line is the script's (not
// that of the Go function that raised it).
func (v *vm) errorHandler(L *lua.LState) int {
	obj := L.Get(1)
	t, ok := obj.(*lua.LTable)
	if !ok {
		t = L.NewTable()
		t.RawSetString("err", lua.LString("ERR "+lua.LVAsString(obj)))
		if obj.Type() != lua.LTString && obj.Type() != lua.LTNumber {
			t.RawSetString("err", lua.LString("ERR "+obj.String()))
		}
	}
	for level := 1; level <= 2; level++ {
		dbg, ok := L.GetStack(level)
		if !ok {
			break
		}
		if _, err := L.GetInfo("Sl", dbg, lua.LNil); err != nil {
			break
		}
		if dbg.What == "G" {
			continue
		}
		if dbg.CurrentLine > 0 {
			t.RawSetString("source", lua.LString("@"+dbg.Source))
			t.RawSetString("line", lua.LNumber(dbg.CurrentLine))
		}
		break
	}
	L.Push(t)
	return 1
}

// errorMessage is the reply to a script that raised an error
// (luaCallFunction): "CODE msg script: NAME, on @user_script:LINE.";
// already: the error is a command's, counted when it answered.
func errorMessage(name string, err error) (msg string, already bool) {
	ae, ok := err.(*lua.ApiError)
	if !ok {
		return "ERR Error running script " + name + ", " + err.Error(), false
	}
	t, ok := ae.Object.(*lua.LTable)
	if !ok {
		msg := lua.LVAsString(ae.Object)
		if len(msg) > 100 {
			msg = msg[:100]
		}
		return fmt.Sprintf("ERR Error running script %s, %s", name, msg), false
	}
	msg = lua.LVAsString(t.RawGetString("err"))
	src, line := t.RawGetString("source"), t.RawGetString("line")
	if src != lua.LNil && line != lua.LNil {
		msg += fmt.Sprintf(" script: %s, on %s:%s.", name, lua.LVAsString(src), lua.LVAsString(line))
	}
	return msg, counted(t)
}

// luaPcall is Redis's pcall: an error that is a table with an err field
// is returned as that string (scripts written for Redis 6 expect it).
func luaPcall(L *lua.LState) int {
	fn := L.CheckAny(1)
	top := L.GetTop()
	L.Push(fn)
	for i := 2; i <= top; i++ {
		L.Push(L.Get(i))
	}
	if err := L.PCall(top-1, lua.MultRet, nil); err != nil {
		obj := lua.LValue(lua.LString(err.Error()))
		if ae, ok := err.(*lua.ApiError); ok {
			obj = ae.Object
		}
		if t, ok := obj.(*lua.LTable); ok {
			if s, ok := t.RawGetString("err").(lua.LString); ok {
				obj = s
			}
		}
		L.SetTop(top)
		L.Push(lua.LFalse)
		L.Push(obj)
		return 2
	}
	L.Insert(lua.LTrue, top+1)
	return L.GetTop() - top
}

// raise raises Redis's error table for msg (luaPushError + luaError).
func raise(L *lua.LState, msg string) {
	L.Error(errorTable(L, msg), 0)
}

func (v *vm) redisTable() *lua.LTable {
	L := v.L
	t := L.NewTable()
	fns := map[string]lua.LGFunction{
		"call":          func(L *lua.LState) int { return v.command(L, true) },
		"pcall":         func(L *lua.LState) int { return v.command(L, false) },
		"acl_check_cmd": v.aclCheck,
		"error_reply": func(L *lua.LState) int {
			if L.GetTop() != 1 || L.Get(1).Type() != lua.LTString {
				L.Push(errorTable(L, "wrong number or type of arguments"))
				return 1
			}
			s := L.ToString(1)
			if !strings.HasPrefix(s, "-") {
				s = "-" + s
			}
			L.Push(errorTable(L, s))
			return 1
		},
		"status_reply": func(L *lua.LState) int {
			if L.GetTop() != 1 || L.Get(1).Type() != lua.LTString {
				L.Push(errorTable(L, "wrong number or type of arguments"))
				return 1
			}
			r := L.NewTable()
			r.RawSetString("ok", L.Get(1))
			L.Push(r)
			return 1
		},
		"sha1hex": func(L *lua.LState) int {
			if L.GetTop() != 1 {
				raise(L, "wrong number of arguments")
			}
			L.Push(lua.LString(SHA1Hex([]byte(L.ToString(1)))))
			return 1
		},
		"log": func(L *lua.LState) int {
			n := L.GetTop()
			if n < 2 {
				raise(L, "redis.log() requires two arguments or more.")
			}
			lv, ok := L.Get(1).(lua.LNumber)
			if !ok {
				if s, isStr := L.Get(1).(lua.LString); isStr {
					if f, err := strconv.ParseFloat(string(s), 64); err == nil {
						lv, ok = lua.LNumber(f), true
					}
				}
			}
			if !ok {
				raise(L, "First argument must be a number (log level).")
			}
			if lv < 0 || lv > 3 {
				raise(L, "Invalid debug level.")
			}
			var parts []string
			for i := 2; i <= n; i++ {
				switch a := L.Get(i).(type) {
				case lua.LString, lua.LNumber:
					parts = append(parts, a.String())
				}
			}
			v.e.cfg.Log(int(lv), strings.Join(parts, " "))
			return 0
		},
		"setresp": func(L *lua.LState) int {
			if v.cur == nil {
				raise(L, "redis.setresp can only be called inside a script invocation")
			}
			if L.GetTop() != 1 {
				raise(L, "redis.setresp() requires one argument.")
			}
			r := int(L.ToNumber(1))
			if r != 2 && r != 3 {
				raise(L, "RESP version must be 2 or 3.")
			}
			v.resp = r
			return 0
		},
		"set_repl": func(L *lua.LState) int {
			if v.cur == nil {
				raise(L, "redis.set_repl can only be called inside a script invocation")
			}
			if L.GetTop() != 1 {
				raise(L, "redis.set_repl() requires two arguments.")
			}
			if int(L.ToNumber(1))&^3 != 0 {
				raise(L, "Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.")
			}
			return 0 // kvarray replicates nothing: accepted
		},
		"replicate_commands": func(L *lua.LState) int { L.Push(lua.LTrue); return 1 },
		"breakpoint":         func(L *lua.LState) int { L.Push(lua.LFalse); return 1 },
		"debug":              func(L *lua.LState) int { return 0 },
	}
	for name, fn := range fns {
		t.RawSetString(name, L.NewFunction(fn))
	}
	for name, n := range map[string]int{"LOG_DEBUG": 0, "LOG_VERBOSE": 1, "LOG_NOTICE": 2, "LOG_WARNING": 3,
		"REPL_NONE": 0, "REPL_AOF": 1, "REPL_SLAVE": 2, "REPL_REPLICA": 2, "REPL_ALL": 3, "REDIS_VERSION_NUM": redisVersionNum} {
		t.RawSetString(name, lua.LNumber(n))
	}
	t.RawSetString("REDIS_VERSION", lua.LString(redisVersion))
	return t
}

// command is redis.call (raise) and redis.pcall.
func (v *vm) command(L *lua.LState, raiseErr bool) int {
	fail := func(msg string) int {
		if raiseErr {
			raise(L, msg)
		}
		L.Push(errorTable(L, msg))
		return 1
	}
	if v.cur == nil {
		raise(L, "redis.call/pcall can only be called inside a script invocation")
	}
	argv, bad := commandArgs(L)
	if bad != "" {
		return fail(bad)
	}
	L.SetTop(0)
	reply := v.cur.Do(argv, v.resp)
	val, _ := toLua(L, reply)
	if raiseErr && len(reply) > 0 && reply[0] == '-' {
		L.Error(val, 0)
	}
	L.Push(val)
	return 1
}

// commandArgs converts the arguments of a redis lib call (redis.call,
// redis.acl_check_cmd) to a command's argv, as Redis's luaArgsToRedisArgv
// does; bad is the error to raise when they are not a command.
func commandArgs(L *lua.LState) (argv [][]byte, bad string) {
	n := L.GetTop()
	if n == 0 {
		return nil, "Please specify at least one argument for this redis lib call"
	}
	argv = make([][]byte, n)
	for i := 1; i <= n; i++ {
		switch a := L.Get(i).(type) {
		case lua.LNumber:
			// Not Lua's %.14g, which loses precision (Redis's %.17g).
			argv[i-1] = strconv.AppendFloat(nil, float64(a), 'g', 17, 64)
		case lua.LString:
			argv[i-1] = []byte(a)
		default:
			return nil, "Lua redis lib command arguments must be strings or integers"
		}
	}
	return argv, ""
}

// aclCheck is redis.acl_check_cmd: whether the calling user may run the
// command its arguments make (keys and channels included), without
// running it.
func (v *vm) aclCheck(L *lua.LState) int {
	if v.cur == nil {
		raise(L, "redis.acl_check_cmd can only be called inside a script invocation")
	}
	argv, bad := commandArgs(L)
	if bad != "" {
		raise(L, bad)
	}
	if v.cur.ACLCheck == nil {
		L.Push(lua.LTrue) // a caller with no ACL lets everything run
		return 1
	}
	ok, known := v.cur.ACLCheck(argv)
	if !known {
		raise(L, "Invalid command passed to redis.acl_check_cmd()")
	}
	L.Push(lua.LBool(ok))
	return 1
}

func (v *vm) strRep(L *lua.LState) int {
	s := L.CheckString(1)
	n := L.CheckInt(2)
	if n <= 0 || len(s) == 0 {
		L.Push(lua.LString(""))
		return 1
	}
	if int64(len(s))*int64(n) > v.e.cfg.MaxMemory {
		L.RaiseError("%s", ErrMemory.Error())
	}
	L.Push(lua.LString(strings.Repeat(s, n)))
	return 1
}

func (v *vm) loadString(L *lua.LState) int {
	return v.loaded(L, L.CheckString(1), L.OptString(2, "=(load)"))
}

// load wraps base load: the chunk runs in the scripts' globals.
func (v *vm) load(orig *lua.LFunction) lua.LGFunction {
	return func(L *lua.LState) int {
		top := L.GetTop()
		L.Push(orig)
		for i := 1; i <= top; i++ {
			L.Push(L.Get(i))
		}
		L.Call(top, lua.MultRet)
		if fn, ok := L.Get(top + 1).(*lua.LFunction); ok {
			fn.Env = v.globals
		}
		return L.GetTop() - top
	}
}

func (v *vm) loaded(L *lua.LState, src, name string) int {
	fn, err := L.Load(strings.NewReader(src), name)
	if err != nil {
		L.Push(lua.LNil)
		L.Push(lua.LString(err.Error()))
		return 2
	}
	fn.Env = v.globals
	L.Push(fn)
	return 1
}

func (v *vm) rawSet(L *lua.LState) int {
	t := L.CheckTable(1)
	if v.protected[t] {
		L.RaiseError("Attempt to modify a readonly table")
	}
	L.RawSet(t, L.CheckAny(2), L.CheckAny(3))
	L.Push(t)
	return 1
}

func (v *vm) setMetatable(orig *lua.LFunction) lua.LGFunction {
	return func(L *lua.LState) int {
		if t, ok := L.Get(1).(*lua.LTable); ok && v.protected[t] {
			L.RaiseError("Attempt to modify a readonly table")
		}
		top := L.GetTop()
		L.Push(orig)
		for i := 1; i <= top; i++ {
			L.Push(L.Get(i))
		}
		L.Call(top, 1)
		return 1
	}
}
