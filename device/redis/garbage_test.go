package redis_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvarray/kvarray/device"
	"github.com/kvarray/kvarray/device/redis"
)

// liar is a Redis-protocol server that answers the handshake (PING, INFO,
// CONFIG) sanely and every other command with its current reply: garbage,
// a wrong type, a wrong value.
type liar struct {
	ln    net.Listener
	reply atomic.Pointer[func(cmd string) string]
	wg    sync.WaitGroup
}

func newLiar(t *testing.T) *liar {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &liar{ln: ln}
	l.set(func(cmd string) string {
		switch cmd {
		case "GET":
			return "$-1\r\n"
		case "SCAN":
			return "*2\r\n$1\r\n0\r\n*0\r\n"
		case "EXISTS", "DEL":
			return ":0\r\n"
		}
		return "+OK\r\n"
	})
	l.wg.Add(1)
	go l.serve()
	t.Cleanup(func() { ln.Close(); l.wg.Wait() })
	return l
}

func (l *liar) set(f func(cmd string) string) { l.reply.Store(&f) }

func (l *liar) serve() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer c.Close()
			r := bufio.NewReader(c)
			for {
				args, err := readCommand(r)
				if err != nil {
					return
				}
				var out string
				switch cmd := strings.ToUpper(args[0]); cmd {
				case "PING":
					out = "+PONG\r\n"
				case "INFO":
					info := "run_id:liar0001\r\n"
					out = fmt.Sprintf("$%d\r\n%s\r\n", len(info), info)
				case "CONFIG":
					out = "*0\r\n"
				case "HELLO":
					out = "-ERR unknown command 'HELLO'\r\n"
				default:
					out = (*l.reply.Load())(cmd)
				}
				if _, err := io.WriteString(c, out); err != nil {
					return
				}
			}
		}()
	}
}

// readCommand reads one request: an array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad request %q", line)
	}
	args := make([]string, n)
	for i := range args {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil || size < 0 {
			return nil, fmt.Errorf("bad bulk %q", line)
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

// TestGarbageReplies: a server answering garbage, wrong types or wrong
// values never makes the device panic or hang. Invariant: every call
// returns within a bound, and every error wraps ErrDeviceFailed or
// ErrCorrupt (a wrong but well-formed value may come back as a value: the
// array's checksums catch it, as a device cannot).
func TestGarbageReplies(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply string
	}{
		{"random bytes", "\x00\xff\x13garbage\x07\r\n"},
		{"status to everything", "+OK\r\n"},
		{"integer to everything", ":42\r\n"},
		{"array to everything", "*2\r\n$1\r\na\r\n$1\r\nb\r\n"},
		{"nested arrays", "*1\r\n*1\r\n*1\r\n*1\r\n$1\r\nx\r\n"},
		{"truncated bulk", "$10\r\nabc"},
		{"negative length", "$-7\r\n"},
		{"huge length", "$99999999999999\r\n"},
		{"huge array", "*99999999999999\r\n"},
		{"bad length", "$abc\r\n"},
		{"error reply", "-ERR nope\r\n"},
		{"wrong value", "$5\r\nhello\r\n"},
		{"scan that never ends", "*2\r\n$1\r\n5\r\n*1\r\n$8\r\nkey-aaaa\r\n"},
		{"scan with a bad cursor", "*2\r\n$1\r\nX\r\n*0\r\n"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			l := newLiar(t)
			d, err := redis.Open(t.Context(), "redis://"+l.ln.Addr().String()+"/0", redis.WithTimeout(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			l.set(func(string) string { return tc.reply })
			ctx := t.Context()
			key := []byte("key-aaaa")
			check := func(what string, err error) {
				t.Helper()
				if err != nil && !errors.Is(err, device.ErrDeviceFailed) && !errors.Is(err, device.ErrCorrupt) {
					t.Errorf("%s: %v, want ErrDeviceFailed or ErrCorrupt", what, err)
				}
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				check("store", d.Store(ctx, key, []byte("value")))
				_, err := d.Retrieve(ctx, key)
				check("retrieve", err)
				check("delete", d.Delete(ctx, key))
				_, err = d.Exist(ctx, key)
				check("exist", err)
				n := 0
				check("iterate", d.Iterate(ctx, nil, func([]byte) error { n++; return nil }))
				ops := []device.Op{
					{Kind: device.OpStore, Key: key, Value: []byte("v")},
					{Kind: device.OpRetrieve, Key: key},
					{Kind: device.OpExist, Key: key},
					{Kind: device.OpDelete, Key: key},
				}
				_ = d.Batch(ctx, ops)
				for i, op := range ops {
					check(fmt.Sprintf("batch op %d", i), op.Err)
				}
				_, err = d.Info(ctx)
				check("info", err)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("calls against a garbage server did not return in 30s")
			}
		})
	}
}
