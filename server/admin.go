package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/mechanism"
)

// The KVARRAY.* commands administer the array. Those flagged admin are
// for admin users only (auth.go); the CLI reaches them through the admin
// socket (ServeAdmin).

// cmdStatus: KVARRAY.STATUS [DEEP], the array's Status as JSON (what
// `kvarray status --json [--deep]` prints).
func cmdStatus(c *call) {
	var opts []array.StatusOption
	switch {
	case len(c.args) == 1:
	case len(c.args) == 2 && strings.EqualFold(string(c.args[1]), "deep"):
		opts = append(opts, array.StatusDeep())
	default:
		c.w.WriteError("ERR syntax error: KVARRAY.STATUS [DEEP]")
		return
	}
	st, err := c.s.a.Status(c.ctx, opts...)
	if err != nil {
		c.fail(err)
		return
	}
	data, err := json.Marshal(st)
	if err != nil {
		c.fail(err)
		return
	}
	c.w.WriteBulk(data)
}

// cmdKvSet: KVARRAY.SET key value mechanism.
func cmdKvSet(c *call) {
	c.using = string(c.args[3])
	if _, _, ok := c.updateRead(c.args[1], false, func(value, bool) (value, bool, string) {
		return value{v: c.args[2], at: 0, raw: false}, true, ""
	}); ok {
		c.ok()
	}
}

// memDevice returns device DEV of a KVARRAY.FAIL / RECOVER command, which
// must be a mem device the server was given.
func (c *call) memDevice(what string) (int, *mem.Device, bool) {
	i, err := strconv.Atoi(string(c.args[1]))
	if err != nil {
		c.error("ERR value is not an integer or out of range")
		return 0, nil, false
	}
	n := c.s.a.N()
	switch {
	case i < 0 || i >= n:
		c.error(fmt.Sprintf("ERR %s: no device %d: the array has devices 0 to %d", what, i, n-1))
		return 0, nil, false
	case len(c.s.o.devices) != n:
		c.error(fmt.Sprintf("ERR %s: the server was not given the array's devices (server.WithDevices)", what))
		return 0, nil, false
	}
	d, ok := c.s.o.devices[i].(*mem.Device)
	if !ok {
		name := "?"
		if info, err := c.s.o.devices[i].Info(context.Background()); err == nil {
			name = info.Name
		}
		c.error(fmt.Sprintf("ERR %s: device %d (%s) is not a mem device: only mem devices can be failed and recovered on command", what, i, name))
		return 0, nil, false
	}
	return i, d, true
}

// cmdFail: KVARRAY.FAIL DEV fails mem device DEV (every operation on it
// fails until KVARRAY.RECOVER) and marks it failed in the array at once,
// rather than at its next operation.
func cmdFail(c *call) {
	i, d, ok := c.memDevice("KVARRAY.FAIL")
	if !ok {
		return
	}
	d.Fail()
	c.s.a.SetDeviceState(i, mechanism.Failed)
	c.ok()
}

// cmdRecover: KVARRAY.RECOVER DEV brings failed mem device DEV back with
// the data it had, as a device that was only unreachable, and resyncs it:
// the array re-admits it and repairs the keys whose writes it missed
// (array.Resync). The reply is the resync's report as JSON (what `kvarray
// resync --json` prints); a device the array had not marked failed is
// only brought back, with an empty report.
func cmdRecover(c *call) {
	i, d, ok := c.memDevice("KVARRAY.RECOVER")
	if !ok {
		return
	}
	d.Recover()
	rep := array.RebuildReport{Dev: i}
	if c.s.a.DeviceState(i) == mechanism.Failed {
		var err error
		if rep, err = c.s.a.Resync(c.ctx, i); err != nil {
			c.error(fmt.Sprintf("ERR KVARRAY.RECOVER: device %d answers again, but resyncing it failed: %s", i, errorReply(err)[len("ERR "):]))
			return
		}
	}
	data, err := json.Marshal(rep)
	if err != nil {
		c.fail(err)
		return
	}
	c.w.WriteBulk(data)
}

// Scrub runs the array's Scrub as one of the server's heal operations:
// listed by Tasks (so in KVARRAY.STATUS and INFO) and logged as it
// starts, progresses and ends.
func (s *Server) Scrub(ctx context.Context, repair bool, opts ...array.HealOption) (array.ScrubReport, error) {
	track, done := s.startTask("scrub", -1)
	rep, err := s.a.Scrub(ctx, repair, append(opts, track...)...)
	done(err)
	return rep, err
}

// cmdScrub: KVARRAY.SCRUB [REPAIR] [WORKERS n] runs array.Scrub.
func cmdScrub(c *call) {
	repair := false
	opts, ok := c.healOptions(1, &repair)
	if !ok {
		return
	}
	rep, err := c.s.Scrub(c.ctx, repair, opts...)
	if err != nil {
		c.fail(err)
		return
	}
	c.json(rep)
}

// cmdRebuild: KVARRAY.REBUILD DEV [WORKERS n] rebuilds device DEV. A mem device that
// is not already being rebuilt is first replaced by an empty one, as a new
// drive in its slot; any other device must have been replaced already
// (`kvarray replace`).
func cmdRebuild(c *call) {
	i, ok := c.device("KVARRAY.REBUILD", 1)
	if !ok {
		return
	}
	opts, ok := c.healOptions(2, nil)
	if !ok {
		return
	}
	if c.s.a.DeviceState(i) != mechanism.Rebuilding {
		var d *mem.Device
		if len(c.s.o.devices) == c.s.a.N() {
			d, _ = c.s.o.devices[i].(*mem.Device)
		}
		if d == nil {
			c.error(fmt.Sprintf("ERR KVARRAY.REBUILD: device %d is %v: replace it first (kvarray replace)", i, c.s.a.DeviceState(i)))
			return
		}
		d.Replace()
		if err := c.s.a.ReplaceDevice(c.ctx, i, nil); err != nil {
			c.fail(err)
			return
		}
	}
	track, done := c.s.startTask("rebuild", i)
	rep, err := c.s.a.Rebuild(c.ctx, i, append(opts, track...)...)
	done(err)
	if err != nil {
		c.fail(err)
		return
	}
	c.json(rep)
}

// json replies with v encoded as JSON in a bulk string.
func (c *call) json(v any) {
	data, err := json.Marshal(v)
	if err != nil {
		c.fail(err)
		return
	}
	c.w.WriteBulk(data)
}
