//go:build cgo

package geohash

/*
#cgo LDFLAGS: -lm
#include <math.h>
*/
import "C"

// The C library's functions, which Redis's distances come from.
func sin(x float64) float64  { return float64(C.sin(C.double(x))) }
func cos(x float64) float64  { return float64(C.cos(C.double(x))) }
func asin(x float64) float64 { return float64(C.asin(C.double(x))) }
