package config

import (
	"time"

	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/mechanism/hashing"
	"github.com/kvarray/kvarray/mechanism/packing"
	"github.com/kvarray/kvarray/mechanism/replication"
	"github.com/kvarray/kvarray/mechanism/splitting"
)

// mechanismRow is one mechanism a config can name.
type mechanismRow struct {
	name string
	// enabled reports whether the config makes the mechanism available
	// (its section is present); nil means always.
	enabled func(c *Config) bool
	// factory builds the mechanism from its (validated) section.
	factory func(c *Config) mechanism.Factory
}

// mechanisms is the table of the reliability mechanisms this build knows,
// by the name configs use. Every enabled one is given to the array, so that
// values written with any of them (including per-call overrides) can be
// read back. To add a mechanism, add one row here: Validate,
// Options and Default pick it up from the table.
var mechanisms = []mechanismRow{
	{
		name:    hashing.Name,
		factory: func(*Config) mechanism.Factory { return hashing.New() },
	},
	{
		name:    replication.Name,
		factory: func(c *Config) mechanism.Factory { return replication.New(c.Replication.Copies) },
	},
	{
		name:    splitting.Name,
		enabled: func(c *Config) bool { return c.Splitting != nil },
		factory: func(c *Config) mechanism.Factory { return splitting.New(c.Splitting.K, c.Splitting.R) },
	},
	{
		name:    packing.Name,
		enabled: func(c *Config) bool { return c.Packing != nil },
		factory: func(c *Config) mechanism.Factory {
			return packing.New(c.Packing.K, c.Packing.R, time.Duration(c.Packing.Wait))
		},
	},
}

// sections are the config sections that configure a mechanism, by
// mechanism name, present or not in this build's table.
func (c *Config) sections() map[string]bool {
	return map[string]bool{
		"replication": c.Replication != nil,
		"splitting":   c.Splitting != nil,
		"packing":     c.Packing != nil,
	}
}

func lookup(name string) *mechanismRow {
	for i := range mechanisms {
		if mechanisms[i].name == name {
			return &mechanisms[i]
		}
	}
	return nil
}

// available reports whether this build has the named mechanism.
func available(name string) bool { return lookup(name) != nil }

// Mechanisms returns the names of the mechanisms this build knows.
func Mechanisms() []string {
	names := make([]string, len(mechanisms))
	for i, m := range mechanisms {
		names[i] = m.name
	}
	return names
}

func (m *mechanismRow) on(c *Config) bool { return m.enabled == nil || m.enabled(c) }

// factories returns the factories of the mechanisms c enables, the default
// first so that the array reports it first.
func (c *Config) factories() []mechanism.Factory {
	var fs []mechanism.Factory
	if m := lookup(c.Default); m != nil && m.on(c) {
		fs = append(fs, m.factory(c))
	}
	for i := range mechanisms {
		m := &mechanisms[i]
		if m.name != c.Default && m.on(c) {
			fs = append(fs, m.factory(c))
		}
	}
	return fs
}
