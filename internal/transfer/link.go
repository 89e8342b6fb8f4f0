package transfer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// ErrMaster is a refusal or an unexpected answer from the master.
var ErrMaster = errors.New("master")

// Link is a connection to a running Redis, speaking the replica's side of
// its handshake (redis-cli --rdb's, a replica's).
type Link struct {
	conn net.Conn
	// R reads what the master sends: the RDB, then, after PSYNC, its
	// replication stream.
	R    *bufio.Reader
	stop func() bool
}

// Dial connects to addr (host:port) and authenticates with user and
// password when password is set. The connection is closed when ctx ends.
func Dial(ctx context.Context, addr, user, password string) (*Link, error) {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := d.DialContext(dctx, "tcp", addr)
	cancel()
	if err != nil {
		return nil, err
	}
	l := &Link{conn: conn, R: bufio.NewReaderSize(conn, 1<<16)}
	l.stop = context.AfterFunc(ctx, func() { conn.Close() })
	if password != "" {
		args := []string{"AUTH", password}
		if user != "" {
			args = []string{"AUTH", user, password}
		}
		line, err := l.Send(args...)
		if err == nil && !strings.HasPrefix(line, "+") {
			err = fmt.Errorf("AUTH: %s: %w", line, ErrMaster)
		}
		if err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// Close closes the connection.
func (l *Link) Close() error { l.stop(); return l.conn.Close() }

// Write sends raw bytes (a replica's REPLCONF ACK).
func (l *Link) Write(b []byte) (int, error) { return l.conn.Write(b) }

// Command sends one command without reading an answer.
func (l *Link) Command(args ...string) error {
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	_, err := l.conn.Write(b)
	return err
}

// Send sends one command and returns its one-line answer (CRLF cut).
func (l *Link) Send(args ...string) (string, error) {
	if err := l.Command(args...); err != nil {
		return "", err
	}
	return l.line()
}

func (l *Link) line() (string, error) {
	line, err := l.R.ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// Sync asks for the master's RDB alone, as redis-cli --rdb does: REPLCONF
// rdb-only (Redis 7: no replication stream after it), then SYNC. It
// returns the file's reader and length.
func (l *Link) Sync() (io.Reader, int64, error) {
	// An older Redis does not know rdb-only: it then streams its
	// commands after the file, which nothing reads.
	if _, err := l.Send("REPLCONF", "rdb-only", "1"); err != nil {
		return nil, 0, err
	}
	if _, err := l.conn.Write([]byte("SYNC\r\n")); err != nil {
		return nil, 0, err
	}
	n, err := l.rdbLength()
	if err != nil {
		return nil, 0, err
	}
	return io.LimitReader(l.R, n), n, nil
}

// PSync is a replica's full synchronization: REPLCONF listening-port and
// capa psync2, then PSYNC ? -1. It returns the master's replication ID
// and offset from +FULLRESYNC, and the RDB's reader and length; the
// replication stream follows the RDB on l.R.
func (l *Link) PSync(listeningPort int) (replID string, offset int64, rdb io.Reader, size int64, err error) {
	if line, err := l.Send("REPLCONF", "listening-port", strconv.Itoa(listeningPort)); err != nil {
		return "", 0, nil, 0, err
	} else if strings.HasPrefix(line, "-") && !strings.HasPrefix(line, "-ERR unknown") {
		return "", 0, nil, 0, fmt.Errorf("REPLCONF listening-port: %s: %w", line, ErrMaster)
	}
	// A master that does not know capa answers an error: it is ignored,
	// as Redis's replica ignores it.
	if _, err := l.Send("REPLCONF", "capa", "psync2"); err != nil {
		return "", 0, nil, 0, err
	}
	if err := l.Command("PSYNC", "?", "-1"); err != nil {
		return "", 0, nil, 0, err
	}
	for {
		line, err := l.line()
		if err != nil {
			return "", 0, nil, 0, fmt.Errorf("reading PSYNC's answer: %w", err)
		}
		if line == "" {
			continue // the master's keep-alive newline
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "+FULLRESYNC" {
			return "", 0, nil, 0, fmt.Errorf("PSYNC: %s: %w", line, ErrMaster)
		}
		offset, err = strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return "", 0, nil, 0, fmt.Errorf("PSYNC: %s: %w", line, ErrMaster)
		}
		replID = f[1]
		break
	}
	n, err := l.rdbLength()
	if err != nil {
		return "", 0, nil, 0, err
	}
	return replID, offset, io.LimitReader(l.R, n), n, nil
}

// rdbLength reads the header of the RDB bulk: "$N". Without `capa eof`
// Redis writes the file to disk first and sends its length, so the
// length is known before the file comes.
func (l *Link) rdbLength() (int64, error) {
	for {
		// While it saves, Redis sends a newline a second to keep the
		// connection up.
		line, err := l.line()
		if err != nil {
			return 0, fmt.Errorf("reading SYNC's answer: %w", err)
		}
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "$EOF:"):
			return 0, fmt.Errorf("SYNC answered a diskless stream, which was not asked for: %w", ErrMaster)
		case strings.HasPrefix(line, "$"):
			n, err := strconv.ParseInt(line[1:], 10, 64)
			if err != nil || n < 9 {
				return 0, fmt.Errorf("SYNC answered %q: %w", line, ErrMaster)
			}
			return n, nil
		}
		return 0, fmt.Errorf("SYNC: %s: %w", line, ErrMaster)
	}
}
