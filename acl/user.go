package acl

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/kvarray/kvarray/internal/glob"
)

func globMatch(p string, s []byte) bool { return glob.Match([]byte(p), s) }

// User is an ACL user. Its fields change only through its ACL, under
// the ACL's lock; a connection keeps a *User as its identity.
type User struct {
	name                   string
	enabled                bool
	nopass                 bool
	sanitize, skipSanitize bool
	passwords              []string // hex SHA-256
	selectors              []*selector
}

// Name is the user's name.
func (u *User) Name() string { return u.name }

func newUser(t *Table, name string) *User {
	return &User{name: name, selectors: []*selector{newSelector(t, true)}}
}

func (u *User) clone() *User {
	c := *u
	c.passwords = slices.Clone(u.passwords)
	c.selectors = make([]*selector, len(u.selectors))
	for i, s := range u.selectors {
		c.selectors[i] = s.clone()
	}
	return &c
}

// assign gives u the rules of v, keeping u's name (which connections
// read without the ACL's lock: it never changes).
func (u *User) assign(v *User) {
	u.enabled, u.nopass = v.enabled, v.nopass
	u.sanitize, u.skipSanitize = v.sanitize, v.skipSanitize
	u.passwords, u.selectors = v.passwords, v.selectors
}

// HashPassword is the hex SHA-256 of a password, as Redis keeps it.
func HashPassword(p string) string {
	sum := sha256.Sum256([]byte(p))
	return hex.EncodeToString(sum[:])
}

func validHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; (c < 'a' || c > 'f') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// apply applies one rule to the user (Redis's ACLSetUser).
func (u *User) apply(t *Table, op string) error {
	if op == "" {
		return nil
	}
	switch low := strings.ToLower(op); {
	case low == "on":
		u.enabled = true
	case low == "off":
		u.enabled = false
	case low == "skip-sanitize-payload":
		u.skipSanitize, u.sanitize = true, false
	case low == "sanitize-payload":
		u.skipSanitize, u.sanitize = false, true
	case low == "nopass":
		u.nopass, u.passwords = true, nil
	case low == "resetpass":
		u.nopass, u.passwords = false, nil
	case op[0] == '>' || op[0] == '#':
		h := op[1:]
		if op[0] == '>' {
			h = HashPassword(op[1:])
		} else if !validHash(h) {
			return ErrBadHash
		}
		if !slices.Contains(u.passwords, h) {
			u.passwords = append(u.passwords, h)
		}
		u.nopass = false
	case op[0] == '<' || op[0] == '!':
		h := op[1:]
		if op[0] == '<' {
			h = HashPassword(op[1:])
		} else if !validHash(h) {
			return ErrBadHash
		}
		i := slices.Index(u.passwords, h)
		if i < 0 {
			return ErrNoSuchPassword
		}
		u.passwords = slices.Delete(u.passwords, i, i+1)
	case op[0] == '(' && op[len(op)-1] == ')':
		s := newSelector(t, false)
		for _, o := range splitArgs(op[1 : len(op)-1]) {
			if err := s.apply(t, o); err != nil {
				return err
			}
		}
		u.selectors = append(u.selectors, s)
	case low == "clearselectors":
		u.selectors = u.selectors[:1]
	case low == "reset":
		u.nopass, u.passwords = false, nil
		root := u.selectors[0]
		root.allKeys, root.keys = false, nil
		root.allChannels, root.channels = false, nil
		u.enabled = false
		u.skipSanitize, u.sanitize = false, true
		u.selectors = u.selectors[:1]
		root.all(false)
	default:
		return u.selectors[0].apply(t, op)
	}
	return nil
}

// splitArgs splits a selector's rules on spaces (Redis's sdssplitargs
// for the unquoted rules a selector holds).
func splitArgs(s string) []string { return strings.Fields(s) }

// checkPassword reports whether pass is one of the user's passwords (any
// is, with nopass), in constant time per stored hash.
func (u *User) checkPassword(pass []byte) bool {
	if u.nopass {
		return true
	}
	sum := sha256.Sum256(pass)
	h := []byte(hex.EncodeToString(sum[:]))
	ok := false
	for _, p := range u.passwords {
		if subtle.ConstantTimeCompare(h, []byte(p)) == 1 {
			ok = true
		}
	}
	return ok
}

// mergeSelectors joins the rules of a selector given as several words,
// "(~key1" "+get)", into one (Redis's ACLMergeSelectorArguments); it
// returns the index of an unclosed one, or -1.
func mergeSelectors(ops []string) ([]string, int) {
	var out []string
	open := -1
	var cur string
	for j, op := range ops {
		if open < 0 && len(op) > 0 && op[0] == '(' && op[len(op)-1] != ')' {
			cur, open = op, j
			continue
		}
		if open >= 0 {
			cur += " " + op
			if len(op) > 0 && op[len(op)-1] == ')' {
				out = append(out, cur)
				open = -1
			}
			continue
		}
		out = append(out, op)
	}
	if open >= 0 {
		return nil, open
	}
	return out, -1
}
