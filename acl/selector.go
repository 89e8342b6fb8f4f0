//lint:file-ignore ST1005 error texts are Redis 7.0's replies, byte for byte

package acl

import (
	"errors"
	"slices"
	"strings"
)

// Errors of a rule, with Redis's wording (ACLSetUserStringError).
var (
	ErrUnknownCommand = errors.New("Unknown command or category name in ACL")
	ErrSyntax         = errors.New("Syntax error")
	ErrAfterAllKeys   = errors.New("Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns")
	ErrAfterAllChans  = errors.New("Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels")
	ErrNoSuchPassword = errors.New("The password you are trying to remove from the user does not exist")
	ErrBadHash        = errors.New("The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters")
	ErrSubFirstArg    = errors.New("Allowing first-arg of a subcommand is not supported")
	ErrDuplicateUser  = errors.New("Duplicate user found. A user can only be defined once in config files")
)

type keyPattern struct {
	pattern string
	flags   KeyFlags // KeyRead|KeyWrite for ~
}

func (k keyPattern) String() string {
	switch k.flags {
	case KeyRead:
		return "%R~" + k.pattern
	case KeyWrite:
		return "%W~" + k.pattern
	}
	return "~" + k.pattern
}

// selector is a set of command rules, key patterns and channel patterns.
type selector struct {
	root                          bool
	allKeys, allChannels, allCmds bool
	allowed                       []bool // by command id
	future                        bool   // +@all: commands added later
	firstArgs                     map[int][]string
	keys                          []keyPattern
	channels                      []string
}

func newSelector(t *Table, root bool) *selector {
	return &selector{root: root, allowed: make([]bool, len(t.all))}
}

func (s *selector) clone() *selector {
	c := *s
	c.allowed = slices.Clone(s.allowed)
	c.keys = slices.Clone(s.keys)
	c.channels = slices.Clone(s.channels)
	if s.firstArgs != nil {
		c.firstArgs = map[int][]string{}
		for k, v := range s.firstArgs {
			c.firstArgs[k] = slices.Clone(v)
		}
	}
	return &c
}

func (s *selector) setBit(id int, v bool) {
	s.allowed[id] = v
	if !v {
		s.allCmds = false
	}
}

// change allows or denies c and, for a container, its subcommands.
func (s *selector) change(c *Command, allow bool) {
	s.setBit(c.id, allow)
	delete(s.firstArgs, c.id)
	for _, sub := range c.Subcommands {
		s.setBit(sub.id, allow)
	}
}

func (s *selector) category(t *Table, cat Category, allow bool) {
	for _, c := range t.all {
		if c.Categories&cat != 0 {
			s.change(c, allow)
		}
	}
}

func (s *selector) all(allow bool) {
	for i := range s.allowed {
		s.allowed[i] = allow
	}
	s.allCmds, s.future, s.firstArgs = allow, allow, nil
}

// hasSpace reports a space or NUL, which names and patterns may not have.
func hasSpace(s string) bool {
	return strings.ContainsAny(s, " \t\n\v\f\r\x00")
}

// apply applies one selector rule (Redis's ACLSetSelector).
func (s *selector) apply(t *Table, op string) error {
	low := strings.ToLower(op)
	switch {
	case low == "allkeys" || op == "~*":
		s.allKeys, s.keys = true, nil
	case low == "resetkeys":
		s.allKeys, s.keys = false, nil
	case low == "allchannels" || op == "&*":
		s.allChannels, s.channels = true, nil
	case low == "resetchannels":
		s.allChannels, s.channels = false, nil
	case low == "allcommands" || low == "+@all":
		s.all(true)
	case low == "nocommands" || low == "-@all":
		s.all(false)
	case op[0] == '~' || op[0] == '%':
		if s.allKeys {
			return ErrAfterAllKeys
		}
		var flags KeyFlags
		off := 1
		if op[0] == '%' {
			for ; off < len(op); off++ {
				switch {
				case (op[off] == 'R' || op[off] == 'r') && flags&KeyRead == 0:
					flags |= KeyRead
				case (op[off] == 'W' || op[off] == 'w') && flags&KeyWrite == 0:
					flags |= KeyWrite
				case op[off] == '~':
					off++
					goto done
				default:
					return ErrSyntax
				}
			}
		done:
		} else {
			flags = KeyRead | KeyWrite
		}
		pat := op[min(off, len(op)):]
		if hasSpace(pat) {
			return ErrSyntax
		}
		i := slices.IndexFunc(s.keys, func(k keyPattern) bool { return k.pattern == pat })
		if i < 0 {
			s.keys = append(s.keys, keyPattern{pat, flags})
		} else {
			s.keys[i].flags |= flags
		}
	case op[0] == '&':
		if s.allChannels {
			return ErrAfterAllChans
		}
		pat := op[1:]
		if hasSpace(pat) {
			return ErrSyntax
		}
		if !slices.Contains(s.channels, pat) {
			s.channels = append(s.channels, pat)
		}
	case op[0] == '+' && (len(op) < 2 || op[1] != '@'):
		name := op[1:]
		bar := strings.LastIndexByte(name, '|')
		if bar < 0 {
			c := t.Lookup(name)
			if c == nil {
				return ErrUnknownCommand
			}
			s.change(c, true)
			return nil
		}
		c := t.Lookup(name[:bar])
		if c == nil {
			return ErrUnknownCommand
		}
		if c.parent != nil {
			return ErrSubFirstArg
		}
		sub := name[bar+1:]
		if sub == "" {
			return ErrSyntax
		}
		if len(c.Subcommands) > 0 {
			sc := t.Lookup(name)
			if sc == nil {
				return ErrUnknownCommand
			}
			s.change(sc, true)
			return nil
		}
		// SELECT|0, DEBUG|OBJECT: a first argument of an otherwise
		// denied command (deprecated in Redis, still accepted).
		if s.firstArgs == nil {
			s.firstArgs = map[int][]string{}
		}
		if !slices.ContainsFunc(s.firstArgs[c.id], func(a string) bool { return strings.EqualFold(a, sub) }) {
			s.firstArgs[c.id] = append(s.firstArgs[c.id], sub)
		}
	case op[0] == '-' && (len(op) < 2 || op[1] != '@'):
		c := t.Lookup(op[1:])
		if c == nil {
			return ErrUnknownCommand
		}
		s.change(c, false)
	case (op[0] == '+' || op[0] == '-') && op[1] == '@':
		cat := CategoryByName(op[2:])
		if cat == 0 {
			return ErrUnknownCommand
		}
		s.category(t, cat, op[0] == '+')
	default:
		return ErrSyntax
	}
	return nil
}

// Reason is why a command is denied.
type Reason int

// Reasons, as Redis numbers them (ACL_DENIED_*): when no selector allows
// a command the highest reason of them is reported.
const (
	Allowed       Reason = iota
	DeniedCommand        // the command or subcommand
	DeniedKey            // a key
	DeniedAuth           // a failed AUTH (ACL LOG only)
	DeniedChannel        // a channel
)

// String is ACL LOG's name for the reason.
func (r Reason) String() string {
	switch r {
	case DeniedCommand:
		return "command"
	case DeniedKey:
		return "key"
	case DeniedChannel:
		return "channel"
	case DeniedAuth:
		return "auth"
	}
	return "unknown"
}

// checkKey reports whether the selector may use key with flags.
func (s *selector) checkKey(key []byte, flags KeyFlags) bool {
	if s.allKeys {
		return true
	}
	for _, p := range s.keys {
		if p.flags&flags == flags && globMatch(p.pattern, key) {
			return true
		}
	}
	return false
}

func (s *selector) checkChannel(ch []byte, pattern bool) bool {
	if s.allChannels {
		return true
	}
	for _, p := range s.channels {
		if pattern && p == string(ch) || !pattern && globMatch(p, ch) {
			return true
		}
	}
	return false
}

// check is Redis's ACLSelectorCheckCmd: the reason and the position of
// the argument at fault.
func (s *selector) check(c *Command, args [][]byte, keys func() []Key) (Reason, int) {
	if !s.allCmds && !c.NoAuth && !s.allowed[c.id] {
		fa := s.firstArgs[c.id]
		idx := 1
		if c.parent != nil {
			idx = 2
		}
		if len(args) <= idx || !slices.ContainsFunc(fa, func(a string) bool { return strings.EqualFold(a, string(args[idx])) }) {
			return DeniedCommand, 0
		}
	}
	if !s.allKeys {
		for _, k := range keys() {
			if k.Pos < len(args) && !s.checkKey(args[k.Pos], k.Flags) {
				return DeniedKey, k.Pos
			}
		}
	}
	if !s.allChannels && c.Channels != nil {
		for _, ch := range c.Channels(args) {
			if !s.checkChannel(args[ch.Pos], ch.Pattern) {
				return DeniedChannel, ch.Pos
			}
		}
	}
	return Allowed, 0
}
