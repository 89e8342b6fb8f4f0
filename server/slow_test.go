package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/mechanism/replication"
)

// TestInfoSlowDevice: a device behind 200 ms of added latency shows as
// slow in INFO kvarray (devices_slow, its state) while every SET and GET
// is answered, and as healthy again once the latency is gone.
func TestInfoSlowDevice(t *testing.T) {
	const slow = 2
	delay := &faultdev.Delay{}
	devs := make([]device.Device, 6)
	for i := range devs {
		devs[i] = mem.New(mem.WithName(fmt.Sprintf("mem:dev%d", i)))
		if i == slow {
			devs[i] = faultdev.Wrap(devs[i], delay)
		}
	}
	a, err := array.Create(context.Background(), devs, array.WithMechanisms(replication.New(3)),
		array.WithSlowDevices(array.SlowPolicy{Every: 10 * time.Millisecond, Floor: 20 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	ts := serveArray(t, a, devs)
	rdb := ts.client()
	ctx := context.Background()
	info := func() string {
		t.Helper()
		s, err := rdb.Info(ctx, "kvarray").Result()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	n := 0
	set := func() {
		t.Helper()
		if err := rdb.Set(ctx, fmt.Sprintf("k%03d", n%200), fmt.Sprint(n), 0).Err(); err != nil {
			t.Fatalf("SET %d: %v", n, err)
		}
		n++
	}
	for range 50 {
		set()
	}
	delay.Set(200 * time.Millisecond)
	for a.DeviceState(slow) != mechanism.Slow {
		if n > 5000 {
			t.Fatalf("device %d is %v after %d SETs 200 ms slower than its peers", slow, a.DeviceState(slow), n)
		}
		set()
	}
	if s := info(); !strings.Contains(s, "devices_slow:1\r\n") || !strings.Contains(s, fmt.Sprintf("device%d:name=mem:dev%d,state=slow,", slow, slow)) {
		t.Fatalf("INFO kvarray with device %d slow:\n%s", slow, s)
	}
	for range 200 {
		set()
	}
	delay.Set(0)
	deadline := time.Now().Add(2 * time.Minute)
	for s := info(); !strings.Contains(s, "devices_slow:0\r\n") || !strings.Contains(s, fmt.Sprintf("device%d:name=mem:dev%d,state=healthy,", slow, slow)); s = info() {
		if time.Now().After(deadline) {
			t.Fatalf("INFO kvarray 2 minutes after the latency is gone:\n%s", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := max(0, n-200); i < n; i++ {
		if got, err := rdb.Get(ctx, fmt.Sprintf("k%03d", i%200)).Result(); err != nil || got != fmt.Sprint(i) {
			t.Fatalf("GET k%03d: %q, %v; want %d", i%200, got, err, i)
		}
	}
}
