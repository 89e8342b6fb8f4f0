package packing

// The parity-delta log: PARIX's idea, on KV devices.
//
// An update of a member does not read and patch its set's parities in
// place. The array has already read the member's old bytes
// (the read before write Packing needs), so the change is logged as the
// data delta old ⊕ new, with the membership change (slot, key, version
// from → to), on the set's parity devices. A data delta is the same for
// every parity (parity j moves by c(j, slot) · delta), so any copy of an
// entry brings any parity of its set up to date. Speculation as PARIX does
// it (sending the new value alone, the old one only when the parity side
// asks) would save nothing here: the old value is already in hand.
//
// The entries of concurrent changes share device writes: each parity
// device has a queue, and one segment (a value under segKey(seq), kind
// KindArray, so that listings, scrub and resync records pass it by)
// carries every entry queued while the device's previous segment was
// being written. An update thus costs its member write plus r segment
// writes shared with the other changes in flight, and no read but the
// array's.
//
// Invariants:
//
//   - An entry carries the set version pv it brings the parities to (a new
//     version, newer than any before it), and applies to a parity only
//     when pv is newer than the parity's own version; it must then find
//     the member at its slot with version from. A parity whose entries do
//     not chain that way (a gap) reads as bad, never as current. The
//     effective parity (readParities) is the stored one with its newer
//     entries applied in pv order.
//   - Changes to one set are serialised by the set lock, from the read of
//     the old member to the entry's landing, so a set's entries have
//     distinct, ordered versions.
//   - A change is logged only from what the log lists at its slot: the
//     member's piece on its primary, of the version the newest entry of
//     the slot left. A piece the log does not list there (a change of it
//     cut short: its entry logged, its piece never written; or a leave
//     logged before the store that moved it) does not chain; the set
//     settles it first (loads the set, retires the slot, rewrites the
//     parities), and an update then moves the member to another set.
//   - So a set's entries are not folded into its parities (replayed)
//     while the primary of a member still holds a piece that an entry of
//     its slot replaced (unlanded): folded, the log would no longer tell
//     that the set does not list the piece reads return.
//   - A set none of whose parities can vouch for it (every one has a gap)
//     still claims the members its parities and entries name: a member's
//     claimed version is what its key's reads are held to (Locate), so
//     that an older piece of the key elsewhere is never read over it.
//   - An entry is in memory once one copy of it is durable, and stays
//     there, and in its segments, until a parity of its set was rewritten
//     at a version at least its own (replay, repair, an in-place patch):
//     the parities that were not are bad by then (recorded stale, or a gap)
//     and are rebuilt whole. A segment is deleted when it holds no live
//     entry.
//   - The in-memory log is the union of the segments on the devices: a
//     device's segments are loaded before any of its parities is used
//     after an open, and a parity on a device whose segments could not be
//     read is treated as unreadable.
//   - An entry may record a leave (a delete, or a move to another set: a
//     delta to virtual zeros, the member dropped from the membership). A
//     leave whose member is gone already (retired by a repair) applies
//     nothing.
//   - Replay (rewriting parities with their entries applied) runs when the
//     log holds more than logHigh bytes, after logIdle without a change,
//     and on every repair of the set (scrub, rebuild, resync).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/erasure"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// logKeyPrefix starts the user part of every segment key.
var logKeyPrefix = []byte("\x00kvarray-plog")

func segKey(seq uint64) []byte {
	return format.Key(binary.BigEndian.AppendUint64(slices.Clip(logKeyPrefix), seq), 0, format.KindArray)
}

const roleLog = 2 // RM fields of a segment

// Replay thresholds: see the package's log invariants.
var (
	logHigh = int64(64 << 20)
	logIdle = time.Second
)

// errLogGap marks a parity that a log entry newer than it cannot be applied
// to, or whose device's log could not be read.
var errLogGap = errors.New("packing: parity does not chain with the delta log")

// logEntry is one logged change of a member.
type logEntry struct {
	g     geometry
	pv    uint64 // set version after the change
	slot  int
	from  uint64 // member version before the change
	leave bool   // the member leaves the set: its slot becomes zeros
	mb    member // the member after the change (key and split when leaving)
	delta []byte // old ⊕ new bytes of the slot (shorter than the shard: zeros follow)

	copies []*segment // guarded by deltaLog.mu
}

// segment is one segment value on one device.
type segment struct {
	dev  int
	key  string
	refs int // live entries it holds
}

// deltaLog is the in-memory log and the devices' append queues.
type deltaLog struct {
	mu     sync.Mutex
	sets   map[uint64][]*logEntry // per set, ascending pv
	segs   map[segRef]*segment
	bytes  int64
	queues []appendQueue

	loadMu sync.Mutex
	loaded []bool // devices whose segments are in sets
	// appendMu: appends hold it shared, a load exclusive, so that a
	// segment is never both loaded and registered by its writer.
	appendMu sync.RWMutex

	bg        sync.WaitGroup
	idle      *time.Timer
	replaying bool
	closed    bool

	// folding counts the folds whose segment deletes are still in flight
	// (a fold drops its entries under mu, then deletes outside it);
	// folded is signalled, under mu, when it falls to zero. Settle waits
	// for them, so that when it returns every segment a fold released,
	// its own or a background replay's, is gone.
	folding int
	folded  sync.Cond
}

type segRef struct {
	dev int
	key string
}

type appendQueue struct {
	pending []*pendingAppend
	busy    bool
}

type pendingAppend struct {
	e    *logEntry
	done chan error
}

func newDeltaLog(n int) *deltaLog {
	l := &deltaLog{sets: map[uint64][]*logEntry{}, segs: map[segRef]*segment{},
		queues: make([]appendQueue, n), loaded: make([]bool, n)}
	l.folded.L = &l.mu
	return l
}

// ---- encoding ----

// Entry layout: geometry, pv (8), from (8), slot (1), leave (1), the
// member entry (parity layout), delta length (4), delta.
func (e *logEntry) append(b []byte) []byte {
	b = e.g.append(b)
	b = binary.LittleEndian.AppendUint64(b, e.pv)
	b = binary.LittleEndian.AppendUint64(b, e.from)
	leave := byte(0)
	if e.leave {
		leave = 1
	}
	b = append(b, byte(e.slot), leave)
	b = appendMember(b, &e.mb)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(e.delta)))
	return append(b, e.delta...)
}

func (e *logEntry) encodedLen() int {
	return geometryLen + 2*e.g.r + 18 + memberEntryLen + len(e.mb.key) + 4 + len(e.delta)
}

// readEntry decodes one entry from the start of b; it owns nothing of b.
func readEntry(b []byte) (*logEntry, []byte, error) {
	e := &logEntry{}
	rest, err := e.g.decode(b)
	if err != nil {
		return nil, nil, err
	}
	if len(rest) < 18 {
		return nil, nil, fmt.Errorf("%w: short packing log entry", format.ErrCorrupt)
	}
	e.pv = binary.LittleEndian.Uint64(rest)
	e.from = binary.LittleEndian.Uint64(rest[8:])
	e.slot, e.leave = int(rest[16]), rest[17] == 1
	if e.mb, rest, err = readMember(rest[18:], &e.g); err != nil {
		return nil, nil, err
	}
	e.mb.key = slices.Clone(e.mb.key)
	if len(rest) < 4 {
		return nil, nil, fmt.Errorf("%w: short packing log entry", format.ErrCorrupt)
	}
	n := int(binary.LittleEndian.Uint32(rest))
	rest = rest[4:]
	if n > len(rest) || n > e.g.shardSize || e.slot >= e.g.k || e.mb.slot != e.slot {
		return nil, nil, fmt.Errorf("%w: packing log entry", format.ErrCorrupt)
	}
	e.delta = slices.Clone(rest[:n])
	return e, rest[n:], nil
}

// segCap is the most entry bytes one segment holds.
func (m *Mechanism) segCap() int {
	return m.env.Limits().MaxValueLen - format.HeaderLen - 1
}

// ---- membership and parity bytes ----

// change applies e's membership change to f, or fails with errLogGap. It
// reports false for a leave whose member is gone already: a repair that
// found the member moved on (its primary holding another set's piece)
// retired it, zeroing its slot, between the move and the leave's entry.
// Slots are never reused, so the leave then has nothing to apply.
func (f *parityFields) change(e *logEntry) (bool, error) {
	i := slices.IndexFunc(f.members, func(mb member) bool { return mb.slot == e.slot })
	if i < 0 && e.leave {
		return false, nil
	}
	if i < 0 || f.members[i].version != e.from || f.members[i].split != e.mb.split || string(f.members[i].key) != string(e.mb.key) {
		return false, fmt.Errorf("%w: set %x slot %d: entry %d expects version %d", errLogGap, f.set, e.slot, e.pv, e.from)
	}
	f.members = slices.Clone(f.members)
	if e.leave {
		f.members = slices.Delete(f.members, i, i+1)
	} else {
		f.members[i] = e.mb
	}
	return true, nil
}

// newer returns the entries of set newer than version v, in order.
func (l *deltaLog) newer(set, v uint64) []*logEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	es := l.sets[set]
	i, _ := slices.BinarySearchFunc(es, v, func(e *logEntry, v uint64) int {
		switch {
		case e.pv <= v:
			return -1
		default:
			return 1
		}
	})
	return slices.Clone(es[i:])
}

// claimed returns the members parity f of version v names once every
// newer logged change of its set is applied, chained or not: what the set
// claims to hold. When a change does not chain (a gap) the set cannot
// vouch for these, but no older piece of a member may be read over them.
func (l *deltaLog) claimed(f parityFields, v uint64) []member {
	ms := slices.Clone(f.members)
	for _, e := range l.newer(f.set, v) {
		ms = slices.DeleteFunc(ms, func(mb member) bool { return mb.slot == e.slot })
		if !e.leave {
			ms = append(ms, e.mb)
		}
	}
	return ms
}

// newest returns the version of set's newest logged change, v when none
// is newer.
func (l *deltaLog) newest(set, v uint64) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if es := l.sets[set]; len(es) > 0 && es[len(es)-1].pv > v {
		return es[len(es)-1].pv
	}
	return v
}

// lists reports whether the newest logged change of slot in set, if any,
// left it holding split k.Split of k.User at version v: what a change of
// that piece must start from to chain.
func (l *deltaLog) lists(set uint64, slot int, k mechanism.Key, v uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	es := l.sets[set]
	for i := len(es) - 1; i >= 0; i-- {
		if e := es[i]; e.slot == slot {
			return !e.leave && e.mb.version == v && e.mb.split == k.Split && string(e.mb.key) == string(k.User)
		}
	}
	return true
}

// applyFields brings the membership f at version v up to date with the log
// and returns its version.
func (l *deltaLog) applyFields(f *parityFields, v uint64) (uint64, error) {
	for _, e := range l.newer(f.set, v) {
		if _, err := f.change(e); err != nil {
			return v, err
		}
		v = e.pv
	}
	return v, nil
}

// applyLog turns parity p, as read, into the effective parity: the newer
// entries applied to its membership and bytes. A gap, or a device whose
// log is not loaded, makes p bad.
func (m *Mechanism) applyLog(p *parity) {
	if !m.log.isLoaded(p.Dev) {
		p.ok, p.Err = false, fmt.Errorf("%w: the delta log of device %d is not read", errLogGap, p.Dev)
		return
	}
	es := m.log.newer(p.f.set, p.Value.Version)
	if len(es) == 0 {
		return
	}
	g := &p.f.geometry
	codec, err := erasure.Lookup(erasure.ReedSolomon, g.k, g.r)
	if err != nil {
		p.ok, p.Err = false, err
		return
	}
	shards := make([][]byte, g.k+g.r)
	for j := range g.r {
		shards[g.k+j] = make([]byte, g.shardSize) // the other parities: scratch
	}
	shards[g.k+p.f.index] = p.Value.Payload
	newData := make([][]byte, g.k)
	for _, e := range es {
		applies, err := p.f.change(e)
		if err != nil {
			p.ok, p.Err = false, err
			return
		}
		p.Value.Version = e.pv
		if !applies {
			continue
		}
		shards[e.slot] = make([]byte, g.shardSize) // old data: zeros, so the update adds delta
		newData[e.slot] = pad(e.delta, g.shardSize)
		if err := codec.Update(shards, newData); err != nil {
			p.ok, p.Err = false, err
			return
		}
		shards[e.slot], newData[e.slot] = nil, nil
	}
	p.logged = true
}

// ---- appending ----

// appendEntry writes e to the segments of devices devs and returns each
// device's outcome. Once one copy is durable e is in the log.
func (m *Mechanism) appendEntry(ctx context.Context, devs []int, e *logEntry) []error {
	// Only the append and the add hold appendMu: noteEntry takes the
	// index lock, under which an index build loads the log.
	m.log.appendMu.RLock()
	dones := make([]chan error, len(devs))
	for i, d := range devs {
		dones[i] = m.enqueue(d, e)
	}
	errs := make([]error, len(devs))
	landed := false
	for i := range dones {
		errs[i] = <-dones[i]
		landed = landed || errs[i] == nil
	}
	if landed {
		m.log.add(e)
	}
	m.log.appendMu.RUnlock()
	if landed {
		m.noteEntry(e)
		m.replaySoon()
	}
	return errs
}

// enqueue queues e for device d, starting a flusher if none runs.
func (m *Mechanism) enqueue(d int, e *logEntry) chan error {
	pa := &pendingAppend{e: e, done: make(chan error, 1)}
	l := m.log
	l.mu.Lock()
	q := &l.queues[d]
	q.pending = append(q.pending, pa)
	start := !q.busy
	q.busy = true
	l.mu.Unlock()
	if start {
		go m.flush(d)
	}
	return pa.done
}

// flush writes device d's queue as segments until it is empty.
func (m *Mechanism) flush(d int) {
	l := m.log
	ctx := context.Background()
	for {
		l.mu.Lock()
		q := &l.queues[d]
		n, size := 0, 0
		for n < len(q.pending) && (n == 0 || size+q.pending[n].e.encodedLen() <= m.segCap()) {
			size += q.pending[n].e.encodedLen()
			n++
		}
		batch := q.pending[:n:n]
		q.pending = q.pending[n:]
		if n == 0 {
			q.busy = false
		}
		l.mu.Unlock()
		if n == 0 {
			return
		}
		payload := make([]byte, 0, size)
		for _, pa := range batch {
			payload = pa.e.append(payload)
		}
		key := segKey(m.ids.Next())
		h := format.Header{RM: format.RMPacking, EC: erasure.ReedSolomon, Splits: 1, Fields: []byte{roleLog}}
		ops := []mechanism.Op{{Dev: d, Op: device.Op{Kind: device.OpStore, Key: key, Value: format.Encode(&h, payload)}}}
		m.env.Do(ctx, ops)
		if err := ops[0].Err; err == nil {
			l.mu.Lock()
			s := &segment{dev: d, key: string(key), refs: len(batch)}
			l.segs[segRef{d, s.key}] = s
			for _, pa := range batch {
				pa.e.copies = append(pa.e.copies, s)
			}
			l.mu.Unlock()
		}
		for _, pa := range batch {
			pa.done <- ops[0].Err
		}
	}
}

// add puts e in the log, unless a copy of it (loaded meanwhile) is there.
func (l *deltaLog) add(e *logEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.insertLocked(e)
}

func (l *deltaLog) insertLocked(e *logEntry) *logEntry {
	es := l.sets[e.g.set]
	i, found := slices.BinarySearchFunc(es, e.pv, func(x *logEntry, v uint64) int {
		switch {
		case x.pv < v:
			return -1
		case x.pv > v:
			return 1
		}
		return 0
	})
	if found {
		return es[i]
	}
	l.sets[e.g.set] = slices.Insert(es, i, e)
	l.bytes += int64(len(e.delta))
	return e
}

// fold forgets the entries of set up to version v, which a parity now
// holds, and deletes the segments left without a live entry.
func (m *Mechanism) fold(ctx context.Context, set, v uint64) {
	if mechanism.DryRunning(ctx) {
		return
	}
	l := m.log
	l.mu.Lock()
	es := l.sets[set]
	n := 0
	for n < len(es) && es[n].pv <= v {
		n++
	}
	var del []mechanism.Op
	for _, e := range es[:n] {
		l.bytes -= int64(len(e.delta))
		for _, s := range e.copies {
			if s.refs--; s.refs == 0 {
				delete(l.segs, segRef{s.dev, s.key})
				del = append(del, mechanism.Op{Dev: s.dev, Op: device.Op{Kind: device.OpDelete, Key: []byte(s.key)}})
			}
		}
	}
	if n == len(es) {
		delete(l.sets, set)
	} else if n > 0 {
		l.sets[set] = slices.Clone(es[n:])
	}
	l.folding++
	l.mu.Unlock()
	// A delete that fails leaves a segment whose entries are older than
	// their parities: loaded again at the next open, they are skipped and
	// folded by the next replay; until then Settle's sweep deletes it.
	m.env.Do(context.WithoutCancel(ctx), del)
	l.mu.Lock()
	if l.folding--; l.folding == 0 {
		l.folded.Broadcast()
	}
	l.mu.Unlock()
}

// waitFolds waits until no fold is deleting segments.
func (l *deltaLog) waitFolds() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.folding > 0 {
		l.folded.Wait()
	}
}

// ---- loading ----

func (l *deltaLog) isLoaded(d int) bool {
	l.loadMu.Lock()
	defer l.loadMu.Unlock()
	return l.loaded[d]
}

// loadLog reads the segments of every device not read yet that answers.
func (m *Mechanism) loadLog(ctx context.Context) {
	l := m.log
	if !m.logUnread() {
		return
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	l.loadMu.Lock()
	defer l.loadMu.Unlock()
	for d := range l.loaded {
		if l.loaded[d] || !m.env.Answering(d) {
			continue
		}
		var keys [][]byte
		err := m.env.Device(d).Iterate(ctx, logKeyPrefix, func(key []byte) error {
			keys = append(keys, slices.Clone(key))
			return nil
		})
		if err == nil {
			err = m.loadSegments(ctx, d, keys)
		}
		l.loaded[d] = err == nil
	}
	// Entries loaded may all be folded already (a segment whose delete
	// failed): the idle replay forgets them.
	m.replaySoon()
}

// logUnread reports whether a device that answers has its segments unread.
func (m *Mechanism) logUnread() bool {
	l := m.log
	l.loadMu.Lock()
	defer l.loadMu.Unlock()
	for d, done := range l.loaded {
		if !done && m.env.Answering(d) {
			return true
		}
	}
	return false
}

// loadSegments reads segments keys of device d into the log.
func (m *Mechanism) loadSegments(ctx context.Context, d int, keys [][]byte) error {
	l := m.log
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), indexChunk)]
		keys = keys[len(chunk):]
		ops := make([]mechanism.Op, 0, len(chunk))
		for _, key := range chunk {
			l.mu.Lock()
			_, known := l.segs[segRef{d, string(key)}]
			l.mu.Unlock()
			if !known {
				ops = append(ops, mechanism.Op{Dev: d, Op: device.Op{Kind: device.OpRetrieve, Key: key}})
			}
		}
		m.env.Do(ctx, ops)
		for i := range ops {
			if errors.Is(ops[i].Err, device.ErrNotFound) {
				continue // folded meanwhile
			}
			if ops[i].Err != nil {
				return ops[i].Err
			}
			v, err := format.Decode(ops[i].Result)
			if err == nil && (len(v.Fields) != 1 || v.Fields[0] != roleLog) {
				err = fmt.Errorf("%w: not a packing log segment", format.ErrCorrupt)
			}
			var es []*logEntry
			for rest := v.Payload; err == nil && len(rest) > 0; {
				var e *logEntry
				if e, rest, err = readEntry(rest); err == nil {
					es = append(es, e)
				}
			}
			if err != nil {
				// A corrupt segment: its copies on the other parity
				// devices still count, and this device's parities,
				// which may lack its entries, read as bad.
				return fmt.Errorf("packing: log segment on device %d: %w", d, err)
			}
			l.mu.Lock()
			s := &segment{dev: d, key: string(ops[i].Key)}
			l.segs[segRef{d, s.key}] = s
			for _, e := range es {
				m.ids.Observe(e.pv)
				e = l.insertLocked(e)
				e.copies = append(e.copies, s)
				s.refs++
			}
			l.mu.Unlock()
		}
	}
	return nil
}

// ---- replay ----

// replaySoon starts a replay when the log is over logHigh, and (re)arms the
// idle replay.
func (m *Mechanism) replaySoon() {
	l := m.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	switch {
	case m.idle <= 0:
	case l.idle == nil:
		l.idle = time.AfterFunc(m.idle, func() { m.startReplay(0) })
	default:
		l.idle.Reset(m.idle)
	}
	if l.bytes > logHigh && !l.replaying {
		l.replaying = true
		l.bg.Add(1)
		go m.replayDown(logHigh / 2)
	}
}

func (m *Mechanism) startReplay(to int64) {
	l := m.log
	l.mu.Lock()
	if l.closed || l.replaying {
		l.mu.Unlock()
		return
	}
	l.replaying = true
	l.bg.Add(1)
	l.mu.Unlock()
	m.replayDown(to)
}

// replayDown replays sets, oldest change first, until the log holds at
// most to bytes (or nothing more can be folded).
func (m *Mechanism) replayDown(to int64) {
	l := m.log
	defer l.bg.Done()
	defer func() {
		l.mu.Lock()
		l.replaying = false
		l.mu.Unlock()
	}()
	ctx := context.Background()
	for _, set := range m.log.oldestSets() {
		l.mu.Lock()
		done := l.bytes <= to || l.closed
		l.mu.Unlock()
		if done {
			return
		}
		_ = m.Replay(ctx, set) // what fails stays logged, for a repair
	}
}

// oldestSets returns the sets with entries, oldest first entry first.
func (l *deltaLog) oldestSets() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]uint64, 0, len(l.sets))
	for id := range l.sets {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b uint64) int {
		pa, pb := l.sets[a][0].pv, l.sets[b][0].pv
		switch {
		case pa < pb:
			return -1
		case pa > pb:
			return 1
		}
		return 0
	})
	return ids
}

// Replay writes the parities of set with its log entries applied and
// forgets the entries, unless a change has not reached its member
// (unlanded): the set then waits. A set none of whose parities reads
// well is repaired whole instead.
func (m *Mechanism) Replay(ctx context.Context, set uint64) error {
	m.loadLog(ctx)
	es := m.log.newer(set, 0)
	if len(es) == 0 {
		return nil
	}
	g := es[0].g
	tk, err := m.sets.Lock(ctx, setLockKey(set))
	if err != nil {
		return err
	}
	defer tk.Release()
	if m.unlanded(ctx, set, es) {
		return nil // the set waits: see unlanded
	}
	pars := m.readParities(ctx, g)
	var ops []mechanism.Op
	var v uint64
	ok := 0
	for j := range pars {
		p := &pars[j]
		if !p.ok {
			continue
		}
		ok++
		v = max(v, p.Value.Version)
		if !p.logged {
			continue
		}
		if len(p.f.members) == 0 {
			ops = append(ops, mechanism.Op{Dev: p.Dev, Op: device.Op{Kind: device.OpDelete, Key: setKey(set)}})
		} else {
			ops = append(ops, parityOp(&p.f, p.f.index, p.Value.Version, p.Value.Payload))
		}
	}
	if ok == 0 && gone(pars) {
		m.fold(ctx, set, ^uint64(0)) // the set was deleted
		return nil
	}
	if ok == 0 {
		st, err := m.loadSet(ctx, g, nil, nil)
		if err != nil {
			return fmt.Errorf("packing: replay set %x: %w", set, err)
		}
		_, err = m.rewriteBad(ctx, st, nil)
		return err
	}
	m.env.Do(ctx, ops)
	if err := mechanism.Quorum(ops, 0); err != nil {
		return fmt.Errorf("packing: replay set %x: %w", set, err)
	}
	// A parity the fold cannot reach keeps an older membership: once the
	// entries are gone it would read as a good parity of an older version
	// (a deleted member listed again), so it is recorded stale first.
	for j := range pars {
		if !pars[j].ok {
			if err := m.env.MarkStale(ctx, pars[j].Dev, setKey(set)); err != nil {
				return fmt.Errorf("packing: replay set %x: %w", set, err)
			}
		}
	}
	m.fold(ctx, set, v)
	if left(es) {
		for j := range pars {
			if pars[j].ok {
				m.noteThinned(pars[j].f.members)
				break
			}
		}
	}
	return nil
}

// unlanded reports whether a logged change of set has not reached its
// member's primary: the piece there is still one a logged change of its
// slot replaced. The change is in flight, or a crash cut it short after
// logging it (a leave logged before the store that moved the key
// overwrote the member; an update whose member write failed), and reads
// return that piece. Folded into the parities, the change would leave the
// set not listing the piece reads return, so the key's next change would
// be logged from a version the set does not list, and every parity of
// the set would read as bad for good (a gap). Kept logged, it is seen by
// that next change (deltaLog.lists), which moves the member instead, and
// by a repair of the key (scrub), which protects the piece again; the
// set folds once its log chains with its members. A primary that cannot
// be read cannot tell: its piece is rebuilt as the log has it.
func (m *Mechanism) unlanded(ctx context.Context, set uint64, es []*logEntry) bool {
	replaced := map[int][]uint64{} // slot → versions its entries changed from
	var slots []*logEntry          // one entry per slot, to read its member
	for _, e := range es {
		if _, seen := replaced[e.slot]; !seen {
			slots = append(slots, e)
		}
		replaced[e.slot] = append(replaced[e.slot], e.from)
	}
	for _, e := range slots {
		k := mechanism.Key{User: e.mb.key, Split: e.mb.split, Primary: e.mb.dev}
		p := m.env.Read(ctx, k.Data(), []int{k.Primary})[0]
		if !p.OK() || p.Value.RM != format.RMPacking {
			continue
		}
		f, err := decodeMember(p.Value.Fields)
		if err == nil && f.set == set && f.slot == e.slot && slices.Contains(replaced[e.slot], p.Value.Version) {
			return true
		}
	}
	return false
}

// left reports whether one of es is a leave.
func left(es []*logEntry) bool {
	return slices.ContainsFunc(es, func(e *logEntry) bool { return e.leave })
}

// maxThinned bounds the keys waiting for compaction (Thinned).
const maxThinned = 1 << 14

// noteThinned queues the remaining members of a set that members left,
// for the array's compaction (Thinned); beyond maxThinned keys they wait
// for the next scrub.
func (m *Mechanism) noteThinned(members []member) {
	m.thinMu.Lock()
	defer m.thinMu.Unlock()
	for _, mb := range members {
		if len(m.thinned) >= maxThinned {
			return
		}
		m.thinned = append(m.thinned, slices.Clone(mb.key))
	}
}

// Thinned returns, and forgets, the user keys of members whose sets lost
// members since the last call: candidates for compaction. Repairing such
// a key (the array's Repair, under its key lock) regroups it when its set
// has become sparse (see Repair), so that sparse sets empty out and go in
// the background rather than at the next scrub only.
func (m *Mechanism) Thinned() [][]byte {
	m.thinMu.Lock()
	defer m.thinMu.Unlock()
	out := m.thinned
	m.thinned = nil
	return out
}

// noteLeft records that a member left the set with id set by a logged
// entry, for FoldLeaves.
func (m *Mechanism) noteLeft(set uint64) {
	m.thinMu.Lock()
	defer m.thinMu.Unlock()
	if m.left == nil {
		m.left = map[uint64]struct{}{}
	}
	m.left[set] = struct{}{}
}

// FoldLeaves replays the sets that members left by a logged entry since
// the last call, which queues their remaining members for compaction
// (Thinned): the leaves' deltas reach the parities and the sparse sets
// become visible to the array's compaction, without folding the updates'
// deltas of every other set (Settle).
func (m *Mechanism) FoldLeaves(ctx context.Context) error {
	m.thinMu.Lock()
	sets := m.left
	m.left = nil
	m.thinMu.Unlock()
	var errs []error
	for set := range sets {
		errs = append(errs, m.Replay(ctx, set))
	}
	return errors.Join(errs...)
}

// Settle folds the whole log into the parities (see Replay).
func (m *Mechanism) Settle(ctx context.Context) error {
	m.loadLog(ctx)
	var errs []error
	for _, set := range m.log.oldestSets() {
		errs = append(errs, m.Replay(ctx, set))
	}
	// A background replay may have folded a set just before: its
	// segment deletes may still be in flight.
	m.log.waitFolds()
	errs = append(errs, m.sweepSegments(ctx))
	return errors.Join(errs...)
}

// sweepSegments deletes the segments on the devices whose log is loaded
// that no entry refers to: those whose delete a fold could not do, their
// device being down or not yet taken back (a device's segments are loaded
// once, when it answers again, and a fold that races that load releases
// segments the load skipped as known). Otherwise they would stay until the
// next open loads and folds them. It holds appendMu alone, as a load does:
// no segment is being written, so every segment of a live entry is
// registered, and one written but not registered (its store reported
// failed) holds only entries the log has elsewhere or never took.
func (m *Mechanism) sweepSegments(ctx context.Context) error {
	l := m.log
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	l.loadMu.Lock()
	loaded := slices.Clone(l.loaded)
	l.loadMu.Unlock()
	var ops []mechanism.Op
	for d, ok := range loaded {
		if !ok || m.env.State(d) != mechanism.Healthy {
			continue
		}
		err := m.env.Device(d).Iterate(ctx, logKeyPrefix, func(key []byte) error {
			l.mu.Lock()
			_, known := l.segs[segRef{d, string(key)}]
			l.mu.Unlock()
			if !known {
				ops = append(ops, mechanism.Op{Dev: d, Op: device.Op{Kind: device.OpDelete, Key: slices.Clone(key)}})
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("packing: log segments of device %d: %w", d, err)
		}
	}
	m.env.Do(ctx, ops)
	var errs []error
	for i := range ops {
		if err := ops[i].Err; err != nil && !errors.Is(err, device.ErrNotFound) {
			errs = append(errs, fmt.Errorf("packing: delete log segment on device %d: %w", ops[i].Dev, err))
		}
	}
	return errors.Join(errs...)
}

// gone reports whether every parity of a set answered not found.
func gone(pars []parity) bool {
	for j := range pars {
		if !errors.Is(pars[j].Err, device.ErrNotFound) {
			return false
		}
	}
	return true
}

// Close stops the log's replays; the array calls it before closing the
// devices. What is logged stays logged: it is durable in the segments.
func (m *Mechanism) Close() {
	l := m.log
	l.mu.Lock()
	l.closed = true
	if l.idle != nil {
		l.idle.Stop()
	}
	l.mu.Unlock()
	l.bg.Wait()
}

// LogBytes returns the bytes of deltas the log holds in memory.
func (m *Mechanism) LogBytes() int64 {
	m.log.mu.Lock()
	defer m.log.mu.Unlock()
	return m.log.bytes
}

// ---- logging a change ----

// logChange logs change e of member k of its set (roster as its member
// fields list it) on the set's parity devices, with the writes ops (the
// member's new piece; none for a leave) beside it, under the set's lock. It
// reports done=false when the change cannot be logged: no parity device is
// up (or the last ones failed under the append), or the entry does not fit
// a segment. A
// parity device that misses the entry is recorded stale, as one that
// misses an in-place patch is.
func (m *Mechanism) logChange(ctx context.Context, k mechanism.Key, e *logEntry, roster []member, ops []mechanism.Op) (bool, error) {
	if e.encodedLen() > m.segCap() {
		return false, nil
	}
	var up, down []int
	for _, d := range e.g.parity {
		if !m.env.Writable(d) {
			down = append(down, d)
		} else {
			up = append(up, d)
		}
	}
	if len(up) == 0 {
		return false, nil
	}
	what := "update"
	if e.leave {
		what = "remove"
	}
	fail := func(err error) (bool, error) {
		return true, fmt.Errorf("packing: %s split %d of %q in set %x: %w", what, k.Split, k.User, e.g.set, err)
	}
	if err := m.patchable(&parityFields{geometry: e.g, members: roster}, e.slot); err != nil {
		return fail(err)
	}
	for _, d := range down {
		if err := m.env.MarkStale(ctx, d, setKey(e.g.set)); err != nil {
			return fail(err)
		}
	}
	e.pv = m.ids.Next()
	// The member's new piece overwrites its old one in place. In a set
	// with bad pieces, values live in the parities alone, decoded with
	// this member's old bytes until a parity holds the entry: so the
	// piece is written only once an append landed. In a healthy set the
	// two go together (one round trip): every append failing then costs
	// the old bytes of this member alone, which its failed store may.
	serial := m.badPieces(&parityFields{geometry: e.g, members: roster}, e.slot) > 0
	var wg sync.WaitGroup
	if len(ops) > 0 && !serial {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.env.Do(ctx, ops)
		}()
	}
	errs := m.appendEntry(ctx, up, e)
	wg.Wait()
	if serial && mechanism.Quorum(errOps(up, errs), len(up)-1) == nil {
		m.env.Do(ctx, ops)
	}
	if err := mechanism.Quorum(ops, 0); err != nil {
		// The member's device failing under its write (a hang past its
		// time limit) is a degraded write, as for any mechanism: the
		// entry carries the new bytes into the parities and the miss is
		// recorded (Acknowledge), so the member reads as stale and is
		// rebuilt from its set, provided the set, counting the member,
		// keeps no more than r pieces bad.
		if !errors.Is(err, device.ErrDeviceFailed) || m.patchable(&parityFields{geometry: e.g, members: roster}, -1) != nil {
			return fail(err)
		}
	}
	if err := mechanism.Quorum(errOps(up, errs), len(up)-1); err != nil {
		if mechanism.Quorum(errOps(up, errs), len(up)) == nil {
			// Every parity device failed under the append: the caller
			// moves the member as it does when they were known down
			// (its new piece, if written, is written again).
			return false, nil
		}
		return fail(err)
	}
	for i, err := range errs {
		if err != nil {
			if err := m.env.MarkStale(ctx, up[i], setKey(e.g.set)); err != nil {
				return fail(err)
			}
		}
	}
	if err := m.env.Acknowledge(ctx, ops); err != nil {
		return fail(err)
	}
	return true, nil
}

// errOps wraps the outcomes of appends to devs as ops, for Quorum.
func errOps(devs []int, errs []error) []mechanism.Op {
	ops := make([]mechanism.Op, len(devs))
	for i := range devs {
		ops[i].Dev, ops[i].Err = devs[i], errs[i]
	}
	return ops
}

// xorPad returns a ⊕ b, the shorter one padded with zeros.
func xorPad(a, b []byte) []byte {
	if len(a) < len(b) {
		a, b = b, a
	}
	out := slices.Clone(a)
	for i := range b {
		out[i] ^= b[i]
	}
	return out
}
