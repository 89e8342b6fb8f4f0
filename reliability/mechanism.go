package reliability

import (
	"fmt"
	"math"
)

// Mechanism names, as in kvarray's configs.
const (
	Hashing     = "hashing"
	Replication = "replication"
	Splitting   = "splitting"
	Packing     = "packing"
)

// Mechanism is the geometry of one reliability mechanism.
type Mechanism struct {
	Name   string `json:"name"`
	Copies int    `json:"copies,omitempty"` // Replication: copies n
	K      int    `json:"k,omitempty"`      // Splitting, Packing: data objects
	R      int    `json:"r,omitempty"`      // Splitting, Packing: parity objects
}

// NewHashing is Hashing: one copy, no redundancy (RAID 0).
func NewHashing() Mechanism { return Mechanism{Name: Hashing} }

// NewReplication is Replication with n copies (RAID 1).
func NewReplication(n int) Mechanism { return Mechanism{Name: Replication, Copies: n} }

// NewSplitting is Splitting: each object cut into k shards plus r parities.
func NewSplitting(k, r int) Mechanism { return Mechanism{Name: Splitting, K: k, R: r} }

// NewPacking is Packing: k whole objects from k devices plus r parities.
func NewPacking(k, r int) Mechanism { return Mechanism{Name: Packing, K: k, R: r} }

// Validate checks the geometry.
func (m Mechanism) Validate() error {
	switch m.Name {
	case Hashing:
		return nil
	case Replication:
		if m.Copies < 1 {
			return fmt.Errorf("%w: replication with %d copies (want ≥ 1)", ErrParams, m.Copies)
		}
		return nil
	case Splitting, Packing:
		if m.K < 1 || m.R < 0 {
			return fmt.Errorf("%w: %s with k=%d r=%d (want k ≥ 1, r ≥ 0)", ErrParams, m.Name, m.K, m.R)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown mechanism %q (want %s, %s, %s or %s)", ErrParams, m.Name, Hashing, Replication, Splitting, Packing)
}

// String names the mechanism with its geometry: "replication(3)",
// "splitting(4+2)".
func (m Mechanism) String() string {
	switch m.Name {
	case Replication:
		return fmt.Sprintf("%s(%d)", m.Name, m.Copies)
	case Splitting, Packing:
		return fmt.Sprintf("%s(%d+%d)", m.Name, m.K, m.R)
	}
	return m.Name
}

// SetSize is n, the objects in one reliability set, each on its own
// device: 1 for Hashing, the copies for Replication, k+r for Splitting
// and Packing.
func (m Mechanism) SetSize() int {
	switch m.Name {
	case Replication:
		return m.Copies
	case Splitting, Packing:
		return m.K + m.R
	}
	return 1
}

// LossAt is f, the objects of a set whose loss loses data: n for
// Replication (and 1 for Hashing), r+1 for Splitting and Packing.
func (m Mechanism) LossAt() int {
	switch m.Name {
	case Replication:
		return m.Copies
	case Splitting, Packing:
		return m.R + 1
	}
	return 1
}

// Chain is the Markov model of one of m's reliability sets.
func (m Mechanism) Chain(lambda, mu float64) Chain {
	return Chain{N: m.SetSize(), F: m.LossAt(), Lambda: lambda, Mu: mu}
}

// PieceSize is the bytes one object of a set takes on its device, for
// user objects of object bytes and packing metadata of metadata bytes per
// object: O for Hashing and Replication, O/k for Splitting, O+M for
// Packing (each member and each parity, as the paper counts it).
func (m Mechanism) PieceSize(object, metadata float64) float64 {
	switch m.Name {
	case Splitting:
		return object / float64(m.K)
	case Packing:
		return object + metadata
	}
	return object
}

// Sets is N_RS, the number of reliability sets that fill capacity bytes:
//
//	Hashing      C / O
//	Replication  C / (n·O)
//	Splitting    C / (n·O/k),     n = k+r
//	Packing      C / (n·(O+M)),   n = k+r
func (m Mechanism) Sets(capacity, object, metadata float64) float64 {
	return capacity / (float64(m.SetSize()) * m.PieceSize(object, metadata))
}

// UserObjectsPerSet is how many user objects one set protects: k for
// Packing, 1 otherwise.
func (m Mechanism) UserObjectsPerSet() int {
	if m.Name == Packing {
		return m.K
	}
	return 1
}

// SpaceOverhead is device bytes per user byte (1 = none): 1 for Hashing,
// n for Replication, (k+r)/k for Splitting, (k+r)/k·(1+M/O) for Packing.
// Per-piece headers are not counted, as in the paper's Table 4.
func (m Mechanism) SpaceOverhead(object, metadata float64) float64 {
	set := float64(m.SetSize()) * m.PieceSize(object, metadata)
	return set / (float64(m.UserObjectsPerSet()) * object)
}

// System is what the model needs besides the mechanism.
type System struct {
	// MTTF is a device's mean time to failure; λ = 1/MTTF.
	MTTF float64 `json:"mttf"`
	// Mu is the repair rate of one lost object, μ = 1/MTTR, per the unit
	// of MTTF.
	Mu float64 `json:"mu"`
	// Capacity is C, the bytes the reliability sets fill (the paper counts
	// valid sets, not raw capacity: an emptier array is more reliable).
	Capacity float64 `json:"capacity_bytes"`
	// Object is O, the mean user object size in bytes.
	Object float64 `json:"object_bytes"`
	// Metadata is M, Packing's metadata bytes per object.
	Metadata float64 `json:"metadata_bytes"`
}

func (s System) check() error {
	for _, f := range []struct {
		name string
		v    float64
		zero bool // zero allowed
	}{{"MTTF", s.MTTF, false}, {"repair rate", s.Mu, true}, {"capacity", s.Capacity, false}, {"object size", s.Object, false}, {"metadata size", s.Metadata, true}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 || (f.v == 0 && !f.zero) {
			return fmt.Errorf("%w: %s %v", ErrParams, f.name, f.v)
		}
	}
	return nil
}

// Result is the model's answer for one mechanism.
type Result struct {
	Mechanism Mechanism `json:"mechanism"`
	SetSize   int       `json:"set_size"` // n
	LossAt    int       `json:"loss_at"`  // f
	// SetMTTDL is the exact MTTDL of one set, SetMTTDLApprox equation 2's.
	SetMTTDL       float64 `json:"set_mttdl"`
	SetMTTDLApprox float64 `json:"set_mttdl_approx"`
	Sets           float64 `json:"sets"` // N_RS
	// MTTDL = SetMTTDL / Sets (equation 1), MTTDLApprox likewise from the
	// approximation.
	MTTDL         float64 `json:"mttdl"`
	MTTDLApprox   float64 `json:"mttdl_approx"`
	SpaceOverhead float64 `json:"space_overhead"`
}

// Evaluate computes m's MTTDL (equations 1 and 2) and space overhead in s.
// Times are in the unit of s.MTTF.
func Evaluate(m Mechanism, s System) (Result, error) {
	if err := m.Validate(); err != nil {
		return Result{}, err
	}
	if err := s.check(); err != nil {
		return Result{}, err
	}
	c := m.Chain(1/s.MTTF, s.Mu)
	exact, err := c.MTTDL()
	if err != nil {
		return Result{}, err
	}
	approx, err := c.Approx()
	if err != nil {
		return Result{}, err
	}
	sets := m.Sets(s.Capacity, s.Object, s.Metadata)
	return Result{
		Mechanism:      m,
		SetSize:        c.N,
		LossAt:         c.F,
		SetMTTDL:       exact,
		SetMTTDLApprox: approx,
		Sets:           sets,
		MTTDL:          exact / sets,
		MTTDLApprox:    approx / sets,
		SpaceOverhead:  m.SpaceOverhead(s.Object, s.Metadata),
	}, nil
}
