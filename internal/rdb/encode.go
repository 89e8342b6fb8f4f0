package rdb

import (
	"encoding/binary"
	"math"
)

// appendLength appends n as an RDB length (rdbSaveLen).
func appendLength(b []byte, n uint64) []byte {
	switch {
	case n < 1<<6:
		return append(b, byte(n))
	case n < 1<<14:
		return append(b, 0x40|byte(n>>8), byte(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0x80), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0x81), n)
}

func appendString(b, s []byte) []byte {
	return append(appendLength(b, uint64(len(s))), s...)
}

// rdbType is the RDB type o is written as: the plain encodings (the
// package comment).
func rdbType(o Object) byte {
	switch o.Kind {
	case List:
		return typeList
	case Set:
		return typeSet
	case ZSet:
		return typeZSet2
	case Hash:
		return typeHash
	}
	return typeString
}

// appendObject appends o's encoding (without its type byte).
func appendObject(b []byte, o Object) []byte {
	switch o.Kind {
	case List, Set:
		b = appendLength(b, uint64(len(o.Elems)))
		for _, e := range o.Elems {
			b = appendString(b, e)
		}
	case ZSet:
		b = appendLength(b, uint64(len(o.Members)))
		for _, m := range o.Members {
			b = appendString(b, m.Member)
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(m.Score))
		}
	case Hash:
		b = appendLength(b, uint64(len(o.Fields)))
		for _, f := range o.Fields {
			b = appendString(appendString(b, f.Name), f.Value)
		}
	default:
		b = appendString(b, o.Str)
	}
	return b
}
