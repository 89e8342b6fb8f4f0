package pebble

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvarray/kvarray/device"
)

// corruptCase damages the files of a closed device in dir.
type corruptCase struct {
	name string
	// lossy: the damage may silently drop acknowledged writes (a WAL cut
	// or flipped in its last record is what a crash mid-write leaves, so
	// Pebble reads it as the end of the log); reads may then say not-found.
	lossy bool
	harm  func(t *testing.T, dir string)
}

// files returns the paths in dir whose names match pattern.
func files(t *testing.T, dir, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil || len(m) == 0 {
		t.Fatalf("no %s in %s (%v)", pattern, dir, err)
	}
	return m
}

// flip inverts n bytes of each file at the offset at(size) picks.
func flip(pattern string, n int, at func(size int) int) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		for _, f := range files(t, dir, pattern) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			off := max(0, min(at(len(b)), len(b)-n))
			for i := off; i < off+n && i < len(b); i++ {
				b[i] ^= 0xff
			}
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func truncate(pattern string) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		for _, f := range files(t, dir, pattern) {
			fi, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(f, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func remove(pattern string) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		if err := os.Remove(files(t, dir, pattern)[0]); err != nil {
			t.Fatal(err)
		}
	}
}

var corruptCases = []corruptCase{
	{"sstable data block", false, flip("*.sst", 16, func(n int) int { return n / 3 })},
	{"sstable index block", false, flip("*.sst", 16, func(n int) int { return n - 400 })},
	{"sstable footer", false, flip("*.sst", 8, func(n int) int { return n - 8 })},
	{"sstable truncated", false, truncate("*.sst")},
	{"sstable deleted", false, remove("*.sst")},
	{"blob file", false, flip("*.blob", 16, func(n int) int { return n / 2 })},
	{"wal flipped", true, flip("*.log", 16, func(n int) int { return n / 3 })},
	{"wal truncated", true, truncate("*.log")},
	{"manifest flipped", false, flip("MANIFEST-*", 16, func(n int) int { return n / 2 })},
	{"manifest truncated", false, truncate("MANIFEST-*")},
	{"manifest deleted", false, remove("MANIFEST-*")},
	{"options flipped", false, flip("OPTIONS-*", 16, func(n int) int { return n / 2 })},
	{"options deleted", false, remove("OPTIONS-*")},
}

// copyDir copies the flat directory src to a new temporary directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestCorruptFiles damages each kind of Pebble file of a device holding
// data in sstables and in its WAL (the files as a crash leaves them), then
// opens and reads it. Invariant: no
// panic and no exit; Open either fails with ErrDeviceFailed and a reason,
// or every read returns the stored bytes exactly or an error wrapping
// ErrCorrupt or ErrDeviceFailed (not-found only where the damage looks
// like a crash's torn WAL tail); Iterate lists only stored keys or fails
// with ErrDeviceFailed; Close returns.
func TestCorruptFiles(t *testing.T) {
	ctx := t.Context()
	pristine := t.TempDir()
	d, err := Open(pristine, WithCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	put := func(from, to int) {
		for i := from; i < to; i++ {
			k, v := fmt.Sprintf("key-%04d", i), random(2000+i%7)
			if err := d.Store(ctx, []byte(k), v); err != nil {
				t.Fatal(err)
			}
			want[k] = v
		}
	}
	put(0, 300)
	if err := d.db.Flush(); err != nil { // into an sstable
		t.Fatal(err)
	}
	put(300, 400) // only in the WAL
	// The files as a crash would leave them: a clean Close flushes the WAL.
	pristine = copyDir(t, pristine)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range corruptCases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			dir := copyDir(t, pristine)
			tc.harm(t, dir)
			d, err := Open(dir)
			if err != nil {
				if !errors.Is(err, device.ErrDeviceFailed) {
					t.Fatalf("Open: %v, want ErrDeviceFailed", err)
				}
				t.Logf("Open refused: %v", err)
				return
			}
			var good, corrupt, failed, lost int
			for k, v := range want {
				got, err := d.Retrieve(ctx, []byte(k))
				switch {
				case err == nil:
					if !bytes.Equal(got, v) {
						t.Fatalf("Retrieve(%q) returned wrong bytes", k)
					}
					good++
				case errors.Is(err, device.ErrCorrupt):
					corrupt++
				case errors.Is(err, device.ErrDeviceFailed):
					failed++
				case errors.Is(err, device.ErrNotFound) && tc.lossy:
					lost++
				default:
					t.Fatalf("Retrieve(%q): %v, want the value, ErrCorrupt or ErrDeviceFailed", k, err)
				}
			}
			var listed int
			ierr := d.Iterate(ctx, nil, func(k []byte) error {
				if _, ok := want[string(k)]; !ok {
					return fmt.Errorf("listed %q, never stored", k)
				}
				listed++
				return nil
			})
			if ierr != nil && !errors.Is(ierr, device.ErrDeviceFailed) {
				t.Fatalf("Iterate: %v, want nil or ErrDeviceFailed", ierr)
			}
			t.Logf("opened: %d good, %d corrupt, %d failed, %d lost; iterate listed %d: %v", good, corrupt, failed, lost, listed, ierr)
			closeWithin(t, d)
		})
	}
}
