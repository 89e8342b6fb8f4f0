// Package script runs Redis Lua scripts (EVAL, EVALSHA, SCRIPT) on a Lua
// 5.1 VM (github.com/yuin/gopher-lua) in Redis 7's script environment:
// redis.call/pcall, error_reply, status_reply, sha1hex, log, setresp,
// set_repl, KEYS and ARGV, the string, table, math, cjson and bit
// libraries, no os, io, loadfile or dofile, and globals that a script can
// neither create nor change.
//
// The package knows nothing of the server: a run is given a function
// that runs one command (its arguments) as the calling client and
// returns the command's reply as RESP bytes, and the run returns the
// script's reply as RESP bytes in the caller's protocol. What a command
// may do inside a script (refusals, permissions, read-only scripts,
// atomicity) is the caller's business.
//
// Invariants:
//   - One script runs at a time per Engine (the VM is not safe for
//     concurrent use): Run, Load and Flush are serialised. The caller
//     makes a script atomic towards its other clients.
//   - A script stops when the context it runs under ends: between any two
//     VM instructions, or when its command returns. The reply then says
//     why (ErrKilled, ErrMemory, or the context's cause) and pcall cannot
//     keep the script going: every instruction after it raises the error
//     again.
//   - A script may grow the Go heap by at most Config.MaxMemory bytes
//     (checked every few milliseconds, and before string.rep builds a
//     string); past it the script is stopped with ErrMemory.
//   - The compiled-script cache holds at most Config.MaxCacheBytes of
//     script bodies; the least recently used scripts are dropped past it
//     (EVALSHA of a dropped script answers NOSCRIPT, which clients handle
//     by sending EVAL).
package script

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// Why a script was stopped (the cause of the context it ran under); the
// reply carries the message, worded as Redis words it.
var (
	ErrKilled error = stopError("Script killed by user with SCRIPT KILL...")
	ErrMemory error = stopError("Script exceeded the memory limit of scripts")
)

type stopError string

func (e stopError) Error() string { return string(e) }

// Flags are a script's shebang flags (#!lua flags=...).
type Flags uint16

const (
	// Compat: no shebang; the script runs as Redis 6 ran it.
	Compat Flags = 1 << iota
	NoWrites
	AllowOOM
	AllowStale
	NoCluster
	AllowCrossSlot
)

var flagNames = map[string]Flags{"no-writes": NoWrites, "allow-oom": AllowOOM, "allow-stale": AllowStale,
	"no-cluster": NoCluster, "allow-cross-slot-keys": AllowCrossSlot}

// Script is a compiled script.
type Script struct {
	SHA   string // lower-case hex SHA1 of the body
	Flags Flags
	proto *lua.FunctionProto
	size  int
	elem  *list.Element
}

// Config bounds an Engine.
type Config struct {
	// MaxMemory is how many bytes a script may grow the heap by
	// (default 256 MiB).
	MaxMemory int64
	// MaxCacheBytes bounds the bodies of the cached scripts (default
	// 64 MiB).
	MaxCacheBytes int
	// Log receives redis.log's lines (level 0 debug .. 3 warning).
	Log func(level int, msg string)
}

// Engine is a Lua VM and its compiled-script cache.
type Engine struct {
	cfg   Config
	mu    sync.Mutex
	vm    *vm   // EVAL's
	fl    *libs // FUNCTION's
	cache map[string]*Script
	lru   list.List // front: most recently used
	bytes int
	// What answers without waiting for a running script: the libraries
	// (publish) and how many scripts are cached.
	libView atomic.Pointer[[]*Library]
	cached  atomic.Int64
}

// New returns an Engine.
func New(cfg Config) *Engine {
	if cfg.MaxMemory <= 0 {
		cfg.MaxMemory = 256 << 20
	}
	if cfg.MaxCacheBytes <= 0 {
		cfg.MaxCacheBytes = 64 << 20
	}
	if cfg.Log == nil {
		cfg.Log = func(int, string) {}
	}
	e := &Engine{cfg: cfg, cache: map[string]*Script{}}
	e.vm = newVM(e)
	e.fl = e.newLibs()
	return e
}

// SHA1Hex is the SHA1 of b in lower-case hex (the script's name).
func SHA1Hex(b []byte) string {
	s := sha1.Sum(b)
	return hex.EncodeToString(s[:])
}

// ReplyError is an error whose text is the reply to send ("ERR ...").
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

// Load compiles body (or finds it in the cache) and returns the script.
// Errors are ReplyErrors: a bad shebang, a compile error.
func (e *Engine) Load(body []byte) (*Script, error) {
	sha := SHA1Hex(body)
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.cache[sha]; s != nil {
		e.lru.MoveToFront(s.elem)
		return s, nil
	}
	flags, skip, err := shebang(body)
	if err != nil {
		return nil, err
	}
	// The shebang line is skipped but its newline kept, so that line
	// numbers are the user's.
	chunk, err := parse.Parse(bytes.NewReader(body[skip:]), "user_script")
	if err != nil {
		return nil, ReplyError("ERR Error compiling script (new function): " + compileError(err))
	}
	proto, err := lua.Compile(chunk, "user_script")
	if err != nil {
		return nil, ReplyError("ERR Error compiling script (new function): " + compileError(err))
	}
	s := &Script{SHA: sha, Flags: flags, proto: proto, size: len(body)}
	s.elem = e.lru.PushFront(s)
	e.cache[sha] = s
	e.bytes += s.size
	for e.bytes > e.cfg.MaxCacheBytes && e.lru.Len() > 1 {
		old := e.lru.Back().Value.(*Script)
		e.lru.Remove(old.elem)
		delete(e.cache, old.SHA)
		e.bytes -= old.size
	}
	e.cached.Store(int64(len(e.cache)))
	return s, nil
}

// compileError is the parser's message.
func compileError(err error) string { return strings.TrimSpace(err.Error()) }

// Get returns the cached script of sha (any case), nil if there is none.
func (e *Engine) Get(sha string) *Script {
	sha = strings.ToLower(sha)
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.cache[sha]
	if s != nil {
		e.lru.MoveToFront(s.elem)
	}
	return s
}

// Exists reports whether sha is cached (SCRIPT EXISTS: case matters, as
// in Redis).
func (e *Engine) Exists(sha string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cache[sha] != nil
}

// Cached is how many scripts the cache holds.
func (e *Engine) Cached() int { return int(e.cached.Load()) }

// FunctionCount is how many functions the libraries register.
func (e *Engine) FunctionCount() int {
	n := 0
	for _, l := range e.Libraries() {
		n += len(l.Functions)
	}
	return n
}

// Flush drops every cached script and starts a new VM (SCRIPT FLUSH).
func (e *Engine) Flush() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cache = map[string]*Script{}
	e.lru.Init()
	e.bytes = 0
	e.cached.Store(0)
	e.vm.L.Close()
	e.vm = newVM(e)
}

// shebang parses "#!lua flags=a,b" (evalExtractShebangFlags): the flags
// and the length of the shebang line, without its newline.
func shebang(body []byte) (Flags, int, error) {
	if !bytes.HasPrefix(body, []byte("#!")) {
		return Compat, 0, nil
	}
	end := bytes.IndexByte(body, '\n')
	if end < 0 {
		return 0, 0, ReplyError("ERR Invalid script shebang")
	}
	parts := splitArgs(string(body[:end]))
	if len(parts) == 0 {
		return 0, 0, ReplyError("ERR Invalid engine in script shebang")
	}
	if parts[0] != "#!lua" {
		return 0, 0, ReplyError("ERR Unexpected engine in script shebang: " + parts[0])
	}
	var flags Flags
	for _, p := range parts[1:] {
		v, ok := strings.CutPrefix(p, "flags=")
		if !ok {
			return 0, 0, ReplyError("ERR Unknown lua shebang option: " + p)
		}
		for _, f := range strings.Split(v, ",") {
			if f == "" && v == "" {
				continue
			}
			fl, ok := flagNames[f]
			if !ok {
				return 0, 0, ReplyError("ERR Unexpected flag in script shebang: " + f)
			}
			flags |= fl
		}
	}
	return flags, end, nil
}

// Call is one run of a script.
type Call struct {
	Keys, Args [][]byte
	// Proto is the caller's protocol, 2 or 3: the script's reply is in it.
	Proto int
	// Do runs one command for redis.call and redis.pcall with the
	// arguments the script gave, and returns its reply as RESP bytes in
	// protocol proto (the script's: 2 unless it called redis.setresp(3)).
	// A command the caller refuses is an error reply ("-ERR ...").
	Do func(argv [][]byte, proto int) []byte
	// ACLCheck answers redis.acl_check_cmd: whether the calling user may
	// run argv (allowed), and whether argv names a command at all
	// (known). Nil allows everything.
	ACLCheck func(argv [][]byte) (allowed, known bool)
	// ErrorReply, if set, is called for each error reply the script's
	// reply holds, nested ones too; counted: a command answered the
	// script with it (Redis counted it in INFO errorstats then, and does
	// not again).
	ErrorReply func(msg string, counted bool)
}

// Run runs s and returns its reply, RESP bytes in c.Proto. It stops when
// ctx ends (see the package comment).
func (e *Engine) Run(ctx context.Context, s *Script, c Call) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := e.watchMemory(ctx, cancel)
	defer stop()
	return e.vm.run(ctx, s, c)
}

// watchMemory stops the script (ErrMemory) once the heap has grown by more
// than the limit since it started; it returns the function that ends the
// watch. The first check is after 10 ms, so a short script costs one
// timer.
func (e *Engine) watchMemory(ctx context.Context, cancel context.CancelCauseFunc) func() {
	base := heapBytes()
	var mu sync.Mutex
	done := false
	var t *time.Timer
	lastGC := time.Time{}
	check := func() {
		mu.Lock()
		defer mu.Unlock()
		if done || ctx.Err() != nil {
			return
		}
		if heapBytes()-base > uint64(e.cfg.MaxMemory) && time.Since(lastGC) > time.Second {
			// Garbage counts until it is collected: collect before
			// judging.
			runtime.GC()
			lastGC = time.Now()
		}
		if heapBytes() > base && heapBytes()-base > uint64(e.cfg.MaxMemory) {
			cancel(ErrMemory)
			return
		}
		t.Reset(10 * time.Millisecond)
	}
	mu.Lock()
	t = time.AfterFunc(10*time.Millisecond, check)
	mu.Unlock()
	return func() {
		mu.Lock()
		done = true
		t.Stop()
		mu.Unlock()
	}
}

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

// heapBytes is the heap's objects, live and not yet collected (cheap: no
// stop of the world).
func heapBytes() uint64 {
	s := make([]metrics.Sample, 1)
	s[0].Name = heapSample[0].Name
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// stopReason is the message for a script its context stopped.
func stopReason(ctx context.Context) string {
	switch err := context.Cause(ctx); {
	case errors.Is(err, ErrKilled), errors.Is(err, ErrMemory):
		return "ERR " + err.Error()
	case err != nil:
		return fmt.Sprintf("ERR script stopped: %v", err)
	}
	return ""
}

// Names are the flags' names, as FUNCTION LIST shows them.
func (f Flags) Names() []string {
	var out []string
	for _, name := range []string{"no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"} {
		if f&flagNames[name] != 0 {
			out = append(out, name)
		}
	}
	return out
}

// splitArgs splits a shebang line as Redis's sdssplitargs does: on
// spaces, with "..." (backslash escapes) and '...' quoting, also inside
// a word (name="foo" is name=foo).
func splitArgs(line string) []string {
	var out []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case quote != 0 && ch == '\\' && quote == '"' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case quote != 0 && ch == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(ch)
		case ch == '"' || ch == '\'':
			quote, in = ch, true
		case ch == ' ' || ch == '\t' || ch == '\r':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(ch)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}
