// Package array is kvarray's virtual key-value device: one key space over N
// devices, each value stored with a reliability mechanism chosen by mode
// (standalone: one mechanism; hybrid: by value size; custom: per call).
//
// Invariants:
//   - Placement is stateless: split s of user key u has its primary on
//     device (hash(u)+s) mod N, and the mechanism's other pieces on the next
//     devices in the circular order fixed at creation; or, on an array of
//     devices of different sizes, on the devices its point on the capacity
//     ring selects (placement.go, mechanism.Placement). The order and the
//     weights are recorded in the array header on every device and
//     checked at open.
//   - Operations on one key are serialised in submission order (sync and
//     async alike); operations on different keys run concurrently.
//   - Every piece carries the write version of the store that wrote it; a
//     read assembles a value only from pieces of one version, and returns
//     an error rather than wrong bytes.
//   - A value larger than what the mechanism holds on one device is stored
//     as several splits with the same mechanism; split 0's header gives the
//     split count, and the store that shrinks a value removes the excess.
//   - On an array created WithTiny, a value up to the tiny size is instead
//     an entry of bucket hash(key) mod buckets, and the bucket is itself an
//     array value stored with Packing (tiny.go): a key's value is in its
//     bucket or in its own pieces, and an entry not flagged as moving
//     proves it has no pieces of its own.
package array

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/internal/keylock"
	"github.com/kvarray/kvarray/mechanism"
)

// Errors callers branch on. Errors returned by the array wrap these (or the
// device sentinels) with the key and device concerned.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = device.ErrNotFound
	// ErrKeyTooLong, ErrKeyTooShort, ErrValueTooLarge: the request is
	// outside the array's limits; nothing was written.
	ErrKeyTooLong    = device.ErrKeyTooLong
	ErrKeyTooShort   = device.ErrKeyTooShort
	ErrValueTooLarge = device.ErrValueTooLarge
	// ErrDataLoss: too many pieces of the value are lost or corrupt.
	ErrDataLoss = mechanism.ErrDataLoss
	// ErrUnavailable: the devices that could hold the key do not answer,
	// so whether it exists cannot be known.
	ErrUnavailable = errors.New("unavailable")
	// ErrUnknownMechanism: a mechanism name or id that is not configured.
	ErrUnknownMechanism = errors.New("unknown mechanism")
	// ErrClosed: the array was closed.
	ErrClosed = errors.New("array closed")
)

// Mode selects how the array picks a value's mechanism.
type Mode int

// Modes.
const (
	// Standalone stores everything with the default mechanism and skips
	// the read before write.
	Standalone Mode = iota
	// Hybrid picks the mechanism by value size (Rules) and reads the
	// primary before every store to find the previous mechanism.
	Hybrid
)

func (m Mode) String() string {
	if m == Hybrid {
		return "hybrid"
	}
	return "standalone"
}

// ParseMode parses "standalone" or "hybrid".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "standalone":
		return Standalone, nil
	case "hybrid":
		return Hybrid, nil
	}
	return 0, fmt.Errorf("mode %q: want standalone or hybrid", s)
}

// Rule maps values of at most Max bytes (0: any size) to a mechanism.
type Rule struct {
	Max int64
	RM  string
}

// DefaultMaxValue is the largest user value accepted by default.
const DefaultMaxValue = 1 << 30

type options struct {
	mode        Mode
	def         string
	rules       []Rule
	factories   []mechanism.Factory
	maxValue    int64
	parallelism int
	autoResync  time.Duration
	metaCache   int
	valueCache  int64       // WithValueCache: bytes of whole values the metadata cache keeps
	valueMax    int         // and the largest it keeps
	weights     []uint64    // WithWeights; nil: the devices' capacities
	tiny        *Tiny       // WithTiny; nil: no tiny values
	owner       *Owner      // WithOwner; nil: no lease (owner.go)
	reopen      Reopener    // WithReopen; nil: a full Pebble device waits for a restart (full.go)
	slow        *SlowPolicy // WithSlowDevices; nil: no device is judged slow (slow.go)
}

// Option configures Open and Create.
type Option func(*options)

// WithMode sets the mode (default Standalone).
func WithMode(m Mode) Option { return func(o *options) { o.mode = m } }

// WithDefault names the default mechanism: the one used in standalone mode,
// and in hybrid mode for sizes no rule covers. Default: the first
// mechanism given.
func WithDefault(name string) Option { return func(o *options) { o.def = name } }

// WithRules sets hybrid mode's size rules; the first rule whose Max fits
// the value wins. Ignored in standalone mode.
func WithRules(r ...Rule) Option { return func(o *options) { o.rules = r } }

// WithMechanisms adds mechanisms; every mechanism that may have written a
// value in the array must be configured to read it back.
func WithMechanisms(f ...mechanism.Factory) Option {
	return func(o *options) { o.factories = append(o.factories, f...) }
}

// WithMaxValue sets the largest user value accepted (default 1 GiB).
func WithMaxValue(n int64) Option { return func(o *options) { o.maxValue = n } }

// WithAutoResync has the array probe its failed devices every interval
// and resync each one that answers again with its header intact (a device
// that was only unreachable), so that it catches up from its resync
// record without an operator; and compact, at the same interval, the
// Packing sets that deletes thinned (see compact). 0 (the default)
// disables both.
func WithAutoResync(interval time.Duration) Option {
	return func(o *options) { o.autoResync = interval }
}

// WithParallelism bounds the splits of one huge value in flight at once,
// and the asynchronous operations in flight (default 8 and 64×8).
func WithParallelism(n int) Option { return func(o *options) { o.parallelism = n } }

// Array is the virtual device. It is safe for concurrent use.
type Array struct {
	env    *mechanism.Env
	hdr    header
	hdrMu  sync.Mutex
	banked bool // see flagBanked; fixed at open
	// unclean: the array opened with flagOpen set, and no scrub --repair
	// has completed since (see Unclean).
	unclean atomic.Bool
	// unsettled: the keys whose write failed in this process (see
	// mustSettle); past maxUnsettled of them, overflow counts the rest.
	unsettledMu sync.Mutex
	unsettled   map[string]struct{}
	unsettledN  atomic.Int64 // len(unsettled), read without the lock
	overflow    atomic.Int64
	o           options
	mechs       []mechanism.Mechanism
	byRM        map[format.RM]mechanism.Mechanism
	byName      map[string]mechanism.Mechanism
	def         mechanism.Mechanism
	maxWidth    int
	locks       *keylock.Table
	async       chan struct{} // semaphore bounding async operations
	reasonMu    sync.Mutex
	spaceMu     sync.Mutex // one spaceBack at a time: a device is reopened once
	reasons     []error    // why each device was failed at open; guarded by reasonMu

	closeMu   sync.RWMutex
	closed    bool
	haltOnce  sync.Once
	wg        sync.WaitGroup // async operations in flight
	stop      chan struct{}  // closed by Close: stops background work
	bg        sync.WaitGroup // background work
	meta      *metaCache     // nil: none
	tiny      *tinyState     // nil: no tiny values (tiny.go); fixed at open
	listings  listings       // SCAN's device cursors kept between pages (cursors.go)
	own       *ownership     // the lease (owner.go); nil without WithOwner
	deposedCh chan struct{}  // closed once deposed (owner.go)
	slow      *slowState     // the fail-slow detector (slow.go); nil without WithSlowDevices
}

func build(devs []device.Device, opts []Option) (*Array, error) {
	o := options{maxValue: DefaultMaxValue, parallelism: 8, metaCache: DefaultMetaCache}
	for _, opt := range opts {
		opt(&o)
	}
	if len(devs) == 0 {
		return nil, errors.New("array: no devices")
	}
	if len(devs) > 1<<16-1 {
		return nil, fmt.Errorf("array: %d devices, at most 65535", len(devs))
	}
	if len(o.factories) == 0 {
		return nil, errors.New("array: no mechanisms configured")
	}
	if o.parallelism < 1 {
		o.parallelism = 1
	}
	names, limits := describe(devs)
	a := &Array{
		deposedCh: make(chan struct{}),
		env:       mechanism.NewEnv(devs, names, limits),
		o:         o,
		byRM:      map[format.RM]mechanism.Mechanism{},
		byName:    map[string]mechanism.Mechanism{},
		async:     make(chan struct{}, 64*o.parallelism),
		stop:      make(chan struct{}),
	}
	// Resync's Quiesce waits for the turns held when it starts.
	a.locks = keylock.New(keylock.WithHolder(a.env))
	if o.metaCache > 0 {
		a.meta = newMetaCache(o.metaCache, o.valueCache, o.valueMax)
	}
	if limits.MaxKeyLen-format.KeyOverhead < 1 {
		return nil, fmt.Errorf("array: devices take keys of at most %d bytes, too short for %d bytes of split number and kind", limits.MaxKeyLen, format.KeyOverhead)
	}
	for _, f := range o.factories {
		m, err := f(a.env)
		if err != nil {
			return nil, fmt.Errorf("array: %w", err)
		}
		if _, dup := a.byRM[m.RM()]; dup {
			return nil, fmt.Errorf("array: mechanism %s configured twice", m.Name())
		}
		a.mechs = append(a.mechs, m)
		a.byRM[m.RM()] = m
		a.byName[m.Name()] = m
		a.maxWidth = max(a.maxWidth, m.Width())
	}
	a.def = a.mechs[0]
	if o.def != "" {
		m, ok := a.byName[o.def]
		if !ok {
			return nil, fmt.Errorf("array: default mechanism %q: %w", o.def, ErrUnknownMechanism)
		}
		a.def = m
	}
	for _, r := range o.rules {
		if _, ok := a.byName[r.RM]; !ok {
			return nil, fmt.Errorf("array: rule for values up to %d bytes names mechanism %q: %w", r.Max, r.RM, ErrUnknownMechanism)
		}
	}
	return a, nil
}

// describe returns the devices' names and their tightest common limits.
// A device that cannot answer Info does not constrain the limits.
func describe(devs []device.Device) ([]string, device.Limits) {
	names := make([]string, len(devs))
	var l device.Limits
	for i, d := range devs {
		info, err := d.Info(context.Background())
		names[i] = info.Name
		if names[i] == "" {
			names[i] = fmt.Sprintf("dev%d", i)
		}
		if err != nil {
			continue
		}
		if l.MaxKeyLen == 0 || info.MaxKeyLen < l.MaxKeyLen {
			l.MaxKeyLen = info.MaxKeyLen
		}
		if l.MaxValueLen == 0 || info.MaxValueLen < l.MaxValueLen {
			l.MaxValueLen = info.MaxValueLen
		}
		l.MinKeyLen = max(l.MinKeyLen, info.MinKeyLen)
	}
	return names, l.WithDefaults()
}

// Create makes a new array on devs, which must all be reachable and hold no
// array header, and returns it open.
func Create(ctx context.Context, devs []device.Device, opts ...Option) (*Array, error) {
	a, err := build(devs, opts)
	if err != nil {
		return nil, err
	}
	hs, errs := readHeaders(ctx, a.env)
	for i := range devs {
		switch {
		case errs[i] == nil:
			return nil, fmt.Errorf("array: create: device %d (%s) already belongs to array %s", i, a.env.Name(i), hs[i].id)
		case !errors.Is(errs[i], device.ErrNotFound):
			return nil, fmt.Errorf("array: create: %w", errs[i])
		}
	}
	weights, err := a.createWeights(ctx)
	if err != nil {
		return nil, fmt.Errorf("array: create: %w", err)
	}
	a.hdr = header{id: newID(), n: len(devs), flags: flagBanked | flagOpen, epoch: 1, vec: make([]uint64, len(devs)), weights: weights,
		clock: a.env.Clock().Lease(leaseSpan)}
	if err := a.setPlacement(); err != nil {
		return nil, fmt.Errorf("array: create: %w", err)
	}
	if err := a.setTiny(true); err != nil {
		return nil, fmt.Errorf("array: create: %w", err)
	}
	// An array whose mode stores values without redundancy says so from
	// the start, rather than with a header write at its first store.
	unprotected := a.def.Tolerates() == 0
	for _, r := range a.o.rules {
		unprotected = unprotected || a.byName[r.RM].Tolerates() == 0
	}
	if unprotected {
		a.hdr.flags |= flagUnprotected
	}
	a.banked = true
	for i := range a.hdr.vec {
		a.hdr.vec[i] = 1
	}
	if err := a.acquire(ctx); err != nil {
		return nil, fmt.Errorf("array: create: %w", err)
	}
	if err := writeHeaders(ctx, a.env, a.hdr, a.allDevs()); err != nil {
		return nil, fmt.Errorf("array: create: %w", err)
	}
	a.reasons = make([]error, len(devs))
	a.completeIfEmpty(ctx)
	a.startBackground()
	return a, nil
}

// completeIfEmpty makes the metadata cache complete (see metaCache) when
// no device holds anything but the array's own metadata (KindArray: the
// header, resync records, a rebuild checkpoint, Packing's log, which only
// comes with parities): every value the array will hold is then one it
// stores. Any doubt (a device not healthy or that cannot list its keys,
// any other key) leaves it incomplete. It stops at a device's first other
// key, so it costs next to nothing on an array in use.
func (a *Array) completeIfEmpty(ctx context.Context) {
	if a.meta == nil {
		return
	}
	held := errors.New("holds a key")
	for i := range a.env.N() {
		if a.env.State(i) != mechanism.Healthy {
			return
		}
		d, _ := a.env.DeviceGen(i)
		err := d.Iterate(ctx, nil, func(k []byte) error {
			if _, _, kind, err := format.ParseKey(k); err == nil && kind == format.KindArray {
				return nil
			}
			return held
		})
		if err != nil {
			return
		}
	}
	a.meta.setComplete()
}

// Open opens the array held by devs, listed in creation order. A foreign or
// shuffled device makes Open fail with an error naming it. A device that
// cannot be reached or holds no header (empty, replaced) is marked Failed
// and named in Status; the array serves from the others.
func Open(ctx context.Context, devs []device.Device, opts ...Option) (*Array, error) {
	a, err := build(devs, opts)
	if err != nil {
		return nil, err
	}
	h, reasons, err := verifyHeaders(ctx, a.env)
	if err != nil {
		return nil, fmt.Errorf("array: open: %w", err)
	}
	a.hdr, a.reasons = h, reasons
	// Before anything issues a version: past every one an earlier
	// process issued (see the clock lease in header.go).
	a.env.Clock().Observe(h.clock)
	if err := a.setPlacement(); err != nil {
		return nil, fmt.Errorf("array: open: %w", err)
	}
	if err := a.setTiny(false); err != nil {
		return nil, fmt.Errorf("array: open: %w", err)
	}
	a.banked = h.flags&flagBanked != 0
	a.unclean.Store(h.flags&flagOpen != 0)
	a.hdr.flags |= flagOpen // written by advanceEpoch below
	for i, r := range reasons {
		if r != nil {
			a.env.SetState(i, mechanism.Failed)
		}
	}
	if err := a.acquire(ctx); err != nil {
		return nil, fmt.Errorf("array %s: open: %w", h.id, err)
	}
	if err := a.env.LoadRecords(ctx); err != nil {
		return nil, fmt.Errorf("array: open: resync records: %w", err)
	}
	a.advanceEpoch(ctx, a.env.Clock().Lease(leaseSpan))
	a.completeIfEmpty(ctx)
	a.startBackground()
	return a, nil
}

// reason returns why device i was failed at open (nil: it was not, or it
// has been healed since).
func (a *Array) reason(i int) error {
	a.reasonMu.Lock()
	defer a.reasonMu.Unlock()
	if a.reasons == nil {
		return nil
	}
	return a.reasons[i]
}

func (a *Array) setReason(i int, err error) {
	a.reasonMu.Lock()
	defer a.reasonMu.Unlock()
	if a.reasons != nil {
		a.reasons[i] = err
	}
}

func (a *Array) allDevs() []int {
	d := make([]int, a.env.N())
	for i := range d {
		d[i] = i
	}
	return d
}

// ID returns the array's id.
func (a *Array) ID() ID { return a.hdr.id }

// N returns the number of devices.
func (a *Array) N() int { return a.env.N() }

// Mode returns the configured mode.
func (a *Array) Mode() Mode { return a.o.mode }

// Mechanisms returns the configured mechanisms' names, the default first.
func (a *Array) Mechanisms() []string {
	names := []string{a.def.Name()}
	for _, m := range a.mechs {
		if m != a.def {
			names = append(names, m.Name())
		}
	}
	return names
}

// Limits returns the largest user key and value the array accepts.
func (a *Array) Limits() (maxKey int, maxValue int64) {
	return a.env.Limits().MaxKeyLen - format.KeyOverhead, a.o.maxValue
}

// Close waits for asynchronous operations and closes the devices.
func (a *Array) Close() error {
	a.closeMu.Lock()
	if a.closed {
		a.closeMu.Unlock()
		return nil
	}
	a.closed = true
	a.closeMu.Unlock()
	a.haltOnce.Do(a.halt)
	a.closeListings()
	// A copy of a device taken while the array ran is older than this.
	// Nothing issues versions any more: the lease comes down to the last.
	a.hdrMu.Lock()
	if !a.unclean.Load() {
		a.hdr.flags &^= flagOpen
	}
	a.hdrMu.Unlock()
	a.advanceEpoch(context.Background(), a.env.Clock().Last()+1)
	a.releaseLease(context.Background())
	var errs []error
	for i := range a.env.N() {
		if err := a.env.Device(i).Close(); err != nil {
			errs = append(errs, fmt.Errorf("close device %d (%s): %w", i, a.env.Name(i), err))
		}
	}
	return errors.Join(errs...)
}

// Unclean reports whether the process that had the array open before
// this one did not close it (it crashed, or was killed), and no scrub
// --repair has completed since. The writes that process had in flight,
// never acknowledged, may have landed on too few devices to survive the
// loss of one (the write hole, docs/ARCHITECTURE.md "Known limits"); a
// Scrub with repair settles them and clears this. Until then every open
// reports it again, whatever closed cleanly in between.
func (a *Array) Unclean() bool { return a.unclean.Load() }

// halt stops the array's background work and waits for the operations in
// flight, leaving the devices open.
func (a *Array) halt() {
	close(a.stop)
	a.bg.Wait()
	a.wg.Wait()
	a.meta.close()
	for _, m := range a.mechs {
		if c, ok := m.(closer); ok {
			c.Close() // background work of the mechanism (Packing's log replay)
		}
	}
}

// settler is implemented by mechanisms that defer work (Packing's delta
// log, folded into its parities when idle).
type settler interface {
	Settle(ctx context.Context) error
}

// Settle does now the work the mechanisms deferred, so that the devices
// hold what they would once idle: reports of space use call it first.
func (a *Array) Settle(ctx context.Context) error {
	var errs []error
	for _, m := range a.mechs {
		if s, ok := m.(settler); ok {
			errs = append(errs, s.Settle(ctx))
		}
	}
	return errors.Join(errs...)
}

// closer is implemented by mechanisms with background work to stop
// before the devices close.
type closer interface{ Close() }

// begin registers an operation, failing once the array is closed.
func (a *Array) begin() error {
	a.closeMu.RLock()
	defer a.closeMu.RUnlock()
	if a.closed {
		return ErrClosed
	}
	if err := a.Deposed(); err != nil {
		return err
	}
	a.wg.Add(1)
	return nil
}

func (a *Array) end() { a.wg.Done() }

// bankBit marks the split numbers of a huge value's second bank.
//
// A huge value is written out of place: its splits 1.. go to the bank
// that its version's low bit selects, split 0 (always in bank 0, where one
// read of the primary finds it) last, and a store of a huge value over a
// huge value picks a version of the other bank. The old splits are
// released only after the new split 0 is in place, so a crash or a failed
// store at any point leaves the old value or the new one, whole, never a
// mix of both: split 0 says which (its version names the bank, and every
// other split must carry that version). Pieces left in the other bank are
// orphans that repair sweeps. A split's placement is that of its number
// without the bank bit.
const bankBit = 1 << 15

// splitKey is key for split s of the value of the given version: in the
// version's bank on a banked array.
func (a *Array) splitKey(user []byte, s int, version uint64) mechanism.Key {
	k := a.key(user, s)
	if s > 0 && a.banked && version&1 == 1 {
		k.Split |= bankBit
	}
	return k
}

// logical returns the split number of a parsed internal key without its
// bank bit: what placement is computed from.
func (a *Array) logical(split int) int {
	if a.banked {
		return split &^ bankBit
	}
	return split
}

// maxSplits is the largest number of splits one value may have.
func (a *Array) maxSplits() int {
	if a.banked {
		return bankBit
	}
	return format.MaxSplits
}

// checkKey validates a user key against the devices' limits.
func (a *Array) checkKey(key []byte) error {
	l := a.env.Limits()
	minLen := max(1, l.MinKeyLen-format.KeyOverhead)
	maxLen := l.MaxKeyLen - format.KeyOverhead
	if len(key) < minLen {
		return fmt.Errorf("key of %d bytes, minimum %d: %w", len(key), minLen, ErrKeyTooShort)
	}
	if len(key) > maxLen {
		return fmt.Errorf("key of %d bytes, maximum %d (the devices' %d-byte key limit less %d bytes of split number and kind): %w",
			len(key), maxLen, l.MaxKeyLen, format.KeyOverhead, ErrKeyTooLong)
	}
	return nil
}

// mechanismFor picks the mechanism for a value of n bytes.
func (a *Array) mechanismFor(n int, override string) (mechanism.Mechanism, error) {
	if override != "" {
		m, ok := a.byName[override]
		if !ok {
			return nil, fmt.Errorf("mechanism %q (configured: %v): %w", override, a.Mechanisms(), ErrUnknownMechanism)
		}
		return m, nil
	}
	if a.o.mode == Hybrid {
		for _, r := range a.o.rules {
			if r.Max == 0 || int64(n) <= r.Max {
				return a.byName[r.RM], nil
			}
		}
	}
	return a.def, nil
}

// Mechanism returns the mechanism the array would pick for a value of n
// bytes in its mode, without a per-call override.
func (a *Array) Mechanism(n int) string {
	m, _ := a.mechanismFor(n, "")
	return m.Name()
}

// startBackground starts the clock lease's renewal and the automatic
// resync, when configured.
func (a *Array) startBackground() {
	a.every(leaseSpan/8, func() { a.renewLease(context.Background()) })
	if a.own != nil {
		a.every(a.own.o.Lease/3, func() { a.renewOwnerLease(context.Background()) })
	}
	a.startSlow()
	if a.o.autoResync > 0 {
		a.every(a.o.autoResync, func() {
			a.resyncReturned()
			a.compact()
		})
	}
}

// every runs fn every interval until the array stops.
func (a *Array) every(interval time.Duration, fn func()) {
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-a.stop:
				return
			case <-t.C:
				fn()
			}
		}
	}()
}

// untilStop returns a context that ends when the array stops (Close), for
// background work.
func (a *Array) untilStop() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-a.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// thinner is implemented by mechanisms whose deletes and moves leave
// groups of values sparse (Packing's sets): Thinned returns, and forgets,
// the keys of the values left in groups that lost members. FoldLeaves
// first brings in the departures still only logged (Packing logs a leave
// as a delta, and learns which sets it thinned once it folds them).
type thinner interface {
	FoldLeaves(ctx context.Context) error
	Thinned() [][]byte
}

// compact repairs, one at a time under its key's lock, the keys the
// mechanisms report in thinned groups: Packing's repair moves a member of
// a set that has lost half its members or more into a new set, so that
// sparse sets (r parities for few members) empty out and go without a
// scrub. A regroup needs every device: on an impaired array the keys are
// left for the next scrub.
func (a *Array) compact() {
	ctx, cancel := a.untilStop()
	defer cancel()
	_ = a.Compact(ctx)
}

// Compact regroups now the Packing sets that deletes and moves have left
// sparse since they were last regrouped (the work the automatic resync's
// ticker does in the background, and scrub --repair over every set). It
// stops early, without error, while a device is not healthy: a regroup
// rewrites parities, which should wait for full redundancy.
//
// Keys are repaired compactWorkers at a time: a regrouped member joins a
// new set with the members regrouped alongside it, so one at a time would
// form sets of one member, as sparse as the ones they left.
func (a *Array) Compact(ctx context.Context) error {
	if err := a.begin(); err != nil {
		return err
	}
	defer a.end()
	stop := func() bool { return ctx.Err() != nil || a.impaired() }
	for _, m := range a.mechs {
		t, ok := m.(thinner)
		if !ok {
			continue
		}
		// A regroup moves members, which thins their old sets in turn:
		// a few rounds reach the sets those moves left behind.
		for round := 0; round < 8; round++ {
			if stop() {
				return ctx.Err()
			}
			_ = t.FoldLeaves(ctx) // what fails stays logged, for the next round or a repair
			keys := t.Thinned()
			if len(keys) == 0 {
				break
			}
			sem := make(chan struct{}, compactWorkers)
			var wg sync.WaitGroup
			for _, k := range keys {
				if stop() {
					break
				}
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					_, _ = a.Repair(ctx, k)
				}()
			}
			wg.Wait()
			if stop() {
				return ctx.Err() // nil when stopped for an impaired device
			}
		}
	}
	return nil
}

// compactWorkers is how many keys Compact repairs at once.
const compactWorkers = 64

// impaired reports whether a device is not healthy.
func (a *Array) impaired() bool {
	for i := range a.env.N() {
		if a.env.State(i) != mechanism.Healthy {
			return true
		}
	}
	return false
}

// resyncReturned resyncs every failed device that answers again and
// every full device that has space again (Resync probes it), and
// finishes the resync of devices that still have keys to catch up on
// (degraded-behind: a resync that could not repair every key, or records
// found at open).
func (a *Array) resyncReturned() {
	ctx, cancel := a.untilStop()
	defer cancel()
	for i := 0; i < a.env.N(); i++ {
		if a.env.State(i) == mechanism.Full {
			_, _ = a.Resync(ctx, i)
			continue
		}
		behind := a.env.State(i) == mechanism.Healthy && a.env.MissedCount(i) > 0
		if a.env.State(i) != mechanism.Failed && !behind {
			continue
		}
		if _, err := a.env.Device(i).Info(ctx); err != nil {
			continue
		}
		_, _ = a.Resync(ctx, i)
	}
}
