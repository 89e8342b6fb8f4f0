package server

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kvarray/kvarray/acl"
)

// CLIENT REPLY modes.
const (
	replyOn = iota
	replyOff
	replySkip
)

// pause is a CLIENT PAUSE in force.
type pause struct {
	until  time.Time
	writes bool // only write commands wait
}

// clientListFilter parses CLIENT LIST's [TYPE t] [ID id...]: the ids to
// list, nil for all.
func (c *call) clientListFilter() (clientFilter, bool) {
	var f clientFilter
	for i := 2; i < len(c.args); i++ {
		switch upper(c.args[i]) {
		case "TYPE":
			if i+1 >= len(c.args) {
				c.syntaxError()
				return f, false
			}
			i++
			if f.typ = c.clientTypeArg(c.args[i]); f.typ == "" {
				return f, false
			}
		case "ID":
			if i+1 >= len(c.args) {
				c.syntaxError()
				return f, false
			}
			if f.ids == nil {
				f.ids = map[int64]bool{}
			}
			for i+1 < len(c.args) {
				id, err := parseInt(c.args[i+1])
				if err != nil || id <= 0 {
					c.error("ERR Invalid client ID")
					return f, false
				}
				f.ids[id] = true
				i++
			}
		default:
			c.syntaxError()
			return f, false
		}
	}
	return f, true
}

// clientFilter is CLIENT LIST's choice: the connections of these ids
// (nil: any) of this type ("": any).
type clientFilter struct {
	ids map[int64]bool
	typ string
}

func (f clientFilter) match(s *Server, cl *conn) bool {
	return (f.ids == nil || f.ids[cl.id]) && (f.typ == "" || s.clientType(cl) == f.typ)
}

// clientTypeArg parses a TYPE argument (normal, master, replica or its
// old name slave, pubsub), replying with Redis's error to another.
func (c *call) clientTypeArg(a []byte) string {
	switch t := strings.ToLower(string(a)); t {
	case "normal", "master", "replica", "pubsub":
		return t
	case "slave":
		return "replica"
	}
	c.error(fmt.Sprintf("ERR Unknown client type '%s'", truncate(a, 64)))
	return ""
}

// clientType is a connection's type as CLIENT LIST and CLIENT KILL TYPE
// see it: the replication link to this server's master, a replica's
// connection (it sent SYNC), a subscriber, or normal.
func (s *Server) clientType(cl *conn) string { return clientTypeOf(cl, cl.subCount()) }

// clientTypeOf is clientType for a connection of subs subscriptions.
func clientTypeOf(cl *conn, subs int) string {
	switch {
	case cl.master:
		return "master"
	case cl.replicaLink.Load():
		return "replica"
	case subs > 0:
		return "pubsub"
	}
	return "normal"
}

// clientKill: CLIENT KILL ip:port (old form, OK or an error) or CLIENT
// KILL with filters (the number killed).
func (c *call) clientKill() {
	if len(c.args) < 3 {
		c.arityError("client|kill")
		return
	}
	var id int64
	var addr, laddr, userName, typ string
	skipMe, oldForm := true, len(c.args) == 3
	if oldForm {
		addr = string(c.args[2])
	} else {
		if len(c.args)%2 != 0 {
			c.syntaxError()
			return
		}
		for i := 2; i < len(c.args); i += 2 {
			v := string(c.args[i+1])
			switch upper(c.args[i]) {
			case "ID":
				n, err := parseInt([]byte(v))
				if err != nil || n <= 0 {
					c.error("ERR client-id should be greater than 0")
					return
				}
				id = n
			case "ADDR":
				addr = v
			case "LADDR":
				laddr = v
			case "TYPE":
				if typ = c.clientTypeArg(c.args[i+1]); typ == "" {
					return
				}
			case "USER":
				if c.s.acl.User(v) == nil {
					c.error(fmt.Sprintf("ERR No such user '%s'", truncate(c.args[i+1], 64)))
					return
				}
				userName = v
			case "SKIPME":
				switch strings.ToLower(v) {
				case "yes":
					skipMe = true
				case "no":
					skipMe = false
				default:
					c.syntaxError()
					return
				}
			default:
				c.syntaxError()
				return
			}
		}
	}
	c.s.mu.Lock()
	conns := c.s.connList()
	c.s.mu.Unlock()
	// A user reaches other users' connections only if it may also list
	// them (CLIENT LIST, an @admin command): a data user must not end the
	// admin's (or another application's) sessions.
	me := c.s.who(c.cl)
	r, _, _ := c.s.check(c.cl, me, [][]byte{[]byte("client"), []byte("list")})
	mayOthers := r == acl.Allowed
	killed := 0
	for _, cl := range conns {
		if id != 0 && cl.id != id || addr != "" && cl.addr != addr || laddr != "" && cl.laddr != laddr ||
			typ != "" && c.s.clientType(cl) != typ {
			continue
		}
		u := c.s.who(cl)
		if userName != "" && (u == nil || u.Name() != userName) || !mayOthers && u != me {
			continue
		}
		if cl == c.cl {
			if skipMe && !oldForm {
				continue
			}
			// Our own connection: close after this reply.
			c.cl.quit = true
			killed++
			continue
		}
		if !cl.killed.CompareAndSwap(false, true) {
			continue // killed already, its goroutine not yet gone
		}
		cl.Conn.Close()
		killed++
	}
	if oldForm {
		if killed == 0 {
			c.error("ERR No such client")
			return
		}
		c.ok()
	} else {
		c.w.WriteInt(killed)
	}
	if c.cl.quit {
		c.rc.ReadPipeline()
		c.rc.Close()
	}
}

// clientPause: CLIENT PAUSE timeout [WRITE | ALL].
func (c *call) clientPause() {
	if len(c.args) != 3 && len(c.args) != 4 {
		c.arityError("client|pause")
		return
	}
	ms, err := parseInt(c.args[2])
	if err != nil || ms < 0 {
		c.error("ERR timeout is not an integer or out of range")
		return
	}
	writes := false
	if len(c.args) == 4 {
		switch upper(c.args[3]) {
		case "WRITE":
			writes = true
		case "ALL":
		default:
			c.syntaxError()
			return
		}
	}
	c.s.pause.Store(&pause{until: time.Now().Add(time.Duration(ms) * time.Millisecond), writes: writes})
	c.ok()
}

// waitPause holds a command while a CLIENT PAUSE applies to it.
func (s *Server) waitPause(e *entry) {
	for {
		p := s.pause.Load()
		if p == nil || (p.writes && !e.write()) || e.name == "client" {
			return
		}
		d := time.Until(p.until)
		if d <= 0 {
			return
		}
		time.Sleep(min(d, 10*time.Millisecond))
	}
}

// cmdReset: RESET returns the connection to its state at connect.
func cmdReset(c *call) {
	c.cl.endMulti()
	c.s.unwatch(c.cl)
	c.cl.db, c.cl.proto, c.w.proto, c.cl.replyMode = 0, 2, 2, replyOn
	c.cl.proto3.Store(false)
	c.s.unsubscribeAll(c.cl)
	c.s.disableTracking(c.cl)
	c.cl.dbShown.Store(0)
	c.cl.mu.Lock()
	c.cl.name = ""
	c.cl.mu.Unlock()
	c.w.WriteString("RESET")
}

func cmdTime(c *call) {
	now := time.Now()
	c.w.WriteArray(2)
	c.w.WriteBulkString(strconv.FormatInt(now.Unix(), 10))
	c.w.WriteBulkString(strconv.FormatInt(int64(now.Nanosecond()/1000), 10))
}

// cmdWait: WAIT numreplicas timeout: there are no replicas (the array's
// redundancy is synchronous), so 0 at once.
func cmdWait(c *call) {
	// Redis's order: the timeout, then the number of replicas.
	timeout, err := parseInt(c.args[2])
	if err != nil {
		c.error("ERR timeout is not an integer or out of range")
		return
	}
	if timeout < 0 {
		c.error("ERR timeout is negative")
		return
	}
	if _, err := parseInt(c.args[1]); err != nil {
		c.error(errNotInt)
		return
	}
	c.w.WriteInt(0)
}

// cmdReadonly serves READONLY and READWRITE: OK, so that a cluster-aware
// client's connect never fails (there is no cluster).
func cmdReadonly(c *call) { c.ok() }

// cmdSave: every acknowledged write is already on the devices, so SAVE
// has nothing to do (not allowed inside MULTI, as in Redis).

// cmdShutdown: kvarray serve stops on SIGINT or SIGTERM, closing the
// array; SHUTDOWN over the protocol is refused.
func cmdShutdown(c *call) {
	c.error("ERR SHUTDOWN is not supported by kvarray: stop kvarray serve with SIGTERM (it finishes the commands in flight and closes the array)")
}
