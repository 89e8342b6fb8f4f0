// Package server serves one kvarray array over the Redis protocol, RESP2
// and RESP3 (HELLO 3), so that redis-cli, redis-benchmark and Redis client
// libraries on their default settings can use it. It is built on
// github.com/tidwall/redcon, which reads pipelined commands in batches and
// flushes their replies together.
//
// Every command has one handler in a table (commands.go) with its arity,
// flags and documentation, which COMMAND, COMMAND INFO and COMMAND DOCS
// report. Errors use Redis's own strings where Redis has one ("ERR wrong
// number of arguments for 'get' command", "ERR syntax error"); array errors
// are "ERR <kind>: <detail>" (see errorReply). Replies go through one
// writer (reply.go) that knows RESP2 from RESP3.
//
// Data: Redis databases, keys, values and expiry map onto the array's
// keys and values through package keyspace (the CLI's data commands use
// it too). All reads and writes of Redis data go through data.go, which
// applies databases, lazy expiry, WATCH and the transaction overlay in one
// place.
//
// Invariants and semantics, where kvarray differs from Redis or has to
// choose:
//   - Keys are 0 to keyspace's limit (241 bytes with default device
//     limits: the array's 252 less the expiry index's 11); longer keys
//     are errors, not absent keys.
//   - A connection's replies come in order, and its commands on one key
//     run in order; pipelined single-key commands of different keys run
//     concurrently (pipeline.go), every other command is a barrier;
//     different connections run concurrently. Every write holds
//     the per-key locks of its keys (in byte order, so multi-key commands
//     cannot deadlock): read-modify-write commands (SET NX/XX/GET, INCR,
//     APPEND, SETRANGE, SETBIT, EXPIRE…) are atomic per key among the
//     clients of this server, not against another process writing to the
//     same devices.
//   - Transactions (tx.go): every data command holds the transaction lock
//     shared, EXEC exclusively, so nothing interleaves with a transaction
//     and no client sees half of one; EXEC's writes are stored as one
//     intent record first, so that a crash leaves all of them or none.
//   - Scripts and functions (scripting.go, functions.go) run as a
//     transaction does: under the exclusive lock, their writes in an
//     overlay committed through one intent record, so a script's writes
//     are all there or none across a crash; a script stopped (SCRIPT
//     KILL, its memory limit, shutdown) applies none.
//   - Outside MULTI, MSET and DEL of several keys run their stores/deletes
//     concurrently: a reader can see some keys written and others not
//     yet, and a failure part way leaves the keys that were written.
//   - Expiry (expire.go) is stored with the value and survives restarts,
//     rebuilds and mechanism changes; an expired key is never returned.
//   - SCAN pages through the array's ordered listing, O(COUNT) per call;
//     its numeric cursor names where to resume (keyspace.go): a key
//     present for the whole scan is returned at least once. DBSIZE and
//     INFO keyspace read the keyspace's counts. KEYS, RANDOMKEY and
//     FLUSHDB list the database's keys (a pass over every device). No
//     command but INFO kvarray reads every value.
//
// Access control (auth.go), as Redis 7: with a password for the default
// user (WithAuth), a connection runs nothing but AUTH, HELLO and QUIT
// until it authenticates (NOAUTH); ACL users are admin or data users, and
// a data user never runs an admin or destructive command (NOPERM).
// Connections from ServeAdmin's listener (the CLI's unix socket) are the
// default user. No command makes the server open a device path or address
// a network client names.
//
// Limits on input (guard.go): a bulk string longer than any argument can
// be (the array's largest value, at most 512 MiB as Redis's
// proto-max-bulk-len, never less than 64 KiB) is dropped as it arrives and
// its command fails with "value too large"; a command of more than 1 GiB
// (Redis's client-query-buffer-limit), more than 1M arguments, an inline
// command over 64 KiB or malformed framing end the connection with "ERR
// Protocol error: ..." as in Redis. So one connection holds at most about
// three times the largest bulk in memory (redcon's buffer doubles, and the
// command is copied out of it).
package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidwall/redcon"

	"github.com/kvarray/kvarray/acl"
	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/internal/keylock"
	"github.com/kvarray/kvarray/keyspace"
	"github.com/kvarray/kvarray/pubsub"
	"github.com/kvarray/kvarray/script"
)

// ErrServerClosed is returned by Serve and ListenAndServe after Shutdown.
var ErrServerClosed = errors.New("server: closed")

// Defaults of the options.
const (
	DefaultMaxClients = 10000
	// DefaultMaxBulk caps the default bulk limit: Redis's
	// proto-max-bulk-len.
	DefaultMaxBulk = 512 << 20
	// DefaultMaxRequest is the default limit on one command's bytes:
	// Redis's client-query-buffer-limit.
	DefaultMaxRequest = 1 << 30
	// DefaultMaxInput is the default limit on the bytes of unfinished
	// commands held across all connections: one request of the largest
	// size, or two 400 MB values half sent (about 200 MB held each), keep
	// the server under 1 GB (bench/memory.sh).
	DefaultMaxInput = 1 << 30
	// DefaultMaxArgs is the most arguments one command may have.
	DefaultMaxArgs = 1 << 20
	// minBulk is the smallest bulk limit the server uses: keys, patterns,
	// options and PING/ECHO messages must fit whatever the value limit.
	minBulk = 64 << 10
)

type options struct {
	devices    []device.Device
	maxClients int
	maxBulk    int64
	maxRequest int64
	maxInput   int64
	errorLog   *log.Logger
	auth       authSpec // auth.go
	hooks      hooks    // observe.go
	databases  int
	// authTimeout: how long an unauthenticated connection may go
	// without sending (WithAuthTimeout).
	authTimeout time.Duration
	// afterIntent, for tests, runs after a transaction's intent record
	// is stored and before its writes: an error stops the commit there,
	// as a crash would.
	afterIntent func() error
	// The RDB file of SAVE and BGSAVE (WithRDBFile), the master to
	// follow from the start and its credentials (WithReplicaOf).
	rdbDir, rdbFile        string
	replicaHost            string
	replicaPort            int
	masterUser, masterPass string
}

// WithRDBFile names the file SAVE and BGSAVE write (Redis's dir and
// dbfilename); by default dump.rdb in the working directory.
func WithRDBFile(dir, name string) Option {
	return func(o *options) { o.rdbDir, o.rdbFile = dir, name }
}

// WithReplicaOf makes the server a replica of the Redis at host:port from
// its start (REPLICAOF), authenticating with user and password when
// password is set (masteruser, masterauth; they serve REPLICAOF too).
func WithReplicaOf(host string, port int, user, password string) Option {
	return func(o *options) {
		o.replicaHost, o.replicaPort, o.masterUser, o.masterPass = host, port, user, password
	}
}

// Option configures New.
type Option func(*options)

// WithDevices gives the server the array's devices, in array order, for
// KVARRAY.FAIL and KVARRAY.RECOVER (which work on mem devices only).
// Without it those commands fail.
func WithDevices(devs []device.Device) Option {
	return func(o *options) { o.devices = devs }
}

// WithMaxClients sets how many connections may be open at once (default
// 10000); a connection over the limit gets "ERR max number of clients
// reached" and is closed.
func WithMaxClients(n int) Option { return func(o *options) { o.maxClients = n } }

// WithMaxBulk sets the longest bulk string the server reads into memory.
// A longer one is dropped as it arrives and its command fails with "value
// too large". Default: the array's largest value, at most 512 MiB; never
// less than 64 KiB.
func WithMaxBulk(n int64) Option { return func(o *options) { o.maxBulk = n } }

// WithMaxRequest sets the most bytes one command may take (dropped bulks
// not counted); a longer command ends the connection with a protocol
// error. Default 1 GiB; never less than the bulk limit plus 64 KiB.
func WithMaxRequest(n int64) Option { return func(o *options) { o.maxRequest = n } }

// WithMaxInput sets the most bytes of unfinished commands (a bulk counts
// whole from its header on) the server holds across all connections; the
// connection whose command would pass it is ended with a protocol error,
// so that many clients sending large values at once cannot exhaust
// memory. Default 1 GiB; never less than the request limit.
func WithMaxInput(n int64) Option { return func(o *options) { o.maxInput = n } }

// WithAuthTimeout sets how long a connection that has not authenticated
// (when a password is required) may go without sending before it is
// closed: default 30 s.
func WithAuthTimeout(d time.Duration) Option { return func(o *options) { o.authTimeout = d } }

// WithErrorLog sets where the server logs what no client can be told:
// a panic in a handler (the connection is closed), accept errors. Default:
// the log package's standard logger.
func WithErrorLog(l *log.Logger) Option { return func(o *options) { o.errorLog = l } }

// WithDatabases sets how many databases (SELECT 0..n-1) there are:
// default 16, at most 255.
func WithDatabases(n int) Option { return func(o *options) { o.databases = n } }

// Server serves one array over RESP2 and RESP3. Create it with New.
type Server struct {
	inputHeld  atomic.Int64 // bytes of unfinished commands, all connections (guard)
	unauthHeld atomic.Int64 // the same, of unauthenticated connections: a budget apart
	givingBack atomic.Bool  // a giveBack is pending
	a          *array.Array
	o          options
	maxValue   int64
	nonce      [nonceLen]byte
	runID      [20]byte // INFO's run_id
	cmds       map[string]*entry
	acl        *acl.ACL // auth.go
	locks      *keylock.Table
	started    time.Time
	version    string

	// ks is the Redis keyspace over the array; set by start.
	ks        *keyspace.Store
	startOnce sync.Once
	startErr  error
	mon       monitors   // MONITOR's connections (monitor.go)
	idle      idleConfig // CONFIG timeout, maxmemory-policy (idle.go)
	// txmu is the transaction lock: shared by every data command,
	// exclusive for EXEC (tx.go) and a batch of scripts (pipe,
	// scriptpipe.go), whose Lua runs one at a time under luaMu.
	txmu  txLock
	pipe  scriptPipe
	luaMu sync.Mutex
	// pending: intent records left behind by failed commits, completed
	// before the next write (tx.go); pendingN is its length.
	pending  [][]byte
	pendMu   sync.Mutex // orders the changes of pending under the shared lock
	pendingN atomic.Int32
	watch    watches
	trk      tracker // client-side caching (tracking.go)
	lat      latencyMonitor
	blk      blocker    // blocked clients (blocking.go)
	lists    listGroups // pushes and pops grouped by list (listgroup.go)
	pause    atomic.Pointer[pause]
	exp      expiry
	// scripts is the Lua engine; script the script running now, if any
	// (scripting.go).
	scripts *script.Engine
	script  atomic.Pointer[scriptRun]
	scans   scanCursors // SCAN's cursors (keyspace.go)
	cfg     runtimeConfig
	limits  collLimits // coll.go

	// ctx is the context of every array operation; cancelled when
	// Shutdown gives up waiting.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	shutdown  bool
	drained   chan struct{} // closed once shutting down with no connections
	drainOnce sync.Once
	nextID    atomic.Int64

	stats      stats
	errorStats errorStats  // info.go
	hub        pubsub.Hub  // pubsub.go
	tasks      tasks       // observe.go
	persist    persistence // replication.go
	repl       replica
	bg         sync.WaitGroup // BGSAVE's
	snaps      snapshots
}

type stats struct {
	connections, rejected, commands, errors atomic.Int64
	hits, misses, expired                   atomic.Int64
	// array operations the server made
	stores, retrieves, deletes, exists, lists atomic.Int64
}

// New returns a server for a, which the caller keeps: after Shutdown the
// caller closes the array (which flushes packing queues and closes the
// devices).
func New(a *array.Array, opts ...Option) *Server {
	maxKey, maxValue := a.Limits()
	o := options{maxClients: DefaultMaxClients, maxBulk: min(maxValue, DefaultMaxBulk), maxRequest: DefaultMaxRequest,
		maxInput: DefaultMaxInput, databases: keyspace.DefaultDatabases, authTimeout: DefaultAuthTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	o.maxBulk = max(o.maxBulk, minBulk, int64(maxKey))
	o.maxRequest = max(o.maxRequest, o.maxBulk+minBulk)
	o.maxInput = max(o.maxInput, o.maxRequest)
	if o.errorLog == nil {
		o.errorLog = log.Default()
	}
	s := &Server{
		a:         a,
		o:         o,
		maxValue:  maxValue - keyspace.ValueOverhead,
		locks:     keylock.New(),
		started:   time.Now(),
		version:   moduleVersion(),
		listeners: map[net.Listener]struct{}{},
		conns:     map[*conn]struct{}{},
		drained:   make(chan struct{}),
	}
	if _, err := rand.Read(s.nonce[:]); err != nil {
		panic("server: no randomness: " + err.Error())
	}
	rand.Read(s.runID[:])
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.cfg.init(o)
	s.trk.maxKeys = 1000000 // Redis's tracking-table-max-keys
	s.scripts = s.newScripts()
	s.limits.init()
	s.cmds = make(map[string]*entry, len(commands))
	for _, c := range commands {
		s.cmds[c.name] = &entry{command: c}
	}
	s.acl = newACL(s.cmds, o.auth)
	s.initLatency()
	if s.o.rdbDir == "" {
		s.o.rdbDir, _ = os.Getwd()
	}
	if s.o.rdbFile == "" {
		s.o.rdbFile = "dump.rdb"
	}
	s.persist.lastSave.Store(s.started.Unix())
	s.persist.lastOK.Store(true)
	s.repl.user, s.repl.pass = o.masterUser, o.masterPass
	return s
}

// moduleVersion is kvarray's version as the Go toolchain recorded it.
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path == "github.com/kvarray/kvarray" && bi.Main.Version != "" {
			return bi.Main.Version
		}
		for _, d := range bi.Deps {
			if d.Path == "github.com/kvarray/kvarray" {
				return d.Version
			}
		}
	}
	return "(devel)"
}

// ListenAndServe listens on the TCP address addr and serves; see Serve.
func (s *Server) ListenAndServe(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(l)
}

// Serve accepts connections on l and serves them until Shutdown, then
// returns ErrServerClosed; it returns another error if l fails. Serve may
// be called for several listeners. It closes l on return.
func (s *Server) Serve(l net.Listener) error {
	if err := s.start(); err != nil {
		l.Close()
		return err
	}
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	gl := &listener{Listener: l, s: s}
	err := redcon.Serve(gl, s.serveRESP, s.accepted, nil)
	s.mu.Lock()
	delete(s.listeners, l)
	closed := s.shutdown
	s.mu.Unlock()
	if closed {
		return ErrServerClosed
	}
	if err == nil {
		err = gl.err
	}
	return err
}

// start opens the keyspace, completes the transactions a crash
// interrupted and starts the expiry cycle, once, before any command runs.
func (s *Server) start() error {
	s.startOnce.Do(func() {
		ks, err := keyspace.Open(s.ctx, s.a, s.o.databases)
		if err != nil {
			s.startErr = fmt.Errorf("server: %w", err)
			return
		}
		s.ks = ks
		if err := s.replayIntents(); err != nil {
			s.startErr = fmt.Errorf("server: %w", err)
			return
		}
		if err := s.loadFunctions(s.ctx); err != nil {
			s.startErr = fmt.Errorf("server: %w", err)
			return
		}
		ks.StartCounting(s.ctx)
		s.startExpiry()
		if s.o.replicaHost != "" {
			s.startReplica(s.o.replicaHost, s.o.replicaPort)
		}
	})
	return s.startErr
}

// Addrs returns the addresses the server listens on.
func (s *Server) Addrs() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	var addrs []net.Addr
	for l := range s.listeners {
		addrs = append(addrs, l.Addr())
	}
	return addrs
}

// Shutdown stops accepting connections, lets every connection finish the
// commands it has read (their replies are sent), closes the connections
// and returns. If ctx ends first, it cancels the array operations in
// flight, closes the connections at once and returns ctx's error. The
// caller then closes the array.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.shutdown {
		s.shutdown = true
		for l := range s.listeners {
			l.Close()
		}
	}
	conns := s.connList()
	if len(conns) == 0 {
		s.closeDrained()
	}
	s.mu.Unlock()
	s.stopExpiry()
	s.repl.mu.Lock()
	s.stopLinkLocked() // still a replica (read-only) until it exits
	s.repl.mu.Unlock()
	for _, c := range conns {
		c.drain()
	}
	select {
	case <-s.drained:
		s.bg.Wait()
		s.saveCounts(ctx)
		return nil
	case <-ctx.Done():
	}
	s.cancel()
	s.mu.Lock()
	conns = s.connList()
	s.mu.Unlock()
	for _, c := range conns {
		c.Conn.Close()
	}
	s.closeDrained()
	return ctx.Err()
}

// saveCounts stores the keyspace's counts once no command runs, so that
// the next start need not recount (keyspace.Store.SaveCounts).
func (s *Server) saveCounts(ctx context.Context) {
	s.startOnce.Do(func() {}) // waits for a start in progress; none after
	if s.ks == nil {
		return
	}
	s.ks.StopCounting()
	if err := s.ks.SaveCounts(ctx); err != nil {
		s.o.errorLog.Printf("kvarray server: %v (the next start recounts)", err)
	}
}

func (s *Server) connList() []*conn {
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	return cs
}

func (s *Server) closeDrained() { s.drainOnce.Do(func() { close(s.drained) }) }

// listener hands redcon guarded, tracked connections. Once the server
// shuts down its Accept fails only when every connection is done, because
// redcon closes all its connections as soon as Accept fails.
type listener struct {
	net.Listener
	s   *Server
	err error // why Accept failed, when not shut down
}

func (l *listener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			l.s.mu.Lock()
			closing := l.s.shutdown
			l.s.mu.Unlock()
			if closing {
				<-l.s.drained
				return nil, net.ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// As net/http: back off rather than spin (redcon
				// retries at once).
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				l.s.o.errorLog.Printf("kvarray server: accept: %v; retrying in %v", err, delay)
				time.Sleep(delay)
				continue
			}
			l.err = err
			return nil, net.ErrClosed
		}
		delay = 0
		if c := l.s.track(nc); c != nil {
			return c, nil
		}
	}
}

// track registers a new connection, or refuses it (closed, nil).
func (s *Server) track(nc net.Conn) *conn {
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		nc.Close()
		return nil
	}
	if int64(len(s.conns)) >= s.cfg.maxClients.Load() {
		s.mu.Unlock()
		s.stats.rejected.Add(1)
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(nc, "-ERR max number of clients reached\r\n")
		nc.Close()
		return nil
	}
	now := time.Now()
	c := &conn{
		Conn:    nc,
		s:       s,
		id:      s.nextID.Add(1),
		addr:    nc.RemoteAddr().String(),
		laddr:   nc.LocalAddr().String(),
		fd:      socketFD(nc),
		created: now,
		proto:   2,
		replies: newReplyEstimate(),
	}
	c.last.Store(now.UnixNano())
	if s.acl.NoPassDefault() {
		// Redis: a connection starts as the default user when it is on
		// and needs no password, and stays so if that changes.
		c.user.Store(s.acl.Default())
	}
	c.g = guard{maxBulk: s.o.maxBulk, maxQuery: s.o.maxRequest, maxArgs: DefaultMaxArgs, nonce: s.nonce,
		held: &s.inputHeld, maxHeld: s.o.maxInput, asideFrom: asideFrom,
		unauth: func() bool { return s.who(c) == nil }, unauthHeld: &s.unauthHeld, maxUnauthHeld: unauthBudget(s.o.maxInput)}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	s.stats.connections.Add(1)
	return c
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	if s.shutdown && len(s.conns) == 0 {
		s.closeDrained()
	}
	s.mu.Unlock()
}

// accepted is redcon's accept hook: the connection's state becomes its
// context.
func (s *Server) accepted(rc redcon.Conn) bool {
	c, ok := rc.NetConn().(*conn)
	if !ok {
		return false
	}
	rc.SetContext(c)
	return true
}

// conn is a client connection: the socket, guarded, and the client's
// state. Read and the fields without a lock are used by the connection's
// goroutine only.
type conn struct {
	net.Conn
	s *Server
	// killed: CLIENT KILL closed it; until its goroutine has gone, a later
	// CLIENT KILL neither counts nor closes it again (Redis frees a killed
	// client at once).
	killed  atomic.Bool
	unsent  int           // reply bytes not yet flushed (respWriter); the connection's goroutine only
	replies replyEstimate // sizes its concurrent runs (pipeline.go); the connection's goroutine only
	run     pipelineRun   // its concurrent runs' reused state (pipeline.go); the connection's goroutine only
	g       guard
	pending []byte // guard output that did not fit the caller's buffer
	// peeked: bytes read from the socket while the client was blocked
	// (blocking.go), and the error that ended that read, to go through
	// the guard first.
	peeked  []byte
	peekErr error
	perr    error // protocol error to report once pending is delivered
	readErr error
	// authWait: the socket has authDeadline's read deadline.
	authWait bool
	// Pub/sub (pubsub.go): the subscriptions, the push queue once the
	// connection has subscribed, and the write lock that keeps messages
	// out of replies.
	subsMu sync.Mutex
	subs   subs
	push   *pushQueue
	wmu    sync.Mutex
	proto3 atomic.Bool // proto is 3, for Deliver on other goroutines
	// Client-side caching (tracking.go): the mode, guarded by the
	// server's tracker.mu, and whether it is on, for the hot paths.
	trk      trackState
	tracking atomic.Bool
	closed   atomic.Bool // Close ran: a redirect to it is broken
	// pushShared is push, for other goroutines; wantPush: a tracking
	// client redirects to it, which needs its push queue, started by
	// its own goroutine at its next command.
	pushShared atomic.Pointer[pushQueue]
	wantPush   atomic.Bool

	id          int64
	addr, laddr string
	fd          int // the socket's descriptor (CLIENT LIST), -1 if none
	created     time.Time
	last        atomic.Int64 // UnixNano of the last command
	lastCmd     atomic.Pointer[string]
	quit        bool
	draining    atomic.Bool
	closeOnce   sync.Once
	// The client's protocol (2 or 3), database and transaction state.
	proto    int
	db       int
	multi    bool
	txFailed bool
	queued   [][][]byte
	watching map[watchKey]int64 // expire-at when watched
	dirty    atomic.Bool        // a watched key was written
	// replyMode is CLIENT REPLY's.
	replyMode int
	// master: the replication link's client (replication.go), which
	// writes on a replica and runs every command; rdbOnly: REPLCONF
	// rdb-only, SYNC closes the connection after the file.
	master  bool
	rdbOnly bool
	// replicaLink: the connection sent SYNC (a replica); txShown: 1 +
	// the commands queued while in MULTI, 0 outside (CLIENT LIST, from
	// other goroutines).
	replicaLink atomic.Bool
	txShown     atomic.Int32

	mu           sync.Mutex // guards the fields below
	name         string
	libName, lib string
	user         atomic.Pointer[acl.User] // as authenticated (auth.go)
	dbShown      atomic.Int64             // db, for CLIENT LIST from other goroutines
}

// Read passes the client's bytes through the guard. Once the server is
// draining it reports end of input, so that redcon finishes the commands
// it has read, flushes their replies and closes.
func (c *conn) Read(p []byte) (int, error) {
	for {
		if len(c.pending) > 0 {
			n := copy(p, c.pending)
			c.pending = c.pending[n:]
			if len(c.pending) == 0 {
				c.pending = nil
			}
			return n, nil
		}
		if c.perr != nil {
			// Every reply to the commands before the error has been
			// flushed: redcon reads only when it has run them all.
			c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			io.WriteString(c.Conn, "-ERR "+c.perr.Error()+"\r\n")
			return 0, c.perr
		}
		if c.readErr != nil {
			return 0, c.readErr
		}
		if c.draining.Load() {
			return 0, io.EOF
		}
		if c.g.state == stAside {
			// A large bulk's bytes go from the socket to its own
			// buffer, not through redcon's.
			n, err := c.Conn.Read(c.g.asideRoom())
			c.pending = append(c.pending, c.g.asideFilled(n)...)
			if err != nil {
				if c.draining.Load() {
					err = io.EOF
				}
				c.readErr = err
			}
			continue
		}
		if err := c.authDeadline(); err != nil {
			return 0, err
		}
		var n int
		var err error
		switch {
		case len(c.peeked) > 0:
			n = copy(p, c.peeked)
			c.peeked = c.peeked[n:]
		case c.peekErr != nil:
			err, c.peekErr = c.peekErr, nil
		default:
			n, err = c.Conn.Read(p)
		}
		if err != nil {
			if c.draining.Load() {
				err = io.EOF // woken by drain's deadline
			}
			c.readErr = err
		}
		if n > 0 {
			w, perr := c.g.feed(p[:n], &c.pending)
			if perr != nil {
				c.perr = perr
			}
			if w > 0 {
				return w, nil
			}
		}
	}
}

// DefaultAuthTimeout is how long a connection that has not authenticated
// may wait between reads: one that never authenticates holds its socket
// and its part of the unauthenticated budget only that long.
const DefaultAuthTimeout = 30 * time.Second

// unauthBudget is the input budget of unauthenticated connections, out
// of the server's maxInput: a sixteenth, at least 1 MiB (each may hold
// about unauthMaxArgs × unauthMaxBulk bytes).
func unauthBudget(maxInput int64) int64 { return max(maxInput/16, 1<<20) }

// authDeadline sets a read deadline authTimeout away while the connection
// has not authenticated, and clears it once it has. drain's deadline
// wins: drain sets draining before its deadline, so a deadline set here
// after it is seen.
func (c *conn) authDeadline() error {
	switch unauth := c.g.unauth != nil && c.g.unauth(); {
	case unauth:
		c.Conn.SetReadDeadline(time.Now().Add(c.s.o.authTimeout))
		c.authWait = true
	case c.authWait:
		c.Conn.SetReadDeadline(time.Time{})
		c.authWait = false
	default:
		return nil
	}
	if c.draining.Load() {
		return io.EOF
	}
	return nil
}

// drain makes the connection end once it has run what it has read: a
// Read blocked on the socket returns at once.
func (c *conn) drain() {
	c.draining.Store(true)
	c.Conn.SetReadDeadline(time.Now())
}

// Close closes the socket and forgets the connection; redcon calls it when
// the connection ends.
func (c *conn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		if c.Conn != nil {
			err = c.Conn.Close()
		}
		if c.s != nil {
			c.closed.Store(true)
			c.s.unwatch(c)
			c.s.untrack(c)
			c.s.disableTracking(c)
			c.s.unsubscribeAll(c)
		}
		if c.push != nil {
			c.push.stop()
		}
		c.g.release()
		c.g.dropAside()
		if c.s != nil && c.g.peak.Load() >= giveBackFrom {
			c.s.giveBack()
		}
	})
	return err
}

// asideFrom is the length from which a bulk is held aside rather than
// read into redcon's buffer (see guard).
const asideFrom = 1 << 20

// giveBackFrom is the largest command from which the end of its
// connection gives memory back.
const giveBackFrom = 64 << 20

// giveBack returns the memory of the read buffers of connections that
// ended to the operating system, a second after the first of them ended
// (so that a group of them is collected at once). redcon keeps a
// connection's read buffer at the size of its largest command until the
// connection ends, and the garbage collector, with the heap far under its
// goal, would not collect it for a long time: a server that took one
// 400 MB value would go on holding 512 MB.
func (s *Server) giveBack() {
	if s.givingBack.Swap(true) {
		return
	}
	time.AfterFunc(time.Second, func() {
		s.givingBack.Store(false)
		debug.FreeOSMemory()
	})
}

// socketFD is nc's file descriptor, or -1.
func socketFD(nc net.Conn) int {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	if raw.Control(func(f uintptr) { fd = int(f) }) != nil {
		return -1
	}
	return fd
}
