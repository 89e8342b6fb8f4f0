package acl

import (
	"fmt"
	"slices"
	"strings"
)

// flags are the user's flags in Redis's order (on, off, nopass,
// skip-sanitize-payload, sanitize-payload).
func (u *User) flags() []string {
	out := []string{"off"}
	if u.enabled {
		out[0] = "on"
	}
	if u.nopass {
		out = append(out, "nopass")
	}
	if u.skipSanitize {
		out = append(out, "skip-sanitize-payload")
	}
	if u.sanitize {
		out = append(out, "sanitize-payload")
	}
	return out
}

// describeUser is Redis's ACLDescribeUser.
func (a *ACL) describeUser(u *User) string {
	var b strings.Builder
	for _, f := range u.flags() {
		b.WriteString(f + " ")
	}
	for _, p := range u.passwords {
		b.WriteString("#" + p + " ")
	}
	for _, s := range u.selectors {
		d := a.describeSelector(s)
		if s.root {
			b.WriteString(d)
		} else {
			b.WriteString(" (" + d + ")")
		}
	}
	return b.String()
}

// describeSelector is Redis's ACLDescribeSelector.
func (a *ACL) describeSelector(s *selector) string {
	var b strings.Builder
	if s.allKeys {
		b.WriteString("~* ")
	} else {
		for _, k := range s.keys {
			b.WriteString(k.String() + " ")
		}
	}
	if s.allChannels {
		b.WriteString("&* ")
	} else {
		b.WriteString("resetchannels ")
		for _, c := range s.channels {
			b.WriteString("&" + c + " ")
		}
	}
	b.WriteString(a.describeCommands(s))
	return b.String()
}

// describeCommands is Redis's ACLDescribeSelectorCommandRules: +@all or
// -@all, then the categories that best fit what differs, then single
// commands. Rules are applied to a scratch selector as they are chosen,
// so that the result recreates the selector's commands exactly.
func (a *ACL) describeCommands(s *selector) string {
	t := a.t
	fake := newSelector(t, false)
	var rules []string
	additive := !s.future
	if additive {
		rules = append(rules, "-@all")
	} else {
		rules = append(rules, "+@all")
		fake.all(true)
	}
	// temp starts as s; each chosen category is undone on it, so that
	// the next choice counts only what is left to explain.
	temp := slices.Clone(s.allowed)
	applied := make([]bool, len(categoryNames))
	for {
		best, mindiff, maxsame := -1, int(^uint(0)>>1), 0
		for j := range categoryNames {
			if applied[j] {
				continue
			}
			on, off := 0, 0
			for _, c := range t.all {
				if c.Categories&(1<<j) != 0 {
					if temp[c.id] {
						on++
					} else {
						off++
					}
				}
			}
			diff, same := on, off
			if additive {
				diff, same = off, on
			}
			if same > diff && (diff < mindiff || diff == mindiff && same > maxsame) {
				best, mindiff, maxsame = j, diff, same
			}
		}
		if best < 0 {
			break
		}
		cat := Category(1 << best)
		sign, inv := "-@", true
		if additive {
			sign, inv = "+@", false
		}
		rules = append(rules, sign+categoryNames[best])
		fake.category(t, cat, additive)
		// The inverse on temp (Redis's ACLSetSelector(temp, invop)),
		// with change()'s container rule.
		tsel := &selector{allowed: temp}
		tsel.category(t, cat, inv)
		applied[best] = true
	}
	// Single commands, containers before their subcommands.
	for _, c := range t.all {
		user, f := s.allowed[c.id], fake.allowed[c.id]
		if user != f {
			sign := "-"
			if user {
				sign = "+"
			}
			rules = append(rules, sign+c.Name)
			fake.change(c, user)
		}
		if !user {
			for _, fa := range s.firstArgs[c.id] {
				rules = append(rules, "+"+c.Name+"|"+fa)
			}
		}
	}
	if !slices.Equal(fake.allowed, s.allowed) {
		// As Redis, refuse to describe what would not recreate the
		// selector: a description that grants more is a security hole.
		panic(fmt.Sprintf("acl: rules %q do not recreate the selector", strings.Join(rules, " ")))
	}
	return strings.Join(rules, " ")
}
