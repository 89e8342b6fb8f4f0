// Package packing is the Packing mechanism: up to k values whose primaries
// are k different devices form a reliability set, protected by r parity
// objects on r other devices (KVMD's multi-object erasure coding). Each
// member stays whole on its own primary, so reading a healthy member is one
// device read, and the storage overhead is r/k, as with Splitting, without
// cutting small values into tiny shards.
//
// Layout (see docs/ARCHITECTURE.md):
//
//   - A member is stored on its primary under its data key, as a normal
//     piece whose RM fields hold the set id, the set's geometry (k, r, shard
//     size, parity devices) and its slot. The zero padding to the shard
//     size is virtual: it is never written.
//   - Parity j of set S is stored on its parity device under a key derived
//     from S (kind kindParity), and its RM fields carry the set's
//     membership: each member's slot, device, key, split and lengths, and
//     the version the parity covers. The membership is thus written r
//     times for free, with no separate metadata objects: an insert costs
//     1 + r/ck device writes.
//   - A member read whose primary is lost finds its set from the parity
//     headers on the surviving devices (an index built on the first such
//     read and kept current afterwards).
//
// Invariants:
//
//   - A set never holds two members on one device, and its parities are on
//     devices that hold no member.
//   - A piece counts in a reconstruction only if it is exactly what the
//     parity covers: a member of the listed version, a parity of the
//     newest set version. Anything else is treated as erased, so stale
//     pieces are never mixed in and wrong bytes are never returned.
//   - Updates log the data delta between the old and new member on the
//     parity devices (PARIX; see log.go) rather than reading and
//     rewriting the parities; a parity is the stored one with its newer
//     log entries applied. Deletes patch the parities in place. Changes to
//     one set are serialised.
//   - A store is acknowledged only once its member and, for every parity
//     device that did not take its parity or log entry, a stale record are
//     durable.
//   - In a degraded set (a member or parity bad: its value or data is
//     decoded with the other members' bytes), an update's log entry or
//     patch lands on a parity before the member is overwritten in place.
//     A parity device failing under the update then fails the store but
//     costs no other member, even when every device comes back (as a
//     restarted server does) with what it held. A member replaced by
//     another mechanism's value leaves before that value's primary piece
//     overwrites it (the array's Precommit); one moving to another set is
//     overwritten first, so that an insert failing on its primary keeps
//     its old value in the set: in a set with r pieces bad, a parity
//     device failing under that leave loses the values decoded with it
//     (a third failure at once; see docs/ARCHITECTURE.md, Known limits).
package packing

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/erasure"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/internal/hlc"
	"github.com/kvarray/kvarray/internal/keylock"
	"github.com/kvarray/kvarray/mechanism"
)

// Name is the mechanism's name in configs.
const Name = "packing"

// Defaults, as in the KVMD evaluation.
const (
	DefaultK    = 4
	DefaultR    = 2
	DefaultWait = 2 * time.Millisecond
)

// Option configures Packing.
type Option func(*Mechanism)

// WithIdleReplay sets how long the delta log waits without a change before
// it folds itself into the parities (default 1 s); 0 never does, leaving
// the fold to repairs, Settle and the log's size bound: for tests that
// copy the devices and need them still between operations.
func WithIdleReplay(d time.Duration) Option {
	return func(m *Mechanism) { m.idle = d }
}

// New returns a Factory for Packing with sets of up to k members and r
// parities, waiting at most wait for a set to fill (0 takes the defaults).
// On fewer than k+r devices, sets hold at most N-r members.
func New(k, r int, wait time.Duration, opts ...Option) mechanism.Factory {
	if k == 0 {
		k = DefaultK
	}
	if r == 0 {
		r = DefaultR
	}
	if wait == 0 {
		wait = DefaultWait
	}
	return func(env *mechanism.Env) (mechanism.Mechanism, error) {
		if k < 1 || r < 1 || k > 255 || r > 255 {
			return nil, fmt.Errorf("packing: k=%d r=%d: want 1..255 each", k, r)
		}
		if env.N() < r+1 {
			return nil, fmt.Errorf("packing: r=%d parities need at least %d devices, the array has %d", r, r+1, env.N())
		}
		k = min(k, env.N()-r)
		codec, err := erasure.Lookup(erasure.ReedSolomon, k, r)
		if err != nil {
			return nil, fmt.Errorf("packing: %w", err)
		}
		m := &Mechanism{env: env, k: k, r: r, wait: wait, codec: codec, idle: logIdle,
			sets: keylock.New(keylock.WithHolder(env)), pending: make([][]*entry, env.N()), log: newDeltaLog(env.N()), ids: env.Clock()}
		for _, o := range opts {
			o(m)
		}
		if m.SplitCap() < 1 {
			return nil, fmt.Errorf("packing: device values of %d bytes cannot hold a parity header", env.Limits().MaxValueLen)
		}
		return m, nil
	}
}

// Mechanism is Packing bound to an array's devices.
type Mechanism struct {
	env   *mechanism.Env
	k, r  int
	wait  time.Duration
	codec erasure.Codec
	ids   *hlc.Clock // set ids and parity versions: the array's clock (Env.Clock)
	sets  *keylock.Table

	mu      sync.Mutex
	pending [][]*entry // per device, oldest first
	seq     uint64

	idxMu sync.Mutex
	index *setIndex // nil until a lost member is first looked up
	// parityless: the sets this process wrote of which no parity landed
	// (every parity device down), by id, until a repair writes their
	// parities: the resync of those devices finds nothing else to rebuild
	// them from (see writeSet). Under idxMu; at most maxParityless.
	parityless map[uint64]indexedSet

	log  *deltaLog     // updates and deletes not yet in the parities (log.go)
	idle time.Duration // WithIdleReplay

	sets1 atomic.Int64 // sets formed, by members: for stats

	thinMu  sync.Mutex
	thinned [][]byte            // Thinned
	left    map[uint64]struct{} // sets with a logged leave not yet folded (FoldLeaves)

	parityMu    sync.Mutex
	parityBytes []float64 // per device: parity bytes this process placed, over its weight
}

type indexEntry struct {
	g       geometry
	m       member
	version uint64 // version of the parity it was read from
}

// RM implements mechanism.Mechanism.
func (m *Mechanism) RM() format.RM { return format.RMPacking }

// Name implements mechanism.Mechanism.
func (m *Mechanism) Name() string { return Name }

// Width implements mechanism.Mechanism: members live on their primary only.
func (m *Mechanism) Width() int { return 1 }

// Tolerates implements mechanism.Mechanism.
func (m *Mechanism) Tolerates() int { return m.r }

// SplitCap implements mechanism.Mechanism: a parity is as large as the
// largest member plus the set's membership, and must fit on a device.
func (m *Mechanism) SplitCap() int {
	l := m.env.Limits()
	return l.MaxValueLen - format.HeaderLen - maxParityFields(m.k, m.r, l.MaxKeyLen-format.KeyOverhead)
}

// NeedsPrevious reports that a store must be given the previous value:
// replacing a member without patching its set would corrupt the set.
func (m *Mechanism) NeedsPrevious() bool { return true }

// parityDevicesDown reports whether every parity device of g is failed
// (or full): the set's membership cannot change until one is back.
func (m *Mechanism) parityDevicesDown(g geometry) bool {
	for _, d := range g.parity {
		if m.env.Writable(d) {
			return false
		}
	}
	return true
}

func memberKey(key []byte, split int) string {
	return string(format.Key(key, split, format.KindData))
}

// ---- insert: queue, form a set, write it ----

type entry struct {
	k     mechanism.Key
	obj   mechanism.Object
	value []byte
	seq   uint64
	done  chan struct{}
	err   error
	taken bool // guarded by Mechanism.mu
}

// Store implements mechanism.Mechanism.
func (m *Mechanism) Store(ctx context.Context, k mechanism.Key, obj mechanism.Object, value []byte, prev *mechanism.Prev) error {
	if prev == nil {
		return m.insert(ctx, k, obj, value)
	}
	done, err := m.updateInPlace(ctx, k, obj, value, prev)
	if done {
		return err
	}
	// Move the member to a new set: join the new one first and leave the
	// old one after, so that a failure leaves the old value protected.
	// The old set is found first, while the primary still holds the old
	// member (after the insert it holds the new one).
	f, old, ok, err := m.oldMember(ctx, k, prev)
	if err != nil && !errors.Is(err, device.ErrNotFound) {
		return fmt.Errorf("packing: move split %d of %q: find its old set: %w", k.Split, k.User, err)
	}
	inSet := err == nil
	if inSet {
		// The insert overwrites the old member on the primary: its set
		// must be able to let it go.
		if err := m.leavable(ctx, f); err != nil {
			return fmt.Errorf("packing: move split %d of %q out of set %x: %w", k.Split, k.User, f.set, err)
		}
	}
	if err := m.insert(ctx, k, obj, value); err != nil {
		return err
	}
	if !inSet {
		return nil
	}
	if err := m.detachFrom(ctx, k, f, old, ok); err != nil && !errors.Is(err, device.ErrNotFound) {
		return fmt.Errorf("packing: move split %d of %q out of its old set: %w", k.Split, k.User, err)
	}
	return nil
}

func (m *Mechanism) insert(ctx context.Context, k mechanism.Key, obj mechanism.Object, value []byte) error {
	e := &entry{k: k, obj: obj, value: value, done: make(chan struct{})}
	m.mu.Lock()
	m.seq++
	e.seq = m.seq
	m.pending[k.Primary] = append(m.pending[k.Primary], e)
	set := m.formLocked(-1)
	m.mu.Unlock()
	if set != nil {
		m.writeSet(ctx, set)
		set = nil // written: a later timeout must not write it again
	}
	timer := time.NewTimer(m.wait)
	defer timer.Stop()
	for {
		select {
		case <-e.done:
			return e.err
		case <-timer.C:
			m.mu.Lock()
			if !e.taken {
				set = m.formLocked(k.Primary)
			}
			m.mu.Unlock()
			if set != nil {
				m.writeSet(ctx, set)
				set = nil
			}
			timer.Reset(m.wait)
		case <-ctx.Done():
			m.mu.Lock()
			if !e.taken {
				q := m.pending[k.Primary]
				m.pending[k.Primary] = slices.DeleteFunc(q, func(x *entry) bool { return x == e })
				m.mu.Unlock()
				return ctx.Err()
			}
			m.mu.Unlock()
			<-e.done
			return e.err
		}
	}
}

// formLocked takes the oldest entry of up to k devices, oldest first. With
// force < 0 it forms a set only when k devices have entries; otherwise it
// forms one with what there is, including device force.
func (m *Mechanism) formLocked(force int) []*entry {
	var devs []int
	for d, q := range m.pending {
		if len(q) > 0 {
			devs = append(devs, d)
		}
	}
	if len(devs) == 0 || (force < 0 && len(devs) < m.k) {
		return nil
	}
	sort.Slice(devs, func(i, j int) bool { return m.pending[devs[i]][0].seq < m.pending[devs[j]][0].seq })
	if len(devs) > m.k {
		if force >= 0 && !slices.Contains(devs[:m.k], force) {
			devs[m.k-1] = force
		}
		devs = devs[:m.k]
	}
	set := make([]*entry, len(devs))
	for i, d := range devs {
		set[i] = m.pending[d][0]
		set[i].taken = true
		m.pending[d] = m.pending[d][1:]
	}
	return set
}

// parityDevices picks r devices holding no member for the parities of a
// set of shards of size bytes, preferring devices that are not failed,
// then the devices with the fewest parity bytes placed by this process
// relative to their weights, then the placement's order seeded by the
// set id (Env.Order).
//
// Why not the seeded order alone: parities are few and large (one shard
// of the largest member per set), so a random choice leaves a device's
// parity bytes far from its share for a long time, and a device that
// holds more members (a heavier one) is excluded more often, so it would
// get less than its share. Taking the least loaded keeps every device's
// parity bytes within one shard of its weight's share, from any start
// (after a restart the counts begin again at zero). The devices are
// recorded in the members' and parities' fields, so the choice is never
// derived again.
func (m *Mechanism) parityDevices(id uint64, members []int, size int) []int {
	n := m.env.N()
	weights := m.env.Placement().Weights()
	weight := func(d int) float64 {
		if weights == nil {
			return 1
		}
		return float64(weights[d])
	}
	var cand []int
	for _, d := range m.env.Order(id) {
		if !slices.Contains(members, d) {
			cand = append(cand, d)
		}
	}
	failed := func(d int) bool { return !m.env.Writable(d) }
	m.parityMu.Lock()
	defer m.parityMu.Unlock()
	if len(m.parityBytes) != n {
		m.parityBytes = make([]float64, n)
	}
	slices.SortStableFunc(cand, func(a, b int) int {
		if fa, fb := failed(a), failed(b); fa != fb {
			if fa {
				return 1
			}
			return -1
		}
		return cmp.Compare(m.parityBytes[a], m.parityBytes[b])
	})
	out := cand[:m.r]
	for _, d := range out {
		m.parityBytes[d] += float64(size) / weight(d)
	}
	return out
}

// writeSet encodes a new set and writes its members and parities; every
// entry completes with the outcome.
//
// Degraded: while at most r of the set's pieces miss their devices (a
// member's own piece included: it is then rebuilt from the set when read),
// the set is written and every member acknowledged, the missed pieces
// recorded for resync. With more missing, or a miss that could not be
// recorded, every member fails and the parities are deleted (retract).
func (m *Mechanism) writeSet(ctx context.Context, set []*entry) {
	// One caller's cancellation must not fail the others' stores.
	ctx = context.WithoutCancel(ctx)
	defer func() {
		for _, e := range set {
			close(e.done)
		}
	}()
	live := set
	shardSize := 1
	devs := make([]int, len(live))
	for i, e := range live {
		shardSize = max(shardSize, len(e.value))
		devs[i] = e.k.Primary
	}
	id := m.ids.Next()
	// Held while the set is written, so that a repair never sees the
	// parities listing a member whose piece has not landed yet (which
	// would read as a member deleted since).
	if tk, err := m.sets.Lock(ctx, setLockKey(id)); err == nil {
		defer tk.Release()
	}
	g := geometry{set: id, k: m.k, r: m.r, shardSize: shardSize, parity: m.parityDevices(id, devs, shardSize)}
	shards := m.newShards(shardSize)
	members := make([]member, len(live))
	for i, e := range live {
		copy(shards[i], e.value)
		members[i] = member{slot: i, dev: e.k.Primary, key: e.k.User, split: e.k.Split,
			splits: e.obj.Splits, splitLen: uint32(len(e.value)), objectLen: e.obj.ObjectLen, version: e.obj.Version}
	}
	fail := func(err error) {
		for _, e := range live {
			e.err = fmt.Errorf("packing: store split %d of %q in set %x: %w", e.k.Split, e.k.User, id, err)
		}
	}
	if err := m.codec.Encode(shards); err != nil {
		fail(err)
		return
	}
	if err := m.env.Reachable(append(slices.Clone(devs), g.parity...), m.r); err != nil {
		fail(err)
		return
	}
	ops := make([]mechanism.Op, 0, len(live)+m.r)
	roster := rosterOf(members)
	for i, e := range live {
		ops = append(ops, m.memberOp(g, roster, &members[i], e.value))
	}
	pf := parityFields{geometry: g, members: members}
	pv := m.ids.Next()
	ops = append(ops, m.parityOps(&pf, pv, shards[m.k:])...)
	m.env.Do(ctx, ops)
	err := mechanism.Quorum(ops, m.r)
	if err == nil && !slices.ContainsFunc(ops[len(live):], func(op mechanism.Op) bool { return op.Err == nil }) {
		// No parity landed: the members are acknowledged (r missing
		// pieces are within tolerance) and the parities recorded missed,
		// but the resync of their devices can rebuild them only from a
		// membership it knows: kept here until then.
		err = m.keepParityless(&pf, pv)
	}
	if err == nil {
		err = m.env.Acknowledge(ctx, ops)
	}
	if err != nil {
		fail(err)
		m.retract(ctx, ops[len(live):])
		m.settledParities(id)
		return
	}
	m.noteSet(&pf, pv)
	m.sets1.Add(1)
}

// maxParityless bounds the sets kept with no parity landed: past it such
// a set write fails, as a write with more pieces missing does.
const maxParityless = 1 << 14

// keepParityless keeps set pf (version v), none of whose parities landed,
// until a repair writes them (settledParities).
func (m *Mechanism) keepParityless(pf *parityFields, v uint64) error {
	m.idxMu.Lock()
	defer m.idxMu.Unlock()
	if len(m.parityless) >= maxParityless {
		return fmt.Errorf("no parity of the set landed, and %d such sets wait for their devices already: %w", len(m.parityless), device.ErrDeviceFailed)
	}
	if m.parityless == nil {
		m.parityless = map[uint64]indexedSet{}
	}
	m.parityless[pf.set] = indexedSet{f: pf.clone(), version: v}
	return nil
}

// settledParities forgets set id as parityless: its parities were
// written by a repair, or the set is gone.
func (m *Mechanism) settledParities(id uint64) {
	m.idxMu.Lock()
	defer m.idxMu.Unlock()
	delete(m.parityless, id)
}

// retract deletes the parities of a set whose write failed, so that no
// set lists members that were not acknowledged: read through such a set,
// a member whose piece did not land would be lost rather than read at its
// previous version. Every parity device is sent the delete, not only
// those that answered: a store that reported a failure may have landed
// all the same (the device died, or its connection broke, after taking
// it). A device that is down misses the delete, which Env.Do records, so
// its parity reads as stale until its resync deletes it (RepairKey).
func (m *Mechanism) retract(ctx context.Context, parities []mechanism.Op) {
	del := make([]mechanism.Op, len(parities))
	for i, op := range parities {
		del[i] = mechanism.Op{Dev: op.Dev, Op: device.Op{Kind: device.OpDelete, Key: op.Key}}
	}
	m.env.Do(ctx, del)
}

// newShards returns k data shards (zero: empty slots are virtual zero
// members) and r parity shards of size n, in one allocation.
func (m *Mechanism) newShards(n int) [][]byte {
	buf := make([]byte, (m.k+m.r)*n)
	shards := make([][]byte, m.k+m.r)
	for i := range shards {
		shards[i] = buf[i*n : (i+1)*n : (i+1)*n]
	}
	return shards
}

func (m *Mechanism) memberOp(g geometry, roster []member, mb *member, value []byte) mechanism.Op {
	f := memberFields{geometry: g, slot: mb.slot, roster: roster}
	h := format.Header{RM: format.RMPacking, EC: erasure.ReedSolomon, Splits: mb.splits,
		SplitLen: mb.splitLen, ObjectLen: mb.objectLen, Version: mb.version, Fields: f.encode()}
	return mechanism.Op{Dev: mb.dev, Op: device.Op{Kind: device.OpStore,
		Key: format.Key(mb.key, mb.split, format.KindData), Value: format.Encode(&h, value)}}
}

// markUnpatched records the parities a patch leaves out (nil in parity)
// as stale on their devices, before the patch is written.
func (m *Mechanism) markUnpatched(ctx context.Context, pf *parityFields, parity [][]byte) error {
	var errs []error
	for j := range parity {
		if parity[j] == nil {
			if err := m.env.MarkStale(ctx, pf.parity[j], setKey(pf.set)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// parityOps returns the writes of the parities of pf at version v; a nil
// parity[j] is not written.
func (m *Mechanism) parityOps(pf *parityFields, v uint64, parity [][]byte) []mechanism.Op {
	ops := make([]mechanism.Op, 0, len(parity))
	for j := range parity {
		if parity[j] != nil {
			ops = append(ops, parityOp(pf, j, v, parity[j]))
		}
	}
	return ops
}

// parityOp returns the write of parity j of pf at version v.
func parityOp(pf *parityFields, j int, v uint64, payload []byte) mechanism.Op {
	f := *pf
	f.index = j
	h := format.Header{RM: format.RMPacking, EC: erasure.ReedSolomon, Splits: 1, Version: v, Fields: f.encode()}
	return mechanism.Op{Dev: pf.parity[j], Op: device.Op{Kind: device.OpStore, Key: setKey(pf.set), Value: format.Encode(&h, payload)}}
}

// ---- reading a set ----

// parity is one parity piece as read, with the delta log applied.
type parity struct {
	mechanism.Piece
	f      parityFields
	ok     bool
	logged bool // log entries were applied: the device holds an older parity
}

// readParities reads the r parities of g, brought up to date with the
// delta log (see log.go).
func (m *Mechanism) readParities(ctx context.Context, g geometry) []parity {
	m.loadLog(ctx)
	pieces := make([]parity, len(g.parity))
	ops := make([]mechanism.Op, len(g.parity))
	for j, d := range g.parity {
		ops[j] = mechanism.Op{Dev: d, Op: device.Op{Kind: device.OpRetrieve, Key: setKey(g.set)}}
	}
	m.env.Do(ctx, ops)
	for j := range ops {
		p := &pieces[j]
		p.Dev, p.Err = ops[j].Dev, ops[j].Err
		if p.Err != nil {
			continue
		}
		if p.Value, p.Err = format.Decode(ops[j].Result); p.Err != nil {
			continue
		}
		m.ids.Observe(p.Value.Version)
		f, err := decodeParity(p.Value.Fields)
		switch {
		case err != nil:
			p.Err = err
		case p.Value.RM != format.RMPacking || f.set != g.set || f.index != j || len(p.Value.Payload) != f.shardSize:
			p.Err = fmt.Errorf("%w: parity %d of set %x on device %d does not match its set", format.ErrCorrupt, j, g.set, p.Dev)
		default:
			p.f, p.ok = f, true
			m.applyLog(p)
		}
	}
	return pieces
}

// fastParities returns the indices of the parities that read well when
// they all carry one version and list member key/split at slot with
// version want, and nil otherwise. Parities that do not read (a failed
// device, corruption) are left out: patched from the others, they are
// erased for good by the newer version and rebuilt by a repair.
func fastParities(pars []parity, key []byte, split, slot int, want uint64) []int {
	var good []int
	for j := range pars {
		p := &pars[j]
		if !p.ok {
			continue
		}
		if len(good) > 0 && p.Value.Version != pars[good[0]].Value.Version {
			return nil
		}
		i := slices.IndexFunc(p.f.members, func(mb member) bool { return mb.slot == slot })
		if i < 0 || p.f.members[i].version != want || p.f.members[i].split != split || string(p.f.members[i].key) != string(key) {
			return nil
		}
		good = append(good, j)
	}
	return good
}

// setState is a set read whole: membership, and every shard, reconstructed
// where a piece was missing, corrupt or stale.
type setState struct {
	g       geometry
	f       parityFields // membership, from the newest good parity
	version uint64       // that parity's version
	shards  [][]byte
	bad     []bool // per shard: the piece on the device must be rewritten
	// logged, per parity: good, but the device holds an older parity
	// that the delta log brings up to date (a repair folds it in)
	logged []bool
	// superseded, per data shard: the member's key has moved on (its
	// primary holds a newer piece of it, or none at all): the set must
	// retire the member, never write its old bytes back.
	superseded []bool
}

// loadSet reads the parities and the members of set g and reconstructs
// what is missing. It fails with mechanism.ErrDataLoss (wrapped) when more
// than r pieces are bad. roster, from a member's own fields, is used when
// no parity is readable. leaving, when not nil, names members about to
// leave the set: their bytes are needed only to reconstruct others.
func (m *Mechanism) loadSet(ctx context.Context, g geometry, roster []member, leaving func(*member) bool) (*setState, error) {
	pars := m.readParities(ctx, g)
	best := -1
	for j := range pars {
		if pars[j].ok && (best < 0 || pars[j].Value.Version > pars[best].Value.Version) {
			best = j
		}
	}
	for j := range pars {
		// Of two parities at one version, the one more log entries made
		// is the one a crash left ahead.
		if best >= 0 && pars[j].ok && pars[j].Value.Version == pars[best].Value.Version && pars[j].logged && !pars[best].logged {
			best = j
		}
	}
	if best < 0 && len(roster) == 0 && slices.ContainsFunc(pars, func(p parity) bool { return errors.Is(p.Err, errLogGap) && p.f.set == g.set }) {
		// A parity that reads whole but does not chain with the log
		// (a change logged from a piece its set no longer listed) says
		// who the members are, with the log's entries: the set is
		// rebuilt from those whose pieces still claim their slots, the
		// pieces reads return. Never when no parity reads at all: a
		// parity on a device that is down may list members no entry
		// names.
		roster = m.candidates(g, pars)
	}
	if best < 0 {
		st, err := m.fromRoster(ctx, g, roster)
		if err == nil && leaving != nil {
			for _, mb := range st.f.members {
				st.superseded[mb.slot] = leaving(&mb)
			}
		}
		if err != nil {
			errs := []error{err}
			for j := range pars {
				errs = append(errs, pars[j].Err)
			}
			return nil, fmt.Errorf("packing set %x: no parity readable: %w", g.set, errors.Join(errs...))
		}
		return st, nil
	}
	st := &setState{f: pars[best].f, version: pars[best].Value.Version}
	st.g = st.f.geometry
	k := st.g.k
	codec, err := erasure.Lookup(erasure.ReedSolomon, k, st.g.r)
	if err != nil {
		return nil, err
	}
	st.shards = make([][]byte, k+st.g.r)
	st.bad = make([]bool, k+st.g.r)
	st.logged = make([]bool, st.g.r)
	st.superseded = make([]bool, k)
	var why []error
	for j := range pars {
		// A parity of the newest version counts only with the same
		// membership: after a crash between the appends of two log
		// entries, two parities may reach one version by different
		// entries, and mixing them would reconstruct wrong bytes.
		if pars[j].ok && pars[j].Value.Version == st.version && sameMembers(pars[j].f.members, st.f.members) {
			st.shards[k+j] = pars[j].Value.Payload
			st.logged[j] = pars[j].logged
		} else {
			st.bad[k+j] = true
			why = append(why, fmt.Errorf("parity %d on device %d: version %d of %d: %v", j, pars[j].Dev, pars[j].Value.Version, st.version, pars[j].Err))
		}
	}
	ops := make([]mechanism.Op, len(st.f.members))
	for i, mb := range st.f.members {
		ops[i] = mechanism.Op{Dev: mb.dev, Op: device.Op{Kind: device.OpRetrieve, Key: format.Key(mb.key, mb.split, format.KindData)}}
	}
	m.env.Do(ctx, ops)
	listed := make([]bool, k)
	// known, per data shard: bad (the piece is rewritten) but its bytes
	// are right: a stale device's piece at the listed version.
	known := make([]bool, k)
	for i, mb := range st.f.members {
		listed[mb.slot] = true
		if v, ok := memberPiece(&ops[i], st.g.set, &mb); ok {
			st.shards[mb.slot] = pad(v.Payload, st.g.shardSize)
			known[mb.slot] = ops[i].Err != nil
			st.bad[mb.slot] = known[mb.slot]
		} else {
			st.bad[mb.slot] = true
			st.superseded[mb.slot] = m.supersedes(&ops[i], st.g.set, &mb)
			why = append(why, fmt.Errorf("member %q on device %d (version %d listed): %v", mb.key, mb.dev, mb.version, ops[i].Err))
		}
	}
	for s := 0; s < k; s++ {
		if !listed[s] {
			st.shards[s] = make([]byte, st.g.shardSize) // a virtual zero member
		}
	}
	for _, mb := range st.f.members {
		if leaving != nil && leaving(&mb) {
			st.superseded[mb.slot] = true
		}
	}
	lost, missing := 0, false // missing: a current member's bytes
	for i, b := range st.bad {
		if b && !(i < k && known[i]) {
			lost++
			missing = missing || (i < k && !st.superseded[i])
		}
	}
	if !missing {
		// Every current member is whole: nothing needs the old bytes of
		// the superseded ones. Their slots become zeros and the parities
		// are computed from the members (retire then drops them from the
		// membership), however many pieces were bad.
		for i, gone := range st.superseded {
			if gone {
				st.shards[i] = make([]byte, st.g.shardSize)
			}
		}
		if lost > 0 {
			for j := k; j < len(st.shards); j++ {
				st.shards[j] = make([]byte, st.g.shardSize) // Encode fills them
			}
			if err := codec.Encode(st.shards); err != nil {
				return nil, fmt.Errorf("packing set %x: %w", g.set, err)
			}
		}
		return st, nil
	}
	if lost > st.g.r {
		return nil, fmt.Errorf("packing set %x: %d of %d pieces bad, %d tolerated: %w", g.set, lost, k+st.g.r, st.g.r,
			errors.Join(append([]error{mechanism.ErrDataLoss}, why...)...))
	}
	if lost > 0 {
		for i, b := range st.bad {
			if b && !(i < k && known[i]) {
				st.shards[i] = nil
			}
		}
		if err := codec.Reconstruct(st.shards); err != nil {
			return nil, fmt.Errorf("packing set %x: %w", g.set, err)
		}
	}
	return st, nil
}

// candidates returns who may be a member of set g, as its parities pars
// (as far as their log chains) and the log's entries of it name them.
func (m *Mechanism) candidates(g geometry, pars []parity) []member {
	var out []member
	add := func(mb member) {
		if !slices.ContainsFunc(out, func(x member) bool {
			return x.slot == mb.slot && x.split == mb.split && string(x.key) == string(mb.key)
		}) {
			out = append(out, mb)
		}
	}
	for j := range pars {
		if pars[j].f.set == g.set {
			for _, mb := range pars[j].f.members {
				add(mb)
			}
		}
	}
	for _, e := range m.log.newer(g.set, 0) {
		mb := e.mb
		mb.slot = e.slot
		add(mb)
	}
	return out
}

// fromRoster rebuilds a set whose parities are all lost from its members:
// every roster entry whose piece still claims its slot is a member, and
// the parities are recomputed (and marked bad, to be rewritten).
func (m *Mechanism) fromRoster(ctx context.Context, g geometry, roster []member) (*setState, error) {
	if len(roster) == 0 {
		return nil, fmt.Errorf("no member roster to rebuild the set from: %w", mechanism.ErrDataLoss)
	}
	ops := make([]mechanism.Op, len(roster))
	for i, mb := range roster {
		ops[i] = mechanism.Op{Dev: mb.dev, Op: device.Op{Kind: device.OpRetrieve, Key: format.Key(mb.key, mb.split, format.KindData)}}
	}
	m.env.Do(ctx, ops)
	st := &setState{g: g, f: parityFields{geometry: g}, version: m.ids.Next(),
		shards: m.newShards(g.shardSize), bad: make([]bool, g.k+g.r), logged: make([]bool, g.r), superseded: make([]bool, g.k)}
	for i, mb := range roster {
		if ops[i].Err != nil && !errors.Is(ops[i].Err, device.ErrNotFound) {
			// It may still be a member: without parity, its loss is final.
			return nil, fmt.Errorf("member %q of the set cannot be read: %w", mb.key, errors.Join(mechanism.ErrDataLoss, ops[i].Err))
		}
		if ops[i].Err != nil {
			continue // left the set (deleted)
		}
		v, err := format.Decode(ops[i].Result)
		if err != nil {
			return nil, fmt.Errorf("member %q of the set is corrupt: %w", mb.key, errors.Join(mechanism.ErrDataLoss, err))
		}
		f, err := decodeMember(v.Fields)
		if v.RM != format.RMPacking || err != nil || f.set != g.set || f.slot != mb.slot {
			continue // left the set (moved or overwritten)
		}
		mb.splits, mb.splitLen, mb.objectLen, mb.version = v.Splits, v.SplitLen, v.ObjectLen, v.Version
		st.f.members = append(st.f.members, mb)
		copy(st.shards[mb.slot], v.Payload)
	}
	if err := m.codec.Encode(st.shards); err != nil {
		return nil, err
	}
	for j := 0; j < g.r; j++ {
		st.bad[g.k+j] = true
	}
	return st, nil
}

// memberPiece decodes op's result as the piece of member mb of set id: the
// listed version, whole, in that set and slot or moved to another set.
func memberPiece(op *mechanism.Op, id uint64, mb *member) (format.Value, bool) {
	raw := op.Result
	switch {
	case errors.Is(op.Err, mechanism.ErrStale) && op.Hidden != nil:
		// The device missed a later write of the key (to another
		// mechanism, or while it was down): the piece is no longer the
		// key's value, but at the listed version it is still the bytes
		// the parities cover, and members lost to the same faults may
		// need it. (loadSet still rewrites the piece, as it rewrites a
		// lost one, but does not count it lost.)
		raw = op.Hidden
	case op.Err != nil:
		return format.Value{}, false
	}
	v, err := format.Decode(raw)
	if err != nil || v.RM != format.RMPacking || v.Version != mb.version || v.SplitLen != mb.splitLen || len(v.Payload) != int(mb.splitLen) {
		return format.Value{}, false
	}
	// A member a regroup (or a repair) moved to another set keeps its
	// version, and one version is one write's bytes: the old set may
	// still use them until its leave lands.
	f, err := decodeMember(v.Fields)
	if err != nil || (f.set == id && f.slot != mb.slot) {
		return format.Value{}, false
	}
	return v, true
}

// supersedes reports whether op, the read of member mb of set id on its
// primary, shows that the key has moved on since the set listed mb, or
// that the listing never became the key's value:
//
//   - the primary holds a verified piece of a version at least mb's that
//     is not mb (another mechanism's, another set's), or, answering as a
//     healthy device, nothing (the key was deleted);
//   - or, answering as a healthy device that missed no write of the key,
//     an older piece that is not this set's (another mechanism's, another
//     set's). A store is acknowledged only once its member landed on the
//     primary or the primary's miss is recorded, so mb's write was never
//     acknowledged: a crash or a failure cut it after its parities
//     landed. A read returns the primary's piece; the set must not keep a
//     listing that a later read through the sets (the primary lost) would
//     take for the newest value, and find unrecoverable.
//
// A device that cannot answer, a stale or corrupt piece, or an older one
// of this set (an in-place update cut short, which the key's own repair
// settles) proves nothing: the member may still be current. The set's
// lock keeps a write in flight from being seen here half landed.
func (m *Mechanism) supersedes(op *mechanism.Op, id uint64, mb *member) bool {
	healthy := m.env.State(op.Dev) == mechanism.Healthy
	if errors.Is(op.Err, device.ErrNotFound) {
		return healthy
	}
	if op.Err != nil {
		return false
	}
	v, err := format.Decode(op.Result)
	switch {
	case err != nil:
		return false
	case v.Version >= mb.version:
		return true
	case !healthy:
		return false
	case v.RM == format.RMPacking:
		f, err := decodeMember(v.Fields)
		return err == nil && f.set != id
	}
	return true
}

// sameMembers reports whether two memberships list the same members at
// the same versions.
func sameMembers(a, b []member) bool {
	return slices.EqualFunc(a, b, func(x, y member) bool {
		return x.slot == y.slot && x.version == y.version && x.split == y.split && string(x.key) == string(y.key)
	})
}

func pad(b []byte, n int) []byte {
	if len(b) == n {
		return b
	}
	p := make([]byte, n)
	copy(p, b)
	return p
}

// ---- update and remove ----

// ownPiece returns the member piece of k on its primary, from prev when the
// array already read it.
func (m *Mechanism) ownPiece(ctx context.Context, k mechanism.Key, prev *mechanism.Prev) (format.Value, memberFields, bool) {
	var v format.Value
	if prev != nil && prev.Payload != nil && prev.Header.RM == format.RMPacking {
		v = format.Value{Header: prev.Header, Payload: prev.Payload}
	} else {
		p := m.env.Read(ctx, k.Data(), []int{k.Primary})[0]
		if !p.OK() || p.Value.RM != format.RMPacking {
			return v, memberFields{}, false
		}
		v = p.Value
	}
	f, err := decodeMember(v.Fields)
	return v, f, err == nil
}

// oldMember finds the set of the member k that is being released: from
// prev (the array's read of split 0), else from the piece on the primary,
// else from the parities. ok reports whether old holds the member's bytes
// as its set last covered them (else the set must rebuild them).
func (m *Mechanism) oldMember(ctx context.Context, k mechanism.Key, prev *mechanism.Prev) (f memberFields, old format.Value, ok bool, err error) {
	found := false
	if k.Split == 0 && prev != nil && prev.Header.RM == format.RMPacking {
		if f, err = decodeMember(prev.Header.Fields); err == nil {
			found = true
			if prev.Payload != nil {
				return f, format.Value{Header: prev.Header, Payload: prev.Payload}, true, nil
			}
		}
	}
	p := m.env.Read(ctx, k.Data(), []int{k.Primary})[0]
	// Only the old version's piece tells the old set: the primary may
	// already hold the new value's (another set's) piece.
	if p.OK() && p.Value.RM == format.RMPacking && (prev == nil || p.Value.Version == prev.Header.Version) {
		if pf, err := decodeMember(p.Value.Fields); err == nil {
			if !found {
				return pf, p.Value, true, nil
			}
			if pf.set == f.set && pf.slot == f.slot && p.Value.Version == prev.Header.Version {
				return f, p.Value, true, nil
			}
		}
	}
	if found {
		return f, format.Value{}, false, nil
	}
	e, inSet, err := m.lookup(ctx, k)
	if err != nil {
		return f, old, false, err
	}
	if !inSet {
		return f, old, false, device.ErrNotFound // in no set: nothing to detach
	}
	return memberFields{geometry: e.g, slot: e.m.slot}, format.Value{}, false, nil
}

// updateInPlace keeps the member in its set: the difference between its
// old and new bytes is logged (logChange), or, when it cannot be, patched
// into the parities. It reports done=false when neither is possible (the
// new value is larger than the set's shard size, or the set is not in a
// state to patch), for the caller to move the member instead.
func (m *Mechanism) updateInPlace(ctx context.Context, k mechanism.Key, obj mechanism.Object, value []byte, prev *mechanism.Prev) (bool, error) {
	old, f, ok := m.ownPiece(ctx, k, prev)
	if !ok || len(value) > f.shardSize {
		return false, nil
	}
	tk, err := m.sets.Lock(ctx, setLockKey(f.set))
	if err != nil {
		return true, err
	}
	defer tk.Release()
	m.loadLog(ctx)
	if !m.log.lists(f.set, f.slot, k, old.Version) {
		// The log does not list this piece at its slot: a change of it
		// that a crash cut short (a leave logged before the store that
		// moved it overwrote it, or an update logged whose piece never
		// landed). A change logged from the piece would not chain, and
		// every parity of the set would read as bad: the member moves
		// (its leave settles the set).
		return false, nil
	}
	mb := member{slot: f.slot, dev: k.Primary, key: slices.Clone(k.User), split: k.Split, splits: obj.Splits,
		splitLen: uint32(len(value)), objectLen: obj.ObjectLen, version: obj.Version}
	e := &logEntry{g: f.geometry, slot: f.slot, from: old.Version, mb: mb, delta: xorPad(old.Payload, value)}
	if done, err := m.logChange(ctx, k, e, f.roster, []mechanism.Op{m.memberOp(f.geometry, f.roster, &mb, value)}); done {
		return true, err
	}
	pars := m.readParities(ctx, f.geometry)
	good := fastParities(pars, k.User, k.Split, f.slot, old.Version)
	if good == nil {
		return false, nil
	}
	newPar, err := m.delta(f, pars, good, old.Payload, value)
	if err != nil {
		return true, err
	}
	pf := pars[good[0]].f
	pf.members = slices.Clone(pf.members)
	for i := range pf.members {
		if pf.members[i].slot == f.slot {
			pf.members[i] = mb
		}
	}
	if err := m.patchable(&pf, f.slot); err != nil {
		return true, fmt.Errorf("packing: update split %d of %q in set %x: %w", k.Split, k.User, f.set, err)
	}
	pv := m.ids.Next()
	if err := m.markUnpatched(ctx, &pf, newPar); err != nil {
		return true, fmt.Errorf("packing: update split %d of %q in set %x: %w", k.Split, k.User, f.set, err)
	}
	ops := append([]mechanism.Op{m.memberOp(f.geometry, f.roster, &mb, value)}, m.parityOps(&pf, pv, newPar)...)
	if m.badPieces(&pf, f.slot) > 0 {
		// The parities first, as in logChange: the set's bad pieces
		// are decoded with the old member until a parity is patched.
		if err := m.env.DoPrimaryLast(ctx, ops, len(ops)-2, nil); err != nil {
			return true, fmt.Errorf("packing: update split %d of %q in set %x: %w", k.Split, k.User, f.set, err)
		}
	} else {
		m.env.Do(ctx, ops)
	}
	if err := ops[0].Err; err != nil {
		return true, fmt.Errorf("packing: update split %d of %q in set %x: %w", k.Split, k.User, f.set, err)
	}
	if err := mechanism.Quorum(ops[1:], len(ops)-2); err != nil {
		return true, fmt.Errorf("packing: update split %d of %q in set %x: %w", k.Split, k.User, f.set, err)
	}
	if err := m.env.Acknowledge(ctx, ops); err != nil {
		return true, fmt.Errorf("packing: update split %d of %q in set %x: %w", k.Split, k.User, f.set, err)
	}
	m.fold(ctx, f.set, pv)
	m.noteSet(&pf, pv)
	return true, nil
}

func setLockKey(id uint64) []byte { return setKey(id) }

// CheckRelease reports, before a store of another mechanism overwrites the
// member of split k on its primary (the array then releases it), whether
// its set can let it go: see leavable. The store is refused otherwise.
func (m *Mechanism) CheckRelease(ctx context.Context, k mechanism.Key, prev *mechanism.Prev) error {
	f, _, _, err := m.oldMember(ctx, k, prev)
	switch {
	case errors.Is(err, device.ErrNotFound):
		return nil // in no set
	case err != nil:
		return fmt.Errorf("packing: release split %d of %q: find its set: %w", k.Split, k.User, err)
	}
	if err := m.leavable(ctx, f); err != nil {
		return fmt.Errorf("packing: release split %d of %q from set %x: %w", k.Split, k.User, f.set, err)
	}
	return nil
}

// leavable reports whether the member at f.slot can leave its set f once
// its piece on the primary is overwritten: the patch that removes it from
// the parities must not leave the set short (patchable). A set whose
// parity devices are all failed is left as it is (see detachFrom), and
// only when no other member needs its parities.
func (m *Mechanism) leavable(ctx context.Context, f memberFields) error {
	if !m.parityDevicesDown(f.geometry) {
		for _, p := range m.readParities(ctx, f.geometry) {
			if p.ok {
				return m.patchable(&p.f, f.slot)
			}
		}
	}
	// No parity readable: every one counts bad, and the member can leave
	// only if no other member needs them. A parity that comes back
	// unchanged still decodes with this member's old bytes, which the
	// store is about to overwrite.
	if bad := m.badMembers(f.roster, f.slot) + len(f.parity); bad > m.r {
		return fmt.Errorf("no parity readable and %d of its pieces bad, %d tolerated: %w", bad, m.r, device.ErrDeviceFailed)
	}
	return nil
}

// patchable returns an error wrapping device.ErrDeviceFailed when patching
// the parities of set pf in place (for the member at slot, which is
// rewritten or leaves) would leave more than r of its pieces bad (see
// badPieces). Patched, the parities that land would no longer match the
// stale pieces, and the values that live in the parities alone would be
// lost; refused before anything is written, the store fails and the set
// keeps every value it had. With at most r devices impaired it never
// refuses.
func (m *Mechanism) patchable(pf *parityFields, slot int) error {
	if bad := m.badPieces(pf, slot); bad > m.r {
		return fmt.Errorf("%d of its pieces would be bad after the patch, %d tolerated: %w", bad, m.r, device.ErrDeviceFailed)
	}
	return nil
}

// badPieces counts the pieces of set pf, but the member at slot, that a
// reconstruction cannot use: the members whose device is impaired or
// missed their write (their value then lives in the parities alone), and
// the parities whose device is impaired or missed a change of the set.
func (m *Mechanism) badPieces(pf *parityFields, slot int) int {
	bad := m.badMembers(pf.members, slot)
	for _, d := range pf.parity {
		if m.env.State(d) != mechanism.Healthy || m.env.Missing(d, setKey(pf.set)) {
			bad++
		}
	}
	return bad
}

// badMembers counts the members, but the one at slot, whose device is
// impaired or missed their write.
func (m *Mechanism) badMembers(members []member, slot int) int {
	bad := 0
	for i := range members {
		mb := &members[i]
		if mb.slot != slot && (m.env.State(mb.dev) != mechanism.Healthy || m.env.Missing(mb.dev, format.Key(mb.key, mb.split, format.KindData))) {
			bad++
		}
	}
	return bad
}

// delta returns the parities good of the set after the member at f.slot
// changes from old to new, computed from those parities alone (nil for
// the others).
func (m *Mechanism) delta(f memberFields, pars []parity, good []int, old, new []byte) ([][]byte, error) {
	codec, err := erasure.Lookup(erasure.ReedSolomon, f.k, f.r)
	if err != nil {
		return nil, err
	}
	shards := make([][]byte, f.k+f.r)
	newData := make([][]byte, f.k)
	shards[f.slot] = pad(old, f.shardSize)
	if len(old) == f.shardSize {
		shards[f.slot] = slices.Clone(old) // Update overwrites the old data shard
	}
	newData[f.slot] = pad(new, f.shardSize)
	for j := range pars {
		if slices.Contains(good, j) {
			shards[f.k+j] = slices.Clone(pars[j].Value.Payload)
		} else {
			shards[f.k+j] = make([]byte, f.shardSize) // not written
		}
	}
	if err := codec.Update(shards, newData); err != nil {
		return nil, err
	}
	out := shards[f.k:]
	for j := range out {
		if !slices.Contains(good, j) {
			out[j] = nil
		}
	}
	return out, nil
}

// detach removes the member k from its set: the parities are patched as if
// the member became zeros, and it leaves the membership. A set left empty
// is deleted. The member's own piece is not touched.
func (m *Mechanism) detach(ctx context.Context, k mechanism.Key, prev *mechanism.Prev) error {
	f, old, ok, err := m.oldMember(ctx, k, prev)
	if err != nil {
		return err
	}
	return m.detachFrom(ctx, k, f, old, ok)
}

// detachFrom is detach once the member's set f is known, with its old
// bytes when ok.
//
// When every parity device of the set is failed the set is left as it is,
// not waited on, so that writes within tolerance succeed: its parities are
// recorded stale on their devices, so that they are never read as current
// and resyncing those devices rebuilds the set from the members that still
// claim it (the member's primary now holds something else, or nothing).
// That is refused when another member is bad: its value is in the
// parities alone.
func (m *Mechanism) detachFrom(ctx context.Context, k mechanism.Key, f memberFields, old format.Value, ok bool) error {
	leave := func() error {
		for _, d := range f.parity {
			if err := m.env.MarkStale(ctx, d, setKey(f.set)); err != nil {
				return fmt.Errorf("packing: leave set %x of split %d of %q: %w", f.set, k.Split, k.User, err)
			}
		}
		return nil
	}
	if m.parityDevicesDown(f.geometry) {
		// Marked stale, the parities no longer give back a member
		// whose value lives in them alone.
		if bad := m.badMembers(f.roster, f.slot); bad > 0 {
			return fmt.Errorf("packing: leave set %x of split %d of %q: every parity device down and %d other members bad: %w",
				f.set, k.Split, k.User, bad, device.ErrDeviceFailed)
		}
		return leave()
	}
	tk, err := m.sets.Lock(ctx, setLockKey(f.set))
	if err != nil {
		return err
	}
	defer tk.Release()
	// A leave is logged as an update to virtual zeros: the delta is the
	// old bytes, and the entry drops the member from the membership. No
	// parity is read or written; Replay folds it (and deletes a set it
	// empties). Unless the log does not list the piece at its slot (a
	// change of it that a crash cut short: logged, its piece never
	// written): the leave would not chain, and the set settles it below.
	m.loadLog(ctx)
	if ok && m.log.lists(f.set, f.slot, k, old.Version) {
		e := &logEntry{g: f.geometry, slot: f.slot, from: old.Version, leave: true,
			mb: member{slot: f.slot, dev: k.Primary, key: slices.Clone(k.User), split: k.Split}, delta: slices.Clone(old.Payload)}
		if done, err := m.logChange(ctx, k, e, f.roster, nil); done {
			if err == nil {
				m.noteLeft(f.set)
			}
			return err
		}
	}
	// Not logged (the old bytes unknown, no parity device up, an entry
	// too large for a segment): the parities are patched in place (read,
	// then written).
	pars := m.readParities(ctx, f.geometry)
	var newPar [][]byte
	var pf parityFields
	if good := fastParities(pars, k.User, k.Split, f.slot, old.Version); ok && good != nil {
		if newPar, err = m.delta(f, pars, good, old.Payload, nil); err != nil {
			return err
		}
		pf = pars[good[0]].f
	} else {
		// The member leaves with whatever else its set lists that has
		// moved on (retired by rewriteBad, which also rewrites parities
		// that still list it: lost, stale, or rebuilt from the roster,
		// they would bring it back). Devices that miss the new parities
		// are recorded stale.
		this := func(mb *member) bool {
			return mb.slot == f.slot && mb.split == k.Split && string(mb.key) == string(k.User)
		}
		st, err := m.loadSet(ctx, f.geometry, f.roster, this)
		if err != nil {
			return err
		}
		_, err = m.rewriteBad(ctx, st, nil)
		return err
	}
	if err := m.patchable(&pf, f.slot); err != nil {
		return fmt.Errorf("packing: remove split %d of %q from set %x: %w", k.Split, k.User, f.set, err)
	}
	pf.members = slices.DeleteFunc(slices.Clone(pf.members), func(mb member) bool { return mb.slot == f.slot })
	var ops []mechanism.Op
	pv := m.ids.Next()
	if len(pf.members) == 0 {
		for _, d := range pf.parity {
			ops = append(ops, mechanism.Op{Dev: d, Op: device.Op{Kind: device.OpDelete, Key: setKey(pf.set)}})
		}
	} else {
		if err := m.markUnpatched(ctx, &pf, newPar); err != nil {
			return fmt.Errorf("packing: remove split %d of %q from set %x: %w", k.Split, k.User, f.set, err)
		}
		ops = m.parityOps(&pf, pv, newPar)
	}
	m.env.Do(ctx, ops)
	if err := mechanism.Quorum(ops, len(ops)-1); err != nil {
		if m.parityDevicesDown(f.geometry) {
			return leave() // they failed under this very write
		}
		return fmt.Errorf("packing: remove split %d of %q from set %x: %w", k.Split, k.User, f.set, err)
	}
	if err := m.env.Acknowledge(ctx, ops); err != nil {
		return fmt.Errorf("packing: remove split %d of %q from set %x: %w", k.Split, k.User, f.set, err)
	}
	if len(pf.members) == 0 {
		m.fold(ctx, f.set, ^uint64(0))
	} else {
		m.fold(ctx, f.set, pv)
		m.noteThinned(pf.members)
	}
	m.noteSet(&pf, pv)
	return nil
}

// LetGo removes member piece v of split k from its set when the set still
// lists it at v's version: v was found on k's primary, which missed newer
// writes of k (the store that moved k on could not patch it out while the
// primary was down), and the caller is about to overwrite it. The patch
// uses v's own bytes. It does nothing when no readable parity lists v:
// the set has let it go, or cannot be read (and then it is rebuilt from
// its roster, which the overwrite leaves without v, as a leave would).
func (m *Mechanism) LetGo(ctx context.Context, k mechanism.Key, v format.Value) error {
	f, err := decodeMember(v.Fields)
	if err != nil {
		return nil // not a member piece
	}
	listed := slices.ContainsFunc(m.readParities(ctx, f.geometry), func(p parity) bool {
		return p.ok && slices.ContainsFunc(p.f.members, func(mb member) bool {
			return mb.slot == f.slot && mb.version == v.Version && mb.split == k.Split && string(mb.key) == string(k.User)
		})
	})
	if !listed {
		return nil
	}
	if err := m.detachFrom(ctx, k, f, v, true); err != nil {
		return fmt.Errorf("packing: let split %d of %q go from set %x: %w", k.Split, k.User, f.set, err)
	}
	return nil
}

// Release implements mechanism.Mechanism.
func (m *Mechanism) Release(ctx context.Context, k mechanism.Key, prev *mechanism.Prev, keep int) error {
	if err := m.detach(ctx, k, prev); err != nil && !errors.Is(err, device.ErrNotFound) {
		return fmt.Errorf("packing: release split %d of %q: %w", k.Split, k.User, err)
	}
	if keep > 0 {
		return nil
	}
	// Degraded: a primary that misses the delete is recorded.
	if err := m.env.Delete(ctx, k.Data(), []int{k.Primary}, 1); err != nil {
		return fmt.Errorf("packing: release split %d of %q: %w", k.Split, k.User, err)
	}
	return nil
}

// ---- retrieve and repair ----

// Retrieve implements mechanism.Mechanism.
func (m *Mechanism) Retrieve(ctx context.Context, k mechanism.Key, have []mechanism.Piece) ([]byte, format.Header, error) {
	p := &have[0]
	if p.OK() && p.Dev == k.Primary && p.Value.RM == format.RMPacking && (k.Want == 0 || p.Value.Version == k.Want) {
		if _, err := decodeMember(p.Value.Fields); err == nil {
			return p.Value.Payload, p.Value.Header, nil
		}
	}
	v, h, _, err := m.recover(ctx, k, have)
	return v, h, err
}

// recover reconstructs member k from its set, rewrites its piece when the
// primary answers, and reports whether it did.
func (m *Mechanism) recover(ctx context.Context, k mechanism.Key, have []mechanism.Piece) ([]byte, format.Header, bool, error) {
	var g geometry
	var roster []member
	found := false
	if len(have) > 0 && have[0].OK() && have[0].Dev == k.Primary && have[0].Value.RM == format.RMPacking {
		if f, err := decodeMember(have[0].Value.Fields); err == nil {
			g, roster, found = f.geometry, f.roster, true
		}
	}
	if !found {
		e, ok, err := m.lookup(ctx, k)
		if err != nil {
			return nil, format.Header{}, false, err
		}
		if !ok {
			if len(have) > 0 && errors.Is(have[0].Err, device.ErrNotFound) && k.Want == 0 {
				return nil, format.Header{}, false, fmt.Errorf("packing split %d of key %q: %w", k.Split, k.User, device.ErrNotFound)
			}
			if c, claimed := m.claimOf(k); claimed {
				return nil, format.Header{}, false, mechanism.Lost(k, Name, have,
					fmt.Sprintf("set %x lists version %d, but no parity of it can vouch for its members (its delta log has a gap)", c.g.set, c.m.version))
			}
			return nil, format.Header{}, false, mechanism.Lost(k, Name, have, "in no set the surviving parities know of")
		}
		g = e.g
	}
	tk, err := m.sets.Lock(ctx, setLockKey(g.set))
	if err != nil {
		return nil, format.Header{}, false, err
	}
	defer tk.Release()
	st, err := m.loadSet(ctx, g, roster, nil)
	if err != nil {
		return nil, format.Header{}, false, fmt.Errorf("packing split %d of key %q: %w", k.Split, k.User, err)
	}
	i := slices.IndexFunc(st.f.members, func(mb member) bool { return mb.split == k.Split && string(mb.key) == string(k.User) })
	if i < 0 || (k.Want != 0 && st.f.members[i].version != k.Want) {
		return nil, format.Header{}, false, mechanism.Lost(k, Name, have, fmt.Sprintf("set %x does not hold this version", g.set))
	}
	mb := st.f.members[i]
	value := st.shards[mb.slot][:mb.splitLen]
	ops := []mechanism.Op{m.memberOp(st.g, rosterOf(st.f.members), &mb, value)}
	h, _ := format.Decode(ops[0].Value)
	rewritten := false
	if st.bad[mb.slot] && m.env.State(k.Primary) != mechanism.Failed {
		m.env.Do(ctx, ops)
		rewritten = ops[0].Err == nil
	}
	return value, h.Header, rewritten, nil
}

// Repair implements mechanism.Mechanism: the member is reconstructed if
// bad, and the bad parities of its set rewritten. hint is the header of
// the key's newest version, as the array located it: a listing of k in
// the set at another version is superseded and retired, never written
// back, and so is the set's listing of other members whose keys moved on.
func (m *Mechanism) Repair(ctx context.Context, k mechanism.Key, hint *format.Header) (int, error) {
	want := k.Want
	if want == 0 && hint != nil {
		want = hint.Version
	}
	have := m.env.Read(ctx, k.Data(), []int{k.Primary})
	var g geometry
	var roster []member
	var own *format.Value
	if p := &have[0]; p.OK() && p.Value.RM == format.RMPacking && (want == 0 || p.Value.Version == want) {
		if f, err := decodeMember(p.Value.Fields); err == nil {
			g, roster, own = f.geometry, f.roster, &p.Value
		}
	}
	if g.k == 0 {
		e, ok, err := m.lookup(ctx, k)
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, mechanism.Lost(k, Name, have, "in no set the surviving parities know of")
		}
		g = e.g
	}
	st, n, err := m.settleSet(ctx, g, roster, k, want)
	if err != nil {
		return n, err
	}
	if want != 0 {
		// Other sets listing k (a move cut short) list a version other
		// than want, or none: retired now, before a rebuild of k's
		// primary could restore one of them over k's later writes.
		for _, id := range m.othersOf(ctx, k, g.set) {
			f, ok := m.knownSet(id)
			if !ok {
				continue
			}
			_, w, err := m.settleSet(ctx, f.geometry, nil, k, want)
			n += w
			if err != nil {
				return n, err
			}
		}
	}
	if own == nil {
		return n, nil
	}
	isKey := func(mb *member) bool { return mb.split == k.Split && string(mb.key) == string(k.User) }
	if !slices.ContainsFunc(st.f.members, func(mb member) bool { return isKey(&mb) && mb.version == own.Version }) {
		// The piece left its set (a store or delete that failed after
		// the member was detached), or the set lists another version of
		// it (an in-place update cut short, retired above: left listed,
		// a read through the sets would take it for the newest):
		// protect it again in a new set.
		obj := mechanism.Object{Splits: own.Splits, ObjectLen: own.ObjectLen, Version: own.Version}
		if err := m.insert(ctx, k, obj, own.Payload); err != nil {
			return n, err
		}
		return n + 1 + m.r, nil
	}
	if !m.sparse(ctx, st, roster) {
		return n, nil
	}
	return n, m.regroup(ctx, k, own)
}

// settleSet repairs set g under its lock: the listings of split k at
// another version than want (0: none) are retired, k's member at want is
// rewritten if bad, and so are the set's bad parities.
func (m *Mechanism) settleSet(ctx context.Context, g geometry, roster []member, k mechanism.Key, want uint64) (*setState, int, error) {
	tk, err := m.sets.Lock(ctx, setLockKey(g.set))
	if err != nil {
		return nil, 0, err
	}
	defer tk.Release()
	st, err := m.loadSet(ctx, g, roster, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("packing split %d of key %q: %w", k.Split, k.User, err)
	}
	isKey := func(mb *member) bool { return mb.split == k.Split && string(mb.key) == string(k.User) }
	for _, mb := range st.f.members {
		if isKey(&mb) && want != 0 && mb.version != want {
			st.superseded[mb.slot] = true
		}
	}
	n, err := m.rewriteBad(ctx, st, func(mb *member) bool { return isKey(mb) && (want == 0 || mb.version == want) })
	return st, n, err
}

// othersOf returns the sets besides set that the index knows list split
// k (see setIndex.others). The index is built for it only when settling
// a key after a crash (mechanism.Settling), where such listings are
// expected; an index that is not built, or cannot be, names none: the
// scrub of those sets retires them.
func (m *Mechanism) othersOf(ctx context.Context, k mechanism.Key, set uint64) []uint64 {
	if mechanism.Settling(ctx) {
		if _, _, err := m.lookup(ctx, k); err != nil {
			return nil
		}
	}
	m.idxMu.Lock()
	defer m.idxMu.Unlock()
	if m.index == nil {
		return nil
	}
	mk := memberKey(k.User, k.Split)
	ids := slices.DeleteFunc(slices.Clone(m.index.others[mk]), func(id uint64) bool { return id == set })
	if x, ok := m.index.members[mk]; ok && x != set {
		if _, ok := m.index.sets[x]; ok {
			ids = append(ids, x)
		}
	}
	return ids
}

// sparse reports whether set st (as repaired), formed with the members of
// roster, has lost half of them or more (deleted, moved): its r parities
// then protect few bytes, and a repair moves its members to new sets
// (regroup) rather than keep it. Only on a healthy array and not in a
// check (dry run): the move writes.
func (m *Mechanism) sparse(ctx context.Context, st *setState, roster []member) bool {
	if len(roster) < 2 || 2*len(st.f.members) > len(roster) || mechanism.DryRunning(ctx) {
		return false
	}
	for d := range m.env.N() {
		if m.env.State(d) != mechanism.Healthy {
			return false
		}
	}
	return true
}

// regroup moves member k (its piece own) out of its sparse set into a new
// one: it joins the new set first and leaves the old one after (a logged
// leave), so that it is protected throughout. The old set goes once its
// last member has left. The caller holds k's key, as for any store.
func (m *Mechanism) regroup(ctx context.Context, k mechanism.Key, own *format.Value) error {
	f, err := decodeMember(own.Fields)
	if err != nil {
		return err
	}
	obj := mechanism.Object{Splits: own.Splits, ObjectLen: own.ObjectLen, Version: own.Version}
	if err := m.insert(ctx, k, obj, own.Payload); err != nil {
		return fmt.Errorf("packing: regroup split %d of %q: %w", k.Split, k.User, err)
	}
	if err := m.detachFrom(ctx, k, f, *own, true); err != nil && !errors.Is(err, device.ErrNotFound) {
		return fmt.Errorf("packing: regroup split %d of %q out of set %x: %w", k.Split, k.User, f.set, err)
	}
	return nil
}

// rewriteBad retires the members of st that were superseded, then writes
// the pieces that were bad and returns how many it wrote. Those whose
// devices are failed are recorded as missed, so that they are brought up
// to date when the devices come back rather than read as they are.
//
// Repair only moves forward: a member's piece is written only when own
// says the caller holds that member's key and has checked that the listed
// version is the key's newest (its own key's repair). A set's repair on
// behalf of its parities writes parities only: a member it cannot see
// whole is repaired by its key's own repair, which knows whether it is
// still current.
func (m *Mechanism) rewriteBad(ctx context.Context, st *setState, own func(*member) bool) (int, error) {
	if err := m.retire(st); err != nil {
		return 0, err
	}
	var ops []mechanism.Op
	// folds: parities good but for their log, written (the last ops) to
	// fold it in; a check (dry run) does not count them as repairs.
	folds := 0
	fold := func(j int) bool { return !st.bad[st.g.k+j] && st.logged[j] }
	if len(st.f.members) == 0 && !mechanism.DryRunning(ctx) {
		// Every member moved on: the set is gone. Deleting its parities
		// is housekeeping, whatever state they are in (one missing from
		// a rebuilt device, which nothing restores for an empty set), not
		// a repair: a check does not count it.
		for _, d := range st.g.parity {
			ops = append(ops, mechanism.Op{Dev: d, Op: device.Op{Kind: device.OpDelete, Key: setKey(st.g.set)}})
			folds++
		}
	}
	for _, mb := range st.f.members {
		if st.bad[mb.slot] && own != nil && own(&mb) {
			ops = append(ops, m.memberOp(st.g, rosterOf(st.f.members), &mb, st.shards[mb.slot][:mb.splitLen]))
		}
	}
	if len(st.f.members) > 0 {
		pops := m.parityOps(&st.f, st.version, st.shards[st.g.k:])
		for j := range pops {
			if st.bad[st.g.k+j] {
				ops = append(ops, pops[j])
			}
		}
		for j := range pops {
			if fold(j) && !mechanism.DryRunning(ctx) {
				ops = append(ops, pops[j])
				folds++
			}
		}
	}
	m.env.Do(ctx, ops)
	if err := mechanism.Quorum(ops, len(ops)); err != nil {
		return 0, fmt.Errorf("packing: repair set %x: %w", st.g.set, err)
	}
	if err := m.env.Acknowledge(ctx, ops); err != nil {
		return 0, fmt.Errorf("packing: repair set %x: %w", st.g.set, err)
	}
	// Every parity now holds st.version, or is recorded stale and will
	// be rebuilt whole: the log has nothing left to give them.
	pk := setKey(st.g.set)
	if len(st.f.members) == 0 || slices.ContainsFunc(ops, func(op mechanism.Op) bool {
		return op.Err == nil && op.Kind == device.OpStore && bytes.Equal(op.Key, pk)
	}) {
		m.settledParities(st.g.set) // a parity landed: the set is found from it
	}
	if len(st.f.members) == 0 {
		m.fold(ctx, st.g.set, ^uint64(0))
	} else {
		m.fold(ctx, st.g.set, st.version)
	}
	written := 0
	for i := range ops[:len(ops)-folds] {
		if ops[i].Err == nil {
			written++
		}
	}
	m.noteSet(&st.f, st.version)
	return written, nil
}

// retire removes the superseded members from st: their slots become
// virtual zeros, the parities are recomputed under a new version and
// marked for rewriting. The old bytes were needed (and used) to
// reconstruct the others; once the new parities land they are gone.
func (m *Mechanism) retire(st *setState) error {
	n := len(st.f.members)
	st.f.members = slices.DeleteFunc(slices.Clone(st.f.members), func(mb member) bool { return st.superseded[mb.slot] })
	if len(st.f.members) == n {
		return nil
	}
	for s, gone := range st.superseded {
		if gone {
			clear(st.shards[s])
			st.bad[s] = false
		}
	}
	codec, err := erasure.Lookup(erasure.ReedSolomon, st.g.k, st.g.r)
	if err != nil {
		return err
	}
	if err := codec.Encode(st.shards); err != nil {
		return fmt.Errorf("packing: retire members of set %x: %w", st.g.set, err)
	}
	st.version = m.ids.Next()
	for j := 0; j < st.g.r; j++ {
		st.bad[st.g.k+j] = true
	}
	return nil
}

// ---- the member → set index, for members whose own piece is lost ----

// setIndex maps members to their sets, from the newest parity of each set
// seen on the devices (and kept current with the sets this process
// writes).
//
// A set none of whose parities can vouch for its members (a delta log
// that does not chain: errLogGap) is not in sets, but what it claims to
// hold is kept in claims: a member's newest claimed version, which no
// older piece of its key may be read over (see Locate).
//
// A member listed by more than one set (a move to a new set that a crash
// cut short before the old set recorded the leave) maps to the set that
// holds it (see note); the others listing it are kept in others, so that
// a repair of the key can retire those listings before a rebuild takes
// one of them for the member once the key has moved on.
type setIndex struct {
	sets    map[uint64]indexedSet
	members map[string]uint64 // member key‖split → set id
	others  map[string][]uint64
	claims  map[string]indexEntry
	scanned []bool // devices whose parities were read
}

type indexedSet struct {
	f       parityFields
	version uint64
}

func newSetIndex() *setIndex {
	return &setIndex{sets: map[uint64]indexedSet{}, members: map[string]uint64{}, others: map[string][]uint64{}, claims: map[string]indexEntry{}}
}

// other records that set id lists member k too.
func (x *setIndex) other(k string, id uint64) {
	if !slices.Contains(x.others[k], id) {
		x.others[k] = append(x.others[k], id)
	}
}

// notOther forgets that set id lists member k: it was noted again, and
// other records it anew if it still does, so others holds only sets that
// list their members (a process's moves would otherwise pile up).
func (x *setIndex) notOther(k string, id uint64) {
	ids, ok := x.others[k]
	if !ok {
		return
	}
	if ids = slices.DeleteFunc(ids, func(o uint64) bool { return o == id }); len(ids) == 0 {
		delete(x.others, k)
	} else {
		x.others[k] = ids
	}
}

// claim records the members a parity of version v that cannot vouch for
// them claims, unless its set is known from a parity that can, at v or
// newer.
func (x *setIndex) claim(g geometry, members []member, v uint64) {
	if s, ok := x.sets[g.set]; ok && s.version >= v {
		return
	}
	for _, mb := range members {
		k := memberKey(mb.key, mb.split)
		if c, ok := x.claims[k]; ok && c.m.version >= mb.version {
			continue
		}
		mb.key = slices.Clone(mb.key)
		x.claims[k] = indexEntry{g: g, m: mb, version: v}
	}
}

// note records parity f of version v, unless a newer one of its set is
// known. A member listed by two sets (a stale one it left, a newer one it
// joined) belongs to the one listing its newer version, or at one
// version, to the newer set.
func (x *setIndex) note(f *parityFields, v uint64) {
	old, ok := x.sets[f.set]
	if ok && old.version > v {
		return
	}
	for k, c := range x.claims {
		if c.g.set == f.set && c.version <= v {
			delete(x.claims, k) // vouched for now
		}
	}
	if ok {
		for _, mb := range old.f.members {
			k := memberKey(mb.key, mb.split)
			if x.members[k] == f.set {
				delete(x.members, k)
			}
			x.notOther(k, f.set) // again below if it still lists k
		}
	}
	if len(f.members) == 0 {
		delete(x.sets, f.set)
		return
	}
	// Decoded member keys alias their parity, data and all: the index
	// keeps copies, so that it holds memberships, not parities.
	own := f.clone()
	f = &own
	x.sets[f.set] = indexedSet{f: *f, version: v}
	for _, mb := range f.members {
		k := memberKey(mb.key, mb.split)
		if cur, ok := x.members[k]; ok && cur != f.set {
			// Of two sets listing one version (a member moved to a new
			// set by a regroup or a repair, not yet gone from the old
			// one), the newer set holds it: set ids grow with time.
			if e, _ := x.entry(k); e.m.version > mb.version || (e.m.version == mb.version && cur > f.set) {
				x.other(k, f.set)
				continue
			}
			x.other(k, cur)
		}
		x.members[k] = f.set
	}
}

func (x *setIndex) entry(k string) (indexEntry, bool) {
	id, ok := x.members[k]
	if !ok {
		return indexEntry{}, false
	}
	s := x.sets[id]
	for _, mb := range s.f.members {
		if memberKey(mb.key, mb.split) == k {
			return indexEntry{g: s.f.geometry, m: mb, version: s.version}, true
		}
	}
	return indexEntry{}, false
}

// Locate finds the set holding split k from the parities on the devices
// that answer, checks that the set still holds it, and returns the header
// the member was written with. When a set that no parity can vouch for
// (a log gap) claims a newer version of k, that version is returned: the
// member cannot be read, and a read must fail rather than take an older
// piece of k on another device for its value.
func (m *Mechanism) Locate(ctx context.Context, k mechanism.Key) (format.Header, bool, error) {
	e, ok, err := m.lookup(ctx, k)
	if err != nil {
		return format.Header{}, false, err
	}
	if c, claimed := m.claimOf(k); claimed && (!ok || c.m.version > e.m.version) {
		e, ok = c, true
	}
	if !ok {
		return format.Header{}, false, nil
	}
	f := memberFields{geometry: e.g, slot: e.m.slot}
	return format.Header{RM: format.RMPacking, EC: erasure.ReedSolomon, Splits: e.m.splits, SplitLen: e.m.splitLen,
		ObjectLen: e.m.objectLen, Version: e.m.version, Fields: f.encode()}, true, nil
}

// claimOf returns what a set that cannot vouch for its members claims of
// split k (see setIndex), once the index is built.
func (m *Mechanism) claimOf(k mechanism.Key) (indexEntry, bool) {
	m.idxMu.Lock()
	defer m.idxMu.Unlock()
	if m.index == nil {
		return indexEntry{}, false
	}
	c, ok := m.index.claims[memberKey(k.User, k.Split)]
	return c, ok
}

func (m *Mechanism) lookup(ctx context.Context, k mechanism.Key) (indexEntry, bool, error) {
	m.idxMu.Lock()
	defer m.idxMu.Unlock()
	if m.index == nil {
		if err := m.buildIndexLocked(ctx); err != nil {
			return indexEntry{}, false, err
		}
	}
	e, ok := m.index.entry(memberKey(k.User, k.Split))
	if !ok && m.indexIncomplete() {
		// Built while some devices were down: read them now.
		if err := m.buildIndexLocked(ctx); err != nil {
			return indexEntry{}, false, err
		}
		e, ok = m.index.entry(memberKey(k.User, k.Split))
	}
	return e, ok, nil
}

// indexIncomplete reports whether a device that answers now was not read
// when the index was built.
func (m *Mechanism) indexIncomplete() bool {
	for d, done := range m.index.scanned {
		if !done && m.env.Answering(d) {
			return true
		}
	}
	return false
}

// buildIndexLocked reads every parity on every device that answers.
// Parities are read indexChunk at a time while the device's keys are
// listed, so the memory a build takes beyond the index itself (a set's
// membership, not its parity data) does not grow with the number of sets.
func (m *Mechanism) buildIndexLocked(ctx context.Context) error {
	m.loadLog(ctx)
	idx := newSetIndex()
	idx.scanned = make([]bool, m.env.N())
	for d := 0; d < m.env.N(); d++ {
		if !m.env.Answering(d) {
			continue
		}
		idx.scanned[d] = true
		keys := make([][]byte, 0, indexChunk)
		err := m.env.Device(d).Iterate(ctx, setKeyPrefix, func(key []byte) error {
			if _, _, kind, err := format.ParseKey(key); err == nil && kind == kindParity {
				keys = append(keys, slices.Clone(key))
			}
			if len(keys) == indexChunk {
				m.indexParities(ctx, idx, d, keys)
				keys = keys[:0]
			}
			return nil
		})
		if err != nil {
			if errors.Is(err, device.ErrDeviceFailed) {
				continue
			}
			return fmt.Errorf("packing: index parities on device %d: %w", d, err)
		}
		m.indexParities(ctx, idx, d, keys)
	}
	m.index = idx
	return nil
}

// indexChunk is how many parities an index build reads at once.
const indexChunk = 256

// indexParities reads the parities keys of device d into idx. Through
// Env: a parity the device missed an update of reads as stale, not as the
// set's membership.
func (m *Mechanism) indexParities(ctx context.Context, idx *setIndex, d int, keys [][]byte) {
	ops := make([]mechanism.Op, len(keys))
	for j, key := range keys {
		ops[j] = mechanism.Op{Dev: d, Op: device.Op{Kind: device.OpRetrieve, Key: key}}
	}
	m.env.Do(ctx, ops)
	for j := range ops {
		if ops[j].Err != nil {
			continue
		}
		v, err := format.Decode(ops[j].Result)
		if err != nil {
			continue
		}
		f, err := decodeParity(v.Fields)
		if err != nil {
			continue
		}
		m.ids.Observe(v.Version)
		read := f // applyFields replaces f.members, never writes into it
		version, err := m.log.applyFields(&f, v.Version)
		if err != nil {
			// A gap: the parity is bad, its set is known from the
			// others, or only by what it claims.
			idx.claim(f.geometry, m.log.claimed(read, v.Version), m.log.newest(f.set, v.Version))
			continue
		}
		idx.note(&f, version)
	}
}

// noteSet keeps a built index current with a set this process wrote.
func (m *Mechanism) noteSet(f *parityFields, v uint64) {
	m.idxMu.Lock()
	defer m.idxMu.Unlock()
	if m.index != nil {
		m.index.note(f, v)
	}
}

// noteEntry keeps a built index current with a change this process logged.
func (m *Mechanism) noteEntry(e *logEntry) {
	m.idxMu.Lock()
	defer m.idxMu.Unlock()
	if m.index == nil {
		return
	}
	s, ok := m.index.sets[e.g.set]
	if !ok || s.version >= e.pv {
		return
	}
	f := s.f
	if _, err := f.change(e); err == nil {
		m.index.note(&f, e.pv)
	}
}

// knownSet returns set id's geometry and membership from the index, if
// it is built and knows the set, or from the sets written with no parity
// landed.
func (m *Mechanism) knownSet(id uint64) (parityFields, bool) {
	m.idxMu.Lock()
	defer m.idxMu.Unlock()
	if m.index != nil {
		if s, ok := m.index.sets[id]; ok {
			return s.f, true
		}
	}
	s, ok := m.parityless[id]
	return s.f, ok
}

// Sets returns how many sets this process formed.
func (m *Mechanism) Sets() int64 { return m.sets1.Load() }

// RebuildKeys lists the members whose pieces, or whose set's parities,
// were on device dev, from the parities on the other devices: what a
// rebuild of dev must repair beyond what the neighbours' data keys show.
func (m *Mechanism) RebuildKeys(ctx context.Context, dev int) ([]mechanism.Key, error) {
	m.idxMu.Lock()
	defer m.idxMu.Unlock()
	// A fresh index: the devices may have changed since it was built.
	if err := m.buildIndexLocked(ctx); err != nil {
		return nil, err
	}
	var out []mechanism.Key
	for _, s := range m.index.sets {
		onDev := slices.Contains(s.f.parity, dev)
		for _, mb := range s.f.members {
			if onDev || mb.dev == dev {
				out = append(out, mechanism.Key{User: mb.key, Split: mb.split, Primary: mb.dev})
			}
		}
	}
	return out, nil
}

// Members lists the user keys of the split-0 members whose primary is
// device dev and that start with prefix, from the set index: built once
// (when first needed, or when a device it could not read answers again)
// and kept current with the sets this process writes, so a listing costs
// a walk of the index, not a read of every parity. A member a newer write
// superseded may be listed: the caller checks.
func (m *Mechanism) Members(ctx context.Context, dev int, prefix []byte) ([][]byte, error) {
	m.idxMu.Lock()
	defer m.idxMu.Unlock()
	if m.index == nil || m.indexIncomplete() {
		if err := m.buildIndexLocked(ctx); err != nil {
			return nil, err
		}
	}
	var out [][]byte
	for _, s := range m.index.sets {
		for _, mb := range s.f.members {
			if mb.dev == dev && mb.split == 0 && bytes.HasPrefix(mb.key, prefix) {
				out = append(out, mb.key)
			}
		}
	}
	return out, nil
}

// RepairKey repairs the set whose parity has internal key key: its pieces
// are reconstructed and the bad ones rewritten, or, when the set no longer
// exists, the leftover parity is deleted. It reports false for keys that
// are not packing parities.
func (m *Mechanism) RepairKey(ctx context.Context, key []byte) (bool, error) {
	u, _, kind, err := format.ParseKey(key)
	if err != nil || kind != kindParity || len(u) != len(setKeyPrefix)+8 || !slices.Equal(u[:len(setKeyPrefix)], setKeyPrefix) {
		return false, nil
	}
	id := binary.BigEndian.Uint64(u[len(setKeyPrefix):])
	// Locked before anything is read: a set being written (writeSet holds
	// the lock) must not look deleted because its parities have not all
	// landed.
	tk, err := m.sets.Lock(ctx, setLockKey(id))
	if err != nil {
		return true, err
	}
	defer tk.Release()
	// Find the set's geometry from any of its parities that reads well;
	// failing that, from a parity recorded stale, whose membership is
	// then only a list of candidates (loadSet keeps those whose pieces
	// still claim the set).
	var g *geometry
	var roster []member
	deleted := false // a device's record says the set's last change was its deletion
	for d := 0; d < m.env.N(); d++ {
		deleted = deleted || m.env.MissedDelete(d, key)
	}
	// absent: the device answered, as a device that missed no write of
	// the key answers, that it holds no parity of the set.
	absent := make([]bool, m.env.N())
	for pass := 0; pass < 2 && g == nil && !(pass == 1 && deleted); pass++ {
		for d := 0; d < m.env.N() && g == nil; d++ {
			var b []byte
			if pass == 0 {
				ops := []mechanism.Op{{Dev: d, Op: device.Op{Kind: device.OpRetrieve, Key: key}}}
				m.env.Do(ctx, ops)
				b, err = ops[0].Result, ops[0].Err
				absent[d] = errors.Is(err, device.ErrNotFound)
			} else if m.env.Answering(d) {
				b, err = m.env.Device(d).Retrieve(ctx, key)
			}
			if err != nil || b == nil {
				continue
			}
			if v, err := format.Decode(b); err == nil {
				if f, err := decodeParity(v.Fields); err == nil && f.set == id {
					g = &f.geometry
					if pass == 1 {
						roster = f.members
					}
				}
			}
		}
	}
	if g != nil && roster != nil && slices.ContainsFunc(g.parity, func(d int) bool { return absent[d] }) {
		// Only a stale copy shows the set, and one of its parity devices
		// that missed no write of it holds none: the set was deleted (its
		// members all left) while the stale device was away. Its roster
		// is history; reading it would wait on members long gone.
		g, roster, deleted = nil, nil, true
	}
	if g == nil && !deleted {
		// The set as this process last knew it (the index, kept current
		// with what it writes): its membership is a roster of candidates.
		if f, ok := m.knownSet(id); ok {
			g, roster = &f.geometry, f.members
		}
	}
	if g == nil && !deleted {
		// Nothing says the set was deleted, and a device that is down
		// may hold its parities: deleting the leftovers now would drop
		// the only record that this device misses one. Wait for it.
		for d := 0; d < m.env.N(); d++ {
			if m.env.State(d) == mechanism.Failed {
				return true, fmt.Errorf("packing: repair set %x: no parity of it is readable while device %d is down: %w", id, d, device.ErrDeviceFailed)
			}
		}
	}
	if g == nil {
		// No parity of the set is left anywhere: delete whatever a
		// stale device still holds under the key.
		var ops []mechanism.Op
		for d := 0; d < m.env.N(); d++ {
			if m.env.State(d) != mechanism.Failed {
				ops = append(ops, mechanism.Op{Dev: d, Op: device.Op{Kind: device.OpDelete, Key: key}})
			}
		}
		m.env.Do(ctx, ops)
		return true, mechanism.Quorum(ops, 0)
	}
	st, err := m.loadSet(ctx, *g, roster, nil)
	if err != nil {
		return true, err
	}
	_, err = m.rewriteBad(ctx, st, nil)
	return true, err
}
