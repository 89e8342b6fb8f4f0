package server

import (
	"strconv"
	"testing"
)

// TestGeoSameAsRedis compares the geo commands with a real redis-server:
// a fixed script of edge cases and errors, then random points (GEOADD's
// scores, GEOPOS, GEOHASH, GEODIST) and random searches of every form,
// with distances, hashes and coordinates, and what the STORE forms
// leave, byte for byte.
func TestGeoSameAsRedis(t *testing.T) {
	ts := startServer(t, "")
	redisAddr := startRedis(t)
	script := [][]string{
		{"FLUSHALL"},
		{"GEOADD", "g", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania"},
		{"GEOADD", "g", "CH", "13.361389", "38.115556", "Palermo", "2.35", "48.85", "Paris"},
		{"GEOADD", "g", "NX", "CH", "0", "0", "Palermo", "1", "1", "Null"}, {"GEOADD", "g", "XX", "CH", "1", "1", "Paris", "2", "2", "Nowhere"},
		{"GEOADD", "g", "NX", "XX", "1", "1", "x"}, {"GEOADD", "g", "1", "1"}, {"GEOADD", "g", "GT", "1", "1", "x"},
		{"GEOADD", "g", "181", "1", "x"}, {"GEOADD", "g", "1", "86", "x"}, {"GEOADD", "g", "x", "1", "y"}, {"GEOADD", "g", "1", "inf", "y"},
		{"GEOADD", "g", "-180", "-85.05112878", "sw", "180", "85.05112878", "ne"},
		{"ZRANGE", "g", "0", "-1", "WITHSCORES"},
		{"GEOPOS", "g", "Palermo", "nobody", "sw", "ne"}, {"GEOPOS", "nokey", "a"}, {"GEOPOS", "g"},
		{"GEOHASH", "g", "Palermo", "Catania", "nobody", "sw", "ne"}, {"GEOHASH", "nokey", "a"},
		{"GEODIST", "g", "Palermo", "Catania"}, {"GEODIST", "g", "Palermo", "Catania", "km"}, {"GEODIST", "g", "Palermo", "Catania", "MI"},
		{"GEODIST", "g", "Palermo", "Catania", "ft"}, {"GEODIST", "g", "Palermo", "Catania", "yd"}, {"GEODIST", "g", "Palermo", "nobody"},
		{"GEODIST", "nokey", "a", "b"}, {"GEODIST", "g", "Palermo", "Palermo"}, {"GEODIST", "g", "a", "b", "km", "x"},
		{"GEORADIUS", "g", "15", "37", "200", "km"}, {"GEORADIUS", "g", "15", "37", "200", "km", "WITHDIST", "WITHCOORD", "WITHHASH", "ASC"},
		{"GEORADIUS", "g", "15", "37", "20000", "km", "DESC", "COUNT", "2"}, {"GEORADIUS", "g", "15", "37", "20000", "km", "COUNT", "2", "ANY"},
		{"GEORADIUS", "g", "15", "37", "200", "km", "COUNT", "0"}, {"GEORADIUS", "g", "15", "37", "200", "km", "ANY"},
		{"GEORADIUS", "g", "15", "37", "-1", "km"}, {"GEORADIUS", "g", "15", "37", "x", "km"}, {"GEORADIUS", "g", "15", "37", "1", "parsec"},
		{"GEORADIUS", "g", "15", "37", "200", "km", "BOGUS"}, {"GEORADIUS", "g", "15", "37", "200", "km", "STORE", "d", "WITHDIST"},
		{"GEORADIUS", "g", "15", "37", "200", "km", "STORE", "d"}, {"ZRANGE", "d", "0", "-1", "WITHSCORES"},
		{"GEORADIUS", "g", "15", "37", "200", "km", "STOREDIST", "d"}, {"ZRANGE", "d", "0", "-1", "WITHSCORES"},
		{"GEORADIUS", "g", "15", "37", "1", "m", "STORE", "d"}, {"EXISTS", "d"}, {"GEORADIUS", "nokey", "15", "37", "1", "m"},
		{"SET", "d", "x"}, {"GEORADIUS", "nokey", "15", "37", "1", "m", "STORE", "d"}, {"EXISTS", "d"},
		{"GEORADIUS_RO", "g", "15", "37", "200", "km", "STORE", "d"}, {"GEORADIUS_RO", "g", "15", "37", "200", "km", "WITHDIST"},
		{"GEORADIUSBYMEMBER", "g", "Palermo", "200", "km", "WITHDIST"}, {"GEORADIUSBYMEMBER", "g", "nobody", "200", "km"},
		{"GEORADIUSBYMEMBER", "nokey", "nobody", "200", "km"}, {"GEORADIUSBYMEMBER_RO", "g", "Palermo", "1000", "km", "DESC"},
		{"GEOSEARCH", "g", "FROMMEMBER", "Palermo", "BYRADIUS", "200", "km", "WITHDIST", "ASC"},
		{"GEOSEARCH", "g", "FROMLONLAT", "15", "37", "BYBOX", "400", "400", "km", "WITHCOORD"},
		{"GEOSEARCH", "g", "FROMLONLAT", "15", "37", "FROMMEMBER", "Palermo", "BYBOX", "400", "400", "km"},
		{"GEOSEARCH", "g", "BYBOX", "400", "400", "km"}, {"GEOSEARCH", "g", "FROMLONLAT", "15", "37"},
		{"GEOSEARCH", "g", "FROMLONLAT", "15", "37", "BYBOX", "400", "-1", "km"}, {"GEOSEARCH", "g", "FROMLONLAT", "15", "37", "BYBOX", "x", "1", "km"},
		{"GEOSEARCH", "g", "FROMLONLAT", "15", "37", "BYRADIUS", "1", "km", "BYBOX", "1", "1", "km"},
		{"GEOSEARCH", "g", "FROMMEMBER", "nobody", "BYRADIUS", "1", "km"}, {"GEOSEARCH", "nokey", "FROMMEMBER", "nobody", "BYRADIUS", "1", "km"},
		{"GEOSEARCH", "g", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "STORE", "d"},
		{"GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "STOREDIST"}, {"ZRANGE", "d", "0", "-1", "WITHSCORES"},
		{"GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "WITHDIST"},
		{"GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "15", "37", "BYBOX", "1", "1", "m"}, {"EXISTS", "d"},
		{"SET", "s", "x"}, {"GEOADD", "s", "1", "1", "a"}, {"GEOPOS", "s", "a"}, {"GEODIST", "s", "a", "b"}, {"GEOSEARCH", "s", "FROMLONLAT", "1", "1", "BYRADIUS", "1", "m"},
		{"GEORADIUS", "s", "1", "1", "x", "m"}, {"GEOSEARCHSTORE", "s", "g", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km"}, {"TYPE", "s"},
		{"ZADD", "z", "-1", "neg", "1e300", "big", "4503599627370496", "over"}, {"GEOPOS", "z", "neg", "big", "over"}, {"GEOHASH", "z", "neg", "big", "over"},
	}
	r := randomSource(t)
	coord := func(lim float64) string { return strconv.FormatFloat((r.Float64()*2-1)*lim, 'f', r.IntN(8)+1, 64) }
	units := []string{"m", "km", "ft", "mi"}
	for round := range 30 {
		key := "p" + strconv.Itoa(round%3)
		add := []string{"GEOADD", key}
		for i := range 20 + r.IntN(200) {
			add = append(add, coord(180), coord(85), "m"+strconv.Itoa(r.IntN(2000))+"-"+strconv.Itoa(i))
		}
		script = append(script, add, []string{"ZRANGE", key, "0", "-1", "WITHSCORES"})
		// A centre near the points sometimes, or anywhere; radiuses from
		// metres to thousands of km.
		lon, lat := coord(180), coord(85)
		if r.IntN(2) == 0 {
			lon, lat = add[2], add[3]
		}
		unit := units[r.IntN(4)]
		radius := strconv.FormatFloat(r.Float64()*[]float64{1e3, 1e5, 1e7}[r.IntN(3)], 'f', 3, 64)
		width, height := strconv.Itoa(1+r.IntN(20000)), strconv.Itoa(1+r.IntN(20000))
		sort := []string{"ASC", "DESC"}[r.IntN(2)]
		with := []string{"WITHDIST", "WITHCOORD", "WITHHASH"}
		script = append(script,
			[]string{"GEOPOS", key, add[4], add[7], "nobody"}, []string{"GEOHASH", key, add[4], add[7]},
			[]string{"GEODIST", key, add[4], add[7], unit},
			[]string{"GEORADIUS", key, lon, lat, radius, unit, "WITHDIST", "WITHHASH", "WITHCOORD", sort},
			[]string{"GEORADIUS", key, lon, lat, radius, unit},
			[]string{"GEORADIUSBYMEMBER_RO", key, add[4], radius, unit, "COUNT", strconv.Itoa(1 + r.IntN(20)), "WITHDIST"},
			[]string{"GEOSEARCH", key, "FROMLONLAT", lon, lat, "BYBOX", width, height, "km", with[r.IntN(3)], sort},
			[]string{"GEOSEARCH", key, "FROMMEMBER", add[7], "BYRADIUS", radius, unit, "COUNT", "3", "ANY"},
			[]string{"GEOSEARCHSTORE", "dst", key, "FROMLONLAT", lon, lat, "BYBOX", width, height, "mi", "STOREDIST"},
			[]string{"ZRANGE", "dst", "0", "-1", "WITHSCORES"})
	}
	compareWithRedis(t, ts, redisAddr, script)
}
