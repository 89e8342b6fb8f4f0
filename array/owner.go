package array

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// One owner per array (issue 40). Devices that processes on other hosts
// can reach (redis://) have no lock of their own, and two processes
// writing one array lose acknowledged values: each keeps resync records,
// a metadata cache and Packing's sets in memory as if it were the only
// writer. So a process opened WithOwner holds a lease recorded on every
// device (ownerKey): its owner, an owner epoch, and the time it runs
// until, renewed while the array is open and released at Close.
//
// Open refuses an array whose lease another owner holds and has not let
// expire (ErrOwned, naming it), unless asked to take over. Taking over
// (or an expired lease, or the same owner starting again after a crash)
// advances the epoch and fences the devices that can be fenced
// (device.Fencer), one after another in device order, before anything
// else is written: from then on each of them refuses, in the same round
// trip as the write, every write of an older epoch. Two processes opening
// at once race for the first device that answers; the loser fails at it
// and writes nothing but its claim on the lease (acquire). A device that was down at the takeover is
// fenced by the new owner's first write to it. A deposed owner learns of
// it at its first refused write (device.ErrFenced, never a device
// failure: nothing it writes then is acknowledged) or lease renewal: the
// array is then Deposed, and refuses every operation.
//
// Devices one process alone can open (Pebble's directory lock) need no
// fence: the lock is theirs.
var (
	ownerKey = format.Key([]byte("kvarray-owner"), 0, format.KindArray)
	fenceKey = format.Key([]byte("kvarray-fence"), 0, format.KindArray)
)

// ErrOwned: another process holds the array's lease.
var ErrOwned = errors.New("the array is served by another process")

// ErrDeposed: another process took the array over; this one must stop.
var ErrDeposed = errors.New("deposed: another process took the array over")

// DefaultLease is how long a lease lasts unless renewed.
const DefaultLease = 10 * time.Second

// Owner identifies the process that opens an array (see WithOwner).
type Owner struct {
	// ID names the owner across restarts (host and config file): the
	// same ID may open an array its earlier process left leased (it
	// crashed), another may not until the lease expires.
	ID string
	// Process tells this process from another of the same ID (the pid).
	Process string
	// Lease is how long the lease lasts without renewal (DefaultLease
	// when 0).
	Lease time.Duration
	// Takeover: take the array over even if another owner's lease is
	// live (a standby host whose primary is unreachable but may be
	// alive: its writes are fenced off).
	Takeover bool
}

// WithOwner makes Open and Create take the array's lease for o.
func WithOwner(o Owner) Option { return func(opts *options) { opts.owner = &o } }

// lease is the record under ownerKey.
type lease struct {
	epoch uint64
	until int64 // Unix milliseconds; 0: released
	id    string
	proc  string
}

func (l lease) encode() []byte {
	p := binary.BigEndian.AppendUint64(nil, l.epoch)
	p = binary.BigEndian.AppendUint64(p, uint64(l.until))
	p = binary.BigEndian.AppendUint16(p, uint16(len(l.id)))
	p = append(p, l.id...)
	p = append(p, l.proc...)
	h := format.Header{RM: format.RMNone, Splits: 1, SplitLen: uint32(len(p)), ObjectLen: uint64(len(p))}
	return format.Encode(&h, p)
}

func decodeLease(b []byte) (lease, error) {
	v, err := format.Decode(b)
	if err != nil {
		return lease{}, err
	}
	p := v.Payload
	if len(p) < 18 || len(p) < 18+int(binary.BigEndian.Uint16(p[16:])) {
		return lease{}, fmt.Errorf("%w: owner lease of %d bytes", format.ErrCorrupt, len(p))
	}
	n := int(binary.BigEndian.Uint16(p[16:]))
	return lease{epoch: binary.BigEndian.Uint64(p), until: int64(binary.BigEndian.Uint64(p[8:])),
		id: string(p[18 : 18+n]), proc: string(p[18+n:])}, nil
}

func (l lease) who() string {
	if l.proc == "" {
		return l.id
	}
	return l.id + " (" + l.proc + ")"
}

// ownership is an open array's lease.
type ownership struct {
	o       Owner
	epoch   uint64
	deposed atomic.Pointer[error]
}

// acquire takes the lease for a.o.owner (see the package doc above).
func (a *Array) acquire(ctx context.Context) error {
	o := a.o.owner
	if o == nil {
		return nil
	}
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	var cur lease
	var fenced uint64
	var fencedBy string // the owner of the newest fence
	for i := range a.env.N() {
		if a.env.State(i) == mechanism.Failed {
			continue
		}
		d := a.env.Device(i)
		if b, err := d.Retrieve(ctx, ownerKey); err == nil {
			if l, err := decodeLease(b); err == nil && l.epoch > cur.epoch {
				cur = l
			}
		}
		if _, ok := device.AsFencer(d); ok {
			if b, err := d.Retrieve(ctx, fenceKey); err == nil {
				if e, by, ok := device.ParseFenceToken(b); ok && e > fenced {
					fenced, fencedBy = e, by
				}
			}
		}
	}
	if fenced == cur.epoch && fencedBy != "" && fencedBy != cur.who() {
		// The loser of a race to open (see below) wrote its claim over
		// the winner's lease; the fence names the winner.
		cur.id, cur.proc = splitToken(fencedBy)
	}
	now := time.Now()
	if cur.id != "" && cur.id != o.ID && cur.until > now.UnixMilli() && !o.Takeover {
		left := time.UnixMilli(cur.until).Sub(now).Round(100 * time.Millisecond)
		return fmt.Errorf("%w: %s holds its lease (epoch %d, %v left): stop it, wait for its lease to expire, or start this one with --takeover to depose it",
			ErrOwned, cur.who(), cur.epoch, left)
	}
	own := &ownership{o: *o, epoch: max(cur.epoch, fenced) + 1}
	a.own = own
	// The claim goes out before the fence: a process that reads the
	// lease after it sees it live and stops there. Reading the lease and
	// the fence is not one step, so without it a second opener could
	// read the old lease after this one's fence and before its lease,
	// take a newer epoch and fence this one out after it had opened.
	// Two that both read before either claimed race at the fence below.
	_ = a.writeLease(ctx, now.Add(o.Lease))
	token := own.token()
	fencers := false
	for i := range a.env.N() {
		if a.env.State(i) == mechanism.Failed {
			continue
		}
		f, ok := device.AsFencer(a.env.Device(i))
		if !ok {
			continue
		}
		fencers = true
		err := f.Fence(ctx, fenceKey, own.epoch, token)
		if errors.Is(err, device.ErrFenced) {
			a.own = nil
			return fmt.Errorf("%w: another process took it over meanwhile (device %d, %s): %v", ErrOwned, i, a.env.Name(i), err)
		}
		// A device that cannot be fenced now is fenced by the first
		// write it takes (see device.Fencer).
	}
	a.env.OnFenced(func(err error) { a.depose(err) })
	if !fencers {
		return nil // devices one process alone opens: no race to lose
	}
	// Again behind the fence: the loser of a race may have written its
	// claim over this one's on some devices.
	if err := a.writeLease(ctx, now.Add(o.Lease)); err != nil && a.Deposed() != nil {
		return fmt.Errorf("array: take the lease: %w", a.Deposed())
	}
	return nil
}

// token is what this owner's fences hold beside the epoch: lease.who.
func (own *ownership) token() string { return own.o.ID + " (" + own.o.Process + ")" }

// splitToken is token's inverse: the owner ID and process.
func splitToken(tok string) (id, proc string) {
	i := strings.LastIndex(tok, " (")
	if i < 0 || !strings.HasSuffix(tok, ")") {
		return tok, ""
	}
	return tok[:i], tok[i+2 : len(tok)-1]
}

// writeLease records this process's lease, running until until (zero:
// released), on every device that answers.
func (a *Array) writeLease(ctx context.Context, until time.Time) error {
	own := a.own
	l := lease{epoch: own.epoch, id: own.o.ID, proc: own.o.Process}
	if !until.IsZero() {
		l.until = until.UnixMilli()
	}
	val := l.encode()
	var ops []mechanism.Op
	for i := range a.env.N() {
		ops = append(ops, mechanism.Op{Dev: i, Op: device.Op{Kind: device.OpStore, Key: ownerKey, Value: val}})
	}
	a.env.Do(ctx, ops)
	var errs []error
	for i := range ops {
		if ops[i].Err != nil {
			errs = append(errs, ops[i].Err)
		}
	}
	return errors.Join(errs...)
}

// renewOwnerLease extends the lease, once a third of it has passed.
func (a *Array) renewOwnerLease(ctx context.Context) {
	if a.own == nil || a.Deposed() != nil {
		return
	}
	// A device only one process can open refuses nothing: the lease
	// itself says whether another owner has taken over (--takeover of a
	// lease this process let expire, stopped or cut off).
	for i := range a.env.N() {
		if st := a.env.State(i); st == mechanism.Failed || st == mechanism.Slow {
			continue
		}
		b, err := a.env.Device(i).Retrieve(ctx, ownerKey)
		if err != nil {
			continue
		}
		if l, err := decodeLease(b); err == nil && l.epoch > a.own.epoch {
			a.depose(fmt.Errorf("%s holds the lease at epoch %d", l.who(), l.epoch))
			return
		}
		break
	}
	_ = a.writeLease(ctx, time.Now().Add(a.own.o.Lease))
}

// releaseLease gives the lease up at Close, so that the next owner need
// not wait for it to expire.
func (a *Array) releaseLease(ctx context.Context) {
	if a.own == nil || a.Deposed() != nil {
		return
	}
	_ = a.writeLease(ctx, time.Time{})
}

// depose marks the array taken over by another process: a device refused
// a write of this one's epoch.
func (a *Array) depose(cause error) {
	if a.own == nil {
		return
	}
	err := fmt.Errorf("%w (epoch %d): %w", ErrDeposed, a.own.epoch, cause)
	if a.own.deposed.CompareAndSwap(nil, &err) {
		close(a.deposedCh)
	}
}

// Deposed returns why the array was taken over by another process, or nil
// while this one owns it (or it was opened without an owner).
func (a *Array) Deposed() error {
	if a.own == nil {
		return nil
	}
	if p := a.own.deposed.Load(); p != nil {
		return *p
	}
	return nil
}

// DeposedC is closed once the array is Deposed: a server stops serving.
func (a *Array) DeposedC() <-chan struct{} { return a.deposedCh }

// OwnerEpoch returns the owner epoch this process holds (0: no owner).
func (a *Array) OwnerEpoch() uint64 {
	if a.own == nil {
		return 0
	}
	return a.own.epoch
}
