package mem_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/devicetest"
	"github.com/kvarray/kvarray/device/mem"
)

func TestScan(t *testing.T) { devicetest.RunScan(t, mem.New()) }

// onlyDevice hides mem's Scanner, to test device.Scan's fallback.
type onlyDevice struct{ device.Device }

func TestScanFallback(t *testing.T) { devicetest.RunScan(t, onlyDevice{mem.New()}) }

// TestScanFilteredTags: with a tagger, want sees each value's tag (0 past
// device.MaxTag), a skipped key is not handed out, a KeyOnly key comes
// without its value and a KeyValue key with it; without a tagger want
// sees 0 and every key not skipped comes with its value.
func TestScanFilteredTags(t *testing.T) {
	for _, tagged := range []bool{true, false} {
		var opts []mem.Option
		if tagged {
			opts = append(opts, mem.WithTagger(func(v []byte) device.Tag { return device.Tag(v[0] - '0') }))
		}
		d := mem.New(opts...)
		ctx := context.Background()
		for i := range 27 {
			if err := d.Store(ctx, fmt.Appendf(nil, "key-%02d", i), fmt.Appendf(nil, "%d-value", i%9)); err != nil {
				t.Fatal(err)
			}
		}
		wants := []device.Want{device.Skip, device.KeyOnly, device.KeyValue}
		tags := map[string]device.Tag{}
		got := map[string][]byte{}
		err := d.ScanFiltered(ctx, nil, nil, func(k []byte, tag device.Tag) device.Want {
			tags[string(k)] = tag
			var i int
			_, _ = fmt.Sscanf(string(k), "key-%d", &i)
			return wants[i%3]
		}, func(k, v []byte) error {
			got[string(k)] = bytes.Clone(v)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 27 {
			k := fmt.Sprintf("key-%02d", i)
			want := device.Tag(i % 9)
			if !tagged || want > device.MaxTag {
				want = 0
			}
			if tags[k] != want {
				t.Errorf("tagged %v, %s: tag %d, want %d", tagged, k, tags[k], want)
			}
			v, seen := got[k]
			switch w := wants[i%3]; {
			case w == device.Skip && seen:
				t.Errorf("tagged %v, %s: skipped, handed out", tagged, k)
			case w != device.Skip && !seen:
				t.Errorf("tagged %v, %s: %v, not handed out", tagged, k, w)
			case w == device.KeyOnly && tagged && v != nil:
				t.Errorf("tagged %v, %s: key only, its value handed out", tagged, k)
			case (w == device.KeyValue || (w == device.KeyOnly && !tagged)) && string(v) != fmt.Sprintf("%d-value", i%9):
				t.Errorf("tagged %v, %s: value %q", tagged, k, v)
			}
		}
	}
}
