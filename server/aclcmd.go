package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvarray/kvarray/acl"
)

// The ACL command, as Redis 7.0's aclCommand: SETUSER, GETUSER, DELUSER,
// LIST, USERS, WHOAMI, CAT, GENPASS, LOG, DRYRUN, SAVE, LOAD, HELP. Its
// subcommands' arities and categories are Redis's (acl.Redis70).

func init() {
	commands = append(commands, &command{name: "acl", arity: -2, acl: []string{"slow"}, group: "server", since: "6.0.0",
		summary:    "ACL SETUSER, GETUSER, DELUSER, LIST, USERS, WHOAMI, CAT, GENPASS, LOG, DRYRUN, SAVE, LOAD, HELP: Redis 7.0's access control lists.",
		complexity: "Depends on subcommand.", args: []arg{strArg("subcommand"), optional(multiple(strArg("arg")))}, run: cmdACL})
}

var aclHelp = []string{
	"ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"CAT [<category>]",
	"    List all commands that belong to <category>, or all command categories",
	"    when no category is specified.",
	"DELUSER <username> [<username> ...]",
	"    Delete a list of users.",
	"DRYRUN <username> <command> [<arg> ...]",
	"    Returns whether the user can execute the given command without executing the command.",
	"GETUSER <username>",
	"    Get the user's details.",
	"GENPASS [<bits>]",
	"    Generate a secure 256-bit user password. The optional `bits` argument can",
	"    be used to specify a different size.",
	"LIST",
	"    Show users details in config file format.",
	"LOAD",
	"    Reload users from the ACL file.",
	"LOG [<count> | RESET]",
	"    Show the ACL log entries.",
	"SAVE",
	"    Save the current config to the ACL file.",
	"SETUSER <username> <attribute> [<attribute> ...]",
	"    Create or modify a user with the specified attributes.",
	"USERS",
	"    List all the registered usernames.",
	"WHOAMI",
	"    Return the current connection username.",
	"HELP",
	"    Print this help.",
}

func cmdACL(c *call) {
	a := c.s.acl
	sub := strings.ToLower(string(c.args[1]))
	sc := a.Table().Lookup("acl|" + sub)
	if sc == nil || len(sub) > 32 {
		c.unknownSubcommand("acl")
		return
	}
	if n := len(c.args); sc.Arity > 0 && n != sc.Arity || sc.Arity < 0 && n < -sc.Arity {
		c.arityError(sc.Name)
		return
	}
	switch sub {
	case "setuser":
		rules := make([]string, len(c.args)-3)
		for i, r := range c.args[3:] {
			rules[i] = string(r)
		}
		if err := a.SetUser(string(c.args[2]), rules); err != nil {
			c.error("ERR " + err.Error())
			return
		}
		c.ok()
		c.s.killRevokedSubscribers(c)
	case "deluser":
		names := make([]string, len(c.args)-2)
		for i, n := range c.args[2:] {
			names[i] = string(n)
		}
		gone, err := a.DelUser(names...)
		if err != nil {
			c.error("ERR " + err.Error())
			return
		}
		c.w.WriteInt(len(gone))
		c.s.dropUsers(c, gone)
	case "getuser":
		info := a.GetUser(string(c.args[2]))
		if info == nil {
			c.w.WriteNull()
			return
		}
		c.w.WriteMap(6)
		c.w.WriteBulkString("flags")
		c.w.WriteSet(len(info.Flags))
		for _, f := range info.Flags {
			c.w.WriteBulkString(f)
		}
		c.w.WriteBulkString("passwords")
		c.w.WriteArray(len(info.Passwords))
		for _, p := range info.Passwords {
			c.w.WriteBulkString(p)
		}
		c.writeSelector(info.Root)
		c.w.WriteBulkString("selectors")
		c.w.WriteArray(len(info.Selectors))
		for _, s := range info.Selectors {
			c.w.WriteMap(3)
			c.writeSelector(s)
		}
	case "list", "users":
		if len(c.args) != 2 {
			c.aclSyntaxError()
			return
		}
		l := a.List()
		if sub == "users" {
			l = a.Users()
		}
		c.w.WriteArray(len(l))
		for _, s := range l {
			c.w.WriteBulkString(s)
		}
	case "whoami":
		if len(c.args) != 2 {
			c.aclSyntaxError()
			return
		}
		if u := c.s.who(c.cl); u != nil {
			c.w.WriteBulkString(u.Name())
		} else {
			c.w.WriteNull()
		}
	case "load", "save":
		if len(c.args) != 2 {
			c.aclSyntaxError()
			return
		}
		if c.s.o.auth.aclfile == "" {
			c.error("ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.")
			return
		}
		if sub == "save" {
			if err := c.s.saveACLFile(); err != nil {
				c.s.o.errorLog.Printf("kvarray server: ACL SAVE: %v", err)
				c.error("ERR There was an error trying to save the ACLs. Please check the server logs for more information")
				return
			}
			c.ok()
			return
		}
		old, msg := c.s.loadACL()
		if msg != "" {
			c.error("ERR " + msg)
			return
		}
		c.ok()
		c.s.dropUsers(c, old)
		c.s.killRevokedSubscribers(c)
	case "cat":
		if len(c.args) > 3 {
			c.aclSyntaxError()
			return
		}
		if len(c.args) == 2 {
			names := acl.Categories()
			c.w.WriteArray(len(names))
			for _, n := range names {
				c.w.WriteBulkString(n)
			}
			return
		}
		cat := acl.CategoryByName(string(c.args[2]))
		if cat == 0 {
			c.error(fmt.Sprintf("ERR Unknown category '%s'", truncate(c.args[2], 128)))
			return
		}
		var names []string
		for _, n := range a.Table().Category(cat) {
			if c.s.serves(n) {
				names = append(names, n)
			}
		}
		c.w.WriteArray(len(names))
		for _, n := range names {
			c.w.WriteBulkString(n)
		}
	case "genpass":
		if len(c.args) > 3 {
			c.aclSyntaxError()
			return
		}
		bits := 256
		if len(c.args) == 3 {
			n, err := strconv.ParseInt(string(c.args[2]), 10, 64)
			if err != nil {
				c.error("ERR value is not an integer or out of range")
				return
			}
			if n <= 0 || n > 4096 {
				c.error("ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096")
				return
			}
			bits = int(n)
		}
		chars := (bits + 3) / 4
		buf := make([]byte, (chars+1)/2)
		if _, err := rand.Read(buf); err != nil {
			c.fail(err)
			return
		}
		c.w.WriteBulkString(hex.EncodeToString(buf)[:chars])
	case "log":
		if len(c.args) > 3 {
			c.aclSyntaxError()
			return
		}
		count := 10
		if len(c.args) == 3 {
			if strings.EqualFold(string(c.args[2]), "reset") {
				a.ResetLog()
				c.ok()
				return
			}
			n, err := strconv.ParseInt(string(c.args[2]), 10, 64)
			if err != nil {
				c.error("ERR value is not an integer or out of range")
				return
			}
			count = int(max(0, min(n, 1<<30)))
		}
		now := time.Now()
		entries := a.Log(count)
		c.w.WriteArray(len(entries))
		for _, e := range entries {
			c.w.WriteMap(7)
			c.w.WriteBulkString("count")
			c.w.WriteInt(e.Count)
			c.w.WriteBulkString("reason")
			c.w.WriteBulkString(e.Reason.String())
			c.w.WriteBulkString("context")
			c.w.WriteBulkString(e.Context)
			c.w.WriteBulkString("object")
			c.w.WriteBulkString(e.Object)
			c.w.WriteBulkString("username")
			c.w.WriteBulkString(e.Username)
			c.w.WriteBulkString("age-seconds")
			c.w.WriteDouble(float64(now.Sub(e.Time).Milliseconds()) / 1000)
			c.w.WriteBulkString("client-info")
			c.w.WriteBulkString(e.ClientInfo)
		}
	case "dryrun":
		u := a.User(string(c.args[2]))
		if u == nil {
			c.error(fmt.Sprintf("ERR User '%s' not found", c.args[2]))
			return
		}
		args := c.args[3:]
		cmd := a.Table().Resolve(args)
		if cmd == nil || !c.s.serves(cmd.Name) {
			c.error(fmt.Sprintf("ERR Command '%s' not found", args[0]))
			return
		}
		if cmd.Arity > 0 && cmd.Arity != len(args) || len(args) < -cmd.Arity {
			c.error(fmt.Sprintf("ERR wrong number of arguments for '%s' command", cmd.Name))
			return
		}
		r, pos := a.Check(u, cmd, args)
		if r == acl.Allowed {
			c.ok()
			return
		}
		c.w.WriteBulkString(acl.DryRun(r, cmd, args, pos))
	case "help":
		c.lines(aclHelp)
	}
}

func (c *call) writeSelector(s acl.SelectorInfo) {
	c.w.WriteBulkString("commands")
	c.w.WriteBulkString(s.Commands)
	c.w.WriteBulkString("keys")
	c.w.WriteBulkString(s.Keys)
	c.w.WriteBulkString("channels")
	c.w.WriteBulkString(s.Channels)
}

// aclSyntaxError is Redis's addReplySubcommandSyntaxError.
func (c *call) aclSyntaxError() {
	c.error(fmt.Sprintf("ERR unknown subcommand or wrong number of arguments for '%s'. Try ACL HELP.", truncate(c.args[1], 128)))
}

// serves reports whether the server runs the command or subcommand named
// name (ACL CAT lists only those).
func (s *Server) serves(name string) bool {
	top, _, _ := strings.Cut(name, "|")
	return s.cmds[top] != nil
}

// loadACL is ACL LOAD: the aclfile replaces the users, all or nothing.
// It returns the users replaced (their connections are to be closed, as
// in Redis) or Redis's error text.
func (s *Server) loadACL() ([]*acl.User, string) {
	path := s.o.auth.aclfile
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Sprintf("Error loading ACLs, opening file '%s': %v", path, unwrapPathError(err))
	}
	old, err := s.acl.Load(filepath.Base(path), string(b))
	if err != nil {
		return nil, acl.LoadErrorText(err)
	}
	return old, ""
}

// unwrapPathError is the reason of a file error without the path, as
// strerror gives it.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// dropUsers closes the connections authenticated as users that were
// removed (Redis's ACLFreeUserAndKillClients); the calling connection
// gets its reply first.
func (s *Server) dropUsers(c *call, gone []*acl.User) {
	if len(gone) == 0 {
		return
	}
	s.mu.Lock()
	conns := s.connList()
	s.mu.Unlock()
	for _, cl := range conns {
		u := cl.user.Load()
		for _, g := range gone {
			if u != g {
				continue
			}
			cl.user.Store(nil)
			if cl == c.cl {
				// After this reply, as CLIENT KILL of itself.
				c.cl.quit = true
				c.rc.ReadPipeline()
				c.rc.Close()
			} else {
				cl.Conn.Close()
			}
		}
	}
}
