package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// syncSource asks a running Redis for its RDB through SYNC, as
// `redis-cli --rdb` does: AUTH when the URL has a password, REPLCONF
// rdb-only (Redis 7: no replication stream after it), then SYNC, whose
// answer is the file as one bulk ($N, then N bytes). Without `capa eof`
// Redis writes the file to disk first and sends its length, so the
// length is known before the import starts. The connection is closed
// when ctx ends or the caller closes it.
func syncSource(ctx context.Context, raw string) (io.Reader, int64, io.Closer, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "redis" || u.Host == "" {
		return nil, 0, nil, fmt.Errorf("import: %q is not redis://[USER:PASSWORD@]HOST:PORT", raw)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "6379")
	}
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := d.DialContext(dctx, "tcp", host)
	cancel()
	if err != nil {
		return nil, 0, nil, fmt.Errorf("import from %s: %w", host, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	closer := closeFunc(func() error { stop(); return conn.Close() })
	fail := func(err error) (io.Reader, int64, io.Closer, error) {
		closer.Close()
		return nil, 0, nil, fmt.Errorf("import from %s: %w", host, err)
	}
	r := bufio.NewReaderSize(conn, 1<<16)
	send := func(args ...string) (string, error) {
		b := fmt.Appendf(nil, "*%d\r\n", len(args))
		for _, a := range args {
			b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := conn.Write(b); err != nil {
			return "", err
		}
		line, err := r.ReadString('\n')
		return strings.TrimRight(line, "\r\n"), err
	}
	if pw, ok := u.User.Password(); ok {
		args := []string{"AUTH", pw}
		if name := u.User.Username(); name != "" {
			args = []string{"AUTH", name, pw}
		}
		line, err := send(args...)
		if err != nil {
			return fail(err)
		}
		if !strings.HasPrefix(line, "+") {
			return fail(fmt.Errorf("AUTH: %s", line))
		}
	}
	// An older Redis does not know rdb-only: it then streams its
	// commands after the file, which the import does not read.
	if _, err := send("REPLCONF", "rdb-only", "1"); err != nil {
		return fail(err)
	}
	if _, err := conn.Write([]byte("SYNC\r\n")); err != nil {
		return fail(err)
	}
	for {
		// While it saves, Redis sends a newline a second to keep the
		// connection up.
		line, err := r.ReadString('\n')
		if err != nil {
			return fail(fmt.Errorf("reading SYNC's answer: %w", err))
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "$EOF:"):
			return fail(fmt.Errorf("SYNC answered a diskless stream, which was not asked for"))
		case strings.HasPrefix(line, "$"):
			n, err := strconv.ParseInt(line[1:], 10, 64)
			if err != nil || n < 9 {
				return fail(fmt.Errorf("SYNC answered %q", line))
			}
			return io.LimitReader(r, n), n, closer, nil
		}
		return fail(fmt.Errorf("SYNC: %s", line))
	}
}

type closeFunc func() error

func (f closeFunc) Close() error { return f() }
