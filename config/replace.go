package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/kvarray/kvarray/device"
)

// Replacing a device (`kvarray replace`): the config names the device at
// each position, so swapping one in means opening it alone, and rewriting
// that one entry of the file.

// SetDevice sets devices[i] to spec and validates the result (a spec
// naming the same device as another position is refused). On error c is
// unchanged.
func (c *Config) SetDevice(i int, spec string) error {
	if i < 0 || i >= len(c.Devices) {
		return fmt.Errorf("device %d: the config lists devices 0..%d", i, len(c.Devices)-1)
	}
	d := *c
	d.Devices = slices.Clone(c.Devices)
	d.Devices[i] = spec
	if err := d.Validate(); err != nil {
		return err
	}
	c.Devices = d.Devices
	return nil
}

// DeviceName returns the name devices[i] has in messages and status
// ("pebble:/abs/dir", "mem:NAME", "redis://HOST:PORT/DB").
func (c *Config) DeviceName(i int) (string, error) {
	sp, err := c.parseSpec(c.Devices[i])
	if err != nil {
		return "", err
	}
	return sp.name(), nil
}

// DeviceDir returns the directory of devices[i], resolved against the
// config's directory, when it is a pebble device.
func (c *Config) DeviceDir(i int) (string, bool) {
	sp, err := c.parseSpec(c.Devices[i])
	if err != nil || sp.kind != "pebble" {
		return "", false
	}
	return sp.arg, true
}

// OpenDevice opens devices[i] alone, with the limits and capacity every
// device of the config gets. create is as for OpenDevices. Unlike
// OpenDevices, a device that cannot be opened is an error naming it, not
// a stand-in.
func (c *Config) OpenDevice(i int, create bool) (device.Device, error) {
	if i < 0 || i >= len(c.Devices) {
		return nil, fmt.Errorf("device %d: the config lists devices 0..%d", i, len(c.Devices)-1)
	}
	sp, err := c.parseSpec(c.Devices[i])
	if err != nil {
		return nil, err
	}
	one := *c
	one.Devices = []string{c.Devices[i]}
	devs, errs := openDevices(&one, create)
	if errs[0] != nil {
		_ = devs[0].Close()
		return nil, fmt.Errorf("%s: %w", sp.name(), errs[0])
	}
	return devs[0], nil
}

// SaveDevice rewrites the config file at path with devices[i] set to
// spec. Only that entry changes: the rest of the file, comments included,
// is kept (re-indented). The new content is validated as Load would, and
// written to a temporary file renamed over path, so that an interrupted
// save leaves the old file whole.
func SaveDevice(path string, i int, spec string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("config %s: %w", path, yamlError(err))
	}
	var seq *yaml.Node
	if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		m := doc.Content[0]
		for j := 0; j+1 < len(m.Content); j += 2 {
			if m.Content[j].Value == "devices" && m.Content[j+1].Kind == yaml.SequenceNode {
				seq = m.Content[j+1]
			}
		}
	}
	if seq == nil {
		return fmt.Errorf("config %s: no devices list to update", path)
	}
	if i < 0 || i >= len(seq.Content) {
		return fmt.Errorf("config %s: device %d: the file lists devices 0..%d", path, i, len(seq.Content)-1)
	}
	el := seq.Content[i]
	el.Kind, el.Tag, el.Value, el.Style = yaml.ScalarNode, "!!str", spec, 0
	el.Content = nil
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if _, err := Parse(buf.Bytes(), dir); err != nil {
		return fmt.Errorf("config %s: with devices[%d] = %q: %w", path, i, spec, err)
	}
	if err := replaceFile(path, buf.Bytes()); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// replaceFile writes data to a temporary file next to path and renames it
// over path, keeping path's permissions.
func replaceFile(path string, data []byte) error {
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".kvarray-*.yaml")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), mode)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// Save validates c and writes it to path as Marshal does (the file's
// comments are not kept), re-reading the result as Load would before it
// replaces path, atomically and keeping path's permissions: a config can
// hold passwords. `kvarray tune` writes its thresholds with it.
func (c *Config) Save(path string) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	data, err := c.Marshal()
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if _, err := Parse(data, dir); err != nil {
		return fmt.Errorf("config %s: as written: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if err := replaceFile(path, data); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}
