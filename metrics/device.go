package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvarray/kvarray/device"
)

// Indexes of wrapped.ops beyond device.OpKind's.
const (
	kindIterate = device.OpExist + 1 + iota
	kindInfo
	nKinds
)

func kindOf(op string) device.OpKind {
	switch op {
	case "store":
		return device.OpStore
	case "retrieve":
		return device.OpRetrieve
	case "delete":
		return device.OpDelete
	case "exist":
		return device.OpExist
	case "iterate":
		return kindIterate
	}
	return kindInfo
}

type opMetrics struct {
	ops, errs prometheus.Counter
	latency   prometheus.Observer
}

// wrapped is a device counting its operations; the label lookups are done
// once, at wrap time.
type wrapped struct {
	d             device.Device
	ops           [nKinds]opMetrics
	read, written prometheus.Counter
}

// failed reports whether err is a failure, not an answer (not found).
func failed(err error) bool { return err != nil && !errors.Is(err, device.ErrNotFound) }

func (w *wrapped) done(k device.OpKind, start time.Time, err error) {
	m := &w.ops[k]
	m.ops.Inc()
	m.latency.Observe(time.Since(start).Seconds())
	if failed(err) {
		m.errs.Inc()
	}
}

func (w *wrapped) Store(ctx context.Context, key, value []byte) error {
	start := time.Now()
	err := w.d.Store(ctx, key, value)
	w.done(device.OpStore, start, err)
	if err == nil {
		w.written.Add(float64(len(value)))
	}
	return err
}

func (w *wrapped) Retrieve(ctx context.Context, key []byte) ([]byte, error) {
	start := time.Now()
	v, err := w.d.Retrieve(ctx, key)
	w.done(device.OpRetrieve, start, err)
	w.read.Add(float64(len(v)))
	return v, err
}

func (w *wrapped) Delete(ctx context.Context, key []byte) error {
	start := time.Now()
	err := w.d.Delete(ctx, key)
	w.done(device.OpDelete, start, err)
	return err
}

func (w *wrapped) Exist(ctx context.Context, key []byte) (bool, error) {
	start := time.Now()
	ok, err := w.d.Exist(ctx, key)
	w.done(device.OpExist, start, err)
	return ok, err
}

func (w *wrapped) Iterate(ctx context.Context, prefix []byte, fn func(key []byte) error) error {
	start := time.Now()
	err := w.d.Iterate(ctx, prefix, fn)
	w.done(kindIterate, start, err)
	return err
}

func (w *wrapped) Batch(ctx context.Context, ops []device.Op) error {
	start := time.Now()
	err := w.d.Batch(ctx, ops)
	d := time.Since(start).Seconds()
	var seen [nKinds]bool
	var read, written int
	for i := range ops {
		op := &ops[i]
		if op.Kind >= nKinds || op.Kind == 0 {
			continue
		}
		m := &w.ops[op.Kind]
		m.ops.Inc()
		if failed(op.Err) {
			m.errs.Inc()
		}
		if !seen[op.Kind] {
			seen[op.Kind] = true
			m.latency.Observe(d)
		}
		switch {
		case op.Kind == device.OpStore && op.Err == nil:
			written += len(op.Value)
		case op.Kind == device.OpRetrieve:
			read += len(op.Result)
		}
	}
	w.read.Add(float64(read))
	w.written.Add(float64(written))
	return err
}

func (w *wrapped) Info(ctx context.Context) (device.Info, error) {
	start := time.Now()
	info, err := w.d.Info(ctx)
	w.done(kindInfo, start, err)
	return info, err
}

func (w *wrapped) Close() error { return w.d.Close() }

// Unwrap returns the device w wraps.
func (w *wrapped) Unwrap() device.Device { return w.d }
