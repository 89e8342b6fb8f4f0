package server

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvarray/kvarray/acl"
)

// MONITOR: a connection that sends it gets every command the server runs
// afterwards, as Redis's status line `+<unix time> [<db> <client>]
// "arg" ...`, through its push queue (pubsub.go): a monitor that does
// not read is closed at the pub/sub output limits, so it holds bounded
// memory, and a command never waits for it. Admin commands are not
// shown (Redis's rule), AUTH's and HELLO's passwords are redacted; the
// commands of a transaction are shown one by one before their EXEC, a
// script's after its EVAL or FCALL (as from "lua"), as Redis 7.0 shows
// them.

// monitors are the monitoring connections.
type monitors struct {
	mu  sync.Mutex
	set map[*conn]struct{}
	n   atomic.Int32
}

func init() {
	commands = append(commands, &command{name: "monitor", arity: 1, flags: []string{"admin", "noscript", "loading", "stale"},
		acl: []string{"admin", "slow", "dangerous"}, group: "server", since: "1.0.0",
		summary: "Streams every command the server runs to the client.", complexity: "N/A", run: cmdMonitor, noTx: true})
}

// has reports whether cl is monitoring.
func (m *monitors) has(cl *conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.set[cl]
	return ok
}

// monitoring reports whether a command's name (any case) is MONITOR,
// which runs with the write lock (serveRESP): its OK goes out before
// the first line.
func monitoring(name []byte) bool { return len(name) == 7 && lowerASCII(name) == "monitor" }

func cmdMonitor(c *call) {
	cl := c.cl
	cl.startPush()
	m := &c.s.mon
	m.mu.Lock()
	if m.set == nil {
		m.set = map[*conn]struct{}{}
	}
	if _, ok := m.set[cl]; !ok {
		m.set[cl] = struct{}{}
		m.n.Add(1)
	}
	m.mu.Unlock()
	c.ok()
}

// feedMonitors shows c's command to the monitors after it ran, as Redis
// does; a script's (skip_monitor: EVAL, EVALSHA, FCALL and their _RO)
// was shown before it ran (feedMonitorsFirst), so that the commands it
// runs follow it.
func (s *Server) feedMonitors(c *call) {
	if s.mon.n.Load() == 0 || c.e == nil || c.e.skipMonitor() {
		return
	}
	s.showMonitors(c)
}

// feedMonitorsFirst shows a script's command before it runs.
func (s *Server) feedMonitorsFirst(c *call) {
	if s.mon.n.Load() == 0 || !c.e.skipMonitor() {
		return
	}
	s.showMonitors(c)
}

func (s *Server) showMonitors(c *call) {
	if c.e.admin() || c.e.name == "monitor" {
		return
	}
	// A container's subcommand is admin in Redis's table (CONFIG SET).
	if cmd := s.acl.Table().Resolve(c.args); cmd != nil && cmd.Categories&acl.CatAdmin != 0 {
		return
	}
	now := time.Now()
	b := []byte{'+'}
	b = strconv.AppendInt(b, now.Unix(), 10)
	from := c.cl.addr
	if c.inScript() {
		from = "lua"
	}
	b = append(b, fmt.Sprintf(".%06d [%d %s]", now.Nanosecond()/1000, c.cl.db, from)...)
	for i, a := range c.args {
		b = append(b, ' ')
		if i > 0 && redacted(c.e.name, c.args, i) {
			b = append(b, "\"(redacted)\""...)
			continue
		}
		b = appendRepr(b, a)
	}
	b = append(b, '\r', '\n')
	s.mon.mu.Lock()
	defer s.mon.mu.Unlock()
	for cl := range s.mon.set {
		if !cl.push.queue(b) {
			delete(s.mon.set, cl)
			s.mon.n.Add(-1)
		}
	}
}

// redacted reports whether args[i] is a password Redis hides from
// monitors: AUTH's arguments, HELLO AUTH's username and password.
func redacted(name string, args [][]byte, i int) bool {
	switch name {
	case "auth":
		return true
	case "hello":
		for j := 2; j+2 < len(args); j++ {
			if lowerASCII(args[j]) == "auth" && (i == j+1 || i == j+2) {
				return true
			}
		}
	}
	return false
}

// appendRepr is Redis's sdscatrepr: quoted, with \\, \", \n, \r, \t,
// \a, \b escaped and other unprintable bytes as \xhh.
func appendRepr(b, s []byte) []byte {
	b = append(b, '"')
	for _, ch := range s {
		switch ch {
		case '\\', '"':
			b = append(b, '\\', ch)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\a':
			b = append(b, '\\', 'a')
		case '\b':
			b = append(b, '\\', 'b')
		default:
			if ch >= 0x20 && ch < 0x7f {
				b = append(b, ch)
			} else {
				b = append(b, fmt.Sprintf("\\x%02x", ch)...)
			}
		}
	}
	return append(b, '"')
}

// inScript reports whether c is a command a script called (the only
// calls with a transaction and no connection to reply on).
func (c *call) inScript() bool { return c.rc == nil && c.tx != nil }
