// Package acl is Redis 7.0's access control lists, ported from its
// src/acl.c, without I/O: users (on/off, SHA-256 password hashes, nopass),
// selectors of command rules, key patterns and channel patterns, the
// permission check a server runs before each command, ACL GETUSER's and
// ACL LIST's descriptions, the aclfile format and the ACL LOG.
//
// Invariants:
//   - Every user has a root selector; a command is allowed when one of the
//     user's selectors allows the command, every key it names with the
//     access it needs, and every channel.
//   - Rules are applied to a copy of the user and installed only when all
//     of them are valid: a failed ACL SETUSER or ACL LOAD changes nothing.
//   - Passwords are kept only as lowercase hex SHA-256 digests and
//     compared in constant time.
//   - Commands are known by a Table, fixed when the ACL is made: the rule
//     +name for a name the table does not have is an error, as in Redis.
//
// An ACL is safe for concurrent use.
package acl

import (
	"strconv"
	"strings"
)

// Category is a set of ACL command categories.
type Category uint32

// The categories, in Redis's order (ACL CAT lists them so).
const (
	CatKeyspace Category = 1 << iota
	CatRead
	CatWrite
	CatSet
	CatSortedset
	CatList
	CatHash
	CatString
	CatBitmap
	CatHyperloglog
	CatGeo
	CatStream
	CatPubsub
	CatAdmin
	CatFast
	CatSlow
	CatBlocking
	CatDangerous
	CatConnection
	CatTransaction
	CatScripting
)

var categoryNames = []string{"keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
	"hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous", "connection",
	"transaction", "scripting"}

// Categories are the names of the categories, in Redis's order.
func Categories() []string { return append([]string(nil), categoryNames...) }

// CategoryByName returns the category named name (case-insensitive), or 0.
func CategoryByName(name string) Category {
	for i, n := range categoryNames {
		if strings.EqualFold(n, name) {
			return 1 << i
		}
	}
	return 0
}

// Names are the category's names, in Redis's order.
func (c Category) Names() []string {
	var out []string
	for i, n := range categoryNames {
		if c&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// KeyFlags is how a command uses a key: KeyRead (Redis's ACCESS: it
// returns or uses the value) and KeyWrite (INSERT, DELETE or UPDATE). A
// key with neither (EXISTS, TYPE, STRLEN) may be named by a user with
// either permission on it.
type KeyFlags uint8

// Key access.
const (
	KeyRead KeyFlags = 1 << iota
	KeyWrite
)

// SpecFlags are a key spec's flags as Redis 7.0 names them, for COMMAND
// GETKEYSANDFLAGS and COMMAND INFO; the ACL goes by KeyFlags.
type SpecFlags uint16

// Redis's key spec flags, in the order it lists them.
const (
	SpecRO SpecFlags = 1 << iota
	SpecRW
	SpecOW
	SpecRM
	SpecAccess
	SpecUpdate
	SpecInsert
	SpecDelete
	SpecNotKey
	SpecIncomplete
	SpecVariableFlags
)

var specNames = []string{"RO", "RW", "OW", "RM", "access", "update", "insert", "delete", "not_key", "incomplete", "variable_flags"}

// Names are the flags' names, in Redis's order.
func (f SpecFlags) Names() []string {
	var out []string
	for i, n := range specNames {
		if f&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// KeySpec locates keys among a command's arguments, as a Redis 7 key
// spec: begin at Index, or after the first Keyword found from StartFrom
// (negative: from the end, backwards); then a range (LastKey relative to
// the start, negative from the end; Step; Limit) or a count (KeyNum: the
// count at KeyNumIdx from the start, keys from FirstKey, every Step).
// Unknown specs (SORT's BY, GET and STORE) are left to Command.GetKeys.
type KeySpec struct {
	Index         int
	Keyword       string
	StartFrom     int
	LastKey, Step int
	Limit         int
	KeyNum        bool
	KeyNumIdx     int
	FirstKey      int
	Flags         KeyFlags
	Spec          SpecFlags
	Notes         string
	Unknown       bool
}

// Key is one key argument: its position in the arguments, its access,
// and its spec's flags.
type Key struct {
	Pos   int
	Flags KeyFlags
	Spec  SpecFlags
}

// Channel is one channel argument of a command that publishes or
// subscribes; Pattern: a PSUBSCRIBE pattern, matched literally.
type Channel struct {
	Pos     int
	Pattern bool
}

// Command is a command as the ACL sees it.
type Command struct {
	// Name is the full name in lower case: "get", "config|get".
	Name       string
	Arity      int
	Categories Category
	// NoAuth commands (AUTH, HELLO, QUIT, RESET) are always allowed.
	NoAuth bool
	// Keys are the key specs; those flagged SpecNotKey (SPUBLISH's shard
	// channel) name no key: COMMAND INFO lists them, key finding skips
	// them.
	Keys []KeySpec
	// Tips and Flags are COMMAND INFO's (Redis's names, lower case).
	Tips, Flags []string
	// GetKeys, when set, finds the keys instead of Keys (commands whose
	// key access depends on their arguments: SET ... GET, BITFIELD, SORT).
	GetKeys func(args [][]byte) []Key
	// Channels finds the channels a command publishes or subscribes to.
	Channels    func(args [][]byte) []Channel
	Subcommands []*Command

	id     int
	parent *Command
}

// Parent is the container of a subcommand, nil for others.
func (c *Command) Parent() *Command { return c.parent }

// HasKeys reports whether the command can name keys (Redis's
// doesCommandHaveKeys): a key procedure, or a spec that names keys.
func (c *Command) HasKeys() bool {
	if c.GetKeys != nil {
		return true
	}
	for _, k := range c.Keys {
		if k.Spec&SpecNotKey == 0 {
			return true
		}
	}
	return false
}

// Movable reports whether the command's keys can move among its
// arguments, so that COMMAND's first, last and step cannot give them all
// (Redis 7.0's movablekeys): see LegacyRange.
func (c *Command) Movable() bool {
	_, _, _, movable := c.legacyRange()
	return movable
}

// LegacyRange is COMMAND INFO's first key, last key and step, from the key
// specs as Redis 7.0 derives them (populateCommandLegacyRangeSpec): the
// plain ranges from an index that follow one another, glued.
func (c *Command) LegacyRange() (first, last, step int) {
	first, last, step, _ = c.legacyRange()
	return first, last, step
}

func (c *Command) legacyRange() (first, last, step int, movable bool) {
	if len(c.Keys) == 0 {
		return 0, 0, 0, false
	}
	plain := func(k KeySpec) bool { return !k.Unknown && k.Keyword == "" && !k.KeyNum }
	if len(c.Keys) == 1 && plain(c.Keys[0]) {
		k := c.Keys[0]
		last := k.LastKey
		if last >= 0 {
			last += k.Index
		}
		return k.Index, last, k.Step, k.Spec&SpecIncomplete != 0
	}
	first, prevLast := 1<<31-1, 0
	lastKey := uint(0)
	for _, k := range c.Keys {
		if !plain(k) || k.Step != 1 || prevLast != 0 && prevLast != k.Index-1 {
			movable = true
			continue
		}
		if k.Spec&SpecIncomplete != 0 {
			movable = true
		}
		first = min(first, k.Index)
		abs := k.LastKey
		if abs >= 0 {
			abs += k.Index
		}
		// Unsigned, as Redis compares: a last key counted from the end
		// is above any other.
		lastKey = max(lastKey, uint(abs))
		prevLast = int(lastKey)
	}
	if first == 1<<31-1 {
		return 0, 0, 0, true
	}
	return first, int(lastKey), 1, movable
}

// KeysOf returns the command's keys in args (args[0] is the command
// name): COMMAND GETKEYS's answer.
func (c *Command) KeysOf(args [][]byte) []Key { return c.keys(args) }

// keys returns the command's keys in args (args[0] is the command name).
// Arguments that do not fit the specs (a syntax error the command will
// report) give no keys, as in Redis.
func (c *Command) keys(args [][]byte) []Key {
	if c.GetKeys != nil {
		return c.GetKeys(args)
	}
	var out []Key
	for _, s := range c.Keys {
		if s.Unknown || s.Spec&SpecNotKey != 0 {
			continue
		}
		ks, ok := s.find(args)
		if !ok {
			return nil
		}
		out = append(out, ks...)
	}
	return out
}

func (s KeySpec) find(args [][]byte) ([]Key, bool) {
	argc := len(args)
	first := 0
	if s.Keyword == "" {
		first = s.Index
	} else {
		start, end := s.StartFrom, argc-1
		if start <= 0 {
			start, end = argc+s.StartFrom, 1
		}
		for i := start; i != end; {
			if i >= argc || i < 1 {
				break
			}
			if strings.EqualFold(string(args[i]), s.Keyword) {
				first = i + 1
				break
			}
			if start <= end {
				i++
			} else {
				i--
			}
		}
		if first == 0 {
			return nil, true
		}
	}
	var last, step int
	if !s.KeyNum {
		step = s.Step
		switch {
		case s.LastKey >= 0:
			last = first + s.LastKey
		case s.Limit == 0:
			last = argc + s.LastKey
		default:
			last = first + ((argc-first)/s.Limit + s.LastKey)
		}
	} else {
		step = s.Step
		if first+s.KeyNumIdx >= argc {
			return nil, false
		}
		n, err := strconv.Atoi(string(args[first+s.KeyNumIdx]))
		if err != nil || n < 0 {
			return nil, false
		}
		first += s.FirstKey
		last = first + n - 1
	}
	if last >= argc || last < first || first >= argc {
		return nil, false
	}
	if step < 1 {
		step = 1
	}
	var out []Key
	for i := first; i <= last; i += step {
		out = append(out, Key{Pos: i, Flags: s.Flags, Spec: s.Spec})
	}
	return out, true
}

// Table is the commands an ACL knows, with their subcommands.
type Table struct {
	top    []*Command
	all    []*Command // by id: each top-level command, then its subcommands
	byName map[string]*Command
}

// NewTable makes a table of cmds (and their subcommands).
func NewTable(cmds []*Command) *Table {
	t := &Table{byName: map[string]*Command{}}
	for _, c := range cmds {
		t.add(c, nil)
	}
	return t
}

func (t *Table) add(c *Command, parent *Command) {
	c.id, c.parent = len(t.all), parent
	t.all = append(t.all, c)
	t.byName[c.Name] = c
	if parent == nil {
		t.top = append(t.top, c)
	}
	for _, s := range c.Subcommands {
		t.add(s, c)
	}
}

// Redis70 returns Redis 7.0's command table (the JSON files of its
// src/commands, with the key finding of its getkeys procedures where key
// specs are not enough), fresh: the caller may add or change commands
// before making a Table of them.
func Redis70() []*Command {
	cmds := redis70()
	for _, c := range cmds {
		switch c.Name {
		case "set":
			c.GetKeys = setKeys
		case "bitfield":
			c.GetKeys = bitfieldKeys
		case "sort":
			c.GetKeys = sortKeys
		case "migrate":
			c.GetKeys = migrateKeys
		}
		if ch := channelSpecs[c.Name]; ch != nil {
			c.Channels = ch
		}
	}
	return cmds
}

// Lookup finds a command by name (case-insensitive; "config|get" for a
// subcommand), nil if the table has none.
func (t *Table) Lookup(name string) *Command { return t.byName[strings.ToLower(name)] }

// Resolve finds the command args run: a container's subcommand by
// args[1]. A container given a subcommand the table does not know is the
// container itself (the command reports the unknown subcommand).
func (t *Table) Resolve(args [][]byte) *Command {
	if len(args) == 0 {
		return nil
	}
	c := t.Lookup(string(args[0]))
	if c == nil || len(c.Subcommands) == 0 || len(args) < 2 {
		return c
	}
	if s := t.byName[c.Name+"|"+strings.ToLower(string(args[1]))]; s != nil {
		return s
	}
	return c
}

// Category lists the full names of the commands and subcommands in cat,
// in table order.
func (t *Table) Category(cat Category) []string {
	var out []string
	for _, c := range t.all {
		if c.Categories&cat != 0 {
			out = append(out, c.Name)
		}
	}
	return out
}

// setKeys is SET's: read and write with GET, write only without
// (Redis's setGetKeys).
func setKeys(args [][]byte) []Key {
	if len(args) < 2 {
		return nil
	}
	for _, a := range args[min(3, len(args)):] {
		if strings.EqualFold(string(a), "get") {
			return []Key{{Pos: 1, Flags: KeyRead | KeyWrite, Spec: SpecRW | SpecAccess | SpecUpdate}}
		}
	}
	return []Key{{Pos: 1, Flags: KeyWrite, Spec: SpecOW | SpecUpdate}}
}

// bitfieldKeys is BITFIELD's: read only with GET operations only.
func bitfieldKeys(args [][]byte) []Key {
	if len(args) < 2 {
		return nil
	}
	readonly := true
	for i := 2; i < len(args); i++ {
		remaining := len(args) - i - 1
		switch strings.ToLower(string(args[i])) {
		case "get":
			if remaining >= 2 {
				i += 2
			}
		case "set", "incrby":
			if remaining >= 3 {
				i += 3
			}
			readonly = false
		case "overflow":
			if remaining >= 1 {
				i++
			}
			readonly = false
		default:
			// A syntax error the command reports; take it as a write.
			readonly = false
		}
	}
	if readonly {
		return []Key{{Pos: 1, Flags: KeyRead, Spec: SpecRO | SpecAccess}}
	}
	return []Key{{Pos: 1, Flags: KeyRead | KeyWrite, Spec: SpecRW | SpecAccess | SpecUpdate}}
}

// sortKeys is SORT's: the sorted key, read, and a STORE destination,
// written (Redis's sortGetKeys, which skips the arguments of LIMIT, GET
// and BY).
func sortKeys(args [][]byte) []Key {
	if len(args) < 2 {
		return nil
	}
	out := []Key{{Pos: 1, Flags: KeyRead, Spec: SpecRO | SpecAccess}}
	skip := map[string]int{"limit": 2, "get": 1, "by": 1}
	for i := 2; i < len(args); i++ {
		a := strings.ToLower(string(args[i]))
		if n, ok := skip[a]; ok {
			i += n
			continue
		}
		if a == "store" && i+1 < len(args) {
			// Only the last STORE counts, as in Redis.
			out = append(out[:1], Key{Pos: i + 1, Flags: KeyWrite, Spec: SpecOW | SpecUpdate})
			i++
		}
	}
	return out
}

// migrateKeys is MIGRATE's: the key argument, or with an empty one the
// keys after KEYS (Redis's migrateGetKeys, which skips AUTH's and
// AUTH2's arguments); read and written (deleted).
func migrateKeys(args [][]byte) []Key {
	first, num := 3, 1
	if len(args) > 6 {
	scan:
		for i := 6; i < len(args); i++ {
			switch strings.ToLower(string(args[i])) {
			case "keys":
				if len(args[3]) > 0 {
					num = 0 // a syntax error MIGRATE reports
				} else {
					first, num = i+1, len(args)-i-1
				}
				break scan
			case "auth":
				i++
			case "auth2":
				i += 2
			}
		}
	}
	var out []Key
	for i := first; i < first+num && i < len(args); i++ {
		out = append(out, Key{Pos: i, Flags: KeyRead | KeyWrite, Spec: SpecRW | SpecAccess | SpecDelete})
	}
	return out
}

// channelSpecs are the commands with channels (Redis's
// commands_with_channels): only publishing and subscribing are checked.
var channelSpecs = map[string]func([][]byte) []Channel{
	"subscribe":  channelsFrom(1, -1, false),
	"ssubscribe": channelsFrom(1, -1, false),
	"psubscribe": channelsFrom(1, -1, true),
	"publish":    channelsFrom(1, 1, false),
	"spublish":   channelsFrom(1, 1, false),
}

func channelsFrom(start, count int, pattern bool) func([][]byte) []Channel {
	return func(args [][]byte) []Channel {
		end := len(args)
		if count >= 0 && start+count < end {
			end = start + count
		}
		var out []Channel
		for i := start; i < end; i++ {
			out = append(out, Channel{Pos: i, Pattern: pattern})
		}
		return out
	}
}
