package pebble

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrInUse is returned by Open when another process holds the device's
// directory: a device has one writer (the array's metadata cache and its
// per-key order depend on it). It wraps device.ErrDeviceFailed too.
var ErrInUse = errors.New("in use by another process")

// ownerFile names the process that holds the directory, for ErrInUse's
// message: Pebble's own lock records none. Pebble ignores files it did
// not name.
const ownerFile = "kvarray-owner"

// claim records this process as the directory's holder.
func claim(dir string) {
	cmd, _ := os.ReadFile("/proc/self/cmdline")
	line := strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
	_ = os.WriteFile(filepath.Join(dir, ownerFile), fmt.Appendf(nil, "%d %s\n", os.Getpid(), line), 0o644)
}

// inUse turns the error of an Open that found the directory locked into
// ErrInUse naming the holder, when ownerFile names a live process.
func inUse(dir string, err error) error {
	if strings.Contains(err.Error(), "lock held by current process") {
		return fmt.Errorf("%w: this process has it open already: %w", ErrInUse, failed(err))
	}
	if !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EWOULDBLOCK) {
		return nil
	}
	who := "a process that did not say which"
	if b, rerr := os.ReadFile(filepath.Join(dir, ownerFile)); rerr == nil {
		pid, cmd, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		if n, perr := strconv.Atoi(pid); perr == nil && syscall.Kill(n, 0) == nil {
			who = fmt.Sprintf("process %d (%s)", n, cmd)
		}
	}
	return fmt.Errorf("%w: %s holds its lock; stop it, or reach the array through it (kvarray serve's admin socket): %w",
		ErrInUse, who, failed(err))
}
