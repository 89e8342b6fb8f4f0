package array

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/format"
	"github.com/kvarray/kvarray/internal/merge"
	"github.com/kvarray/kvarray/mechanism"
)

// Ordered listing. Every device iterates its internal keys in byte order
// (or is sorted first, see sortedScan), and the split-0 data key of user
// key u is u ‖ 0x00 0x00 0x00, which sorts as u does among user keys: so
// an ordered merge of the devices' split-0 data keys is the user keys in
// ascending order, and a listing resumes after any key with one seek per
// device (device.Cursor), or none when the page before left its cursors
// (cursors.go).

// scanEntry is one internal key a device holds, with its value when the
// scan asked for values and the device hands them out.
type scanEntry = merge.Entry[scanned]

// scanned is what a device's scan gave for one key.
type scanned struct {
	dev   int
	value []byte // nil: not asked for, or the device does not hand values out
	// unread: the device holds the key and could have handed out its
	// value, which was not asked for.
	unread bool
}

// sortedScan yields device d's internal keys that start with prefix, are
// not less than start and that want hands out, in ascending order, with
// their values when values is true, where want says device.KeyValue and
// d is a device.Scanner (a device that is not hands out no values, which
// callers treat as unknown; unread says whether a nil value was not
// asked for). Entries are the caller's to keep. A device that does not
// iterate in order has its matching keys collected and sorted first:
// O(keys) memory and work for it alone. The first error is left in
// *errp. want may run on another goroutine than the iteration's.
func (a *Array) sortedScan(ctx context.Context, d int, prefix, start []byte, values bool, want func([]byte, device.Tag) device.Want, errp *error) iter.Seq[scanEntry] {
	dev := a.env.Device(d)
	return func(yield func(scanEntry) bool) {
		ordered, err := device.IsOrdered(ctx, dev)
		if err != nil {
			*errp = fmt.Errorf("device %d (%s): %w", d, a.env.Name(d), err)
			return
		}
		if _, ok := dev.(device.Scanner); !ok {
			values = false
		}
		if !ordered {
			keys, err := device.SortedKeys(ctx, dev, prefix, start, func(k []byte) bool { return want(k, 0) != device.Skip })
			if err != nil {
				*errp = fmt.Errorf("device %d (%s): %w", d, a.env.Name(d), err)
				return
			}
			for _, k := range keys {
				if !yield(scanEntry{Key: k, Val: scanned{dev: d}}) {
					return
				}
			}
			return
		}
		stopped := errors.New("stopped")
		each := func(k, v []byte) error {
			e := scanEntry{Key: slices.Clone(k), Val: scanned{dev: d, value: slices.Clone(v)}}
			format.Unkey(e.Key, e.Val.value, 0) // as Env's reads do
			e.Val.unread = v == nil && values
			if !yield(e) {
				return stopped
			}
			return nil
		}
		if values {
			// Only the values want asks for are read.
			err = device.ScanFiltered(ctx, dev, prefix, start, want, each)
		} else {
			err = device.Scan(ctx, dev, prefix, start, false, func(k, v []byte) error {
				if want(k, 0) == device.Skip {
					return nil
				}
				return each(k, nil)
			})
		}
		if err != nil && !errors.Is(err, stopped) {
			*errp = fmt.Errorf("device %d (%s): %w", d, a.env.Name(d), err)
		}
	}
}

// ErrBadCount: a listing page size that is not positive.
var ErrBadCount = errors.New("count must be positive")

// KeysFrom returns, in ascending order, at most count user keys that start
// with prefix and come after after (nil: from the first), and the cursor
// to pass as after for the next page: the last key returned, or nil when
// the listing is complete. It lists exactly what Keys lists, a page at a
// time: a key present for the whole listing is returned exactly once, a
// key stored or deleted meanwhile may or may not be (the pages of a
// listing share device cursors that see the devices as of its first page,
// refreshed every second: cursors.go; with Fresh, a page sees every key
// stored before the call). The work of a call is proportional to count
// (one seek per device, or none, then the keys up to the page's end),
// except on devices that do not iterate in order or cannot seek (Redis
// devices: their keys are walked on every call), and while a device
// cannot list its keys (failed or being rebuilt), when the Packing
// members only it held are found through their sets on every call.
func (a *Array) KeysFrom(ctx context.Context, prefix, after []byte, count int, opts ...ListOption) ([][]byte, []byte, error) {
	var o listOptions
	for _, opt := range opts {
		opt(&o)
	}
	if count <= 0 {
		return nil, nil, fmt.Errorf("keys from %s: count %d: %w", shown(after), count, ErrBadCount)
	}
	if err := a.begin(); err != nil {
		return nil, nil, err
	}
	defer a.end()
	for range a.env.N() + 1 {
		keys, next, failed, gen, err := a.keysFrom(ctx, prefix, after, count, o.fresh)
		if err == nil && failed < 0 {
			err = a.listable()
		}
		if failed < 0 || err != nil {
			if err != nil {
				return nil, nil, err
			}
			return keys, next, nil
		}
		// Its keys are listed by the devices holding their other pieces,
		// once it is marked failed.
		a.env.MarkFailed(failed, gen)
	}
	return nil, nil, fmt.Errorf("keys from %s: devices keep failing: %w", shown(after), device.ErrDeviceFailed)
}

// ListOption configures KeysFrom.
type ListOption func(*listOptions)

type listOptions struct{ fresh bool }

// Fresh makes a KeysFrom page list from device cursors of its own, neither
// kept from the page before nor kept for the next: it sees every key
// stored before the call, which a count kept up by the writes beyond a
// listing's position needs (keyspace's recount), at the cost of a seek
// per device.
func Fresh() ListOption { return func(o *listOptions) { o.fresh = true } }

// keysFrom is one attempt at KeysFrom (fresh: see Fresh). failed ≥ 0
// names a device that failed during the listing (the device object of
// generation gen) and was not yet marked so: the caller marks it and
// lists again.
func (a *Array) keysFrom(ctx context.Context, prefix, after []byte, count int, fresh bool) (keys [][]byte, next []byte, failed int, gen mechanism.Gen, err error) {
	n := a.env.N()
	var start []byte
	if after != nil {
		// The least internal key past after's split-0 data key.
		start = append(format.Key(after, 0, format.KindData), 0)
	}
	// Keys only a device that cannot list them held: all of them, each
	// call, and only while some device is not healthy.
	more, err := a.unlistedKeys(ctx, prefix)
	if err != nil {
		return nil, nil, -1, mechanism.Gen{}, err
	}
	more = slices.DeleteFunc(more, a.isBucket)
	var tiny [][]byte
	if a.tiny != nil {
		// From the listing index (tinyindex.go): a page's worth, and
		// one more to tell whether the listing goes on.
		if tiny, err = a.tinyKeysAfter(ctx, prefix, after, count+1); err != nil {
			return nil, nil, -1, mechanism.Gen{}, err
		}
	}
	// The devices' cursors: those the page before left (cursors.go), or
	// new ones seeked to start.
	var l *listing
	if after != nil && !fresh {
		l = a.takeListing(prefix, after)
	}
	if l == nil {
		l = a.openListing(ctx, prefix, start)
	}
	// Who answers for a key is decided by the states the listing's
	// cursors were opened in, not by the states of the moment: a device
	// that comes back during the page had no cursor opened (it listed
	// nothing), so the others must go on listing its keys.
	keeps := make([]func([]byte) bool, n)
	for i := range keeps {
		keeps[i] = func(k []byte) bool {
			user, split, kind, err := format.ParseKey(k)
			return err == nil && format.HoldsPiece(kind) && split == 0 && !a.isBucket(user) && answersIn(l.states, a.primary(user, 0), i) && !a.stalePiece(i, k)
		}
	}
	// Of each device, its first limit user keys past after, merged. With
	// limit count+1 the page's count keys are among them (a device's keys
	// before one of the page's are in the page too), and one more tells
	// whether the listing goes on. A smaller limit reads less: the page
	// is then exact up to the least last key of the devices it cut short
	// (bound), and collected again whole when that leaves it short (the
	// streams keep what they read, so nothing is read twice).
	collect := func(limit int) (entries []scanEntry, bound []byte) {
		for i := range l.devs {
			s := &l.devs[i]
			users := 0
			var last []byte
			for j := 0; ; j++ {
				e, ok := s.at(ctx, j, keeps[i])
				if !ok {
					break
				}
				user, _, _, _ := format.ParseKey(e.Key)
				if after != nil && bytes.Compare(user, after) <= 0 {
					continue // after's bank key: it sorts past start
				}
				if !bytes.Equal(user, last) {
					if users++; users > limit {
						if bound == nil || bytes.Compare(last, bound) < 0 {
							bound = last
						}
						break
					}
					last = user
				}
				entries = append(entries, e)
			}
		}
		for _, k := range more {
			if after == nil || bytes.Compare(k, after) > 0 {
				entries = append(entries, scanEntry{Key: format.Key(k, 0, format.KindData), Val: scanned{dev: -1}})
			}
		}
		for _, k := range tiny {
			entries = append(entries, scanEntry{Key: format.Key(k, 0, format.KindData), Val: scanned{dev: -1}})
		}
		slices.SortFunc(entries, func(x, y scanEntry) int { return bytes.Compare(x.Key, y.Key) })
		return entries, bound
	}
	// About twice a device's share of the page.
	limit := min(count+1, 2*((count+n-1)/n)+1)
	complete := true
	for {
		entries, bound := collect(limit)
		keys, complete = keys[:0], true
		for _, m := range entries {
			user, _, _, _ := format.ParseKey(m.Key)
			if len(keys) > 0 && bytes.Equal(keys[len(keys)-1], user) || after != nil && bytes.Compare(user, after) <= 0 {
				// Its data key and its bank key, from two devices (the bank
				// key sorts after the data key: it may even come after
				// after's).
				continue
			}
			if bound != nil && bytes.Compare(user, bound) > 0 {
				break // past what every device was read to
			}
			if len(keys) == count {
				complete = false
				break
			}
			keys = append(keys, user)
		}
		if bound == nil || !complete || limit == count+1 {
			break
		}
		limit = count + 1
	}
	for i := range l.devs {
		err := l.devs[i].err
		if err != nil {
			err = fmt.Errorf("device %d (%s): %w", i, a.env.Name(i), err)
		}
		switch {
		case err == nil:
		case errors.Is(err, device.ErrDeviceFailed) && a.env.Answering(i):
			l.close()
			return nil, nil, i, l.gens[i], nil
		case errors.Is(err, device.ErrDeviceFailed):
		default:
			l.close()
			return nil, nil, -1, mechanism.Gen{}, fmt.Errorf("keys from %s: %w", shown(after), err)
		}
	}
	if err := ctx.Err(); err != nil {
		l.close()
		return nil, nil, -1, mechanism.Gen{}, err
	}
	if complete || fresh {
		l.close()
		if complete {
			return keys, nil, -1, mechanism.Gen{}, nil
		}
		return keys, keys[len(keys)-1], -1, mechanism.Gen{}, nil
	}
	next = keys[len(keys)-1]
	for i := range l.devs {
		s := &l.devs[i]
		// What the next page resumes after is passed.
		j := 0
		for j < len(s.buf) {
			if user, _, _, _ := format.ParseKey(s.buf[j].Key); bytes.Compare(user, next) > 0 {
				break
			}
			j++
		}
		s.buf = slices.Delete(s.buf, 0, j)
	}
	a.putListing(prefix, next, l)
	return keys, next, -1, mechanism.Gen{}, nil
}

// listable fails with ErrUnavailable when more devices cannot list their
// keys (failed, slow, or being rebuilt) than any configured mechanism
// tolerates: a key of any mechanism may then have all of its pieces on
// them, and a listing would leave it out without a word. A collection's
// elements are listed so (keyspace), and a listing short of an element
// answered for its collection (an empty pop of a set that has members,
// HGETALL without a field that is there). Within the tolerance of some
// mechanism the listing goes on: a key of a mechanism that tolerates fewer
// is unreadable then anyway (and left out, as a read would find nothing).
// So does an array no mechanism protects (Hashing alone): it loses what a
// failed device held, listings included, by its configuration.
func (a *Array) listable() error {
	down := 0
	for i := 0; i < a.env.N(); i++ {
		switch a.env.State(i) {
		case mechanism.Failed, mechanism.Rebuilding, mechanism.Slow:
			down++
		}
	}
	most := 0
	for _, m := range a.mechs {
		most = max(most, m.Tolerates())
	}
	if most > 0 && down > most {
		return fmt.Errorf("keys: %d devices cannot list their keys, more than any mechanism tolerates (%d): the listing would be incomplete: %w", down, most, ErrUnavailable)
	}
	return nil
}

// stalePiece reports whether device i's record lists internal key k: the
// piece it holds there is older than the key's last write (a delete
// included), so it is not listed; the key's current version, if any, is
// listed from the record (missedListed).
func (a *Array) stalePiece(i int, k []byte) bool {
	return a.env.MissedCount(i) > 0 && a.env.Missing(i, k)
}

// answersFor reports whether device i lists user key u: it is the key's
// primary, or the primary cannot answer for itself (see Keys).
func (a *Array) answersFor(i int, u []byte) bool {
	p := a.primary(u, 0)
	return p == i || a.env.State(p) != mechanism.Healthy
}

// answersIn is answersFor for a key of primary p under states.
func answersIn(states []mechanism.State, p, i int) bool {
	return p == i || states[p] != mechanism.Healthy
}
