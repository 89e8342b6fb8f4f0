package reliability

import "fmt"

// Range is a cost that depends on the case: Min in the best one, Max in
// the worst.
type Range struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

func one(v float64) Range { return Range{v, v} }

// String prints "3" or "1–4".
func (r Range) String() string {
	if r.Min == r.Max {
		return fmt.Sprintf("%.3g", r.Min)
	}
	return fmt.Sprintf("%.3g–%.3g", r.Min, r.Max)
}

// Costs are the paper's Table 4 for one mechanism in standalone mode: the
// device operations one user operation issues, and what that leaves of
// the aggregate throughput of the array's devices. Hybrid mode adds one
// device read to every store (the read before write), and so does Packing
// in both modes. Additional reads of read-modify-writes are not shown, as
// in Table 4.
type Costs struct {
	Mechanism Mechanism `json:"mechanism"`
	Devices   int       `json:"devices"`
	// StoreWrites are device writes per store of a new key.
	StoreWrites Range `json:"store_writes"`
	// UpdateWrites are device writes per store over an existing key.
	UpdateWrites Range `json:"update_writes"`
	// RetrieveReads are device reads per retrieve of a healthy value.
	RetrieveReads Range `json:"retrieve_reads"`
	// WriteThroughput and ReadThroughput are user stores and retrieves
	// per second in units of one device's operations per second, when the
	// devices' operation rate is the bottleneck: Devices / cost.
	WriteThroughput Range `json:"write_throughput"`
	ReadThroughput  Range `json:"read_throughput"`
	// SpaceUtilization is user bytes per device byte (1/SpaceOverhead,
	// metadata ignored).
	SpaceUtilization float64 `json:"space_utilization"`
}

// Costs returns Table 4's row for m over devices devices:
//
//	             store writes   update writes   retrieve reads   space
//	Hashing      1              1               1                1
//	Replication  n              n               1                1/n
//	Splitting    k+r            k+r             1 (partial)..k   k/(k+r)
//	Packing      (k+r)/k..1+r   1+r..k+r        1                k/(k+r)
//
// Packing's insert costs 1 + r/ck writes for a set of ck members, from a
// full set (ck = k) to a set of one; an update patches the r parities
// (1+r writes, like RAID 6's read-modify-write) or, as the paper's
// implementation does, rewrites the whole group (k+r). Table 4 leaves out
// the paper's per-object metadata writes (r per insert); kvarray has none,
// it keeps the membership in the parity headers.
func (m Mechanism) Costs(devices int) (Costs, error) {
	if err := m.Validate(); err != nil {
		return Costs{}, err
	}
	if devices < m.SetSize() {
		return Costs{}, fmt.Errorf("%w: %s needs %d devices, the array has %d", ErrParams, m, m.SetSize(), devices)
	}
	c := Costs{Mechanism: m, Devices: devices, SpaceUtilization: 1 / m.SpaceOverhead(1, 0)}
	k, r := float64(m.K), float64(m.R)
	switch m.Name {
	case Hashing:
		c.StoreWrites, c.UpdateWrites, c.RetrieveReads = one(1), one(1), one(1)
	case Replication:
		n := float64(m.Copies)
		c.StoreWrites, c.UpdateWrites, c.RetrieveReads = one(n), one(n), one(1)
	case Splitting:
		c.StoreWrites, c.UpdateWrites, c.RetrieveReads = one(k+r), one(k+r), Range{1, k}
	case Packing:
		c.StoreWrites = Range{(k + r) / k, 1 + r}
		c.UpdateWrites = Range{1 + r, k + r}
		c.RetrieveReads = one(1)
	}
	n := float64(devices)
	c.WriteThroughput = Range{n / c.StoreWrites.Max, n / c.StoreWrites.Min}
	c.ReadThroughput = Range{n / c.RetrieveReads.Max, n / c.RetrieveReads.Min}
	return c, nil
}
