package pebble

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/kvarray/kvarray/device"
)

// TestSecondOpenNamesTheHolder: a directory another process holds fails
// Open with ErrInUse naming that process, as a failed device; so does one
// this process holds already.
func TestSecondOpenNamesTheHolder(t *testing.T) {
	if dir := os.Getenv("KVARRAY_HOLD_DIR"); dir != "" {
		holdForParent(dir)
		return
	}
	dir := t.TempDir()
	holder := exec.Command(os.Args[0], "-test.run=^TestSecondOpenNamesTheHolder$")
	holder.Env = append(os.Environ(), "KVARRAY_HOLD_DIR="+dir)
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdin.Close(); _ = holder.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("holder process: %q, %v", line, err)
	}
	_, err = Open(dir)
	if !errors.Is(err, ErrInUse) || !errors.Is(err, device.ErrDeviceFailed) {
		t.Fatalf("open of a directory another process holds: %v, want ErrInUse and a failed device", err)
	}
	if !strings.Contains(err.Error(), "process "+strconv.Itoa(holder.Process.Pid)) {
		t.Errorf("open does not name the holder, process %d: %v", holder.Process.Pid, err)
	}
	_ = stdin.Close()
	_ = holder.Wait()

	d, err := Open(dir)
	if err != nil {
		t.Fatalf("open once the holder is gone: %v", err)
	}
	defer d.Close()
	if _, err := Open(dir); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "this process") {
		t.Errorf("second open in this process: %v", err)
	}
}

// holdForParent opens dir, says so, and keeps it until stdin closes.
func holdForParent(dir string) {
	d, err := Open(dir, WithCreate(true))
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	fmt.Println("held")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	_ = d.Close()
}
