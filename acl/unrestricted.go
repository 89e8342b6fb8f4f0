package acl

// UnrestrictedKeys reports whether one of u's selectors allows c with
// args and reading every key (allkeys, ~* or %R~*: Redis's
// ACLUserCheckCmdWithUnrestrictedKeyAccess): SORT's BY and GET patterns
// read keys no key spec names, so Redis allows them only then.
func (a *ACL) UnrestrictedKeys(u *User, c *Command, args [][]byte) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	keyf := lazyKeys(c, args)
	for _, s := range u.selectors {
		if s.readsAllKeys() {
			if r, _ := s.check(c, args, keyf); r == Allowed {
				return true
			}
		}
	}
	return false
}

// lazyKeys is c's keys in args, found on the first call (a selector that
// refuses the command never needs them).
func lazyKeys(c *Command, args [][]byte) func() []Key {
	var keys []Key
	got := false
	return func() []Key {
		if !got {
			keys, got = c.keys(args), true
		}
		return keys
	}
}

func (s *selector) readsAllKeys() bool {
	if s.allKeys {
		return true
	}
	for _, k := range s.keys {
		if k.flags&KeyRead != 0 && k.pattern == "*" {
			return true
		}
	}
	return false
}
