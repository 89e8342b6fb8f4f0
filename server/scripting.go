package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvarray/kvarray/script"
)

// Scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT, on package
// script's Lua VM. Package script knows the Lua side; this file runs a
// script's commands and makes the script one unit (docs/scripting.md):
//   - Isolation: a script runs under the exclusive transaction lock, as
//     EXEC does, so no other client's command interleaves with it.
//     Scripts that arrive meanwhile share the lock as a batch: one's Lua
//     runs while the one before commits, each waiting for the commits in
//     flight of the keys it names (scriptpipe.go).
//   - Atomicity across a crash: the script's commands run against a
//     transaction overlay (data.go), so its reads see its own writes and
//     nothing is written while it runs; when it ends its writes are
//     committed as EXEC commits its queue (one intent record, tx.go): all
//     of them or none across a crash. A script that raises an error keeps
//     the writes it made before (as in Redis); a script stopped by
//     SCRIPT KILL (which only stops one that has not written), by its
//     memory limit or by the server's shutdown has none applied.
//   - Inside MULTI an EVAL is queued; EXEC runs it in EXEC's own overlay,
//     so the script's writes are part of the transaction's one commit.
//   - redis.call runs a command through the command table and permit, as
//     the calling client's user, in a connection state of the script's
//     own (SELECT inside the script does not change the caller's
//     database). Commands Redis refuses in scripts are refused with its
//     errors; a read-only script (EVAL_RO, EVALSHA_RO, flags=no-writes)
//     runs no write command.
//   - While a script runs longer than busy-reply-threshold (lua-time-limit,
//     5 s by default), other clients' commands get BUSY, except those
//     flagged allow_busy and SCRIPT KILL.

// scriptRun is the script running now.
type scriptRun struct {
	// fn is the function FCALL runs ("" for EVAL); argv its command.
	fn     string
	argv   [][]byte
	caller *conn // the connection that ran it (its tracking, tracking.go)
	start  time.Time
	done   chan struct{}
	cancel context.CancelCauseFunc
	// dirty: the script ran a write command (SCRIPT KILL refuses then).
	dirty atomic.Bool
}

const (
	noScriptReply   = "NOSCRIPT No matching script. Please use EVAL."
	busyReply       = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
	busyFnReply     = "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE."
	unkillableReply = "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command."
)

// DefaultBusyThreshold is busy-reply-threshold's default, as Redis's.
const DefaultBusyThreshold = 5 * time.Second

// refusedInScripts are commands Redis flags noscript that kvarray's table
// does not flag: they act on the connection or the server, not on data.
var refusedInScripts = map[string]bool{"client": true, "config": true, "wait": true}

// scriptCommands are the table's rows for scripting.
func scriptCommands() []*command {
	evalRow := func(name, summary string, ro bool) *command {
		flags := []string{"noscript", "stale", "skip_monitor", "no_mandatory_keys", "movablekeys"}
		if ro {
			flags = append(flags, "readonly")
		} else {
			flags = append(flags, "may_replicate")
		}
		first := "script"
		if strings.HasPrefix(name, "evalsha") {
			first = "sha1"
		}
		return &command{name: name, arity: -3, flags: flags, acl: []string{"slow", "scripting"}, group: "scripting", since: "2.6.0",
			summary: summary, complexity: "Depends on the script that is executed.",
			args: []arg{strArg(first), intArg("numkeys"), optional(multiple(keyArg("key"))), optional(multiple(strArg("arg")))},
			run:  cmdEval, exclusive: true}
	}
	rows := []*command{
		evalRow("eval", "Executes a server-side Lua script, atomically.", false),
		evalRow("evalsha", "Executes a server-side Lua script by SHA1 digest, atomically.", false),
		evalRow("eval_ro", "Executes a read-only server-side Lua script.", true),
		evalRow("evalsha_ro", "Executes a read-only server-side Lua script by SHA1 digest.", true),
		{name: "script", arity: -2, flags: []string{"noscript"}, acl: []string{"slow", "scripting"}, group: "scripting", since: "2.6.0",
			summary:    "SCRIPT LOAD, EXISTS, FLUSH, KILL and HELP: the Lua script cache and the running script.",
			complexity: "Depends on subcommand.", args: []arg{strArg("subcommand"), optional(multiple(strArg("arg")))},
			run: cmdScript, exclusive: true},
	}
	rows[2].since, rows[3].since = "7.0.0", "7.0.0"
	return rows
}

func init() { commands = append(commands, scriptCommands()...) }

// newScripts makes the server's script engine.
func (s *Server) newScripts() *script.Engine {
	return script.New(script.Config{Log: func(level int, msg string) {
		if level >= 2 { // notice and warning: Redis's default verbosity
			s.o.errorLog.Printf("kvarray server: script: %s", msg)
		}
	}})
}

func cmdEval(c *call) {
	name := c.e.name
	ro := strings.HasSuffix(name, "_ro")
	numkeys, err := parseInt(c.args[2])
	switch {
	case err != nil:
		c.error(errNotInt)
		return
	case numkeys > int64(len(c.args)-3):
		c.error("ERR Number of keys can't be greater than number of args")
		return
	case numkeys < 0:
		c.error("ERR Number of keys can't be negative")
		return
	}
	var sc *script.Script
	if strings.HasPrefix(name, "evalsha") {
		if len(c.args[1]) == 40 {
			sc = c.s.scripts.Get(string(c.args[1]))
		}
		if sc == nil {
			c.error(noScriptReply)
			return
		}
	} else if sc, err = c.s.scripts.Load(c.args[1]); err != nil {
		c.error(err.Error())
		return
	}
	declared := sc.Flags&script.Compat == 0
	if declared && sc.Flags&script.NoWrites == 0 && ro {
		c.error("ERR Can not execute a script with write flag using *_ro command.")
		return
	}
	keys := c.args[3 : 3+numkeys]
	c.runScript("", ro || declared && sc.Flags&script.NoWrites != 0, func(ctx context.Context, call script.Call) []byte {
		call.Keys, call.Args = keys, c.args[3+numkeys:]
		return c.s.scripts.Run(ctx, sc, call)
	})
}

// runScript runs a script or function (fn its name, "" for EVAL) as one
// unit (see the comment at the top of this file) and replies with its
// reply; exec runs it.
func (c *call) runScript(fn string, readOnly bool, exec func(context.Context, script.Call) []byte) {
	s := c.s
	tx := c.tx
	var undo *txn
	var sk *scriptKeys // what the script's commands name, outside EXEC
	if tx == nil {
		s.enterScripts() // the exclusive transaction lock, for a batch (scriptpipe.go)
		defer s.leaveScripts()
		tx, sk = &txn{}, &scriptKeys{}
	} else {
		undo = tx.clone() // inside EXEC: what a stopped script goes back to
	}
	// One script's Lua at a time, until its commit is registered: the
	// next script's commands must find it in flight.
	s.luaMu.Lock()
	luaHeld := true
	unlockLua := func() {
		if luaHeld {
			luaHeld = false
			s.luaMu.Unlock()
		}
	}
	defer unlockLua()
	ctx, cancel := context.WithCancelCause(c.ctx)
	run := &scriptRun{fn: fn, argv: c.args, caller: c.cl, start: time.Now(), done: make(chan struct{}), cancel: cancel}
	s.script.Store(run)
	// The script is busy (BUSY to others past the threshold, SCRIPT KILL)
	// while its Lua runs; its commit is a transaction's, which others wait
	// for on the lock like an EXEC's, however long the devices take. It
	// is marked busy before anything that takes time under the lock: a
	// command that found no script running and then waited for the lock
	// would wait for the whole script (a script that never ends: until
	// SCRIPT KILL), never told BUSY.
	var ended sync.Once
	end := func() {
		ended.Do(func() {
			s.script.Store(nil)
			close(run.done)
			cancel(nil)
		})
	}
	defer end()
	if c.tx == nil {
		if err := s.completeLeftBehind(c.ctx); err != nil {
			c.fail(err)
			return
		}
	}
	// The script's own connection state: the caller's user and database.
	scl := &conn{Conn: c.cl.Conn, s: s, id: c.cl.id, addr: c.cl.addr, laddr: c.cl.laddr, created: c.cl.created, proto: 2, db: c.cl.db}
	scl.user.Store(c.cl.user.Load())
	failed := false
	reply := exec(ctx, script.Call{Proto: c.w.proto,
		Do: func(argv [][]byte, proto int) []byte {
			return s.scriptCommand(ctx, scl, tx, sk, run, readOnly, argv, proto)
		},
		ACLCheck: func(argv [][]byte) (allowed, known bool) {
			return s.aclAllows(scl, argv)
		},
		ErrorReply: func(msg string, counted bool) {
			if !counted {
				s.countError(msg)
			}
			failed = true
		}})
	stopped := context.Cause(ctx) != nil
	end()
	switch {
	case stopped && undo != nil:
		*tx = *undo
	case stopped:
	case c.tx == nil && len(tx.list) == 0:
		s.publishEvents(tx.events)
	case c.tx == nil:
		f, ahead := s.pipe.takeOff(sk)
		unlockLua()
		err := s.commitAfter(c, tx, ahead)
		s.pipe.land(f)
		if err != nil {
			c.error(fmt.Sprintf("%s (script's writes not applied; if their intent record was stored they are completed before the next write)", errorReply(err)))
			return
		}
		s.publishEvents(tx.events)
	}
	if failed {
		// A script whose reply holds an error failed, as Redis counts
		// it (its errors are in errorstats already).
		c.countFailure()
	}
	c.w.raw(reply)
}

// killScript is SCRIPT KILL (fn false) and FUNCTION KILL (fn true).
func (c *call) killScript(fn bool) {
	run := c.s.script.Load()
	switch {
	case run == nil:
		c.error("NOTBUSY No scripts in execution right now.")
	case run.dirty.Load():
		c.error(unkillableReply)
	case fn && run.fn == "":
		c.error(busyReply)
	case !fn && run.fn != "":
		c.error(busyFnReply)
	default:
		run.cancel(script.ErrKilled)
		// As in Redis, the script has ended when the reply goes out: a
		// command sent after it is not answered BUSY. (The VM sees the
		// cancellation at its next instruction check.)
		select {
		case <-run.done:
		case <-time.After(5 * time.Second):
		}
		c.ok()
	}
}

// commitAfter commits a script's writes once the commits in flight ahead
// of it (scriptpipe.go) have landed. One of them may have failed and left
// its intent record behind, to be completed before the next write: its
// replay would then overwrite this script's writes, so they are not
// applied (the next script completes it first).
func (s *Server) commitAfter(c *call, tx *txn, ahead []*flight) error {
	for _, f := range ahead {
		<-f.done
	}
	if s.pendingN.Load() > 0 {
		return errBehindIntent
	}
	return s.commit(c, tx)
}

// errBehindIntent: a script's commit found a failed commit's intent
// record left behind.
var errBehindIntent = errors.New("an earlier transaction's commit failed and must be completed first; retry")

// clone copies the overlay.
func (t *txn) clone() *txn {
	return &txn{ops: maps.Clone(t.ops), list: slices.Clone(t.list), dbs: slices.Clone(t.dbs)}
}

// scriptCommand runs one command of a script (redis.call) and returns its
// reply in protocol proto (Redis's scriptCall).
func (s *Server) scriptCommand(ctx context.Context, scl *conn, tx *txn, sk *scriptKeys, run *scriptRun, readOnly bool, argv [][]byte, proto int) []byte {
	e := s.lookup(argv[0])
	out := &respWriter{proto: proto}
	c := &call{s: s, cl: scl, args: argv, ctx: ctx, e: e, w: out, tx: tx}
	n := len(argv)
	switch {
	case e == nil:
		c.error("ERR Unknown Redis command called from script")
	case e.arity > 0 && n != e.arity || e.arity < 0 && n < -e.arity:
		c.error("ERR Wrong number of args calling Redis command from script")
	case slices.Contains(e.flags, "noscript") || refusedInScripts[e.name] || e.noTx || e.exclusive || e.admin():
		c.error("ERR This Redis command is not allowed from script")
	case !s.permitScript(c):
	case e.write() && s.repl.readOnly.Load():
		c.error(readonlyReply)
	case readOnly && (e.write() || slices.Contains(e.flags, "may_replicate")):
		c.error("ERR Write commands are not allowed from read-only scripts.")
	default:
		if e.write() {
			run.dirty.Store(true)
		}
		if sk != nil {
			s.awaitKeys(sk, e, scl.db, argv)
		}
		scl.proto = proto
		if run.caller.tracking.Load() && slices.Contains(e.flags, "readonly") {
			// As Redis: a script that reads remembers the keys it
			// declared, for the connection that ran it.
			s.trackKeys(run.caller, run.argv)
		}
		e.calls.Add(1)
		start := time.Now()
		c.running = true
		func() {
			defer func() {
				if r := recover(); r != nil {
					s.o.errorLog.Printf("kvarray server: panic in %s called from a script: %v", e.name, r)
					out.b = out.b[:0]
					c.error(fmt.Sprintf("ERR internal error in '%s' (logged)", e.name))
				}
			}()
			e.run(c)
		}()
		d := time.Since(start)
		e.usec.Add(d.Microseconds())
		s.recordLatency(e, e.name, d)
		s.feedMonitors(c)
	}
	if len(out.refs) > 0 { // not collected by reference (keepRefs off)
		panic("server: a script's command reply kept references")
	}
	return out.b
}

// waitScript holds a command while a script runs: until it ends, or, once
// the script has run for busy-reply-threshold, replies BUSY and returns
// false. Commands flagged allow_busy, SCRIPT KILL, FUNCTION KILL and
// STATS, and admin commands go on at once. Inside MULTI, as in Redis, a
// command refused BUSY makes EXEC fail, and EXEC refused BUSY discards
// the transaction.
func (s *Server) waitScript(c *call, e *entry) bool {
	msg := s.busy(c, e)
	switch {
	case msg == "":
		return true
	case c.cl.multi && e.name == "exec":
		c.cl.endMulti()
		s.unwatch(c.cl)
		c.error("EXECABORT Transaction discarded because of: " + msg)
	case c.cl.multi:
		c.cl.txFailed = true
		c.error(msg)
	default:
		c.error(msg)
	}
	return false
}

// busy waits while a script runs and e may not run alongside it (see
// waitScript); it returns the BUSY error once the script has run past
// the threshold, "" when e may go on.
func (s *Server) busy(c *call, e *entry) string {
	if slices.Contains(e.flags, "allow_busy") || e.admin() ||
		(e.name == "script" || e.name == "function") && len(c.args) > 1 && upper(c.args[1]) == "KILL" ||
		e.name == "function" && len(c.args) > 1 && upper(c.args[1]) == "STATS" {
		return ""
	}
	for {
		run := s.script.Load()
		if run == nil {
			return ""
		}
		limit := time.Duration(s.cfg.busyMs.Load()) * time.Millisecond
		if limit == 0 { // no threshold: wait for the script
			<-run.done
			continue
		}
		left := limit - time.Since(run.start)
		if left <= 0 {
			if run.fn != "" {
				return busyFnReply
			}
			return busyReply
		}
		t := time.NewTimer(left)
		select {
		case <-run.done:
		case <-t.C:
		}
		t.Stop()
	}
}

func cmdScript(c *call) {
	sub := strings.ToLower(string(truncate(c.args[1], 32)))
	want := func(ok bool) bool {
		if !ok {
			c.arityError("script|" + sub)
		}
		return ok
	}
	n := len(c.args)
	switch sub {
	case "load":
		if !want(n == 3) {
			return
		}
		sc, err := c.s.scripts.Load(c.args[2])
		if err != nil {
			c.error(err.Error())
			return
		}
		c.w.WriteBulkString(sc.SHA)
	case "exists":
		if !want(n >= 3) {
			return
		}
		c.w.WriteArray(n - 2)
		for _, sha := range c.args[2:] {
			if c.s.scripts.Exists(string(sha)) {
				c.w.WriteInt(1)
			} else {
				c.w.WriteInt(0)
			}
		}
	case "flush":
		if !want(n <= 3) {
			return
		}
		if n == 3 && upper(c.args[2]) != "SYNC" && upper(c.args[2]) != "ASYNC" {
			c.error("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
			return
		}
		c.s.scripts.Flush()
		c.ok()
	case "kill":
		if !want(n == 2) {
			return
		}
		c.killScript(false)
	case "debug":
		c.error("ERR SCRIPT DEBUG is not supported by kvarray")
	case "help":
		c.lines([]string{"SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"EXISTS <sha1> [<sha1> ...]", "    Return information about the existence of the scripts in the script cache.",
			"FLUSH [ASYNC|SYNC]", "    Flush the Lua scripts cache.",
			"KILL", "    Kill the currently executing Lua script (one that has not written).",
			"LOAD <script>", "    Load a script into the scripts cache without executing it.",
			"HELP", "    Print this help."})
	default:
		c.unknownSubcommand("script")
	}
}
