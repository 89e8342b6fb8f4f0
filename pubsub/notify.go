package pubsub

import (
	"strconv"
	"strings"
)

// Events is a set of keyspace notification classes, Redis's
// notify-keyspace-events flags.
type Events uint32

// The classes, with Redis's letters.
const (
	Keyspace Events = 1 << iota // K: __keyspace@<db>__:<key> <event>
	Keyevent                    // E: __keyevent@<db>__:<event> <key>
	Generic                     // g: DEL, EXPIRE, RENAME, ...
	String                      // $
	List                        // l
	Set                         // s
	Hash                        // h
	ZSet                        // z
	Expired                     // x: a key expired
	Evicted                     // e
	Stream                      // t
	KeyMiss                     // m: a read of a missing key (not in A)
	loaded                      // modules only
	Module                      // d
	New                         // n: a key added (not in A)
)

// All is the 'A' alias.
const All = Generic | String | List | Set | Hash | ZSet | Expired | Evicted | Stream | Module

var letters = []struct {
	c byte
	e Events
}{{'g', Generic}, {'$', String}, {'l', List}, {'s', Set}, {'h', Hash}, {'z', ZSet}, {'x', Expired},
	{'e', Evicted}, {'t', Stream}, {'d', Module}, {'n', New}}

// ParseEvents reads a notify-keyspace-events value; false for a letter
// Redis does not know.
func ParseEvents(s string) (Events, bool) {
	var e Events
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case 'A':
			e |= All
		case 'K':
			e |= Keyspace
		case 'E':
			e |= Keyevent
		case 'm':
			e |= KeyMiss
		default:
			found := false
			for _, l := range letters {
				if l.c == c {
					e |= l.e
					found = true
				}
			}
			if !found {
				return 0, false
			}
		}
	}
	return e, true
}

// String is the value CONFIG GET shows, in Redis's order.
func (e Events) String() string {
	var b strings.Builder
	if e&All == All {
		b.WriteByte('A') // and, as in Redis 7.0, n is not shown then
	} else {
		for _, l := range letters {
			if e&l.e != 0 {
				b.WriteByte(l.c)
			}
		}
	}
	if e&Keyspace != 0 {
		b.WriteByte('K')
	}
	if e&Keyevent != 0 {
		b.WriteByte('E')
	}
	if e&KeyMiss != 0 {
		b.WriteByte('m')
	}
	return b.String()
}

// Notify publishes event of class on key of database db as Redis does,
// on the channels conf (the configured classes) asks for: nothing unless
// conf has class, then __keyspace@db__:key with the event and/or
// __keyevent@db__:event with the key.
func (h *Hub) Notify(conf, class Events, event string, db int, key []byte) {
	if conf&class == 0 {
		return
	}
	if conf&Keyspace != 0 {
		ch := append([]byte("__keyspace@"+strconv.Itoa(db)+"__:"), key...)
		h.Publish(Channel, ch, []byte(event))
	}
	if conf&Keyevent != 0 {
		h.Publish(Channel, []byte("__keyevent@"+strconv.Itoa(db)+"__:"+event), key)
	}
}
