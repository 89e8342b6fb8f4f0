package array

import (
	"container/list"
	"sync"

	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// DefaultMetaCache is how many keys the metadata cache remembers by
// default (see WithMetaCache): some 200 bytes each with a short key.
const DefaultMetaCache = 1 << 18

// WithMetaCache sets how many keys the metadata cache remembers (0: no
// cache). The cache spares a hybrid store its read of the value it
// replaces (see metaCache).
func WithMetaCache(n int) Option { return func(o *options) { o.metaCache = n } }

// metaCache remembers, for the keys this array stored, deleted or read
// last, which mechanism holds their value and its split-0 header, or that
// they have none: KVMD's metadata cache (its future work). A store that
// finds its key here need not read the primary to learn what it replaces,
// the read that makes hybrid mode cost more than standalone. It also keeps
// the first headCap bytes of the values it saw whole (stored, or read
// whole), so that a read of a value's first bytes (the keyspace's header:
// the state every SET reads for the key counts) needs no device either.
//
// It is exact because this array is the devices' only writer (a second
// process cannot open them: the devices' locks refuse it) and every change
// of a key's value is made under the key's lock by a store or a delete,
// which update the entry: a store or delete that fails, and every repair,
// forget it instead, as what the devices then hold is not known without a
// read. Values a store needs whole (Packing's previous member, to update
// its parity) are never taken from here: only the header is kept.
//
// Complete. When the array was created, or opened, on devices that held
// no value (completeIfEmpty), every key that has a value since was given it
// by this array, so it has an entry: a key the cache does not know has no
// value, and neither a store nor a read of a new key reads the devices. A
// forgotten key then keeps its entry, marked unknown (it may have a value:
// read it). The first entry the bound evicts ends completeness for the
// rest of the process.
//
// Bounded: the least recently used entry goes when it is full.
type metaCache struct {
	mu       sync.Mutex
	max      int
	complete bool
	lru      list.List // of *metaEntry, most recent at the front
	byKey    map[string]*list.Element
}

// headCap is how many of a value's first bytes the cache keeps: the
// keyspace's header (a tag and an expiry) fits.
const headCap = 16

// metaEntry is what the cache knows of one key.
type metaEntry struct {
	key   string
	known bool                // false: forgotten while complete (read it)
	m     mechanism.Mechanism // nil: the key has no value
	hdr   format.Header       // of split 0
	headN int                 // -1: the head is not known
	head  [headCap]byte       // the value's first min(ObjectLen, headCap) bytes
}

func newMetaCache(max int) *metaCache {
	return &metaCache{max: max, byKey: map[string]*list.Element{}}
}

// setComplete records that every key with a value has an entry from now
// on (see metaCache): the array holds no value yet.
func (c *metaCache) setComplete() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.complete = len(c.byKey) == 0
}

// get returns what the cache knows of key: ok false when it must be read.
// A key it has no entry for has no value (m nil) while it is complete.
func (c *metaCache) get(key []byte) (metaEntry, bool) {
	if c == nil {
		return metaEntry{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[string(key)]
	if !ok {
		return metaEntry{headN: -1}, c.complete
	}
	c.lru.MoveToFront(e)
	ent := *e.Value.(*metaEntry)
	return ent, ent.known
}

// put records that key's value is held by m with split-0 header h (m nil:
// the key has no value), and, when value is not nil, that it is value
// (or starts with it: at least headCap bytes of it). h's Fields are not
// kept: they are the mechanism's, which reads its own geometry when they
// are absent.
func (c *metaCache) put(key []byte, m mechanism.Mechanism, h format.Header, value []byte) {
	if c == nil {
		return
	}
	h.Fields = nil
	c.mu.Lock()
	defer c.mu.Unlock()
	ent := c.entry(key)
	ent.known, ent.m, ent.hdr, ent.headN = true, m, h, -1
	if value != nil {
		ent.headN = copy(ent.head[:], value)
	}
}

// entry returns key's entry, made most recent, adding it (and evicting the
// least recent past the bound) if it has none. Under mu.
func (c *metaCache) entry(key []byte) *metaEntry {
	if e, ok := c.byKey[string(key)]; ok {
		c.lru.MoveToFront(e)
		return e.Value.(*metaEntry)
	}
	ent := &metaEntry{key: string(key), headN: -1}
	c.byKey[ent.key] = c.lru.PushFront(ent)
	if c.lru.Len() > c.max {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.byKey, old.Value.(*metaEntry).key)
		c.complete = false
	}
	return ent
}

// noteHead records value, read whole, as the head of key's value when the
// entry is of that value (version v).
func (c *metaCache) noteHead(key []byte, v uint64, value []byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[string(key)]; ok {
		ent := e.Value.(*metaEntry)
		if ent.known && ent.m != nil && ent.hdr.Version == v && uint64(len(value)) == ent.hdr.ObjectLen {
			ent.headN = copy(ent.head[:], value)
		}
	}
}

// headRanges returns the ranges rs of e's value and its length from its
// head, when e knows a value and its head covers every range.
func (e *metaEntry) headRanges(rs []Range) ([][]byte, int64, bool) {
	if e.m == nil || e.headN < 0 {
		return nil, 0, false
	}
	total := int64(e.hdr.ObjectLen)
	for _, r := range rs {
		lo := min(r.Off, total)
		if lo+min(r.Len, total-lo) > int64(e.headN) {
			return nil, 0, false
		}
	}
	// Every range ends within the head: cut from it as from the value.
	return sliceRanges(e.head[:e.headN], rs), total, true
}

// forget drops what the cache knows of key. While the cache is complete
// the key keeps an entry, unknown, even one it had none for: a store of a
// new key that failed may have left its value.
func (c *metaCache) forget(key []byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.complete {
		ent := c.entry(key)
		*ent = metaEntry{key: ent.key, headN: -1}
		return
	}
	if e, ok := c.byKey[string(key)]; ok {
		c.lru.Remove(e)
		delete(c.byKey, string(key))
	}
}
