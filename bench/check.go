package bench

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Check verifies a report's structure and its consistency with the
// mechanisms' geometry (Options.Copies, K, R): every measurement asked
// for is there once; every rate, latency and ratio is positive where it
// must be; and each mechanism issued the device operations per user
// operation that its layout implies (Replication writes Copies pieces per
// store, Splitting K+R, Hashing and None 1; hybrid mode adds the read
// before write; Packing writes between (K+R)/K and 1+R). It returns every
// problem found, joined.
func (rep *Report) Check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	o := rep.Options
	if rep.Version != ReportVersion {
		bad("version %d, want %d", rep.Version, ReportVersion)
	}
	if rep.Started.IsZero() || rep.Host.CPUs < 1 || rep.Backend == "" || rep.Devices == "" {
		bad("header incomplete: started %v, host %+v, backend %q, devices %q", rep.Started, rep.Host, rep.Backend, rep.Devices)
	}
	// Every measurement asked for, once.
	r := &runner{o: o}
	want := map[string]int{}
	key := func(w, size, mech, mode string) string { return w + " " + size + " " + mech + "/" + mode }
	for _, w := range []string{Store, Retrieve, Update, Delete} {
		if !slices.Contains(o.Workloads, w) {
			continue
		}
		for _, s := range o.Sizes {
			for _, t := range r.sizedTargets() {
				want[key(w, sizeLabel(s), t.mech, t.mode)] = 0
			}
		}
	}
	if slices.Contains(o.Workloads, Mixed) {
		for _, w := range []string{MixedStore, MixedRetrieve} {
			for _, t := range r.mixedTargets() {
				want[key(w, "mix", t.mech, t.mode)] = 0
			}
		}
	}
	if slices.Contains(o.Workloads, Range) {
		for _, w := range []string{RangeRead, RangeWrite} {
			for _, t := range r.sizedTargets() {
				want[key(w, o.rangeLabel(), t.mech, t.mode)] = 0
			}
		}
	}
	for _, res := range rep.Results {
		k := key(res.Workload, res.SizeLabel, res.Mechanism, res.Mode)
		n, ok := want[k]
		if !ok {
			bad("%s: not asked for", k)
			continue
		}
		want[k] = n + 1
		if err := res.check(o); err != nil {
			bad("%s: %w", k, err)
		}
	}
	for k, n := range want {
		if n != 1 {
			bad("%s: %d results, want 1", k, n)
		}
	}
	for _, rb := range rep.Rebuild {
		if rb.Keys < 1 || rb.Rebuilt < 1 || rb.Pieces < rb.Rebuilt || !(rb.Seconds > 0) || !(rb.KeysPerSec > 0) || !(rb.MiBPerSec > 0) {
			bad("rebuild %s: %+v", rb.Mechanism, rb)
		}
	}
	return errors.Join(errs...)
}

// span is an expected range of a per-operation count.
type span struct{ lo, hi float64 }

func exactly(v float64) span { return span{v, v} }

func (s span) holds(v float64) bool { return v >= s.lo-0.01 && v <= s.hi+0.01 }

func (s span) String() string {
	if s.lo == s.hi {
		return fmt.Sprintf("%g", s.lo)
	}
	return fmt.Sprintf("%g..%g", s.lo, s.hi)
}

// headerSlack bounds the bytes a piece carries besides user bytes (header,
// RM fields, key suffix, shard rounding), for the byte ratios.
const headerSlack = 96

func (res *Result) check(o Options) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	pos := func(name string, v float64) {
		if !(v > 0) || math.IsInf(v, 0) {
			bad("%s = %v, want > 0", name, v)
		}
	}
	pos("ops", float64(res.Ops))
	pos("seconds", res.Seconds)
	pos("ops/s", res.OpsPerSec)
	pos("% of None", res.PctOfNone)
	pos("storage overhead", res.StorageOverhead)
	pos("p50", res.Latency.P50)
	pos("mean latency", res.Latency.Mean)
	if l := res.Latency; !(l.P50 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		bad("latencies out of order: %+v", l)
	}
	if res.Seconds > 0 && math.Abs(res.OpsPerSec-float64(res.Ops)/res.Seconds) > 1e-6*res.OpsPerSec {
		bad("ops/s %v is not ops %d / seconds %v", res.OpsPerSec, res.Ops, res.Seconds)
	}
	if res.Mechanism == None && math.Abs(res.PctOfNone-100) > 1e-9 {
		bad("None at %v%% of itself", res.PctOfNone)
	}
	if res.Workload == Delete {
		if res.UserBytes != 0 || res.MiBPerSec != 0 {
			bad("delete moved %d user bytes", res.UserBytes)
		}
	} else {
		pos("user bytes", float64(res.UserBytes))
		pos("MiB/s", res.MiBPerSec)
	}

	if res.Workload == RangeRead || res.Workload == RangeWrite {
		res.checkRange(o, bad)
		return errors.Join(errs...)
	}
	k, r, n := float64(o.K), float64(o.R), float64(o.Copies)
	size := float64(res.Size)
	if size == 0 {
		size = math.MaxFloat64
		for _, p := range o.Mix {
			size = min(size, float64(p.Size))
		}
	}
	hybrid := 0.0
	if res.Mode == ModeHybrid {
		hybrid = 1
	}
	// Pieces written per store (also the space ratio), read per retrieve.
	var writes, reads, space span
	switch res.Mechanism {
	case None, "hashing":
		writes, reads, space = exactly(1), exactly(1), exactly(1)
	case "replication":
		writes, reads, space = exactly(n), exactly(1), exactly(n)
	case "splitting":
		writes, reads, space = exactly(k+r), exactly(k), exactly((k+r)/k)
		hybrid = 1 // splitting reads before every write: an overwrite uses the other bank
	case "packing":
		writes, reads, space = span{(k + r) / k, 1 + r}, exactly(1), span{(k + r) / k, 1 + r}
		hybrid = 1 // packing reads before every write
	case Tiny:
		// A tiny write is its bucket's Packing update: the member and r
		// delta-log writes, or a move to a new set (k + r pieces when it
		// fills one); a value over TinyMax is Replication's n copies.
		// Before it, the bucket is read, and for a new key whether a
		// value of the key's own exists. A tiny read is one bucket read
		// (a larger value: the bucket, then a copy). Space is between
		// Packing's and Replication's: below Packing's for values much
		// smaller than a piece header.
		writes, reads, space = span{1, max(n, k+r, 1+r)}, span{1, 2}, span{1, n}
		hybrid = 1
	case Thresholds:
		writes, reads, space = span{(k + r) / k, max(n, k+r, 1+r)}, span{1, k}, span{(k + r) / k, max(n, 1+r)}
		hybrid = 1
	default:
		bad("unknown mechanism %q", res.Mechanism)
		return errors.Join(errs...)
	}
	if res.Mechanism == Tiny {
		// The bucket read and the read before its update, the lookup of
		// a value of the key's own, and reads of a set being left.
		hybrid = 0
		reads = span{1, 2 + k + r}
		if res.Workload == MixedStore {
			// Its values are over TinyMax: no bucket holds anything,
			// and the metadata cache, once a bucket was read, knows
			// it has no value, so nothing is read.
			reads.lo = 0
		}
	}
	if res.Workload == Update && res.Mechanism == "packing" {
		// An update writes the member and logs its delta in r segments
		// shared with the updates in flight (1 + r/batch); one that
		// cannot be logged patches the r parities in place, after
		// reading them. The read before write is the old member.
		writes = span{1, k + r}
		hybrid = 0
		reads = span{1, 1 + k + r}
	}
	p := res.PerOp
	slack := float64(headerSlack)
	if res.Mechanism == "packing" || res.Mechanism == Thresholds {
		slack += 64 * k // parities carry the set's roster: a key per member
	}
	ratio := func(name string, got float64, want span, pieces float64) {
		if res.Mechanism == Tiny && name != "storage overhead" {
			return // a tiny read or write moves its whole bucket, by design
		}
		hi := want.hi*1.02 + pieces*slack/size
		if got < want.lo*0.999 || got > hi {
			bad("%s = %.4f, want %s (+ headers: ≤ %.4f)", name, got, want, hi)
		}
	}
	switch res.Workload {
	case Store, Update, MixedStore:
		if !writes.holds(p.Writes) {
			bad("device writes per %s = %.3f, want %s", res.Workload, p.Writes, writes)
		}
		// Updates: the keys were stored just before, the array's
		// metadata cache knows what each holds and spares the read.
		// Stores of new keys: the cache of an array created empty is
		// complete (a key it never saw has no value) until it evicts an
		// entry, after which a new key costs its read.
		wantReads := span{0, hybrid}
		if res.Workload == Update && res.Mechanism == "packing" || res.Mechanism == Tiny {
			wantReads = reads
		}
		if !wantReads.holds(p.Reads) {
			bad("device reads per %s = %.3f, want %s", res.Workload, p.Reads, wantReads)
		}
		ratio("write amplification", res.WriteAmp, space, p.Writes)
	case Retrieve, MixedRetrieve:
		if res.Mechanism == Tiny {
			reads = span{1, 2}
		}
		if p.Writes != 0 || !reads.holds(p.Reads) {
			bad("device writes and reads per retrieve = %.3f, %.3f, want 0, %s", p.Writes, p.Reads, reads)
		}
		ratio("read amplification", res.ReadAmp, exactly(1), p.Reads)
	case Delete:
		deletes := writes
		switch res.Mechanism {
		case "packing":
			deletes = span{1, 1 + r}
		case Tiny:
			// A bucket update, which may delete a set's pieces or log
			// segments; a larger value's n copies.
			deletes = span{0, max(n, 1+r)}
		case "splitting", Thresholds:
			// Both banks of the shards past the primary (see
			// mechanism.Banked).
			deletes.hi = 2*(k+r) - 1
		}
		if !deletes.holds(p.Deletes) {
			bad("device deletes per delete = %.3f, want %s", p.Deletes, deletes)
		}
		if res.Mechanism == None && p.Reads != 0 {
			bad("None read %.3f times per delete", p.Reads)
		}
		// The read that finds the mechanism, unless the metadata cache
		// knows it (the keys were stored just before); Packing always
		// reads the member it removes (its parities need its bytes).
		least := 0.0
		if res.Mechanism == "packing" {
			least = 1
		}
		if res.Mechanism != None && (p.Reads < least-0.01 || p.Reads > 2+k+r) {
			bad("device reads per delete = %.3f, want %g..%g", p.Reads, least, 2+k+r)
		}
	}
	ratio("storage overhead", res.StorageOverhead, space, writes.hi)
	return errors.Join(errs...)
}

// checkRange checks a range workload's result: a range read reads the
// primary piece of the value's split 0 (its header) and the piece that
// covers the range (a copy, a member), one of them when they are the
// same, and writes nothing; None reads its one chunk. Splitting reads
// parts of pieces instead: split 0's header, the covering blocks of a data
// shard (or two) and their table entries, and the headers of the split's
// other shards (that the write is whole), which makes at most 2·(2 + k +
// r) device reads and, for ranges of a block or more, at most two bytes
// read per byte wanted (the target). A range write reads and
// writes at least once (it reads, modifies and writes the value; None its
// chunk).
func (res *Result) checkRange(o Options, bad func(format string, args ...any)) {
	p := res.PerOp
	reads := span{1, 2}
	switch res.Mechanism {
	case None:
		reads = exactly(1)
	case Tiny:
		reads = span{1, 3} // the key's bucket first
	case "splitting":
		reads = span{1, float64(2 * (2 + o.K + o.R))}
		if res.Workload == RangeRead && o.RangeIO >= 4096 && res.ReadAmp > 2 {
			bad("read amplification %.3f, want at most 2", res.ReadAmp)
		}
	}
	switch res.Workload {
	case RangeRead:
		if p.Writes != 0 || !reads.holds(p.Reads) {
			bad("device writes and reads per range read = %.3f, %.3f, want 0, %s", p.Writes, p.Reads, reads)
		}
		if !(res.ReadAmp >= 1) {
			bad("read amplification %.3f, want ≥ 1", res.ReadAmp)
		}
	case RangeWrite:
		if p.Writes < 1-0.01 || p.Reads < 1-0.01 || res.Mechanism == None && (!exactly(1).holds(p.Writes) || !exactly(1).holds(p.Reads)) {
			bad("device writes and reads per range write = %.3f, %.3f, want at least 1 each (None: 1 each)", p.Writes, p.Reads)
		}
		if !(res.WriteAmp >= 1) {
			bad("write amplification %.3f, want ≥ 1", res.WriteAmp)
		}
	}
}
