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
// the read that makes hybrid mode cost more than standalone.
//
// It is exact because this array is the devices' only writer (a second
// process cannot open them: the devices' locks refuse it) and every change
// of a key's value is made under the key's lock by a store or a delete,
// which update the entry: a store or delete that fails, and every repair,
// forget it instead, as what the devices then hold is not known without a
// read. Values a store needs whole (Packing's previous member, to update
// its parity) are never taken from here: only the header is kept.
//
// Bounded: the least recently used entry goes when it is full.
type metaCache struct {
	mu    sync.Mutex
	max   int
	lru   list.List // of *metaEntry, most recent at the front
	byKey map[string]*list.Element
}

// metaEntry is what the cache knows of one key.
type metaEntry struct {
	key string
	m   mechanism.Mechanism // nil: the key has no value
	hdr format.Header       // of split 0
}

func newMetaCache(max int) *metaCache {
	return &metaCache{max: max, byKey: map[string]*list.Element{}}
}

// get returns what the cache knows of key.
func (c *metaCache) get(key []byte) (metaEntry, bool) {
	if c == nil {
		return metaEntry{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[string(key)]
	if !ok {
		return metaEntry{}, false
	}
	c.lru.MoveToFront(e)
	return *e.Value.(*metaEntry), true
}

// put records that key's value is held by m with split-0 header h (m nil:
// the key has no value). h's Fields are not kept: they are the
// mechanism's, which reads its own geometry when they are absent.
func (c *metaCache) put(key []byte, m mechanism.Mechanism, h format.Header) {
	if c == nil {
		return
	}
	h.Fields = nil
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[string(key)]; ok {
		ent := e.Value.(*metaEntry)
		ent.m, ent.hdr = m, h
		c.lru.MoveToFront(e)
		return
	}
	ent := &metaEntry{key: string(key), m: m, hdr: h}
	c.byKey[ent.key] = c.lru.PushFront(ent)
	if c.lru.Len() > c.max {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.byKey, old.Value.(*metaEntry).key)
	}
}

// forget drops what the cache knows of key.
func (c *metaCache) forget(key []byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[string(key)]; ok {
		c.lru.Remove(e)
		delete(c.byKey, string(key))
	}
}
