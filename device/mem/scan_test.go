package mem_test

import (
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/devicetest"
	"github.com/kvarray/kvarray/device/mem"
)

func TestScan(t *testing.T) { devicetest.RunScan(t, mem.New()) }

// onlyDevice hides mem's Scanner, to test device.Scan's fallback.
type onlyDevice struct{ device.Device }

func TestScanFallback(t *testing.T) { devicetest.RunScan(t, onlyDevice{mem.New()}) }
