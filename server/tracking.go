package server

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tidwall/redcon"
)

// Client-side caching: CLIENT TRACKING, CACHING, TRACKINGINFO and
// GETREDIR, with Redis 7.0's semantics (tracking.c):
//
//   - The tracking table maps a key's name (in any database, as Redis
//     keeps it) to the connections that read it while tracking. A read
//     remembers the command's keys before it runs, so that a write that
//     lands during the read still invalidates it; an invalidation sent
//     for a key is sent once and forgets the key.
//   - Every write is signalled through Server.touch (the WATCH hook):
//     each reader of the key gets an `invalidate` message, except the
//     writer itself in NOLOOP mode. BCAST clients get the keys written
//     under their prefixes, collected until the end of the command (a
//     MULTI/EXEC or script is one command), one message per prefix.
//   - FLUSHDB, FLUSHALL and SWAPDB send a null invalidation to every
//     tracking client and empty the table, as Redis does.
//   - Messages go to the connection's push queue (pubsub.go), so a
//     message for the connection running the command goes out after
//     its reply. In RESP3 they are `invalidate` pushes; a RESP2 client
//     gets them only through REDIRECT to a connection subscribed to
//     anything, as a message of `__redis__:invalidate`. A redirect
//     target that had no push queue (a RESP3 connection that neither
//     subscribed nor tracks) gets one at its next command: what is
//     sent to it before that is lost (a push queue started by another
//     goroutine could split a reply in flight).
//   - tracking-table-max-keys bounds the table: past it, keys are
//     invalidated (and forgotten) until it fits again.
//
// The table and every connection's trackState are guarded by
// tracker.mu; conn.tracking mirrors trackState.on for the hot paths.

// trackState is one connection's tracking mode (tracker.mu).
type trackState struct {
	on, bcast, optin, optout, noloop, broken bool
	// caching: CLIENT CACHING was given for the next command.
	caching  bool
	redirect int64
	redir    *conn
	prefixes []string
}

// tracker is the server's tracking table.
type tracker struct {
	mu      sync.Mutex
	clients map[*conn]struct{}
	keys    map[string]map[*conn]struct{}
	items   int
	// prefixes are BCAST's: who listens on each, and the keys written
	// under it since the last flush, each with its last writer.
	prefixes map[string]*bcastState
	pending  bool
	maxKeys  int64
	// active: anything to do on a write (a tracking client or a
	// remembered key).
	active atomic.Bool
}

type bcastState struct {
	clients map[*conn]struct{}
	keys    map[string]*conn
}

// setActive updates active (mu held).
func (t *tracker) setActive() { t.active.Store(len(t.clients) > 0 || len(t.keys) > 0) }

// trackingChannel is where RESP2 redirect targets get the messages.
const trackingChannel = "__redis__:invalidate"

// trackKeys remembers the keys of args (a read-only command, or the
// EVAL whose script read) for cl, if it tracks them now.
func (s *Server) trackKeys(cl *conn, args [][]byte) {
	t := &s.trk
	cmd := s.acl.Table().Resolve(args)
	if cmd == nil {
		return
	}
	keys := cmd.KeysOf(args)
	if len(keys) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	f := &cl.trk
	if !f.on || f.bcast || f.optin && !f.caching || f.optout && f.caching {
		return
	}
	if t.keys == nil {
		t.keys = map[string]map[*conn]struct{}{}
	}
	for _, k := range keys {
		name := string(args[k.Pos])
		ids := t.keys[name]
		if ids == nil {
			ids = map[*conn]struct{}{}
			t.keys[name] = ids
		}
		if _, ok := ids[cl]; !ok {
			ids[cl] = struct{}{}
			t.items++
		}
	}
	t.limit()
	t.setActive()
}

// limit invalidates keys until the table fits tracking-table-max-keys
// (mu held).
func (t *tracker) limit() {
	if t.maxKeys <= 0 {
		return
	}
	for name := range t.keys {
		if int64(len(t.keys)) <= t.maxKeys {
			break
		}
		t.invalidate(nil, []byte(name))
	}
}

// trackWrite signals a write of key to the tracking clients; by is the
// call that wrote (nil: the server, as the expiry cycle).
func (s *Server) trackWrite(by *call, key []byte) {
	t := &s.trk
	if !t.active.Load() || by != nil && by.noTrack {
		return
	}
	var writer *conn
	if by != nil {
		writer = by.cl
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for p, bs := range t.prefixes {
		if bytes.HasPrefix(key, []byte(p)) {
			bs.keys[string(key)] = writer
			t.pending = true
		}
	}
	t.invalidate(writer, key)
	if by == nil {
		t.broadcast()
	}
	t.setActive()
}

// invalidate tells key's readers and forgets it (mu held).
func (t *tracker) invalidate(writer *conn, key []byte) {
	ids, ok := t.keys[string(key)]
	if !ok {
		return
	}
	var msg []byte
	for target := range ids {
		f := &target.trk
		if !f.on || f.bcast || f.noloop && target == writer {
			continue
		}
		if msg == nil {
			msg = redcon.AppendBulk(redcon.AppendArray(nil, 1), key)
		}
		target.sendTracking(msg)
	}
	t.items -= len(ids)
	delete(t.keys, string(key))
}

// trackFlushed sends the null invalidation of FLUSHDB, FLUSHALL and
// SWAPDB to every tracking client and empties the table.
func (s *Server) trackFlushed() {
	t := &s.trk
	if !t.active.Load() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for cl := range t.clients {
		if cl.proto3.Load() {
			cl.sendTracking([]byte("_\r\n"))
		} else {
			cl.sendTracking([]byte("$-1\r\n"))
		}
	}
	t.keys, t.items = nil, 0
	t.setActive()
}

// trackBroadcast sends what BCAST clients are owed, at the end of a
// command.
func (s *Server) trackBroadcast() {
	t := &s.trk
	if !t.active.Load() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.broadcast()
}

// broadcast sends each prefix's keys written since the last time to
// its clients, in key order, without the keys a NOLOOP client wrote
// itself (mu held).
func (t *tracker) broadcast() {
	if !t.pending {
		return
	}
	t.pending = false
	for _, bs := range t.prefixes {
		if len(bs.keys) == 0 {
			continue
		}
		names := make([]string, 0, len(bs.keys))
		for k := range bs.keys {
			names = append(names, k)
		}
		slices.Sort(names)
		for cl := range bs.clients {
			var b []byte
			n := 0
			for _, k := range names {
				if cl.trk.noloop && bs.keys[k] == cl {
					continue
				}
				b = redcon.AppendBulkString(b, k)
				n++
			}
			if n > 0 {
				cl.sendTracking(append(redcon.AppendArray(nil, n), b...))
			}
		}
		clear(bs.keys)
	}
}

// sendTracking sends an invalidation whose value (a RESP array of keys,
// or a null) is keys, as Redis's sendTrackingMessage (tracker.mu held).
func (cl *conn) sendTracking(keys []byte) {
	f := &cl.trk
	target, redirected := cl, false
	if f.redirect != 0 {
		if f.redir.closed.Load() {
			f.broken = true
			if q := cl.pushShared.Load(); q != nil && cl.proto3.Load() {
				b := redcon.AppendBulkString([]byte(">2\r\n"), "tracking-redir-broken")
				q.queue(redcon.AppendInt(b, f.redirect))
			}
			return
		}
		target, redirected = f.redir, true
	}
	q := target.pushShared.Load()
	if q == nil {
		return
	}
	var b []byte
	switch {
	case target.proto3.Load():
		b = redcon.AppendBulkString([]byte(">2\r\n"), "invalidate")
	case redirected && target.subscribed():
		b = redcon.AppendBulkString(redcon.AppendBulkString([]byte("*3\r\n"), "message"), trackingChannel)
	default:
		return // RESP2 has no pushes on the connection itself
	}
	q.queue(append(b, keys...))
}

// disableTracking turns cl's tracking off (CLIENT TRACKING OFF, RESET,
// and its end). The keys it read stay in the table, as in Redis, until
// written.
func (s *Server) disableTracking(cl *conn) {
	t := &s.trk
	if !cl.tracking.Load() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range cl.trk.prefixes {
		if bs := t.prefixes[p]; bs != nil {
			delete(bs.clients, cl)
			if len(bs.clients) == 0 {
				delete(t.prefixes, p)
			}
		}
	}
	delete(t.clients, cl)
	cl.trk = trackState{}
	cl.tracking.Store(false)
	t.setActive()
}

// afterTracked ends CLIENT CACHING's effect: it lasts one command, or
// one transaction (Redis's resetClient).
func (s *Server) afterTracked(c *call) {
	if !c.cl.tracking.Load() || c.cl.multi || c.e == nil || c.e.name == "client" {
		return
	}
	s.trk.mu.Lock()
	c.cl.trk.caching = false
	s.trk.mu.Unlock()
}

// readTracked reports whether command e's keys are remembered for a
// tracking client: a read-only command, but not the read-only scripts
// (a script's reads remember its keys, scriptCommand).
func readTracked(e *entry) bool {
	switch e.name {
	case "eval_ro", "evalsha_ro", "fcall_ro":
		return false
	}
	return slices.Contains(e.flags, "readonly") && !slices.Contains(e.flags, "pubsub")
}

// connByID finds a connection by its CLIENT ID.
func (s *Server) connByID(id int64) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	for cl := range s.conns {
		if cl.id == id {
			return cl
		}
	}
	return nil
}

// clientTracking serves the tracking subcommands of CLIENT; false for
// another.
func (c *call) clientTracking(sub string) bool {
	switch sub {
	case "tracking":
		if len(c.args) < 3 {
			c.arityError("client|tracking")
			return true
		}
		c.clientTrackingOnOff()
	case "caching":
		if len(c.args) != 3 {
			c.arityError("client|caching")
			return true
		}
		c.clientCaching()
	case "trackinginfo":
		if len(c.args) != 2 {
			c.arityError("client|trackinginfo")
			return true
		}
		c.trackingInfo()
	case "getredir":
		if len(c.args) != 2 {
			c.arityError("client|getredir")
			return true
		}
		t := &c.s.trk
		t.mu.Lock()
		redir := int64(-1)
		if c.cl.trk.on {
			redir = c.cl.trk.redirect
		}
		t.mu.Unlock()
		c.w.WriteInt(int(redir))
	default:
		return false
	}
	return true
}

// clientTrackingOnOff is CLIENT TRACKING ON|OFF [REDIRECT id] [BCAST]
// [PREFIX p]... [OPTIN] [OPTOUT] [NOLOOP], with Redis's checks in its
// order.
func (c *call) clientTrackingOnOff() {
	var opt trackState
	var redir *conn
	var prefixes []string
	for j := 3; j < len(c.args); j++ {
		more := len(c.args) - 1 - j
		switch upper(c.args[j]) {
		case "REDIRECT":
			if more == 0 {
				c.syntaxError()
				return
			}
			j++
			if opt.redirect != 0 {
				c.error("ERR A client can only redirect to a single other client")
				return
			}
			id, err := strconv.ParseInt(string(c.args[j]), 10, 64)
			if err != nil {
				c.error(errNotInt)
				return
			}
			if redir = c.s.connByID(id); redir == nil {
				c.error("ERR The client ID you want redirect to does not exist")
				return
			}
			redir.wantPush.Store(true)
			opt.redirect = id
		case "BCAST":
			opt.bcast = true
		case "OPTIN":
			opt.optin = true
		case "OPTOUT":
			opt.optout = true
		case "NOLOOP":
			opt.noloop = true
		case "PREFIX":
			if more == 0 {
				c.syntaxError()
				return
			}
			j++
			prefixes = append(prefixes, string(c.args[j]))
		default:
			c.syntaxError()
			return
		}
	}
	t := &c.s.trk
	switch upper(c.args[2]) {
	case "ON":
	case "OFF":
		c.s.disableTracking(c.cl)
		c.ok()
		return
	default:
		c.syntaxError()
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	f := &c.cl.trk
	switch {
	case !opt.bcast && len(prefixes) > 0:
		c.error("ERR PREFIX option requires BCAST mode to be enabled")
		return
	case f.on && f.bcast != opt.bcast:
		c.error("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.")
		return
	case opt.bcast && (opt.optin || opt.optout):
		c.error("ERR OPTIN and OPTOUT are not compatible with BCAST")
		return
	case opt.optin && opt.optout:
		c.error("ERR You can't specify both OPTIN mode and OPTOUT mode")
		return
	case opt.optin && f.optout || opt.optout && f.optin:
		c.error("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.")
		return
	}
	if opt.bcast {
		if msg := prefixCollision(f.prefixes, prefixes); msg != "" {
			c.error(msg)
			return
		}
	}
	c.cl.startPush()
	if t.clients == nil {
		t.clients = map[*conn]struct{}{}
		t.prefixes = map[string]*bcastState{}
	}
	t.clients[c.cl] = struct{}{}
	f.on, f.bcast, f.optin, f.optout, f.noloop, f.broken = true, opt.bcast, opt.optin, opt.optout, opt.noloop, false
	f.redirect, f.redir = opt.redirect, redir
	if opt.bcast && len(prefixes) == 0 {
		prefixes = []string{""}
	}
	for _, p := range prefixes {
		bs := t.prefixes[p]
		if bs == nil {
			bs = &bcastState{clients: map[*conn]struct{}{}, keys: map[string]*conn{}}
			t.prefixes[p] = bs
		}
		if _, ok := bs.clients[c.cl]; !ok {
			bs.clients[c.cl] = struct{}{}
			f.prefixes = append(f.prefixes, p)
		}
	}
	slices.Sort(f.prefixes)
	c.cl.tracking.Store(true)
	t.setActive()
	c.ok()
}

// prefixCollision is Redis's error for BCAST prefixes of which one is a
// prefix of another, among those given or with those the client has;
// "" when none is.
func prefixCollision(have, given []string) string {
	overlap := func(a, b string) bool { return strings.HasPrefix(a, b) || strings.HasPrefix(b, a) }
	for i, p := range given {
		for _, h := range have {
			if overlap(p, h) {
				return fmt.Sprintf("ERR Prefix '%s' overlaps with an existing prefix '%s'. Prefixes for a single client must not overlap.", p, h)
			}
		}
		for _, q := range given[i+1:] {
			if overlap(p, q) {
				return fmt.Sprintf("ERR Prefix '%s' overlaps with another provided prefix '%s'. Prefixes for a single client must not overlap.", p, q)
			}
		}
	}
	return ""
}

// clientCaching is CLIENT CACHING YES|NO.
func (c *call) clientCaching() {
	t := &c.s.trk
	t.mu.Lock()
	defer t.mu.Unlock()
	f := &c.cl.trk
	if !f.on {
		c.error("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled")
		return
	}
	switch upper(c.args[2]) {
	case "YES":
		if !f.optin {
			c.error("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.")
			return
		}
	case "NO":
		if !f.optout {
			c.error("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.")
			return
		}
	default:
		c.syntaxError()
		return
	}
	f.caching = true
	c.ok()
}

// trackingInfo is CLIENT TRACKINGINFO.
func (c *call) trackingInfo() {
	t := &c.s.trk
	t.mu.Lock()
	f := c.cl.trk
	f.prefixes = slices.Clone(f.prefixes)
	t.mu.Unlock()
	flags := []string{"off"}
	if f.on {
		flags[0] = "on"
	}
	add := func(on bool, flag string) {
		if on {
			flags = append(flags, flag)
		}
	}
	add(f.bcast, "bcast")
	add(f.optin, "optin")
	add(f.optin && f.caching, "caching-yes")
	add(f.optout, "optout")
	add(f.optout && f.caching, "caching-no")
	add(f.noloop, "noloop")
	add(f.broken, "broken_redirect")
	c.w.WriteMap(3)
	c.w.WriteBulkString("flags")
	c.w.WriteSet(len(flags))
	for _, fl := range flags {
		c.w.WriteBulkString(fl)
	}
	c.w.WriteBulkString("redirect")
	if f.on {
		c.w.WriteInt(int(f.redirect))
	} else {
		c.w.WriteInt(-1)
	}
	c.w.WriteBulkString("prefixes")
	c.w.WriteArray(len(f.prefixes))
	for _, p := range f.prefixes {
		c.w.WriteBulkString(p)
	}
}

// trackingStats are INFO's tracking_total_keys, _items and _prefixes,
// and tracking_clients.
func (s *Server) trackingStats() (keys, items, prefixes, clients int) {
	t := &s.trk
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.keys), t.items, len(t.prefixes), len(t.clients)
}

// setTrackingMax is CONFIG SET tracking-table-max-keys.
func (s *Server) setTrackingMax(n int64) {
	t := &s.trk
	t.mu.Lock()
	defer t.mu.Unlock()
	t.maxKeys = n
	t.limit()
	t.setActive()
}
