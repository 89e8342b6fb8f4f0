package server

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// redisVersion is the Redis version whose commands, replies and error
// strings the server follows; clients that check versions see it.
const redisVersion = "7.0.0"

func cmdPing(c *call) {
	switch len(c.args) {
	case 1:
		c.rc.WriteString("PONG")
	case 2:
		c.rc.WriteBulk(c.args[1])
	default:
		c.arityError("ping")
	}
}

func cmdEcho(c *call) { c.rc.WriteBulk(c.args[1]) }

// cmdHello: HELLO [protover [AUTH username password] [SETNAME name]]. The
// server speaks RESP2 only: HELLO 3 gets NOPROTO, which clients (go-redis)
// take as "use RESP2"; HELLO and HELLO 2 reply with the connection's
// properties as a flat array, as Redis does in RESP2.
func cmdHello(c *call) {
	next := 1
	if len(c.args) >= 2 {
		v, err := strconv.ParseInt(string(c.args[1]), 10, 64)
		if err != nil {
			c.error("ERR Protocol version is not an integer or out of range")
			return
		}
		if v != 2 {
			c.error("NOPROTO unsupported protocol version")
			return
		}
		next = 2
	}
	var user, name []byte
	setName := false
	for j := next; j < len(c.args); j++ {
		more := len(c.args) - 1 - j
		switch upper(c.args[j]) {
		case "AUTH":
			if more < 2 {
				c.error(fmt.Sprintf("ERR Syntax error in HELLO option '%s'", truncate(c.args[j], 128)))
				return
			}
			user = c.args[j+1]
			j += 2
		case "SETNAME":
			if more < 1 {
				c.error(fmt.Sprintf("ERR Syntax error in HELLO option '%s'", truncate(c.args[j], 128)))
				return
			}
			name, setName = c.args[j+1], true
			j++
		default:
			c.error(fmt.Sprintf("ERR Syntax error in HELLO option '%s'", truncate(c.args[j], 128)))
			return
		}
	}
	if user != nil && string(user) != "default" {
		c.error("WRONGPASS invalid username-password pair or user is disabled.")
		return
	}
	if setName {
		if !validName(name) {
			c.error("ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		c.cl.mu.Lock()
		c.cl.name = string(name)
		c.cl.mu.Unlock()
	}
	c.rc.WriteArray(14)
	c.rc.WriteBulkString("server")
	c.rc.WriteBulkString("redis")
	c.rc.WriteBulkString("version")
	c.rc.WriteBulkString(redisVersion)
	c.rc.WriteBulkString("proto")
	c.rc.WriteInt(2)
	c.rc.WriteBulkString("id")
	c.rc.WriteInt64(c.cl.id)
	c.rc.WriteBulkString("mode")
	c.rc.WriteBulkString("standalone")
	c.rc.WriteBulkString("role")
	c.rc.WriteBulkString("master")
	c.rc.WriteBulkString("modules")
	c.rc.WriteArray(0)
}

// cmdAuth: AUTH [username] password (auth.go).
func cmdAuth(c *call) { authReply(c) }

// validName is Redis's rule for client names: printable ASCII, no spaces.
func validName(b []byte) bool {
	for _, ch := range b {
		if ch < '!' || ch > '~' {
			return false
		}
	}
	return true
}

var clientHelp = []string{
	"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"ID", "    Return the ID of the current connection.",
	"GETNAME", "    Return the name of the current connection.",
	"SETNAME <name>", "    Assign the name <name> to the current connection.",
	"SETINFO <LIB-NAME|LIB-VER> <value>", "    Set client library name and version (reported by CLIENT INFO and LIST).",
	"INFO", "    Return information about the current client connection.",
	"LIST", "    Return information about client connections.",
	"NO-EVICT (ON|OFF)", "    Accepted; kvarray evicts nothing.",
	"NO-TOUCH (ON|OFF)", "    Accepted; kvarray keeps no access times.",
	"HELP", "    Print this help.",
}

// cmdClient: the CLIENT subcommands clients send when they connect, and
// INFO / LIST for people.
func cmdClient(c *call) {
	sub := strings.ToLower(string(truncate(c.args[1], 32)))
	nargs := len(c.args)
	want := func(n int) bool {
		if nargs != n {
			c.arityError("client|" + sub)
			return false
		}
		return true
	}
	switch sub {
	case "id":
		if want(2) {
			c.rc.WriteInt64(c.cl.id)
		}
	case "getname":
		if want(2) {
			c.cl.mu.Lock()
			name := c.cl.name
			c.cl.mu.Unlock()
			if name == "" {
				c.rc.WriteNull()
			} else {
				c.rc.WriteBulkString(name)
			}
		}
	case "setname":
		if !want(3) {
			return
		}
		if !validName(c.args[2]) {
			c.error("ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		c.cl.mu.Lock()
		c.cl.name = string(c.args[2])
		c.cl.mu.Unlock()
		c.ok()
	case "setinfo":
		if !want(4) {
			return
		}
		v := string(c.args[3])
		if !validName(c.args[3]) {
			c.error(fmt.Sprintf("ERR %s cannot contain spaces, newlines or special characters.", strings.ToUpper(string(truncate(c.args[2], 32)))))
			return
		}
		c.cl.mu.Lock()
		defer c.cl.mu.Unlock()
		switch upper(c.args[2]) {
		case "LIB-NAME":
			c.cl.libName = v
		case "LIB-VER":
			c.cl.lib = v
		default:
			c.error(fmt.Sprintf("ERR Unrecognized option '%s'", truncate(c.args[2], 128)))
			return
		}
		c.ok()
	case "info":
		if want(2) {
			c.rc.WriteBulkString(c.cl.info(time.Now()))
		}
	case "list":
		if !want(2) {
			return
		}
		c.s.mu.Lock()
		conns := c.s.connList()
		c.s.mu.Unlock()
		slices.SortFunc(conns, func(x, y *conn) int { return int(x.id - y.id) })
		var b strings.Builder
		now := time.Now()
		for _, cl := range conns {
			b.WriteString(cl.info(now))
		}
		c.rc.WriteBulkString(b.String())
	case "no-evict", "no-touch":
		if !want(3) {
			return
		}
		switch upper(c.args[2]) {
		case "ON", "OFF":
			c.ok()
		default:
			c.syntaxError()
		}
	case "help":
		c.rc.WriteArray(len(clientHelp))
		for _, l := range clientHelp {
			c.rc.WriteString(l)
		}
	default:
		c.unknownSubcommand("client")
	}
}

// info is the connection's line in CLIENT LIST.
func (cl *conn) info(now time.Time) string {
	cl.mu.Lock()
	name, libName, lib := cl.name, cl.libName, cl.lib
	cl.mu.Unlock()
	cmd := "NULL"
	if p := cl.lastCmd.Load(); p != nil {
		cmd = *p
	}
	idle := now.Sub(time.Unix(0, cl.last.Load()))
	return fmt.Sprintf("id=%d addr=%s laddr=%s name=%s age=%d idle=%d db=0 cmd=%s lib-name=%s lib-ver=%s\n",
		cl.id, cl.addr, cl.laddr, name, int(now.Sub(cl.created).Seconds()), int(idle.Seconds()), cmd, libName, lib)
}

func cmdSelect(c *call) {
	n, err := strconv.ParseInt(string(c.args[1]), 10, 64)
	switch {
	case err != nil:
		c.error("ERR value is not an integer or out of range")
	case n != 0:
		c.error("ERR DB index is out of range")
	default:
		c.ok()
	}
}

// cmdQuit replies OK and closes the connection: commands pipelined after
// it are not run.
func cmdQuit(c *call) {
	c.ok()
	c.rc.ReadPipeline()
	c.cl.quit = true
	c.rc.Close()
}

// cmdConfig: CONFIG GET answers the parameters tools ask for at start
// (redis-benchmark asks for save and appendonly); nothing can be set.
func cmdConfig(c *call) {
	sub := strings.ToLower(string(truncate(c.args[1], 32)))
	switch sub {
	case "get":
		if len(c.args) < 3 {
			c.arityError("config|get")
			return
		}
		params := [][2]string{
			{"appendonly", "no"},
			{"databases", "1"},
			{"maxclients", strconv.Itoa(c.s.o.maxClients)},
			{"proto-max-bulk-len", strconv.FormatInt(c.s.o.maxBulk, 10)},
			{"client-query-buffer-limit", strconv.FormatInt(c.s.o.maxRequest, 10)},
			{"save", ""},
			{"timeout", "0"},
		}
		var out [][2]string
		for _, p := range params {
			for _, pat := range c.args[2:] {
				if globMatch([]byte(strings.ToLower(string(pat))), []byte(p[0])) {
					out = append(out, p)
					break
				}
			}
		}
		c.rc.WriteArray(2 * len(out))
		for _, p := range out {
			c.rc.WriteBulkString(p[0])
			c.rc.WriteBulkString(p[1])
		}
	case "set", "resetstat", "rewrite":
		c.error(fmt.Sprintf("ERR CONFIG %s is not supported by kvarray", strings.ToUpper(sub)))
	case "help":
		help := []string{"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"GET <pattern>", "    Return parameters matching the glob-like <pattern> and their values.",
			"HELP", "    Print this help."}
		c.lines(help)
	default:
		c.unknownSubcommand("config")
	}
}

// cmdCommand: COMMAND, COMMAND COUNT, COMMAND LIST, COMMAND INFO [name…],
// COMMAND DOCS [name…], in Redis 7's RESP2 shapes.
func cmdCommand(c *call) {
	if len(c.args) == 1 {
		names := c.s.commandNames()
		c.rc.WriteArray(len(names))
		for _, n := range names {
			c.s.writeInfo(c, c.s.cmds[n].command)
		}
		return
	}
	sub := strings.ToLower(string(truncate(c.args[1], 32)))
	switch sub {
	case "count":
		if len(c.args) != 2 {
			c.arityError("command|count")
			return
		}
		c.rc.WriteInt(len(c.s.cmds))
	case "list":
		// FILTERBY is not supported; the list is short.
		if len(c.args) != 2 {
			c.syntaxError()
			return
		}
		names := c.s.commandNames()
		c.rc.WriteArray(len(names))
		for _, n := range names {
			c.rc.WriteBulkString(n)
		}
	case "info":
		names := c.requested()
		c.rc.WriteArray(len(names))
		for _, n := range names {
			if e := c.s.lookup([]byte(n)); e != nil {
				c.s.writeInfo(c, e.command)
			} else {
				c.rc.WriteNull()
			}
		}
	case "docs":
		names := c.requested()
		var found []*command
		for _, n := range names {
			if e := c.s.lookup([]byte(n)); e != nil {
				found = append(found, e.command)
			}
		}
		c.rc.WriteArray(2 * len(found))
		for _, cmd := range found {
			c.rc.WriteBulkString(cmd.name)
			writeDocs(c, cmd)
		}
	case "help":
		help := []string{"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"(no subcommand)", "    Return details about all commands.",
			"COUNT", "    Return the total number of commands.",
			"LIST", "    Return a list of all commands.",
			"INFO [<command-name> ...]", "    Return details about the given commands, or all of them.",
			"DOCS [<command-name> ...]", "    Return documentation about the given commands, or all of them.",
			"HELP", "    Print this help."}
		c.lines(help)
	default:
		c.unknownSubcommand("command")
	}
}

// requested is the command names after COMMAND INFO / DOCS, or all.
func (c *call) requested() []string {
	if len(c.args) == 2 {
		return c.s.commandNames()
	}
	names := make([]string, len(c.args)-2)
	for i, a := range c.args[2:] {
		names[i] = string(a)
	}
	return names
}

func (s *Server) commandNames() []string {
	names := make([]string, 0, len(s.cmds))
	for n := range s.cmds {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// writeInfo writes a command's COMMAND INFO entry (Redis 7: name, arity,
// flags, first key, last key, step, ACL categories, tips, key specs,
// subcommands).
func (s *Server) writeInfo(c *call, cmd *command) {
	c.rc.WriteArray(10)
	c.rc.WriteBulkString(cmd.name)
	c.rc.WriteInt(cmd.arity)
	c.rc.WriteArray(len(cmd.flags))
	for _, f := range cmd.flags {
		c.rc.WriteString(f)
	}
	c.rc.WriteInt(cmd.first)
	c.rc.WriteInt(cmd.last)
	c.rc.WriteInt(cmd.step)
	c.rc.WriteArray(len(cmd.acl))
	for _, a := range cmd.acl {
		c.rc.WriteString("@" + a)
	}
	c.rc.WriteArray(0)
	c.rc.WriteArray(0)
	c.rc.WriteArray(0)
}

// writeDocs writes a command's COMMAND DOCS map (flattened for RESP2):
// summary, since, group, complexity, arguments.
func writeDocs(c *call, cmd *command) {
	n := 8
	if len(cmd.args) > 0 {
		n += 2
	}
	c.rc.WriteArray(n)
	for _, kv := range [][2]string{{"summary", cmd.summary}, {"since", cmd.since}, {"group", cmd.group}, {"complexity", cmd.complexity}} {
		c.rc.WriteBulkString(kv[0])
		c.rc.WriteBulkString(kv[1])
	}
	if len(cmd.args) > 0 {
		c.rc.WriteBulkString("arguments")
		writeArgs(c, cmd.args)
	}
}

func writeArgs(c *call, args []arg) {
	c.rc.WriteArray(len(args))
	for _, a := range args {
		var flags []string
		if a.optional {
			flags = append(flags, "optional")
		}
		if a.multiple {
			flags = append(flags, "multiple")
		}
		n := 4
		if a.token != "" {
			n += 2
		}
		if len(flags) > 0 {
			n += 2
		}
		if len(a.sub) > 0 {
			n += 2
		}
		c.rc.WriteArray(n)
		c.rc.WriteBulkString("name")
		c.rc.WriteBulkString(a.name)
		c.rc.WriteBulkString("type")
		c.rc.WriteBulkString(a.typ)
		if a.token != "" {
			c.rc.WriteBulkString("token")
			c.rc.WriteBulkString(a.token)
		}
		if len(flags) > 0 {
			c.rc.WriteBulkString("flags")
			c.rc.WriteArray(len(flags))
			for _, f := range flags {
				c.rc.WriteString(f)
			}
		}
		if len(a.sub) > 0 {
			c.rc.WriteBulkString("arguments")
			writeArgs(c, a.sub)
		}
	}
}

// lines replies with an array of simple strings (a HELP text).
func (c *call) lines(ls []string) {
	c.rc.WriteArray(len(ls))
	for _, l := range ls {
		c.rc.WriteString(l)
	}
}
