package server

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/tidwall/redcon"

	"github.com/kvarray/kvarray/acl"
	"github.com/kvarray/kvarray/pubsub"
)

// Pub/sub (SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE and their UNSUBSCRIBEs,
// PUBLISH, SPUBLISH, PUBSUB), with Redis 7's replies in RESP2 and RESP3.
// Subscriptions live in the server's pubsub.Hub; the messages it delivers
// to a connection go to the connection's push queue, which a writer
// goroutine of its own sends:
//
//   - A publisher never blocks on a subscriber: Deliver appends to the
//     queue and returns. A queue over Redis's pubsub output limits (32 MiB
//     at once, or 8 MiB for 60 s) ends its connection, as Redis does, so a
//     stalled subscriber holds bounded memory.
//   - Messages never land inside a reply: once a connection has a push
//     queue, its commands run with the connection's write lock (wmu) held
//     and their replies are flushed before it is released, and the writer
//     sends only with wmu held. A SUBSCRIBE's confirmation therefore goes
//     out before any message of the channel it subscribed to, and a
//     command first sends the messages queued before it (drain): they
//     precede its reply, as in Redis.
//   - Pub/sub is not persisted: it is delivery to connected clients, as in
//     Redis; messages published while nobody listens are gone.

// Redis's client-output-buffer-limit for pubsub clients.
const (
	pushHardLimit = 32 << 20
	pushSoftLimit = 8 << 20
	pushSoftFor   = 60 * time.Second
)

// pushKeep is the largest buffer a subscriber's writer keeps for the next
// messages: one that a burst grew larger is dropped once sent, so that a
// thousand subscribers that once fell behind do not each hold their
// burst's buffer for good.
const pushKeep = 64 << 10

// pushQueue is a connection's outgoing messages (see above).
type pushQueue struct {
	cl      *conn
	mu      sync.Mutex
	wake    *sync.Cond
	buf     []byte
	sending int       // bytes being written by run
	softAt  time.Time // when the queue went over the soft limit; zero: under it
	closed  bool
}

// subs are a connection's subscriptions by kind (conn.subsMu).
type subs [pubsub.NumKinds]map[string]struct{}

// count is what a (un)subscribe confirmation reports: channels and
// patterns together, shard channels apart, as Redis counts them.
func (s *subs) count(kind pubsub.Kind) int {
	if kind == pubsub.Shard {
		return len(s[pubsub.Shard])
	}
	return len(s[pubsub.Channel]) + len(s[pubsub.Pattern])
}

// subCount is the number of the connection's subscriptions of every
// kind, for any goroutine.
func (cl *conn) subCount() int {
	cl.subsMu.Lock()
	defer cl.subsMu.Unlock()
	s := &cl.subs
	return len(s[pubsub.Channel]) + len(s[pubsub.Pattern]) + len(s[pubsub.Shard])
}

// subscribed reports whether cl has any subscription (RESP2's
// subscribed mode).
func (cl *conn) subscribed() bool {
	if cl.push == nil {
		return false
	}
	cl.subsMu.Lock()
	defer cl.subsMu.Unlock()
	s := &cl.subs
	return len(s[pubsub.Channel])+len(s[pubsub.Pattern])+len(s[pubsub.Shard]) > 0
}

// startPush gives cl its push queue and writer, once.
func (cl *conn) startPush() {
	if cl.push != nil {
		return
	}
	q := &pushQueue{cl: cl}
	q.wake = sync.NewCond(&q.mu)
	cl.push = q
	cl.pushShared.Store(q)
	go q.run()
}

// Deliver queues a message for the connection (pubsub.Subscriber),
// encoded once per protocol for all its subscribers (m.Encoded).
func (cl *conn) Deliver(m *pubsub.Message) {
	proto := 0
	if cl.proto3.Load() {
		proto = 1
	}
	b := m.Encoded[proto]
	if b == nil {
		b = encodeMessage(m, proto == 1)
		m.Encoded[proto] = b
	}
	cl.push.queue(b)
}

// encodeMessage is a pub/sub message as Redis sends it: a push (RESP3) or
// an array (RESP2) of its kind, the pattern that matched, the channel and
// the payload.
func encodeMessage(m *pubsub.Message, proto3 bool) []byte {
	b := make([]byte, 0, 48+len(m.Pattern)+len(m.Channel)+len(m.Payload))
	head := byte('*')
	if proto3 {
		head = '>'
	}
	switch m.Kind {
	case pubsub.Pattern:
		b = append(b, head, '4', '\r', '\n')
		b = redcon.AppendBulkString(b, "pmessage")
		b = redcon.AppendBulk(b, m.Pattern)
	case pubsub.Shard:
		b = append(b, head, '3', '\r', '\n')
		b = redcon.AppendBulkString(b, "smessage")
	default:
		b = append(b, head, '3', '\r', '\n')
		b = redcon.AppendBulkString(b, "message")
	}
	b = redcon.AppendBulk(b, m.Channel)
	return redcon.AppendBulk(b, m.Payload)
}

// queue appends b to the queue; false when the queue is closed (its
// connection ended, or over the limits now). It wakes the writer only
// when the queue was empty: otherwise a wake is on its way already, and
// what is queued meanwhile goes out in the same write.
func (q *pushQueue) queue(b []byte) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	wasEmpty := len(q.buf) == 0
	q.buf = append(q.buf, b...)
	held := len(q.buf) + q.sending
	switch {
	case held > pushHardLimit:
		q.overLimit("%d bytes of messages wait for it, over the hard limit of %d", held, pushHardLimit)
		return false
	case held > pushSoftLimit && q.softAt.IsZero():
		q.softAt = time.Now()
	case held > pushSoftLimit && time.Since(q.softAt) > pushSoftFor:
		q.overLimit("over %d bytes of messages have waited for it for %v", pushSoftLimit, pushSoftFor)
		return false
	case held <= pushSoftLimit:
		q.softAt = time.Time{}
	}
	if wasEmpty {
		q.wake.Signal()
	}
	return true
}

// overLimit ends a subscriber that does not read (q.mu held).
func (q *pushQueue) overLimit(format string, args ...any) {
	q.closed, q.buf = true, nil
	q.wake.Signal()
	q.cl.s.o.errorLog.Printf("kvarray server: closing subscriber %s (id %d): %s", q.cl.addr, q.cl.id, fmt.Sprintf(format, args...))
	q.cl.Conn.Close()
}

// run sends the queue until it is closed. It takes the queue's bytes
// only with the write lock held, so that drain, which a command runs
// with that lock, never sends newer messages before older ones.
func (q *pushQueue) run() {
	var b []byte
	for {
		q.mu.Lock()
		q.sending = 0
		for len(q.buf) == 0 && !q.closed {
			q.wake.Wait()
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return
		}
		q.cl.wmu.Lock()
		q.mu.Lock()
		b, q.buf = q.buf, b[:0]
		q.sending = len(b)
		q.mu.Unlock()
		var err error
		if len(b) > 0 {
			_, err = q.cl.Conn.Write(b)
		}
		q.cl.wmu.Unlock()
		if err != nil {
			q.stop()
			q.cl.Conn.Close()
			return
		}
		if cap(b) > pushKeep {
			b = nil // a burst's buffer is not kept for the next
		}
	}
}

// drain sends what the queue holds now; the caller holds the write lock.
// A command runs it first, so that the messages queued before it (an
// invalidation another client's write caused) go out before its reply,
// as from Redis's output buffer.
func (q *pushQueue) drain() {
	q.mu.Lock()
	if q.closed || len(q.buf) == 0 {
		q.mu.Unlock()
		return
	}
	b := q.buf
	q.buf = nil
	q.sending = len(b)
	q.mu.Unlock()
	_, err := q.cl.Conn.Write(b)
	q.mu.Lock()
	q.sending = 0
	q.mu.Unlock()
	if err != nil {
		q.stop()
		q.cl.Conn.Close()
	}
}

// stop ends the writer; what it holds is dropped.
func (q *pushQueue) stop() {
	q.mu.Lock()
	q.closed, q.buf = true, nil
	q.wake.Signal()
	q.mu.Unlock()
}

// pubsubKind is the kind a (un)subscribe command works on, and its
// confirmation's name.
func pubsubKind(name string) (pubsub.Kind, bool) {
	switch name {
	case "subscribe", "unsubscribe":
		return pubsub.Channel, true
	case "psubscribe", "punsubscribe":
		return pubsub.Pattern, true
	case "ssubscribe", "sunsubscribe":
		return pubsub.Shard, true
	}
	return 0, false
}

// subscribing reports whether a command's name (any case) is one of the
// subscribe commands, which run with the write lock (serveRESP) before the
// connection has a push queue.
func subscribing(name []byte) bool {
	if len(name) < 9 || len(name) > 10 {
		return false
	}
	_, ok := pubsubKind(lowerASCII(name))
	return ok
}

func lowerASCII(b []byte) string {
	out := make([]byte, len(b))
	for i, ch := range b {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		out[i] = ch
	}
	return string(out)
}

// writePush starts a push (RESP3) or an array (RESP2) of n elements.
func (w *respWriter) writePush(n int) {
	if w.resp3() {
		w.emit(func(b []byte) []byte { return append(strconv.AppendInt(append(b, '>'), int64(n), 10), '\r', '\n') })
		return
	}
	w.WriteArray(n)
}

// confirm writes one (un)subscribe confirmation. It is a push, as in
// Redis: sent even under CLIENT REPLY OFF or SKIP.
func (c *call) confirm(what string, name []byte, count int) {
	w := c.w
	if w.rc == nil && c.rc != nil { // silenced (subscribe commands never run collected)
		w = &respWriter{rc: c.rc, proto: c.w.proto, cl: c.cl}
	}
	w.writePush(3)
	w.WriteBulkString(what)
	if name == nil {
		w.WriteNull()
	} else {
		w.WriteBulk(name)
	}
	w.WriteInt(count)
}

// cmdSubscribe serves SUBSCRIBE, PSUBSCRIBE and SSUBSCRIBE.
func cmdSubscribe(c *call) {
	kind, _ := pubsubKind(c.e.name)
	cl := c.cl
	cl.startPush()
	cl.subsMu.Lock()
	defer cl.subsMu.Unlock()
	if cl.subs[kind] == nil {
		cl.subs[kind] = map[string]struct{}{}
	}
	for _, name := range c.args[1:] {
		if c.s.hub.Subscribe(cl, kind, string(name)) {
			cl.subs[kind][string(name)] = struct{}{}
		}
		c.confirm(c.e.name, name, cl.subs.count(kind))
	}
}

// cmdUnsubscribe serves UNSUBSCRIBE, PUNSUBSCRIBE and SUNSUBSCRIBE: of the
// names given, or of every subscription of the kind.
func cmdUnsubscribe(c *call) {
	kind, _ := pubsubKind(c.e.name)
	cl := c.cl
	cl.subsMu.Lock()
	defer cl.subsMu.Unlock()
	names := c.args[1:]
	if len(names) == 0 {
		for name := range cl.subs[kind] {
			names = append(names, []byte(name))
		}
		if len(names) == 0 {
			c.confirm(c.e.name, nil, cl.subs.count(kind))
			return
		}
	}
	for _, name := range names {
		c.s.hub.Unsubscribe(cl, kind, string(name))
		delete(cl.subs[kind], string(name))
		c.confirm(c.e.name, name, cl.subs.count(kind))
	}
}

// unsubscribeAll ends every subscription of cl (RESET, and its end, which
// may run on another goroutine).
func (s *Server) unsubscribeAll(cl *conn) {
	cl.subsMu.Lock()
	defer cl.subsMu.Unlock()
	for kind := range cl.subs {
		for name := range cl.subs[kind] {
			s.hub.Unsubscribe(cl, pubsub.Kind(kind), name)
		}
		cl.subs[kind] = nil
	}
}

// cmdPublish serves PUBLISH and SPUBLISH: the number of deliveries.
func cmdPublish(c *call) {
	kind := pubsub.Channel
	if c.e.name == "spublish" {
		kind = pubsub.Shard
	}
	c.w.WriteInt(c.s.hub.Publish(kind, c.args[1], c.args[2]))
}

// cmdPubsub: PUBSUB CHANNELS | NUMSUB | NUMPAT | SHARDCHANNELS |
// SHARDNUMSUB | HELP.
func cmdPubsub(c *call) {
	sub := lowerASCII(truncate(c.args[1], 32))
	switch sub {
	case "channels", "shardchannels":
		if len(c.args) > 3 {
			c.arityError("pubsub|" + sub)
			return
		}
		kind := pubsub.Channel
		if sub == "shardchannels" {
			kind = pubsub.Shard
		}
		var pattern []byte
		if len(c.args) == 3 {
			pattern = c.args[2]
		}
		names := c.s.hub.Names(kind, pattern)
		c.w.WriteArray(len(names))
		for _, n := range names {
			c.w.WriteBulkString(n)
		}
	case "numsub", "shardnumsub":
		kind := pubsub.Channel
		if sub == "shardnumsub" {
			kind = pubsub.Shard
		}
		c.w.WriteMap(len(c.args) - 2)
		for _, ch := range c.args[2:] {
			c.w.WriteBulk(ch)
			c.w.WriteInt(c.s.hub.Count(kind, string(ch)))
		}
	case "numpat":
		if len(c.args) != 2 {
			c.arityError("pubsub|numpat")
			return
		}
		c.w.WriteInt(c.s.hub.Patterns())
	case "help":
		c.lines([]string{"PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"CHANNELS [<pattern>]", "    Return the currently active channels matching a <pattern> (default: '*').",
			"NUMPAT", "    Return number of subscriptions to patterns.",
			"NUMSUB [<channel> ...]", "    Return the number of subscribers for the specified channels, excluding",
			"    pattern subscriptions(default: no channels).",
			"SHARDCHANNELS [<pattern>]", "    Return the currently active shard level channels matching a <pattern> (default: '*').",
			"SHARDNUMSUB [<shardchannel> ...]", "    Return the number of subscribers for the specified shard level channel(s)",
			"HELP", "    Prints this help."})
	default:
		c.unknownSubcommand("pubsub")
	}
}

// allowedSubscribed are the commands a RESP2 connection with
// subscriptions may run (Redis: the others would read as messages).
var allowedSubscribed = map[string]bool{"subscribe": true, "unsubscribe": true, "psubscribe": true, "punsubscribe": true,
	"ssubscribe": true, "sunsubscribe": true, "ping": true, "quit": true, "reset": true}

// subscribedRefusal is Redis's error for another command in that state.
func subscribedRefusal(name string) string {
	return fmt.Sprintf("ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context", name)
}

// pubsubCommands are the command table's rows for pub/sub.
var pubsubCommands = []*command{
	subRow("subscribe", "Listens for messages published to channels.", "channel"),
	subRow("psubscribe", "Listens for messages published to channels that match one or more patterns.", "pattern"),
	subRow("ssubscribe", "Listens for messages published to shard channels.", "shardchannel"),
	unsubRow("unsubscribe", "Stops listening to messages posted to channels.", "channel"),
	unsubRow("punsubscribe", "Stops listening to messages published to channels that match one or more patterns.", "pattern"),
	unsubRow("sunsubscribe", "Stops listening to messages posted to shard channels.", "shardchannel"),
	{name: "publish", arity: 3, flags: []string{"pubsub", "loading", "stale", "fast", "may_replicate"}, acl: []string{"pubsub", "fast"},
		group: "pubsub", since: "2.0.0", summary: "Posts a message to a channel.", complexity: "O(N+M) where N is the number of clients subscribed to the receiving channel and M is the total number of subscribed patterns (by any client).",
		args: []arg{strArg("channel"), strArg("message")}, run: cmdPublish},
	{name: "spublish", arity: 3, flags: []string{"pubsub", "loading", "stale", "fast", "may_replicate"}, first: 1, last: 1, step: 1, acl: []string{"pubsub", "fast"},
		group: "pubsub", since: "7.0.0", summary: "Post a message to a shard channel", complexity: "O(N) where N is the number of clients subscribed to the receiving shard channel.",
		args: []arg{strArg("shardchannel"), strArg("message")}, run: cmdPublish},
	{name: "pubsub", arity: -2, flags: []string{"pubsub", "loading", "stale"}, acl: []string{"pubsub", "slow"}, group: "pubsub", since: "2.8.0",
		summary: "A container for Pub/Sub commands: CHANNELS, NUMSUB, NUMPAT, SHARDCHANNELS, SHARDNUMSUB, HELP.", complexity: "Depends on subcommand.",
		args: []arg{strArg("subcommand"), optional(multiple(strArg("arg")))}, run: cmdPubsub},
}

func subRow(name, summary, what string) *command {
	since := "2.0.0"
	if name[0] == 's' {
		since = "7.0.0"
	}
	return &command{name: name, arity: -2, flags: []string{"pubsub", "noscript", "loading", "stale"}, acl: []string{"pubsub", "slow"},
		group: "pubsub", since: since, summary: summary, complexity: "O(N) where N is the number of channels to subscribe to.",
		args: []arg{multiple(strArg(what))}, run: cmdSubscribe, noTx: true}
}

func unsubRow(name, summary, what string) *command {
	since := "2.0.0"
	if name[0] == 's' {
		since = "7.0.0"
	}
	return &command{name: name, arity: -1, flags: []string{"pubsub", "noscript", "loading", "stale"}, acl: []string{"pubsub", "slow"},
		group: "pubsub", since: since, summary: summary, complexity: "O(N) where N is the number of channels to unsubscribe.",
		args: []arg{optional(multiple(strArg(what)))}, run: cmdUnsubscribe, noTx: true}
}

func init() { commands = append(commands, pubsubCommands...) }

// killRevokedSubscribers closes the connections subscribed to a channel
// or pattern their user may no longer use (after ACL SETUSER or LOAD), as
// Redis's ACLKillPubsubClientsIfNeeded: a subscription stays only while
// the SUBSCRIBE that made it would be allowed. The calling connection, if
// it is one, is closed after its reply.
func (s *Server) killRevokedSubscribers(c *call) {
	s.mu.Lock()
	conns := s.connList()
	s.mu.Unlock()
	verbs := [pubsub.NumKinds]string{pubsub.Channel: "subscribe", pubsub.Pattern: "psubscribe", pubsub.Shard: "ssubscribe"}
	for _, cl := range conns {
		u := cl.user.Load()
		if u == nil || cl.push == nil || isAdminConn(cl.Conn) {
			continue
		}
		revoked := false
		cl.subsMu.Lock()
		for kind, names := range cl.subs {
			for name := range names {
				args := [][]byte{[]byte(verbs[kind]), []byte(name)}
				if r, _, _ := s.check(cl, u, args); r != acl.Allowed {
					revoked = true
				}
			}
		}
		cl.subsMu.Unlock()
		switch {
		case !revoked:
		case cl == c.cl:
			c.cl.quit = true
			c.rc.ReadPipeline()
			c.rc.Close()
		default:
			cl.Close() // gone from CLIENT LIST at once
		}
	}
}
