package pebble

import (
	"context"
	"syscall"

	"github.com/kvarray/kvarray/device"
)

// MinFreeToReopen is the free space ProbeSpace wants on the file system
// of a read-only device before it says the device may be opened again:
// room for a new WAL, a memtable's flush and the compactions that follow,
// so that the reopened device does not meet ENOSPC again at once.
const MinFreeToReopen = 64 << 20

// ProbeSpace implements device.SpaceProber. A device that met ENOSPC
// stays read-only (its Pebble instance cannot write again, see the
// package doc), so when its file system has MinFreeToReopen free again
// ProbeSpace returns an error wrapping device.ErrReopen: its owner closes
// it and opens the directory anew. While the space is not there, an
// error wraps device.ErrFull; a failed device returns why it failed.
func (d *Device) ProbeSpace(context.Context) error {
	werr := d.h.writeable()
	if werr == nil {
		return nil
	}
	if err := d.h.err(); err != nil {
		return d.errorf("probe space: %w", err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(d.dir, &st); err != nil {
		return d.errorf("probe space: statfs %s: %w", d.dir, failed(err))
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free < MinFreeToReopen {
		return d.errorf("probe space: %d bytes free in %s, %d wanted: %w", free, d.dir, MinFreeToReopen, device.ErrFull)
	}
	return d.errorf("probe space: %d bytes free in %s: %w", free, d.dir, device.ErrReopen)
}
