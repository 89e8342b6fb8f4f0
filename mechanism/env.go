package mechanism

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/kvarray/kvarray/internal/hlc"
	"sync"
	"sync/atomic"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
)

// State is what the array knows about one device.
type State uint32

// Device states.
const (
	// Healthy: serving, and holding everything that belongs on it.
	Healthy State = iota
	// Failed: its last operation failed with device.ErrDeviceFailed, or it
	// was found missing or foreign at open.
	Failed
	// Rebuilding: serving, but not yet holding everything that belongs on
	// it (a replaced device): a not-found from it proves nothing.
	Rebuilding
	// Full: read-only-full (a write failed with device.ErrFull): reads
	// are sent to it as to a healthy device, writes are not (they miss it
	// and are recorded, as for a failed device) until space is back and
	// a resync re-admits it.
	Full
	// Slow: answering much more slowly than its peers (see slow.go):
	// nothing is sent to it, reads go to the other pieces and writes miss
	// it and are recorded, as for a failed device, until it answers as
	// fast as its peers again and a resync re-admits it.
	Slow
)

func (s State) String() string {
	switch s {
	case Healthy:
		return "healthy"
	case Failed:
		return "failed"
	case Rebuilding:
		return "rebuilding"
	case Full:
		return "full"
	case Slow:
		return "slow"
	}
	return fmt.Sprintf("state(%d)", uint32(s))
}

// Env is what the array gives its mechanisms: the devices in array order,
// their states, and an executor for piece operations.
type Env struct {
	// devs are swapped by SetDevice while others use them (an online
	// replace), hence atomic.
	devs   []atomic.Pointer[device.Device]
	place  atomic.Pointer[Placement]
	names  []string
	limits device.Limits
	states []atomic.Uint32
	rec    records
	// Write watches (see WatchWrites), per device, and the calls of Do
	// and turns of key locks in flight per epoch, which Quiesce waits for.
	watches  []atomic.Pointer[Watch]
	epoch    atomic.Uint64
	inflight [2]atomic.Int64
	quiesce  sync.Mutex
	clock    hlc.Clock
	// onFenced is told of the first write a device refused as fenced
	// (device.ErrFenced: another process owns the array now).
	onFenced atomic.Pointer[func(error)]
	// lat is each device's latency record, kept while latOn (slow.go).
	lat   []latency
	latOn atomic.Bool
}

// OnFenced sets fn to be called with the error of every write a device
// refuses as fenced (device.ErrFenced): another process took the array
// over.
func (e *Env) OnFenced(fn func(error)) { e.onFenced.Store(&fn) }

// Clock is the array's version clock. Every version the array and its
// mechanisms issue (piece versions, set ids, parity and log versions)
// comes from it, so that one floor observed at open (the array header's
// clock lease) puts them all past what an earlier process issued.
func (e *Env) Clock() *hlc.Clock { return &e.clock }

// NewEnv returns an Env over devs, whose names are used in errors. limits
// must be the tightest limits across the devices.
func NewEnv(devs []device.Device, names []string, limits device.Limits) *Env {
	e := &Env{devs: make([]atomic.Pointer[device.Device], len(devs)), names: names, limits: limits, states: make([]atomic.Uint32, len(devs)),
		watches: make([]atomic.Pointer[Watch], len(devs)), lat: make([]latency, len(devs))}
	for i := range devs {
		e.devs[i].Store(&devs[i])
	}
	e.place.Store(&Placement{n: len(devs)})
	e.rec.busy = map[string]*recordLock{}
	e.rec.missed = make([]map[string]*record, len(devs))
	for i := range e.rec.missed {
		e.rec.missed[i] = map[string]*record{}
	}
	return e
}

// N is the number of devices.
func (e *Env) N() int { return len(e.devs) }

// Device returns device i.
func (e *Env) Device(i int) device.Device { return *e.devs[i].Load() }

// SetDevice swaps the device object at position i (a replaced device).
func (e *Env) SetDevice(i int, d device.Device) { e.devs[i].Store(&d) }

// Gen identifies the device object at a position, and its state's epoch,
// at one time: SetDevice starts a new object, and a resync or rebuild
// bringing the device back a new epoch.
type Gen struct {
	dev   *device.Device
	epoch uint32
}

// DeviceGen returns device i and its Gen, for MarkFailed.
func (e *Env) DeviceGen(i int) (device.Device, Gen) {
	p := e.devs[i].Load()
	return *p, Gen{p, epochOf(e.states[i].Load())}
}

// MarkFailed marks device i Failed after a call to it, made at generation
// g, reported device.ErrDeviceFailed, unless the device object was
// replaced or the device brought back since: the failures of a replaced
// (closed) device say nothing of its successor, and those of calls made
// while a device was down (still failing as a resync brings it back) say
// nothing of the device after the resync. What such a call missed is
// recorded all the same (Acknowledge), whatever the device's state.
func (e *Env) MarkFailed(i int, g Gen) {
	if e.devs[i].Load() != g.dev {
		return
	}
	for {
		v := e.states[i].Load()
		if epochOf(v) != g.epoch || e.states[i].CompareAndSwap(v, v&^stateMask|uint32(Failed)) {
			return
		}
	}
}

// MarkFull marks device i Full after a call to it, made at generation g,
// reported device.ErrFull, under MarkFailed's conditions, and only while
// it is Healthy: a failed device stays failed, and a device being rebuilt
// that cannot take its writes is failed (read as full, its not-founds
// would prove something).
func (e *Env) MarkFull(i int, g Gen) {
	if e.devs[i].Load() != g.dev {
		return
	}
	for {
		v := e.states[i].Load()
		if epochOf(v) != g.epoch {
			return
		}
		switch State(v & stateMask) {
		case Healthy:
			if e.states[i].CompareAndSwap(v, v&^stateMask|uint32(Full)) {
				return
			}
		case Rebuilding:
			e.MarkFailed(i, g)
			return
		default:
			return
		}
	}
}

// MarkFault marks device i after a call to it, made at generation g,
// failed with err: Full for device.ErrFull, Failed for any other
// device.ErrDeviceFailed, nothing otherwise.
func (e *Env) MarkFault(i int, g Gen, err error) {
	switch {
	case errors.Is(err, device.ErrFull):
		e.MarkFull(i, g)
	case errors.Is(err, device.ErrDeviceFailed):
		e.MarkFailed(i, g)
	}
}

// Writable reports whether writes are sent to device i: it is neither
// Failed, Full nor Slow.
func (e *Env) Writable(i int) bool {
	s := e.State(i)
	return s != Failed && s != Full && s != Slow
}

// Answering reports whether calls are sent to device i: it is neither
// Failed nor Slow. What reads a device past Do (a listing) asks this.
func (e *Env) Answering(i int) bool {
	s := e.State(i)
	return s != Failed && s != Slow
}

// Name returns device i's name.
func (e *Env) Name(i int) string { return e.names[i] }

// Limits returns the tightest key and value limits across the devices.
func (e *Env) Limits() device.Limits { return e.limits }

// Dev returns the index of the i-th device after dev in device order,
// circularly. It is not placement (see At): resync records use it.
func (e *Env) Dev(dev, i int) int { return (dev + i) % len(e.devs) }

// SetPlacement sets the placement of the array's keys (unweighted until
// then). The array sets it at open, from its header, before any I/O on
// user keys.
func (e *Env) SetPlacement(p *Placement) { e.place.Store(p) }

// Placement returns the placement of the array's keys.
func (e *Env) Placement() *Placement { return e.place.Load() }

// At returns the device of the piece at offset i from k's primary (see
// Placement): every mechanism's "device Primary+i" goes through it.
func (e *Env) At(k Key, i int) int { return e.place.Load().At(k, i) }

// Order returns every device once, in the order a choice of devices
// seeded by seed prefers them (see Placement.Order).
func (e *Env) Order(seed uint64) []int { return e.place.Load().Order(seed) }

// Offset returns the offset of device dev from k's primary: the inverse
// of At.
func (e *Env) Offset(k Key, dev int) int { return e.place.Load().Offset(k, dev) }

// A device's state word: its State in the low byte, and above it an
// epoch that every setting of a state other than Failed (a device
// brought back, or its state set by an operator) advances (see Gen).
const stateMask = 0xff

func epochOf(v uint32) uint32 { return v >> 8 }

// State returns what is known of device i.
func (e *Env) State(i int) State { return State(e.states[i].Load() & stateMask) }

// SetState records the state of device i.
func (e *Env) SetState(i int, s State) {
	for {
		v := e.states[i].Load()
		n := v&^stateMask | uint32(s)
		if s != Failed {
			n += 1 << 8
		}
		if e.states[i].CompareAndSwap(v, n) {
			return
		}
	}
}

// DeviceError is an error from one device, carrying its index.
type DeviceError struct {
	Dev  int
	Name string
	Op   device.OpKind
	Key  []byte
	Err  error
}

func (e *DeviceError) Error() string {
	return fmt.Sprintf("%v %q on device %d (%s): %v", e.Op, e.Key, e.Dev, e.Name, e.Err)
}

func (e *DeviceError) Unwrap() error { return e.Err }

// Op is a device operation addressed to one device of the array.
type Op struct {
	Dev int
	device.Op
	// Hidden is what a read found before Do failed it with ErrStale: the
	// device missed a later write of the key, so the bytes are no answer
	// to "what is the key's value". A caller that checks them against an
	// exact version it already knows (a Packing set's member, whose
	// bytes its parities still cover) may use them; nothing else may.
	Hidden []byte
}

// ErrMarkedFailed is the error of an operation not sent to a device
// because the device is marked Failed.
var ErrMarkedFailed = fmt.Errorf("marked failed until rebuilt or resynced: %w", device.ErrDeviceFailed)

// ErrMarkedFull is the error of a write not sent to a device because it
// is marked Full. It wraps device.ErrDeviceFailed, so that a write counts
// it as a device that missed it (within tolerance, acknowledged and
// recorded), and device.ErrFull, so that a write refused for too many
// full devices says so.
var ErrMarkedFull = fmt.Errorf("marked full (read-only) until space is freed and it is resynced: %w: %w: %w", device.ErrFull, device.ErrNoSpace, device.ErrDeviceFailed)

// ErrCommitUnknown marks the error of a store that failed after its
// commit point (the piece that makes it current) was sent: the piece may
// have landed with its answer lost, so the store's other pieces may be
// all that decodes the key's value, and must stay.
var ErrCommitUnknown = errors.New("the store's commit point may have landed")

// ErrStale is the error of a read whose answer cannot be trusted: the
// device missed a write of that key while it was failed (its resync
// record lists the key), or it is being rebuilt and lacks the key. The
// piece counts as bad: repairs rewrite it, which brings it up to date.
var ErrStale = errors.New("stale: the device missed writes of this key")

// Do executes ops, concurrently across devices and as one batch per
// device, and fills in each op's results. Errors are wrapped in
// *DeviceError.
//
// Do keeps the resync records: a delete that a device misses (it is
// marked Failed, or fails) is recorded durably on other devices before Do
// returns (stores are recorded by Acknowledge, once the caller knows the
// write is acknowledged), and a write that lands clears the record of
// that key. A read of a key that
// the device's record lists, or of a key missing from a device being
// rebuilt, fails with ErrStale instead of returning what may be an old
// value. Ops for a Failed device are not sent: a device that comes back
// may have missed writes, so only Resync or Rebuild re-admit it.
func (e *Env) Do(ctx context.Context, ops []Op) {
	if sctx, rest, at := e.skipRestoringReads(ctx, ops); at != nil {
		e.Do(sctx, rest)
		for j, i := range at {
			ops[i] = rest[j]
		}
		return
	}
	ep := e.enter()
	defer e.exit(ep)
	defer e.watchWrites(ctx, ops)()
	if dr, ok := ctx.Value(dryRunKey{}).(*DryRun); ok {
		reads, at := dr.skipWrites(e, ops)
		e.do(ctx, reads)
		for j, i := range at {
			ops[i] = reads[j]
		}
		return
	}
	e.do(ctx, ops)
	e.keepRecords(ctx, ops)
}

type dryRunKey struct{}

type settlingKey struct{}

// WithSettling returns a context for a key's repair before its first
// write after an unclean shutdown: a mechanism then looks for every
// listing of the key that a crash may have left behind (a Packing set it
// was moving out of), even where that costs more than a repair on a clean
// array would (Packing builds its set index).
func WithSettling(ctx context.Context) context.Context {
	return context.WithValue(ctx, settlingKey{}, true)
}

// Settling reports whether ctx is under WithSettling.
func Settling(ctx context.Context) bool {
	ok, _ := ctx.Value(settlingKey{}).(bool)
	return ok
}

type committedKey struct{}

// WithCommitted returns a context for reads of a split whose wanted write
// (Key.Want) is known to have completed: a store of it succeeded before
// the caller's commit point named it (a manifest's data split). A range
// read then need not count that the write is whole (at least k shards in
// place, which reads the headers of the shards it does not read): no write
// cut short can carry that version.
func WithCommitted(ctx context.Context) context.Context {
	return context.WithValue(ctx, committedKey{}, true)
}

// Committed reports whether ctx is under WithCommitted.
func Committed(ctx context.Context) bool {
	ok, _ := ctx.Value(committedKey{}).(bool)
	return ok
}

// DryRun counts the writes that operations under its context would have
// made, without making them: a scrub without repair runs the repairs
// under a DryRun to count what they would fix.
type DryRun struct {
	mu     sync.Mutex
	writes int
}

// WithDryRun returns a context under which Env sends no writes; each one
// succeeds at once and is counted in dr.
func WithDryRun(ctx context.Context, dr *DryRun) context.Context {
	return context.WithValue(ctx, dryRunKey{}, dr)
}

// DryRunning reports whether ctx is under a DryRun: its writes only
// pretend to land, so nothing may be forgotten on their account.
func DryRunning(ctx context.Context) bool {
	_, ok := ctx.Value(dryRunKey{}).(*DryRun)
	return ok
}

// Writes returns the number of writes skipped.
func (dr *DryRun) Writes() int {
	dr.mu.Lock()
	defer dr.mu.Unlock()
	return dr.writes
}

// skipWrites marks the writes of ops done and returns the reads, with
// their indices in ops. A write to a device marked failed fails, as it
// would in earnest (it is never sent), and is not counted: a scrub
// without repair counted the writes a repair could not make (a failed
// device's Packing pieces), and reported problems the repair then did
// not find.
func (dr *DryRun) skipWrites(e *Env, ops []Op) ([]Op, []int) {
	var reads []Op
	var at []int
	for i := range ops {
		if d := ops[i].Dev; isWrite(ops[i].Kind) && !e.Writable(d) {
			err := ErrMarkedFailed
			switch e.State(d) {
			case Full:
				err = ErrMarkedFull
			case Slow:
				err = ErrMarkedSlow
			}
			ops[i].Err = &DeviceError{Dev: d, Name: e.names[d], Op: ops[i].Kind, Key: ops[i].Key, Err: err}
			continue
		}
		if isWrite(ops[i].Kind) {
			ops[i].Err = nil
			dr.mu.Lock()
			dr.writes++
			dr.mu.Unlock()
			continue
		}
		reads = append(reads, ops[i])
		at = append(at, i)
	}
	return reads, at
}

func (e *Env) do(ctx context.Context, ops []Op) {
	switch len(ops) {
	case 0:
		return
	case 1:
		op := &ops[0]
		b := []device.Op{op.Op}
		d, gen := e.DeviceGen(op.Dev)
		err := e.batch(ctx, op.Dev, d, b)
		op.Op = b[0]
		e.settle(op.Dev, gen, ops, err)
		return
	}
	byDev := make(map[int][]int, len(ops))
	for i := range ops {
		byDev[ops[i].Dev] = append(byDev[ops[i].Dev], i)
	}
	run := func(dev int, idx []int) {
		b := make([]device.Op, len(idx))
		for j, i := range idx {
			b[j] = ops[i].Op
		}
		d, gen := e.DeviceGen(dev)
		err := e.batch(ctx, dev, d, b)
		for j, i := range idx {
			ops[i].Op = b[j]
		}
		e.settle(dev, gen, ops, err)
	}
	// One device's batch runs on this goroutine: a goroutine less per
	// call, on the path every operation takes.
	var wg sync.WaitGroup
	last := -1
	for dev, idx := range byDev {
		if last < 0 {
			last = dev
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(dev, idx)
		}()
	}
	run(last, byDev[last])
	wg.Wait()
}

func (e *Env) batch(ctx context.Context, dev int, d device.Device, b []device.Op) error {
	switch e.State(dev) {
	case Failed:
		for i := range b {
			b[i].Err = ErrMarkedFailed
		}
		return ErrMarkedFailed
	case Slow:
		for i := range b {
			b[i].Err = ErrMarkedSlow
		}
		return ErrMarkedSlow
	}
	if e.latOn.Load() {
		l := &e.lat[dev]
		defer l.end(l.begin())
	}
	defer keyPieces(b)()
	if e.State(dev) == Full {
		return readsOnly(ctx, d, b)
	}
	if r := restoringFrom(ctx); r != nil && r.dev == dev {
		return r.comb.do(ctx, d, b, e.clearsRecord(dev, b))
	}
	return d.Batch(ctx, b)
}

// keyPieces keys the pieces b stores (format.KeyPiece: each checksum
// then covers the key it is stored under) and returns what, once b has
// run, gives its stores their own values back and unkeys the pieces it
// read: above Do, pieces are as format.Encode makes them.
func keyPieces(b []device.Op) func() {
	var mine []int
	var own [][]byte
	for i := range b {
		if b[i].Kind != device.OpStore {
			continue
		}
		if v, ok := format.KeyPiece(b[i].Key, b[i].Value); ok {
			mine, own = append(mine, i), append(own, b[i].Value)
			b[i].Value = v
		}
	}
	return func() {
		for j, i := range mine {
			b[i].Value = own[j]
		}
		for i := range b {
			if b[i].Kind == device.OpRetrieve && b[i].Result != nil {
				off := 0
				if b[i].Partial {
					off = b[i].Off
				}
				format.Unkey(b[i].Key, b[i].Result, off)
			}
		}
	}
}

// readsOnly runs the reads of b on d, a Full device, and fails its writes
// with ErrMarkedFull without sending them.
func readsOnly(ctx context.Context, d device.Device, b []device.Op) error {
	var reads []device.Op
	var at []int
	for i := range b {
		if isWrite(b[i].Kind) {
			b[i].Err = ErrMarkedFull
			continue
		}
		reads = append(reads, b[i])
		at = append(at, i)
	}
	if len(reads) == 0 {
		return nil
	}
	err := d.Batch(ctx, reads)
	for j, i := range at {
		b[i] = reads[j]
	}
	return err
}

func isWrite(k device.OpKind) bool { return k == device.OpStore || k == device.OpDelete }

// settle wraps the errors of dev's ops, hides stale answers and updates
// the device's state.
func (e *Env) settle(dev int, gen Gen, ops []Op, batchErr error) {
	var failed, full bool
	fault := func(err error) {
		switch {
		case errors.Is(err, ErrMarkedSlow):
			// Not sent: says nothing of the device.
		case errors.Is(err, device.ErrFull):
			full = true
		case errors.Is(err, device.ErrDeviceFailed):
			failed = true
		}
	}
	fault(batchErr)
	rebuilding := e.State(dev) == Rebuilding
	for i := range ops {
		op := &ops[i]
		if op.Dev != dev {
			continue
		}
		if op.Err == nil && batchErr != nil {
			op.Err = batchErr
		}
		if !isWrite(op.Kind) && (op.Err == nil || errors.Is(op.Err, device.ErrNotFound)) {
			notFound := op.Err != nil || (op.Kind == device.OpExist && !op.Found)
			if e.missed(dev, op.Key) || (rebuilding && notFound) {
				if op.Err == nil {
					op.Hidden = op.Result
				}
				op.Err, op.Result, op.Found = ErrStale, nil, false
			}
		}
		if op.Err == nil {
			continue
		}
		if errors.Is(op.Err, device.ErrFull) && !errors.Is(op.Err, device.ErrDeviceFailed) {
			// A full device's write is a device that missed it (a write
			// within tolerance goes on), not a value refused.
			op.Err = fmt.Errorf("%w: %w", op.Err, device.ErrDeviceFailed)
		}
		fault(op.Err)
		if errors.Is(op.Err, device.ErrFenced) {
			if fn := e.onFenced.Load(); fn != nil {
				(*fn)(op.Err)
			}
		}
		var de *DeviceError
		if !errors.As(op.Err, &de) {
			op.Err = &DeviceError{Dev: dev, Name: e.names[dev], Op: op.Kind, Key: op.Key, Err: op.Err}
		}
	}
	switch {
	case failed:
		// Not the successor of a device replaced while the batch ran:
		// its ops fail, as a closed device's do.
		e.MarkFailed(dev, gen)
	case full:
		e.MarkFull(dev, gen)
	}
}

// Piece is one piece read from a device and decoded.
type Piece struct {
	Dev int
	// Bank: read from the split's bank key (Key.Bank), not its data key.
	Bank  bool
	Value format.Value
	// Raw, when set, is the encoding Value was decoded from (a rebuild's
	// scan keeps it), so that a copy can be written without encoding it
	// again.
	Raw []byte
	// Err is nil for a good piece; otherwise it wraps device.ErrNotFound,
	// format.ErrCorrupt, device.ErrDeviceFailed or a context error.
	Err error
}

// OK reports whether the piece was read and verified.
func (p *Piece) OK() bool { return p.Err == nil }

// Read reads and decodes key from each of devs.
func (e *Env) Read(ctx context.Context, key []byte, devs []int) []Piece {
	ops := make([]Op, len(devs))
	for i, d := range devs {
		ops[i] = Op{Dev: d, Op: device.Op{Kind: device.OpRetrieve, Key: key}}
	}
	e.Do(ctx, ops)
	pieces := make([]Piece, len(devs))
	for i := range ops {
		pieces[i] = e.decode(&ops[i])
	}
	return pieces
}

// ReadBoth reads and decodes the piece of k at offset off from the
// primary under the data key and under the bank key (Piece.Bank), in one
// batch to that device.
func (e *Env) ReadBoth(ctx context.Context, k Key, off int) []Piece {
	d := e.At(k, off)
	ops := []Op{{Dev: d, Op: device.Op{Kind: device.OpRetrieve, Key: k.Data()}}, {Dev: d, Op: device.Op{Kind: device.OpRetrieve, Key: k.Bank()}}}
	e.Do(ctx, ops)
	pieces := []Piece{e.decode(&ops[0]), e.decode(&ops[1])}
	pieces[1].Bank = true
	return pieces
}

func (e *Env) decode(op *Op) Piece {
	p := Piece{Dev: op.Dev, Err: op.Err}
	if p.Err != nil {
		return p
	}
	v, err := format.Decode(op.Result)
	if err != nil {
		p.Err = &DeviceError{Dev: op.Dev, Name: e.names[op.Dev], Op: device.OpRetrieve, Key: op.Key, Err: err}
		return p
	}
	p.Value = v
	return p
}

// Piece returns part's answer as the Piece a Read of part.Key from
// part.Dev would have returned, when ReadParts got one: the whole value
// (Part.Whole) or an error. ok is false for a partial read.
func (e *Env) Piece(part *Part) (p Piece, ok bool) {
	if part.Err == nil && part.Whole == nil {
		return Piece{}, false
	}
	op := Op{Dev: part.Dev, Op: device.Op{Kind: device.OpRetrieve, Key: part.Key, Result: part.Whole}}
	op.Err = part.Err
	return e.decode(&op), true
}

// Write stores values[i] under key on devs[i]. It fails only when more
// than maxFailed of the writes fail: the devices that missed a write are
// recorded for resync (see Do), so a degraded write is safe to
// acknowledge. maxFailed = 0 requires every write.
//
// A write that cannot succeed because more than maxFailed of devs are
// already marked Failed writes nothing (see Reachable): written in place
// on the others, it would destroy the value it fails to replace.
func (e *Env) Write(ctx context.Context, key []byte, devs []int, values [][]byte, maxFailed int) error {
	return e.WritePrimaryLast(ctx, key, devs, values, maxFailed, nil)
}

// WritePrimaryLast is Write with values[0] written last when before is
// set: the others first, then before with how many of them landed, then
// values[0] on devs[0]. An error from before fails the write with devs[0]
// untouched.
func (e *Env) WritePrimaryLast(ctx context.Context, key []byte, devs []int, values [][]byte, maxFailed int, before func(landed int) error) error {
	if err := e.Reachable(devs, maxFailed); err != nil {
		return fmt.Errorf("store %q: %w", key, err)
	}
	ops := make([]Op, len(devs))
	for i, d := range devs {
		ops[i] = Op{Dev: d, Op: device.Op{Kind: device.OpStore, Key: key, Value: values[i]}}
	}
	if before == nil {
		e.Do(ctx, ops)
	} else if err := e.DoPrimaryLast(ctx, ops, maxFailed, before); err != nil {
		return err
	}
	if err := Quorum(ops, maxFailed); err != nil {
		return err
	}
	return e.Acknowledge(ctx, ops)
}

// DoPrimaryLast runs ops[1:], then, unless more than maxFailed of them
// failed (Quorum), before (if set) with how many of them landed, then
// ops[0]: the piece that makes a write current goes once the others can
// stand without it. An error means ops[0] was not sent.
func (e *Env) DoPrimaryLast(ctx context.Context, ops []Op, maxFailed int, before func(landed int) error) error {
	e.Do(ctx, ops[1:])
	if err := Quorum(ops[1:], maxFailed); err != nil {
		return err
	}
	if before != nil {
		landed := 0
		for i := range ops[1:] {
			if ops[1+i].Err == nil {
				landed++
			}
		}
		if err := before(landed); err != nil {
			return err
		}
	}
	e.Do(ctx, ops[:1])
	return nil
}

// Delete deletes key from each of devs; it fails only when more than
// maxFailed deletes fail, as Write.
func (e *Env) Delete(ctx context.Context, key []byte, devs []int, maxFailed int) error {
	ops := make([]Op, len(devs))
	for i, d := range devs {
		ops[i] = Op{Dev: d, Op: device.Op{Kind: device.OpDelete, Key: key}}
	}
	e.Do(ctx, ops)
	if err := Quorum(ops, maxFailed); err != nil {
		return err
	}
	for i := range ops {
		if ops[i].Err != nil && recordable(key) && !e.recorded(ops[i].Dev, key) && e.State(ops[i].Dev) != Rebuilding {
			return fmt.Errorf("delete %q: device %d missed it: %w", key, ops[i].Dev, ErrNotRecorded)
		}
	}
	return nil
}

// Reachable returns an error wrapping device.ErrDeviceFailed when more
// than maxFailed of devs are marked Failed, Full or Slow: a write to them
// cannot reach its quorum, and must not start. When some of them are
// Full, the error wraps ErrMarkedFull (device.ErrFull) and names them.
func (e *Env) Reachable(devs []int, maxFailed int) error {
	var down, full []int
	for _, d := range devs {
		switch e.State(d) {
		case Failed, Slow:
			down = append(down, d)
		case Full:
			full = append(full, d)
		}
	}
	if len(down)+len(full) <= maxFailed {
		return nil
	}
	if len(full) > 0 {
		return fmt.Errorf("devices %v of %v are full and %v failed, at most %d may be: nothing written: %w", full, devs, down, maxFailed, ErrMarkedFull)
	}
	return fmt.Errorf("devices %v of %v are failed, at most %d may be: nothing written: %w", down, devs, maxFailed, ErrMarkedFailed)
}

// Quorum returns the errors of ops joined when more than maxFailed of
// them failed, or when one failed for a reason other than a device
// failure with a context still live; nil otherwise.
func Quorum(ops []Op, maxFailed int) error {
	var errs []error
	other := false
	for i := range ops {
		if err := ops[i].Err; err != nil {
			errs = append(errs, err)
			if !errors.Is(err, device.ErrDeviceFailed) {
				other = true
			}
		}
	}
	if len(errs) > maxFailed || other {
		return errors.Join(errs...)
	}
	return nil
}

// Span returns the devices at offsets from .. to-1 of k (see At).
func (e *Env) Span(k Key, from, to int) []int {
	devs := make([]int, 0, max(to-from, 0))
	p := e.place.Load()
	for i := from; i < to; i++ {
		devs = append(devs, p.At(k, i))
	}
	return devs
}

// ReadSpan reads the data key of k from the devices at offsets [from, to)
// after its primary, reusing the pieces in have that were already read.
func (e *Env) ReadSpan(ctx context.Context, k Key, from, to int, have []Piece) []Piece {
	return e.readSpan(ctx, k, false, from, to, have)
}

// ReadBankSpan is ReadSpan for the bank key of k (see Key.Bank).
func (e *Env) ReadBankSpan(ctx context.Context, k Key, from, to int, have []Piece) []Piece {
	return e.readSpan(ctx, k, true, from, to, have)
}

func (e *Env) readSpan(ctx context.Context, k Key, bank bool, from, to int, have []Piece) []Piece {
	want := e.Span(k, from, to)
	out := make([]Piece, len(want))
	var missing []int
	var at []int
	for i, d := range want {
		found := false
		for _, p := range have {
			if p.Dev == d && p.Bank == bank {
				out[i], found = p, true
				break
			}
		}
		if !found {
			missing = append(missing, d)
			at = append(at, i)
		}
	}
	key := k.Data()
	if bank {
		key = k.Bank()
	}
	for j, p := range e.Read(ctx, key, missing) {
		p.Bank = bank
		out[at[j]] = p
	}
	return out
}

// Newest returns the highest write version among the good pieces that
// satisfy match (and k.Want, when set), or 0 when there is none.
func Newest(k Key, pieces []Piece, match func(*format.Header) bool) uint64 {
	var v uint64
	for i := range pieces {
		p := &pieces[i]
		if p.OK() && (k.Want == 0 || p.Value.Version == k.Want) && match(&p.Value.Header) && p.Value.Version > v {
			v = p.Value.Version
		}
	}
	return v
}

// Lost returns an ErrDataLoss error for k, listing why each piece was bad.
//
// A piece's not-found is kept as text, not wrapped: a lost value must not
// read as "the key does not exist" to errors.Is(err, device.ErrNotFound).
func Lost(k Key, name string, pieces []Piece, why string) error {
	var errs []error
	for i := range pieces {
		switch err := pieces[i].Err; {
		case err == nil:
		case errors.Is(err, device.ErrNotFound):
			errs = append(errs, errors.New(err.Error()))
		default:
			errs = append(errs, err)
		}
	}
	return fmt.Errorf("%s split %d of key %q: %s: %w", name, k.Split, k.User, why,
		errors.Join(append([]error{ErrDataLoss}, errs...)...))
}

// SameBytes reports whether two pieces hold identical encodings; used to
// decide whether a copy must be rewritten.
func SameBytes(a, b *format.Value) bool {
	return a.Version == b.Version && bytes.Equal(a.Payload, b.Payload) && bytes.Equal(a.Fields, b.Fields)
}

// Part is a range of one device's value: bytes [Off, Off+Len) of Key on
// Dev, Len > 0. Result and Err are ReadParts' outputs.
type Part struct {
	Dev      int
	Key      []byte
	Off, Len int
	Result   []byte // fewer than Len bytes where the value ends
	// Whole is the whole value when the device could not read part of it
	// (Result is then a slice of it), so that a caller may use it as a
	// Read's answer (Env.Piece) rather than read it again.
	Whole []byte
	Err   error
}

// ReadParts reads each part, as Read reads whole values (concurrently
// across devices, stale answers and failed devices handled alike), but
// raw: nothing is decoded or verified, which is the caller's to do. A
// device that cannot read part of a value returns it whole (see
// device.Op.Len), sliced here.
func (e *Env) ReadParts(ctx context.Context, parts []Part) {
	ops := make([]Op, len(parts))
	for i, p := range parts {
		ops[i] = Op{Dev: p.Dev, Op: device.Op{Kind: device.OpRetrieve, Key: p.Key, Off: p.Off, Len: p.Len}}
	}
	e.Do(ctx, ops)
	for i := range ops {
		p, op := &parts[i], &ops[i]
		p.Result, p.Whole, p.Err = op.Result, nil, op.Err
		if p.Err == nil && !op.Partial {
			p.Whole = op.Result
			lo := min(max(p.Off, 0), len(p.Result))
			p.Result = p.Result[lo : lo+min(p.Len, len(p.Result)-lo)]
		}
	}
}
