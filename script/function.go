package script

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// Functions (Redis 7's FUNCTION LOAD / FCALL): a library is Lua code
// starting "#!lua name=<lib>" that calls redis.register_function when
// loaded; each function it registers is called as callback(KEYS, ARGV).
// Libraries live in a VM of their own, so that SCRIPT FLUSH does not
// touch them; the caller stores their code (Codes) to have them survive
// a restart, and loads them again at start (Restore).

// Library is a loaded library.
type Library struct {
	Name, Code string
	Functions  []*Function // in registration order
}

// Function is a registered function.
type Function struct {
	Name, Desc string
	Flags      Flags
	Lib        *Library
	fn         *lua.LFunction
}

// libs is the function VM's state (under Engine.mu).
type libs struct {
	vm    *vm
	byLib map[string]*Library
	byFn  map[string]*Function
}

func (e *Engine) newLibs() *libs {
	return &libs{vm: newVM(e), byLib: map[string]*Library{}, byFn: map[string]*Function{}}
}

// loadTimeout bounds a library's loading code (Redis's 500 ms).
const loadTimeout = 500 * time.Millisecond

// LoadLibrary loads code (FUNCTION LOAD [REPLACE]) and returns the
// library's name. Errors are ReplyErrors.
func (e *Engine) LoadLibrary(code []byte, replace bool) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	lib, err := e.compileLibrary(e.fl, code)
	if err != nil {
		return "", err
	}
	if old := e.fl.byLib[lib.Name]; old != nil && !replace {
		return "", ReplyError(fmt.Sprintf("ERR Library '%s' already exists", lib.Name))
	}
	for _, f := range lib.Functions {
		if other := e.fl.byFn[strings.ToLower(f.Name)]; other != nil && other.Lib.Name != lib.Name {
			return "", ReplyError(fmt.Sprintf("ERR Function %s already exists", f.Name))
		}
	}
	e.fl.link(lib)
	e.publish()
	return lib.Name, nil
}

func (l *libs) link(lib *Library) {
	if old := l.byLib[lib.Name]; old != nil {
		for _, f := range old.Functions {
			delete(l.byFn, strings.ToLower(f.Name))
		}
	}
	l.byLib[lib.Name] = lib
	for _, f := range lib.Functions {
		l.byFn[strings.ToLower(f.Name)] = f
	}
}

// compileLibrary parses the shebang, compiles and runs the library's code
// in l's VM, and returns the library with its functions (not linked).
func (e *Engine) compileLibrary(l *libs, code []byte) (*Library, error) {
	name, body, err := libraryHeader(code)
	if err != nil {
		return nil, err
	}
	chunk, err := parse.Parse(bytes.NewReader(body), "user_function")
	if err != nil {
		return nil, ReplyError("ERR Error compiling function: " + compileError(err))
	}
	proto, err := lua.Compile(chunk, "user_function")
	if err != nil {
		return nil, ReplyError("ERR Error compiling function: " + compileError(err))
	}
	lib := &Library{Name: name, Code: string(code)}
	v := l.vm
	L := v.L
	ctx, cancel := context.WithTimeoutCause(context.Background(), loadTimeout, stopError("FUNCTION LOAD timeout"))
	defer cancel()
	L.SetContext(ctx)
	defer L.RemoveContext()
	v.loading = lib
	defer func() { v.loading = nil }()
	fn := L.NewFunctionFromProto(proto)
	fn.Env = v.globals
	L.SetTop(0)
	L.Push(fn)
	err = L.PCall(0, 0, v.handler)
	L.SetTop(0)
	if ctx.Err() != nil {
		return nil, ReplyError("ERR Error registering functions: ERR " + context.Cause(ctx).Error())
	}
	if err != nil {
		msg := err.Error()
		if ae, ok := err.(*lua.ApiError); ok {
			if t, ok := ae.Object.(*lua.LTable); ok {
				msg = lua.LVAsString(t.RawGetString("err"))
			}
		}
		return nil, ReplyError("ERR Error registering functions: " + msg)
	}
	if len(lib.Functions) == 0 {
		return nil, ReplyError("ERR No functions registered")
	}
	return lib, nil
}

// libraryHeader is functionExtractLibMetaData: the library's name and
// its code after the shebang line (its newline kept, for line numbers).
func libraryHeader(code []byte) (string, []byte, error) {
	if !bytes.HasPrefix(code, []byte("#!")) {
		return "", nil, ReplyError("ERR Missing library metadata")
	}
	end := bytes.IndexByte(code, '\n')
	if end < 0 {
		return "", nil, ReplyError("ERR Invalid library metadata")
	}
	parts := splitArgs(string(code[:end]))
	if len(parts) == 0 {
		return "", nil, ReplyError("ERR Invalid library metadata")
	}
	engine := parts[0][2:]
	name, named := "", false
	for _, p := range parts[1:] {
		if len(p) >= 5 && strings.EqualFold(p[:5], "name=") {
			if named {
				return "", nil, ReplyError("ERR Invalid metadata value, name argument was given multiple times")
			}
			name, named = p[5:], true
			continue
		}
		return "", nil, ReplyError("ERR Invalid metadata value given: " + p)
	}
	if !named {
		return "", nil, ReplyError("ERR Library name was not given")
	}
	if !validName(name) {
		return "", nil, ReplyError("ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long")
	}
	if !strings.EqualFold(engine, "lua") {
		return "", nil, ReplyError(fmt.Sprintf("ERR Engine '%s' not found", engine))
	}
	return name, code[end:], nil
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// registerFunction is redis.register_function(name, callback) or
// redis.register_function{function_name=, callback=, flags=, description=}.
func (v *vm) registerFunction(L *lua.LState) int {
	lib := v.loading
	if lib == nil {
		raise(L, "redis.register_function can only be called on FUNCTION LOAD command")
	}
	f := &Function{Lib: lib}
	switch L.GetTop() {
	case 1:
		t, ok := L.Get(1).(*lua.LTable)
		if !ok {
			raise(L, "calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).")
		}
		var msg string
		forEach(t, func(k, val lua.LValue) {
			if msg != "" {
				return
			}
			ks, ok := k.(lua.LString)
			if !ok {
				msg = "named argument key given to redis.register_function is not a string"
				return
			}
			switch strings.ToLower(string(ks)) {
			case "function_name":
				if s, ok := val.(lua.LString); ok {
					f.Name = string(s)
				} else {
					msg = "function_name argument given to redis.register_function must be a string"
				}
			case "description":
				if s, ok := val.(lua.LString); ok {
					f.Desc = string(s)
				} else {
					msg = "description argument given to redis.register_function must be a string"
				}
			case "callback":
				if fn, ok := val.(*lua.LFunction); ok {
					f.fn = fn
				} else {
					msg = "callback argument given to redis.register_function must be a function"
				}
			case "flags":
				ft, ok := val.(*lua.LTable)
				if !ok {
					msg = "flags argument to redis.register_function must be a table representing function flags"
					return
				}
				forEach(ft, func(_, fv lua.LValue) {
					fl, ok := flagNames[strings.ToLower(lua.LVAsString(fv))]
					if !ok {
						msg = "unknown flag given"
					}
					f.Flags |= fl
				})
			default:
				msg = "unknown argument given to redis.register_function"
			}
		})
		switch {
		case msg != "":
		case f.Name == "":
			msg = "redis.register_function must get a function name argument"
		case f.fn == nil:
			msg = "redis.register_function must get a callback argument"
		}
		if msg != "" {
			raise(L, msg)
		}
	case 2:
		s, ok := L.Get(1).(lua.LString)
		if !ok {
			raise(L, "first argument to redis.register_function must be a string")
		}
		fn, ok := L.Get(2).(*lua.LFunction)
		if !ok {
			raise(L, "second argument to redis.register_function must be a function")
		}
		f.Name, f.fn = string(s), fn
	default:
		raise(L, "wrong number of arguments to redis.register_function")
	}
	if !validName(f.Name) {
		raise(L, "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long")
	}
	if slices.ContainsFunc(lib.Functions, func(o *Function) bool { return strings.EqualFold(o.Name, f.Name) }) {
		raise(L, "Function already exists in the library")
	}
	lib.Functions = append(lib.Functions, f)
	return 0
}

// DeleteLibrary deletes a library (FUNCTION DELETE).
func (e *Engine) DeleteLibrary(name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	lib := e.fl.byLib[name]
	if lib == nil {
		return ReplyError("ERR Library not found")
	}
	for _, f := range lib.Functions {
		delete(e.fl.byFn, strings.ToLower(f.Name))
	}
	delete(e.fl.byLib, name)
	e.publish()
	return nil
}

// FlushLibraries deletes every library (FUNCTION FLUSH).
func (e *Engine) FlushLibraries() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fl.vm.L.Close()
	e.fl = e.newLibs()
	e.publish()
}

// Libraries returns the libraries, by name. It does not wait for a
// running script (FUNCTION STATS and LIST answer during one).
func (e *Engine) Libraries() []*Library {
	if p := e.libView.Load(); p != nil {
		return *p
	}
	return nil
}

// publish makes the libraries' list Libraries returns; e.mu held.
func (e *Engine) publish() {
	out := make([]*Library, 0, len(e.fl.byLib))
	for _, l := range e.fl.byLib {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *Library) int { return strings.Compare(a.Name, b.Name) })
	e.libView.Store(&out)
}

// Codes returns the code of every library, by name: what Restore takes.
func (e *Engine) Codes() [][]byte {
	var out [][]byte
	for _, l := range e.Libraries() {
		out = append(out, []byte(l.Code))
	}
	return out
}

// Restore loads libraries from their codes (FUNCTION RESTORE, and the
// server's start) with a policy: "FLUSH" replaces every library, "APPEND"
// fails on a library that exists, "REPLACE" replaces those that exist.
// All or nothing: on an error nothing changes.
func (e *Engine) Restore(codes [][]byte, policy string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	next := e.newLibs()
	if policy != "FLUSH" {
		for _, l := range e.fl.byLib {
			lib, err := e.compileLibrary(next, []byte(l.Code))
			if err != nil {
				next.vm.L.Close()
				return err
			}
			next.link(lib)
		}
	}
	for _, code := range codes {
		lib, err := e.compileLibrary(next, code)
		if err == nil && next.byLib[lib.Name] != nil && policy == "APPEND" {
			err = ReplyError(fmt.Sprintf("ERR Library %s already exists", lib.Name))
		}
		if err == nil {
			for _, f := range lib.Functions {
				if o := next.byFn[strings.ToLower(f.Name)]; o != nil && o.Lib.Name != lib.Name {
					err = ReplyError(fmt.Sprintf("ERR Function %s already exists", f.Name))
				}
			}
		}
		if err != nil {
			next.vm.L.Close()
			return err
		}
		next.link(lib)
	}
	e.fl.vm.L.Close()
	e.fl = next
	e.publish()
	return nil
}

// Function returns the function named name (in any case, as Redis),
// nil if there is none.
func (e *Engine) Function(name string) *Function {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fl.byFn[strings.ToLower(name)]
}

// RunFunction runs f (FCALL) as Run runs a script.
func (e *Engine) RunFunction(ctx context.Context, f *Function, c Call) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := e.watchMemory(ctx, cancel)
	defer stop()
	return e.fl.vm.call(ctx, f.fn, f.Name, c)
}

// Libraries' payload (FUNCTION DUMP, and what the server stores): "KVFN",
// version 1, then each library's code as a uvarint length and its bytes,
// then the CRC32C of all that. Only kvarray reads it (Redis's payload is
// an RDB fragment).
var payloadMagic = []byte("KVFN\x01")

// EncodeLibraries is the payload of codes.
func EncodeLibraries(codes [][]byte) []byte {
	b := slices.Clone(payloadMagic)
	for _, c := range codes {
		b = binary.AppendUvarint(b, uint64(len(c)))
		b = append(b, c...)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrPayload: a libraries' payload that is not one EncodeLibraries made.
var ErrPayload = errors.New("DUMP payload version or checksum are wrong")

// DecodeLibraries returns the codes of payload b.
func DecodeLibraries(b []byte) ([][]byte, error) {
	if len(b) < len(payloadMagic)+4 || !bytes.HasPrefix(b, payloadMagic) ||
		crc32.Checksum(b[:len(b)-4], crcTable) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, ErrPayload
	}
	b = b[len(payloadMagic) : len(b)-4]
	var codes [][]byte
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return nil, ErrPayload
		}
		codes = append(codes, b[k:k+int(n)])
		b = b[k+int(n):]
	}
	return codes, nil
}
