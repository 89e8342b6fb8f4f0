package collection

import (
	"context"
	"fmt"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/internal/rdb"
	"github.com/kvarray/kvarray/keyspace"
)

// Moving whole values in and out as Redis's serialization format (DUMP,
// RESTORE, RDB import and export): a keyspace value, of any type, as an
// rdb.Object, and back.

// ToObject reads value v (a string or a collection, with all its
// elements) as an rdb.Object.
func ToObject(ctx context.Context, src Source, v keyspace.Value, lim Limits, maxElem int) (rdb.Object, error) {
	wrap := func(err error) error {
		return fmt.Errorf("collection: reading a value of type %d whole: %w", v.Type, err)
	}
	switch v.Type {
	case keyspace.TypeString:
		return rdb.Object{Kind: rdb.String, Str: v.V}, nil
	case keyspace.TypeHash, keyspace.TypeSet:
		var t *table
		if v.Type == keyspace.TypeHash {
			h, err := OpenHash(ctx, src, v, true, lim, maxElem)
			if err != nil {
				return rdb.Object{}, wrap(err)
			}
			t = &h.table
		} else {
			s, err := OpenSet(ctx, src, v, true, lim, maxElem)
			if err != nil {
				return rdb.Object{}, wrap(err)
			}
			t = &s.table
		}
		fs, err := t.All()
		if err != nil {
			return rdb.Object{}, wrap(err)
		}
		if v.Type == keyspace.TypeSet {
			o := rdb.Object{Kind: rdb.Set, Elems: make([][]byte, len(fs))}
			for i, f := range fs {
				o.Elems[i] = f.Name
			}
			return o, nil
		}
		o := rdb.Object{Kind: rdb.Hash, Fields: make([]rdb.Field, len(fs))}
		for i, f := range fs {
			o.Fields[i] = rdb.Field{Name: f.Name, Value: f.Value}
		}
		return o, nil
	case keyspace.TypeZSet:
		z, err := OpenZSet(ctx, src, v, true, lim, maxElem)
		if err != nil {
			return rdb.Object{}, wrap(err)
		}
		es, err := z.All()
		if err != nil {
			return rdb.Object{}, wrap(err)
		}
		o := rdb.Object{Kind: rdb.ZSet, Members: make([]rdb.Member, len(es))}
		for i, e := range es {
			o.Members[i] = rdb.Member{Member: e.Member, Score: e.Score}
		}
		return o, nil
	case keyspace.TypeList:
		l, err := OpenList(ctx, src, v, true, lim)
		if err != nil {
			return rdb.Object{}, wrap(err)
		}
		o := rdb.Object{Kind: rdb.List, Elems: make([][]byte, 0, l.Len())}
		err = l.Each(false, func(_ int64, e []byte) bool {
			o.Elems = append(o.Elems, e)
			return true
		})
		if err != nil {
			return rdb.Object{}, wrap(err)
		}
		return o, nil
	}
	return rdb.Object{}, fmt.Errorf("collection: value type %d: %w", v.Type, ErrBadValue)
}

// FromObject is the value of o, expiring at at, as a new collection
// would hold it after a command added o's elements in order (so its
// encoding follows lim as Redis's would), and the ops that store its
// elements under a version no other value holds: the caller writes them
// with the value (before it, or all at once). An empty collection is
// an error, as Redis's RESTORE makes it.
func FromObject(ctx context.Context, o rdb.Object, at int64, lim Limits, maxElem int) (keyspace.Value, []keyspace.Op, error) {
	if o.Kind != rdb.String && o.Len() == 0 {
		return keyspace.Value{}, nil, fmt.Errorf("collection: an empty %s: %w", o.Kind, ErrBadValue)
	}
	var src Source = noElements{} // a new version has none yet
	var c interface {
		Commit() (keyspace.Value, bool, bool, []keyspace.Op)
	}
	var err error
	switch o.Kind {
	case rdb.String:
		return keyspace.Value{V: o.Str, At: at, Type: keyspace.TypeString}, nil, nil
	case rdb.Hash:
		h, _ := OpenHash(ctx, src, keyspace.Value{}, false, lim, maxElem)
		for _, f := range o.Fields {
			if _, err = h.Set(f.Name, f.Value); err != nil {
				break
			}
		}
		c = h
	case rdb.Set:
		s, _ := OpenSet(ctx, src, keyspace.Value{}, false, lim, maxElem)
		for _, m := range o.Elems {
			if _, err = s.Add(m); err != nil {
				break
			}
		}
		c = s
	case rdb.ZSet:
		z, _ := OpenZSet(ctx, src, keyspace.Value{}, false, lim, maxElem)
		for _, m := range o.Members {
			if _, err = z.Set(m.Member, m.Score); err != nil {
				break
			}
		}
		c = z
	case rdb.List:
		l, _ := OpenList(ctx, src, keyspace.Value{}, false, lim)
		l.Push(false, o.Elems...)
		v, _, _, ops, _ := l.Commit()
		v.At = at
		return v, ops, nil
	default:
		return keyspace.Value{}, nil, fmt.Errorf("collection: object kind %s: %w", o.Kind, ErrBadValue)
	}
	if err != nil {
		return keyspace.Value{}, nil, fmt.Errorf("collection: building a %s: %w", o.Kind, err)
	}
	v, _, _, ops := c.Commit()
	v.At = at
	return v, ops, nil
}

// noElements is the Source of a collection being built: none of its
// elements exist yet.
type noElements struct{}

func (noElements) Element(context.Context, []byte) ([]byte, bool, error) { return nil, false, nil }

func (noElements) ElementKeys(context.Context, []byte, []byte, int, ...array.ListOption) ([][]byte, []byte, error) {
	return nil, nil, nil
}
