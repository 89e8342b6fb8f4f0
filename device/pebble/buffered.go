package pebble

import (
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Large writes for tables and blob files (issue 36). Pebble's table and
// blob writers hand their file one block at a time through a 4 KiB
// bufio.Writer, so a flush or a compaction costs one write(2) per block:
// 11.5% of the CPU of `kvarray serve` under SET 4 KiB was those calls.
// bufferedFS gathers the writes of each new table and blob file into
// writeBuffer bytes and issues one write(2) each time it fills, and before
// any other call on the file (Sync, SyncTo, Stat, a read, Close), so that
// nothing Pebble asks of the file sees less than it wrote. Durability is
// unchanged: Pebble syncs a table or blob file before it is referenced,
// and the sync flushes first. The WAL, the MANIFEST and every other file
// are left unbuffered: their writes must reach the kernel when Pebble
// makes them (a WAL record written unsynced survives a crash of the
// process).
//
// It sits under the guard (guardFS), so a write error met by a flush is
// handled as any other: at the call that flushed.
type bufferedFS struct{ vfs.FS }

// writeBuffer is the size of each write(2) of a table or blob file.
const writeBuffer = 1 << 20

var writeBuffers = sync.Pool{New: func() any { b := make([]byte, 0, writeBuffer); return &b }}

func (b bufferedFS) Unwrap() vfs.FS { return b.FS }

func (b bufferedFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := b.FS.Create(name, c)
	if err != nil || !(strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")) {
		return f, err
	}
	return &bufferedFile{File: f, buf: writeBuffers.Get().(*[]byte)}, nil
}

// bufferedFile is a table or blob file being written. Pebble writes a
// file from one goroutine at a time, but the mutex makes that no
// assumption.
type bufferedFile struct {
	vfs.File
	mu  sync.Mutex
	buf *[]byte // nil once closed
}

func (f *bufferedFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.buf == nil {
		return f.File.Write(p)
	}
	b := *f.buf
	if len(b)+len(p) > cap(b) {
		if err := f.flushLocked(); err != nil {
			return 0, err
		}
		b = *f.buf
	}
	if len(p) >= cap(b) {
		return f.File.Write(p)
	}
	*f.buf = append(b, p...)
	return len(p), nil
}

// flushLocked writes what the buffer holds.
func (f *bufferedFile) flushLocked() error {
	if f.buf == nil || len(*f.buf) == 0 {
		return nil
	}
	_, err := f.File.Write(*f.buf)
	*f.buf = (*f.buf)[:0]
	return err
}

func (f *bufferedFile) flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flushLocked()
}

func (f *bufferedFile) Close() error {
	f.mu.Lock()
	err := f.flushLocked()
	if f.buf != nil {
		writeBuffers.Put(f.buf)
		f.buf = nil
	}
	f.mu.Unlock()
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}

func (f *bufferedFile) Read(p []byte) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.Read(p)
}

func (f *bufferedFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *bufferedFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *bufferedFile) Preallocate(off, n int64) error {
	if err := f.flush(); err != nil {
		return err
	}
	return f.File.Preallocate(off, n)
}

func (f *bufferedFile) Stat() (vfs.FileInfo, error) {
	if err := f.flush(); err != nil {
		return nil, err
	}
	return f.File.Stat()
}

func (f *bufferedFile) Sync() error {
	if err := f.flush(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *bufferedFile) SyncData() error {
	if err := f.flush(); err != nil {
		return err
	}
	return f.File.SyncData()
}

func (f *bufferedFile) SyncTo(n int64) (bool, error) {
	if err := f.flush(); err != nil {
		return false, err
	}
	return f.File.SyncTo(n)
}
