package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
)

// Authentication and access control, as Redis 7 does them, reduced to two
// roles:
//
//   - The default user has every right. Without a password (no
//     requirepass) every connection is authenticated as it from the start;
//     with one, a connection must AUTH before any command but those flagged
//     no_auth (AUTH, HELLO, QUIT): others get NOAUTH.
//   - ACL users (WithAuth) have a password and a role: admin users may run
//     every command; data users may not run admin and destructive commands
//     (adminOnly): those get NOPERM.
//   - Connections accepted by ServeAdmin (the CLI's unix socket, which
//     only its owner can open) are the default user, authenticated.
//
// Passwords are kept as SHA-256 digests and compared in constant time.
// A failed AUTH leaves the connection's user as it was.

// User is an ACL user for WithAuth.
type User struct {
	Name     string
	Password string
	// Admin users may run every command; the others data commands only.
	Admin bool
}

// ErrWrongPass is returned by authenticate for an unknown user or a wrong
// password; clients are told wrongPassReply.
var ErrWrongPass = errors.New("invalid username-password pair or user is disabled")

// Redis's replies to a failed AUTH.
const (
	wrongPassReply  = "WRONGPASS invalid username-password pair or user is disabled."
	noPasswordReply = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
)

// authErrorReply is the reply to a failed authenticate (AUTH, HELLO
// ... AUTH).
func authErrorReply(err error) string {
	if errors.Is(err, ErrWrongPass) {
		return wrongPassReply
	}
	return "ERR " + err.Error()
}

// user is an ACL user as the server keeps it.
type user struct {
	name   string
	digest [sha256.Size]byte
	nopass bool
	admin  bool
}

// authConfig is the server's users; the zero value is Redis's default:
// the default user without a password.
type authConfig struct {
	def   *user
	users map[string]*user
}

// WithAuth sets the default user's password (Redis's requirepass; "" for
// none) and the ACL users. A user named "default" is refused by the config
// package; here it would replace the default user.
func WithAuth(requirepass string, users ...User) Option {
	return func(o *options) { o.auth = newAuth(requirepass, users) }
}

func newAuth(requirepass string, users []User) *authConfig {
	a := &authConfig{users: map[string]*user{}}
	a.def = &user{name: "default", admin: true, nopass: requirepass == "", digest: sha256.Sum256([]byte(requirepass))}
	a.users["default"] = a.def
	for _, u := range users {
		a.users[u.Name] = &user{name: u.Name, admin: u.Admin, digest: sha256.Sum256([]byte(u.Password))}
	}
	return a
}

// auth returns the server's users (set by New, never nil).
func (s *Server) auth() *authConfig { return s.o.auth }

// RequiresPassword reports whether clients must authenticate.
func (s *Server) RequiresPassword() bool { return !s.auth().def.nopass }

// authenticate checks user (nil or empty: the default user) and pass, and
// on success makes the connection that user. HELLO ... AUTH calls it too.
func (s *Server) authenticate(cl *conn, name, pass []byte) error {
	a := s.auth()
	if len(name) == 0 {
		name = []byte("default")
	}
	u := a.users[string(name)]
	if u == nil {
		sum := sha256.Sum256(pass) // as long as a known user's check
		subtle.ConstantTimeCompare(sum[:], a.def.digest[:])
		return ErrWrongPass
	}
	sum := sha256.Sum256(pass)
	if !u.nopass && subtle.ConstantTimeCompare(sum[:], u.digest[:]) != 1 {
		return ErrWrongPass
	}
	cl.user.Store(u)
	return nil
}

// who is the connection's user, nil when it must authenticate first.
func (s *Server) who(cl *conn) *user {
	if u := cl.user.Load(); u != nil {
		return u
	}
	if def := s.auth().def; def.nopass || isAdminConn(cl.Conn) {
		return def
	}
	return nil
}

// permit replies NOAUTH or NOPERM and returns false when the connection
// may not run c's command.
func (s *Server) permit(c *call) bool {
	u := s.who(c.cl)
	if u == nil {
		if slices.Contains(c.e.flags, "no_auth") {
			return true
		}
		c.error("NOAUTH Authentication required.")
		return false
	}
	if u.admin || !adminOnly(c.e.command, c.args) {
		return true
	}
	name := c.e.name
	if len(c.args) > 1 && name == "config" {
		name += "|" + strings.ToLower(string(truncate(c.args[1], 32)))
	}
	c.error(fmt.Sprintf("NOPERM User %s has no permissions to run the '%s' command", u.name, name))
	return false
}

// destructive are the commands, besides those flagged admin, that only
// admin users may run.
var destructive = []string{"flushall", "flushdb", "shutdown", "debug"}

// adminOnly reports whether a command (with its arguments) is for admin
// users only: the array's admin commands (flag admin: KVARRAY.STATUS,
// REBUILD, ...), the destructive ones and CONFIG SET / REWRITE /
// RESETSTAT.
func adminOnly(cmd *command, args [][]byte) bool {
	if slices.Contains(cmd.flags, "admin") || slices.Contains(destructive, cmd.name) {
		return true
	}
	if cmd.name == "config" && len(args) > 1 {
		switch upper(args[1]) {
		case "SET", "REWRITE", "RESETSTAT":
			return true
		}
	}
	return false
}

// authReply runs AUTH [username] password.
func authReply(c *call) {
	var name, pass []byte
	switch len(c.args) {
	case 2:
		if !c.s.RequiresPassword() {
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
	if err := c.s.authenticate(c.cl, name, pass); err != nil {
		c.error(authErrorReply(err))
		return
	}
	c.ok()
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
