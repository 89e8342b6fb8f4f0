package server

import (
	"bytes"
	"slices"
	"strings"

	"github.com/kvarray/kvarray/keyspace"
	"github.com/kvarray/kvarray/pubsub"
)

// Keyspace notifications (notify-keyspace-events), as Redis 7 publishes
// them: each write command names its events here or where it writes, and
// notify publishes them (pubsub.Hub.Notify) once the write is durable: at
// once outside a transaction, after the commit inside EXEC (a transaction
// that fails to commit publishes nothing).

// event is one notification a command made.
type event struct {
	class pubsub.Events
	name  string
	db    int
	key   []byte
}

// notifyConf is the configured classes.
func (s *Server) notifyConf() pubsub.Events { return pubsub.Events(s.cfg.notify.Load()) }

// notifying reports whether class is configured: callers skip work (a
// read for the "new" event) when it is not.
func (c *call) notifying(class pubsub.Events) bool { return c.s.notifyConf()&class != 0 }

// notify publishes event name of class on key of database db.
func (c *call) notify(class pubsub.Events, name string, db int, key []byte) {
	if !c.notifying(class) {
		return
	}
	if c.tx != nil {
		c.tx.events = append(c.tx.events, event{class, name, db, append([]byte(nil), key...)})
		return
	}
	c.s.hub.Notify(c.s.notifyConf(), class, name, db, key)
}

// publishEvents publishes what a committed transaction's commands noted.
func (s *Server) publishEvents(evs []event) {
	for _, e := range evs {
		s.hub.Notify(s.notifyConf(), e.class, e.name, e.db, e.key)
	}
}

// stringEvents are the events of the commands that store a string through
// update: the name Redis gives each.
var stringEvents = map[string]string{
	"set": "set", "setnx": "set", "setex": "set", "psetex": "set", "getset": "set", "kvarray.set": "set",
	"incr": "incrby", "decr": "incrby", "incrby": "incrby", "decrby": "incrby", "incrbyfloat": "incrbyfloat",
	"append": "append", "setrange": "setrange",
	"bitop": "set", "pfadd": "pfadd", "pfmerge": "pfadd",
}

// notifyStore publishes the events of a command's store of key (update),
// where found tells whether the key existed and next is what was stored.
func (c *call) notifyStore(key []byte, found bool, next value) {
	db := c.cl.db
	if !found {
		c.notify(pubsub.New, "new", db, key)
	}
	switch name := c.e.name; name {
	case "getex":
		if next.at == 0 {
			c.notify(pubsub.Generic, "persist", db, key)
		} else {
			c.notify(pubsub.Generic, "expire", db, key)
		}
	case "expire", "pexpire", "expireat", "pexpireat":
		if keyspace.Expired(next.at, keyspace.NowMs()) {
			c.notify(pubsub.Generic, "del", db, key) // put deleted it
		} else {
			c.notify(pubsub.Generic, "expire", db, key)
		}
	case "persist":
		c.notify(pubsub.Generic, "persist", db, key)
	default:
		ev, ok := stringEvents[name]
		if !ok {
			return
		}
		c.notify(pubsub.String, ev, db, key)
		if ev == "set" && c.setsExpiry() {
			c.notify(pubsub.Generic, "expire", db, key)
		}
	}
}

// setsExpiry reports whether a SET-family command gave the key an
// expiry (Redis's "expire" event after "set"; KEEPTTL keeps one, which
// is no event).
func (c *call) setsExpiry() bool {
	switch c.e.name {
	case "setex", "psetex":
		return true
	case "set":
		for _, a := range c.args[3:] {
			switch upper(a) {
			case "EX", "PX", "EXAT", "PXAT":
				return true
			}
		}
	}
	return false
}

// collEvents are the events of the collection commands, by command: the
// name Redis gives each (the class is the collection's type, typeEvents).
// A command that changes two collections (SMOVE) names its events where
// it writes.
var collEvents = map[string]string{
	"hset": "hset", "hsetnx": "hset", "hmset": "hset", "hdel": "hdel",
	"hincrby": "hincrby", "hincrbyfloat": "hincrbyfloat",
	"sadd": "sadd", "srem": "srem", "spop": "spop",
	"sinterstore": "sinterstore", "sunionstore": "sunionstore", "sdiffstore": "sdiffstore",
}

// typeEvents is the notification class of each collection type.
var typeEvents = map[byte]pubsub.Events{keyspace.TypeHash: pubsub.Hash, keyspace.TypeSet: pubsub.Set}

// notifyColl publishes what ops, written by a collection command, did
// to key (of type typ, existed telling whether it was there before), as
// Redis orders it: "new" when the key was created, the event, then "del"
// when the command removed the collection's last element. A STORE form
// that stored nothing only deletes (and says "del" if there was a key).
// ops that do not write key changed nothing of it: no event.
func (c *call) notifyColl(typ byte, event string, key []byte, existed bool, ops []keyspace.Op) {
	class := typeEvents[typ]
	if event == "" || !c.notifying(class|pubsub.Generic|pubsub.New) {
		return
	}
	phys := c.s.ks.Phys(c.cl.db)
	i := slices.IndexFunc(ops, func(op keyspace.Op) bool { return op.Phys == phys && bytes.Equal(op.Key, key) })
	if i < 0 {
		return
	}
	db, del := c.cl.db, ops[i].Del
	if !existed && !del {
		c.notify(pubsub.New, "new", db, key)
	}
	if !del || !strings.HasSuffix(event, "store") {
		c.notify(class, event, db, key)
	}
	if del && existed {
		c.notify(pubsub.Generic, "del", db, key)
	}
}
