package server

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/kvarray/kvarray/array"
)

var (
	defaultSections = []string{"server", "clients", "stats", "keyspace", "kvarray"}
	allSections     = []string{"server", "clients", "stats", "commandstats", "keyspace", "kvarray"}
)

// cmdInfo: INFO [section ...] with sections server, clients, stats,
// commandstats, keyspace and kvarray (the array: id, mode, devices,
// mechanisms, storage overhead, the server's array operations). With no
// section, or "default": all but commandstats; "all" or "everything": all.
// keyspace and kvarray take a pass over the keys (array.Status reads every
// value's header).
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
	var st *array.Status
	var stErr error
	if want["keyspace"] || want["kvarray"] {
		s, err := c.s.a.Status(c.ctx)
		st, stErr = &s, err
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
			c.s.mu.Lock()
			n := len(c.s.conns)
			c.s.mu.Unlock()
			fmt.Fprintf(&b, "# Clients\r\nconnected_clients:%d\r\nmaxclients:%d\r\n", n, c.s.o.maxClients)
		case "stats":
			t := &c.s.stats
			fmt.Fprintf(&b, "# Stats\r\ntotal_connections_received:%d\r\ntotal_commands_processed:%d\r\nrejected_connections:%d\r\n"+
				"keyspace_hits:%d\r\nkeyspace_misses:%d\r\ntotal_error_replies:%d\r\n",
				t.connections.Load(), t.commands.Load(), t.rejected.Load(), t.hits.Load(), t.misses.Load(), t.errors.Load())
		case "commandstats":
			b.WriteString("# Commandstats\r\n")
			for _, n := range c.s.commandNames() {
				if calls := c.s.cmds[n].calls.Load(); calls > 0 {
					fmt.Fprintf(&b, "cmdstat_%s:calls=%d\r\n", n, calls)
				}
			}
		case "keyspace":
			b.WriteString("# Keyspace\r\n")
			if stErr == nil && st.Objects+st.Unreadable > 0 {
				fmt.Fprintf(&b, "db0:keys=%d,expires=0,avg_ttl=0\r\n", st.Objects+st.Unreadable)
			}
		case "kvarray":
			c.s.infoArray(&b, st, stErr)
		}
	}
	c.rc.WriteBulkString(b.String())
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
		"go_version:%s\r\nprocess_id:%d\r\ntcp_port:%s\r\nuptime_in_seconds:%d\r\nuptime_in_days:%d\r\n",
		redisVersion, s.version, runtime.GOOS, runtime.GOARCH, strconv.IntSize, runtime.Version(), os.Getpid(), port,
		int64(up.Seconds()), int64(up.Hours()/24))
}

// infoArray writes the kvarray section. Field values are made safe for the
// "key:value" line format (no CR, LF; commas only in reasons, which get a
// line of their own).
func (s *Server) infoArray(b *strings.Builder, st *array.Status, stErr error) {
	maxKey, maxValue := s.a.Limits()
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
		fmt.Fprintf(b, "devices_healthy:%d\r\ndevices_failed:%d\r\ndevices_rebuilding:%d\r\n",
			states["healthy"], states["failed"], states["rebuilding"])
		for _, d := range st.Devices {
			fmt.Fprintf(b, "device%d:name=%s,state=%s,keys=%d,used_bytes=%d,capacity_bytes=%d\r\n",
				d.Index, infoValue(d.Name), d.State, d.Keys, d.Used, d.Capacity)
			if d.Reason != "" {
				fmt.Fprintf(b, "device%d_reason:%s\r\n", d.Index, infoValue(d.Reason))
			}
		}
		for _, m := range st.Mechanisms {
			fmt.Fprintf(b, "mechanism_%s:objects=%d,user_bytes=%d\r\n", m.Name, m.Objects, m.UserBytes)
		}
		fmt.Fprintf(b, "objects:%d\r\nuser_bytes:%d\r\ndevice_bytes:%d\r\nstorage_overhead:%.2f\r\nunreadable_objects:%d\r\n",
			st.Objects, st.UserBytes, st.DeviceBytes, st.Overhead, st.Unreadable)
	}
	t := &s.stats
	fmt.Fprintf(b, "ops_store:%d\r\nops_retrieve:%d\r\nops_delete:%d\r\nops_exist:%d\r\nops_list_keys:%d\r\n",
		t.stores.Load(), t.retrieves.Load(), t.deletes.Load(), t.exists.Load(), t.lists.Load())
}

func infoValue(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}
