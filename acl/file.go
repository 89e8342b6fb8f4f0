package acl

import (
	"errors"
	"fmt"
	"strings"
)

// The aclfile format is Redis's: one user a line, "user NAME RULES...",
// passwords as #HASH. Save writes it; Load reads it.

// Save is the aclfile text of the users (Redis's ACLSaveToFile).
func (a *ACL) Save() string {
	var b strings.Builder
	for _, l := range a.List() {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// ErrLoad wraps the errors of Load.
var ErrLoad = errors.New("Error loading ACLs")

// Load replaces the users by those of an aclfile's text, all or nothing
// (Redis's ACLLoadFromFile; name is the file's name for messages). A file
// without a default user gets Redis's default one. It returns the users
// it replaced (the server ends their connections); the default user is
// changed in place and stays.
func (a *ACL) Load(name, text string) ([]*User, error) {
	var errs strings.Builder
	users := map[string]*User{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.Trim(line, " \t\r\n")
		if line == "" {
			continue
		}
		n := i + 1
		argv := strings.Split(line, " ")
		argv = deleteEmpty(argv)
		if len(argv) == 0 {
			continue
		}
		if argv[0] != "user" || len(argv) < 2 {
			fmt.Fprintf(&errs, "%s:%d should start with user keyword followed by the username. ", name, n)
			continue
		}
		if hasSpace(argv[1]) {
			fmt.Fprintf(&errs, "'%s:%d: username '%s' contains invalid characters. ", name, n, argv[1])
			continue
		}
		if users[argv[1]] != nil {
			fmt.Fprintf(&errs, "WARNING: Duplicate user '%s' found on line %d. ", argv[1], n)
			continue
		}
		u := newUser(a.t, argv[1])
		users[argv[1]] = u
		ops, open := mergeSelectors(argv[2:])
		if open >= 0 {
			fmt.Fprintf(&errs, "%s:%d: Unmatched parenthesis in selector definition.", name, n)
		}
		syntax := false
		for _, op := range ops {
			op = strings.Trim(op, "\t\r\n")
			if err := u.apply(a.t, op); err != nil {
				if errors.Is(err, ErrUnknownCommand) {
					fmt.Fprintf(&errs, "%s:%d: Error in applying operation '%s': %s. ", name, n, op, err)
				} else if !syntax {
					fmt.Fprintf(&errs, "%s:%d: %s. ", name, n, err)
					syntax = true
				}
			}
		}
	}
	if errs.Len() > 0 {
		return nil, fmt.Errorf("%w: %sWARNING: ACL errors detected, no change to the previously active ACL rules was performed", ErrLoad, errs.String())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	nd := users["default"]
	if nd == nil {
		nd = defaultUser(a.t)
	}
	a.def.assign(nd)
	users["default"] = a.def
	var old []*User
	for n, u := range a.users {
		if n != "default" {
			old = append(old, u)
		}
	}
	a.users = users
	return old, nil
}

func deleteEmpty(s []string) []string {
	out := s[:0]
	for _, x := range s {
		if x != "" {
			out = append(out, x)
		}
	}
	return out
}

// LoadErrorText is the text of a Load error as ACL LOAD replies it.
func LoadErrorText(err error) string {
	return strings.TrimPrefix(err.Error(), ErrLoad.Error()+": ")
}
