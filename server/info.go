package server

import (
	"fmt"
	"maps"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/keyspace"
	"github.com/kvarray/kvarray/pubsub"
)

var (
	defaultSections = []string{"server", "clients", "memory", "persistence", "stats", "replication", "cpu", "errorstats", "cluster", "keyspace"}
	allSections     = []string{"server", "clients", "memory", "persistence", "stats", "replication", "cpu", "commandstats", "errorstats", "cluster", "keyspace", "kvarray"}
)

// cmdInfo: INFO [section ...]. With no section, or "default": the
// sections Redis 7 shows by default; "all" or "everything": those, and
// commandstats and kvarray (the array: devices, mechanisms, storage
// overhead). No section reads values or lists keys: keyspace reads the
// keyspace's counts; only kvarray reads every value's header
// (array.Status), so it is not in the default.
func cmdInfo(c *call) {
	want := map[string]bool{}
	if len(c.args) == 1 {
		for _, s := range defaultSections {
			want[s] = true
		}
	}
	for _, a := range c.args[1:] {
		switch s := strings.ToLower(string(truncate(a, 32))); s {
		case "default":
			for _, s := range defaultSections {
				want[s] = true
			}
		case "all", "everything":
			for _, s := range allSections {
				want[s] = true
			}
		default:
			want[s] = true
		}
	}
	var b strings.Builder
	for _, sec := range allSections {
		if !want[sec] {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		switch sec {
		case "server":
			c.s.infoServer(&b)
		case "clients":
			_, _, _, trkClients := c.s.trackingStats()
			c.s.mu.Lock()
			n := len(c.s.conns)
			c.s.mu.Unlock()
			fmt.Fprintf(&b, "# Clients\r\nconnected_clients:%d\r\ncluster_connections:0\r\nmaxclients:%d\r\nblocked_clients:%d\r\n"+
				"tracking_clients:%d\r\nclients_in_timeout_table:0\r\n", n, c.s.cfg.maxClients.Load(), c.s.blockedClients(), trkClients)
		case "memory":
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			fmt.Fprintf(&b, "# Memory\r\nused_memory:%d\r\nused_memory_human:%s\r\nused_memory_rss:%d\r\nused_memory_peak:%d\r\n"+
				"maxmemory:0\r\nmaxmemory_human:0B\r\nmaxmemory_policy:%s\r\nmem_fragmentation_ratio:%.2f\r\nmem_allocator:go\r\n"+
				"number_of_cached_scripts:%d\r\nnumber_of_functions:%d\r\nnumber_of_libraries:%d\r\nlazyfree_pending_objects:%d\r\n",
				m.HeapAlloc, humanBytes(m.HeapAlloc), m.Sys, m.HeapSys, c.s.maxmemoryPolicy(), float64(m.Sys)/float64(max(m.HeapAlloc, 1)),
				c.s.scripts.Cached(), c.s.scripts.FunctionCount(), len(c.s.scripts.Libraries()), max(c.s.ks.Garbage().Pending, 0))
		case "persistence":
			c.s.infoPersistence(&b)
		case "stats":
			trkKeys, trkItems, trkPrefixes, _ := c.s.trackingStats()
			t := &c.s.stats
			fmt.Fprintf(&b, "# Stats\r\ntotal_connections_received:%d\r\ntotal_commands_processed:%d\r\ninstantaneous_ops_per_sec:0\r\n"+
				"rejected_connections:%d\r\nexpired_keys:%d\r\nevicted_keys:0\r\nkeyspace_hits:%d\r\nkeyspace_misses:%d\r\n"+
				"pubsub_channels:%d\r\npubsub_patterns:%d\r\ntotal_error_replies:%d\r\nlazyfreed_objects:%d\r\n"+
				"tracking_total_keys:%d\r\ntracking_total_items:%d\r\ntracking_total_prefixes:%d\r\n",
				t.connections.Load(), t.commands.Load(), t.rejected.Load(), t.expired.Load(), t.hits.Load(), t.misses.Load(),
				len(c.s.hub.Names(pubsub.Channel, nil)), c.s.hub.Patterns(), t.errors.Load(), c.s.ks.Garbage().Finished,
				trkKeys, trkItems, trkPrefixes)
		case "replication":
			c.s.infoReplication(&b)
		case "cpu":
			c.s.infoCPU(&b)
		case "cluster":
			b.WriteString("# Cluster\r\ncluster_enabled:0\r\n")
		case "commandstats":
			b.WriteString("# Commandstats\r\n")
			for _, n := range c.s.commandNames() {
				e := c.s.cmds[n]
				calls, rejected, failed := e.calls.Load(), e.rejected.Load(), e.failed.Load()
				if calls+rejected+failed > 0 {
					usec := e.usec.Load()
					fmt.Fprintf(&b, "cmdstat_%s:calls=%d,usec=%d,usec_per_call=%.2f,rejected_calls=%d,failed_calls=%d\r\n",
						n, calls, usec, float64(usec)/float64(max(calls, 1)), rejected, failed)
				}
			}
		case "errorstats":
			b.WriteString("# Errorstats\r\n")
			c.s.errorStats.write(&b)
		case "keyspace":
			b.WriteString("# Keyspace\r\n")
			c.s.infoKeyspace(c, &b)
		case "kvarray":
			st, err := c.s.a.Status(c.ctx)
			c.s.infoArray(&b, &st, err)
		}
	}
	c.w.WriteVerbatim(b.String())
}

// infoKeyspace writes a dbN line for each database with keys, from the
// keyspace's counts; while they cannot be trusted (recounting after a
// crash), from one listing of the array's keys and of the expiry index
// (which may count an index entry that a later write made stale).
func (s *Server) infoKeyspace(c *call, b *strings.Builder) {
	dbs := s.ks.DBs()
	keys, expires := make([]int64, dbs), make([]int64, dbs)
	exact := true
	for db := range dbs {
		var ok bool
		keys[db], expires[db], ok = s.ks.Count(db)
		exact = exact && ok
	}
	if !exact {
		counts, err := s.ks.Counts(c.ctx)
		if err != nil {
			fmt.Fprintf(b, "keyspace_error:%s\r\n", infoValue(err.Error()))
			return
		}
		clear(expires)
		if idx, err := s.a.Keys(c.ctx, keyspace.ExpiryPrefix()); err == nil {
			for _, k := range idx {
				if _, db, _, ok := s.ks.ParseIndex(k); ok {
					expires[db]++
				}
			}
		}
		for db, n := range counts {
			keys[db], expires[db] = int64(n), min(expires[db], int64(n))
		}
	}
	for db, n := range keys {
		if n > 0 {
			fmt.Fprintf(b, "db%d:keys=%d,expires=%d,avg_ttl=0\r\n", db, n, expires[db])
		}
	}
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2fG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2fM", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2fK", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

func (s *Server) infoCPU(b *strings.Builder) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	fmt.Fprintf(b, "# CPU\r\nused_cpu_sys:%.6f\r\nused_cpu_user:%.6f\r\n", tv(ru.Stime), tv(ru.Utime))
}

func (s *Server) infoServer(b *strings.Builder) {
	port := ""
	for _, a := range s.Addrs() {
		if _, p, err := net.SplitHostPort(a.String()); err == nil {
			port = p
			break
		}
	}
	up := time.Since(s.started)
	fmt.Fprintf(b, "# Server\r\nredis_version:%s\r\nredis_mode:standalone\r\nkvarray_version:%s\r\nos:%s %s\r\narch_bits:%d\r\n"+
		"go_version:%s\r\nprocess_id:%d\r\nrun_id:%x\r\ntcp_port:%s\r\nserver_time_usec:%d\r\nuptime_in_seconds:%d\r\nuptime_in_days:%d\r\n"+
		"hz:%d\r\nexecutable:%s\r\n",
		redisVersion, s.version, runtime.GOOS, runtime.GOARCH, strconv.IntSize, runtime.Version(), os.Getpid(), s.runID, port,
		time.Now().UnixMicro(), int64(up.Seconds()), int64(up.Hours()/24), 1000/expiryPeriod.Milliseconds(), infoValue(executable()))
}

// infoArray writes the kvarray section. Field values are made safe for the
// "key:value" line format (no CR, LF; commas only in reasons, which get a
// line of their own).
func (s *Server) infoArray(b *strings.Builder, st *array.Status, stErr error) {
	maxKey, maxValue := s.ks.Limits()
	fmt.Fprintf(b, "# Kvarray\r\narray_id:%s\r\nmode:%s\r\ndefault_mechanism:%s\r\nmechanisms:%s\r\ndevices:%d\r\nmax_key_bytes:%d\r\nmax_value_bytes:%d\r\n",
		s.a.ID(), s.a.Mode(), s.a.Mechanisms()[0], strings.Join(s.a.Mechanisms(), ","), s.a.N(), maxKey, maxValue)
	if stErr != nil {
		fmt.Fprintf(b, "status_error:%s\r\n", infoValue(stErr.Error()))
	}
	if st != nil {
		states := map[string]int{}
		for _, d := range st.Devices {
			states[d.State]++
		}
		fmt.Fprintf(b, "devices_healthy:%d\r\ndevices_failed:%d\r\ndevices_rebuilding:%d\r\ndevices_full:%d\r\ndevices_slow:%d\r\n",
			states["healthy"], states["failed"], states["rebuilding"], states["full"], states["slow"])
		for _, d := range st.Devices {
			fmt.Fprintf(b, "device%d:name=%s,state=%s,keys=%d,used_bytes=%d,capacity_bytes=%d\r\n",
				d.Index, infoValue(d.Name), d.State, d.Keys, d.Used, d.Capacity)
			if d.Reason != "" {
				fmt.Fprintf(b, "device%d_reason:%s\r\n", d.Index, infoValue(d.Reason))
			}
		}
		// INFO makes no pass over the keys: objects per mechanism and
		// the storage overhead are KVARRAY.STATUS DEEP's.
		fmt.Fprintf(b, "device_bytes:%d\r\n", st.DeviceBytes)
	}
	t := &s.stats
	fmt.Fprintf(b, "ops_store:%d\r\nops_retrieve:%d\r\nops_delete:%d\r\nops_exist:%d\r\nops_list_keys:%d\r\n",
		t.stores.Load(), t.retrieves.Load(), t.deletes.Load(), t.exists.Load(), t.lists.Load())
	vc := s.a.ValueCacheStats()
	fmt.Fprintf(b, "value_cache_limit_bytes:%d\r\nvalue_cache_bytes:%d\r\nvalue_cache_values:%d\r\nvalue_cache_hits:%d\r\nvalue_cache_misses:%d\r\n",
		vc.Limit, vc.Bytes, vc.Entries, vc.Hits, vc.Misses)
	g := s.ks.Garbage()
	fmt.Fprintf(b, "garbage_records_pending:%d\r\ngarbage_records_recorded:%d\r\ngarbage_records_finished:%d\r\ngarbage_elements_reclaimed:%d\r\n",
		g.Pending, g.Recorded, g.Finished, g.Reclaimed)
}

func executable() string {
	p, _ := os.Executable()
	return p
}

func infoValue(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}

// errorStats counts error replies by their code (the first word: ERR,
// WRONGTYPE, NOPERM, ...) for INFO errorstats. As Redis, it tracks at
// most errorStatsLimit codes: errors of others are counted in
// total_error_replies only.
type errorStats struct {
	mu    sync.Mutex
	codes map[string]int64
}

// errorStatsLimit is Redis's ERRORSTATS_LIMIT.
const errorStatsLimit = 128

// count counts msg, an error reply without its '-'.
func (e *errorStats) count(msg string) {
	code, _, _ := strings.Cut(msg, " ")
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.codes == nil {
		e.codes = map[string]int64{}
	}
	if _, ok := e.codes[code]; ok || len(e.codes) < errorStatsLimit {
		e.codes[code]++
	}
}

// write writes the section's lines, codes in byte order.
func (e *errorStats) write(b *strings.Builder) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, code := range slices.Sorted(maps.Keys(e.codes)) {
		fmt.Fprintf(b, "errorstat_%s:count=%d\r\n", code, e.codes[code])
	}
}
