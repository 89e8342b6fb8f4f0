package server

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/device"
)

// rendezvous holds every store of a key containing "gate-a" until a store
// of a key containing "gate-b" has reached a device (a batch that holds
// both passes: they run together). If the second never comes (the first
// command blocks the pipeline), the held store goes on after a while and
// the rendezvous records that it was missed. The while is as long as the
// test client waits for a reply, less a second: under the race detector
// on a loaded 2-core machine, 5 s once passed first.
type rendezvous struct {
	once   sync.Once
	b      chan struct{}
	missed atomic.Bool
}

// gated is a device whose batches pass through a rendezvous.
type gated struct {
	device.Device
	r *rendezvous
}

func (g gated) Batch(ctx context.Context, ops []device.Op) error {
	stores := func(gate string) bool {
		return slices.ContainsFunc(ops, func(op device.Op) bool {
			return op.Kind == device.OpStore && bytes.Contains(op.Key, []byte(gate))
		})
	}
	if stores("gate-b") {
		g.r.once.Do(func() { close(g.r.b) })
	}
	if stores("gate-a") {
		select {
		case <-g.r.b:
		case <-time.After(9 * time.Second):
			g.r.missed.Store(true)
		}
	}
	return g.Device.Batch(ctx, ops)
}

// TestPipelineConcurrent: pipelined SETs of different keys run
// concurrently (the first cannot finish until the second has reached the
// devices), replies come in order, and commands on one key, and
// barriers (MULTI/EXEC, SELECT), keep the pipeline's order.
func TestPipelineConcurrent(t *testing.T) {
	cfg, err := config.Parse([]byte(memHybrid), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := &rendezvous{b: make(chan struct{})}
	devs := config.OpenDevices(cfg, true)
	for i := range devs {
		devs[i] = gated{Device: devs[i], r: r}
	}
	a, err := array.Create(context.Background(), devs, cfg.Options()...)
	if err != nil {
		t.Fatal(err)
	}
	ts := serveArray(t, a, devs)
	// The server's first recount of the keys waits, between pages, for
	// the writes in flight, and holds up writes that come meanwhile: so
	// SET gate-b would wait for SET gate-a, which waits for it here.
	if err := ts.srv.start(); err != nil { // once: as the first command would
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, _, exact := ts.srv.ks.Count(0); exact {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the keys are still being counted after 10 s")
		}
	}
	c := ts.dial()

	type want struct {
		cmd   []string
		reply string
	}
	script := []want{
		{[]string{"SET", "gate-a", "1"}, "OK"},
		{[]string{"SET", "gate-b", "2"}, "OK"},
		{[]string{"GET", "gate-a"}, "1"},
		{[]string{"SET", "gate-a", "3"}, "OK"},
		{[]string{"GET", "gate-a"}, "3"},
		{[]string{"MULTI"}, "OK"},
		{[]string{"SET", "x", "in-tx"}, "QUEUED"},
		{[]string{"GET", "gate-b"}, "QUEUED"},
		{[]string{"EXEC"}, "[OK 2]"},
		{[]string{"GET", "x"}, "in-tx"},
		{[]string{"SELECT", "1"}, "OK"},
		{[]string{"GET", "x"}, "<nil>"},
		{[]string{"SET", "x", "db1"}, "OK"},
		{[]string{"SELECT", "0"}, "OK"},
		{[]string{"GET", "x"}, "in-tx"},
	}
	// Fifty increments of one key and fifty SETs of others, interleaved:
	// the increments answer 1..50 in order.
	for i := 1; i <= 50; i++ {
		script = append(script,
			want{[]string{"INCR", "n"}, strconv.Itoa(i)},
			want{[]string{"SET", fmt.Sprintf("k%d", i), "v"}, "OK"})
	}
	script = append(script, want{[]string{"GET", "n"}, "50"})
	var pipe []byte
	for _, w := range script {
		pipe = append(pipe, encode(w.cmd...)...)
	}
	c.send(pipe)
	for i, w := range script {
		if got := flat(c.read()); got != w.reply {
			t.Errorf("reply %d to %v: %s, want %s", i, w.cmd, got, w.reply)
		}
	}
	if r.missed.Load() {
		t.Error("SET gate-a waited for SET gate-b in vain: pipelined commands of different keys ran one after the other")
	}
}

// flat shows a reply as its string, <nil>, or [elements].
func flat(r reply) string {
	switch {
	case r.null:
		return "<nil>"
	case r.kind == '*':
		parts := make([]string, len(r.elems))
		for i, e := range r.elems {
			parts[i] = flat(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return r.str
}
