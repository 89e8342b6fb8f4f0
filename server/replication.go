package server

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/kvarray/kvarray/internal/rdb"
	"github.com/kvarray/kvarray/internal/transfer"
)

// Snapshots and replication, as Redis speaks them:
//
//   - SAVE and BGSAVE write every key to the RDB file named by dir and
//     dbfilename (an export, package transfer); SYNC and PSYNC send one
//     to the client (redis-cli --rdb). The devices stay the persistence:
//     a file is a copy to take elsewhere, never loaded at start.
//   - An export is the keyspace at its start, as a fork is for Redis, by
//     copy on write (transfer.Snapshot): it starts when no data command
//     is in flight (the transaction lock, exclusive for that instant),
//     then every write keeps the state of the keys it locks (lockKeys,
//     move) before changing them, until the export has read them. The
//     export reads each key under its key lock and the transaction lock
//     shared, one key at a time, so clients wait at most for one key's
//     read (a writer, for one read of each key it is first to change).
//     SWAPDB fails the exports in progress.
//   - REPLICAOF host port makes the server a replica of a Redis master
//     (replicaLink): a full synchronization (PSYNC ? -1), whose RDB
//     replaces the keyspace (FLUSHALL, then an import), then the
//     master's stream applied in order through serveOne as a privileged
//     client (conn.master). Meanwhile writes from other clients are
//     refused READONLY, reads are served. REPLICAOF NO ONE stops the link
//     once the command it is applying has finished, and writes are
//     allowed again. A broken link is retried with a new full
//     synchronization (there is no backlog to resume from).

// readonlyReply is Redis's refusal of a client's write on a replica.
const readonlyReply = "READONLY You can't write against a read only replica."

// persistence is the RDB file's state (INFO persistence).
type persistence struct {
	inProgress atomic.Bool
	lastSave   atomic.Int64 // Unix seconds of the last successful save
	lastOK     atomic.Bool
	lastErr    atomic.Pointer[string]
}

// rdbPath is where SAVE and BGSAVE write.
func (s *Server) rdbPath() string { return filepath.Join(s.o.rdbDir, s.o.rdbFile) }

// exportLock is transfer.Lock for exports and imports while serving: a
// key's lock under the transaction lock shared, as a data command holds
// them.
func (s *Server) exportLock(ctx context.Context, db int, key []byte) (func(), error) {
	s.txmu.RLock()
	unlock, err := s.lock(ctx, s.ks.Key(db, key))
	if err != nil {
		s.txmu.RUnlock()
		return nil, err
	}
	return func() { unlock(); s.txmu.RUnlock() }, nil
}

// snapshots are the exports in progress (transfer.Snapshot).
type snapshots struct {
	mu  sync.Mutex
	all atomic.Pointer[[]*transfer.Snapshot]
}

// beginSnapshot starts an export's snapshot once no data command is in
// flight (the transaction lock, exclusive for that instant only): every
// write after it keeps what it changes for the export.
func (s *Server) beginSnapshot() (*transfer.Snapshot, func()) {
	snap := transfer.NewSnapshot()
	s.txmu.Lock()
	s.snaps.mu.Lock()
	all := []*transfer.Snapshot{snap}
	if old := s.snaps.all.Load(); old != nil {
		all = append(all, *old...)
	}
	s.snaps.all.Store(&all)
	s.snaps.mu.Unlock()
	s.txmu.Unlock()
	return snap, func() {
		s.snaps.mu.Lock()
		defer s.snaps.mu.Unlock()
		var rest []*transfer.Snapshot
		for _, x := range *s.snaps.all.Load() {
			if x != snap {
				rest = append(rest, x)
			}
		}
		if len(rest) == 0 {
			s.snaps.all.Store(nil)
			return
		}
		s.snaps.all.Store(&rest)
	}
}

// preserve keeps keys of db, which a write is about to change, for the
// exports in progress; the caller holds their locks.
func (s *Server) preserve(ctx context.Context, db int, keys ...[]byte) {
	all := s.snaps.all.Load()
	if all == nil {
		return
	}
	for _, k := range keys {
		for _, snap := range *all {
			snap.Preserve(ctx, s.ks, db, k)
		}
	}
}

// errSwappedDuringExport fails an export that SWAPDB overtook.
var errSwappedDuringExport = errors.New("SWAPDB ran during the export; take it again")

// failSnapshots ends the exports in progress with err: a change they
// cannot follow (SWAPDB).
func (s *Server) failSnapshots(err error) {
	if all := s.snaps.all.Load(); all != nil {
		for _, snap := range *all {
			snap.Fail(err)
		}
	}
}

// export writes the keyspace as it is now, as one RDB file, to w.
func (s *Server) export(ctx context.Context, w io.Writer) error {
	snap, end := s.beginSnapshot()
	defer end()
	_, err := transfer.Export(ctx, s.ks, w, transfer.ExportOptions{Lock: s.exportLock, Snapshot: snap})
	return err
}

// save writes the RDB file; one at a time.
func (s *Server) save(ctx context.Context) error {
	snap, end := s.beginSnapshot()
	_, err := transfer.ExportFile(ctx, s.ks, s.rdbPath(), transfer.ExportOptions{Lock: s.exportLock, Snapshot: snap})
	end()
	s.persist.lastOK.Store(err == nil)
	if err != nil {
		msg := err.Error()
		s.persist.lastErr.Store(&msg)
		s.o.errorLog.Printf("kvarray server: saving the RDB file: %v", err)
		return err
	}
	s.persist.lastSave.Store(time.Now().Unix())
	return nil
}

const saveBusy = "ERR Background save already in progress"

func cmdSave(c *call) {
	if !c.s.persist.inProgress.CompareAndSwap(false, true) {
		c.error(saveBusy)
		return
	}
	defer c.s.persist.inProgress.Store(false)
	if err := c.s.save(c.ctx); err != nil {
		c.error("ERR " + err.Error())
		return
	}
	c.ok()
}

func cmdBgsave(c *call) {
	if len(c.args) > 2 || len(c.args) == 2 && upper(c.args[1]) != "SCHEDULE" {
		c.syntaxError()
		return
	}
	if !c.s.persist.inProgress.CompareAndSwap(false, true) {
		c.error(saveBusy)
		return
	}
	c.s.bg.Add(1)
	go func() {
		defer c.s.bg.Done()
		defer c.s.persist.inProgress.Store(false)
		_ = c.s.save(c.s.ctx)
	}()
	c.w.WriteString("Background saving started")
}

func cmdLastSave(c *call) { c.w.WriteInt64(c.s.persist.lastSave.Load()) }

func (s *Server) infoPersistence(b *strings.Builder) {
	status := "ok"
	if !s.persist.lastOK.Load() {
		status = "err"
	}
	fmt.Fprintf(b, "# Persistence\r\nloading:%d\r\nasync_loading:0\r\nrdb_changes_since_last_save:0\r\nrdb_bgsave_in_progress:%d\r\n"+
		"rdb_last_save_time:%d\r\nrdb_last_bgsave_status:%s\r\naof_enabled:0\r\naof_rewrite_in_progress:0\r\n"+
		"aof_rewrite_scheduled:0\r\naof_last_bgrewrite_status:ok\r\naof_last_write_status:ok\r\n",
		b2i(s.repl.syncing.Load()), b2i(s.persist.inProgress.Load()), s.persist.lastSave.Load(), status)
}

// cmdReplconf: a replica's or redis-cli's settings. rdb-only is kept
// (SYNC then closes the connection after the file); the rest is
// acknowledged.
func cmdReplconf(c *call) {
	if len(c.args)%2 != 1 {
		c.syntaxError()
		return
	}
	for i := 1; i < len(c.args); i += 2 {
		if strings.EqualFold(string(c.args[i]), "rdb-only") {
			c.cl.rdbOnly = string(c.args[i+1]) == "1"
		}
		if strings.EqualFold(string(c.args[i]), "ack") {
			return // no reply to an ACK, as in Redis
		}
	}
	c.ok()
}

// replID is the server's replication ID as a master: its run ID.
func (s *Server) replID() string { return hex.EncodeToString(s.runID[:]) }

// cmdSync is SYNC and PSYNC: every key as one RDB bulk ($N, then the
// file), after +FULLRESYNC for PSYNC. The file is written to a temporary
// file first, as Redis does for a replica without capa eof, so its
// length goes first; meanwhile a newline a second keeps the client from
// timing out. There is no replication stream after it: with rdb-only
// (redis-cli --rdb) the connection is closed, else it stays open idle.
func cmdSync(c *call) {
	cl := c.cl
	if c.rc == nil || cl.Conn == nil {
		c.error("ERR SYNC needs a connection of its own")
		return
	}
	cl.replicaLink.Store(true)
	f, err := os.CreateTemp(c.s.o.rdbDir, "temp-sync-*.rdb")
	if err != nil {
		f, err = os.CreateTemp("", "kvarray-sync-*.rdb")
	}
	if err != nil {
		c.error("ERR SYNC: " + err.Error())
		return
	}
	defer func() { f.Close(); os.Remove(f.Name()) }()
	if bw := redcon.BaseWriter(c.rc); bw != nil {
		_ = bw.Flush() // replies ahead of this one go first
	}
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	var wmu sync.Mutex
	write := func(b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		_, err := cl.Conn.Write(b)
		if err != nil {
			cancel() // the client is gone: stop exporting
		}
		return err
	}
	fail := func(err error) {
		_ = write([]byte("-ERR SYNC: " + strings.ReplaceAll(err.Error(), "\r\n", " ") + "\r\n"))
		c.rc.Close()
	}
	if c.e.name == "psync" {
		if write(fmt.Appendf(nil, "+FULLRESYNC %s %d\r\n", c.s.replID(), 0)) != nil {
			return
		}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if write([]byte("\n")) != nil {
					return
				}
			}
		}
	}()
	err = c.s.export(ctx, f)
	close(done)
	if err != nil {
		fail(err)
		return
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		fail(err)
		return
	}
	if write(fmt.Appendf(nil, "$%d\r\n", size)) != nil {
		return
	}
	wmu.Lock()
	_, err = io.Copy(cl.Conn, f)
	wmu.Unlock()
	if err != nil || cl.rdbOnly {
		c.rc.Close()
	}
}

// replica is the state of the link to a master (REPLICAOF).
type replica struct {
	mu   sync.Mutex // changes of the fields below; REPLICAOF one at a time
	host string     // "" when a master
	port int
	stop context.CancelFunc
	done chan struct{}
	user string // masteruser, masterauth
	pass string
	// replID is the master's, set by the link (which never takes mu:
	// REPLICAOF holds it while waiting for the link to end).
	replID atomic.Pointer[string]

	readOnly atomic.Bool // writes from clients are refused
	linkUp   atomic.Bool
	syncing  atomic.Bool
	offset   atomic.Int64 // of the master's stream, applied
	lastIO   atomic.Int64 // UnixNano of the master's last bytes
}

func cmdReplicaOf(c *call) {
	host, port := string(c.args[1]), string(c.args[2])
	if strings.EqualFold(host, "no") && strings.EqualFold(port, "one") {
		c.s.stopReplica()
		c.ok()
		return
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		c.error("ERR Invalid master port")
		return
	}
	if !c.s.startReplica(host, p) {
		c.w.WriteString("OK Already connected to specified master")
		return
	}
	c.ok()
}

// startReplica makes the server a replica of host:port, replacing any
// link it has; false if it already follows that master.
func (s *Server) startReplica(host string, port int) bool {
	r := &s.repl
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.host == host && r.port == port {
		return false
	}
	s.stopLinkLocked()
	ctx, cancel := context.WithCancel(s.ctx)
	r.host, r.port, r.stop, r.done = host, port, cancel, make(chan struct{})
	r.readOnly.Store(true)
	go s.replicaLink(ctx, net.JoinHostPort(host, strconv.Itoa(port)), r.done)
	return true
}

// stopReplica is REPLICAOF NO ONE: the link stops, writes are allowed.
func (s *Server) stopReplica() {
	r := &s.repl
	r.mu.Lock()
	defer r.mu.Unlock()
	s.stopLinkLocked()
	r.host, r.port = "", 0
	r.readOnly.Store(false)
}

func (s *Server) stopLinkLocked() {
	r := &s.repl
	if r.stop != nil {
		r.stop()
		<-r.done
		r.stop, r.done = nil, nil
	}
	r.linkUp.Store(false)
	r.syncing.Store(false)
}

// replicaLink synchronizes with the master at addr and applies its
// stream until ctx ends, starting over after a broken link.
func (s *Server) replicaLink(ctx context.Context, addr string, done chan struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		err := s.follow(ctx, addr)
		s.repl.linkUp.Store(false)
		s.repl.syncing.Store(false)
		if ctx.Err() != nil {
			return
		}
		s.o.errorLog.Printf("kvarray server: replication link to master %s: %v (retrying in 1s)", addr, err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// listenPort is the port the server's first TCP listener has, for
// REPLCONF listening-port.
func (s *Server) listenPort() int {
	for _, a := range s.Addrs() {
		if t, ok := a.(*net.TCPAddr); ok {
			return t.Port
		}
	}
	return 0
}

// follow is one link: the full synchronization, then the stream.
func (s *Server) follow(ctx context.Context, addr string) error {
	l, err := transfer.Dial(ctx, addr, s.repl.user, s.repl.pass)
	if err != nil {
		return err
	}
	defer l.Close()
	s.repl.syncing.Store(true)
	replID, offset, body, size, err := l.PSync(s.listenPort())
	if err != nil {
		return err
	}
	mc := &conn{s: s, id: s.nextID.Add(1), addr: addr, laddr: "", fd: -1, created: time.Now(), proto: 2, master: true}
	if _, err := rand.Read(mc.g.nonce[:]); err != nil {
		return err
	}
	// The file replaces the keyspace, as it does in Redis.
	if reply := s.applyMaster(mc, [][]byte{[]byte("FLUSHALL")}); strings.HasPrefix(reply, "-") {
		return fmt.Errorf("emptying the keyspace before loading the master's RDB: %s", reply)
	}
	fr, err := rdb.NewFileReader(body, size)
	if err != nil {
		return err
	}
	rep, err := transfer.Import(ctx, s.ks, fr, transfer.ImportOptions{Workers: 64, Lock: s.exportLock})
	if err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, body); err != nil {
		return err
	}
	if n := rep.Unsupported; len(n) > 0 {
		s.o.errorLog.Printf("kvarray server: the master's RDB held values of types kvarray does not hold, not loaded: %v (keys %q)", n, rep.UnsupportedKeys)
	}
	s.touchDB(-1)
	s.repl.replID.Store(&replID)
	s.repl.offset.Store(offset)
	s.repl.lastIO.Store(time.Now().UnixNano())
	s.repl.syncing.Store(false)
	s.repl.linkUp.Store(true)
	s.o.errorLog.Printf("kvarray server: replica of %s: loaded %d keys, following its stream from offset %d", addr, rep.Keys, offset)
	return s.applyStream(ctx, l, mc)
}

// applyStream reads the master's commands and applies them in order,
// acknowledging the offset every second and on REPLCONF GETACK.
func (s *Server) applyStream(ctx context.Context, l *transfer.Link, mc *conn) error {
	var wmu sync.Mutex
	ack := func() error {
		wmu.Lock()
		defer wmu.Unlock()
		return l.Command("REPLCONF", "ACK", strconv.FormatInt(s.repl.offset.Load(), 10))
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if ack() != nil {
					return
				}
			}
		}
	}()
	for ctx.Err() == nil {
		args, n, err := readCommand(l.R)
		if err != nil {
			return err
		}
		s.repl.lastIO.Store(time.Now().UnixNano())
		if len(args) > 0 {
			switch strings.ToLower(string(args[0])) {
			case "ping":
			case "replconf":
				if len(args) > 1 && strings.EqualFold(string(args[1]), "getack") {
					if err := ack(); err != nil {
						return err
					}
				}
			default:
				if reply := s.applyMaster(mc, args); strings.HasPrefix(reply, "-") {
					// As Redis, a replica does not stop on a command it
					// could not apply: it says so.
					s.o.errorLog.Printf("kvarray server: applying the master's %q: %s", truncate(args[0], 32), strings.TrimSpace(reply))
				}
			}
		}
		s.repl.offset.Add(n)
	}
	return ctx.Err()
}

// applyMaster runs one of the master's commands as its privileged client
// and returns the reply.
func (s *Server) applyMaster(mc *conn, args [][]byte) string {
	out := &respWriter{proto: 2}
	s.serveOne(nil, mc, redcon.Command{Args: args}, out)
	return string(out.b)
}

// errStream is a malformed replication stream.
var errStream = errors.New("malformed replication stream")

// readCommand reads one command of the master's stream (RESP arrays of
// bulks; a bare newline is a keep-alive) and how many bytes it took.
func readCommand(r *bufio.Reader) ([][]byte, int64, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, 0, err
	}
	n := int64(len(line))
	hdr := strings.TrimRight(line, "\r\n")
	if hdr == "" {
		return nil, n, nil
	}
	if hdr[0] != '*' {
		var args [][]byte
		for _, f := range strings.Fields(hdr) {
			args = append(args, []byte(f))
		}
		return args, n, nil
	}
	count, err := strconv.Atoi(hdr[1:])
	if err != nil || count < 0 || count > 1<<20 {
		return nil, 0, fmt.Errorf("%w: %q", errStream, hdr)
	}
	args := make([][]byte, count)
	for i := range args {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, 0, err
		}
		n += int64(len(line))
		bl := strings.TrimRight(line, "\r\n")
		size, err := strconv.Atoi(strings.TrimPrefix(bl, "$"))
		if err != nil || !strings.HasPrefix(bl, "$") || size < 0 || size > 512<<20 {
			return nil, 0, fmt.Errorf("%w: %q", errStream, bl)
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, 0, err
		}
		n += int64(size + 2)
		args[i] = b[:size]
	}
	return args, n, nil
}

// infoReplication is INFO's replication section.
func (s *Server) infoReplication(b *strings.Builder) {
	r := &s.repl
	r.mu.Lock()
	host, port := r.host, r.port
	r.mu.Unlock()
	replID := ""
	if p := r.replID.Load(); p != nil {
		replID = *p
	}
	if host == "" {
		fmt.Fprintf(b, "# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_failover_state:no-failover\r\n"+
			"master_replid:%s\r\nmaster_replid2:0000000000000000000000000000000000000000\r\nmaster_repl_offset:%d\r\n"+
			"second_repl_offset:-1\r\nrepl_backlog_active:0\r\n", s.replID(), r.offset.Load())
		return
	}
	status, lag := "down", int64(-1)
	if r.linkUp.Load() {
		status = "up"
		lag = int64(time.Since(time.Unix(0, r.lastIO.Load())).Seconds())
	}
	if replID == "" {
		replID = s.replID()
	}
	off := r.offset.Load()
	fmt.Fprintf(b, "# Replication\r\nrole:slave\r\nmaster_host:%s\r\nmaster_port:%d\r\nmaster_link_status:%s\r\n"+
		"master_last_io_seconds_ago:%d\r\nlag:%d\r\nmaster_sync_in_progress:%d\r\nslave_read_repl_offset:%d\r\nslave_repl_offset:%d\r\n"+
		"slave_priority:100\r\nslave_read_only:1\r\nreplica_announced:1\r\nconnected_slaves:0\r\nmaster_failover_state:no-failover\r\n"+
		"master_replid:%s\r\nmaster_replid2:0000000000000000000000000000000000000000\r\nmaster_repl_offset:%d\r\n"+
		"second_repl_offset:-1\r\nrepl_backlog_active:0\r\n",
		host, port, status, lag, lag, b2i(r.syncing.Load()), off, off, replID, off)
}

func replicationCommands() []*command {
	admin := []string{"admin", "slow", "dangerous"}
	return []*command{
		{name: "sync", arity: 1, flags: []string{"admin", "noscript", "no_async_loading", "no_multi"}, acl: admin, group: "server", since: "1.0.0",
			summary: "Sends every key as one RDB file (redis-cli --rdb); no replication stream follows.", complexity: "O(N)", run: cmdSync, noTx: true},
		{name: "psync", arity: -3, flags: []string{"admin", "noscript", "no_async_loading", "no_multi"}, acl: admin, group: "server", since: "2.8.0",
			summary: "A full resynchronization: +FULLRESYNC, then every key as one RDB file; no replication stream follows.", complexity: "O(N)",
			args: []arg{strArg("replicationid"), intArg("offset")}, run: cmdSync, noTx: true},
		{name: "replconf", arity: -1, flags: []string{"admin", "noscript", "loading", "stale", "allow_busy"}, acl: admin, group: "server", since: "3.0.0",
			summary: "A replica's settings (rdb-only is honoured).", complexity: "O(1)", run: cmdReplconf},
		{name: "bgsave", arity: -1, flags: []string{"admin", "noscript", "no_async_loading", "no_multi"}, acl: admin, group: "server", since: "1.0.0",
			summary: "Writes every key to the RDB file (CONFIG GET dir, dbfilename) in the background.", complexity: "O(N)",
			args: []arg{optional(token("SCHEDULE"))}, run: cmdBgsave, noTx: true},
		{name: "replicaof", arity: 3, flags: []string{"admin", "noscript", "stale", "no_async_loading"}, acl: admin, group: "server", since: "5.0.0",
			summary: "Follows a Redis master (full sync, then its stream); NO ONE promotes.", complexity: "O(1)",
			args: []arg{strArg("host"), strArg("port")}, run: cmdReplicaOf, noTx: true},
		{name: "slaveof", arity: 3, flags: []string{"admin", "noscript", "stale", "no_async_loading"}, acl: admin, group: "server", since: "1.0.0",
			summary: "REPLICAOF's old name.", complexity: "O(1)", args: []arg{strArg("host"), strArg("port")}, run: cmdReplicaOf, noTx: true},
	}
}

func init() { commands = append(commands, replicationCommands()...) }
