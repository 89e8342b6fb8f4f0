package server

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvarray/kvarray/acl"
	"github.com/kvarray/kvarray/internal/glob"
	"github.com/kvarray/kvarray/pubsub"
)

// redisVersion is the Redis version the server reports (HELLO, INFO,
// LOLWUT; scripts see it in redis.REDIS_VERSION). Its commands, replies
// and error strings are Redis 7.0's; it says 7.4 because redis-py enables
// client-side caching (cache_config) only for 7.4 or later, and 7.4
// changed nothing of what 7.0 clients rely on (docs/compatibility.md).
const redisVersion = "7.4.0"

func cmdPing(c *call) {
	if !c.w.resp3() && c.cl.subscribed() {
		// RESP2 in subscribed mode: a reply shaped as a message.
		var msg []byte
		if len(c.args) > 1 {
			msg = c.args[1]
		}
		c.w.WriteArray(2)
		c.w.WriteBulkString("pong")
		c.w.WriteBulk(msg)
		return
	}
	switch len(c.args) {
	case 1:
		c.w.WriteString("PONG")
	case 2:
		c.w.WriteBulk(c.args[1])
	default:
		c.arityError("ping")
	}
}

func cmdEcho(c *call) { c.w.WriteBulk(c.args[1]) }

// cmdHello: HELLO [protover [AUTH username password] [SETNAME name]].
// HELLO 3 switches the connection to RESP3, HELLO 2 back to RESP2; the
// reply is the connection's properties, a map (a flat array in RESP2).
// AUTH is checked by the AUTH command's own handler, so that HELLO and
// AUTH always agree; nothing changes unless every argument is valid.
func cmdHello(c *call) {
	next, proto := 1, c.cl.proto
	if len(c.args) >= 2 {
		v, err := parseInt(c.args[1])
		if err != nil {
			c.error("ERR Protocol version is not an integer or out of range")
			return
		}
		if v != 2 && v != 3 {
			c.error("NOPROTO unsupported protocol version")
			return
		}
		next, proto = 2, int(v)
	}
	var user, pass, name []byte
	setName := false
	for j := next; j < len(c.args); j++ {
		more := len(c.args) - 1 - j
		switch upper(c.args[j]) {
		case "AUTH":
			if more < 2 {
				c.error(fmt.Sprintf("ERR Syntax error in HELLO option '%s'", truncate(c.args[j], 128)))
				return
			}
			user, pass = c.args[j+1], c.args[j+2]
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
	if setName && !validName(name) {
		c.error("ERR Client names cannot contain spaces, newlines or special characters.")
		return
	}
	if user != nil {
		// Run AUTH user pass into a scratch reply: an error is HELLO's.
		scratch := &respWriter{proto: c.w.proto}
		auth := *c
		// args[0] as sent: a failed AUTH's ACL LOG object is HELLO, as in Redis.
		auth.args, auth.w = [][]byte{c.args[0], user, pass}, scratch
		cmdAuth(&auth)
		if len(scratch.b) > 0 && scratch.b[0] == '-' {
			c.w.raw(scratch.b)
			return
		}
	}
	if c.s.who(c.cl) == nil {
		// Redis 7: the server's properties only to an authenticated client.
		c.error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	if setName {
		c.cl.mu.Lock()
		c.cl.name = string(name)
		c.cl.mu.Unlock()
	}
	c.cl.proto, c.w.proto = proto, proto
	c.cl.proto3.Store(proto == 3)
	c.w.WriteMap(7)
	c.w.WriteBulkString("server")
	c.w.WriteBulkString("redis")
	c.w.WriteBulkString("version")
	c.w.WriteBulkString(redisVersion)
	c.w.WriteBulkString("proto")
	c.w.WriteInt(proto)
	c.w.WriteBulkString("id")
	c.w.WriteInt64(c.cl.id)
	c.w.WriteBulkString("mode")
	c.w.WriteBulkString("standalone")
	c.w.WriteBulkString("role")
	c.w.WriteBulkString("master")
	c.w.WriteBulkString("modules")
	c.w.WriteArray(0)
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
	"LIST [TYPE NORMAL] [ID <id> ...]", "    Return information about client connections.",
	"KILL <ip:port> | [ID <id>] [ADDR <ip:port>] [LADDR <ip:port>] [TYPE NORMAL] [SKIPME YES|NO]", "    Kill connections.",
	"PAUSE <timeout> [WRITE|ALL]", "    Suspend clients' commands (all, or writes) for <timeout> milliseconds.",
	"UNPAUSE", "    Stop the current client pause, resuming traffic.",
	"REPLY (ON|OFF|SKIP)", "    Control the replies sent to the current connection.",
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
			c.w.WriteInt64(c.cl.id)
		}
	case "getname":
		if want(2) {
			c.cl.mu.Lock()
			name := c.cl.name
			c.cl.mu.Unlock()
			if name == "" {
				c.w.WriteNull()
			} else {
				c.w.WriteBulkString(name)
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
			c.w.WriteVerbatim(c.infoOf(c.cl, time.Now()))
		}
	case "list":
		f, ok := c.clientListFilter()
		if !ok {
			return
		}
		c.s.mu.Lock()
		conns := c.s.connList()
		c.s.mu.Unlock()
		slices.SortFunc(conns, func(x, y *conn) int { return int(x.id - y.id) })
		var b strings.Builder
		now := time.Now()
		for _, cl := range conns {
			if f.match(c.s, cl) {
				b.WriteString(c.infoOf(cl, now))
			}
		}
		c.w.WriteVerbatim(b.String())
	case "kill":
		c.clientKill()
	case "unblock":
		c.clientUnblock()
	case "pause":
		c.clientPause()
	case "unpause":
		if want(2) {
			c.s.pause.Store(nil)
			c.ok()
		}
	case "reply":
		if !want(3) {
			return
		}
		switch upper(c.args[2]) {
		case "ON":
			c.cl.replyMode = replyOn
			c.w.rc = c.rc
			c.ok()
		case "OFF":
			c.cl.replyMode = replyOff
		case "SKIP":
			c.cl.replyMode = replySkip
		default:
			c.syntaxError()
		}
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
		c.w.WriteArray(len(clientHelp))
		for _, l := range clientHelp {
			c.w.WriteString(l)
		}
	default:
		if !c.clientTracking(sub) {
			c.unknownSubcommand("client")
		}
	}
}

// infoOf is cl's line in CLIENT LIST and CLIENT INFO as c sees it:
// Redis 7.0's fields, then 7.2's lib-name and lib-ver. What only cl's own
// goroutine may read is read from its mirrors (dbShown, txShown, proto3);
// the buffer sizes kvarray does not keep as Redis does are those of the
// command running (qbuf, for c's own line) or 0.
func (c *call) infoOf(cl *conn, now time.Time) string {
	s := c.s
	cl.mu.Lock()
	name, libName, lib := cl.name, cl.libName, cl.lib
	cl.mu.Unlock()
	cmd := "NULL"
	if p := cl.lastCmd.Load(); p != nil {
		cmd = *p
	}
	idle := now.Sub(time.Unix(0, cl.last.Load()))
	var sub, psub, ssub int
	cl.subsMu.Lock()
	sub, psub, ssub = len(cl.subs[pubsub.Channel]), len(cl.subs[pubsub.Pattern]), len(cl.subs[pubsub.Shard])
	cl.subsMu.Unlock()
	flags := ""
	switch clientTypeOf(cl, sub+psub+ssub) {
	case "master":
		flags += "M"
	case "replica":
		flags += "S"
	case "pubsub":
		flags += "P"
	}
	multi := int(cl.txShown.Load()) - 1
	if multi >= 0 {
		flags += "x"
	}
	if s.isBlocked(cl) {
		flags += "b"
	}
	if s.mon.has(cl) {
		flags += "O"
	}
	redir := int64(-1)
	if cl.tracking.Load() {
		flags += "t"
		s.trk.mu.Lock()
		redir = cl.trk.redirect
		s.trk.mu.Unlock()
		if redir == 0 {
			redir = -1
		}
	}
	if flags == "" {
		flags = "N"
	}
	qbuf := 0
	if cl == c.cl {
		qbuf = respLen(c.args)
	}
	user := "default"
	if u := s.who(cl); u != nil {
		user = u.Name()
	}
	resp := 2
	if cl.proto3.Load() {
		resp = 3
	}
	return fmt.Sprintf("id=%d addr=%s laddr=%s fd=%d name=%s age=%d idle=%d flags=%s db=%d sub=%d psub=%d ssub=%d multi=%d "+
		"qbuf=%d qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=%s user=%s redir=%d resp=%d lib-name=%s lib-ver=%s\n",
		cl.id, cl.addr, cl.laddr, cl.fd, name, int(now.Sub(cl.created).Seconds()), int(idle.Seconds()), flags, cl.dbShown.Load(),
		sub, psub, ssub, multi, qbuf, cmd, user, redir, resp, libName, lib)
}

// respLen is the length of args sent as a RESP array of bulk strings.
func respLen(args [][]byte) int {
	n := 1 + len(strconv.Itoa(len(args))) + 2
	for _, a := range args {
		n += 1 + len(strconv.Itoa(len(a))) + 2 + len(a) + 2
	}
	return n
}

// cmdQuit replies OK and closes the connection: commands pipelined after
// it are not run.
func cmdQuit(c *call) {
	c.ok()
	c.rc.ReadPipeline()
	c.cl.quit = true
	c.rc.Close()
}

// cmdCommand: COMMAND, COMMAND COUNT, COMMAND LIST, COMMAND INFO [name…],
// COMMAND DOCS [name…], in Redis 7's shapes (sets and maps in RESP3).
func cmdCommand(c *call) {
	if len(c.args) == 1 {
		names := c.s.commandNames()
		c.w.WriteArray(len(names))
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
		c.w.WriteInt(len(c.s.cmds))
	case "list":
		commandList(c)
	case "info":
		names := c.requested()
		c.w.WriteArray(len(names))
		for _, n := range names {
			if e := c.s.lookup([]byte(n)); e != nil {
				c.s.writeInfo(c, e.command)
			} else {
				c.w.WriteNull()
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
		c.w.WriteMap(len(found))
		for _, cmd := range found {
			c.w.WriteBulkString(cmd.name)
			writeDocs(c, cmd)
		}
	case "getkeys", "getkeysandflags":
		commandGetKeys(c, sub == "getkeysandflags")
	case "help":
		help := []string{"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"(no subcommand)", "    Return details about all commands.",
			"COUNT", "    Return the total number of commands.",
			"LIST [FILTERBY (MODULE <module-name>|ACLCAT <category>|PATTERN <pattern>)]", "    Return a list of all commands in this Redis server.",
			"INFO [<command-name> ...]", "    Return details about the given commands, or all of them.",
			"DOCS [<command-name> ...]", "    Return documentation about the given commands, or all of them.",
			"GETKEYS <full-command>", "    Return the keys from a full Redis command.",
			"GETKEYSANDFLAGS <full-command>", "    Return the keys and the access flags from a full Redis command.",
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

// commandList: COMMAND LIST [FILTERBY MODULE name | ACLCAT category |
// PATTERN pattern], the commands served and the subcommands Redis 7.0's
// table gives them (as the ACL knows them), by name. kvarray has no
// modules: MODULE matches nothing.
func commandList(c *call) {
	match := func(string, *acl.Command) bool { return true }
	switch {
	case len(c.args) == 2:
	case len(c.args) == 5 && strings.EqualFold(string(c.args[2]), "filterby"):
		v := c.args[4]
		switch strings.ToLower(string(c.args[3])) {
		case "module":
			match = func(string, *acl.Command) bool { return false }
		case "aclcat":
			cat := acl.CategoryByName(string(v))
			match = func(_ string, ac *acl.Command) bool { return cat != 0 && ac != nil && ac.Categories&cat != 0 }
		case "pattern":
			pat := []byte(strings.ToLower(string(v)))
			match = func(n string, _ *acl.Command) bool { return glob.Match(pat, []byte(n)) }
		default:
			c.syntaxError()
			return
		}
	default:
		c.syntaxError()
		return
	}
	t := c.s.acl.Table()
	var out []string
	for _, n := range c.s.commandNames() {
		ac := t.Lookup(n)
		if match(n, ac) {
			out = append(out, n)
		}
		if ac == nil {
			continue
		}
		for _, sc := range ac.Subcommands {
			if match(sc.Name, sc) {
				out = append(out, sc.Name)
			}
		}
	}
	c.w.WriteArray(len(out))
	for _, n := range out {
		c.w.WriteBulkString(n)
	}
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
	ac := s.acl.Table().Lookup(cmd.name)
	flags := cmd.flags
	if ac.Movable() && !slices.Contains(flags, "movablekeys") {
		flags = append(slices.Clip(flags), "movablekeys")
	}
	writeInfoEntry(c, cmd.name, cmd.arity, flags, [3]int{cmd.first, cmd.last, cmd.step}, ac)
}

// writeInfoEntry writes one COMMAND INFO entry: the command's name,
// arity, flags and legacy key range, then from Redis 7.0's table (ac) its
// ACL categories, tips, key specs and subcommands (each an entry).
func writeInfoEntry(c *call, name string, arity int, flags []string, keys [3]int, ac *acl.Command) {
	c.w.WriteArray(10)
	c.w.WriteBulkString(name)
	c.w.WriteInt(arity)
	c.w.WriteSet(len(flags))
	for _, f := range flags {
		c.w.WriteString(f)
	}
	for _, k := range keys {
		c.w.WriteInt(k)
	}
	// The ACL's categories: Redis's for the commands Redis has.
	cats := ac.Categories.Names()
	c.w.WriteSet(len(cats))
	for _, a := range cats {
		c.w.WriteString("@" + a)
	}
	c.w.WriteSet(len(ac.Tips))
	for _, t := range ac.Tips {
		c.w.WriteBulkString(t)
	}
	c.w.WriteSet(len(ac.Keys))
	for _, k := range ac.Keys {
		writeKeySpec(c, k)
	}
	if len(ac.Subcommands) == 0 {
		c.w.WriteSet(0)
		return
	}
	c.w.WriteArray(len(ac.Subcommands))
	for _, sc := range ac.Subcommands {
		first, last, step := sc.LegacyRange()
		writeInfoEntry(c, sc.Name, sc.Arity, sc.Flags, [3]int{first, last, step}, sc)
	}
}

// writeKeySpec writes a key spec as Redis 7.0's COMMAND INFO does.
func writeKeySpec(c *call, k acl.KeySpec) {
	if k.Notes != "" {
		c.w.WriteMap(4)
		c.w.WriteBulkString("notes")
		c.w.WriteBulkString(k.Notes)
	} else {
		c.w.WriteMap(3)
	}
	c.w.WriteBulkString("flags")
	fs := k.Spec.Names()
	c.w.WriteSet(len(fs))
	for _, f := range fs {
		c.w.WriteString(f)
	}
	c.w.WriteBulkString("begin_search")
	switch {
	case k.Unknown:
		writeSpecPart(c, "unknown")
	case k.Keyword != "":
		writeSpecPart(c, "keyword", "keyword", k.Keyword, "startfrom", k.StartFrom)
	default:
		writeSpecPart(c, "index", "index", k.Index)
	}
	c.w.WriteBulkString("find_keys")
	switch {
	case k.Unknown:
		writeSpecPart(c, "unknown")
	case k.KeyNum:
		writeSpecPart(c, "keynum", "keynumidx", k.KeyNumIdx, "firstkey", k.FirstKey, "keystep", k.Step)
	default:
		writeSpecPart(c, "range", "lastkey", k.LastKey, "keystep", k.Step, "limit", k.Limit)
	}
}

// writeSpecPart writes a key spec's begin_search or find_keys: its type
// and its spec, fields given as name, value (an int or a string) pairs.
func writeSpecPart(c *call, typ string, fields ...any) {
	c.w.WriteMap(2)
	c.w.WriteBulkString("type")
	c.w.WriteBulkString(typ)
	c.w.WriteBulkString("spec")
	c.w.WriteMap(len(fields) / 2)
	for i := 0; i+1 < len(fields); i += 2 {
		c.w.WriteBulkString(fields[i].(string))
		switch v := fields[i+1].(type) {
		case int:
			c.w.WriteInt(v)
		case string:
			c.w.WriteBulkString(v)
		}
	}
}

// writeDocs writes a command's COMMAND DOCS map (flattened in RESP2):
// summary, since, group, complexity, arguments.
func writeDocs(c *call, cmd *command) {
	n := 4
	if len(cmd.args) > 0 {
		n++
	}
	c.w.WriteMap(n)
	for _, kv := range [][2]string{{"summary", cmd.summary}, {"since", cmd.since}, {"group", cmd.group}, {"complexity", cmd.complexity}} {
		c.w.WriteBulkString(kv[0])
		c.w.WriteBulkString(kv[1])
	}
	if len(cmd.args) > 0 {
		c.w.WriteBulkString("arguments")
		writeArgs(c, cmd.args)
	}
}

func writeArgs(c *call, args []arg) {
	c.w.WriteArray(len(args))
	for _, a := range args {
		var flags []string
		if a.optional {
			flags = append(flags, "optional")
		}
		if a.multiple {
			flags = append(flags, "multiple")
		}
		n := 2
		if a.token != "" {
			n++
		}
		if len(flags) > 0 {
			n++
		}
		if len(a.sub) > 0 {
			n++
		}
		c.w.WriteMap(n)
		c.w.WriteBulkString("name")
		c.w.WriteBulkString(a.name)
		c.w.WriteBulkString("type")
		c.w.WriteBulkString(a.typ)
		if a.token != "" {
			c.w.WriteBulkString("token")
			c.w.WriteBulkString(a.token)
		}
		if len(flags) > 0 {
			c.w.WriteBulkString("flags")
			c.w.WriteSet(len(flags))
			for _, f := range flags {
				c.w.WriteString(f)
			}
		}
		if len(a.sub) > 0 {
			c.w.WriteBulkString("arguments")
			writeArgs(c, a.sub)
		}
	}
}

// lines replies with an array of simple strings (a HELP text).
func (c *call) lines(ls []string) {
	c.w.WriteArray(len(ls))
	for _, l := range ls {
		c.w.WriteString(l)
	}
}

// clientUnblock: CLIENT UNBLOCK id [TIMEOUT|ERROR]: 1 if the client was
// blocked (it gets a timeout's reply, or the UNBLOCKED error), else 0.
func (c *call) clientUnblock() {
	if len(c.args) != 3 && len(c.args) != 4 {
		c.arityError("client|unblock")
		return
	}
	id, err := parseInt(c.args[2])
	if err != nil {
		c.error(errNotInt)
		return
	}
	why := cancelTimeout
	if len(c.args) == 4 {
		switch upper(c.args[3]) {
		case "TIMEOUT":
		case "ERROR":
			why = cancelError
		default:
			c.error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
			return
		}
	}
	c.s.mu.Lock()
	var target *conn
	for _, cl := range c.s.connList() {
		if cl.id == id {
			target = cl
		}
	}
	c.s.mu.Unlock()
	c.w.WriteInt(b2i(target != nil && c.s.unblock(target, why)))
}
