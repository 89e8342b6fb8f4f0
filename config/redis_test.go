package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/redis/redistest"
)

// TestRedisDevices creates an array on six redis-servers from a config,
// reopens it, and checks that a server that cannot be reached becomes a
// failed device named by its spec while the array serves from the others.
func TestRedisDevices(t *testing.T) {
	ctx := context.Background()
	srvs := redistest.StartN(t, 6)
	var specs []string
	for i, s := range srvs {
		specs = append(specs, s.URL(i%2)) // databases 0 and 1
	}
	y := fmt.Sprintf("devices: [%s]\nreplication: {copies: 3}\n", strings.Join(specs, ", "))
	c, err := Parse([]byte(y), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, err := Create(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	v := bytes.Repeat([]byte("redis!"), 2000)
	for i := range 20 {
		if err := a.Store(ctx, fmt.Appendf(nil, "key-%02d", i), v); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if a, err := Create(ctx, c); err == nil {
		a.Close()
		t.Fatal("Create over servers that hold an array succeeded")
	}

	srvs[2].Kill()
	devs, errs := openDevices(c, false)
	info, err := devs[2].Info(ctx)
	if !errors.Is(err, device.ErrDeviceFailed) || info.Name != specs[2] || !errors.Is(errs[2], device.ErrDeviceFailed) {
		t.Errorf("unreachable server: Info %+v, %v; open error %v", info, err, errs[2])
	}
	if strings.Count(errs[2].Error(), specs[2]) != 0 {
		t.Errorf("open error repeats the name: %v", errs[2])
	}
	closeAll(devs)

	a, err = OpenConfig(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := range 20 {
		got, err := a.Retrieve(ctx, fmt.Appendf(nil, "key-%02d", i))
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("retrieve key-%02d with a server down: %d bytes, %v", i, len(got), err)
		}
	}
	st, err := a.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, ds := range st.Devices {
		want := "healthy"
		if i == 2 {
			want = "failed"
		}
		if ds.Name != specs[i] || ds.State != want {
			t.Errorf("device %d: %s %s (%s), want %s %s", i, ds.Name, ds.State, ds.Reason, specs[i], want)
		}
	}
	if r := st.Devices[2].Reason; !strings.Contains(r, "connection refused") {
		t.Errorf("failed device's reason does not say why: %q", r)
	}
}
