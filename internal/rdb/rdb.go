// Package rdb is Redis's serialization format: the RDB object encodings
// (what DUMP returns, with its version and CRC64 footer) and the RDB
// file around them (what SAVE writes). It knows nothing of kvarray's
// array: the server and the CLI turn its Objects into collections
// (package collection) and back.
//
// Invariants:
//   - Decoding accepts every encoding Redis 6.0 to 7.4 writes for the
//     types kvarray holds (strings, lists, sets, sorted sets, hashes),
//     compact ones included (ziplist, listpack, intset, quicklist); a
//     type it cannot hold (streams, modules, hashes with field expiry)
//     is skipped whole in a file and reported as ErrUnsupported, never
//     half read.
//   - Encoding writes only the plain encodings (one length-prefixed
//     string per element, binary doubles) that every Redis since 4.0
//     loads, under RDB version Version, so that a DUMP or an export is
//     read by any Redis the import reads.
//   - Every length and count read is checked against the input left
//     before anything is allocated for it: a corrupt payload is an
//     error, never a huge allocation or a panic.
package rdb

import (
	"errors"
	"fmt"
)

// Kind is an Object's Redis type.
type Kind byte

const (
	String Kind = iota
	List
	Set
	ZSet
	Hash
)

func (k Kind) String() string {
	switch k {
	case String:
		return "string"
	case List:
		return "list"
	case Set:
		return "set"
	case ZSet:
		return "zset"
	case Hash:
		return "hash"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// Object is one Redis value, its elements in Redis's order (a list's
// from head to tail; a set's, hash's and sorted set's as the encoding
// held them).
type Object struct {
	Kind    Kind
	Str     []byte   // String
	Elems   [][]byte // List, Set
	Fields  []Field  // Hash
	Members []Member // ZSet
}

// Field is a hash's field and its value.
type Field struct{ Name, Value []byte }

// Member is a sorted set's member and its score.
type Member struct {
	Member []byte
	Score  float64
}

// Len is the number of elements of o (1 for a string).
func (o Object) Len() int {
	switch o.Kind {
	case List, Set:
		return len(o.Elems)
	case Hash:
		return len(o.Fields)
	case ZSet:
		return len(o.Members)
	}
	return 1
}

// Version is the RDB version this package writes: Redis 6.0's, which
// Redis 6.0 and every later version loads (the plain encodings it writes
// have not changed since).
const Version = 9

// MaxVersion is the newest RDB version read (Redis 7.4's).
const MaxVersion = 12

var (
	// ErrCorrupt is input that is not Redis's format.
	ErrCorrupt = errors.New("rdb: malformed input")
	// ErrChecksum is a payload or file whose CRC64 does not match.
	ErrChecksum = errors.New("rdb: checksum mismatch")
	// ErrVersion is an RDB version this package does not read.
	ErrVersion = errors.New("rdb: unsupported RDB version")
	// ErrUnsupported is a value of a type kvarray does not hold.
	ErrUnsupported = errors.New("rdb: type not supported")
)

// The RDB value types (rdb.h).
const (
	typeString         = 0
	typeList           = 1
	typeSet            = 2
	typeZSet           = 3
	typeHash           = 4
	typeZSet2          = 5
	typeModule         = 6
	typeModule2        = 7
	typeHashZipmap     = 9
	typeListZiplist    = 10
	typeSetIntset      = 11
	typeZSetZiplist    = 12
	typeHashZiplist    = 13
	typeListQuicklist  = 14
	typeStream         = 15
	typeHashListpack   = 16
	typeZSetListpack   = 17
	typeListQuicklist2 = 18
	typeStream2        = 19
	typeSetListpack    = 20
	typeStream3        = 21
	// Hashes with field expiry (Redis 7.4); the release candidates'
	// forms lack the minimum expiry in front.
	typeHashMetaPreGA  = 22
	typeHashLpExPreGA  = 23
	typeHashMetadata   = 24
	typeHashListpackEx = 25
)

// TypeName names an RDB value type for reports.
func TypeName(t byte) string {
	switch t {
	case typeString:
		return "string"
	case typeList, typeListZiplist, typeListQuicklist, typeListQuicklist2:
		return "list"
	case typeSet, typeSetIntset, typeSetListpack:
		return "set"
	case typeZSet, typeZSet2, typeZSetZiplist, typeZSetListpack:
		return "zset"
	case typeHash, typeHashZipmap, typeHashZiplist, typeHashListpack:
		return "hash"
	case typeHashMetadata, typeHashListpackEx, typeHashMetaPreGA, typeHashLpExPreGA:
		return "hash with field expiry"
	case typeModule, typeModule2:
		return "module"
	case typeStream, typeStream2, typeStream3:
		return "stream"
	}
	return fmt.Sprintf("type %d", t)
}
