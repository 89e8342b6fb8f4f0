package pebble

import (
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Flush moves the memtable into an sstable, for tests that damage tables.
func (d *Device) Flush() error { return d.db.Flush() }

// WithFlippedReads runs the device over the real file system, except that
// while on is set every read of a table or blob file comes back with one
// byte flipped: the blocks Pebble reads then fail their checksums, as on
// a disk whose sectors rot.
func WithFlippedReads(on *atomic.Bool) Option { return withFS(flipFS{FS: vfs.Default, on: on}) }

type flipFS struct {
	vfs.FS
	on *atomic.Bool
}

func (f flipFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.FS.Open(name, opts...)
	if err != nil || !(strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")) {
		return file, err
	}
	return flipFile{File: file, on: f.on}, nil
}

type flipFile struct {
	vfs.File
	on *atomic.Bool
}

func (f flipFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	if f.on.Load() && n > 0 {
		p[n/2] ^= 0xff
	}
	return n, err
}

// Corruptions is how many corrupt blocks Pebble has reported.
func (d *Device) Corruptions() int64 { return d.corruptions.Load() }

// WithFS runs the device over fs (a crashable memory file system).
func WithFS(fs vfs.FS) Option { return withFS(fs) }
