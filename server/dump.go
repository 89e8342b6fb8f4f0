package server

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/kvarray/kvarray/collection"
	"github.com/kvarray/kvarray/internal/rdb"
	"github.com/kvarray/kvarray/keyspace"
	"github.com/kvarray/kvarray/pubsub"
)

// DUMP and RESTORE in Redis's own serialization format (package rdb), so
// that values move between kvarray and Redis both ways. The format is
// package rdb's; turning a value into an rdb.Object and back is package
// collection's; here are the arguments and the replies.

func init() { commands = append(commands, dumpCommands()...) }

func dumpCommands() []*command {
	dump := rcmd("dump", 2, "generic", "2.6.0", "Returns the value of a key in Redis's serialization format (RDB version 9), nil if it does not exist.",
		cmdDump, keyArg("key"))
	dump.flags = []string{"readonly"}
	dump.acl = []string{"keyspace", "read", "slow"}
	dump.complexity = "O(N) where N is the number of elements of the value"
	restore := wcmd("restore", -4, "generic", "2.6.0",
		"Creates a key from a serialized value (DUMP's, of kvarray or of Redis 6.0 to 7.4), with REPLACE and ABSTTL; IDLETIME and FREQ are accepted and ignored (kvarray keeps no LRU or LFU).",
		cmdRestore, keyArg("key"), intArg("ttl"), strArg("serialized-value"), optional(token("REPLACE")), optional(token("ABSTTL")),
		optional(tokenArg("IDLETIME", intArg("seconds"))), optional(tokenArg("FREQ", intArg("frequency"))))
	restore.acl = []string{"keyspace", "write", "slow", "dangerous"}
	restore.complexity = "O(N) where N is the number of elements of the value"
	return []*command{dump, restore}
}

// cmdDump: DUMP key. A collection is read whole under its key's lock.
func cmdDump(c *call) {
	v, found, unlock, ok := c.lockedGet(c.args[1])
	if !ok {
		return
	}
	defer unlock()
	if !found {
		c.w.WriteNull()
		return
	}
	o, err := collection.ToObject(c.ctx, c.source(), v.ks(), c.s.limits.get(), c.s.ks.MaxElement())
	if err != nil {
		c.fail(err)
		return
	}
	c.w.WriteBulk(rdb.Dump(o))
}

// lockedGet takes key's lock and reads it, of any type; ok false: it
// replied with the error. The caller unlocks.
func (c *call) lockedGet(key []byte) (v value, found bool, unlock func(), ok bool) {
	_, unlock, ok = c.lockUnique([][]byte{key})
	if !ok {
		return value{}, false, nil, false
	}
	var err error
	if v, found, err = c.getAny(c.cl.db, key); err != nil {
		unlock()
		c.fail(err)
		return value{}, false, nil, false
	}
	return v, found, unlock, true
}

// lockUnique checks keys, sorts them, drops repeats and takes their
// locks; ok false: it replied with the error. The caller unlocks.
func (c *call) lockUnique(keys [][]byte) (sorted [][]byte, unlock func(), ok bool) {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, bytes.Compare)
	keys = slices.CompactFunc(keys, bytes.Equal)
	if !c.checkKeys(keys...) {
		return nil, nil, false
	}
	unlock, err := c.lockKeys(c.cl.db, keys...)
	if err != nil {
		c.fail(err)
		return nil, nil, false
	}
	return keys, unlock, true
}

// cmdRestore: RESTORE key ttl serialized-value [REPLACE] [ABSTTL]
// [IDLETIME seconds] [FREQ frequency], checked in Redis's order
// (options, existing key, TTL, payload).
func cmdRestore(c *call) {
	key := c.args[1]
	var replace, absttl bool
	idle, freq := false, false
	for i := 4; i < len(c.args); i++ {
		more := i+1 < len(c.args)
		switch a := upper(c.args[i]); {
		case a == "REPLACE":
			replace = true
		case a == "ABSTTL":
			absttl = true
		case a == "IDLETIME" && more && !freq, a == "FREQ" && more && !idle:
			i++
			n, err := parseInt(c.args[i])
			if err != nil {
				c.error(errNotInt)
				return
			}
			if a == "IDLETIME" {
				idle = true
				if n < 0 {
					c.error("ERR Invalid IDLETIME value, must be >= 0")
					return
				}
			} else {
				freq = true
				if n < 0 || n > 255 {
					c.error("ERR Invalid FREQ value, must be >= 0 and <= 255")
					return
				}
			}
		default:
			c.syntaxError()
			return
		}
	}
	_, exists, unlock, ok := c.lockedGet(key)
	if !ok {
		return
	}
	defer unlock()
	if exists && !replace {
		c.error("BUSYKEY Target key name already exists.")
		return
	}
	ttl, err := parseInt(c.args[2])
	if err != nil {
		c.error(errNotInt)
		return
	}
	if ttl < 0 {
		c.error("ERR Invalid TTL value, must be >= 0")
		return
	}
	o, err := rdb.ParseDump(c.args[3])
	switch {
	case errors.Is(err, rdb.ErrChecksum), errors.Is(err, rdb.ErrVersion):
		c.error("ERR DUMP payload version or checksum are wrong")
		return
	case errors.Is(err, rdb.ErrUnsupported):
		c.error(fmt.Sprintf("ERR Bad data format: %v by kvarray", err))
		return
	case err != nil:
		c.error("ERR Bad data format")
		return
	}
	at := ttl
	if ttl != 0 && !absttl {
		at += keyspace.NowMs()
	}
	if keyspace.Expired(at, keyspace.NowMs()) {
		// Redis: a restore already expired deletes what REPLACE replaces.
		if exists {
			if _, err := c.remove(c.cl.db, key); err != nil {
				c.fail(err)
				return
			}
			c.notify(pubsub.Generic, "del", c.cl.db, key)
		}
		c.ok()
		return
	}
	v, ops, err := collection.FromObject(c.ctx, o, at, c.s.limits.get(), c.s.ks.MaxElement())
	if errors.Is(err, collection.ErrBadValue) {
		c.error("ERR Bad data format")
		return
	}
	if err != nil {
		c.fail(err)
		return
	}
	if o.Kind == rdb.String {
		err = c.put(c.cl.db, key, value{v: v.V, at: v.At})
	} else {
		// The elements are under a version nothing holds until the value
		// is written: written first, they need no intent record, which a
		// large collection's would outgrow (commitPhased).
		c.phased = v.Ver != 0
		err = c.writeOps(append(ops, c.s.ks.Op(c.cl.db, key, v, false)), key)
		c.phased = false
	}
	if err != nil {
		c.fail(err)
		return
	}
	c.notify(pubsub.Generic, "restore", c.cl.db, key)
	c.ok()
}
