package config

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/dustin/go-humanize"
	"gopkg.in/yaml.v3"
)

// Size is a byte count written in YAML as a plain integer or with a unit:
// "8KiB", "2MiB", "1GiB" (powers of 1024) or "8KB", "2MB" (powers of 1000).
type Size int64

// UnmarshalYAML implements yaml.Unmarshaler.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a size like 8KiB or 2MiB", n.Line)
	}
	v, err := parseSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*s = v
	return nil
}

func parseSize(text string) (Size, error) {
	v, err := humanize.ParseBytes(text)
	if err != nil {
		return 0, fmt.Errorf("size %q: want a byte count like 8KiB, 2MiB or 4096", text)
	}
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", text)
	}
	return Size(v), nil
}

// MarshalYAML writes exact binary multiples with their unit ("8KiB") and
// anything else as a plain byte count, so that a written config reads back
// to the same number.
func (s Size) MarshalYAML() (any, error) {
	if str := s.String(); str != strconv.FormatInt(int64(s), 10) {
		return str, nil
	}
	return int64(s), nil
}

// String writes s as MarshalYAML does.
func (s Size) String() string {
	units := []struct {
		name string
		n    int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}
	for _, u := range units {
		if s != 0 && int64(s)%u.n == 0 {
			return strconv.FormatInt(int64(s)/u.n, 10) + u.name
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// Duration is a time.Duration written in YAML as "2ms", "1.5s" and so on.
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return fmt.Errorf("line %d: duration %q: want a duration like 2ms or 1.5s", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }
