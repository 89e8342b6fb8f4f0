package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/redis"
	"github.com/kvarray/kvarray/device/redis/redistest"
	"github.com/kvarray/kvarray/mechanism/replication"
)

// ownerRig is six redis-server devices and a way to open the array on
// them as another process would: its own device connections.
type ownerRig struct {
	t    *testing.T
	srvs []*redistest.Server
}

func (r *ownerRig) devices() []device.Device {
	r.t.Helper()
	devs := make([]device.Device, len(r.srvs))
	for i, s := range r.srvs {
		d, err := redis.Open(context.Background(), s.URL(0))
		if err != nil {
			r.t.Fatal(err)
		}
		devs[i] = d
	}
	return devs
}

func ownerOpts(id string, lease time.Duration, takeover bool) []array.Option {
	return []array.Option{array.WithMechanisms(replication.New(3)),
		array.WithOwner(array.Owner{ID: id, Process: "test", Lease: lease, Takeover: takeover})}
}

// TestOneOwnerPerArray (issue 40, item 1): a second process on the
// array's redis devices is refused while the first holds its lease;
// with --takeover it deposes the first, whose late writes the devices
// refuse; and every acknowledged value reads back through a third.
func TestOneOwnerPerArray(t *testing.T) {
	redistest.Need(t, "redis-server")
	r := &ownerRig{t: t, srvs: redistest.StartN(t, nDevs)}
	ctx := context.Background()
	lease := 2 * time.Second
	a, err := array.Create(ctx, r.devices(), ownerOpts("host-a", lease, false)...)
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string][]byte{}
	put := func(a *array.Array, k, v string) error {
		err := a.Store(ctx, []byte(k), []byte(v))
		if err == nil {
			acked[k] = []byte(v)
		}
		return err
	}
	for i := range 50 {
		if err := put(a, fmt.Sprintf("k%02d", i), "a-"+fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}

	// One started while the other runs: refused, naming the owner.
	_, err = array.Open(ctx, r.devices(), ownerOpts("host-b", lease, false)...)
	if !errors.Is(err, array.ErrOwned) || !bytes.Contains([]byte(err.Error()), []byte("host-a")) {
		t.Fatalf("a second owner opened a leased array: %v", err)
	}
	// Past the lease, still renewed: still refused.
	time.Sleep(lease + lease/2)
	if _, err := array.Open(ctx, r.devices(), ownerOpts("host-b", lease, false)...); !errors.Is(err, array.ErrOwned) {
		t.Fatalf("a second owner opened an array whose lease is renewed: %v", err)
	}

	// Taken over: the first is deposed, its writes refused by the devices.
	b, err := array.Open(ctx, r.devices(), ownerOpts("host-b", lease, true)...)
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	err = a.Store(ctx, []byte("k00"), []byte("late write of the deposed owner"))
	if err == nil || !errors.Is(err, device.ErrFenced) && !errors.Is(err, array.ErrDeposed) {
		t.Fatalf("a deposed owner's write: %v", err)
	}
	select {
	case <-a.DeposedC():
	case <-time.After(lease):
		t.Fatal("the deposed owner does not know it")
	}
	if err := a.Store(ctx, []byte("k01"), []byte("another late write")); !errors.Is(err, array.ErrDeposed) {
		t.Fatalf("a write after being deposed: %v", err)
	}
	_ = a.Close()
	for i := range 50 {
		if i%2 == 0 {
			if err := put(b, fmt.Sprintf("k%02d", i), "b-"+fmt.Sprint(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// Released at close: a third opens at once, and reads every value.
	c, err := array.Open(ctx, r.devices(), ownerOpts("host-c", lease, false)...)
	if err != nil {
		t.Fatalf("open after the owner closed: %v", err)
	}
	defer c.Close()
	for k, v := range acked {
		got, err := c.Retrieve(ctx, []byte(k))
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("%s: %q, %v; want %q", k, got, err, v)
		}
	}
}

// TestOwnersAtOnce: two processes opening the same array at the same
// time: at most one gets it, and the other writes nothing.
func TestOwnersAtOnce(t *testing.T) {
	redistest.Need(t, "redis-server")
	r := &ownerRig{t: t, srvs: redistest.StartN(t, nDevs)}
	ctx := context.Background()
	a, err := array.Create(ctx, r.devices(), ownerOpts("creator", time.Second, false)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for round := range 10 {
		var wg sync.WaitGroup
		arrays := make([]*array.Array, 2)
		errs := make([]error, 2)
		for i := range 2 {
			devs := r.devices()
			wg.Go(func() {
				arrays[i], errs[i] = array.Open(ctx, devs, ownerOpts(fmt.Sprintf("host-%d", i), 5*time.Second, false)...)
			})
		}
		wg.Wait()
		won := 0
		for i := range 2 {
			if errs[i] == nil {
				won++
				continue
			}
			if !errors.Is(errs[i], array.ErrOwned) {
				t.Fatalf("round %d: open %d: %v", round, i, errs[i])
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d of 2 processes opened the array (%v)", round, won, errs)
		}
		for i := range 2 {
			if arrays[i] != nil {
				if err := arrays[i].Store(ctx, []byte("k"), []byte(fmt.Sprint(round))); err != nil {
					t.Fatalf("round %d: the owner cannot write: %v", round, err)
				}
				if err := arrays[i].Close(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}
