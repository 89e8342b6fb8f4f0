package server

import (
	"context"
	"errors"
	"fmt"
	"github.com/kvarray/kvarray/internal/glob"
	"strings"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/keyspace"
	"github.com/kvarray/kvarray/script"
)

// Functions: FUNCTION LOAD / DELETE / FLUSH / LIST / DUMP / RESTORE /
// STATS / KILL / HELP and FCALL, FCALL_RO (Redis 7 libraries). FCALL runs
// as EVAL does (scripting.go: one unit, all or nothing). The libraries
// are stored on the array as one record (keyspace.FunctionsKey, the
// payload FUNCTION DUMP returns), written before a change is answered,
// so they survive a restart, a rebuild and the loss of devices as data
// does; the server loads them at start. A change of the libraries holds
// the exclusive transaction lock, so no script runs meanwhile.

func functionCommands() []*command {
	fcallRow := func(name string, ro bool) *command {
		flags := []string{"noscript", "stale", "skip_monitor", "no_mandatory_keys", "movablekeys"}
		if ro {
			flags = append(flags, "readonly")
		} else {
			flags = append(flags, "may_replicate")
		}
		return &command{name: name, arity: -3, flags: flags, acl: []string{"slow", "scripting"}, group: "scripting", since: "7.0.0",
			summary: "Invokes a function.", complexity: "Depends on the function that is executed.",
			args: []arg{strArg("function"), intArg("numkeys"), optional(multiple(keyArg("key"))), optional(multiple(strArg("arg")))},
			run:  cmdFcall, exclusive: true}
	}
	return []*command{fcallRow("fcall", false), fcallRow("fcall_ro", true),
		{name: "function", arity: -2, flags: []string{"noscript"}, acl: []string{"slow", "scripting"}, group: "scripting", since: "7.0.0",
			summary:    "FUNCTION LOAD, DELETE, FLUSH, LIST, DUMP, RESTORE, STATS, KILL, HELP: Lua libraries, stored on the array.",
			complexity: "Depends on subcommand.", args: []arg{strArg("subcommand"), optional(multiple(strArg("arg")))},
			run: cmdFunction, exclusive: true}}
}

func init() { commands = append(commands, functionCommands()...) }

// loadFunctions loads the libraries stored on the array (at start).
func (s *Server) loadFunctions(ctx context.Context) error {
	b, err := s.a.Retrieve(ctx, keyspace.FunctionsKey())
	if errors.Is(err, array.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the function libraries: %w", err)
	}
	codes, err := script.DecodeLibraries(b)
	if err == nil {
		err = s.scripts.Restore(codes, "FLUSH")
	}
	if err != nil {
		return fmt.Errorf("loading the function libraries: %w", err)
	}
	return nil
}

// saveFunctions stores the libraries on the array (deleting the record
// when there are none).
func (s *Server) saveFunctions(ctx context.Context) error {
	codes := s.scripts.Codes()
	var err error
	if len(codes) == 0 {
		if err = s.a.Delete(ctx, keyspace.FunctionsKey()); errors.Is(err, array.ErrNotFound) {
			err = nil
		}
	} else {
		err = s.a.Store(ctx, keyspace.FunctionsKey(), script.EncodeLibraries(codes))
	}
	if err != nil {
		return fmt.Errorf("storing the function libraries: %w", err)
	}
	return nil
}

func cmdFcall(c *call) {
	f := c.s.scripts.Function(string(c.args[1]))
	numkeys, err := parseInt(c.args[2])
	switch {
	case f == nil:
		c.error("ERR Function not found")
		return
	case err != nil:
		c.error("ERR Bad number of keys provided")
		return
	case numkeys > int64(len(c.args)-3):
		c.error("ERR Number of keys can't be greater than number of args")
		return
	case numkeys < 0:
		c.error("ERR Number of keys can't be negative")
		return
	}
	ro := c.e.name == "fcall_ro"
	if ro && f.Flags&script.NoWrites == 0 {
		c.error("ERR Can not execute a script with write flag using *_ro command.")
		return
	}
	keys, args := c.args[3:3+numkeys], c.args[3+numkeys:]
	c.runScript(f.Name, ro || f.Flags&script.NoWrites != 0, func(ctx context.Context, call script.Call) []byte {
		call.Keys, call.Args = keys, args
		return c.s.scripts.RunFunction(ctx, f, call)
	})
}

// change runs a change of the libraries under the exclusive transaction
// lock and stores them; it replies with the change's error, if any.
func (c *call) change(do func() error) bool {
	c.s.txmu.Lock()
	defer c.s.txmu.Unlock()
	if err := do(); err != nil {
		c.error(err.Error())
		return false
	}
	if err := c.s.saveFunctions(c.ctx); err != nil {
		c.fail(err)
		return false
	}
	return true
}

// cmdFunction: FUNCTION's subcommands, with Redis 7's replies.
func cmdFunction(c *call) {
	sub := strings.ToLower(string(truncate(c.args[1], 32)))
	n := len(c.args)
	want := func(ok bool) bool {
		if !ok {
			c.arityError("function|" + sub)
		}
		return ok
	}
	switch sub {
	case "load":
		if !want(n >= 3) {
			return
		}
		replace := false
		i := 2
		for ; i < n-1; i++ {
			if upper(c.args[i]) != "REPLACE" {
				c.error(fmt.Sprintf("ERR Unknown option given: %s", c.args[i]))
				return
			}
			replace = true
		}
		if i >= n {
			c.error("ERR Function code is missing")
			return
		}
		var name string
		if c.change(func() (err error) { name, err = c.s.scripts.LoadLibrary(c.args[i], replace); return err }) {
			c.w.WriteBulkString(name)
		}
	case "delete":
		if want(n == 3) && c.change(func() error { return c.s.scripts.DeleteLibrary(string(c.args[2])) }) {
			c.ok()
		}
	case "flush":
		if n > 3 {
			c.error("ERR unknown subcommand or wrong number of arguments for 'flush'. Try FUNCTION HELP.")
			return
		}
		if n == 3 && upper(c.args[2]) != "SYNC" && upper(c.args[2]) != "ASYNC" {
			c.error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option")
			return
		}
		if c.change(func() error { c.s.scripts.FlushLibraries(); return nil }) {
			c.ok()
		}
	case "list":
		c.functionList()
	case "dump":
		if want(n == 2) {
			c.w.WriteBulk(script.EncodeLibraries(c.s.scripts.Codes()))
		}
	case "restore":
		if !want(n >= 3) {
			return
		}
		if n > 4 {
			c.error("ERR unknown subcommand or wrong number of arguments for 'restore'. Try FUNCTION HELP.")
			return
		}
		policy := "APPEND"
		if n == 4 {
			policy = upper(c.args[3])
			if policy != "FLUSH" && policy != "APPEND" && policy != "REPLACE" {
				c.error("ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.")
				return
			}
		}
		codes, err := script.DecodeLibraries(c.args[2])
		if err != nil {
			c.error("ERR " + err.Error())
			return
		}
		if c.change(func() error { return c.s.scripts.Restore(codes, policy) }) {
			c.ok()
		}
	case "stats":
		if want(n == 2) {
			c.functionStats()
		}
	case "kill":
		if want(n == 2) {
			c.killScript(true)
		}
	case "help":
		c.lines([]string{"FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"LOAD [REPLACE] <FUNCTION CODE>", "    Create a new library with the given library name and code.",
			"DELETE <LIBRARY NAME>", "    Delete the given library.",
			"LIST [LIBRARYNAME PATTERN] [WITHCODE]", "    Return general information on all the libraries.",
			"STATS", "    Return information about the current function running.",
			"KILL", "    Kill the current running function.",
			"FLUSH [ASYNC|SYNC]", "    Delete all the libraries.",
			"DUMP", "    Return a serialized payload representing the current libraries (kvarray's format).",
			"RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]", "    Restore the libraries represented by the given payload (default APPEND).",
			"HELP", "    Print this help."})
	default:
		c.unknownSubcommand("function")
	}
}

// functionList is FUNCTION LIST [WITHCODE] [LIBRARYNAME pattern].
func (c *call) functionList() {
	withCode := false
	var pattern []byte
	for i := 2; i < len(c.args); i++ {
		switch upper(c.args[i]) {
		case "WITHCODE":
			if withCode {
				c.error("ERR Unknown argument withcode")
				return
			}
			withCode = true
		case "LIBRARYNAME":
			if pattern != nil {
				c.error("ERR Unknown argument libraryname")
				return
			}
			if i+1 >= len(c.args) {
				c.error("ERR library name argument was not given")
				return
			}
			i++
			pattern = c.args[i]
		default:
			c.error(fmt.Sprintf("ERR Unknown argument %s", c.args[i]))
			return
		}
	}
	var libs []*script.Library
	for _, l := range c.s.scripts.Libraries() {
		if pattern == nil || glob.Match(pattern, []byte(l.Name)) {
			libs = append(libs, l)
		}
	}
	c.w.WriteArray(len(libs))
	for _, l := range libs {
		fields := 3
		if withCode {
			fields++
		}
		c.w.WriteMap(fields)
		c.w.WriteBulkString("library_name")
		c.w.WriteBulkString(l.Name)
		c.w.WriteBulkString("engine")
		c.w.WriteBulkString("LUA")
		c.w.WriteBulkString("functions")
		c.w.WriteArray(len(l.Functions))
		for _, f := range l.Functions {
			c.w.WriteMap(3)
			c.w.WriteBulkString("name")
			c.w.WriteBulkString(f.Name)
			c.w.WriteBulkString("description")
			if f.Desc == "" {
				c.w.WriteNull()
			} else {
				c.w.WriteBulkString(f.Desc)
			}
			c.w.WriteBulkString("flags")
			names := f.Flags.Names()
			c.w.WriteSet(len(names))
			for _, fl := range names {
				c.w.WriteBulkString(fl)
			}
		}
		if withCode {
			c.w.WriteBulkString("library_code")
			c.w.WriteBulkString(l.Code)
		}
	}
}

// functionStats is FUNCTION STATS.
func (c *call) functionStats() {
	c.w.WriteMap(2)
	c.w.WriteBulkString("running_script")
	if run := c.s.script.Load(); run == nil || run.fn == "" {
		c.w.WriteNull()
	} else {
		c.w.WriteMap(3)
		c.w.WriteBulkString("name")
		c.w.WriteBulkString(run.fn)
		c.w.WriteBulkString("command")
		c.w.WriteArray(len(run.argv))
		for _, a := range run.argv {
			c.w.WriteBulk(a)
		}
		c.w.WriteBulkString("duration_ms")
		c.w.WriteInt64(time.Since(run.start).Milliseconds())
	}
	libs := c.s.scripts.Libraries()
	fns := 0
	for _, l := range libs {
		fns += len(l.Functions)
	}
	c.w.WriteBulkString("engines")
	c.w.WriteMap(1)
	c.w.WriteBulkString("LUA")
	c.w.WriteMap(2)
	c.w.WriteBulkString("libraries_count")
	c.w.WriteInt(len(libs))
	c.w.WriteBulkString("functions_count")
	c.w.WriteInt(fns)
}
