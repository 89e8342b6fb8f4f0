package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSaveDevice(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kvarray.yaml")
	orig := `# my array
devices: [pebble:d0, pebble:d1, pebble:d2]  # three disks
mode: standalone
replication: {copies: 2}
`
	if err := os.WriteFile(path, []byte(orig), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := SaveDevice(path, 1, "pebble:spare"); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"pebble:d0", "pebble:spare", "pebble:d2"}; strings.Join(c.Devices, " ") != strings.Join(want, " ") {
		t.Errorf("devices %v, want %v", c.Devices, want)
	}
	text, _ := os.ReadFile(path)
	for _, w := range []string{"# my array", "# three disks", "copies: 2"} {
		if !strings.Contains(string(text), w) {
			t.Errorf("saved config lacks %q:\n%s", w, text)
		}
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want the file's 0600 kept", fi.Mode().Perm())
	}

	// Refused: the file is left alone.
	before, _ := os.ReadFile(path)
	for _, bad := range []struct {
		i    int
		spec string
		want string
	}{
		{0, "pebble:d2", "same device"},
		{3, "pebble:x", "devices 0..2"},
		{1, "ftp:x", "unknown device kind"},
	} {
		err := SaveDevice(path, bad.i, bad.spec)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("SaveDevice(%d, %q) = %v, want %q", bad.i, bad.spec, err, bad.want)
		}
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Errorf("a refused save changed the file:\n%s", after)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
}

func TestSetAndOpenDevice(t *testing.T) {
	dir := t.TempDir()
	c := Default("data", 3)
	c.SetDir(dir)
	if err := c.SetDevice(0, "pebble:data/dev1"); err == nil || c.Devices[0] != "pebble:"+filepath.Join("data", "dev0") {
		t.Errorf("SetDevice to a duplicate: %v, devices %v", err, c.Devices)
	}
	if err := c.SetDevice(2, "pebble:data/new"); err != nil || c.Devices[2] != "pebble:data/new" {
		t.Fatalf("SetDevice: %v, devices %v", err, c.Devices)
	}
	if d, ok := c.DeviceDir(2); !ok || d != filepath.Join(dir, "data", "new") {
		t.Errorf("DeviceDir = %q, %v", d, ok)
	}
	if _, err := c.OpenDevice(2, false); err == nil || !strings.Contains(err.Error(), "pebble:"+filepath.Join(dir, "data", "new")) {
		t.Errorf("OpenDevice of a missing directory without create: %v", err)
	}
	d, err := c.OpenDevice(2, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if name, err := c.DeviceName(2); err != nil || name != "pebble:"+filepath.Join(dir, "data", "new") {
		t.Errorf("DeviceName = %q, %v", name, err)
	}
}

// TestSave writes a config that reads back equal, keeps the file's
// permissions (a config can hold passwords), and refuses an invalid one
// without touching the file.
func TestSave(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kvarray.yaml")
	c := Default("data", 6)
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	small := Size(2 << 10)
	got.Thresholds = []Threshold{{Max: &small, RM: "replication"}, {RM: "splitting"}}
	if err := got.Save(path); err != nil {
		t.Fatal(err)
	}
	again, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Thresholds) != 2 || *again.Thresholds[0].Max != small || again.Thresholds[1].RM != "splitting" || again.Devices[5] != c.Devices[5] {
		t.Errorf("read back %+v", again)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after Save: %v, %v", fi.Mode(), err)
	}
	before, _ := os.ReadFile(path)
	again.Thresholds = []Threshold{{RM: "raid5"}}
	if err := again.Save(path); !errors.Is(err, ErrInvalid) {
		t.Errorf("saving an invalid config: %v", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("a refused Save changed the file")
	}
}
