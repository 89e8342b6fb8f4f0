// Package redis is the remote device: a device.Device backed by one
// database of a Redis-protocol server (Redis, Valkey, Kvrocks), for
// `redis://HOST:PORT/DB` devices. An array whose devices are servers on
// different hosts survives the loss of a whole host.
//
// Commands: Store is SET, Retrieve is GET (a nil reply is
// device.ErrNotFound), Delete is DEL, Exist is EXISTS, Iterate is SCAN with
// MATCH on the glob-escaped prefix, and Batch sends all its ops as one
// pipeline (one round trip), with a result per op.
//
// Invariants:
//   - Nothing is retried silently: go-redis's command retries and dial
//     retries are off. A timeout (see WithTimeout), a refused or dropped
//     connection, a closed device and any server error reply (LOADING,
//     BUSY, MASTERDOWN, READONLY, NOAUTH, an unknown command...) surface as
//     errors wrapping device.ErrDeviceFailed, so the array marks the device
//     failed and serves from the others. Nor is anything delivered late:
//     a call that failed has either reached the server before its error
//     was returned or never will (connections close abortively, see
//     guardedDialer). Two replies are told apart: OOM
//     (the server's maxmemory is reached) is device.ErrFull (and
//     ErrNoSpace): the array keeps reading it and stops writing it until
//     a trial write succeeds again; and
//     WRONGTYPE (the key holds something other than a string, so not a
//     value this device wrote) is device.ErrCorrupt. A call whose own
//     context is done returns the context's error, as on every backend.
//   - Iteration order is not guaranteed: Info().Ordered is false. SCAN walks
//     the whole key space for any prefix (MATCH filters on the server), and
//     may return a key twice when the server resizes its table during the
//     scan; Iterate drops the duplicates, at the cost of remembering the
//     keys it has passed to fn. Keys stored or deleted during an iteration
//     may or may not be seen. The array does not depend on order: its Keys
//     sorts what the devices return.
//   - A server restart is detected (its run_id changes) when the first new
//     connection is made to it, and that call fails with
//     device.ErrDeviceFailed even if no call saw the outage: a server
//     without persistence comes back empty, and one with it may have lost
//     its last writes, so the array must not take it for a healthy member.
//     Later calls are served, so that the array can re-admit the device
//     (adopt or resync it, then repair). After an outage go-redis may keep
//     failing new connections for up to a second after the server is back
//     (its dial circuit breaker probes once a second).
//   - Once fenced (Fence, device.Fencer: the array's owner epoch), every
//     SET and DEL is a Lua script (EVAL) that checks the fence key in the
//     same round trip and refuses the write (device.ErrFenced, not a
//     device failure) once another owner's token of the same or a newer
//     epoch holds it; an older or absent fence it replaces first.
//   - Durability is the server's: an acknowledged write is in the server's
//     memory, and on its disk only as its appendonly/save settings say.
//   - Open refuses a server whose maxmemory is set with an eviction policy
//     other than noeviction: such a server drops keys silently when full.
//     (When CONFIG is disabled on the server the check is skipped.)
//   - Limits are enforced client-side, before anything is sent, exactly as
//     on the other backends. The capacity (WithCapacity) is reported in
//     Info and not enforced by the client: the server's maxmemory with
//     noeviction enforces a limit, and its OOM errors are ErrFull.
//   - Info.Keys and Info.Used (the sum of len(key)+len(value)) are exact
//     when no writes run concurrently: both come from one SCAN of the
//     database with the value lengths (STRLEN) pipelined per page, so Info
//     costs a pass over the keys, as the array's Status does anyway. The
//     server's own memory figure, approximate and including its overhead,
//     is MemoryUsed.
//   - A server answering garbage cannot take the process down: every
//     connection checks the reply stream before go-redis parses it (see
//     guardConn), so a wild length fails the call with
//     device.ErrDeviceFailed instead of an allocation of that size. A wrong
//     but well-formed value is returned as a value: the array's checksums
//     catch it. SCAN stops with device.ErrDeviceFailed when the server
//     hands back a cursor it already gave (a real SCAN never repeats one
//     before it ends), so a server cannot keep an iteration going forever.
//   - Close closes the client; calls after Close (and calls in flight when
//     it closes) return device.ErrDeviceFailed.
//   - go-redis's package-level logger is silenced at the first Open (it is
//     process-wide), since every failure it would log is returned as an
//     error, and its lines would clutter CLI output.
package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/kvarray/kvarray/device"
)

// DefaultTimeout bounds each round trip to the server unless WithTimeout
// says otherwise.
const DefaultTimeout = 2 * time.Second

// DefaultPort is the port of a spec that names none.
const DefaultPort = 6379

// scanCount is the COUNT hint of each SCAN: keys examined per round trip.
const scanCount = 1000

// Option configures Open.
type Option func(*options)

type options struct {
	limits   device.Limits
	capacity int64
	timeout  time.Duration
	poolSize int
}

// WithLimits sets the key and value limits; zero fields take the KV-SSD
// defaults (keys of 4..255 bytes, values up to 2 MiB).
func WithLimits(l device.Limits) Option { return func(o *options) { o.limits = l } }

// WithCapacity sets the capacity reported by Info, in bytes; 0 (the
// default) is unlimited. The client does not enforce it: see the package
// doc.
func WithCapacity(bytes int64) Option { return func(o *options) { o.capacity = bytes } }

// WithTimeout bounds each round trip to the server (a command, a pipeline,
// one page of a scan, a connection attempt); a round trip that takes longer
// fails with device.ErrDeviceFailed. Zero or negative takes DefaultTimeout.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithPoolSize sets the number of connections kept to the server; zero or
// negative takes go-redis's default (10 per CPU).
func WithPoolSize(n int) Option { return func(o *options) { o.poolSize = n } }

// Device is a device on a Redis-protocol server. Open it with Open.
type Device struct {
	name     string
	client   *goredis.Client
	limits   device.Limits
	capacity int64
	timeout  time.Duration

	closed atomic.Bool
	runID  atomic.Pointer[string] // the server's run_id when last connected
	fence  atomic.Pointer[fence]  // set by Fence: every write checks it
}

// fence is the key and token every write of a fenced device checks.
type fence struct{ key, token string }

var _ device.Device = (*Device)(nil)

// target is a parsed spec.
type target struct {
	addr     string // host:port
	db       int
	user     string
	password string
}

func (t target) name() string { return fmt.Sprintf("redis://%s/%d", t.addr, t.db) }

// parse reads redis://[[USER]:PASSWORD@]HOST[:PORT][/DB].
func parse(spec string) (target, error) {
	u, err := url.Parse(spec)
	if err != nil {
		return target{}, fmt.Errorf("%q: %w", spec, err)
	}
	if u.Scheme != "redis" {
		return target{}, fmt.Errorf("%q: want redis://HOST:PORT/DB", spec)
	}
	if u.Hostname() == "" {
		return target{}, fmt.Errorf("%q: no host; want redis://HOST:PORT/DB", spec)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return target{}, fmt.Errorf("%q: query parameters are not supported; want redis://HOST:PORT/DB", spec)
	}
	port := DefaultPort
	if p := u.Port(); p != "" {
		port, err = strconv.Atoi(p)
		if err != nil || port < 1 || port > 65535 {
			return target{}, fmt.Errorf("%q: bad port %q", spec, p)
		}
	}
	t := target{addr: net.JoinHostPort(u.Hostname(), strconv.Itoa(port))}
	switch db := strings.TrimPrefix(u.Path, "/"); {
	case db == "":
	case strings.Contains(db, "/"):
		return target{}, fmt.Errorf("%q: want redis://HOST:PORT/DB with DB a number", spec)
	default:
		t.db, err = strconv.Atoi(db)
		if err != nil || t.db < 0 {
			return target{}, fmt.Errorf("%q: database %q is not a number >= 0", spec, db)
		}
	}
	if u.User != nil {
		t.user = u.User.Username()
		t.password, _ = u.User.Password()
	}
	return t, nil
}

// Name returns the device name of spec, as Info reports it:
// "redis://HOST:PORT/DB" with the port and database filled in and any
// credentials left out. It is how configs tell two specs of one device
// apart.
func Name(spec string) (string, error) {
	t, err := parse(spec)
	if err != nil {
		return "", err
	}
	return t.name(), nil
}

var quietOnce sync.Once

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// Open connects to the server of spec, redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]
// (port 6379 and database 0 by default), checks that it answers and that it
// does not evict keys, and returns the device. An unreachable server is an
// error wrapping device.ErrDeviceFailed that names it.
func Open(ctx context.Context, spec string, opts ...Option) (*Device, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	t, err := parse(spec)
	if err != nil {
		return nil, fmt.Errorf("redis: open: %w", err)
	}
	l := o.limits.WithDefaults()
	if l.MinKeyLen < 0 || l.MinKeyLen > l.MaxKeyLen || l.MaxValueLen < 0 {
		return nil, fmt.Errorf("%s: open: invalid limits %+v", t.name(), l)
	}
	if o.capacity < 0 {
		return nil, fmt.Errorf("%s: open: negative capacity %d", t.name(), o.capacity)
	}
	if o.timeout <= 0 {
		o.timeout = DefaultTimeout
	}
	quietOnce.Do(func() { goredis.SetLogger(quietLogger{}) })
	d := &Device{
		name:     t.name(),
		limits:   l,
		capacity: o.capacity,
		timeout:  o.timeout,
	}
	d.client = goredis.NewClient(&goredis.Options{
		Addr:     t.addr,
		Username: t.user,
		Password: t.password,
		DB:       t.db,
		// RESP2 with no client identity: the least any Redis-protocol
		// server must understand (and kvarray's own server speaks).
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		// No silent retries, of commands or of dials.
		MaxRetries:    -1,
		DialerRetries: 1,
		// Every round trip is bounded by the timeout: the context of each
		// call carries it as a deadline, which go-redis applies to the
		// socket.
		ContextTimeoutEnabled: true,
		DialTimeout:           o.timeout,
		ReadTimeout:           o.timeout,
		WriteTimeout:          o.timeout,
		PoolTimeout:           o.timeout,
		PoolSize:              o.poolSize,
		OnConnect:             d.onConnect,
		Dialer:                guardedDialer(o.timeout, l.MaxValueLen),
	})
	if err := d.check(ctx); err != nil {
		_ = d.client.Close()
		return nil, fmt.Errorf("%s: open: %w", d.name, err)
	}
	return d, nil
}

// check pings the server and refuses one that evicts keys.
func (d *Device) check(ctx context.Context) error {
	octx, cancel := d.opContext(ctx)
	defer cancel()
	if err := d.client.Ping(octx).Err(); err != nil {
		return d.classify(ctx, err)
	}
	vals, err := d.client.ConfigGet(octx, "maxmemory*").Result()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return nil // CONFIG disabled or renamed: nothing to check with
	}
	if vals["maxmemory"] != "" && vals["maxmemory"] != "0" &&
		vals["maxmemory-policy"] != "" && vals["maxmemory-policy"] != "noeviction" {
		return fmt.Errorf("server has maxmemory %s with maxmemory-policy %s, which evicts keys silently; set maxmemory-policy noeviction: %w",
			vals["maxmemory"], vals["maxmemory-policy"], device.ErrDeviceFailed)
	}
	return nil
}

// errRestarted is the error of the call that finds the server restarted.
var errRestarted = errors.New("server restarted since the last connection (run_id changed): writes acknowledged before may be lost; re-admit the device")

// onConnect runs on every new connection. It records the server's run_id
// and fails the connection that first sees it change.
func (d *Device) onConnect(ctx context.Context, cn *goredis.Conn) error {
	info, err := cn.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	id := infoField(info, "run_id")
	if id == "" {
		return nil // a server without run_id (Kvrocks): no detection
	}
	for {
		old := d.runID.Load()
		if old != nil && *old == id {
			return nil
		}
		if d.runID.CompareAndSwap(old, &id) {
			if old == nil {
				return nil
			}
			return fmt.Errorf("%w (run_id %.8s… → %.8s…)", errRestarted, *old, id)
		}
	}
}

// infoField returns field's value in an INFO reply.
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func (d *Device) errorf(format string, args ...any) error {
	return fmt.Errorf("%s: "+format, append([]any{d.name}, args...)...)
}

var errClosed = fmt.Errorf("closed: %w", device.ErrDeviceFailed)

// enter refuses a call after Close or with a done context.
func (d *Device) enter(ctx context.Context) error {
	if d.closed.Load() {
		return errClosed
	}
	return ctx.Err()
}

// opContext bounds one round trip by the device's timeout.
func (d *Device) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.timeout)
}

// classify turns an error of a round trip made under ctx into the device's
// sentinels (see the package doc). It is never given redis.Nil.
func (d *Device) classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		// The caller gave up (or its own deadline passed): not a fault of
		// the device.
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		// The caller's deadline cut the socket off before its context
		// noticed.
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	if d.closed.Load() {
		return fmt.Errorf("%w: %w", errClosed, err)
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) && !errors.Is(err, goredis.ErrClosed) {
		switch msg := rerr.Error(); {
		case strings.HasPrefix(msg, "OOM "):
			return fmt.Errorf("server: %w: %w: %w", err, device.ErrFull, device.ErrNoSpace)
		case strings.HasPrefix(msg, "WRONGTYPE "):
			return fmt.Errorf("server: %w: %w", err, device.ErrCorrupt)
		case strings.HasPrefix(msg, fencedPrefix):
			tok := strings.TrimPrefix(msg, fencedPrefix)
			if e, owner, ok := device.ParseFenceToken([]byte(tok)); ok {
				return fmt.Errorf("%w: taken over by %s at epoch %d", device.ErrFenced, owner, e)
			}
			return fmt.Errorf("%w: the fence holds %q", device.ErrFenced, tok)
		}
		return fmt.Errorf("server: %w: %w", err, device.ErrDeviceFailed)
	}
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		return fmt.Errorf("no answer within %v (%w): %w", d.timeout, err, device.ErrDeviceFailed)
	}
	return fmt.Errorf("%w: %w", err, device.ErrDeviceFailed)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (d *Device) checkStore(key, value []byte) error {
	if err := d.limits.CheckKey(key); err != nil {
		return err
	}
	return d.limits.CheckValue(value)
}

// Store implements device.Device with SET.
func (d *Device) Store(ctx context.Context, key, value []byte) error {
	if err := d.enter(ctx); err != nil {
		return d.errorf("store %q: %w", key, err)
	}
	if err := d.checkStore(key, value); err != nil {
		return d.errorf("store %q: %w", key, err)
	}
	octx, cancel := d.opContext(ctx)
	defer cancel()
	if err := d.set(octx, d.client, string(key), value).Err(); err != nil {
		return d.errorf("store %q: %w", key, d.classify(ctx, err))
	}
	return nil
}

// fencedScript runs a write behind the fence, in one step on the server:
// a fence of another token and an epoch as new or newer refuses it
// (KVFENCED, naming the fence); an older or absent one is replaced by
// this device's token first. ARGV[2] is the write: s(et) ARGV[3], d(elete),
// or none (Fence). The epoch is the token's first 20 digits.
const fencedScript = `local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then
  if cur and tonumber(string.sub(cur, 1, 20)) >= tonumber(string.sub(ARGV[1], 1, 20)) then
    return redis.error_reply('KVFENCED ' .. cur)
  end
  redis.call('SET', KEYS[1], ARGV[1])
end
if ARGV[2] == 's' then return redis.call('SET', KEYS[2], ARGV[3]) end
if ARGV[2] == 'd' then return redis.call('DEL', KEYS[2]) end
return 'OK'`

// fencedPrefix starts the error reply of a write the fence refused.
const fencedPrefix = "KVFENCED "

// cmdable is what set and del send through: the client or a pipeline.
type cmdable interface {
	Set(ctx context.Context, key string, value any, expiration time.Duration) *goredis.StatusCmd
	Del(ctx context.Context, keys ...string) *goredis.IntCmd
	Eval(ctx context.Context, script string, keys []string, args ...any) *goredis.Cmd
}

// set is SET, behind the fence once there is one.
func (d *Device) set(ctx context.Context, c cmdable, key string, value []byte) goredis.Cmder {
	if f := d.fence.Load(); f != nil {
		return c.Eval(ctx, fencedScript, []string{f.key, key}, f.token, "s", value)
	}
	return c.Set(ctx, key, value, 0)
}

// del is DEL, behind the fence once there is one.
func (d *Device) del(ctx context.Context, c cmdable, key string) goredis.Cmder {
	if f := d.fence.Load(); f != nil {
		return c.Eval(ctx, fencedScript, []string{f.key, key}, f.token, "d")
	}
	return c.Del(ctx, key)
}

// Fence implements device.Fencer: it takes the fence (one round trip),
// and every write after it is sent behind it (see fencedScript), in the
// same round trip as the write.
func (d *Device) Fence(ctx context.Context, key []byte, epoch uint64, owner string) error {
	if err := d.enter(ctx); err != nil {
		return d.errorf("fence: %w", err)
	}
	f := &fence{key: string(key), token: device.FenceToken(epoch, owner)}
	octx, cancel := d.opContext(ctx)
	defer cancel()
	if err := d.client.Eval(octx, fencedScript, []string{f.key}, f.token, "").Err(); err != nil {
		return d.errorf("fence epoch %d: %w", epoch, d.classify(ctx, err))
	}
	d.fence.Store(f)
	return nil
}

// Retrieve implements device.Device with GET.
func (d *Device) Retrieve(ctx context.Context, key []byte) ([]byte, error) {
	if err := d.enter(ctx); err != nil {
		return nil, d.errorf("retrieve %q: %w", key, err)
	}
	if err := d.limits.CheckKey(key); err != nil {
		return nil, d.errorf("retrieve %q: %w", key, err)
	}
	octx, cancel := d.opContext(ctx)
	defer cancel()
	v, err := d.client.Get(octx, string(key)).Bytes()
	if err != nil {
		return nil, d.errorf("retrieve %q: %w", key, d.getError(ctx, err))
	}
	return v, nil
}

// getError classifies the error of a GET, whose nil reply is not-found.
func (d *Device) getError(ctx context.Context, err error) error {
	if errors.Is(err, goredis.Nil) {
		return device.ErrNotFound
	}
	return d.classify(ctx, err)
}

// Delete implements device.Device with DEL.
func (d *Device) Delete(ctx context.Context, key []byte) error {
	if err := d.enter(ctx); err != nil {
		return d.errorf("delete %q: %w", key, err)
	}
	if err := d.limits.CheckKey(key); err != nil {
		return d.errorf("delete %q: %w", key, err)
	}
	octx, cancel := d.opContext(ctx)
	defer cancel()
	if err := d.del(octx, d.client, string(key)).Err(); err != nil {
		return d.errorf("delete %q: %w", key, d.classify(ctx, err))
	}
	return nil
}

// Exist implements device.Device with EXISTS.
func (d *Device) Exist(ctx context.Context, key []byte) (bool, error) {
	if err := d.enter(ctx); err != nil {
		return false, d.errorf("exist %q: %w", key, err)
	}
	if err := d.limits.CheckKey(key); err != nil {
		return false, d.errorf("exist %q: %w", key, err)
	}
	octx, cancel := d.opContext(ctx)
	defer cancel()
	n, err := d.client.Exists(octx, string(key)).Result()
	if err != nil {
		return false, d.errorf("exist %q: %w", key, d.classify(ctx, err))
	}
	return n > 0, nil
}

// globSpecial are the bytes SCAN's MATCH gives a meaning to.
const globSpecial = `*?[]\`

// matchPattern returns the MATCH pattern of the keys starting with prefix.
func matchPattern(prefix []byte) string {
	var b strings.Builder
	b.Grow(2*len(prefix) + 1)
	for _, c := range prefix {
		if strings.IndexByte(globSpecial, c) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('*')
	return b.String()
}

// scan calls page with each page of keys starting with prefix, each key
// once, one SCAN round trip per page.
func (d *Device) scan(ctx context.Context, prefix []byte, page func(keys []string) error) error {
	pattern := matchPattern(prefix)
	seen := map[string]struct{}{}
	cursors := map[uint64]struct{}{}
	var cursor uint64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.closed.Load() {
			return errClosed
		}
		octx, cancel := d.opContext(ctx)
		keys, next, err := d.client.Scan(octx, cursor, pattern, scanCount).Result()
		cancel()
		if err != nil {
			return d.classify(ctx, err)
		}
		fresh := keys[:0]
		for _, k := range keys {
			if _, dup := seen[k]; dup || !strings.HasPrefix(k, string(prefix)) {
				continue
			}
			seen[k] = struct{}{}
			fresh = append(fresh, k)
		}
		if len(fresh) > 0 {
			if err := page(fresh); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		if _, again := cursors[next]; again {
			return fmt.Errorf("server gave SCAN cursor %d twice: %w", next, device.ErrDeviceFailed)
		}
		cursors[next] = struct{}{}
		cursor = next
	}
}

// errStop carries fn's error out of scan unwrapped.
type errStop struct{ err error }

func (e errStop) Error() string { return e.err.Error() }

// Iterate implements device.Device with SCAN. Order is not guaranteed
// (Info().Ordered is false); each key is passed to fn once.
func (d *Device) Iterate(ctx context.Context, prefix []byte, fn func(key []byte) error) error {
	if err := d.enter(ctx); err != nil {
		return d.errorf("iterate %q: %w", prefix, err)
	}
	var key []byte // a copy, so fn may keep no reference to the page
	err := d.scan(ctx, prefix, func(keys []string) error {
		for _, k := range keys {
			if err := ctx.Err(); err != nil {
				return err
			}
			key = append(key[:0], k...)
			if err := fn(key); err != nil {
				return errStop{err}
			}
		}
		return nil
	})
	var stop errStop
	switch {
	case err == nil:
		return nil
	case errors.As(err, &stop):
		return stop.err
	}
	return d.errorf("iterate %q: %w", prefix, err)
}

// Batch implements device.Device: the valid ops go to the server as one
// pipeline, in slice order on one connection, so ops on one key apply in
// order. Batch returns an error (set on every op as well) when the
// pipeline could not be sent or answered at all.
func (d *Device) Batch(ctx context.Context, ops []device.Op) error {
	opErr := func(i int, err error) error {
		return d.errorf("batch op %d (%v %q): %w", i, ops[i].Kind, ops[i].Key, err)
	}
	if err := d.enter(ctx); err != nil {
		for i := range ops {
			ops[i].Result, ops[i].Found = nil, false
			ops[i].Err = opErr(i, err)
		}
		return d.errorf("batch: %w", err)
	}
	pipe := d.client.Pipeline()
	cmds := make([]goredis.Cmder, len(ops))
	for i := range ops {
		op := &ops[i]
		op.Result, op.Found, op.Err = nil, false, nil
		var err error
		switch op.Kind {
		case device.OpStore:
			if err = d.checkStore(op.Key, op.Value); err == nil {
				cmds[i] = d.set(ctx, pipe, string(op.Key), op.Value)
			}
		case device.OpRetrieve:
			if err = d.limits.CheckKey(op.Key); err == nil {
				cmds[i] = pipe.Get(ctx, string(op.Key))
			}
		case device.OpDelete:
			if err = d.limits.CheckKey(op.Key); err == nil {
				cmds[i] = d.del(ctx, pipe, string(op.Key))
			}
		case device.OpExist:
			if err = d.limits.CheckKey(op.Key); err == nil {
				cmds[i] = pipe.Exists(ctx, string(op.Key))
			}
		default:
			err = errors.New("unknown op kind")
		}
		if err != nil {
			op.Err = opErr(i, err)
		}
	}
	if pipe.Len() == 0 {
		return nil
	}
	octx, cancel := d.opContext(ctx)
	defer cancel()
	_, execErr := pipe.Exec(octx)
	answered := false // did any command get a reply from the server?
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		op := &ops[i]
		var rerr goredis.Error
		switch err := cmd.Err(); {
		case err == nil:
			answered = true
			switch c := cmd.(type) {
			case *goredis.StringCmd:
				op.Result, op.Found = []byte(c.Val()), true
			case *goredis.IntCmd:
				op.Found = op.Kind == device.OpExist && c.Val() > 0
			}
		case errors.Is(err, goredis.Nil):
			answered = true
			op.Err = opErr(i, device.ErrNotFound)
		default:
			if errors.As(err, &rerr) {
				answered = true
			}
			op.Err = opErr(i, d.classify(ctx, err))
		}
	}
	if !answered && execErr != nil {
		err := d.classify(ctx, execErr)
		for i := range ops {
			if ops[i].Err == nil {
				ops[i].Err = opErr(i, err)
			}
		}
		return d.errorf("batch: %w", err)
	}
	return nil
}

// Ordered implements device.Orderer: SCAN walks Redis's hash table, in no key order.
func (d *Device) Ordered() bool { return false }

// Info implements device.Device. Keys and Used come from one pass over the
// database (see the package doc).
func (d *Device) Info(ctx context.Context) (device.Info, error) {
	info := device.Info{
		Name:        d.name,
		Capacity:    d.capacity,
		MinKeyLen:   d.limits.MinKeyLen,
		MaxKeyLen:   d.limits.MaxKeyLen,
		MaxValueLen: d.limits.MaxValueLen,
		Ordered:     false,
	}
	if err := d.enter(ctx); err != nil {
		return info, d.errorf("info: %w", err)
	}
	err := d.scan(ctx, nil, func(keys []string) error {
		pipe := d.client.Pipeline()
		lens := make([]*goredis.IntCmd, len(keys))
		for i, k := range keys {
			lens[i] = pipe.StrLen(ctx, k)
		}
		octx, cancel := d.opContext(ctx)
		defer cancel()
		if _, err := pipe.Exec(octx); err != nil {
			return d.classify(ctx, err)
		}
		for i, k := range keys {
			info.Keys++
			info.Used += int64(len(k)) + lens[i].Val()
		}
		return nil
	})
	if err != nil {
		return info, d.errorf("info: %w", err)
	}
	return info, nil
}

// MemoryUsed returns the server's used_memory from INFO memory: the bytes
// its allocator holds, for every database of the server and its own
// overhead, so only an approximation of what this device stores. Info.Used
// is the exact logical figure.
func (d *Device) MemoryUsed(ctx context.Context) (int64, error) {
	if err := d.enter(ctx); err != nil {
		return 0, d.errorf("memory used: %w", err)
	}
	octx, cancel := d.opContext(ctx)
	defer cancel()
	s, err := d.client.Info(octx, "memory").Result()
	if err != nil {
		return 0, d.errorf("memory used: %w", d.classify(ctx, err))
	}
	v := infoField(s, "used_memory")
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, d.errorf("memory used: INFO memory has used_memory %q: %w", v, device.ErrDeviceFailed)
	}
	return n, nil
}

// Close implements device.Device: it closes the client. A second Close
// returns device.ErrDeviceFailed.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return d.errorf("close: %w", errClosed)
	}
	if err := d.client.Close(); err != nil {
		return d.errorf("close: %w: %w", err, device.ErrDeviceFailed)
	}
	return nil
}
