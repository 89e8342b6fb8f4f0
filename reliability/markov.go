// Package reliability is KVMD's reliability model (the paper's section on
// reliability analysis): the mean time to data loss (MTTDL) of one
// reliability set from a Markov chain, the number of reliability sets each
// mechanism makes of a device's capacity, the system's MTTDL (equation 1),
// the space overhead, and the read and write costs per user operation of
// the paper's Table 4. Everything is a pure function of its arguments: no
// I/O, no clocks, no state.
//
// Units: the functions never convert time. Give the failure rate λ and the
// repair rate μ per the same unit (per hour, say) and the MTTDL comes back
// in that unit (hours).
package reliability

import (
	"errors"
	"fmt"
	"math"
)

// ErrParams is wrapped by every error about the model's parameters.
var ErrParams = errors.New("invalid reliability model parameters")

// Chain is the Markov model of one reliability set (the paper's Figure 13):
// N objects on N different devices, each lost at rate λ while its device is
// up; the set loses data once F objects are lost. State i is "i objects
// lost": from it an object is lost at rate (N−i)λ, and one lost object is
// repaired at rate μ (serial repair: one object at a time, i → i−1).
// State F absorbs.
type Chain struct {
	N      int     // objects in the set
	F      int     // losses that lose data (1 ≤ F ≤ N)
	Lambda float64 // failure rate of one object, λ = 1/MTTF
	Mu     float64 // repair rate of one lost object, μ = 1/MTTR
}

func (c Chain) check() error {
	switch {
	case c.N < 1:
		return fmt.Errorf("%w: a set of %d objects", ErrParams, c.N)
	case c.F < 1 || c.F > c.N:
		return fmt.Errorf("%w: data lost after %d of %d objects (want 1..%d)", ErrParams, c.F, c.N, c.N)
	case !(c.Lambda > 0) || math.IsInf(c.Lambda, 0):
		return fmt.Errorf("%w: failure rate λ = %v (want > 0)", ErrParams, c.Lambda)
	case !(c.Mu >= 0) || math.IsInf(c.Mu, 0):
		return fmt.Errorf("%w: repair rate μ = %v (want ≥ 0)", ErrParams, c.Mu)
	}
	return nil
}

// MTTDL is the exact mean time to absorption of the chain from state 0
// (no object lost), in the inverse unit of λ and μ.
//
// Solved by first passages rather than by inverting the generator, which
// keeps every term positive (no cancellation however large μ/λ is): let
// E_i be the mean time to first reach state i+1 from state i. Leaving
// state i takes on average 1/(λ_i+μ_i); with probability μ_i/(λ_i+μ_i) it
// goes back to i−1, from where reaching i again takes E_{i−1}, and then
// E_i again. Solving,
//
//	E_0 = 1/λ_0,    E_i = (1 + μ·E_{i−1}) / λ_i,    λ_i = (N−i)λ,
//
// and MTTDL = E_0 + E_1 + … + E_{F−1}.
func (c Chain) MTTDL() (float64, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	var sum, prev float64
	for i := 0; i < c.F; i++ {
		li := float64(c.N-i) * c.Lambda
		e := 1 / li
		if i > 0 {
			e = (1 + c.Mu*prev) / li
		}
		sum += e
		prev = e
	}
	return sum, nil
}

// Approx is the paper's equation 2, the closed form valid when μ ≫ λ:
//
//	MTTDL_set ≈ μ^(F−1) / ( (N)_(F−1) · λ^F )
//
// where (a)_(b) = a(a−1)…(a−b), so (N)_(F−1) = N(N−1)…(N−F+1). It is the
// leading term of MTTDL: it ignores the time spent in the transient states
// and the chances of repair racing failure, and underestimates the exact
// value by a relative O(λ/μ).
func (c Chain) Approx() (float64, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	// Computed as a product of ratios, so that neither μ^(F−1) nor λ^F
	// overflows or underflows on its own.
	v := 1 / (float64(c.N) * c.Lambda)
	for i := 1; i < c.F; i++ {
		v *= c.Mu / (float64(c.N-i) * c.Lambda)
	}
	return v, nil
}

// FallingFactorial returns (a)_(b) = a(a−1)…(a−b), the b+1 factors of
// equation 2's notation; (a)_(0) = a.
func FallingFactorial(a, b int) float64 {
	v := 1.0
	for i := 0; i <= b; i++ {
		v *= float64(a - i)
	}
	return v
}
