// Package geohash is Redis's geohash (geohash.c, geohash_helper.c and the
// search of geo.c) in Go: a position is a 52-bit interleaving of its
// longitude's and latitude's 26-bit cells, stored as a sorted set score,
// and a search is the score ranges of the cell around the centre and its
// eight neighbours, each point then checked by its distance.
//
// Every step is Redis's, in the same float64 arithmetic and order, so
// that a score, a decoded position and a distance are the bits Redis
// computes (the trigonometric functions are the C library's, see
// precise.go).
package geohash

import (
	"math"
	"strconv"
)

// Redis's bounds: the poles cannot be encoded (EPSG:900913).
const (
	LatMin  = -85.05112878
	LatMax  = 85.05112878
	LongMin = -180.0
	LongMax = 180.0
	// StepMax is the steps of a stored score: 26 per coordinate, 52 bits.
	StepMax = 26
)

// Constants of geohash_helper.c.
const (
	earthRadius = 6372797.560856
	mercatorMax = 20037726.37
	dR          = math.Pi / 180.0
)

// Bits is a geohash of Step steps (2*Step bits).
type Bits struct {
	Bits uint64
	Step uint8
}

func (h Bits) zero() bool { return h.Bits == 0 && h.Step == 0 }

// Range is a coordinate's interval.
type Range struct{ Min, Max float64 }

// Area is a geohash's cell.
type Area struct {
	Hash      Bits
	Long, Lat Range
}

var (
	wgs84Long = Range{LongMin, LongMax}
	wgs84Lat  = Range{LatMin, LatMax}
	// The standard geohash's latitude range, which GEOHASH's strings use.
	stdLat = Range{-90, 90}
)

func interleave64(xlo, ylo uint32) uint64 {
	b := [...]uint64{0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F, 0x00FF00FF00FF00FF, 0x0000FFFF0000FFFF}
	s := [...]uint{1, 2, 4, 8, 16}
	x, y := uint64(xlo), uint64(ylo)
	for i := 4; i >= 0; i-- {
		x = (x | x<<s[i]) & b[i]
		y = (y | y<<s[i]) & b[i]
	}
	return x | y<<1
}

func deinterleave64(v uint64) uint64 {
	b := [...]uint64{0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F, 0x00FF00FF00FF00FF, 0x0000FFFF0000FFFF, 0x00000000FFFFFFFF}
	s := [...]uint{0, 1, 2, 4, 8, 16}
	x, y := v, v>>1
	for i := range 6 {
		x = (x | x>>s[i]) & b[i]
		y = (y | y>>s[i]) & b[i]
	}
	return x | y<<32
}

// encode is geohashEncode: false for a position outside Redis's bounds or
// the ranges given.
func encode(long, lat Range, longitude, latitude float64, step uint8) (Bits, bool) {
	if step > 32 || step == 0 {
		return Bits{}, false
	}
	if longitude > LongMax || longitude < LongMin || latitude > LatMax || latitude < LatMin {
		return Bits{}, false
	}
	if latitude < lat.Min || latitude > lat.Max || longitude < long.Min || longitude > long.Max {
		return Bits{Step: step}, false
	}
	latOff := (latitude - lat.Min) / (lat.Max - lat.Min)
	longOff := (longitude - long.Min) / (long.Max - long.Min)
	latOff *= float64(uint64(1) << step)
	longOff *= float64(uint64(1) << step)
	return Bits{Bits: interleave64(uint32(latOff), uint32(longOff)), Step: step}, true
}

// Encode is a position's geohash of step steps in Redis's ranges.
func Encode(longitude, latitude float64, step uint8) (Bits, bool) {
	return encode(wgs84Long, wgs84Lat, longitude, latitude, step)
}

func decode(long, lat Range, h Bits) (Area, bool) {
	if h.zero() {
		return Area{}, false
	}
	sep := deinterleave64(h.Bits)
	latScale := lat.Max - lat.Min
	longScale := long.Max - long.Min
	ilato := uint32(sep)
	ilono := uint32(sep >> 32)
	div := float64(uint64(1) << h.Step)
	return Area{Hash: h,
		Lat:  Range{lat.Min + (float64(ilato)*1.0/div)*latScale, lat.Min + ((float64(ilato)+1)*1.0/div)*latScale},
		Long: Range{long.Min + (float64(ilono)*1.0/div)*longScale, long.Min + ((float64(ilono)+1)*1.0/div)*longScale},
	}, true
}

// Decode is a geohash's cell in Redis's ranges.
func Decode(h Bits) (Area, bool) { return decode(wgs84Long, wgs84Lat, h) }

// Center is a cell's centre, clamped to Redis's bounds.
func (a Area) Center() (longitude, latitude float64) {
	longitude = min(max((a.Long.Min+a.Long.Max)/2, LongMin), LongMax)
	latitude = min(max((a.Lat.Min+a.Lat.Max)/2, LatMin), LatMax)
	return
}

// Score is the sorted set score GEOADD stores for a position (false:
// outside Redis's bounds).
func Score(longitude, latitude float64) (float64, bool) {
	h, ok := Encode(longitude, latitude, StepMax)
	if !ok {
		return 0, false
	}
	return float64(align52(h)), true
}

// Position is the position a score decodes to (the centre of its cell):
// false for a score that is no geohash.
func Position(score float64) (longitude, latitude float64, ok bool) {
	a, ok := Decode(Bits{Bits: cUint64(score), Step: StepMax})
	if !ok {
		return 0, 0, false
	}
	longitude, latitude = a.Center()
	return longitude, latitude, true
}

// String is GEOHASH's 11-character standard geohash of a score: decoded,
// encoded again in the standard latitude range (-90, 90), the 11th
// character zero.
func String(score float64) (string, bool) {
	longitude, latitude, ok := Position(score)
	if !ok {
		return "", false
	}
	h, _ := encode(wgs84Long, stdLat, longitude, latitude, StepMax)
	const alphabet = "0123456789bcdefghjkmnpqrstuvwxyz"
	var buf [11]byte
	for i := range buf {
		idx := 0
		if i < 10 {
			idx = int(h.Bits>>(52-(uint(i)+1)*5)) & 0x1f
		}
		buf[i] = alphabet[idx]
	}
	return string(buf[:]), true
}

// cUint64 is C's (uint64_t) of a double as gcc compiles it on x86-64
// (a score that is no geohash decodes as it does in Redis): below 2^63
// the signed conversion, whose out-of-range result is 1<<63; from 2^63
// the signed conversion of f-2^63 with the top bit flipped.
func cUint64(f float64) uint64 {
	const indefinite = 1 << 63
	signed := func(f float64) uint64 {
		if f >= 0x1p63 || f < -0x1p63 || math.IsNaN(f) {
			return indefinite
		}
		return uint64(int64(f))
	}
	if f < 0x1p63 {
		return signed(f)
	}
	return signed(f-0x1p63) ^ indefinite
}

func align52(h Bits) uint64 { return h.Bits << (52 - uint(h.Step)*2) }

func moveX(h *Bits, d int) {
	if d == 0 {
		return
	}
	x := h.Bits & 0xaaaaaaaaaaaaaaaa
	y := h.Bits & 0x5555555555555555
	zz := uint64(0x5555555555555555) >> (64 - uint(h.Step)*2)
	if d > 0 {
		x += zz + 1
	} else {
		x |= zz
		x -= zz + 1
	}
	x &= 0xaaaaaaaaaaaaaaaa >> (64 - uint(h.Step)*2)
	h.Bits = x | y
}

func moveY(h *Bits, d int) {
	if d == 0 {
		return
	}
	x := h.Bits & 0xaaaaaaaaaaaaaaaa
	y := h.Bits & 0x5555555555555555
	zz := uint64(0xaaaaaaaaaaaaaaaa) >> (64 - uint(h.Step)*2)
	if d > 0 {
		y += zz + 1
	} else {
		y |= zz
		y -= zz + 1
	}
	y &= 0x5555555555555555 >> (64 - uint(h.Step)*2)
	h.Bits = x | y
}

// neighbours in the order geo.c searches them: north, south, east, west,
// north-east, north-west, south-east, south-west.
func neighbours(h Bits) [8]Bits {
	moves := [8][2]int{{0, 1}, {0, -1}, {1, 0}, {-1, 0}, {1, 1}, {-1, 1}, {1, -1}, {-1, -1}}
	var out [8]Bits
	for i, m := range moves {
		out[i] = h
		moveX(&out[i], m[0])
		moveY(&out[i], m[1])
	}
	return out
}

func degRad(a float64) float64 { return a * dR }
func radDeg(a float64) float64 { return a / dR }

// estimateSteps is geohashEstimateStepsByRadius.
func estimateSteps(rangeMeters, lat float64) uint8 {
	if rangeMeters == 0 {
		return 26
	}
	step := 1
	for rangeMeters < mercatorMax {
		rangeMeters *= 2
		step++
	}
	step -= 2
	if lat > 66 || lat < -66 {
		step--
		if lat > 80 || lat < -80 {
			step--
		}
	}
	return uint8(min(max(step, 1), 26))
}

// latDistance is geohashGetLatDistance.
func latDistance(lat1, lat2 float64) float64 {
	return earthRadius * math.Abs(degRad(lat2)-degRad(lat1))
}

// Distance is geohashGetDistance: the haversine great-circle distance in
// metres.
func Distance(lon1, lat1, lon2, lat2 float64) float64 {
	lon1r, lon2r := degRad(lon1), degRad(lon2)
	v := sin((lon2r - lon1r) / 2)
	if v == 0 {
		return latDistance(lat1, lat2)
	}
	lat1r, lat2r := degRad(lat1), degRad(lat2)
	u := sin((lat2r - lat1r) / 2)
	// The conversions keep each product rounded, as C does (no fused
	// multiply-add).
	a := float64(u*u) + float64(float64(float64(cos(lat1r)*cos(lat2r))*v)*v)
	return 2.0 * earthRadius * asin(math.Sqrt(a))
}

// Shape is a search area: a circle of Radius, or a box of Width by
// Height (Box), around (Long, Lat), the lengths in a unit of Conversion
// metres.
type Shape struct {
	Long, Lat                      float64
	Box                            bool
	Radius, Width, Height          float64
	Conversion                     float64
	minLon, minLat, maxLon, maxLat float64
}

// boundingBox is geohashBoundingBox.
func (s *Shape) boundingBox() {
	height, width := s.Conversion*s.Radius, s.Conversion*s.Radius
	if s.Box {
		height, width = s.Conversion*(s.Height/2), s.Conversion*(s.Width/2)
	}
	latDelta := radDeg(height / earthRadius)
	longDeltaTop := radDeg(width / earthRadius / cos(degRad(s.Lat+latDelta)))
	longDeltaBottom := radDeg(width / earthRadius / cos(degRad(s.Lat-latDelta)))
	if s.Lat < 0 {
		s.minLon, s.maxLon = s.Long-longDeltaBottom, s.Long+longDeltaBottom
	} else {
		s.minLon, s.maxLon = s.Long-longDeltaTop, s.Long+longDeltaTop
	}
	s.minLat, s.maxLat = s.Lat-latDelta, s.Lat+latDelta
}

// ScoreRange is the scores of a cell: Min ≤ score < Max.
type ScoreRange struct{ Min, Max float64 }

// Ranges are the score ranges of the cells a search reads, in Redis's
// order (geohashCalculateAreasByShapeWGS84, membersOfAllNeighbors): the
// centre's cell, then its neighbours not outside the bounding box, a
// neighbour the same as the one read before it skipped.
func (s *Shape) Ranges() []ScoreRange {
	s.boundingBox()
	radius := s.Radius
	if s.Box {
		radius = math.Sqrt((s.Width/2)*(s.Width/2) + (s.Height/2)*(s.Height/2))
	}
	radius *= s.Conversion
	steps := estimateSteps(radius, s.Lat)
	hash, _ := encode(wgs84Long, wgs84Lat, s.Long, s.Lat, steps)
	nb := neighbours(hash)
	area, _ := decode(wgs84Long, wgs84Lat, hash)
	north, _ := decode(wgs84Long, wgs84Lat, nb[0])
	south, _ := decode(wgs84Long, wgs84Lat, nb[1])
	east, _ := decode(wgs84Long, wgs84Lat, nb[2])
	west, _ := decode(wgs84Long, wgs84Lat, nb[3])
	decrease := north.Lat.Max < s.maxLat || south.Lat.Min > s.minLat || east.Long.Max < s.maxLon || west.Long.Min > s.minLon
	if steps > 1 && decrease {
		steps--
		hash, _ = encode(wgs84Long, wgs84Lat, s.Long, s.Lat, steps)
		nb = neighbours(hash)
		area, _ = decode(wgs84Long, wgs84Lat, hash)
	}
	if steps >= 2 {
		// By index in nb: 0 N, 1 S, 2 E, 3 W, 4 NE, 5 NW, 6 SE, 7 SW.
		drop := func(is ...int) {
			for _, i := range is {
				nb[i] = Bits{}
			}
		}
		if area.Lat.Min < s.minLat {
			drop(1, 7, 6)
		}
		if area.Lat.Max > s.maxLat {
			drop(0, 4, 5)
		}
		if area.Long.Min < s.minLon {
			drop(3, 7, 5)
		}
		if area.Long.Max > s.maxLon {
			drop(2, 6, 4)
		}
	}
	cells := append([]Bits{hash}, nb[:]...)
	var out []ScoreRange
	last := -1
	for i, h := range cells {
		if h.zero() {
			continue
		}
		if last > 0 && h == cells[last] {
			continue
		}
		next := h
		next.Bits++
		out = append(out, ScoreRange{float64(align52(h)), float64(align52(next))})
		last = i
	}
	return out
}

// Within decodes score and reports whether its position is in the shape
// (geoWithinShape), with its distance from the centre in metres. Ranges
// must have been called first.
func (s *Shape) Within(score float64) (longitude, latitude, dist float64, ok bool) {
	longitude, latitude, ok = Position(score)
	if !ok {
		return
	}
	if !s.Box {
		dist = Distance(s.Long, s.Lat, longitude, latitude)
		return longitude, latitude, dist, dist <= s.Radius*s.Conversion
	}
	width, height := s.Width*s.Conversion, s.Height*s.Conversion
	if latDistance(latitude, s.Lat) > height/2 {
		return longitude, latitude, 0, false
	}
	if Distance(longitude, latitude, s.Long, latitude) > width/2 {
		return longitude, latitude, 0, false
	}
	return longitude, latitude, Distance(s.Long, s.Lat, longitude, latitude), true
}

// FormatDistance is Redis's fixedpoint_d2string with 4 decimals, which
// GEODIST and WITHDIST print: rounded to the nearest (ties to even, as
// llrint), the digits of the integer written with a point before the
// last 4.
func FormatDistance(d float64) string {
	if d == 0 {
		return "0.0000"
	}
	v := math.RoundToEven(d * 10000)
	neg := v < 0
	var u uint64
	switch {
	case v >= 0x1p63 || v < -0x1p63 || math.IsNaN(v):
		// llrint's "invalid" result: LLONG_MIN.
		u, neg = 1<<63, true
	case neg:
		u = uint64(-int64(v))
	default:
		u = uint64(v)
	}
	digits := []byte(strconv.FormatUint(u, 10))
	for len(digits) < 5 {
		digits = append([]byte{'0'}, digits...)
	}
	s := string(digits[:len(digits)-4]) + "." + string(digits[len(digits)-4:])
	if neg {
		s = "-" + s
	}
	return s
}
