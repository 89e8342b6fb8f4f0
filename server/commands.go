package server

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"
)

// command is one row of the command table: how to run it and what
// COMMAND INFO / COMMAND DOCS say of it.
type command struct {
	name  string // lower case, as COMMAND reports it
	arity int    // Redis's: n means exactly n words, -n at least n
	flags []string
	// first, last and step locate the key arguments (COMMAND INFO).
	first, last, step int
	acl               []string // ACL categories, without '@'
	group             string
	since             string
	summary           string
	complexity        string
	args              []arg
	run               func(*call)
}

// arg documents one argument for COMMAND DOCS (redis-cli's hints).
type arg struct {
	name, typ, token   string
	optional, multiple bool
	sub                []arg
}

// entry is a command with its call counter (INFO commandstats).
type entry struct {
	*command
	calls atomic.Int64
}

// Argument builders for the table.
func keyArg(name string) arg         { return arg{name: name, typ: "key"} }
func strArg(name string) arg         { return arg{name: name, typ: "string"} }
func intArg(name string) arg         { return arg{name: name, typ: "integer"} }
func token(tok string) arg           { return arg{name: strings.ToLower(tok), typ: "pure-token", token: tok} }
func optional(a arg) arg             { a.optional = true; return a }
func multiple(a arg) arg             { a.multiple = true; return a }
func tokenArg(tok string, a arg) arg { a.token = tok; return a }
func oneof(name string, as ...arg) arg {
	return arg{name: name, typ: "oneof", sub: as}
}
func block(name string, as ...arg) arg {
	return arg{name: name, typ: "block", sub: as}
}

// commands is the command table. To add a command, add a row; COMMAND,
// COMMAND DOCS and INFO commandstats pick it up.
var commands = []*command{
	// Connection.
	{name: "ping", arity: -1, flags: []string{"fast"}, acl: []string{"fast", "connection"}, group: "connection", since: "1.0.0",
		summary: "Returns the server's liveliness response.", complexity: "O(1)",
		args: []arg{optional(strArg("message"))}, run: cmdPing},
	{name: "echo", arity: 2, flags: []string{"fast"}, acl: []string{"fast", "connection"}, group: "connection", since: "1.0.0",
		summary: "Returns the given string.", complexity: "O(1)", args: []arg{strArg("message")}, run: cmdEcho},
	{name: "hello", arity: -1, flags: []string{"noscript", "loading", "stale", "fast", "no_auth", "allow_busy"}, acl: []string{"fast", "connection"},
		group: "connection", since: "6.0.0", complexity: "O(1)",
		summary: "Handshakes with the server. kvarray speaks RESP2 only: HELLO 3 is refused with NOPROTO.",
		args: []arg{optional(block("arguments", intArg("protover"),
			optional(tokenArg("AUTH", block("username-password", strArg("username"), strArg("password")))),
			optional(tokenArg("SETNAME", strArg("clientname")))))}, run: cmdHello},
	{name: "auth", arity: -2, flags: []string{"noscript", "loading", "stale", "fast", "no_auth", "allow_busy"}, acl: []string{"fast", "connection"},
		group: "connection", since: "1.0.0", complexity: "O(N) where N is the number of passwords defined for the user",
		summary: "Authenticates the connection as the default user (requirepass) or an ACL user.",
		args:    []arg{optional(strArg("username")), strArg("password")}, run: cmdAuth},
	{name: "client", arity: -2, acl: []string{"slow", "connection"}, group: "connection", since: "2.4.0",
		summary:    "A container for client connection commands: ID, GETNAME, SETNAME, SETINFO, INFO, LIST, NO-EVICT, NO-TOUCH.",
		complexity: "Depends on subcommand.", args: []arg{strArg("subcommand"), optional(multiple(strArg("arg")))}, run: cmdClient},
	{name: "select", arity: 2, flags: []string{"loading", "stale", "fast"}, acl: []string{"keyspace", "fast"}, group: "connection", since: "1.0.0",
		summary: "Changes the selected database. kvarray has database 0 only.", complexity: "O(1)",
		args: []arg{intArg("index")}, run: cmdSelect},
	{name: "quit", arity: -1, flags: []string{"allow_busy", "noscript", "loading", "stale", "fast", "no_auth"}, acl: []string{"fast", "connection"},
		group: "connection", since: "1.0.0", summary: "Closes the connection.", complexity: "O(1)", run: cmdQuit},

	// Strings.
	{name: "get", arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, acl: []string{"read", "string", "fast"},
		group: "string", since: "1.0.0", summary: "Returns the value of a key (nil if it does not exist).", complexity: "O(1)",
		args: []arg{keyArg("key")}, run: cmdGet},
	{name: "set", arity: -3, flags: []string{"write", "denyoom"}, first: 1, last: 1, step: 1, acl: []string{"write", "string", "slow"},
		group: "string", since: "1.0.0", complexity: "O(1)",
		summary: "Sets the value of a key. NX and XX are supported; expiry options and GET are not.",
		args:    []arg{keyArg("key"), strArg("value"), optional(oneof("condition", token("NX"), token("XX")))}, run: cmdSet},
	{name: "setnx", arity: 3, flags: []string{"write", "denyoom", "fast"}, first: 1, last: 1, step: 1, acl: []string{"write", "string", "fast"},
		group: "string", since: "1.0.0", summary: "Sets the value of a key only when it does not exist: 1 if set, 0 if not.", complexity: "O(1)",
		args: []arg{keyArg("key"), strArg("value")}, run: cmdSetNX},
	{name: "mget", arity: -2, flags: []string{"readonly", "fast"}, first: 1, last: -1, step: 1, acl: []string{"read", "string", "fast"},
		group: "string", since: "1.0.0", summary: "Returns the values of one or more keys.", complexity: "O(N) where N is the number of keys to retrieve.",
		args: []arg{multiple(keyArg("key"))}, run: cmdMget},
	{name: "mset", arity: -3, flags: []string{"write", "denyoom"}, first: 1, last: -1, step: 2, acl: []string{"write", "string", "slow"},
		group: "string", since: "1.0.1", complexity: "O(N) where N is the number of keys to set.",
		summary: "Sets the values of one or more keys (stored concurrently; not atomic for readers).",
		args:    []arg{multiple(block("data", keyArg("key"), strArg("value")))}, run: cmdMset},
	{name: "strlen", arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, acl: []string{"read", "string", "fast"},
		group: "string", since: "2.2.0", summary: "Returns the length of a value (reads the value).", complexity: "O(N) in kvarray: the value is read.",
		args: []arg{keyArg("key")}, run: cmdStrlen},

	// Keyspace.
	{name: "del", arity: -2, flags: []string{"write"}, first: 1, last: -1, step: 1, acl: []string{"keyspace", "write", "slow"},
		group: "generic", since: "1.0.0", summary: "Deletes one or more keys; returns how many existed.",
		complexity: "O(N) where N is the number of keys that will be removed.", args: []arg{multiple(keyArg("key"))}, run: cmdDel},
	{name: "exists", arity: -2, flags: []string{"readonly", "fast"}, first: 1, last: -1, step: 1, acl: []string{"keyspace", "read", "fast"},
		group: "generic", since: "1.0.0", summary: "Counts how many of the given keys exist.",
		complexity: "O(N) where N is the number of keys to check.", args: []arg{multiple(keyArg("key"))}, run: cmdExists},
	{name: "type", arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, acl: []string{"keyspace", "read", "fast"},
		group: "generic", since: "1.0.0", summary: "Returns string for a key that exists, none otherwise.", complexity: "O(1)",
		args: []arg{keyArg("key")}, run: cmdType},
	{name: "ttl", arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, acl: []string{"keyspace", "read", "fast"},
		group: "generic", since: "1.0.0", summary: "Returns -1 for a key that exists (kvarray has no expiry), -2 otherwise.", complexity: "O(1)",
		args: []arg{keyArg("key")}, run: cmdTTL},
	{name: "pttl", arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, acl: []string{"keyspace", "read", "fast"},
		group: "generic", since: "2.6.0", summary: "Returns -1 for a key that exists (kvarray has no expiry), -2 otherwise.", complexity: "O(1)",
		args: []arg{keyArg("key")}, run: cmdTTL},
	{name: "scan", arity: -2, flags: []string{"readonly"}, acl: []string{"keyspace", "read", "slow"}, group: "generic", since: "2.8.0",
		summary:    "Iterates over the keys. The cursor is a position in hash order; each call lists all keys.",
		complexity: "O(N log N) per call in kvarray, N the number of keys.",
		args: []arg{intArg("cursor"), optional(tokenArg("MATCH", arg{name: "pattern", typ: "pattern"})),
			optional(tokenArg("COUNT", intArg("count"))), optional(tokenArg("TYPE", strArg("type")))}, run: cmdScan},
	{name: "keys", arity: 2, flags: []string{"readonly"}, acl: []string{"keyspace", "read", "slow", "dangerous"}, group: "generic", since: "1.0.0",
		summary: "Returns the keys that match a pattern, in byte order.", complexity: "O(N) with N being the number of keys.",
		args: []arg{{name: "pattern", typ: "pattern"}}, run: cmdKeys},
	{name: "dbsize", arity: 1, flags: []string{"readonly"}, acl: []string{"keyspace", "read", "slow"}, group: "server", since: "1.0.0",
		summary: "Returns the number of keys.", complexity: "O(N) in kvarray: the keys are listed.", run: cmdDBSize},

	// Server.
	{name: "info", arity: -1, flags: []string{"loading", "stale"}, acl: []string{"slow", "dangerous"}, group: "server", since: "1.0.0",
		summary:    "Returns information and statistics: sections server, clients, stats, commandstats, keyspace, kvarray.",
		complexity: "O(N): keyspace and kvarray read every key.", args: []arg{optional(multiple(strArg("section")))}, run: cmdInfo},
	{name: "command", arity: -1, flags: []string{"loading", "stale"}, acl: []string{"slow", "connection"}, group: "server", since: "2.8.13",
		summary:    "Returns detailed information about commands: COMMAND, COMMAND COUNT, COMMAND INFO, COMMAND DOCS, COMMAND LIST.",
		complexity: "O(N) where N is the total number of commands", run: cmdCommand},
	{name: "config", arity: -2, acl: []string{"slow"}, group: "server", since: "2.0.0",
		summary: "CONFIG GET reports a few settings so that tools can start; CONFIG SET is not supported.", complexity: "Depends on subcommand.",
		args: []arg{strArg("subcommand"), optional(multiple(strArg("arg")))}, run: cmdConfig},

	// Admin: the array's own commands.
	{name: "kvarray.status", arity: 1, flags: []string{"readonly", "admin"}, acl: []string{"admin", "slow"}, group: "kvarray", since: "0.1.0",
		summary: "Returns the array's status (devices, mechanisms, storage overhead) as JSON.", complexity: "O(N): reads every value's header.",
		run: cmdStatus},
	{name: "kvarray.set", arity: 4, flags: []string{"write", "denyoom"}, first: 1, last: 1, step: 1, acl: []string{"write", "string", "slow"},
		group: "kvarray", since: "0.1.0", summary: "Sets the value of a key with the named reliability mechanism.", complexity: "O(1)",
		args: []arg{keyArg("key"), strArg("value"), strArg("mechanism")}, run: cmdKvSet},
	{name: "kvarray.fail", arity: 2, flags: []string{"admin"}, acl: []string{"admin", "dangerous"}, group: "kvarray", since: "0.1.0",
		summary: "Fails device DEV (mem devices only) and marks it failed in the array.", complexity: "O(1)",
		args: []arg{intArg("dev")}, run: cmdFail},
	{name: "kvarray.recover", arity: 2, flags: []string{"admin"}, acl: []string{"admin", "dangerous"}, group: "kvarray", since: "0.1.0",
		summary:    "Brings failed mem device DEV back with the data it had and resyncs it; replies with the resync report as JSON.",
		complexity: "O(N) where N is the number of keys the device missed.",
		args:       []arg{intArg("dev")}, run: cmdRecover},
	{name: "kvarray.scrub", arity: -1, flags: []string{"admin"}, acl: []string{"admin", "slow"}, group: "kvarray", since: "0.1.0",
		summary:    "Reads every value and redundant piece and verifies them; with REPAIR, repairs what is bad. Replies with the report as JSON.",
		complexity: "O(N) where N is the number of keys.",
		args:       []arg{optional(token("REPAIR")), optional(tokenArg("WORKERS", intArg("n")))}, run: cmdScrub},
	{name: "kvarray.rebuild", arity: -2, flags: []string{"admin"}, acl: []string{"admin", "dangerous", "slow"}, group: "kvarray", since: "0.1.0",
		summary:    "Rebuilds device DEV (a mem device is first replaced by an empty one); replies with the report as JSON.",
		complexity: "O(N) where N is the number of keys on the neighbouring devices.",
		args:       []arg{intArg("dev"), optional(tokenArg("WORKERS", intArg("n")))}, run: cmdRebuild},
}

// call is one command being run.
type call struct {
	s    *Server
	rc   redcon.Conn
	cl   *conn
	args [][]byte
	ctx  context.Context
	e    *entry
}

// error replies with an error; msg starts with its code (ERR, NOPROTO…).
func (c *call) error(msg string) {
	c.s.stats.errors.Add(1)
	c.rc.WriteError(msg)
}

// fail replies with the error for err.
func (c *call) fail(err error) { c.error(errorReply(err)) }

func (c *call) syntaxError() { c.error("ERR syntax error") }

// arityError is Redis's error for a command (or "container|sub") given
// the wrong number of arguments.
func (c *call) arityError(name string) {
	c.error(fmt.Sprintf("ERR wrong number of arguments for '%s' command", name))
}

func (c *call) ok() { c.rc.WriteString("OK") }

// serveRESP is redcon's handler: it looks the command up and runs it.
func (s *Server) serveRESP(rc redcon.Conn, cmd redcon.Command) {
	cl, _ := rc.Context().(*conn)
	if cl == nil || cl.quit || len(cmd.Args) == 0 {
		return
	}
	s.stats.commands.Add(1)
	cl.last.Store(time.Now().UnixNano())
	c := &call{s: s, rc: rc, cl: cl, args: cmd.Args, ctx: s.ctx}
	for _, a := range cmd.Args {
		if n, ok := oversized(&s.nonce, a); ok {
			c.error(fmt.Sprintf("ERR value too large: an argument of %d bytes, over the server's limit of %d bytes per argument (the array's largest value is %d bytes)",
				n, s.o.maxBulk, s.maxValue))
			return
		}
	}
	e := s.lookup(cmd.Args[0])
	if e == nil {
		c.unknownCommand()
		return
	}
	c.e = e
	cl.lastCmd.Store(&e.name)
	if n := len(cmd.Args); e.arity > 0 && n != e.arity || e.arity < 0 && n < -e.arity {
		c.arityError(e.name)
		return
	}
	if !s.permit(c) {
		return
	}
	defer s.observe(e.name, time.Now())
	e.calls.Add(1)
	defer func() {
		if r := recover(); r != nil {
			// A bug: the reply may be half written, so the connection
			// cannot go on. Other connections are not affected.
			s.o.errorLog.Printf("kvarray server: panic in %s from %s: %v\n%s", e.name, cl.addr, r, debug.Stack())
			c.error(fmt.Sprintf("ERR internal error in '%s' (logged); closing the connection", e.name))
			rc.ReadPipeline()
			cl.quit = true
			rc.Close()
		}
	}()
	e.run(c)
}

// lookup finds a command by name, in any case, without allocating.
func (s *Server) lookup(name []byte) *entry {
	var buf [32]byte
	if len(name) > len(buf) {
		return nil
	}
	for i, ch := range name {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		buf[i] = ch
	}
	return s.cmds[string(buf[:len(name)])]
}

// unknownCommand replies as Redis 7 does, quoting the first 128 bytes of
// the arguments.
func (c *call) unknownCommand() {
	var b strings.Builder
	for _, a := range c.args[1:] {
		if b.Len() >= 128 {
			break
		}
		fmt.Fprintf(&b, "'%s' ", truncate(a, 128-b.Len()))
	}
	c.error(fmt.Sprintf("ERR unknown command '%s', with args beginning with: %s", truncate(c.args[0], 128), b.String()))
}

// unknownSubcommand replies as Redis 7 does for a container command.
func (c *call) unknownSubcommand(container string) {
	c.error(fmt.Sprintf("ERR unknown subcommand '%s'. Try %s HELP.", truncate(c.args[1], 128), strings.ToUpper(container)))
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// upper returns an ASCII option word in upper case, for comparisons.
func upper(b []byte) string {
	if len(b) > 32 {
		return ""
	}
	return strings.ToUpper(string(b))
}
