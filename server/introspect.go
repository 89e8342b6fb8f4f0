package server

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Introspection that tools and clients read: SLOWLOG, LATENCY, ROLE,
// LOLWUT, MODULE LIST, COMMAND GETKEYS and GETKEYSANDFLAGS, with Redis
// 7.0's replies. kvarray has no replicas, no modules and no latency
// monitor events of its own (LATENCY answers as a Redis whose monitor saw
// nothing); the slow log records commands as Redis does.

func init() {
	commands = append(commands, introspectCommands()...)
	params = append(params, slowlogParams...)
}

func introspectCommands() []*command {
	sub := []arg{strArg("subcommand"), optional(multiple(strArg("arg")))}
	return []*command{
		{name: "slowlog", arity: -2, flags: []string{"admin", "loading", "stale"}, acl: []string{"admin", "slow", "dangerous"}, group: "server", since: "2.2.12",
			summary: "SLOWLOG GET [count], LEN, RESET, HELP: the commands that ran longer than slowlog-log-slower-than microseconds.", complexity: "Depends on subcommand.",
			args: sub, run: cmdSlowlog},
		{name: "latency", arity: -2, flags: []string{"admin", "noscript", "loading", "stale"}, acl: []string{"admin", "slow", "dangerous"}, group: "server", since: "2.8.13",
			summary: "LATENCY LATEST, HISTORY, RESET, DOCTOR, GRAPH, HELP: kvarray records no latency events (the monitor is off, latency-monitor-threshold 0).", complexity: "Depends on subcommand.",
			args: sub, run: cmdLatency},
		{name: "role", arity: 1, flags: []string{"noscript", "loading", "stale", "fast"}, acl: []string{"admin", "fast", "dangerous"}, group: "server", since: "2.8.12",
			summary: "Returns master with no replicas: the array's redundancy is within the server.", complexity: "O(1)", run: cmdRole},
		{name: "lolwut", arity: -1, flags: []string{"readonly", "fast"}, acl: []string{"read", "fast"}, group: "server", since: "5.0.0",
			summary: "Displays the version.", complexity: "O(1)", args: []arg{optional(tokenArg("VERSION", intArg("version")))}, run: cmdLolwut},
		{name: "module", arity: -2, flags: []string{"admin", "noscript"}, acl: []string{"admin", "slow", "dangerous"}, group: "server", since: "4.0.0",
			summary: "MODULE LIST (empty: kvarray loads no modules), HELP.", complexity: "O(1)", args: sub, run: cmdModule},
	}
}

// slowEntry is one slow log entry.
type slowEntry struct {
	id         int64
	at         int64 // Unix seconds
	usec       int64
	args       [][]byte
	addr, name string
}

// slowlog is Redis's slow log: the newest entries first, at most max.
type slowlog struct {
	mu      sync.Mutex
	entries []slowEntry
	nextID  int64
	// slower is slowlog-log-slower-than in microseconds (negative: off),
	// read without the lock by every command; max is slowlog-max-len.
	slower atomic.Int64
	max    int64
}

// Redis's limits on what an entry keeps of a command.
const (
	slowlogMaxArgc   = 32
	slowlogMaxArgLen = 128
)

// slow is the server's slow log.
func (s *Server) slow() *slowlog { return &s.cfg.slow }

// recordSlow logs c's command if it ran d or longer: not EXEC
// (skip_slowlog: its commands are logged), nor AUTH and HELLO, whose
// arguments carry passwords (no_auth; Redis redacts them). A command
// that blocked is logged when it is served (logSlow from serveReady),
// with the time it waited, as Redis logs it.
func (s *Server) recordSlow(c *call, d time.Duration) {
	if c.e == nil || c.blocked != nil {
		return
	}
	s.logSlow(c.e, c.cl, c.args, d)
}

func (s *Server) logSlow(e *entry, cl *conn, cmdArgs [][]byte, d time.Duration) {
	l := s.slow()
	if slower := l.slower.Load(); slower < 0 || d.Microseconds() < slower {
		return // most commands: no lock taken
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range e.flags {
		if f == "skip_slowlog" || f == "no_auth" {
			return
		}
	}
	n := min(len(cmdArgs), slowlogMaxArgc)
	args := make([][]byte, n)
	for i := range n {
		a := cmdArgs[i]
		switch {
		case i == n-1 && n < len(cmdArgs):
			a = []byte(fmt.Sprintf("... (%d more arguments)", len(cmdArgs)-n+1))
		case len(a) > slowlogMaxArgLen:
			a = append(append([]byte(nil), a[:slowlogMaxArgLen]...), fmt.Sprintf("... (%d more bytes)", len(a)-slowlogMaxArgLen)...)
		default:
			a = append([]byte(nil), a...)
		}
		args[i] = a
	}
	cl.mu.Lock()
	name := cl.name
	cl.mu.Unlock()
	l.entries = append([]slowEntry{{id: l.nextID, at: time.Now().Unix(), usec: d.Microseconds(), args: args, addr: cl.addr, name: name}}, l.entries...)
	l.nextID++
	if int64(len(l.entries)) > l.max {
		l.entries = l.entries[:l.max]
	}
}

func cmdSlowlog(c *call) {
	l := c.s.slow()
	switch strings.ToLower(string(truncate(c.args[1], 16))) {
	case "get":
		count := int64(10)
		if len(c.args) > 3 {
			c.arityError("slowlog|get")
			return
		}
		if len(c.args) == 3 {
			n, err := parseInt(c.args[2])
			if err != nil || n < -1 {
				c.error("ERR count should be greater than or equal to -1")
				return
			}
			count = n
		}
		l.mu.Lock()
		es := l.entries
		if count >= 0 && int64(len(es)) > count {
			es = es[:count]
		}
		es = append([]slowEntry(nil), es...)
		l.mu.Unlock()
		c.w.WriteArray(len(es))
		for _, e := range es {
			c.w.WriteArray(6)
			c.w.WriteInt64(e.id)
			c.w.WriteInt64(e.at)
			c.w.WriteInt64(e.usec)
			c.w.WriteArray(len(e.args))
			for _, a := range e.args {
				c.w.WriteBulk(a)
			}
			c.w.WriteBulkString(e.addr)
			c.w.WriteBulkString(e.name)
		}
	case "len":
		l.mu.Lock()
		n := len(l.entries)
		l.mu.Unlock()
		c.w.WriteInt(n)
	case "reset":
		l.mu.Lock()
		l.entries = nil
		l.mu.Unlock()
		c.ok()
	case "help":
		c.lines([]string{"SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"GET [<count>]", "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
			"    Entries are made of:", "    id, timestamp, time in microseconds, arguments array, client IP and port,", "    client name",
			"LEN", "    Return the length of the slowlog.",
			"RESET", "    Reset the slowlog.",
			"HELP", "    Print this help."})
	default:
		c.unknownSubcommand("slowlog")
	}
}

// slowlogParams are CONFIG's slow log parameters.
var slowlogParams = []param{
	{name: "slowlog-log-slower-than", get: func(s *Server) string {
		return strconv.FormatInt(s.slow().slower.Load(), 10)
	}, set: func(s *Server, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("argument couldn't be parsed into an integer")
		}
		s.slow().slower.Store(n)
		return nil
	}},
	{name: "slowlog-max-len", get: func(s *Server) string {
		l := s.slow()
		l.mu.Lock()
		defer l.mu.Unlock()
		return strconv.FormatInt(l.max, 10)
	}, set: func(s *Server, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("argument must be between 0 and 9223372036854775807 inclusive")
		}
		l := s.slow()
		l.mu.Lock()
		l.max = n
		if int64(len(l.entries)) > n {
			l.entries = l.entries[:n]
		}
		l.mu.Unlock()
		return nil
	}},
	// The latency monitor's (latency.go): 0 is off.
	{name: "latency-monitor-threshold", get: func(s *Server) string { return strconv.FormatInt(s.cfg.latencyThreshold.Load(), 10) },
		set: func(s *Server, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("argument must be between 0 and 9223372036854775807 inclusive")
			}
			s.cfg.latencyThreshold.Store(n)
			return nil
		}},
	latencyTrackingParam,
	// requirepass is the default user's password, as in Redis: setting it
	// resets the user's passwords to it ("" for none, nopass);
	// connections already authenticated stay so.
	{name: "requirepass", get: func(s *Server) string { return *s.cfg.requirepass.Load() },
		set: func(s *Server, v string) error {
			rules := []string{"resetpass", "nopass"}
			if v != "" {
				rules = []string{"resetpass", ">" + v}
			}
			if err := s.acl.SetUser("default", rules); err != nil {
				return err
			}
			s.cfg.requirepass.Store(&v)
			return nil
		}},
}

func cmdRole(c *call) {
	r := &c.s.repl
	r.mu.Lock()
	host, port := r.host, r.port
	r.mu.Unlock()
	if host != "" {
		state := "connect"
		switch {
		case r.linkUp.Load():
			state = "connected"
		case r.syncing.Load():
			state = "sync"
		}
		c.w.WriteArray(5)
		c.w.WriteBulkString("slave")
		c.w.WriteBulkString(host)
		c.w.WriteInt(port)
		c.w.WriteBulkString(state)
		c.w.WriteInt64(r.offset.Load())
		return
	}
	c.w.WriteArray(3)
	c.w.WriteBulkString("master")
	c.w.WriteInt(0)
	c.w.WriteArray(0)
}

// cmdLolwut prints the version, as every LOLWUT does after its art.
func cmdLolwut(c *call) {
	if len(c.args) == 3 && upper(c.args[1]) == "VERSION" {
		if _, err := parseInt(c.args[2]); err != nil {
			c.error(errNotInt)
			return
		}
	} else if len(c.args) != 1 {
		c.syntaxError()
		return
	}
	c.w.WriteVerbatim("kvarray: RAID for key-value devices.\nRedis ver. " + redisVersion + "\n")
}

func cmdModule(c *call) {
	switch strings.ToLower(string(truncate(c.args[1], 16))) {
	case "list":
		c.w.WriteArray(0)
	case "help":
		c.lines([]string{"MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"LIST", "    Return a list of loaded modules (kvarray loads none).",
			"HELP", "    Print this help."})
	case "load", "loadex", "unload":
		c.error("ERR kvarray loads no modules")
	default:
		c.unknownSubcommand("module")
	}
}

// commandGetKeys serves COMMAND GETKEYS and GETKEYSANDFLAGS: the keys the
// command given would access, found as the ACL finds them (Redis 7.0's
// key specs).
func commandGetKeys(c *call, flags bool) {
	if len(c.args) < 4 { // Redis 7.0's arity: the command and an argument
		c.arityError("command|" + strings.ToLower(string(c.args[1])))
		return
	}
	args := c.args[2:]
	cmd := c.s.acl.Table().Resolve(args)
	e := c.s.lookup(args[0])
	if cmd == nil || e == nil {
		c.error("ERR Invalid command specified")
		return
	}
	if !cmd.HasKeys() {
		c.error("ERR The command has no key arguments")
		return
	}
	if cmd.Arity > 0 && len(args) != cmd.Arity || cmd.Arity < 0 && len(args) < -cmd.Arity {
		c.error("ERR Invalid number of arguments specified for command")
		return
	}
	keys := cmd.KeysOf(args)
	if len(keys) == 0 {
		// Redis 7.0: none found is no keys for a command whose keys are
		// optional (EVAL with numkeys 0), an error for another.
		if slices.Contains(e.flags, "no_mandatory_keys") {
			c.w.WriteArray(0)
			return
		}
		c.error("ERR Invalid arguments specified for command")
		return
	}
	c.w.WriteArray(len(keys))
	for _, k := range keys {
		if !flags {
			c.w.WriteBulk(args[k.Pos])
			continue
		}
		c.w.WriteArray(2)
		c.w.WriteBulk(args[k.Pos])
		fs := k.Spec.Names()
		c.w.WriteSet(len(fs))
		for _, f := range fs {
			c.w.WriteString(f)
		}
	}
}
