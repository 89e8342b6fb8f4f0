package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/server"
)

// Admin through the server. `kvarray serve` holds the array's devices
// (Pebble locks its directories), so while it runs the other commands
// cannot open them: it listens on an admin socket beside the config file
// (.kvarray.yaml.sock for kvarray.yaml), a unix socket only its owner can
// open, whose connections are the default user. status, replace, rebuild,
// resync, scrub and fail look for it first and run there, online; when
// none answers, they open the devices themselves.

// maxSocketPath is the longest unix socket path every platform takes
// (sockaddr_un's sun_path is 104 bytes on BSDs, 108 on Linux).
const maxSocketPath = 103

// adminSocket returns the admin socket path for the config file at
// configPath.
func adminSocket(configPath string) (string, error) {
	abs, err := filepath.Abs(configPath)
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(abs), "."+filepath.Base(abs)+".sock")
	if len(p) > maxSocketPath {
		return "", fmt.Errorf("admin socket path %s is %d bytes, over the %d a unix socket allows (move the config file to a shorter path)", p, len(p), maxSocketPath)
	}
	return p, nil
}

// ErrUnsafeSocketDir: the admin socket's directory lets other users
// replace what is in it.
var ErrUnsafeSocketDir = errors.New("directory writable by group or others")

// listenAdmin listens on the admin socket at sock such that no other user
// can ever connect to it: a connection there is the default user, fully
// authenticated. Listening at sock and then changing its mode would leave
// it open, under a permissive umask, until the change; so the socket is
// made in a directory of its own that only the owner may enter, given mode
// 0600 there, and renamed into place. A directory that others may write
// is refused: they could put a socket of theirs where the CLI looks.
// Closing the listener removes the socket.
func listenAdmin(sock string) (net.Listener, error) {
	dir := filepath.Dir(sock)
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return nil, fmt.Errorf("%s (mode %04o): %w; another user could take the socket's place: run chmod go-w on it, or keep the config file in a directory of its own", dir, perm, ErrUnsafeSocketDir)
	}
	private, err := os.MkdirTemp(dir, ".ks") // mode 0700; short: sun_path
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(private)
	tmp := filepath.Join(private, "s")
	l, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, err
	}
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(false) // it would remove tmp, long gone
	if err := os.Chmod(tmp, 0o600); err != nil {
		ul.Close()
		return nil, err
	}
	if err := os.Rename(tmp, sock); err != nil {
		ul.Close()
		return nil, err
	}
	return &adminListener{UnixListener: ul, path: sock}, nil
}

// adminListener removes its socket when closed.
type adminListener struct {
	*net.UnixListener
	path string
}

func (l *adminListener) Close() error {
	err := l.UnixListener.Close()
	if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}

// dialAdmin connects to the admin socket at path; it returns nil, nil
// when no server answers there (no socket, or one left by a server that
// died).
func dialAdmin(ctx context.Context, path string) (*redis.Client, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, nil
	}
	// A socket file left by a server that died refuses the dial: that
	// is an answer (none runs), not something to retry or to log (go-redis
	// logs dial failures to stderr, once the pool gives up retrying).
	redis.SetLogger(silentLogger{})
	cl := redis.NewClient(&redis.Options{
		Network: "unix", Addr: path, MaxRetries: -1, PoolSize: 4,
		DialTimeout: 2 * time.Second, DialerRetries: 1,
		// Rebuilds and scrubs take as long as they take; ^C (the
		// context) ends the wait, not a timeout.
		ReadTimeout: -1, ContextTimeoutEnabled: true,
		// No CLIENT SETINFO / HELLO 3 probing: one round trip less.
		DisableIdentity: true, Protocol: 2,
	})
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := cl.Ping(pctx).Err(); err != nil {
		cl.Close()
		var ne *net.OpError
		if errors.As(err, &ne) && ne.Op == "dial" {
			return nil, nil // a socket file nobody listens on
		}
		return nil, fmt.Errorf("the kvarray server of %s does not answer on its admin socket %s: %w", path, path, err)
	}
	return cl, nil
}

// online returns a client of the `kvarray serve` that holds the config's
// array, or nil when none runs.
func (c *cli) online() (*redis.Client, error) {
	path, err := adminSocket(c.configPath)
	if err != nil {
		return nil, nil // serve could not have listened there either
	}
	return dialAdmin(c.ctx, path)
}

// serverStatus is what the server reports of the array: its Status and
// the heal operations running.
type serverStatus struct {
	array.Status
	Tasks     []server.Task `json:"tasks,omitempty"`
	LastScrub *time.Time    `json:"last_scrub,omitempty"`
}

// remoteJSON runs an admin command whose reply is JSON, into v.
func remoteJSON(ctx context.Context, cl *redis.Client, v any, args ...any) error {
	b, err := cl.Do(ctx, args...).Text()
	if err != nil {
		return remoteError(err)
	}
	if err := json.Unmarshal([]byte(b), v); err != nil {
		return fmt.Errorf("%v: the server's reply is not what this kvarray expects (%w): is it the same version?", args[0], err)
	}
	return nil
}

// remoteError strips the RESP error code the server added, so that the
// message reads as the offline command's would.
func remoteError(err error) error {
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		if len(msg) > 4 && msg[:4] == "ERR " {
			msg = msg[4:]
		}
		return errors.New(msg)
	}
	return fmt.Errorf("kvarray serve (admin socket): %w", err)
}

// remoteStatus fetches the status and the running tasks.
func remoteStatus(ctx context.Context, cl *redis.Client, deep bool) (serverStatus, error) {
	var st serverStatus
	args := []any{"kvarray.status"}
	if deep {
		args = append(args, "deep")
	}
	if err := remoteJSON(ctx, cl, &st.Status, args...); err != nil {
		return st, err
	}
	var pr progressReply
	if err := remoteJSON(ctx, cl, &pr, "kvarray.progress"); err != nil {
		return st, err
	}
	st.Tasks, st.LastScrub = pr.Tasks, pr.LastScrub
	return st, nil
}

// progressReply is KVARRAY.PROGRESS's reply.
type progressReply struct {
	Tasks     []server.Task `json:"tasks"`
	LastScrub *time.Time    `json:"last_scrub,omitempty"`
}

// remoteHeal runs a heal command on the server, feeding bar from the
// server's progress of the task (kind, dev) meanwhile, and decodes the
// report into rep.
func remoteHeal(ctx context.Context, cl *redis.Client, bar *progress, kind string, dev int, rep any, args ...any) error {
	stop := func() {}
	if bar != nil {
		stop = ticking(progressEvery, func() {
			var pr progressReply
			if remoteJSON(ctx, cl, &pr, "kvarray.progress") != nil {
				return
			}
			for _, tk := range pr.Tasks {
				if tk.Kind == kind && tk.Dev == dev {
					bar.update(array.Progress{Dev: dev, Keys: tk.Keys, Total: tk.Total, Bytes: tk.Bytes, Failed: tk.Failed, Elapsed: tk.Elapsed})
				}
			}
		})
	}
	err := remoteJSON(ctx, cl, rep, args...)
	stop()
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%s: stopped waiting; the %s goes on in the server ('kvarray status' shows its progress)", kind, kind)
	}
	return err
}

func (c *cli) failCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "fail DEV",
		Short: "Fail device DEV in a running kvarray serve (mem devices: to test healing)",
		Long: `fail marks device DEV failed in the array that 'kvarray serve' holds, through
its admin socket (KVARRAY.FAIL): every operation on the device fails until
'kvarray rebuild DEV' or KVARRAY.RECOVER. Only mem devices can be failed on
command; a real device fails by itself (unreachable, removed), and
'kvarray replace DEV' then swaps it out. Without a running server there is
nothing to fail: a device's failed state lives in the process that holds
the array.`,
		Args: args(1, 1, "DEV"),
		RunE: func(cmd *cobra.Command, args []string) error {
			dev, err := parseDev(cmd, args[0])
			if err != nil {
				return err
			}
			cl, err := c.online()
			if err != nil {
				return err
			}
			if cl == nil {
				return fmt.Errorf("fail: no kvarray serve holds the array of %s: a device's failed state lives in the serving process", c.configPath)
			}
			defer cl.Close()
			if err := cl.Do(c.ctx, "kvarray.fail", dev).Err(); err != nil {
				return remoteError(err)
			}
			fmt.Fprintf(c.stdout, "device %d failed\n", dev)
			return nil
		},
	}
}
