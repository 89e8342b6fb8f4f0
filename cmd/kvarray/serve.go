package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/mechanism"
	"github.com/kvarray/kvarray/metrics"
	"github.com/kvarray/kvarray/server"
)

// shutdownTimeout bounds how long serve waits for connections to finish
// their commands after SIGINT or SIGTERM.
const shutdownTimeout = 30 * time.Second

func (c *cli) serveCmd() *cobra.Command {
	var o serveFlags
	cmd := &cobra.Command{
		Use:   "serve [--listen ADDR] [--metrics-listen ADDR] [--log-format text|json] [--scrub-after-crash=false] [--takeover]",
		Short: "Serve the array over the Redis protocol (redis-cli, Redis clients)",
		Long: `serve opens the array of the config file and serves it over the Redis
protocol (RESP2, and RESP3 after HELLO 3) on ADDR (default 127.0.0.1:6380), until SIGINT or SIGTERM:
then it stops accepting connections, lets each finish the commands it has
sent, and closes the array (flushing packing queues and closing devices).

With no --config and no ./kvarray.yaml, serve creates the default array
first: 6 Pebble devices under ./data in hybrid mode, with its config
written to ./kvarray.yaml so that the other commands see the same array.

While it runs, 'kvarray status', 'replace', 'rebuild', 'resync', 'scrub'
and 'fail' reach it through its admin socket beside the config file
(.kvarray.yaml.sock) and work on the array online.

serve holds the array's lease (lease: in the config, 10s) on the devices
while it runs: another host's or directory's serve is refused, naming
it, until the lease expires, unless started with --takeover, which
deposes it (the devices refuse its later writes; it stops).

After an unclean shutdown (a crash, kill -9, power loss) serve starts
'scrub --repair' in the background, as md resyncs a dirty array: status
shows its progress; --scrub-after-crash=false leaves it to the operator.

Security (kvarray.yaml, as Redis 7): requirepass sets the default user's
password; users: [{name, password, role: data|admin}] adds ACL users
(data users may not run KVARRAY.*, FLUSHALL, FLUSHDB, CONFIG SET,
SHUTDOWN, DEBUG); tls_port with tls_cert_file and tls_key_file serves
TLS too (tls_ca_cert_file: clients must present a certificate it signed).
Protected mode (protected_mode, default true) refuses to listen beyond
loopback without requirepass.

--metrics-listen (or metrics_listen) serves Prometheus metrics on
http://ADDR/metrics. Events (devices failed or back, rebuild, resync and
scrub started, progress, finished) are logged on standard error with
log/slog, as text or, with --log-format json (or log_format), JSON.

Values are Redis strings, in databases 0 to 15, with expiry stored with
the value; MULTI/EXEC transactions are all-or-nothing, across a crash too.
The commands and what differs from Redis: docs/compatibility.md (COMMAND
lists them). The array's own commands: KVARRAY.STATUS, KVARRAY.SET key
value RM, KVARRAY.SCRUB, KVARRAY.REBUILD DEV, KVARRAY.FAIL DEV and
KVARRAY.RECOVER DEV (mem devices).`,
		Args: args(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.logFormat != "" && o.logFormat != "text" && o.logFormat != "json" {
				return usageError{cmd, fmt.Errorf("--log-format %q: want text or json", o.logFormat)}
			}
			return c.serve(o, cmd.Flags().Changed("config"))
		},
	}
	cmd.Flags().StringVar(&o.listen, "listen", "127.0.0.1:6380", "listen on TCP address `ADDR`")
	cmd.Flags().StringVar(&o.metricsListen, "metrics-listen", "", "serve Prometheus /metrics on `ADDR` (default: metrics_listen of the config; none)")
	cmd.Flags().StringVar(&o.logFormat, "log-format", "", "log events as `text` or json (default: log_format of the config, else text)")
	cmd.Flags().BoolVar(&o.takeover, "takeover", false, "take the array over from the process holding its lease (a standby host: see docs/serving.md, failover); its late writes are refused by the devices")
	cmd.Flags().BoolVar(&o.scrubAfterCrash, "scrub-after-crash", true, "after an unclean shutdown, run 'scrub --repair' in the background at once (false: leave it to the operator)")
	return cmd
}

type serveFlags struct {
	listen, metricsListen, logFormat string
	scrubAfterCrash, takeover        bool
}

func (c *cli) serve(o serveFlags, explicitConfig bool) (err error) {
	ctx, stop := signal.NotifyContext(c.ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := c.serveConfig(ctx, explicitConfig)
	if err != nil {
		return err
	}
	cfg.SetTakeover(o.takeover)
	sc := cfg.Serve
	tuneGC(serveMemoryLimit)
	tuneProcs()
	if o.metricsListen == "" {
		o.metricsListen = sc.MetricsListen
	}
	if o.logFormat == "" {
		o.logFormat = sc.LogFormat
	}
	log := newLogger(c.stderr, o.logFormat)
	if err := protectedMode(o.listen, &sc); err != nil {
		return err
	}
	sock, err := adminSocket(c.configPath)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if cl, _ := dialAdmin(ctx, sock); cl != nil {
		cl.Close()
		return fmt.Errorf("serve: a kvarray serve already holds the array of %s (it answers on %s): stop it first, or use it ('kvarray status')", c.configPath, sock)
	}
	_ = os.Remove(sock) // left by a server that died

	var m *metrics.Metrics
	if o.metricsListen != "" {
		m = metrics.New()
	}
	a, devs, slots, err := c.openForServe(ctx, cfg, m)
	if err != nil {
		return err
	}
	// Listeners: closed by srv.Shutdown once served; by undo until then.
	var ls []net.Listener
	undo := func(err error) error {
		for _, l := range ls {
			l.Close()
		}
		if cerr := a.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return err
	}
	l, err := net.Listen("tcp", o.listen)
	if err != nil {
		return undo(fmt.Errorf("serve: %w", err))
	}
	ls = append(ls, l)
	var tlsL net.Listener
	if sc.TLSPort > 0 {
		if tlsL, err = listenTLS(cfg, o.listen); err != nil {
			return undo(fmt.Errorf("serve: %w", err))
		}
		ls = append(ls, tlsL)
	}
	ul, err := listenAdmin(sock)
	if err != nil {
		return undo(fmt.Errorf("serve: admin socket: %w", err))
	}
	ls = append(ls, ul)
	var ml net.Listener
	if m != nil {
		if ml, err = net.Listen("tcp", o.metricsListen); err != nil {
			return undo(fmt.Errorf("serve: --metrics-listen: %w", err))
		}
		ls = append(ls, ml)
		if ip := ml.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() && sc.MetricsToken == "" {
			return undo(fmt.Errorf("serve: --metrics-listen %s: %w: /metrics would be open to anyone who reaches this host; set metrics_token in %s (scrapers then send Authorization: Bearer TOKEN), or listen on 127.0.0.1", o.metricsListen, errOpenMetrics, c.configPath))
		}
	}

	users := make([]server.User, len(sc.Users))
	for i, u := range sc.Users {
		users[i] = server.User{Name: u.Name, Password: u.Password, Admin: u.Role == config.RoleAdmin}
	}
	var replaceMu sync.Mutex
	opts := []server.Option{server.WithDevices(devs), server.WithAuth(sc.Requirepass, users...), server.WithLogger(log),
		server.WithReplacer(func(ctx context.Context, a *array.Array, dev int, spec string, force bool) (string, error) {
			replaceMu.Lock()
			defer replaceMu.Unlock()
			cfg, err := config.Load(c.configPath)
			if err != nil {
				return "", err
			}
			adopt := func(nd device.Device) error {
				if m != nil {
					name := spec
					if name == "" {
						name, _ = cfg.DeviceName(dev)
					}
					nd = m.WrapDevice(dev, name, nd)
				}
				return adoptInSlot(ctx, a, slots[dev], dev, nd)
			}
			closeOld := func() {
				name, _ := cfg.DeviceName(dev)
				a.SetDeviceState(dev, mechanism.Failed)
				_ = slots[dev].swap(device.Unavailable(name, errors.New("being replaced"))).Close()
			}
			return replaceDevice(ctx, c.configPath, cfg, a, dev, spec, force, adopt, closeOld)
		})}
	if m != nil {
		opts = append(opts, server.WithCommandObserver(m.ObserveCommand), server.WithStoreObserver(m.ObserveStore))
	}
	if cfg.Databases > 0 {
		opts = append(opts, server.WithDatabases(cfg.Databases))
	}
	if sc.ACLFile != "" {
		opts = append(opts, server.WithACLFile(cfg.Path(sc.ACLFile)))
	}
	rdbDir := cfg.Dir()
	if sc.Dir != "" {
		rdbDir = cfg.Path(sc.Dir)
	}
	opts = append(opts, server.WithRDBFile(rdbDir, sc.DBFilename))
	if host, port, ok := sc.Replica(); ok {
		opts = append(opts, server.WithReplicaOf(host, port, sc.MasterUser, sc.MasterAuth))
	}
	srv := server.New(a, opts...)
	if err := srv.LoadACLFile(); err != nil {
		return undo(fmt.Errorf("serve: %w", err))
	}
	served := make(chan error, 3)
	go func() { served <- srv.Serve(l) }()
	if tlsL != nil {
		go func() { served <- srv.Serve(tlsL) }()
	}
	go func() { served <- srv.ServeAdmin(ul) }()
	fmt.Fprintf(c.stdout, "kvarray serve: array %s (%s, %d devices) listening on %s\n", a.ID(), a.Mode(), a.N(), l.Addr())
	if tlsL != nil {
		fmt.Fprintf(c.stdout, "TLS on %s\n", tlsL.Addr())
	}
	fmt.Fprintf(c.stdout, "admin socket %s\n", sock)
	var hs *http.Server
	if m != nil {
		m.Watch(a, srv)
		mux := http.NewServeMux()
		mux.Handle("/metrics", requireBearer(sc.MetricsToken, m.Handler()))
		hs = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := hs.Serve(ml); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics listener failed", "err", err)
			}
		}()
		fmt.Fprintf(c.stdout, "metrics on http://%s/metrics\n", ml.Addr())
	}
	hint := connectHint(l.Addr())
	if srv.RequiresPassword() {
		hint += " -a PASSWORD"
	}
	scrubCtx, stopScrub := context.WithCancel(context.Background())
	scrubDone := make(chan struct{})
	switch {
	case !a.Unclean():
		close(scrubDone)
	case o.scrubAfterCrash:
		// As md resyncs after a dirty shutdown: until the scrub has run,
		// a write in flight at the crash may read back and then be lost
		// again with a device (the write hole).
		fmt.Fprintln(c.stdout, uncleanScrubbing)
		log.Warn("unclean shutdown: the array was not closed by the process before", "action", "scrub --repair started in the background")
		go func() {
			defer close(scrubDone)
			_, _ = srv.Scrub(scrubCtx, true) // logged as a task; an interrupted one runs again at the next start
		}()
	default:
		close(scrubDone)
		fmt.Fprintln(c.stdout, uncleanAdvice)
		log.Warn("unclean shutdown: the array was not closed by the process before", "advice", "run kvarray scrub --repair")
	}
	// The banner's last line: tests wait for it.
	fmt.Fprintf(c.stdout, "connect with: %s\n", hint)
	log.Info("serving", "array", a.ID().String(), "listen", l.Addr().String(), "devices", a.N())
	watchDone := make(chan struct{})
	watchCtx, stopWatch := context.WithCancel(context.Background())
	go func() { defer close(watchDone); watchStates(watchCtx, a, log, time.Second) }()

	var serveErr error
	select {
	case <-ctx.Done():
		fmt.Fprintln(c.stdout, "kvarray serve: shutting down")
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			serveErr = fmt.Errorf("serve: shutdown: connections still busy after %v were closed: %w", shutdownTimeout, err)
		}
		if err := <-served; !errors.Is(err, server.ErrServerClosed) && serveErr == nil {
			serveErr = fmt.Errorf("serve: %w", err)
		}
	case <-a.DeposedC():
		// Another process owns the array now: every write of this one
		// is refused, and its reads may be stale. Stop at once.
		serveErr = fmt.Errorf("serve: %w", a.Deposed())
		log.Error("deposed", "err", a.Deposed())
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	case err := <-served:
		// A listener failed: stop serving the connections too.
		serveErr = fmt.Errorf("serve: %w", err)
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		srv.Shutdown(sctx)
	}
	stopWatch()
	<-watchDone
	stopScrub()
	<-scrubDone
	if hs != nil {
		hs.Close()
	}
	if err := a.Close(); err != nil {
		serveErr = errors.Join(serveErr, fmt.Errorf("serve: closing the array: %w", err))
	}
	if serveErr == nil {
		log.Info("stopped")
		fmt.Fprintln(c.stdout, "kvarray serve: stopped")
	}
	return serveErr
}

// serveConfig loads the config file, or creates the default array and
// its config first when there is none and none was asked for.
func (c *cli) serveConfig(ctx context.Context, explicitConfig bool) (*config.Config, error) {
	cfg, err := config.Load(c.configPath)
	if errors.Is(err, fs.ErrNotExist) {
		if explicitConfig {
			return nil, fmt.Errorf("config file %s does not exist (create one with 'kvarray init', or run serve without --config for the default array)", c.configPath)
		}
		return c.createDefault(ctx)
	}
	return cfg, err
}

// openForServe opens the array of cfg. It opens the devices itself, to
// give them to the server (KVARRAY.FAIL and RECOVER work on mem devices),
// to wrap them for metrics (m, when not nil) and in slots (online
// replace), and to open the array with the options of a long-running
// process (automatic resync). It returns the devices unwrapped, and the
// slots.
func (c *cli) openForServe(ctx context.Context, cfg *config.Config, m *metrics.Metrics) (*array.Array, []device.Device, []*slot, error) {
	// mem devices are new at every open: their array is created.
	mem := allMem(cfg)
	devs := config.OpenDevices(cfg, mem)
	slots := make([]*slot, len(devs))
	used := make([]device.Device, len(devs))
	for i, d := range devs {
		if m != nil {
			name, _ := cfg.DeviceName(i)
			d = m.WrapDevice(i, name, d)
		}
		slots[i] = newSlot(d)
		used[i] = slots[i]
	}
	var a *array.Array
	var err error
	opts := append(cfg.ServeOptions(), array.WithReopen(func(ctx context.Context, i int) (device.Device, error) {
		return nil, reopenInSlot(cfg, m, slots[i], i)
	}))
	if mem {
		a, err = array.Create(ctx, used, opts...)
	} else if err = someAnswers(ctx, cfg, devs); err == nil {
		a, err = array.Open(ctx, used, opts...)
	}
	if err != nil {
		for _, d := range devs {
			d.Close()
		}
		return nil, nil, nil, err
	}
	return a, devs, slots, nil
}

// someAnswers fails, as config.OpenConfig does, when no device could be
// opened: the array was never created, or moved.
func someAnswers(ctx context.Context, cfg *config.Config, devs []device.Device) error {
	var first error
	for i, d := range devs {
		_, err := d.Info(ctx)
		if err == nil {
			return nil
		}
		if i == 0 {
			first = err
		}
	}
	return fmt.Errorf("open: none of the %d devices can be opened; device 0 (%s): %w", len(devs), cfg.Devices[0], first)
}

// createDefault creates the default array (what `kvarray init` makes) in
// the config file's directory, writes the config file and returns it.
func (c *cli) createDefault(ctx context.Context) (*config.Config, error) {
	dir, err := filepath.Abs(filepath.Dir(c.configPath))
	if err != nil {
		return nil, err
	}
	cfg := config.Default("data", 6)
	cfg.SetDir(dir)
	data, err := cfg.Marshal()
	if err != nil {
		return nil, err
	}
	a, err := config.Create(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("serve: no %s, and creating the default array in %s failed: %w", c.configPath, filepath.Join(dir, "data"), err)
	}
	id := a.ID()
	if err := a.Close(); err != nil {
		return nil, fmt.Errorf("serve: creating the default array: %w", err)
	}
	if err := writeFile(c.configPath, data); err != nil {
		return nil, fmt.Errorf("serve: array %s created, but writing its config: %w", id, err)
	}
	fmt.Fprintf(c.stdout, "created array %s: 6 pebble devices in %s, config %s\n", id, filepath.Join(dir, "data"), c.configPath)
	return config.Load(c.configPath)
}

func allMem(cfg *config.Config) bool {
	for _, d := range cfg.Devices {
		if !strings.HasPrefix(d, "mem:") {
			return false
		}
	}
	return len(cfg.Devices) > 0
}

// connectHint is the redis-cli command line that reaches addr.
func connectHint(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "redis-cli -h " + addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() || host == "localhost" {
		return "redis-cli -p " + port
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return "redis-cli -p " + port + " (from this machine)"
	}
	return "redis-cli -h " + host + " -p " + port
}

// errOpenMetrics: /metrics beyond loopback with no token.
var errOpenMetrics = errors.New("a non-loopback address needs metrics_token")

// requireBearer serves h to requests that carry token as a bearer token
// (all requests when token is empty), compared in constant time; others
// get 401 with the header that says what to send.
func requireBearer(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kvarray metrics"`)
			http.Error(w, "401 unauthorized: send Authorization: Bearer <metrics_token>", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
