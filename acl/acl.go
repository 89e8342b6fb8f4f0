//lint:file-ignore ST1005 error texts are Redis 7.0's replies, byte for byte

package acl

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// ACL is a set of users (always with "default") and the ACL log.
type ACL struct {
	t     *Table
	mu    sync.RWMutex
	users map[string]*User
	def   *User
	log   []*LogEntry // newest first
	// MaxLog is the most entries the log keeps (Redis's acllog-max-len).
	maxLog int
}

// New makes an ACL over t with only the default user, which may run
// everything without a password (on nopass ~* &* +@all).
func New(t *Table) *ACL {
	a := &ACL{t: t, users: map[string]*User{}, maxLog: 128}
	a.def = defaultUser(t)
	a.users["default"] = a.def
	return a
}

func defaultUser(t *Table) *User {
	u := newUser(t, "default")
	for _, op := range []string{"+@all", "~*", "&*", "on", "nopass"} {
		if err := u.apply(t, op); err != nil {
			panic(err)
		}
	}
	return u
}

// Table is the ACL's command table.
func (a *ACL) Table() *Table { return a.t }

// Default is the default user.
func (a *ACL) Default() *User { return a.def }

// SetMaxLog sets how many entries the log keeps.
func (a *ACL) SetMaxLog(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.maxLog = n
	a.trimLog()
}

// MaxLog is how many entries the log keeps.
func (a *ACL) MaxLog() int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.maxLog
}

// ErrSpaces is ACL SETUSER's error for a name with spaces or NULs.
var ErrSpaces = errors.New("Usernames can't contain spaces or null characters")

// SetUser creates or changes user name with rules, all or nothing
// (Redis's ACLStringSetUser); the error is Redis's reply text, without
// "ERR ".
func (a *ACL) SetUser(name string, rules []string) error {
	if hasSpace(name) {
		return ErrSpaces
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	u := a.users[name]
	tmp, err := a.stage(u, name, rules)
	if err != nil {
		return err
	}
	if u == nil {
		a.users[name] = tmp
		return nil
	}
	u.assign(tmp)
	return nil
}

// stage applies rules to a copy of u (a new user if nil).
func (a *ACL) stage(u *User, name string, rules []string) (*User, error) {
	ops, open := mergeSelectors(rules)
	if open >= 0 {
		return nil, fmt.Errorf("Unmatched parenthesis in acl selector starting at '%s'.", rules[open])
	}
	var tmp *User
	if u != nil {
		tmp = u.clone()
	} else {
		tmp = newUser(a.t, name)
	}
	for _, op := range ops {
		if err := tmp.apply(a.t, op); err != nil {
			return nil, &RuleError{Rule: op, Err: err}
		}
	}
	return tmp, nil
}

// RuleError is a rule ACL SETUSER could not apply.
type RuleError struct {
	Rule string
	Err  error
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("Error in ACL SETUSER modifier '%s': %s", e.Rule, e.Err)
}

func (e *RuleError) Unwrap() error { return e.Err }

// ErrDeleteDefault: the default user cannot be removed.
var ErrDeleteDefault = errors.New("The 'default' user cannot be removed")

// DelUser removes the named users and returns those it removed (the
// server ends their connections).
func (a *ACL) DelUser(names ...string) ([]*User, error) {
	for _, n := range names {
		if n == "default" {
			return nil, ErrDeleteDefault
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*User
	for _, n := range names {
		if u := a.users[n]; u != nil {
			delete(a.users, n)
			out = append(out, u)
		}
	}
	return out, nil
}

// Exists reports whether u is still one of the ACL's users.
func (a *ACL) Exists(u *User) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.users[u.name] == u
}

// User returns the user named name, or nil.
func (a *ACL) User(name string) *User {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.users[name]
}

// Users are the users' names, in byte order (ACL USERS).
func (a *ACL) Users() []string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.names()
}

func (a *ACL) names() []string {
	out := make([]string, 0, len(a.users))
	for n := range a.users {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// List is ACL LIST: each user as an aclfile line.
func (a *ACL) List() []string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []string
	for _, n := range a.names() {
		out = append(out, "user "+n+" "+a.describeUser(a.users[n]))
	}
	return out
}

// Authenticate returns the user name if pass is one of its passwords and
// it is on; nil otherwise.
func (a *ACL) Authenticate(name string, pass []byte) *User {
	a.mu.RLock()
	defer a.mu.RUnlock()
	u := a.users[name]
	if u == nil || !u.enabled || !u.checkPassword(pass) {
		return nil
	}
	return u
}

// NoPassDefault reports whether the default user is on and needs no
// password: connections start authenticated as it.
func (a *ACL) NoPassDefault() bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.def.enabled && a.def.nopass
}

// DefaultHasNoPass reports whether the default user is nopass (AUTH
// <password> is then an error, as in Redis, whether or not it is on).
func (a *ACL) DefaultHasNoPass() bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.def.nopass
}

// Check is the permission check (Redis's ACLCheckAllUserCommandPerm): the
// reason c with args (args[0] its name) is denied to u, and the index in
// args of the key or channel at fault; Allowed if one selector allows it.
func (a *ACL) Check(u *User, c *Command, args [][]byte) (Reason, int) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	keyf := lazyKeys(c, args)
	worst, pos := DeniedCommand, 0
	for _, s := range u.selectors {
		r, p := s.check(c, args, keyf)
		if r == Allowed {
			return Allowed, 0
		}
		if r > worst || r == worst && p > pos {
			worst, pos = r, p
		}
	}
	return worst, pos
}

// Describe is ACL LIST's rules for u, without "user NAME ".
func (a *ACL) Describe(u *User) string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.describeUser(u)
}

// SelectorInfo is one selector as ACL GETUSER shows it.
type SelectorInfo struct {
	Commands, Keys, Channels string
}

// UserInfo is ACL GETUSER's reply.
type UserInfo struct {
	Flags     []string
	Passwords []string
	Root      SelectorInfo
	Selectors []SelectorInfo
}

// GetUser is ACL GETUSER name, nil for no such user.
func (a *ACL) GetUser(name string) *UserInfo {
	a.mu.RLock()
	defer a.mu.RUnlock()
	u := a.users[name]
	if u == nil {
		return nil
	}
	info := &UserInfo{Flags: u.flags(), Passwords: append([]string{}, u.passwords...), Root: a.selectorInfo(u.selectors[0])}
	for _, s := range u.selectors[1:] {
		info.Selectors = append(info.Selectors, a.selectorInfo(s))
	}
	return info
}

func (a *ACL) selectorInfo(s *selector) SelectorInfo {
	info := SelectorInfo{Commands: a.describeCommands(s)}
	if s.allKeys {
		info.Keys = "~*"
	} else {
		var ks []string
		for _, k := range s.keys {
			ks = append(ks, k.String())
		}
		info.Keys = strings.Join(ks, " ")
	}
	if s.allChannels {
		info.Channels = "&*"
	} else {
		var cs []string
		for _, c := range s.channels {
			cs = append(cs, "&"+c)
		}
		info.Channels = strings.Join(cs, " ")
	}
	return info
}

// DryRun is ACL DRYRUN's answer for a denial: Redis's wording.
func DryRun(r Reason, c *Command, args [][]byte, pos int) string {
	switch r {
	case DeniedCommand:
		return fmt.Sprintf("This user has no permissions to run the '%s' command", c.Name)
	case DeniedKey:
		return fmt.Sprintf("This user has no permissions to access the '%s' key", args[pos])
	case DeniedChannel:
		return fmt.Sprintf("This user has no permissions to access the '%s' channel", args[pos])
	}
	return "OK"
}

// NoPerm is the NOPERM reply to a command denied for r (processCommand's
// wording).
func NoPerm(r Reason, c *Command) string {
	switch r {
	case DeniedCommand:
		return fmt.Sprintf("NOPERM this user has no permissions to run the '%s' command", c.Name)
	case DeniedKey:
		return "NOPERM this user has no permissions to access one of the keys used as arguments"
	case DeniedChannel:
		return "NOPERM this user has no permissions to access one of the channels used as arguments"
	}
	return "no permission"
}

// ScriptReason is why a script's command is refused (script.c: "The user
// executing the script " and acl.c's getAclErrorMessage).
func ScriptReason(r Reason) string {
	switch r {
	case DeniedCommand:
		return "can't run this command or subcommand"
	case DeniedKey:
		return "can't access at least one of the keys mentioned in the command arguments"
	case DeniedChannel:
		return "can't publish to the channel mentioned in the command"
	}
	return "lacking the permissions for the command"
}

// ExecReason is why EXEC refuses a queued command that ACL rules changed
// against (multi.c's wording).
func ExecReason(r Reason) string {
	switch r {
	case DeniedCommand:
		return "no permission to execute the command or subcommand"
	case DeniedKey:
		return "no permission to touch the specified keys"
	case DeniedChannel:
		return "no permission to access one of the channels used as arguments"
	}
	return "no permission"
}

// Object is what an ACL LOG entry names for a denial: the command's full
// name, or the key or channel.
func Object(r Reason, c *Command, args [][]byte, pos int) string {
	switch r {
	case DeniedKey, DeniedChannel:
		return string(args[pos])
	case DeniedAuth:
		return string(args[0])
	}
	return c.Name
}

// Log contexts.
const (
	ContextToplevel = "toplevel"
	ContextMulti    = "multi"
	ContextLua      = "lua"
)

// LogEntry is one ACL LOG entry.
type LogEntry struct {
	Count      int
	Reason     Reason
	Context    string
	Object     string
	Username   string
	Time       time.Time // of the last occurrence
	ClientInfo string
}

// AddLog records a denial; one like a recent entry (same reason,
// context, object and user, within 60 s, among the last 10) counts in it
// instead (Redis's addACLLogEntry).
func (a *ACL) AddLog(e LogEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, old := range a.log[:min(10, len(a.log))] {
		d := old.Time.Sub(e.Time)
		if d < 0 {
			d = -d
		}
		if old.Reason == e.Reason && old.Context == e.Context && d <= time.Minute && old.Object == e.Object && old.Username == e.Username {
			old.Count++
			old.ClientInfo, old.Time = e.ClientInfo, e.Time
			copy(a.log[1:i+1], a.log[:i])
			a.log[0] = old
			return
		}
	}
	e.Count = 1
	a.log = append([]*LogEntry{&e}, a.log...)
	a.trimLog()
}

func (a *ACL) trimLog() {
	if len(a.log) > a.maxLog {
		a.log = a.log[:a.maxLog]
	}
}

// Log returns up to count entries, newest first.
func (a *ACL) Log(count int) []LogEntry {
	a.mu.RLock()
	defer a.mu.RUnlock()
	count = max(0, min(count, len(a.log)))
	out := make([]LogEntry, count)
	for i := range out {
		out[i] = *a.log[i]
	}
	return out
}

// ResetLog empties the log.
func (a *ACL) ResetLog() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.log = nil
}
