package server

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/kvarray/kvarray/acl"
)

// Authentication and access control are Redis 7.0's ACL (package acl):
//
//   - The default user may run everything; without a password (no
//     requirepass) a connection is authenticated as it from the start;
//     with one, a connection must AUTH before any command but those
//     flagged no_auth (AUTH, HELLO, QUIT, RESET): others get NOAUTH.
//   - ACL users come from the config's users (presets of ACL rules, by
//     role: presetRules), from the aclfile, or from ACL SETUSER.
//   - Every command, by every route (sent directly, queued in MULTI and
//     again when EXEC runs it, run by a script), passes permit: the ACL
//     check of the command, its keys (read or write) and its channels.
//     A denial is answered with Redis's NOPERM and logged (ACL LOG).
//   - Connections accepted by ServeAdmin (the CLI's unix socket, which
//     only its owner can open) are the default user and are never
//     refused a command, whatever the ACL says of the default user.
//
// Passwords are kept as SHA-256 digests (in the aclfile too).
// A failed AUTH leaves the connection's user as it was.

// User is an ACL user for WithAuth: a preset by role.
type User struct {
	Name     string
	Password string
	// Admin users may run every command; the others data commands only.
	Admin bool
}

// presetRules are the ACL rules of the config's roles. A data user may
// run every command but the @admin and @dangerous ones, except for those
// a data user could always run (INFO, KEYS, LASTSAVE, CONFIG GET) and
// CLIENT KILL, which reaches only its own connections (cmdClientKill).
func presetRules(u User) []string {
	rules := []string{"reset", "on", ">" + u.Password, "~*", "&*", "+@all"}
	if !u.Admin {
		rules = append(rules, "-@admin", "-@dangerous", "+info", "+keys", "+lastsave", "+config|get", "+client|kill")
	}
	return rules
}

// authSpec is WithAuth's and WithACLFile's settings.
type authSpec struct {
	requirepass string
	users       []User
	aclfile     string
}

// WithAuth sets the default user's password (Redis's requirepass; "" for
// none) and the ACL users, as presets (presetRules). A user named
// "default" is refused by the config package.
func WithAuth(requirepass string, users ...User) Option {
	return func(o *options) { o.auth.requirepass, o.auth.users = requirepass, users }
}

// WithACLFile sets the aclfile: ACL SAVE writes it, ACL LOAD and
// LoadACLFile read it.
func WithACLFile(path string) Option { return func(o *options) { o.auth.aclfile = path } }

// newACL makes the server's ACL: Redis 7.0's command table with the
// server's commands as its own table has them, and the users of spec.
func newACL(cmds map[string]*entry, spec authSpec) *acl.ACL {
	a := acl.New(acl.NewTable(aclCommands(cmds)))
	if spec.requirepass != "" {
		must(a.SetUser("default", []string{"resetpass", ">" + spec.requirepass}))
	}
	for _, u := range spec.users {
		must(a.SetUser(u.Name, presetRules(u)))
	}
	return a
}

func must(err error) {
	if err != nil {
		panic("server: " + err.Error())
	}
}

// aclCommands is Redis 7.0's command table for the ACL (so that rules
// mean in kvarray what they mean in Redis, and an aclfile written for
// Redis loads), with the server's own commands (KVARRAY.*), whose
// categories are its table's and whose keys are found by first, last and
// step, read (readonly) or written. COMMAND INFO reports these
// categories too.
func aclCommands(cmds map[string]*entry) []*acl.Command {
	out := acl.Redis70()
	byName := map[string]*acl.Command{}
	for _, c := range out {
		byName[c.Name] = c
	}
	// CLIENT subcommands kvarray has from Redis 7.2 (clients send SETINFO
	// on connect), with 7.2's categories.
	if c := byName["client"]; c != nil {
		c.Subcommands = append(c.Subcommands,
			&acl.Command{Name: "client|no-touch", Arity: 3, Categories: acl.CatSlow | acl.CatConnection, Flags: []string{"noscript", "loading", "stale"}},
			&acl.Command{Name: "client|setinfo", Arity: 4, Categories: acl.CatSlow | acl.CatConnection, Flags: []string{"noscript", "loading", "stale"}})
	}
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		e := cmds[n]
		if byName[n] != nil {
			continue
		}
		var cat acl.Category
		for _, name := range e.acl {
			cat |= acl.CategoryByName(name)
		}
		c := &acl.Command{Name: n, Arity: e.arity, Categories: cat, NoAuth: slices.Contains(e.flags, "no_auth")}
		if e.first > 0 {
			flags := acl.KeyRead | acl.KeyWrite
			if slices.Contains(e.flags, "readonly") {
				flags = acl.KeyRead
			} else if e.write() {
				flags = acl.KeyWrite
			}
			last := e.last
			if last > 0 {
				last -= e.first
			}
			c.Keys = []acl.KeySpec{{Index: e.first, LastKey: last, Step: max(e.step, 1), Flags: flags}}
		}
		out = append(out, c)
	}
	return out
}

// Redis's replies to a failed AUTH.
const (
	wrongPassReply  = "WRONGPASS invalid username-password pair or user is disabled."
	noPasswordReply = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
)

// RequiresPassword reports whether clients must authenticate.
func (s *Server) RequiresPassword() bool { return !s.acl.NoPassDefault() }

// authenticate checks user (nil or empty: the default user) and pass, and
// on success makes the connection that user; a failure is logged (ACL
// LOG, reason auth) and leaves the connection as it was. HELLO ... AUTH
// calls it too.
func (s *Server) authenticate(c *call, name, pass []byte) bool {
	if len(name) == 0 {
		name = []byte("default")
	}
	u := s.acl.Authenticate(string(name), pass)
	if u == nil {
		s.aclLog(c, acl.DeniedAuth, string(c.args[0]), string(name))
		return false
	}
	c.cl.user.Store(u)
	return true
}

// who is the connection's user, nil when it must authenticate first.
func (s *Server) who(cl *conn) *acl.User {
	if u := cl.user.Load(); u != nil {
		return u
	}
	if cl.master || isAdminConn(cl.Conn) {
		return s.acl.Default()
	}
	return nil
}

// permit replies NOAUTH or NOPERM and returns false when the connection
// may not run c's command. Every route to a command checks it: a command
// sent directly or queued in MULTI (at queue time, and again when EXEC
// runs it), and a command a script runs. Intent records hold the writes
// of commands that passed it, so their replay needs no check.
func (s *Server) permit(c *call) bool {
	u := s.who(c.cl)
	if u == nil {
		if slices.Contains(c.e.flags, "no_auth") {
			return true
		}
		c.error("NOAUTH Authentication required.")
		return false
	}
	r, cmd, pos := s.check(c.cl, u, c.args)
	if r == acl.Allowed {
		return true
	}
	ctx := acl.ContextToplevel
	if c.cl.multi {
		ctx = acl.ContextMulti
	}
	s.aclDenied(c, ctx, r, cmd, pos)
	c.error(acl.NoPerm(r, cmd))
	return false
}

// permitScript is permit for a command a script runs (redis.call): logged
// in the lua context, refused with Redis's wording for scripts.
func (s *Server) permitScript(c *call) bool {
	u := s.who(c.cl)
	if u == nil {
		c.error("NOAUTH Authentication required.")
		return false
	}
	r, cmd, pos := s.check(c.cl, u, c.args)
	if r == acl.Allowed {
		return true
	}
	s.aclDenied(c, acl.ContextLua, r, cmd, pos)
	c.error("ERR The user executing the script " + acl.ScriptReason(r))
	return false
}

// permitQueued is EXEC's check of a queued command (an ACL SETUSER or an
// AUTH queued before it may have changed what the connection may run):
// it replies with Redis's error and returns false when it is denied.
func (s *Server) permitQueued(c *call) bool {
	u := s.who(c.cl)
	if u == nil {
		c.error("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: no permission")
		return false
	}
	r, cmd, pos := s.check(c.cl, u, c.args)
	if r == acl.Allowed {
		return true
	}
	s.aclDenied(c, acl.ContextMulti, r, cmd, pos)
	c.error("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: " + acl.ExecReason(r))
	return false
}

// aclAllows reports whether cl's user may run args (redis.acl_check_cmd),
// and whether args name a command of the server at all; nothing is
// logged, as nothing was refused.
func (s *Server) aclAllows(cl *conn, args [][]byte) (allowed, known bool) {
	if s.lookup(args[0]) == nil {
		return false, false
	}
	u := s.who(cl)
	if u == nil {
		return false, true
	}
	r, _, _ := s.check(cl, u, args)
	return r == acl.Allowed, true
}

// check is the ACL's verdict on u running args on cl; the admin socket's
// connections may run everything.
func (s *Server) check(cl *conn, u *acl.User, args [][]byte) (acl.Reason, *acl.Command, int) {
	cmd := s.acl.Table().Resolve(args)
	// The CLI's socket and a replica's master run every command.
	if cl.master || isAdminConn(cl.Conn) {
		return acl.Allowed, cmd, 0
	}
	if cmd == nil {
		// Every command of the server is in the ACL's table; one that is
		// not is refused rather than run unchecked.
		return acl.DeniedCommand, &acl.Command{Name: string(args[0])}, 0
	}
	r, pos := s.acl.Check(u, cmd, args)
	return r, cmd, pos
}

// aclDenied logs a denial in the ACL log.
func (s *Server) aclDenied(c *call, ctx string, r acl.Reason, cmd *acl.Command, pos int) {
	u := s.who(c.cl)
	name := ""
	if u != nil {
		name = u.Name()
	}
	s.acl.AddLog(acl.LogEntry{Reason: r, Context: ctx, Object: acl.Object(r, cmd, c.args, pos), Username: name,
		Time: time.Now(), ClientInfo: c.clientInfo()})
}

// aclLog logs a failed AUTH.
func (s *Server) aclLog(c *call, r acl.Reason, object, username string) {
	ctx := acl.ContextToplevel
	if c.cl.multi {
		ctx = acl.ContextMulti
	}
	s.acl.AddLog(acl.LogEntry{Reason: r, Context: ctx, Object: object, Username: username, Time: time.Now(), ClientInfo: c.clientInfo()})
}

// clientInfo is the connection's CLIENT INFO line, without its newline.
func (c *call) clientInfo() string {
	l := c.infoOf(c.cl, time.Now())
	return l[:len(l)-1]
}

// authReply runs AUTH [username] password.
func authReply(c *call) {
	var name, pass []byte
	switch len(c.args) {
	case 2:
		if c.s.acl.DefaultHasNoPass() {
			c.error(noPasswordReply)
			return
		}
		pass = c.args[1]
	case 3:
		name, pass = c.args[1], c.args[2]
	default:
		c.syntaxError()
		return
	}
	if !c.s.authenticate(c, name, pass) {
		c.error(wrongPassReply)
		return
	}
	c.ok()
}

// LoadACLFile replaces the users by those of the aclfile, if there is
// one and it exists (a missing file is created by ACL SAVE); serve calls
// it before serving.
func (s *Server) LoadACLFile() error {
	path := s.o.auth.aclfile
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("aclfile: %w", err)
	}
	if _, err := s.acl.Load(filepath.Base(path), string(b)); err != nil {
		return fmt.Errorf("aclfile %s: %w", path, err)
	}
	return nil
}

// saveACLFile writes the users to the aclfile: a temporary file renamed
// over it, so that a crash leaves the old file or the new one.
func (s *Server) saveACLFile() error {
	path := s.o.auth.aclfile
	tmp := path + ".tmp-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixMilli(), 10)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s.acl.Save())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// ServeAdmin serves l as Serve does, with every connection authenticated
// as the default user: l is the CLI's admin socket (a unix socket that only
// its owner may open), which `kvarray status`, `rebuild` and the others use
// to work on the array the server holds.
func (s *Server) ServeAdmin(l net.Listener) error {
	return s.Serve(adminListener{l})
}

type adminListener struct{ net.Listener }

func (l adminListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return adminConn{c}, nil
}

// adminConn marks a connection from the admin socket.
type adminConn struct{ net.Conn }

func isAdminConn(c net.Conn) bool {
	_, ok := c.(adminConn)
	return ok
}
