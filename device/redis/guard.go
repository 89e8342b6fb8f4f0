package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// guardConn checks what a server sends as a stream of RESP2 replies before
// go-redis parses it: go-redis allocates a bulk string's or an array's
// stated length up front, so one garbage length from a broken or hostile
// server ("$99999999999999") would take the whole process down. A reply
// with an unknown type byte, a malformed or negative length, a bulk over
// maxBulk or an array over maxArray fails the read (go-redis then drops
// the connection and the call fails with device.ErrDeviceFailed). The
// bytes go-redis reads are the server's, unchanged.
type guardConn struct {
	net.Conn
	maxBulk, maxArray int64

	st      guardState
	num     int64 // the length being read
	neg     bool
	digits  int
	bulk    bool  // the length is a bulk's, not an array's
	payload int64 // bytes of a bulk (and its CRLF) still to pass
	line    int64 // bytes of a simple line so far
}

type guardState uint8

const (
	atType     guardState = iota // the next byte starts a reply
	inSimple                     // +, - or : line, up to its LF
	inLength                     // $ or * length, up to its CR
	atLengthLF                   // the LF after a length
	inPayload                    // a bulk's bytes and CRLF
)

// SyscallConn exposes the socket, which go-redis's pool uses to find a
// pooled connection the server has closed before handing it out.
func (g *guardConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := g.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.New("not a socket")
}

// maxSimpleLine bounds a status, error or integer line.
const maxSimpleLine = 1 << 20

func (g *guardConn) Read(p []byte) (int, error) {
	n, err := g.Conn.Read(p)
	if cerr := g.check(p[:n]); cerr != nil {
		_ = g.Conn.Close()
		return 0, cerr
	}
	return n, err
}

func (g *guardConn) check(b []byte) error {
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch g.st {
		case atType:
			switch c {
			case '+', '-', ':':
				g.st, g.line = inSimple, 0
			case '$', '*':
				g.st, g.bulk, g.num, g.neg, g.digits = inLength, c == '$', 0, false, 0
			default:
				return fmt.Errorf("server sent a reply starting with byte %#x, not RESP2", c)
			}
		case inSimple:
			if g.line++; g.line > maxSimpleLine {
				return fmt.Errorf("server sent a reply line over %d bytes", maxSimpleLine)
			}
			if c == '\n' {
				g.st = atType
			}
		case inLength:
			switch {
			case c == '-' && g.digits == 0 && !g.neg:
				g.neg = true
			case c >= '0' && c <= '9' && g.digits < 19:
				g.num = g.num*10 + int64(c-'0')
				g.digits++
			case c == '\r' && g.digits > 0:
				g.st = atLengthLF
			default:
				return fmt.Errorf("server sent a malformed length (byte %#x)", c)
			}
		case atLengthLF:
			if c != '\n' {
				return fmt.Errorf("server sent a length not ended by CRLF")
			}
			if err := g.length(); err != nil {
				return err
			}
		case inPayload:
			// Skip the rest of the payload at once.
			k := min(g.payload, int64(len(b)-i))
			g.payload -= k
			i += int(k) - 1
			if g.payload == 0 {
				g.st = atType
			}
		}
	}
	return nil
}

// length acts on a complete length line.
func (g *guardConn) length() error {
	kind, limit := "array", g.maxArray
	if g.bulk {
		kind, limit = "bulk string", g.maxBulk
	}
	switch {
	case g.neg && g.num == 1: // a nil reply
		g.st = atType
	case g.neg:
		return fmt.Errorf("server sent a %s of length -%d", kind, g.num)
	case g.num > limit:
		return fmt.Errorf("server sent a %s of length %d, over the limit of %d", kind, g.num, limit)
	case g.bulk:
		g.st, g.payload = inPayload, g.num+2
	default:
		g.st = atType // the elements follow as replies
	}
	return nil
}

// maxArrayLen bounds an array reply: SCAN pages, CONFIG GET and pipelines
// of this package stay far below it.
const maxArrayLen = 1 << 20

// guardedDialer dials like go-redis and guards the connection; a bulk may
// be as long as the largest value or 16 MiB (INFO, CONFIG).
//
// Its TCP connections close abortively (SO_LINGER 0: the unsent data is
// dropped and a reset sent). go-redis closes a connection whose call
// timed out before the call returns its error; closed gracefully, the
// kernel would keep the call's unsent commands and retransmit them, so
// that a SET the array counted as failed (and recorded as missed) would
// reach the server seconds after a cut link came back, over the resync's
// repair and newer writes. Aborted, what a failed call sent either
// arrived before its error was returned, or never arrives.
func guardedDialer(timeout time.Duration, maxValue int) func(context.Context, string, string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
	maxBulk := max(int64(maxValue), 16<<20)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tc, ok := c.(*net.TCPConn); ok {
			if err := tc.SetLinger(0); err != nil {
				c.Close()
				return nil, err
			}
		}
		return &guardConn{Conn: c, maxBulk: maxBulk, maxArray: maxArrayLen}, nil
	}
}
