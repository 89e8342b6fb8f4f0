package pebble

import (
	"testing"

	"github.com/kvarray/kvarray/device/devicetest"
)

func TestScan(t *testing.T) {
	d, err := Open(t.TempDir(), WithCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	devicetest.RunScan(t, d)
}
