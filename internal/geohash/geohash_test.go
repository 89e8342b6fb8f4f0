package geohash

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestPreciseTrig: the double-double sin, cos and asin are within an ulp
// of the C library's (or, without cgo, of Go's: asin within 2, Go's being
// up to 2 ulps off, and more near 1) over the arguments a distance gives
// them.
func TestPreciseTrig(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ulps := func(a, b float64) float64 { return math.Abs(a-b) / math.Abs(math.Nextafter(a, math.Inf(1))-a) }
	for range 20000 {
		x := (r.Float64()*2 - 1) * math.Pi
		if d := ulps(math.Sin(x), preciseSin(x)); d > 1 || ulps(sin(x), preciseSin(x)) > 1 {
			t.Fatalf("sin %v: %v (Go) %v (C) and %v", x, math.Sin(x), sin(x), preciseSin(x))
		}
		if d := ulps(math.Cos(x), preciseCos(x)); d > 1 || ulps(cos(x), preciseCos(x)) > 1 {
			t.Fatalf("cos %v: %v (Go) %v (C) and %v", x, math.Cos(x), cos(x), preciseCos(x))
		}
		v := r.Float64()
		if r.IntN(4) == 0 {
			v = 1 - v*1e-9
		}
		if d := ulps(math.Asin(v), preciseAsin(v)); d > 2 && v < 0.99 || ulps(asin(v), preciseAsin(v)) > 1 {
			t.Fatalf("asin %v: %v (Go) %v (C) and %v", v, math.Asin(v), asin(v), preciseAsin(v))
		}
	}
	if got := preciseAsin(1); got != math.Pi/2 {
		t.Errorf("asin 1 = %v", got)
	}
}

// TestRedisExamples: redis.io's GEOADD, GEOHASH, GEOPOS and GEODIST
// examples, as redis-server 7.0 replies them.
func TestRedisExamples(t *testing.T) {
	p1, _ := Score(13.361389, 38.115556)
	p2, _ := Score(15.087269, 37.502669)
	if p1 != 3479099956230698 || p2 != 3479447370796909 {
		t.Errorf("scores %v %v", p1, p2)
	}
	for _, c := range []struct {
		score float64
		hash  string
	}{{p1, "sqc8b49rny0"}, {p2, "sqdtr74hyu0"}} {
		if h, _ := String(c.score); h != c.hash {
			t.Errorf("geohash of %v: %s, not %s", c.score, h, c.hash)
		}
	}
	lon1, lat1, _ := Position(p1)
	lon2, lat2, _ := Position(p2)
	if lon1 != 13.36138933897018433 || lat1 != 38.11555639549629859 {
		t.Errorf("Palermo at %v %v", lon1, lat1)
	}
	d := Distance(lon1, lat1, lon2, lat2)
	if got := FormatDistance(d); got != "166274.1516" {
		t.Errorf("Palermo-Catania %s", got)
	}
	if got := FormatDistance(d / 1000); got != "166.2742" {
		t.Errorf("Palermo-Catania %s km", got)
	}
	for in, want := range map[float64]string{0: "0.0000", 0.00004: "0.0000", 0.00005: "0.0000", 0.00016: "0.0002", 1.23456: "1.2346", 123456789.5: "123456789.5000"} {
		if got := FormatDistance(in); got != want {
			t.Errorf("FormatDistance(%v) = %s, want %s", in, got, want)
		}
	}
}
