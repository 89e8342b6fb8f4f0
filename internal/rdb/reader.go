package rdb

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync/atomic"
)

// reader reads RDB primitives, keeping the CRC64 of what it read and
// the number of bytes left, which bounds every length (the package
// comment).
type reader struct {
	r    *bufio.Reader
	crc  uint64
	left int64
	// read is atomic: a progress report reads it while Next runs.
	read atomic.Int64
	err  error
}

func newReader(r io.Reader, size int64) *reader {
	return &reader{r: bufio.NewReaderSize(r, 1<<16), left: size}
}

func (r *reader) fail(what string) error {
	if r.err == nil {
		r.err = fmt.Errorf("rdb: at byte %d: %s: %w", r.read.Load(), what, ErrCorrupt)
	}
	return r.err
}

// bytes reads n bytes.
func (r *reader) bytes(n uint64, what string) ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	if n > uint64(r.left) {
		return nil, r.fail(fmt.Sprintf("%s of %d bytes past the end", what, n))
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.r, b); err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return nil, r.fail(what + " cut short")
		}
		r.err = fmt.Errorf("rdb: reading %s: %w", what, err)
		return nil, r.err
	}
	r.crc = crc(r.crc, b)
	r.left -= int64(n)
	r.read.Add(int64(n))
	return b, nil
}

func (r *reader) byte(what string) (byte, error) {
	b, err := r.bytes(1, what)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (r *reader) u32le(what string) (uint32, error) {
	b, err := r.bytes(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (r *reader) u64le(what string) (uint64, error) {
	b, err := r.bytes(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// length reads a length (rdbLoadLenByRef); enc says it is instead a
// string's special encoding (RDB_ENC_*), in n.
func (r *reader) length(what string) (n uint64, enc bool, err error) {
	b, err := r.byte(what)
	if err != nil {
		return 0, false, err
	}
	switch b >> 6 {
	case 0:
		return uint64(b & 0x3f), false, nil
	case 1:
		c, err := r.byte(what)
		return uint64(b&0x3f)<<8 | uint64(c), false, err
	case 3:
		return uint64(b & 0x3f), true, nil
	}
	switch b {
	case 0x80:
		p, err := r.bytes(4, what)
		if err != nil {
			return 0, false, err
		}
		return uint64(binary.BigEndian.Uint32(p)), false, nil
	case 0x81:
		p, err := r.bytes(8, what)
		if err != nil {
			return 0, false, err
		}
		return binary.BigEndian.Uint64(p), false, nil
	}
	return 0, false, r.fail(fmt.Sprintf("%s: length byte %#x", what, b))
}

// count reads a length that counts items of at least min bytes each.
func (r *reader) count(what string, min int64) (int, error) {
	n, enc, err := r.length(what)
	if err != nil {
		return 0, err
	}
	if enc || n > uint64(r.left/min)+1 {
		return 0, r.fail(fmt.Sprintf("%s of %d past the end", what, n))
	}
	return int(n), nil
}

// str reads a string (rdbGenericLoadStringObject): plain, an integer
// or LZF-compressed.
func (r *reader) str(what string) ([]byte, error) {
	n, enc, err := r.length(what)
	if err != nil {
		return nil, err
	}
	if !enc {
		return r.bytes(n, what)
	}
	switch n {
	case 0, 1, 2:
		p, err := r.bytes(1<<n, what)
		if err != nil {
			return nil, err
		}
		var v int64
		switch n {
		case 0:
			v = int64(int8(p[0]))
		case 1:
			v = int64(int16(binary.LittleEndian.Uint16(p)))
		default:
			v = int64(int32(binary.LittleEndian.Uint32(p)))
		}
		return strconv.AppendInt(nil, v, 10), nil
	case 3:
		cl, _, err := r.length(what)
		if err != nil {
			return nil, err
		}
		ul, _, err := r.length(what)
		if err != nil {
			return nil, err
		}
		// An LZF string expands at most about 256 times.
		if cl > uint64(r.left) || ul > cl*256+64 {
			return nil, r.fail(fmt.Sprintf("%s: LZF string of %d bytes from %d", what, ul, cl))
		}
		c, err := r.bytes(cl, what)
		if err != nil {
			return nil, err
		}
		s, err := lzfDecompress(c, int(ul))
		if err != nil {
			return nil, r.fail(what + ": " + err.Error())
		}
		return s, nil
	}
	return nil, r.fail(fmt.Sprintf("%s: string encoding %d", what, n))
}

// asciiDouble reads a score as RDB_TYPE_ZSET stores it.
func (r *reader) asciiDouble() (float64, error) {
	n, err := r.byte("score")
	if err != nil {
		return 0, err
	}
	switch n {
	case 253:
		return math.NaN(), nil
	case 254:
		return math.Inf(1), nil
	case 255:
		return math.Inf(-1), nil
	}
	b, err := r.bytes(uint64(n), "score")
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return 0, r.fail(fmt.Sprintf("score %q", b))
	}
	return f, nil
}

func (r *reader) binDouble() (float64, error) {
	u, err := r.u64le("score")
	return math.Float64frombits(u), err
}
