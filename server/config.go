package server

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
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
	// inert holds the values CONFIG SET gave the parameters kvarray
	// accepts without acting on them (inertParam).
	inertMu sync.Mutex
	inert   map[string]string
}

func (rc *runtimeConfig) init(o options) {
	rc.maxClients.Store(int64(o.maxClients))
	rc.busyMs.Store(DefaultBusyThreshold.Milliseconds())
	rc.hllSparse.Store(hll.DefaultSparseMax)
	rc.slow.slower.Store(10000)
	rc.slow.max = 128
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
// cannot change at run time). A hidden one is listed only when asked for
// by its exact name, as Redis's.
type param struct {
	name   string
	get    func(s *Server) string
	set    func(s *Server, v string) error
	hidden bool
}

func constant(v string) func(*Server) string { return func(*Server) string { return v } }

func hidden(p param) param { p.hidden = true; return p }

// inertParam is a Redis parameter that tunes what kvarray does not have
// (Redis's memory limit and eviction sampling, its replication backlog,
// its snapshot schedule: kvarray's data is on its devices, and a full
// device refuses writes itself): CONFIG SET takes a valid value and
// CONFIG GET reports it, so that tools and tests that set them work, and
// nothing else changes (docs/compatibility.md). check validates a value
// and returns it as GET shows it.
func inertParam(name, def string, check func(string) (string, error)) param {
	return param{name: name,
		get: func(s *Server) string {
			s.cfg.inertMu.Lock()
			defer s.cfg.inertMu.Unlock()
			if v, ok := s.cfg.inert[name]; ok {
				return v
			}
			return def
		},
		set: func(s *Server, v string) error {
			v, err := check(v)
			if err != nil {
				return err
			}
			s.cfg.inertMu.Lock()
			defer s.cfg.inertMu.Unlock()
			if s.cfg.inert == nil {
				s.cfg.inert = map[string]string{}
			}
			s.cfg.inert[name] = v
			return nil
		}}
}

// memoryValue parses a size as Redis's configuration does (1k = 1000,
// 1kb = 1024, m, mb, g, gb), returning it in bytes.
func memoryValue(v string) (string, error) {
	l := strings.ToLower(v)
	mul := uint64(1)
	for _, u := range []struct {
		suffix string
		mul    uint64
	}{{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}, {"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"b", 1}} {
		if strings.HasSuffix(l, u.suffix) {
			l, mul = strings.TrimSuffix(l, u.suffix), u.mul
			break
		}
	}
	n, err := strconv.ParseUint(l, 10, 64)
	if err != nil || n > (1<<63-1)/mul {
		return "", errors.New("argument must be a memory value")
	}
	return strconv.FormatUint(n*mul, 10), nil
}

// memoryOrPercent is maxmemory-clients': a memory value, or a percentage
// of maxmemory up to 100.
func memoryOrPercent(v string) (string, error) {
	if p, ok := strings.CutSuffix(v, "%"); ok {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return "", errors.New("argument must be a memory or percent value")
		}
		if n > 100 {
			return "", errors.New("percentage argument must be less or equal to 100")
		}
		return v, nil
	}
	return memoryValue(v)
}

// intIn accepts an integer in [lo, hi].
func intIn(lo, hi int64) func(string) (string, error) {
	return func(v string) (string, error) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			return "", fmt.Errorf("argument must be between %d and %d inclusive", lo, hi)
		}
		return strconv.FormatInt(n, 10), nil
	}
}

//lint:ignore ST1005 Redis's own wording, in its reply
var errSaveParams = errors.New("Invalid save parameters")

// saveSchedule accepts Redis's save: pairs of seconds and changes, or "".
func saveSchedule(v string) (string, error) {
	f := strings.Fields(v)
	if len(f)%2 != 0 {
		return "", errSaveParams
	}
	for _, x := range f {
		if n, err := strconv.ParseInt(x, 10, 64); err != nil || n < 0 {
			return "", errSaveParams
		}
	}
	return strings.Join(f, " "), nil
}

// listenParam is a part of the address the server listens on (bind,
// port): fixed by --listen.
func listenParam(name string, part func(*net.TCPAddr) string) param {
	return param{name: name, get: func(s *Server) string {
		for _, a := range s.Addrs() {
			if t, ok := a.(*net.TCPAddr); ok {
				return part(t)
			}
		}
		return ""
	}}
}

// replicaofParam is replicaof (and its old name slaveof): the master
// REPLICAOF follows, "" on a master; changed by REPLICAOF, not CONFIG.
func replicaofParam(name string) param {
	return param{name: name, get: func(s *Server) string {
		s.repl.mu.Lock()
		defer s.repl.mu.Unlock()
		if s.repl.host == "" {
			return ""
		}
		return fmt.Sprintf("%s %d", s.repl.host, s.repl.port)
	}}
}

// params are the parameters kvarray has, and the ones tools read at start
// (redis-benchmark asks for save and appendonly), with the values that
// describe kvarray: no snapshots or AOF (the devices are the persistence),
// no eviction.
var params = []param{
	{name: "appendonly", get: constant("no")},
	inertParam("save", "", saveSchedule),
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
	inertParam("maxmemory", "0", memoryValue),
	inertParam("maxmemory-samples", "5", intIn(1, 1<<31-1)),
	inertParam("maxmemory-eviction-tenacity", "10", intIn(0, 100)),
	inertParam("maxmemory-clients", "0", memoryOrPercent),
	inertParam("repl-backlog-size", "1048576", func(v string) (string, error) {
		// Redis's floor: 16 KiB.
		b, err := memoryValue(v)
		if n, _ := strconv.ParseUint(b, 10, 64); err == nil && n < 16384 {
			b = "16384"
		}
		return b, err
	}),
	hidden(inertParam("key-load-delay", "0", intIn(-1<<31, 1<<31-1))),
	{name: "daemonize", get: constant("no")},
	listenParam("bind", func(a *net.TCPAddr) string { return a.IP.String() }),
	listenParam("port", func(a *net.TCPAddr) string { return strconv.Itoa(a.Port) }),
	replicaofParam("replicaof"),
	replicaofParam("slaveof"),
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
				pat := strings.ToLower(string(pat))
				if params[i].hidden && pat == params[i].name || !params[i].hidden && glob.Match([]byte(pat), []byte(params[i].name)) {
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
		// All or nothing, as Redis 7: the names first (unknown, given
		// twice), then each value in turn; the first refused undoes the
		// ones before it (setting a parameter to what it held always
		// succeeds).
		seen := map[string]bool{}
		for i := 2; i < len(c.args); i += 2 {
			name := strings.ToLower(string(c.args[i]))
			switch {
			case findParam(name) == nil:
				c.error(fmt.Sprintf("ERR Unknown option or number of arguments for CONFIG SET - '%s'", truncate(c.args[i], 128)))
				return
			case seen[name]:
				c.error(fmt.Sprintf("ERR CONFIG SET failed (possibly related to argument '%s') - duplicate parameter", name))
				return
			}
			seen[name] = true
		}
		type old struct {
			p *param
			v string
		}
		var done []old
		for i := 2; i < len(c.args); i += 2 {
			p := findParam(strings.ToLower(string(c.args[i])))
			v, was := string(c.args[i+1]), p.get(c.s)
			var err error
			switch {
			case p.set != nil:
				err = p.set(c.s, v)
			case v != was:
				err = errors.New("can't set immutable config")
			}
			if err != nil {
				for j := len(done) - 1; j >= 0; j-- {
					_ = done[j].p.set(c.s, done[j].v)
				}
				c.error(fmt.Sprintf("ERR CONFIG SET failed (possibly related to argument '%s') - %v", p.name, err))
				return
			}
			if p.set != nil {
				done = append(done, old{p, was})
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
			"SET <directive> <value>", "    Set the configuration <directive> to <value> (all or none of several).",
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
	s.resetLatencyHistograms()
}
