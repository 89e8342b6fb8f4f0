// Package merge is the ordered merge of ascending key streams that
// kvarray's listings and rebuild scans share: devices iterate in key
// order, and merging their streams gives each key once, with what every
// device said of it, while holding one entry per stream.
package merge

import (
	"bytes"
	"iter"
)

// Entry is one key of a stream, with whatever the stream attaches to it.
type Entry[T any] struct {
	Key []byte
	Val T
}

// Group is one key of the merge, with the entries of every stream that
// holds it, in stream order.
type Group[T any] struct {
	Key     []byte
	Entries []Entry[T]
}

// Sorted merges streams, each in ascending byte order of its keys with no
// key twice, into one ascending stream of distinct keys. It pulls from
// each stream only as far as the merge has gone, and stops them all when
// the consumer stops. Entries must not be modified by the streams once
// yielded (they are held until the merge passes them).
func Sorted[T any](streams []iter.Seq[Entry[T]]) iter.Seq[Group[T]] {
	return func(yield func(Group[T]) bool) {
		type head struct {
			next func() (Entry[T], bool)
			cur  Entry[T]
			ok   bool
		}
		heads := make([]*head, 0, len(streams))
		for _, s := range streams {
			h := &head{}
			var stop func()
			h.next, stop = iter.Pull(s)
			defer stop()
			h.cur, h.ok = h.next()
			heads = append(heads, h)
		}
		for {
			var low []byte
			found := false
			for _, h := range heads {
				if h.ok && (!found || bytes.Compare(h.cur.Key, low) < 0) {
					low, found = h.cur.Key, true
				}
			}
			if !found {
				return
			}
			g := Group[T]{Key: low}
			for _, h := range heads {
				if h.ok && bytes.Equal(h.cur.Key, low) {
					g.Entries = append(g.Entries, h.cur)
					h.cur, h.ok = h.next()
				}
			}
			if !yield(g) {
				return
			}
		}
	}
}
