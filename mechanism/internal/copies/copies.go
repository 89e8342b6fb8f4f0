// Package copies is the logic shared by Hashing and Replication: a split is
// stored as n identical pieces on the n consecutive devices from its
// primary (n = 1 for Hashing). Identical pieces mean any good copy can be
// written verbatim over a bad one.
//
// RM fields: one byte, the number of copies the piece was written with, so
// that a later configuration with fewer copies still finds and cleans up
// every old copy.
package copies

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/mechanism"
)

// MaxCopies bounds the copies a piece can record.
const MaxCopies = 255

// Mechanism stores n identical copies.
type Mechanism struct {
	env  *mechanism.Env
	rm   format.RM
	name string
	n    int
}

// New returns a mechanism named name with id rm that keeps n copies.
func New(env *mechanism.Env, rm format.RM, name string, n int) (*Mechanism, error) {
	if n < 1 || n > MaxCopies {
		return nil, fmt.Errorf("%s: %d copies, want 1..%d", name, n, MaxCopies)
	}
	if n > env.N() {
		return nil, fmt.Errorf("%s: %d copies need %d devices, the array has %d", name, n, n, env.N())
	}
	if env.Limits().MaxValueLen <= format.HeaderLen+1 {
		return nil, fmt.Errorf("%s: device values of %d bytes cannot hold a header", name, env.Limits().MaxValueLen)
	}
	return &Mechanism{env: env, rm: rm, name: name, n: n}, nil
}

// RM implements mechanism.Mechanism.
func (m *Mechanism) RM() format.RM { return m.rm }

// Name implements mechanism.Mechanism.
func (m *Mechanism) Name() string { return m.name }

// SplitCap implements mechanism.Mechanism.
func (m *Mechanism) SplitCap() int { return m.env.Limits().MaxValueLen - format.HeaderLen - 1 }

// Width implements mechanism.Mechanism.
func (m *Mechanism) Width() int { return m.n }

// Tolerates implements mechanism.Mechanism.
func (m *Mechanism) Tolerates() int { return m.n - 1 }

// copiesOf returns the number of copies a header of ours records, or our
// own n for a header that is not ours.
func (m *Mechanism) copiesOf(h *format.Header) int {
	if h != nil && h.RM == m.rm && len(h.Fields) == 1 && h.Fields[0] > 0 {
		return min(int(h.Fields[0]), m.env.N())
	}
	return m.n
}

func (m *Mechanism) mine(h *format.Header) bool { return h.RM == m.rm && len(h.Fields) == 1 }

// Store implements mechanism.Mechanism.
func (m *Mechanism) Store(ctx context.Context, k mechanism.Key, obj mechanism.Object, value []byte, prev *mechanism.Prev) error {
	h := format.Header{RM: m.rm, Splits: obj.Splits, SplitLen: uint32(len(value)), ObjectLen: obj.ObjectLen,
		Version: obj.Version, Fields: []byte{byte(m.n)}}
	enc := format.Encode(&h, value)
	vals := make([][]byte, m.n)
	for i := range vals {
		vals[i] = enc
	}
	// Degraded: with some copies' devices failed, the copies written are
	// the redundancy left; the others are recorded for resync. With a
	// Precommit (see mechanism.Object), the copies past the primary go
	// first, and it is ready once one of them landed.
	var before func(int) error
	if obj.Precommit != nil {
		before = func(landed int) error { return obj.Precommit(ctx, landed > 0) }
	}
	if err := m.env.WritePrimaryLast(ctx, k.Data(), m.env.Span(k, 0, m.n), vals, m.n-1, before); err != nil {
		return fmt.Errorf("%s: store split %d of %q: %w", m.name, k.Split, k.User, err)
	}
	if prev != nil {
		if old := m.copiesOf(&prev.Header); old > m.n {
			if err := m.env.Delete(ctx, k.Data(), m.env.Span(k, m.n, old), old-m.n); err != nil {
				return fmt.Errorf("%s: drop old copies of split %d of %q: %w", m.name, k.Split, k.User, err)
			}
		}
	}
	return nil
}

// Retrieve implements mechanism.Mechanism. The primary's copy is returned
// when it is good; otherwise every copy is read, the newest good one wins
// and is written over the bad and stale ones.
func (m *Mechanism) Retrieve(ctx context.Context, k mechanism.Key, have []mechanism.Piece) ([]byte, format.Header, error) {
	if p := &have[0]; m.primaryGood(k, p) {
		return p.Value.Payload, p.Value.Header, nil
	}
	best, _, err := m.heal(ctx, k, have)
	if err != nil {
		return nil, format.Header{}, err
	}
	return best.Value.Payload, best.Value.Header, nil
}

// Repair implements mechanism.Mechanism.
func (m *Mechanism) Repair(ctx context.Context, k mechanism.Key, hint *format.Header) (int, error) {
	return m.RepairWith(ctx, k, hint, nil)
}

// primaryGood reports whether p is a good copy of k's on its primary: the
// key's value. A good piece is current: a device that missed writes of the
// key answers ErrStale instead (see mechanism.Env.Do).
func (m *Mechanism) primaryGood(k mechanism.Key, p *mechanism.Piece) bool {
	return p.OK() && p.Dev == k.Primary && m.mine(&p.Value.Header) && (k.Want == 0 || p.Value.Version == k.Want)
}

// heal reads all copies of k (reusing have), picks the primary's when it is
// good (what a read returns) and the newest good one otherwise, and
// rewrites the others. Rewrites that fail are not errors: the value is
// still returned, and the copy stays for a later repair.
func (m *Mechanism) heal(ctx context.Context, k mechanism.Key, have []mechanism.Piece) (*mechanism.Piece, int, error) {
	n := m.n
	for i := range have {
		if have[i].OK() && m.mine(&have[i].Value.Header) {
			n = max(n, m.copiesOf(&have[i].Value.Header))
		}
	}
	pieces := m.env.ReadSpan(ctx, k, 0, n, have)
	var v uint64
	if p := &pieces[0]; !m.primaryGood(k, p) {
		v = mechanism.Newest(k, pieces, m.mine)
	} else {
		// The primary's good copy is what a read returns (the array
		// locates a value by its primary). A newer copy past it is of a
		// store that never reached the primary, so never acknowledged:
		// a store is acknowledged once each copy landed or its miss is
		// on record, and a recorded miss hides the primary's copy as
		// stale. The repair keeps what reads return, so that a value
		// read after a crash does not change later without a write.
		v = p.Value.Version
	}
	if v == 0 {
		if allNotFound(pieces) && k.Want == 0 {
			return nil, 0, fmt.Errorf("%s split %d of key %q: %w", m.name, k.Split, k.User, device.ErrNotFound)
		}
		return nil, 0, mechanism.Lost(k, m.name, pieces, "no good copy")
	}
	i := slices.IndexFunc(pieces, func(p mechanism.Piece) bool { return p.OK() && m.mine(&p.Value.Header) && p.Value.Version == v })
	best := &pieces[i]
	// The copies this version was written with: copies past them belong to
	// an older geometry and are left to Release.
	span := m.copiesOf(&best.Value.Header)
	enc := format.Encode(&best.Value.Header, best.Value.Payload)
	var devs []int
	for j := 0; j < span && j < len(pieces); j++ {
		p := &pieces[j]
		if p.OK() && m.mine(&p.Value.Header) && mechanism.SameBytes(&p.Value, &best.Value) {
			continue
		}
		if errors.Is(p.Err, device.ErrDeviceFailed) || ctx.Err() != nil {
			continue
		}
		devs = append(devs, p.Dev)
	}
	vals := make([][]byte, len(devs))
	for j := range vals {
		vals[j] = enc
	}
	err := m.env.Write(ctx, k.Data(), devs, vals, 0)
	rewritten := len(devs)
	if err != nil {
		rewritten = 0
	}
	return best, rewritten, nil
}

// RestoreFrom writes on dev, which is being rebuilt, the copy of k that
// from holds (read from another device of k's span), when dev is in the
// span of from's version: every copy is the same bytes, so one piece
// read restores another with one write and no read. It reports the
// pieces written (0: dev holds no copy of that version). The caller
// vouches that from is k's newest version (a rebuild's scan, still
// current: no write of k since, and no write of k that from's device
// missed).
func (m *Mechanism) RestoreFrom(ctx context.Context, k mechanism.Key, dev int, from mechanism.Piece) (int, error) {
	if !from.OK() || !m.mine(&from.Value.Header) {
		return 0, fmt.Errorf("%s split %d of key %q: restore from device %d: not a good piece of this mechanism", m.name, k.Split, k.User, from.Dev)
	}
	if m.env.Offset(k, dev) >= m.copiesOf(&from.Value.Header) {
		return 0, nil
	}
	enc := from.Raw // the bytes every copy holds
	if enc == nil {
		enc = format.Encode(&from.Value.Header, from.Value.Payload)
	}
	if err := m.env.Write(ctx, k.Data(), []int{dev}, [][]byte{enc}, 0); err != nil {
		return 0, err
	}
	return 1, nil
}

func allNotFound(pieces []mechanism.Piece) bool {
	for i := range pieces {
		if !errors.Is(pieces[i].Err, device.ErrNotFound) {
			return false
		}
	}
	return true
}

// Release implements mechanism.Mechanism.
func (m *Mechanism) Release(ctx context.Context, k mechanism.Key, prev *mechanism.Prev, keep int) error {
	n := m.copiesOf(&prev.Header)
	if keep >= n {
		return nil
	}
	// Degraded: a device that misses the delete is recorded, and its piece
	// never serves again (see mechanism.Env.Do).
	if err := m.env.Delete(ctx, k.Data(), m.env.Span(k, keep, n), n); err != nil {
		return fmt.Errorf("%s: release split %d of %q: %w", m.name, k.Split, k.User, err)
	}
	return nil
}

// RepairWith is Repair reusing pieces already read (a rebuild's scan of
// the other devices, still current): only the devices of the span that
// have gives no piece for are read.
func (m *Mechanism) RepairWith(ctx context.Context, k mechanism.Key, hint *format.Header, have []mechanism.Piece) (int, error) {
	_, n, err := m.heal(ctx, k, have)
	return n, err
}
