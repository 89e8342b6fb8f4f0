package array

import (
	"container/list"
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/fastcache"

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

// WithValueCache lets the metadata cache keep, within bytes in all (0, the
// default: none; at least MinValueCache otherwise), the whole values of up
// to maxValue bytes (at most MaxValueCached) it sees, so that a read of a
// recent value needs no device (see metaCache). It needs the metadata
// cache (WithMetaCache).
func WithValueCache(bytes int64, maxValue int) Option {
	return func(o *options) { o.valueCache, o.valueMax = max(0, bytes), max(0, maxValue) }
}

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
//
// Values. With a value cache (WithValueCache), an entry also keeps its
// whole value when it is small enough, a copy of what was stored or read
// whole and verified; Retrieve returns a copy of it without reading a
// device. It is as exact as the rest of the entry, by the same rule (the
// entry's every update replaces or drops it), and each value kept is
// stamped with the version of the entry that kept it, and returned only
// to that entry. What it gives up: such a read neither checks nor repairs
// the devices' pieces (scrub does), as no read of a value that is not there
// can. The values live outside the Go heap, in a fastcache of their own
// bound (a cache that counted in the heap would grow the garbage
// collector's goal by a multiple of itself): it drops values as it fills
// (its buckets are rings), and an entry whose value it dropped is read
// from the devices again.
type metaCache struct {
	mu       sync.Mutex
	max      int
	complete bool
	lru      list.List // of *metaEntry, most recent at the front
	byKey    map[string]*list.Element

	values   *fastcache.Cache // nil: no value cache; under mu
	valueMax int              // the largest value kept whole
	stamp    []byte           // a value being kept, stamped; under mu
	// hits and misses count the reads of values answered from the
	// value cache, and those read from the devices instead.
	hits, misses atomic.Int64
}

// ValueCacheStats describes an array's value cache (WithValueCache).
type ValueCacheStats struct {
	Limit   int64 // the bytes it may hold; 0: no value cache
	Bytes   int64 // the bytes it holds, its stamps and keys included
	Entries int64 // values it holds (some superseded, until overwritten)
	Hits    int64 // reads of a key's value answered from it
	Misses  int64 // reads of a key's value that went to the devices
}

// ValueCacheStats returns what the value cache holds and how reads fared.
func (a *Array) ValueCacheStats() ValueCacheStats {
	c := a.meta
	if c == nil || c.values == nil {
		return ValueCacheStats{}
	}
	var fs fastcache.Stats
	c.mu.Lock()
	c.values.UpdateStats(&fs)
	c.mu.Unlock()
	return ValueCacheStats{Limit: int64(fs.MaxBytesSize), Bytes: int64(fs.BytesSize), Entries: int64(fs.EntriesCount),
		Hits: c.hits.Load(), Misses: c.misses.Load()}
}

// missed counts a read of a value from the devices, when there is a value
// cache.
func (c *metaCache) missed() {
	if c != nil && c.values != nil {
		c.misses.Add(1)
	}
}

// MinValueCache is the smallest value cache: fastcache's, 512 buckets of
// one 64 KiB chunk.
const MinValueCache = 32 << 20

// MaxValueCached is the largest value the value cache keeps: fastcache
// keeps entries (key, value and stamp) of up to 64 KiB.
const MaxValueCached = 32 << 10

// stampLen is the length of the version stamp before each value kept.
const stampLen = 8

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
	// cached: the value cache was given the whole value (it may have
	// dropped it since).
	cached bool
}

func newMetaCache(keys int, valueBytes int64, valueMax int) *metaCache {
	c := &metaCache{max: keys, byKey: map[string]*list.Element{}}
	if valueBytes > 0 && valueMax > 0 {
		c.values = fastcache.New(int(max(valueBytes, MinValueCache)))
		c.valueMax = min(valueMax, MaxValueCached)
	}
	return c
}

// close gives back the value cache's memory.
func (c *metaCache) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.values != nil {
		c.values.Reset()
		for _, e := range c.byKey {
			e.Value.(*metaEntry).cached = false
		}
	}
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
	e, _, ok := c.lookup(key, false)
	return e, ok
}

// lookup is get, and, when withValue, a copy of key's whole value if the
// value cache has it for key's entry (nil otherwise): one turn of the
// lock for a cached read.
func (c *metaCache) lookup(key []byte, withValue bool) (metaEntry, []byte, bool) {
	if c == nil {
		return metaEntry{}, nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[string(key)]
	if !ok {
		return metaEntry{headN: -1}, nil, c.complete
	}
	c.lru.MoveToFront(e)
	ent := e.Value.(*metaEntry)
	var v []byte
	if withValue && ent.known && ent.m != nil && ent.cached && c.values != nil {
		b, ok := c.values.HasGet(nil, key)
		if ok && len(b) >= stampLen && binary.LittleEndian.Uint64(b) == ent.hdr.Version && uint64(len(b)-stampLen) == ent.hdr.ObjectLen {
			v = b[stampLen:]
			c.hits.Add(1)
		} else {
			ent.cached = false // dropped (or never taken): read it again
		}
	}
	return *ent, v, ent.known
}

// put records that key's value is held by m with split-0 header h (m nil:
// the key has no value), and, when value is not nil, that it is value
// (kept whole, copied, when the value cache takes it). h's Fields are not
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
	c.dropValue(ent)
	ent.known, ent.m, ent.hdr, ent.headN = true, m, h, -1
	if value != nil {
		ent.headN = copy(ent.head[:], value)
		c.keepValue(ent, value)
	}
}

// keepValue gives value, stamped with ent's version, to the value cache as
// ent's whole value, when it keeps values of its size. Under mu.
func (c *metaCache) keepValue(ent *metaEntry, value []byte) {
	if c.values == nil || len(value) > c.valueMax || uint64(len(value)) != ent.hdr.ObjectLen {
		return
	}
	c.stamp = binary.LittleEndian.AppendUint64(c.stamp[:0], ent.hdr.Version)
	c.stamp = append(c.stamp, value...)
	c.values.Set([]byte(ent.key), c.stamp) // copied
	ent.cached = true
}

// dropValue drops ent's whole value from the value cache. Under mu.
func (c *metaCache) dropValue(ent *metaEntry) {
	if !ent.cached {
		return
	}
	c.values.Del([]byte(ent.key))
	ent.cached = false
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
		c.dropValue(old.Value.(*metaEntry))
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
			if !ent.cached {
				c.keepValue(ent, value)
			}
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
		c.dropValue(ent)
		*ent = metaEntry{key: ent.key, headN: -1}
		return
	}
	if e, ok := c.byKey[string(key)]; ok {
		c.dropValue(e.Value.(*metaEntry))
		c.lru.Remove(e)
		delete(c.byKey, string(key))
	}
}
