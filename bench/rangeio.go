package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"

	"github.com/cespare/xxhash/v2"
	"github.com/dustin/go-humanize"
)

// The range workload (partial I/O): RangeKeys values of RangeValue bytes
// are stored (unmeasured), then, with one worker per value, RangeRead
// reads RangeIO bytes at a random
// RangeIO-aligned offset of a random one (Array.RetrieveRange: GETRANGE),
// and RangeWrite writes RangeIO bytes there (Array.StoreRange: SETRANGE).
// The figures that matter are the device bytes read (and written) per
// user byte: RAMP and WAMP.
//
// None, the baseline, is a raw device that cannot hold the value in one
// piece either: the value is cut into chunks of the device's largest
// value, one per device key, and a range read reads the chunk that holds
// it (a write reads, patches and stores it). That is what a KV device
// without partial reads costs at best.

// rangeLabel is the size label of the range workload's results.
func (o *Options) rangeLabel() string {
	return humanize.IBytes(uint64(o.RangeIO)) + " in " + humanize.IBytes(uint64(o.RangeValue))
}

// rangeKey is device key of chunk c of key k for None.
func rangeChunkKey(k []byte, c int64) []byte {
	return binary.BigEndian.AppendUint32(append([]byte(nil), k...), uint32(c))
}

// chunk is None's chunk size: the device's largest value.
func (in *instance) chunk(ctx context.Context) (int64, error) {
	info, err := in.devs[0].Info(ctx)
	if err != nil {
		return 0, err
	}
	return int64(info.MaxValueLen), nil
}

func (in *instance) storeWhole(ctx context.Context, key, v []byte) error {
	if in.a != nil {
		return in.a.Store(ctx, key, v)
	}
	c, err := in.chunk(ctx)
	if err != nil {
		return err
	}
	for i := int64(0); i*c < int64(len(v)); i++ {
		ck := rangeChunkKey(key, i)
		if err := in.rawDev(ck).Store(ctx, ck, v[i*c:min((i+1)*c, int64(len(v)))]); err != nil {
			return err
		}
	}
	return nil
}

// retrieveRange reads n bytes at off (within one None chunk: the
// workload's ranges are aligned).
func (in *instance) retrieveRange(ctx context.Context, key []byte, off, n int64) ([]byte, error) {
	if in.a != nil {
		return in.a.RetrieveRange(ctx, key, off, n)
	}
	c, err := in.chunk(ctx)
	if err != nil {
		return nil, err
	}
	ck := rangeChunkKey(key, off/c)
	b, err := in.rawDev(ck).Retrieve(ctx, ck)
	if err != nil {
		return nil, err
	}
	lo := min(off%c, int64(len(b)))
	return b[lo:min(lo+n, int64(len(b)))], nil
}

func (in *instance) storeRange(ctx context.Context, key []byte, off int64, data []byte) error {
	if in.a != nil {
		_, err := in.a.StoreRange(ctx, key, off, data)
		return err
	}
	c, err := in.chunk(ctx)
	if err != nil {
		return err
	}
	ck := rangeChunkKey(key, off/c)
	d := in.rawDev(ck)
	b, err := d.Retrieve(ctx, ck)
	if err != nil {
		return err
	}
	copy(b[off%c:], data)
	return d.Store(ctx, ck, b)
}

// rangeAt returns the key number and offset of range operation i.
func (r *runner) rangeAt(i int64) (int64, int64) {
	h := xxhash.Sum64String(fmt.Sprint(r.o.Seed, "/range/", i))
	slots := uint64(r.o.RangeValue / r.o.RangeIO)
	return int64(h % uint64(r.o.RangeKeys)), int64((h/uint64(r.o.RangeKeys))%slots) * int64(r.o.RangeIO)
}

// rangeSequence runs the range workload on t over fresh devices.
func (r *runner) rangeSequence(ctx context.Context, t target) ([]Result, error) {
	runtime.GC()
	in, err := r.open(ctx, t)
	if err != nil {
		return nil, err
	}
	defer func() { _ = in.close() }()
	v, data := r.value(r.o.RangeValue), r.value(r.o.RangeIO)
	label := r.o.rangeLabel()
	if _, err := r.measure(ctx, in, phase{
		workload: "range-fill", label: label, total: int64(r.o.RangeKeys), untimed: true,
		op: func(_ *worker, i int64, buf []byte) (int, error) { return len(v), in.storeWhole(ctx, key(buf, i), v) },
	}); err != nil {
		return nil, fmt.Errorf("range fill: %w", err)
	}
	ops := int64(r.o.Ops)
	if r.o.Duration > 0 {
		ops = 0
	}
	var out []Result
	for _, w := range []string{RangeRead, RangeWrite} {
		res, err := r.measure(ctx, in, phase{
			workload: w, size: r.o.RangeIO, label: label, total: ops, measured: true,
			// The array runs one operation of a key at a time: more
			// workers than values would only queue (and overrun the
			// phase by a write of a whole value each).
			workers: r.o.RangeKeys,
			op: func(_ *worker, i int64, buf []byte) (int, error) {
				kn, off := r.rangeAt(i)
				k := key(buf, kn)
				if w == RangeWrite {
					return len(data), in.storeRange(ctx, k, off, data)
				}
				b, err := in.retrieveRange(ctx, k, off, int64(len(data)))
				if err == nil && len(b) != len(data) {
					err = fmt.Errorf("range of %d bytes at %d of %s: %d bytes", len(data), off, k, len(b))
				}
				return len(b), err
			},
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", w, err)
		}
		res.StorageOverhead = 1 // not measured: the values are few
		if u, err := in.used(ctx); err == nil {
			res.StorageOverhead = float64(u) / float64(int64(r.o.RangeKeys)*(int64(r.o.RangeValue)+int64(len(key(nil, 0)))))
		}
		out = append(out, res)
	}
	return out, nil
}
