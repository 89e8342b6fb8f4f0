package array

import (
	"strings"
	"sync"

	"github.com/google/btree"
)

// tinyIndex is the sorted set of the keys that buckets hold, kept in
// memory for listing only: a GET or a store never uses it (they compute
// the bucket from the key). Without it every page of KeysFrom would read
// every bucket. It is built on the first listing and kept current by
// every bucket write (writeBucket); a bucket write that fails leaves the
// bucket's contents unknown, so it drops the index, and the next listing
// builds it again. Cost: about 80 bytes of memory per tiny key once a
// listing has run.
type tinyIndex struct {
	mu    sync.Mutex
	tree  *btree.BTreeG[string] // nil: not built and not building
	ready bool                  // the build read every bucket
	gen   uint64                // bumped by every drop
}

func lessString(a, b string) bool { return a < b }

// start begins a build: from now on writers keep the tree current.
func (x *tinyIndex) start() uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.tree == nil {
		x.tree = btree.NewG(32, lessString)
	}
	return x.gen
}

// finish marks the index exact, unless it was dropped since start.
func (x *tinyIndex) finish(gen uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.gen == gen && x.tree != nil {
		x.ready = true
	}
}

func (x *tinyIndex) drop() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tree, x.ready = nil, false
	x.gen++
}

func (x *tinyIndex) addAll(es []tinyEntry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.tree == nil {
		return
	}
	for _, e := range es {
		x.tree.ReplaceOrInsert(string(e.key))
	}
}

// note records a bucket write's outcome for key: present or not, or, if
// the write failed (err), that the index can no longer be trusted.
func (x *tinyIndex) note(key []byte, present bool, err error) {
	if err != nil {
		x.drop()
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case x.tree == nil:
	case present:
		x.tree.ReplaceOrInsert(string(key))
	default:
		x.tree.Delete(string(key))
	}
}

// list returns at most count (0: all) keys with prefix past after, in
// order; ok false when the index is not ready.
func (x *tinyIndex) list(prefix, after []byte, count int) (keys [][]byte, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.ready {
		return nil, false
	}
	from := string(prefix)
	if after != nil && string(after) >= from {
		from = string(after)
	}
	x.tree.AscendGreaterOrEqual(from, func(k string) bool {
		if !strings.HasPrefix(k, string(prefix)) {
			return false
		}
		if after == nil || k > string(after) {
			keys = append(keys, []byte(k))
		}
		return count == 0 || len(keys) < count
	})
	return keys, true
}
