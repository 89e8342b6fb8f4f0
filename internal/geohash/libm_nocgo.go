//go:build !cgo

package geohash

// Without cgo: correctly rounded (precise.go).
func sin(x float64) float64  { return preciseSin(x) }
func cos(x float64) float64  { return preciseCos(x) }
func asin(x float64) float64 { return preciseAsin(x) }
