package server

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/kvarray/kvarray/internal/glob"
	"github.com/kvarray/kvarray/internal/hll"
	"github.com/kvarray/kvarray/pubsub"
)

// runtimeConfig is what CONFIG SET can change while the server runs.
type runtimeConfig struct {
	maxClients atomic.Int64
	notify     atomic.Uint32 // pubsub.Events: notify-keyspace-events
	// busyMs is busy-reply-threshold (lua-time-limit), in milliseconds.
	busyMs atomic.Int64
	// hllSparse is hll-sparse-max-bytes (hyperloglog.go).
	hllSparse atomic.Int64
	// slow is the slow log and its parameters, latencyThreshold
	// latency-monitor-threshold (introspect.go).
	slow             slowlog
	latencyThreshold atomic.Int64
	// requirepass is CONFIG's requirepass (introspect.go).
	requirepass atomic.Pointer[string]
}

func (rc *runtimeConfig) init(o options) {
	rc.maxClients.Store(int64(o.maxClients))
	rc.busyMs.Store(DefaultBusyThreshold.Milliseconds())
	rc.hllSparse.Store(hll.DefaultSparseMax)
	rc.slow.slower, rc.slow.max = 10000, 128
	rc.requirepass.Store(&o.auth.requirepass)
}

// busyThreshold is busy-reply-threshold and its old name lua-time-limit.
func busyThreshold(name string) param {
	return param{name: name, get: func(s *Server) string { return strconv.FormatInt(s.cfg.busyMs.Load(), 10) },
		set: func(s *Server, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("argument must be between 0 and 9223372036854775807 inclusive")
			}
			s.cfg.busyMs.Store(n)
			return nil
		}}
}

// param is one CONFIG parameter: its value, and how to set it (nil: it
// cannot change at run time).
type param struct {
	name string
	get  func(s *Server) string
	set  func(s *Server, v string) error
}

func constant(v string) func(*Server) string { return func(*Server) string { return v } }

// params are the parameters kvarray has, and the ones tools read at start
// (redis-benchmark asks for save and appendonly), with the values that
// describe kvarray: no snapshots or AOF (the devices are the persistence),
// no eviction.
var params = []param{
	{name: "appendonly", get: constant("no")},
	{name: "save", get: constant("")},
	{name: "databases", get: func(s *Server) string { return strconv.Itoa(s.o.databases) }},
	{name: "maxclients", get: func(s *Server) string { return strconv.FormatInt(s.cfg.maxClients.Load(), 10) },
		set: func(s *Server, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 || n > 1<<31-1 {
				return fmt.Errorf("argument must be between 1 and 2147483647 inclusive")
			}
			s.cfg.maxClients.Store(n)
			return nil
		}},
	{name: "acllog-max-len", get: func(s *Server) string { return strconv.Itoa(s.acl.MaxLog()) },
		set: func(s *Server, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("argument must be between 0 and 9223372036854775807 inclusive")
			}
			s.acl.SetMaxLog(int(min(n, 1<<31)))
			return nil
		}},
	busyThreshold("busy-reply-threshold"),
	busyThreshold("lua-time-limit"),
	{name: "maxmemory", get: constant("0")},
	{name: "notify-keyspace-events", get: func(s *Server) string { return s.notifyConf().String() },
		set: func(s *Server, v string) error {
			e, ok := pubsub.ParseEvents(v)
			if !ok {
				//lint:ignore ST1005 Redis's own wording, in its reply
				return errors.New("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")
			}
			s.cfg.notify.Store(uint32(e))
			return nil
		}},
	{name: "proto-max-bulk-len", get: func(s *Server) string { return strconv.FormatInt(s.o.maxBulk, 10) }},
	{name: "client-query-buffer-limit", get: func(s *Server) string { return strconv.FormatInt(s.o.maxRequest, 10) }},
	{name: "cluster-enabled", get: constant("no")},
	{name: "dir", get: func(s *Server) string { return s.o.rdbDir }},
	{name: "dbfilename", get: func(s *Server) string { return s.o.rdbFile }},
	{name: "tracking-table-max-keys", get: func(s *Server) string {
		s.trk.mu.Lock()
		defer s.trk.mu.Unlock()
		return strconv.FormatInt(s.trk.maxKeys, 10)
	},
		set: func(s *Server, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("argument must be between 0 and 9223372036854775807 inclusive")
			}
			s.setTrackingMax(n)
			return nil
		}},
	{name: "hz", get: constant(strconv.Itoa(int(1000 / expiryPeriod.Milliseconds())))},
}

func findParam(name string) *param {
	for i := range params {
		if params[i].name == name {
			return &params[i]
		}
	}
	return nil
}

// cmdConfig: CONFIG GET pattern…, CONFIG SET name value…, CONFIG
// RESETSTAT, CONFIG HELP.
func cmdConfig(c *call) {
	sub := strings.ToLower(string(truncate(c.args[1], 32)))
	switch sub {
	case "get":
		if len(c.args) < 3 {
			c.arityError("config|get")
			return
		}
		var out []*param
		for i := range params {
			for _, pat := range c.args[2:] {
				if glob.Match([]byte(strings.ToLower(string(pat))), []byte(params[i].name)) {
					out = append(out, &params[i])
					break
				}
			}
		}
		c.w.WriteMap(len(out))
		for _, p := range out {
			c.w.WriteBulkString(p.name)
			c.w.WriteBulkString(p.get(c.s))
		}
	case "set":
		if len(c.args) < 4 || len(c.args)%2 != 0 {
			c.arityError("config|set")
			return
		}
		// All or nothing: check every name first, as Redis 7.
		for i := 2; i < len(c.args); i += 2 {
			name := strings.ToLower(string(c.args[i]))
			p := findParam(name)
			switch {
			case p == nil:
				c.error(fmt.Sprintf("ERR Unknown option or number of arguments for CONFIG SET - '%s'", truncate(c.args[i], 128)))
				return
			case p.set == nil && p.get(c.s) != string(c.args[i+1]):
				c.error(fmt.Sprintf("ERR CONFIG SET failed (possibly related to argument '%s') - can't set immutable config", name))
				return
			}
		}
		for i := 2; i < len(c.args); i += 2 {
			p := findParam(strings.ToLower(string(c.args[i])))
			if p.set == nil {
				continue
			}
			if err := p.set(c.s, string(c.args[i+1])); err != nil {
				c.error(fmt.Sprintf("ERR CONFIG SET failed (possibly related to argument '%s') - %v", p.name, err))
				return
			}
		}
		c.ok()
	case "resetstat":
		c.s.resetStats()
		c.ok()
	case "rewrite":
		c.error("ERR CONFIG REWRITE is not supported by kvarray: its configuration is the array's config file")
	case "help":
		c.lines([]string{"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"GET <pattern>", "    Return parameters matching the glob-like <pattern> and their values.",
			"SET <directive> <value>", "    Set the configuration <directive> to <value> (maxclients; the others are fixed).",
			"RESETSTAT", "    Reset statistics reported by the INFO command.",
			"HELP", "    Print this help."})
	default:
		c.unknownSubcommand("config")
	}
}

// resetStats zeroes INFO's counters (CONFIG RESETSTAT).
func (s *Server) resetStats() {
	t := &s.stats
	for _, v := range []*atomic.Int64{&t.commands, &t.errors, &t.hits, &t.misses, &t.expired, &t.rejected, &t.connections,
		&t.stores, &t.retrieves, &t.deletes, &t.exists, &t.lists} {
		v.Store(0)
	}
	for _, e := range s.cmds {
		for _, v := range []*atomic.Int64{&e.calls, &e.usec, &e.rejected, &e.failed} {
			v.Store(0)
		}
	}
	s.errorStats.mu.Lock()
	s.errorStats.codes = nil
	s.errorStats.mu.Unlock()
}
