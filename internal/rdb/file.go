package rdb

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// The opcodes of an RDB file (rdb.h).
const (
	opSlotInfo   = 244
	opFunction2  = 245
	opFunctionRC = 246
	opModuleAux  = 247
	opIdle       = 248
	opFreq       = 249
	opAux        = 250
	opResizeDB   = 251
	opExpireMs   = 252
	opExpireSec  = 253
	opSelectDB   = 254
	opEOF        = 255
)

// Entry is one key of an RDB file.
type Entry struct {
	DB  int
	Key []byte
	// ExpireAt is the key's expiry, Unix milliseconds; 0 for none.
	ExpireAt int64
	Object   Object
	// Type is the RDB type the value was stored as. Unsupported, when
	// not nil, says the value is of a type kvarray does not hold (it
	// wraps ErrUnsupported) and Object is empty.
	Type        byte
	Unsupported error
}

// FileReader reads an RDB file, entry by entry (rdbLoadRioWithLoadingCtx).
type FileReader struct {
	r       *reader
	version int
	db      int
	done    bool
	// Functions counts the function libraries the file held (skipped:
	// kvarray's FUNCTION RESTORE takes its own payload).
	Functions int
	// Aux holds the file's aux fields (redis-ver, ctime...).
	Aux map[string]string
}

// NewFileReader starts reading an RDB file of size bytes (which bounds
// its lengths; the package comment).
func NewFileReader(in io.Reader, size int64) (*FileReader, error) {
	r := newReader(in, size)
	h, err := r.bytes(9, "file header")
	if err != nil {
		return nil, err
	}
	if string(h[:5]) != "REDIS" {
		return nil, fmt.Errorf("not an RDB file (it starts %q): %w", h[:5], ErrCorrupt)
	}
	v, err := strconv.Atoi(string(h[5:]))
	if err != nil || v < 1 || v > MaxVersion {
		return nil, fmt.Errorf("RDB version %q (this reads 1 to %d): %w", h[5:], MaxVersion, ErrVersion)
	}
	return &FileReader{r: r, version: v, Aux: map[string]string{}}, nil
}

// Version is the file's RDB version.
func (f *FileReader) Version() int { return f.version }

// Offset is the number of bytes read so far; it may be called while
// another goroutine runs Next (a progress report).
func (f *FileReader) Offset() int64 { return f.r.read.Load() }

// Next reads the next key; io.EOF after the last, once the file's
// checksum has been checked.
func (f *FileReader) Next() (Entry, error) {
	if f.done {
		return Entry{}, io.EOF
	}
	r := f.r
	var at int64
	for {
		op, err := r.byte("opcode")
		if err != nil {
			return Entry{}, err
		}
		switch op {
		case opEOF:
			f.done = true
			if f.version >= 5 {
				want := r.crc
				got, err := r.u64le("checksum")
				if err != nil {
					return Entry{}, err
				}
				// 0: written with rdbchecksum no.
				if got != 0 && got != want {
					return Entry{}, fmt.Errorf("RDB file: %w", ErrChecksum)
				}
			}
			return Entry{}, io.EOF
		case opSelectDB:
			n, _, err := r.length("database number")
			if err != nil {
				return Entry{}, err
			}
			if n > math.MaxInt32 {
				return Entry{}, r.fail(fmt.Sprintf("database %d", n))
			}
			f.db = int(n)
		case opResizeDB:
			if _, _, err := r.length("database size"); err != nil {
				return Entry{}, err
			}
			if _, _, err := r.length("expires size"); err != nil {
				return Entry{}, err
			}
		case opSlotInfo:
			for range 3 {
				if _, _, err := r.length("slot info"); err != nil {
					return Entry{}, err
				}
			}
		case opExpireMs:
			u, err := r.u64le("expiry")
			if err != nil {
				return Entry{}, err
			}
			at = int64(u)
		case opExpireSec:
			u, err := r.u32le("expiry")
			if err != nil {
				return Entry{}, err
			}
			at = int64(u) * 1000
		case opIdle:
			if _, _, err := r.length("idle time"); err != nil {
				return Entry{}, err
			}
		case opFreq:
			if _, err := r.byte("frequency"); err != nil {
				return Entry{}, err
			}
		case opAux:
			k, err := r.str("aux field")
			if err != nil {
				return Entry{}, err
			}
			v, err := r.str("aux value")
			if err != nil {
				return Entry{}, err
			}
			f.Aux[string(k)] = string(v)
		case opModuleAux:
			if _, _, err := r.length("module id"); err != nil {
				return Entry{}, err
			}
			if _, _, err := r.length("module when"); err != nil {
				return Entry{}, err
			}
			if err := r.skipModuleData(); err != nil {
				return Entry{}, err
			}
		case opFunction2:
			if _, err := r.str("function library"); err != nil {
				return Entry{}, err
			}
			f.Functions++
		case opFunctionRC:
			return Entry{}, r.fail("function library of Redis 7.0's release candidates")
		default:
			k, err := r.str("key")
			if err != nil {
				return Entry{}, err
			}
			o, err := r.readObject(op)
			e := Entry{DB: f.db, Key: k, ExpireAt: at, Object: o, Type: op}
			if errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrCorrupt) {
				e.Unsupported = err
				return e, nil
			}
			if err != nil {
				return Entry{}, fmt.Errorf("key %q: %w", truncate(k), err)
			}
			return e, nil
		}
	}
}

func truncate(k []byte) []byte {
	if len(k) > 64 {
		return k[:64]
	}
	return k
}

// FileWriter writes an RDB file of RDB version Version.
type FileWriter struct {
	w   *bufio.Writer
	crc uint64
	db  int
	err error
	buf []byte
}

// NewFileWriter starts an RDB file on w with its header.
func NewFileWriter(w io.Writer) *FileWriter {
	f := &FileWriter{w: bufio.NewWriterSize(w, 1<<16), db: -1}
	b := fmt.Appendf(nil, "REDIS%04d", Version)
	b = append(b, opAux)
	b = appendString(appendString(b, []byte("redis-bits")), []byte("64"))
	b = append(b, opAux)
	b = appendString(appendString(b, []byte("ctime")), strconv.AppendInt(nil, time.Now().Unix(), 10))
	f.write(b)
	return f
}

func (f *FileWriter) write(b []byte) {
	if f.err != nil {
		return
	}
	f.crc = crc(f.crc, b)
	_, f.err = f.w.Write(b)
}

// Write writes key of database db, expiring at expireAt (Unix ms, 0 for
// never), with value o. A writer's keys come grouped by database.
func (f *FileWriter) Write(db int, key []byte, expireAt int64, o Object) error {
	b := f.buf[:0]
	if db != f.db {
		b = appendLength(append(b, opSelectDB), uint64(db))
		f.db = db
	}
	if expireAt != 0 {
		b = binary.LittleEndian.AppendUint64(append(b, opExpireMs), uint64(expireAt))
	}
	b = appendString(append(b, rdbType(o)), key)
	b = appendObject(b, o)
	f.write(b)
	if cap(b) <= 1<<20 {
		f.buf = b
	}
	return f.err
}

// Close ends the file (EOF and checksum) and flushes it; it does not
// close the underlying writer.
func (f *FileWriter) Close() error {
	f.write([]byte{opEOF})
	if f.err == nil {
		_, f.err = f.w.Write(binary.LittleEndian.AppendUint64(nil, f.crc))
	}
	if f.err == nil {
		f.err = f.w.Flush()
	}
	return f.err
}
