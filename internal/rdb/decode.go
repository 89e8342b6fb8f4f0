package rdb

import (
	"fmt"
	"strconv"
)

// readObject reads a value of RDB type t (rdbLoadObject). A value of a
// type kvarray does not hold is read to its end and returned as an
// error wrapping ErrUnsupported, so that a file's next entry follows.
func (r *reader) readObject(t byte) (Object, error) {
	switch t {
	case typeString:
		s, err := r.str("string value")
		return Object{Kind: String, Str: s}, err
	case typeList, typeSet:
		n, err := r.count("element count", 1)
		if err != nil {
			return Object{}, err
		}
		o := Object{Kind: List, Elems: make([][]byte, 0, n)}
		if t == typeSet {
			o.Kind = Set
		}
		for range n {
			e, err := r.str("element")
			if err != nil {
				return Object{}, err
			}
			o.Elems = append(o.Elems, e)
		}
		return o, nil
	case typeZSet, typeZSet2:
		n, err := r.count("member count", 2)
		if err != nil {
			return Object{}, err
		}
		o := Object{Kind: ZSet, Members: make([]Member, 0, n)}
		for range n {
			m, err := r.str("member")
			if err != nil {
				return Object{}, err
			}
			var s float64
			if t == typeZSet {
				s, err = r.asciiDouble()
			} else {
				s, err = r.binDouble()
			}
			if err != nil {
				return Object{}, err
			}
			o.Members = append(o.Members, Member{m, s})
		}
		return o, nil
	case typeHash:
		n, err := r.count("field count", 2)
		if err != nil {
			return Object{}, err
		}
		o := Object{Kind: Hash, Fields: make([]Field, 0, n)}
		for range n {
			f, err := r.str("field")
			if err != nil {
				return Object{}, err
			}
			v, err := r.str("field value")
			if err != nil {
				return Object{}, err
			}
			o.Fields = append(o.Fields, Field{f, v})
		}
		return o, nil
	case typeListQuicklist, typeListQuicklist2:
		n, err := r.count("quicklist node count", 1)
		if err != nil {
			return Object{}, err
		}
		o := Object{Kind: List}
		for range n {
			container := uint64(2) // packed
			if t == typeListQuicklist2 {
				if container, _, err = r.length("quicklist container"); err != nil {
					return Object{}, err
				}
			}
			b, err := r.str("quicklist node")
			if err != nil {
				return Object{}, err
			}
			var es [][]byte
			switch {
			case container == 1: // a plain node: one large element
				es = [][]byte{b}
			case container != 2:
				return Object{}, r.fail(fmt.Sprintf("quicklist container %d", container))
			case t == typeListQuicklist:
				es, err = ziplistEntries(b)
			default:
				es, err = listpackEntries(b)
			}
			if err != nil {
				return Object{}, err
			}
			o.Elems = append(o.Elems, es...)
		}
		return o, nil
	case typeListZiplist, typeSetIntset, typeSetListpack, typeZSetZiplist, typeZSetListpack, typeHashZiplist, typeHashListpack:
		b, err := r.str("packed value")
		if err != nil {
			return Object{}, err
		}
		return unpack(t, b)
	case typeModule2:
		return Object{}, r.skipModule()
	case typeStream, typeStream2, typeStream3:
		return Object{}, r.skipStream(t)
	case typeHashMetadata, typeHashListpackEx, typeHashMetaPreGA, typeHashLpExPreGA:
		return Object{}, r.skipFieldExpiryHash(t)
	case typeHashZipmap:
		// Redis before 2.6 wrote these.
		b, err := r.str("zipmap")
		if err != nil {
			return Object{}, err
		}
		return zipmapObject(b)
	}
	// A type whose extent is unknown here (modules of RDB_TYPE_MODULE,
	// types after Redis 7.4's): nothing after it can be found.
	return Object{}, r.fail(fmt.Sprintf("value of %s (RDB type %d), whose length this reader does not know", TypeName(t), t))
}

// unpack is the Object of a ziplist, listpack or intset of RDB type t.
func unpack(t byte, b []byte) (Object, error) {
	var es [][]byte
	var err error
	switch t {
	case typeSetIntset:
		es, err = intsetEntries(b)
	case typeListZiplist, typeZSetZiplist, typeHashZiplist:
		es, err = ziplistEntries(b)
	default:
		es, err = listpackEntries(b)
	}
	if err != nil {
		return Object{}, err
	}
	switch t {
	case typeListZiplist:
		return Object{Kind: List, Elems: es}, nil
	case typeSetIntset, typeSetListpack:
		return Object{Kind: Set, Elems: es}, nil
	}
	if len(es)%2 != 0 {
		return Object{}, packedError("odd number of entries in pairs", 0)
	}
	if t == typeHashZiplist || t == typeHashListpack {
		o := Object{Kind: Hash, Fields: make([]Field, 0, len(es)/2)}
		for i := 0; i < len(es); i += 2 {
			o.Fields = append(o.Fields, Field{es[i], es[i+1]})
		}
		return o, nil
	}
	o := Object{Kind: ZSet, Members: make([]Member, 0, len(es)/2)}
	for i := 0; i < len(es); i += 2 {
		s, err := strconv.ParseFloat(string(es[i+1]), 64)
		if err != nil {
			return Object{}, packedError(fmt.Sprintf("score %q", es[i+1]), 0)
		}
		o.Members = append(o.Members, Member{es[i], s})
	}
	return o, nil
}

// skipFieldExpiryHash reads a hash with field expiry (Redis 7.4's
// rdbLoadObject): the GA forms' minimum expiry (8 bytes), then a
// listpack of field, value, expiry triples, or a count of expiry
// (length), field, value.
func (r *reader) skipFieldExpiryHash(t byte) error {
	if t == typeHashMetadata || t == typeHashListpackEx {
		if _, err := r.bytes(8, "minimum field expiry"); err != nil {
			return err
		}
	}
	if t == typeHashListpackEx || t == typeHashLpExPreGA {
		if _, err := r.str("hash listpack"); err != nil {
			return err
		}
	} else {
		n, err := r.count("field count", 3)
		if err != nil {
			return err
		}
		for range n {
			if _, _, err := r.length("field expiry"); err != nil {
				return err
			}
			if _, err := r.str("field"); err != nil {
				return err
			}
			if _, err := r.str("field value"); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("a hash with field expiry: %w", ErrUnsupported)
}

// skipModule reads a RDB_TYPE_MODULE_2 value (or a module's aux data):
// the module id, then opcodes, each followed by its datum, to EOF.
func (r *reader) skipModule() error {
	if _, _, err := r.length("module id"); err != nil {
		return err
	}
	if err := r.skipModuleData(); err != nil {
		return err
	}
	return fmt.Errorf("a module value: %w", ErrUnsupported)
}

func (r *reader) skipModuleData() error {
	for {
		op, _, err := r.length("module opcode")
		if err != nil {
			return err
		}
		switch op {
		case 0: // RDB_MODULE_OPCODE_EOF
			return nil
		case 1, 2: // SINT, UINT
			_, _, err = r.length("module integer")
		case 3: // FLOAT
			_, err = r.bytes(4, "module float")
		case 4: // DOUBLE
			_, err = r.bytes(8, "module double")
		case 5: // STRING
			_, err = r.str("module string")
		default:
			return r.fail(fmt.Sprintf("module opcode %d", op))
		}
		if err != nil {
			return err
		}
	}
}

// skipStream reads a stream (rdbLoadObject's RDB_TYPE_STREAM_LISTPACKS*).
func (r *reader) skipStream(t byte) error {
	lens := func(n int) error {
		for range n {
			if _, _, err := r.length("stream field"); err != nil {
				return err
			}
		}
		return nil
	}
	nodes, err := r.count("stream node count", 2)
	if err != nil {
		return err
	}
	for range nodes {
		if _, err := r.str("stream node key"); err != nil {
			return err
		}
		if _, err := r.str("stream listpack"); err != nil {
			return err
		}
	}
	// length, last id; then first id, max deleted id, entries added.
	n := 3
	if t >= typeStream2 {
		n += 5
	}
	if err := lens(n); err != nil {
		return err
	}
	groups, err := r.count("consumer group count", 2)
	if err != nil {
		return err
	}
	for range groups {
		if _, err := r.str("consumer group name"); err != nil {
			return err
		}
		n := 2 // last id
		if t >= typeStream2 {
			n++ // entries read
		}
		if err := lens(n); err != nil {
			return err
		}
		pel, err := r.count("pending entry count", 25)
		if err != nil {
			return err
		}
		for range pel {
			if _, err := r.bytes(16+8, "pending entry"); err != nil {
				return err
			}
			if err := lens(1); err != nil {
				return err
			}
		}
		consumers, err := r.count("consumer count", 9)
		if err != nil {
			return err
		}
		for range consumers {
			if _, err := r.str("consumer name"); err != nil {
				return err
			}
			times := uint64(8) // seen time
			if t >= typeStream3 {
				times += 8 // active time
			}
			if _, err := r.bytes(times, "consumer times"); err != nil {
				return err
			}
			pel, err := r.count("consumer pending count", 16)
			if err != nil {
				return err
			}
			if _, err := r.bytes(uint64(pel)*16, "consumer pending entries"); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("a stream: %w", ErrUnsupported)
}
