package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/dustin/go-humanize"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/mechanism/replication"
)

// target is one configuration measured: the None baseline, a mechanism
// in a mode, or the hybrid configuration with Options.Rules.
type target struct{ mech, mode string }

func (t target) String() string { return t.mech + "/" + t.mode }

// instance is a target on fresh devices.
type instance struct {
	t        target
	a        *array.Array    // nil for None
	devs     []device.Device // instrumented, as the array sees them
	raw      []device.Device // as the backend made them
	counters []counter
	release  func() error
}

// open makes t on fresh devices.
func (r *runner) open(ctx context.Context, t target) (*instance, error) {
	raw, release, err := r.o.Backend.Devices(ctx, r.o.Devices)
	if err != nil {
		return nil, fmt.Errorf("devices: %w", err)
	}
	devs, counters := instrument(raw)
	in := &instance{t: t, devs: devs, raw: raw, counters: counters, release: release}
	if t.mech == None {
		return in, nil
	}
	var opts []array.Option
	switch {
	case t.mech == Thresholds:
		opts = []array.Option{array.WithMechanisms(r.o.all(r.o.Rules[len(r.o.Rules)-1].RM)...),
			array.WithMode(array.Hybrid), array.WithRules(r.o.Rules...)}
	case t.mech == Tiny:
		opts = []array.Option{array.WithMechanisms(r.o.all(replication.Name)...), array.WithTiny(r.o.tiny())}
		if t.mode == ModeHybrid {
			opts = append(opts, array.WithMode(array.Hybrid), array.WithRules(array.Rule{RM: replication.Name}))
		}
	case t.mode == ModeHybrid:
		// The paper's hybrid mode: every mechanism configured, only the
		// measured one used, and so a read before every write.
		opts = []array.Option{array.WithMechanisms(r.o.all(t.mech)...), array.WithDefault(t.mech),
			array.WithMode(array.Hybrid), array.WithRules(array.Rule{RM: t.mech})}
	default:
		opts = []array.Option{array.WithMechanisms(r.o.factory(t.mech))}
	}
	a, err := array.Create(ctx, devs, opts...)
	if err != nil {
		_ = release()
		return nil, err
	}
	in.a = a
	return in, nil
}

func (in *instance) close() error {
	var err error
	if in.a != nil {
		err = in.a.Close()
	}
	return errors.Join(err, in.release())
}

// rawDev is the device None stores key on: the array's primary.
func (in *instance) rawDev(key []byte) device.Device {
	return in.devs[xxhash.Sum64(key)%uint64(len(in.devs))]
}

func (in *instance) store(ctx context.Context, key, value []byte) error {
	if in.a == nil {
		return in.rawDev(key).Store(ctx, key, value)
	}
	return in.a.Store(ctx, key, value)
}

func (in *instance) retrieve(ctx context.Context, key []byte) ([]byte, error) {
	if in.a == nil {
		return in.rawDev(key).Retrieve(ctx, key)
	}
	return in.a.Retrieve(ctx, key)
}

func (in *instance) remove(ctx context.Context, key []byte) error {
	if in.a == nil {
		return in.rawDev(key).Delete(ctx, key)
	}
	return in.a.Delete(ctx, key)
}

func (in *instance) resetCounts() {
	for _, c := range in.counters {
		c.reset()
	}
}

func (in *instance) counts() Counts {
	var t Counts
	for _, c := range in.counters {
		t.add(c.counts())
	}
	return t
}

// used is the bytes of keys and values on the devices, once the array
// has done the work it defers when busy (Packing's delta log and its
// regrouping of sparse sets).
func (in *instance) used(ctx context.Context) (int64, error) {
	if in.a != nil {
		if err := errors.Join(in.a.Settle(ctx), in.a.Compact(ctx)); err != nil {
			return 0, err
		}
	}
	var n int64
	for i, d := range in.devs {
		info, err := d.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("device %d: %w", i, err)
		}
		n += info.Used
	}
	return n, nil
}

// tiny is the Tiny target's layout: buckets of about 8 KiB when every
// key holds a value of TinyMax/2 bytes (the sizing docs/tiny-values.md
// gives).
func (o *Options) tiny() array.Tiny {
	perKey := len(key(nil, 0)) + o.TinyMax/2 + 2
	return array.Tiny{Max: o.TinyMax, Buckets: max(16, o.Keys*perKey/(8<<10))}
}

// runner runs one Options.
type runner struct {
	o      Options
	step   int
	steps  int
	values map[int][]byte
}

// Run measures what o asks for and returns the report.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	r := &runner{o: o, values: map[int][]byte{}}
	rep := newReport(o)
	sized := r.sizedTargets()
	mixed := r.mixedTargets()
	if o.sized() {
		per := 0
		for _, w := range []string{Store, Retrieve, Update, Delete} {
			if o.wants(w) {
				per++
			}
		}
		r.steps += len(o.Sizes) * len(sized) * per
	}
	if o.wants(Mixed) {
		r.steps += len(mixed) * 2
	}
	if o.wants(Range) {
		r.steps += len(sized) * 2
	}
	if o.Rebuild {
		r.steps += len(o.RebuildMechanisms)
	}
	if o.sized() {
		for _, size := range o.Sizes {
			for _, t := range sized {
				res, err := r.sequence(ctx, t, size)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", t, sizeLabel(size), err)
				}
				rep.Results = append(rep.Results, res...)
			}
		}
	}
	if o.wants(Mixed) {
		for _, t := range mixed {
			res, err := r.sequence(ctx, t, 0)
			if err != nil {
				return nil, fmt.Errorf("%s mixed sizes: %w", t, err)
			}
			rep.Results = append(rep.Results, res...)
		}
	}
	if o.wants(Range) {
		for _, t := range sized {
			res, err := r.rangeSequence(ctx, t)
			if err != nil {
				return nil, fmt.Errorf("%s range: %w", t, err)
			}
			rep.Results = append(rep.Results, res...)
		}
	}
	if o.Rebuild {
		for _, m := range o.RebuildMechanisms {
			res, err := r.rebuild(ctx, m)
			if err != nil {
				return nil, fmt.Errorf("rebuild %s: %w", m, err)
			}
			rep.Rebuild = append(rep.Rebuild, res)
		}
	}
	rep.finish()
	return rep, nil
}

func (r *runner) sizedTargets() []target {
	ts := []target{{None, ModeRaw}}
	for _, m := range r.o.Mechanisms {
		for _, mode := range r.o.Modes {
			ts = append(ts, target{m, mode})
		}
	}
	return ts
}

// mixedTargets: None, each mechanism standalone (what each would give
// alone on the mix), and the hybrid configuration with the rules.
func (r *runner) mixedTargets() []target {
	ts := []target{{None, ModeRaw}}
	for _, m := range r.o.Mechanisms {
		ts = append(ts, target{m, ModeStandalone})
	}
	return append(ts, target{Thresholds, ModeHybrid})
}

// value returns the (shared, read-only) value of n bytes.
func (r *runner) value(n int) []byte {
	v, ok := r.values[n]
	if !ok {
		v = make([]byte, n)
		rng := rand.New(rand.NewPCG(r.o.Seed, uint64(n)))
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		r.values[n] = v
	}
	return v
}

// sizeOf returns the value size of key number i: size, or for the mixed
// workload (size 0) a size drawn from the mix by a hash of i.
func (r *runner) sizeOf(size int, i int64) int {
	if size > 0 {
		return size
	}
	total := 0
	for _, p := range r.o.Mix {
		total += p.Weight
	}
	x := int(xxhash.Sum64String(fmt.Sprint(r.o.Seed, "/", i)) % uint64(total))
	for _, p := range r.o.Mix {
		if x < p.Weight {
			return p.Size
		}
		x -= p.Weight
	}
	return r.o.Mix[0].Size
}

func sizeLabel(size int) string {
	if size == 0 {
		return "mix"
	}
	return humanize.IBytes(uint64(size))
}

// sequence runs the workloads of one size (0: the mixed sizes) on t over
// fresh devices: store, then retrieve, update and delete, or for the
// mixed sizes store and retrieve. Phases that were not asked for but
// fill keys for later ones run unmeasured.
func (r *runner) sequence(ctx context.Context, t target, size int) ([]Result, error) {
	// Collect the previous measurement's garbage now, as testing does
	// before each benchmark, rather than during this one.
	runtime.GC()
	in, err := r.open(ctx, t)
	if err != nil {
		return nil, err
	}
	defer func() { _ = in.close() }()
	for _, v := range r.o.Mix {
		r.value(v.Size)
	}
	if size > 0 {
		r.value(size)
	}
	label := sizeLabel(size)
	var out []Result
	var live, keys int64 // user bytes (keys and values) stored, and keys
	keyLen := int64(len(key(nil, 0)))
	emit := func(res Result, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", res.Workload, err)
		}
		out = append(out, res)
		return nil
	}

	// Store: insert new keys 0, 1, 2, ...
	storeName, retrieveName := Store, Retrieve
	if size == 0 {
		storeName, retrieveName = MixedStore, MixedRetrieve
	}
	measureStore := r.o.wants(Store) || size == 0
	total := int64(r.o.Keys)
	storeRes, err := r.measure(ctx, in, phase{
		workload: storeName, size: size, label: label, total: total, measured: measureStore,
		op: func(_ *worker, i int64, buf []byte) (int, error) {
			v := r.values[r.sizeOf(size, i)]
			return len(v), in.store(ctx, key(buf, i), v)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", storeName, err)
	}
	keys = storeRes.Ops
	if keys == 0 {
		return nil, fmt.Errorf("the store phase stored no key")
	}
	for i := int64(0); i < keys; i++ {
		live += keyLen + int64(r.sizeOf(size, i))
	}
	overhead := func() (float64, error) {
		u, err := in.used(ctx)
		if err != nil || live == 0 {
			return 0, err
		}
		return float64(u) / float64(live), nil
	}
	setOverhead := func(res *Result) error {
		o, err := overhead()
		res.StorageOverhead = o
		return err
	}
	if err := setOverhead(&storeRes); err != nil {
		return nil, err
	}
	if measureStore {
		out = append(out, storeRes)
	}

	choose, err := chooserFactory(r.o.Dist, r.o.ZipfTheta, keys, r.o.Seed)
	if err != nil {
		return nil, err
	}
	ops := int64(r.o.Ops)
	if r.o.Duration > 0 {
		ops = 0
	}
	if size == 0 || r.o.wants(Retrieve) {
		res, err := r.measure(ctx, in, phase{
			workload: retrieveName, size: size, label: label, total: ops, measured: true, choose: choose,
			op: func(w *worker, _ int64, buf []byte) (int, error) {
				i := w.choose.next()
				k := key(buf, i)
				v, err := in.retrieve(ctx, k)
				if err == nil && len(v) != r.sizeOf(size, i) {
					err = fmt.Errorf("retrieve %s: %d bytes, stored %d", k, len(v), r.sizeOf(size, i))
				}
				return len(v), err
			},
		})
		if err == nil {
			err = setOverhead(&res)
		}
		if err := emit(res, err); err != nil {
			return nil, err
		}
	}
	if size == 0 {
		return out, nil
	}
	if r.o.wants(Update) {
		res, err := r.measure(ctx, in, phase{
			workload: Update, size: size, label: label, total: ops, measured: true, choose: choose,
			op: func(w *worker, _ int64, buf []byte) (int, error) {
				v := r.values[size]
				return len(v), in.store(ctx, key(buf, w.choose.next()), v)
			},
		})
		if err == nil {
			err = setOverhead(&res)
		}
		if err := emit(res, err); err != nil {
			return nil, err
		}
	}
	if r.o.wants(Delete) {
		n := keys
		if ops > 0 {
			n = min(n, ops)
		}
		perm := rand.New(rand.NewPCG(r.o.Seed, 0xde1e7e)).Perm(int(keys))
		o, err := overhead()
		if err != nil {
			return nil, err
		}
		res, err := r.measure(ctx, in, phase{
			workload: Delete, size: size, label: label, total: n, measured: true,
			op: func(_ *worker, i int64, buf []byte) (int, error) {
				return 0, in.remove(ctx, key(buf, int64(perm[i])))
			},
		})
		res.StorageOverhead = o // before the deletes
		if err := emit(res, err); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// phase is one run of op by the workers.
type phase struct {
	workload, label string
	size            int
	// total is the number of operations, i = 0..total-1; 0: until the
	// duration is over.
	total    int64
	measured bool // counts toward progress (a fill that is not asked for does not)
	// workers, when set, replaces Threads × QueueDepth.
	workers int
	untimed bool // ignores Options.Duration
	choose  func(worker int) chooser
	// op performs operation i and returns the user value bytes it moved.
	op func(w *worker, i int64, buf []byte) (int, error)
}

type worker struct {
	h      hist
	bytes  int64
	choose chooser
}

// measure runs ph with Threads × QueueDepth workers and returns its
// result. Device counters are reset at the start and read at the end.
func (r *runner) measure(ctx context.Context, in *instance, ph phase) (Result, error) {
	res := Result{Workload: ph.workload, Size: ph.size, SizeLabel: ph.label, Mechanism: in.t.mech, Mode: in.t.mode}
	if ph.measured {
		r.step++
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	n := r.o.Threads * r.o.QueueDepth
	if ph.workers > 0 {
		n = ph.workers
	}
	workers := make([]*worker, n)
	var next, done atomic.Int64
	var deadline time.Time
	if r.o.Duration > 0 && !ph.untimed {
		deadline = time.Now().Add(r.o.Duration)
	}
	if ph.total == 0 && deadline.IsZero() {
		return res, errors.New("phase has neither an operation count nor a duration")
	}
	in.resetCounts()
	stopStall := stallMeter()
	start := time.Now()
	stopProgress := r.progress(ph, in.t, &done, start)
	var wg sync.WaitGroup
	for w := range workers {
		wk := &worker{}
		if ph.choose != nil {
			wk.choose = ph.choose(w)
		}
		workers[w] = wk
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 32)
			for ctx.Err() == nil {
				if !deadline.IsZero() && !time.Now().Before(deadline) {
					return
				}
				i := next.Add(1) - 1
				if ph.total > 0 && i >= ph.total {
					return
				}
				t0 := time.Now()
				b, err := ph.op(wk, i, buf)
				wk.h.record(time.Since(t0))
				if err != nil {
					cancel(err)
					return
				}
				wk.bytes += int64(b)
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	stall := stopStall()
	stopProgress()
	if err := context.Cause(ctx); err != nil {
		return res, err
	}
	var h hist
	for _, w := range workers {
		h.merge(&w.h)
		res.UserBytes += w.bytes
	}
	res.Ops = h.n
	res.Seconds = elapsed.Seconds()
	res.HostStallMs = float64(stall) / float64(time.Millisecond)
	res.Device = in.counts()
	res.fill(&h)
	return res, nil
}

// progress reports ph's progress every 250ms until the returned stop.
func (r *runner) progress(ph phase, t target, done *atomic.Int64, start time.Time) func() {
	if r.o.Progress == nil || !ph.measured {
		return func() {}
	}
	report := func() {
		r.o.Progress(Progress{Step: r.step, Steps: r.steps, Workload: ph.workload, Size: ph.label,
			Mechanism: t.mech, Mode: t.mode, Ops: done.Load(), Elapsed: time.Since(start)})
	}
	report()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				report()
				return
			case <-tick.C:
				report()
			}
		}
	}()
	return func() { close(stop); wg.Wait() }
}

// stallTick is the stall meter's period.
const stallTick = 5 * time.Millisecond

// stallMeter measures how late a timer of stallTick fires, at most, until
// the returned function is called, which returns the worst lateness: how
// long the host kept the bench from running (CPU starvation by other
// processes, VM pauses, stop-the-world pauses). A measurement during a
// long stall says more about the host than about the array.
func stallMeter() func() time.Duration {
	stop := make(chan struct{})
	result := make(chan time.Duration, 1)
	go func() {
		var worst time.Duration
		t := time.NewTicker(stallTick)
		defer t.Stop()
		prev := time.Now()
		for {
			select {
			case <-stop:
				result <- worst
				return
			case now := <-t.C:
				worst = max(worst, now.Sub(prev)-stallTick)
				prev = now
			}
		}
	}()
	return func() time.Duration { close(stop); return <-result }
}

// hostInfo describes the machine, for the report.
func hostInfo() Host {
	return Host{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
}
