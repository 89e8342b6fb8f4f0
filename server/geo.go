package server

import (
	"cmp"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/kvarray/kvarray/collection"
	"github.com/kvarray/kvarray/internal/geohash"
	"github.com/kvarray/kvarray/internal/longdouble"
	"github.com/kvarray/kvarray/keyspace"
)

// The geo commands: a geo set is a sorted set whose scores are geohashes
// (package geohash); GEOADD is ZADD with the scores computed, the
// searches read the score ranges of the cells around their centre and
// keep the points inside the shape, as Redis's geo.c does, with its
// replies and errors.

func init() { commands = append(commands, geoCommands()...) }

func geoCommands() []*command {
	geoRO := func(c *command) *command {
		c.flags = []string{"readonly"}
		c.acl = []string{"read", "geo", "slow"}
		return c
	}
	radiusArgs := []arg{optional(token("WITHCOORD")), optional(token("WITHDIST")), optional(token("WITHHASH")),
		optional(block("count-block", tokenArg("COUNT", intArg("count")), optional(token("ANY")))),
		optional(oneof("order", token("ASC"), token("DESC")))}
	store := optional(oneof("store", tokenArg("STORE", keyArg("key")), tokenArg("STOREDIST", keyArg("key"))))
	unit := oneof("unit", token("M"), token("KM"), token("FT"), token("MI"))
	searchArgs := []arg{oneof("from", tokenArg("FROMMEMBER", strArg("member")), tokenArg("FROMLONLAT", block("fromlonlat", strArg("longitude"), strArg("latitude")))),
		oneof("by", tokenArg("BYRADIUS", block("circle", strArg("radius"), unit)), tokenArg("BYBOX", block("box", strArg("width"), strArg("height"), unit)))}
	georadius := func(name string, member, ro bool) *command {
		args := []arg{keyArg("key")}
		arity := -6
		if member {
			args, arity = append(args, strArg("member")), -5
		} else {
			args = append(args, strArg("longitude"), strArg("latitude"))
		}
		args = append(append(args, strArg("radius"), unit), radiusArgs...)
		summary := "Queries a geospatial index for members within a distance from a "
		if member {
			summary += "member."
		} else {
			summary += "coordinate."
		}
		c := wcmd(name, arity, "geo", "3.2.0", summary, cmdGeoSearch, args...)
		c.complexity = "O(N+log(M)) array calls, N the points in the cells around the centre, M the points in the result"
		if ro {
			c.since = "3.2.10"
			return geoRO(c)
		}
		c.flags = append(c.flags, "movablekeys")
		c.args = append(c.args, store)
		return c
	}
	geosearch := geoRO(rcmd("geosearch", -7, "geo", "6.2.0", "Queries a geospatial index for members inside an area of a box or a circle.", cmdGeoSearch,
		append(append([]arg{keyArg("key")}, searchArgs...), radiusArgs...)...))
	geosearchstore := keyPos(wcmd("geosearchstore", -8, "geo", "6.2.0", "Stores the members of a geospatial index inside an area of a box or a circle.", cmdGeoSearch,
		append(append([]arg{keyArg("destination"), keyArg("source")}, searchArgs...), radiusArgs[3], radiusArgs[4], optional(token("STOREDIST")))...), 2, 1)
	return []*command{
		wcmd("geoadd", -5, "geo", "3.2.0", "Adds members to a geospatial index (a sorted set of geohash scores).", cmdGeoAdd,
			keyArg("key"), optional(oneof("condition", token("NX"), token("XX"))), optional(token("CH")),
			multiple(block("data", strArg("longitude"), strArg("latitude"), strArg("member")))),
		geoRO(rcmd("geodist", -4, "geo", "3.2.0", "Returns the distance between two members of a geospatial index.", cmdGeoDist,
			keyArg("key"), strArg("member1"), strArg("member2"), optional(unit))),
		geoRO(rcmd("geohash", -2, "geo", "3.2.0", "Returns members of a geospatial index as geohash strings.", cmdGeoHash,
			keyArg("key"), optional(multiple(strArg("member"))))),
		geoRO(rcmd("geopos", -2, "geo", "3.2.0", "Returns the longitude and latitude of members of a geospatial index.", cmdGeoPos,
			keyArg("key"), optional(multiple(strArg("member"))))),
		georadius("georadius", false, false), georadius("georadius_ro", false, true),
		georadius("georadiusbymember", true, false), georadius("georadiusbymember_ro", true, true),
		geosearch, geosearchstore,
	}
}

// parseLonLat reads a longitude and a latitude (extractLongLatOrReply).
func (c *call) parseLonLat(args [][]byte) (lon, lat float64, ok bool) {
	if lon, ok = parseScore(args[0]); !ok {
		c.error(errNotFloat)
		return
	}
	if lat, ok = parseScore(args[1]); !ok {
		c.error(errNotFloat)
		return
	}
	if lon < geohash.LongMin || lon > geohash.LongMax || lat < geohash.LatMin || lat > geohash.LatMax {
		c.error("ERR invalid longitude,latitude pair " + cFloat(lon) + "," + cFloat(lat))
		return 0, 0, false
	}
	return lon, lat, true
}

// cFloat is C's "%f".
func cFloat(f float64) string {
	if math.IsInf(f, 0) {
		return map[bool]string{false: "inf", true: "-inf"}[f < 0]
	}
	return strconv.FormatFloat(f, 'f', 6, 64)
}

// parseUnit is a unit's metres (extractUnitOrReply).
func (c *call) parseUnit(b []byte) (float64, bool) {
	switch strings.ToLower(string(b)) {
	case "m":
		return 1, true
	case "km":
		return 1000, true
	case "ft":
		return 0.3048, true
	case "mi":
		return 1609.34, true
	}
	c.error("ERR unsupported unit provided. please use M, KM, FT, MI")
	return 0, false
}

// parseLength reads a non-negative length argument (msg: its error when
// not a number).
func (c *call) parseLength(b []byte, msg, negative string) (float64, bool) {
	v, ok := parseScore(b)
	if !ok {
		c.error("ERR " + msg)
		return 0, false
	}
	if v < 0 {
		c.error("ERR " + negative)
		return 0, false
	}
	return v, true
}

// writeHumanDouble is Redis's addReplyHumanLongDouble of a double: "%.17Lf"
// with the trailing zeros dropped, a bulk string in RESP2, a double in
// RESP3.
func (c *call) writeHumanDouble(f float64) {
	s := longdouble.Format(new(big.Float).SetFloat64(f))
	if c.w.resp3() {
		c.w.emit(func(b []byte) []byte { return append(append(append(b, ','), s...), '\r', '\n') })
		return
	}
	c.w.WriteBulkString(s)
}

// cmdGeoAdd: GEOADD key [NX|XX] [CH] longitude latitude member ..., run
// as the ZADD of the members' geohash scores (as Redis does: ZADD's
// replies and events).
func cmdGeoAdd(c *call) {
	at, nx, xx := 2, false, false
opts:
	for ; at < len(c.args); at++ {
		switch upper(c.args[at]) {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "CH":
		default:
			break opts
		}
	}
	if (len(c.args)-at)%3 != 0 || nx && xx {
		c.syntaxError()
		return
	}
	zargs := append([][]byte{[]byte("zadd")}, c.args[1:at]...)
	for i := at; i < len(c.args); i += 3 {
		lon, lat, ok := c.parseLonLat(c.args[i:])
		if !ok {
			return
		}
		score, _ := geohash.Score(lon, lat)
		zargs = append(zargs, strconv.AppendUint(nil, uint64(score), 10), c.args[i+2])
	}
	// The slow log and monitors show GEOADD, as Redis's (original argv).
	orig := c.args
	c.args = zargs
	cmdZAdd(c)
	c.args = orig
}

func cmdGeoPos(c *call) {
	scores, has, _, ok := c.zscores(c.args[1], c.args[2:])
	if !ok {
		return
	}
	c.w.WriteArray(len(scores))
	for i, s := range scores {
		lon, lat, ok := geohash.Position(s)
		if !has[i] || !ok {
			c.w.WriteNullArray()
			continue
		}
		c.w.WriteArray(2)
		c.writeHumanDouble(lon)
		c.writeHumanDouble(lat)
	}
}

func cmdGeoHash(c *call) {
	scores, has, _, ok := c.zscores(c.args[1], c.args[2:])
	if !ok {
		return
	}
	c.w.WriteArray(len(scores))
	for i, s := range scores {
		h, ok := geohash.String(s)
		if !has[i] || !ok {
			c.w.WriteNull()
			continue
		}
		c.w.WriteBulkString(h)
	}
}

func cmdGeoDist(c *call) {
	toMeter := 1.0
	switch {
	case len(c.args) == 5:
		var ok bool
		if toMeter, ok = c.parseUnit(c.args[4]); !ok {
			return
		}
	case len(c.args) > 5:
		c.syntaxError()
		return
	}
	scores, has, _, ok := c.zscores(c.args[1], c.args[2:4])
	if !ok {
		return
	}
	if !has[0] || !has[1] {
		c.w.WriteNull()
		return
	}
	lon1, lat1, ok1 := geohash.Position(scores[0])
	lon2, lat2, ok2 := geohash.Position(scores[1])
	if !ok1 || !ok2 {
		c.w.WriteNull()
		return
	}
	c.w.WriteBulkString(geohash.FormatDistance(geohash.Distance(lon1, lat1, lon2, lat2) / toMeter))
}

// geoPoint is a search's result.
type geoPoint struct {
	member             []byte
	score, lon, lat, d float64
}

// geoQuery is a search's parsed arguments.
type geoQuery struct {
	shape                         geohash.Shape
	withDist, withHash, withCoord bool
	any                           bool
	sort                          int // 0 none, 1 ascending, -1 descending
	count                         int64
	store                         []byte
	storeDist                     bool
}

// geoStoreKey finds where a GEORADIUS or GEORADIUSBYMEMBER stores, as its
// parser will (the key must be locked before the arguments are read,
// they need the source's members): the last STORE or STOREDIST, COUNT
// taking its argument. GEOSEARCHSTORE stores to its first key.
func (c *call) geoStoreKey() []byte {
	switch c.e.name {
	case "geosearchstore":
		return c.args[1]
	case "georadius", "georadiusbymember":
	default:
		return nil
	}
	base := 6
	if c.e.name == "georadiusbymember" {
		base = 5
	}
	var dst []byte
	for i := base; i < len(c.args); i++ {
		switch strings.ToLower(string(c.args[i])) {
		case "count":
			i++
		case "store", "storedist":
			if i+1 < len(c.args) {
				dst = c.args[i+1]
				i++
			}
		}
	}
	return dst
}

// parseGeoSearch reads a search's arguments as georadiusGeneric does, in
// its order (its first error is the reply); z is the source (nil:
// missing), for FROMMEMBER's and GEORADIUSBYMEMBER's member.
func (c *call) parseGeoSearch(z *collection.ZSet) (q geoQuery, ok bool) {
	name := c.e.name
	search := strings.HasPrefix(name, "geosearch")
	noStore := strings.HasSuffix(name, "_ro")
	member := func(m []byte) bool {
		s, has, err := z.Score(m)
		if err != nil {
			return c.zfail(err)
		}
		if !has {
			c.error("ERR could not decode requested zset member")
			return false
		}
		q.shape.Long, q.shape.Lat, _ = geohash.Position(s)
		return true
	}
	distance := func(args [][]byte) bool {
		if q.shape.Radius, ok = c.parseLength(args[0], "need numeric radius", "radius cannot be negative"); !ok {
			return false
		}
		q.shape.Conversion, ok = c.parseUnit(args[1])
		return ok
	}
	var base int
	switch {
	case search:
		base = 2
		if name == "geosearchstore" {
			base, q.store = 3, c.args[1]
		}
	case strings.HasPrefix(name, "georadiusbymember"):
		base = 5
		if z != nil && (!member(c.args[2]) || !distance(c.args[3:])) {
			return q, false
		}
	default:
		base = 6
		if q.shape.Long, q.shape.Lat, ok = c.parseLonLat(c.args[2:]); !ok || !distance(c.args[4:]) {
			return q, false
		}
	}
	var fromMember, fromLoc, byRadius, byBox bool
	rest := c.args[base:]
	for i := 0; i < len(rest); i++ {
		left := len(rest) - i - 1 // the arguments after rest[i]
		switch opt := strings.ToLower(string(rest[i])); {
		case opt == "withdist":
			q.withDist = true
		case opt == "withhash":
			q.withHash = true
		case opt == "withcoord":
			q.withCoord = true
		case opt == "any":
			q.any = true
		case opt == "asc":
			q.sort = 1
		case opt == "desc":
			q.sort = -1
		case opt == "count" && left >= 1:
			n, err := parseInt(rest[i+1])
			if err != nil {
				c.error(errNotInt)
				return q, false
			}
			if n <= 0 {
				c.error("ERR COUNT must be > 0")
				return q, false
			}
			q.count = n
			i++
		case (opt == "store" || opt == "storedist") && left >= 1 && !noStore && !search:
			q.store, q.storeDist = rest[i+1], opt == "storedist"
			i++
		case opt == "storedist" && name == "geosearchstore":
			q.storeDist = true
		case opt == "frommember" && left >= 1 && search && !fromLoc:
			if z != nil && !member(rest[i+1]) {
				return q, false
			}
			fromMember = true
			i++
		case opt == "fromlonlat" && left >= 2 && search && !fromMember:
			if q.shape.Long, q.shape.Lat, ok = c.parseLonLat(rest[i+1:]); !ok {
				return q, false
			}
			fromLoc = true
			i += 2
		case opt == "byradius" && left >= 2 && search && !byBox:
			if !distance(rest[i+1:]) {
				return q, false
			}
			q.shape.Box, byRadius = false, true
			i += 2
		case opt == "bybox" && left >= 3 && search && !byRadius:
			if q.shape.Width, ok = c.parseLength(rest[i+1], "need numeric width", "height or width cannot be negative"); !ok {
				return q, false
			}
			if q.shape.Height, ok = c.parseLength(rest[i+2], "need numeric height", "height or width cannot be negative"); !ok {
				return q, false
			}
			if q.shape.Conversion, ok = c.parseUnit(rest[i+3]); !ok {
				return q, false
			}
			q.shape.Box, byBox = true, true
			i += 3
		default:
			c.syntaxError()
			return q, false
		}
	}
	switch {
	case q.store != nil && (q.withDist || q.withHash || q.withCoord):
		what := "STORE option in GEORADIUS"
		if name == "geosearchstore" {
			what = "GEOSEARCHSTORE"
		}
		c.error("ERR " + what + " is not compatible with WITHDIST, WITHHASH and WITHCOORD options")
	case search && !fromMember && !fromLoc:
		c.error("ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for " + string(c.args[0]))
	case search && !byRadius && !byBox:
		c.error("ERR exactly one of BYRADIUS and BYBOX can be specified for " + string(c.args[0]))
	case q.any && q.count == 0:
		c.error("ERR the ANY argument requires COUNT argument")
	default:
		// COUNT returns the nearest: sorted, but for ANY (the first found).
		if q.count != 0 && q.sort == 0 && !q.any {
			q.sort = 1
		}
		return q, true
	}
	return q, false
}

// geoFind reads the points in q's shape from z, in Redis's order (cell
// by cell, by score in each), stopping at q.count with ANY.
func geoFind(z *collection.ZSet, q *geoQuery) ([]geoPoint, error) {
	var limit int64
	if q.any {
		limit = q.count
	}
	var out []geoPoint
	for _, r := range q.shape.Ranges() {
		if limit > 0 && int64(len(out)) >= limit {
			break
		}
		es, err := z.ByScore(collection.ScoreRange{Min: r.Min, Max: r.Max, MaxEx: true}, 0, -1, false)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			if lon, lat, d, in := q.shape.Within(e.Score); in {
				out = append(out, geoPoint{member: e.Member, score: e.Score, lon: lon, lat: lat, d: d})
			}
			if limit > 0 && int64(len(out)) >= limit {
				break
			}
		}
	}
	return out, nil
}

// cmdGeoSearch serves GEORADIUS, GEORADIUSBYMEMBER, their _RO forms,
// GEOSEARCH and GEOSEARCHSTORE (georadiusGeneric).
func cmdGeoSearch(c *call) {
	src := c.args[1]
	if c.e.name == "geosearchstore" {
		src = c.args[2]
	}
	var q geoQuery
	var points []geoPoint
	var existed bool
	stored := -1
	if !c.zsets([][]byte{src}, c.geoStoreKey(), false, func(srcs []zsource) ([]keyspace.Op, bool) {
		z := srcs[0].z
		var ok bool
		if q, ok = c.parseGeoSearch(z); !ok {
			return nil, false
		}
		if z != nil {
			var err error
			if points, err = geoFind(z, &q); err != nil {
				return nil, c.zfail(err)
			}
		}
		if q.sort != 0 {
			slices.SortStableFunc(points, func(a, b geoPoint) int { return q.sort * cmp.Compare(a.d, b.d) })
		}
		if q.count > 0 && int64(len(points)) > q.count {
			points = points[:q.count]
		}
		for i := range points {
			points[i].d /= q.shape.Conversion
		}
		if q.store == nil {
			return nil, true
		}
		es := make([]collection.ZEntry, len(points))
		for i, p := range points {
			es[i] = collection.ZEntry{Member: p.member, Score: p.score}
			if q.storeDist {
				es[i].Score = p.d
			}
		}
		stored = len(es)
		ops, ex, ok := c.storeZSet(q.store, es)
		existed = ex
		return ops, ok
	}) {
		return
	}
	if stored >= 0 {
		event := "georadiusstore"
		if strings.HasPrefix(c.e.name, "geosearch") {
			event = "geosearchstore"
		}
		c.notifyStored(event, q.store, stored, existed)
		c.w.WriteInt(stored)
		return
	}
	opts := b2i(q.withDist) + b2i(q.withHash) + b2i(q.withCoord)
	c.w.WriteArray(len(points))
	for _, p := range points {
		if opts > 0 {
			c.w.WriteArray(opts + 1)
		}
		c.w.WriteBulk(p.member)
		if q.withDist {
			c.w.WriteBulkString(geohash.FormatDistance(p.d))
		}
		if q.withHash {
			c.w.WriteInt64(int64(p.score))
		}
		if q.withCoord {
			c.w.WriteArray(2)
			c.writeHumanDouble(p.lon)
			c.writeHumanDouble(p.lat)
		}
	}
}
