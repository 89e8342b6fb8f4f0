package array

import (
	"context"
	"errors"
	"sort"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/mechanism"
)

// DeviceStatus describes one device.
type DeviceStatus struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	// State is "healthy", "failed", "rebuilding" (replaced, not yet
	// rebuilt), "full" (read-only-full: serving reads, missing writes
	// until space is back), "slow" (answering much more slowly than its
	// peers: skipped, missing writes, until it is fast again) or
	// "degraded-behind" (serving, but with
	// ResyncKeys keys whose writes it missed still to resync).
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// ResyncKeys counts the keys the device's resync record lists: writes
	// it missed while failed, to bring up to date (Resync, Rebuild).
	ResyncKeys int   `json:"resync_keys"`
	Keys       int64 `json:"keys"`
	Used       int64 `json:"used_bytes"`
	Capacity   int64 `json:"capacity_bytes"`
}

// StateDegradedBehind is the State of a healthy device with keys to
// resync.
const StateDegradedBehind = "degraded-behind"

// MechanismStatus counts the objects stored with one mechanism.
type MechanismStatus struct {
	Name      string `json:"name"`
	Objects   int64  `json:"objects"`
	UserBytes int64  `json:"user_bytes"`
}

// Status is a report of the array's devices and contents.
type Status struct {
	ID          string            `json:"array_id"`
	Mode        string            `json:"mode"`
	Default     string            `json:"default_mechanism"`
	Devices     []DeviceStatus    `json:"devices"`
	Mechanisms  []MechanismStatus `json:"mechanisms"`
	Objects     int64             `json:"objects"`
	UserBytes   int64             `json:"user_bytes"`
	DeviceBytes int64             `json:"device_bytes"`
	// Overhead is device bytes per user byte (0 when empty).
	Overhead float64 `json:"storage_overhead"`
	// Unreadable counts objects whose header could not be read.
	Unreadable int64 `json:"unreadable_objects"`
	// Deep: the objects were counted (StatusDeep); without it Mechanisms,
	// Objects, UserBytes, Overhead and Unreadable are not filled in.
	Deep bool `json:"deep"`
	// Weights are the devices' placement weights (absent: unweighted).
	Weights []uint64 `json:"placement_weights,omitempty"`
	// Unclean: the process before did not close the array, and no scrub
	// --repair has run since (Array.Unclean).
	Unclean bool `json:"unclean_shutdown"`
}

// StatusOption modifies Status.
type StatusOption func(*statusOptions)

type statusOptions struct{ deep bool }

// StatusDeep makes Status count the objects and user bytes per mechanism,
// reading the header of every object: a pass over the keys, proportional
// to their number, that a device failing under it can slow to its
// timeout.
func StatusDeep() StatusOption { return func(o *statusOptions) { o.deep = true } }

// Status reports the devices' health and accounting: one Info call per
// device, whatever the number of keys. With StatusDeep it also counts the
// objects and user bytes per mechanism.
func (a *Array) Status(ctx context.Context, opts ...StatusOption) (Status, error) {
	var o statusOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := a.begin(); err != nil {
		return Status{}, err
	}
	defer a.end()
	st := Status{ID: a.hdr.id.String(), Mode: a.o.mode.String(), Default: a.def.Name(), Weights: a.Weights(), Unclean: a.Unclean()}
	for i := range a.env.N() {
		d, gen := a.env.DeviceGen(i)
		ds := DeviceStatus{Index: i, Name: a.env.Name(i), State: a.env.State(i).String(), ResyncKeys: a.env.MissedCount(i)}
		if a.env.State(i) == mechanism.Healthy && ds.ResyncKeys > 0 {
			ds.State = StateDegradedBehind
		}
		if r := a.reason(i); r != nil {
			ds.Reason = r.Error()
		}
		if why := a.slowReason(i); why != "" {
			// Not asked: it would keep Status waiting on it.
			ds.Reason = why
			st.Devices = append(st.Devices, ds)
			continue
		}
		info, err := a.probe(ctx, i, d, gen)
		if err != nil {
			if errors.Is(err, device.ErrDeviceFailed) || errors.Is(err, device.ErrFull) {
				ds.State = a.env.State(i).String()
			}
			if ds.Reason == "" {
				ds.Reason = err.Error()
			}
		} else {
			ds.Keys, ds.Used, ds.Capacity = info.Keys, info.Used, info.Capacity
		}
		st.DeviceBytes += ds.Used
		st.Devices = append(st.Devices, ds)
	}
	if !o.deep {
		return st, nil
	}
	st.Deep = true
	per := map[string]*MechanismStatus{}
	for _, m := range a.mechs {
		per[m.Name()] = &MechanismStatus{Name: m.Name()}
	}
	keys, err := a.Keys(ctx, nil)
	if err != nil {
		return st, err
	}
	for _, key := range keys {
		l, err := a.locate(ctx, a.key(key, 0))
		if err != nil {
			st.Unreadable++
			continue
		}
		h := l.header()
		ms := per[l.m.Name()]
		ms.Objects++
		ms.UserBytes += int64(h.ObjectLen)
		st.Objects++
		st.UserBytes += int64(h.ObjectLen)
	}
	for _, ms := range per {
		st.Mechanisms = append(st.Mechanisms, *ms)
	}
	sort.Slice(st.Mechanisms, func(i, j int) bool { return st.Mechanisms[i].Name < st.Mechanisms[j].Name })
	if st.UserBytes > 0 {
		st.Overhead = float64(st.DeviceBytes) / float64(st.UserBytes)
	}
	return st, nil
}

// probe asks device i (d, at generation gen) for its Info, marking it
// failed when it cannot answer (full when it says so): what Status
// shows, and what a replace judges by.
func (a *Array) probe(ctx context.Context, i int, d device.Device, gen mechanism.Gen) (device.Info, error) {
	info, err := d.Info(ctx)
	a.env.MarkFault(i, gen, err)
	return info, err
}

// ProbeDevice returns device i's state once it has been asked to answer,
// as Status does: a device that fails without an operation since (its
// directory removed, its disk gone) is failed, not healthy.
func (a *Array) ProbeDevice(ctx context.Context, i int) mechanism.State {
	d, gen := a.env.DeviceGen(i)
	_, _ = a.probe(ctx, i, d, gen)
	return a.env.State(i)
}
