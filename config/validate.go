package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism/splitting"
)

// maxDevices is the array's limit (positions are 16-bit).
const maxDevices = 1<<16 - 1

// maxShards bounds k+r and copies: the most pieces a header can record.
const maxShards = 255

// Validate reports every problem with the config on one line, wrapping
// ErrInvalid: no devices, duplicate or malformed device specs, an unknown
// mode or mechanism, a mechanism named without its section, thresholds out
// of order or with the catch-all rule not last, more copies or shards than
// devices, and limits that leave no room for data.
func (c *Config) Validate() error {
	d := c.withDefaults()
	var p problems
	n := len(d.Devices)
	switch {
	case n == 0:
		p.add("devices: none listed; want at least one, e.g. devices: [pebble:./data/dev0]")
	case n > maxDevices:
		p.add("devices: %d listed, at most %d", n, maxDevices)
	}
	seen := map[string]int{}
	for i, s := range d.Devices {
		sp, err := d.parseSpec(s)
		if err != nil {
			p.add("devices[%d]: %v", i, err)
			continue
		}
		if j, dup := seen[sp.id()]; dup {
			p.add("devices[%d] %q is the same device as devices[%d] %q", i, s, j, d.Devices[j])
			continue
		}
		seen[sp.id()] = i
	}
	if len(d.Weights) > 0 && len(d.Weights) != n {
		p.add("weights: %d listed for %d devices; want one per device, in the devices' order", len(d.Weights), n)
	}
	for i, w := range d.Weights {
		if w <= 0 {
			p.add("weights[%d]: %d; want a positive size (only the weights' ratios count)", i, w)
		}
	}

	if d.Databases < 0 || d.Databases > 255 {
		p.add("databases: %d; want 1 to 255 (default 16)", d.Databases)
	}
	if d.Mode != "standalone" && d.Mode != "hybrid" {
		p.add("mode %q: want standalone or hybrid", d.Mode)
	}
	d.checkRM(&p, "default", d.Default)
	var prev *Size
	prevIdx := 0
	for i, t := range d.Thresholds {
		field := fmt.Sprintf("thresholds[%d]", i)
		if t.RM == "" {
			p.add("%s: rm missing (want a mechanism name: %s)", field, strings.Join(Mechanisms(), ", "))
		} else {
			d.checkRM(&p, field+".rm", t.RM)
		}
		switch {
		case t.Max == nil:
			if i != len(d.Thresholds)-1 {
				p.add("%s has no max, so it takes every size, but it is not the last rule: the rules after it would never apply", field)
			}
		case *t.Max <= 0:
			p.add("%s.max must be positive (leave max out on the last rule to take every larger size)", field)
		case prev != nil && *t.Max <= *prev:
			p.add("%s.max %v is not larger than thresholds[%d].max %v: list the rules in ascending order of max", field, *t.Max, prevIdx, *prev)
		}
		if t.Max != nil && *t.Max > 0 {
			prev, prevIdx = t.Max, i
		}
	}

	secs := d.sections()
	names := make([]string, 0, len(secs))
	for name := range secs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if secs[name] && !available(name) {
			p.add("%s: this build has no %s mechanism yet (it has %s); remove the section", name, name, strings.Join(Mechanisms(), ", "))
		}
	}
	if r := d.Replication; r != nil {
		switch {
		case r.Copies < 1:
			p.add("replication.copies %d: want at least 1", r.Copies)
		case r.Copies > maxShards:
			p.add("replication.copies %d: at most %d", r.Copies, maxShards)
		case n > 0 && r.Copies > n:
			p.add("replication.copies %d is more than the %d devices listed: each copy needs its own device", r.Copies, n)
		}
	}
	if s := d.Splitting; s != nil {
		checkKR(&p, "splitting", s.K, s.R, n)
	}
	if k := d.Packing; k != nil {
		// Packing shrinks its sets to N-r members on fewer than k+r
		// devices, so only r is bounded by the device count.
		checkKR(&p, "packing", k.K, k.R, 0)
		if n > 0 && k.R >= n {
			p.add("packing.r %d leaves no device for members: the config lists %d devices", k.R, n)
		}
		if k.Wait < 0 {
			p.add("packing.wait %v: must not be negative", k.Wait)
		}
	}

	if t := d.Tiny; t != nil {
		switch {
		case d.Packing == nil:
			p.add("tiny: buckets are stored with packing; add a packing section")
		case t.Max < 1:
			p.add("tiny.max %v: want a positive size (e.g. 64B)", t.Max)
		case t.Buckets < 1 || int64(t.Buckets) > 1<<32-1:
			p.add("tiny.buckets %d: want 1 to 4294967295 (about the tiny bytes expected / 8 KiB)", t.Buckets)
		}
	}

	dc := d.Device
	switch {
	case dc.MinKey < 1:
		p.add("device.min_key %d: want at least 1", dc.MinKey)
	case dc.MaxKey < dc.MinKey:
		p.add("device.max_key %d is smaller than device.min_key %d", dc.MaxKey, dc.MinKey)
	}
	if dc.MaxKey <= format.KeyOverhead {
		p.add("device.max_key %d leaves no room for user keys: internal keys add %d bytes to them", dc.MaxKey, format.KeyOverhead)
	}
	overhead := format.HeaderLen
	if d.Splitting != nil {
		overhead += splitting.FieldsLen
	}
	if dc.MaxValue <= Size(overhead) {
		p.add("device.max_value %v cannot hold a %d-byte piece header and data", dc.MaxValue, overhead)
	}
	if dc.Capacity < 0 {
		p.add("device.capacity %d: must not be negative (0 is unlimited)", dc.Capacity)
	}
	if dc.Cache < 0 {
		p.add("device.cache %d: must not be negative (0 is the default, %v)", dc.Cache, DefaultCache)
	}
	if pf := dc.Perf; pf != nil && (pf.Latency < 0 || pf.OpsPerSec < 0 || pf.BytesPerSec < 0) {
		p.add("device.perf: fields must not be negative")
	}
	if d.MaxValue < 0 {
		p.add("max_value %d: must be positive", d.MaxValue)
	}
	if s := d.Slow; s != nil && (s.Ratio < 0 || s.Floor < 0 || s.Ceiling < 0 || s.Grace < 0 || (s.Ratio > 0 && s.Ratio < 1)) {
		p.add("slow: ratio must be at least 1, floor, ceiling and grace not negative (0 takes the default)")
	}
	d.Serve.validate(&p)
	if len(p) > 0 {
		return p
	}
	return nil
}

// checkRM checks that field names a mechanism the config makes available.
func (c *Config) checkRM(p *problems, field, name string) {
	m := lookup(name)
	switch {
	case m == nil:
		p.add("%s: unknown mechanism %q (this build has %s)", field, name, strings.Join(Mechanisms(), ", "))
	case !m.on(c):
		p.add("%s: mechanism %s needs a %s section, e.g. %s: %s", field, name, name, name, example(name))
	}
}

func example(name string) string {
	if name == "packing" {
		return "{k: 4, r: 2, wait: 2ms}"
	}
	return "{k: 4, r: 2}"
}

func checkKR(p *problems, name string, k, r, n int) {
	switch {
	case k < 1:
		p.add("%s.k %d: want at least 1 data shard", name, k)
	case r < 1:
		p.add("%s.r %d: want at least 1 parity shard (use hashing for none)", name, r)
	case k+r > maxShards:
		p.add("%s: k+r = %d shards, at most %d", name, k+r, maxShards)
	case n > 0 && k+r > n:
		p.add("%s: k+r = %d shards need %d devices, the config lists %d", name, k+r, k+r, n)
	}
}
