package server

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
)

// The guard sits between a client's socket and redcon's reader. redcon
// buffers whatever a client sends until a command is complete, growing its
// buffer without bound, and indexes past its buffer (a panic, which would
// take the whole process down) on a bulk length near MaxInt64. The guard
// parses the same framing as redcon as the bytes arrive, passes well-formed
// input through unchanged, and:
//
//   - replaces a bulk string longer than maxBulk (and at most Redis's
//     proto-max-bulk-len, 512 MiB) by a short placeholder (oversized),
//     dropping its bytes as they arrive, so that the command gets an
//     error reply ("value too large") and the connection stays in step
//     without the server ever holding the bulk; a longer bulk length ends
//     the connection with "invalid bulk length", as in Redis;
//   - ends the connection with a protocol error, as Redis does, on framing
//     redcon would choke on or that breaks a limit: a multibulk count over
//     maxArgs, a header line over 32 bytes, an inline command over 64 KiB,
//     a command whose passed-through bytes exceed maxQuery.
//
// Commands with a multibulk count of 0 or less are dropped, as Redis
// ignores them (redcon would end the connection).
//
// A bulk of asideFrom bytes or more (up to maxBulk) is held aside: its
// bytes go into a buffer of their own, read from the socket straight into
// it (conn.Read), and redcon gets a placeholder, once the bulk is whole,
// that the command's handler swaps for the buffer (takeAside). redcon
// would grow its read buffer by doubling it, copying what it holds each
// time in one uninterruptible copy of up to 256 MiB that stalled every
// other client (a collection waits for it), and kept the buffer at that
// size until the connection ended; the buffer aside is never copied and
// goes with its command.

// Redis 7's caps on what a client that has not authenticated may send
// (networking.c): larger commands end its connection.
const (
	unauthMaxArgs = 10
	unauthMaxBulk = 16384
)

const (
	maxHeaderLine = 32       // "*N\r\n" or "$N\r\n": 20 digits and change
	maxInline     = 64 << 10 // Redis's PROTO_INLINE_MAX_SIZE
	nonceLen      = 16
	// placeholderLen is the length of the bulk that stands for an
	// oversized one: the server's nonce and the bulk's length.
	placeholderLen = nonceLen + 8
)

const (
	stStart    = iota // between commands
	stInline          // inside an inline (telnet) command line
	stMultiHdr        // reading "*N\r\n"
	stBulkHdr         // reading "$N\r\n"
	stBody            // passing a bulk's bytes and its CRLF through
	stSkip            // dropping an oversized bulk's bytes
	stSkipCR          // expecting the CR after a dropped bulk
	stSkipLF          // expecting the LF after a dropped bulk
	stAside           // holding a large bulk's bytes aside
)

// protocolError ends a connection; the message is sent to the client as
// "-ERR Protocol error: <msg>" before the connection is closed.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return "Protocol error: " + e.msg }

type guard struct {
	maxBulk  int64
	maxQuery int64
	maxArgs  int64
	nonce    [nonceLen]byte

	state  int
	hdr    []byte // header line held back until complete
	args   int64  // bulks left in the current command
	left   int64  // bytes left to pass (with CRLF) or to drop
	inline int    // bytes of the current inline line so far
	query  int64  // bytes of the current command passed through

	// held counts the query bytes of every connection's unfinished
	// command, against maxHeld (nil: no shared limit).
	held    *atomic.Int64
	maxHeld int64
	mine    atomic.Int64 // this guard's part of held (release may run on another goroutine)

	// unauth, when set, reports that the connection has not
	// authenticated: its commands then get Redis 7's caps for
	// unauthenticated clients (unauthMaxArgs, unauthMaxBulk), and their
	// bytes count against unauthHeld and maxUnauthHeld, a budget of their
	// own, so that connections that never authenticate cannot take the
	// budget of those that did.
	unauth        func() bool
	unauthCmd     bool // the current command started unauthenticated
	unauthHeld    *atomic.Int64
	maxUnauthHeld int64
	mineUnauth    atomic.Int64
	// peak is the most bytes one command of the connection held: redcon
	// keeps a read buffer of about that size until the connection ends.
	peak atomic.Int64

	asideFrom int64  // 0: nothing is held aside
	asideN    uint64 // bulks held aside so far: the next one's number
	cur       []byte // the bulk being held aside
	curLen    int64  // its length
	amu       sync.Mutex
	ready     map[uint64][]byte // bulks held aside whole, by number, until taken
}

// asideTag marks a placeholder's number as a bulk held aside (an
// oversized bulk's placeholder holds its length, always less).
const asideTag = 1 << 63

// placeholder is the bulk (header and CRLF included) that stands for a
// dropped or held-aside bulk: the nonce, then tag.
func (g *guard) placeholder(tag uint64) []byte {
	var ph [5 + placeholderLen + 2]byte
	copy(ph[:], "$24\r\n")
	copy(ph[5:], g.nonce[:])
	binary.BigEndian.PutUint64(ph[5+nonceLen:], tag)
	copy(ph[5+placeholderLen:], "\r\n")
	return ph[:]
}

// asideRoom is where the next bytes of the bulk held aside go: the free
// part of its buffer, allocated at the bulk's whole length when its first
// bytes come. The length is counted against the input limits from the
// header on, as any bulk; memory fresh from the system is not touched
// until the bytes arrive, so a half-sent 400 MB value takes about 200 MB.
// Growing by doubling instead copied as many bytes again as arrived (each
// copy of a 1 MiB chunk, yet on a loaded machine it stalled other clients
// by hundreds of ms: bench/memory.sh).
func (g *guard) asideRoom() []byte {
	if g.cur == nil {
		g.cur = make([]byte, 0, g.curLen)
	}
	return g.cur[len(g.cur):cap(g.cur)]
}

// asideFilled takes n bytes written into asideRoom. Once the bulk is
// whole it is ready for its command, its CRLF is expected, and asideFilled
// returns its placeholder, which the caller passes on to redcon: not
// before, or redcon would run the command without its bulk.
func (g *guard) asideFilled(n int) []byte {
	g.cur = g.cur[:len(g.cur)+n]
	g.left -= int64(n)
	if g.left > 0 {
		return nil
	}
	g.amu.Lock()
	if g.ready == nil {
		g.ready = make(map[uint64][]byte)
	}
	g.ready[g.asideN-1] = g.cur
	g.amu.Unlock()
	g.cur = nil
	g.state = stSkipCR
	return g.placeholder(asideTag | (g.asideN - 1))
}

// takeAside reports whether arg is the placeholder of a bulk held aside,
// and returns the bulk (nil if it is not there: a bug). Commands of a
// concurrent run take theirs on their own goroutines.
func (g *guard) takeAside(arg []byte) ([]byte, bool) {
	if len(arg) != placeholderLen || !bytes.Equal(arg[:nonceLen], g.nonce[:]) {
		return nil, false
	}
	tag := binary.BigEndian.Uint64(arg[nonceLen:])
	if tag&asideTag == 0 {
		return nil, false
	}
	g.amu.Lock()
	defer g.amu.Unlock()
	v := g.ready[tag&^asideTag]
	delete(g.ready, tag&^asideTag)
	return v, true
}

// dropAside forgets the bulks held aside that no command took (the
// connection ended before running them).
func (g *guard) dropAside() {
	g.amu.Lock()
	g.ready = nil
	g.amu.Unlock()
	g.cur = nil
}

// reserve counts n more bytes of the current command, against the
// command's limit and the server's.
func (g *guard) reserve(n int64) error {
	if g.query == 0 {
		g.unauthCmd = g.unauth != nil && g.unauth()
	}
	g.query += n
	if g.query > g.peak.Load() {
		g.peak.Store(g.query)
	}
	if g.query > g.maxQuery {
		return &protocolError{fmt.Sprintf("request of more than %d bytes (the server's query limit)", g.maxQuery)}
	}
	if g.unauthCmd && g.unauthHeld != nil {
		return take(g.unauthHeld, &g.mineUnauth, n, g.maxUnauthHeld, "unauthenticated clients")
	}
	if g.held == nil {
		return nil
	}
	return take(g.held, &g.mine, n, g.maxHeld, "its clients")
}

// take counts n more bytes in budget (whose limit is max) and in mine,
// this guard's part of it. Counted only if it fits: a refused command adds
// nothing, so that it cannot make the commands of other clients (a PING)
// fail until its connection is gone.
func take(budget, mine *atomic.Int64, n, max int64, whose string) error {
	for {
		total := budget.Load()
		if total+n > max {
			return &protocolError{fmt.Sprintf("the server holds %d bytes of unfinished commands across %s, and %d more would pass its limit of %d: retry later", total, whose, n, max)}
		}
		if budget.CompareAndSwap(total, total+n) {
			mine.Add(n)
			return nil
		}
	}
}

// release gives back what the current command holds: it is complete, or
// its connection is gone (then it may run on another goroutine than feed).
func (g *guard) release() {
	if g.held != nil {
		g.held.Add(-g.mine.Swap(0))
	}
	if g.unauthHeld != nil {
		g.unauthHeld.Add(-g.mineUnauth.Swap(0))
	}
}

// output collects what the guard passes on: in place at the front of the
// buffer being scanned while it fits behind the read position, and in
// spill from the first thing that does not.
type output struct {
	buf   []byte // the scanned buffer; buf[:n] is output
	n     int
	spill *[]byte
}

func (o *output) emit(b []byte, readPos int) {
	if len(*o.spill) == 0 && o.n+len(b) <= readPos {
		o.n += copy(o.buf[o.n:], b)
		return
	}
	*o.spill = append(*o.spill, b...)
}

// feed scans in (which it overwrites with its output), returns how many
// bytes at the front of in are output, and appends to spill what did not
// fit there; the caller passes spill on after in[:n]. An error is returned
// with the output that precedes it, which the caller must pass on first.
func (g *guard) feed(in []byte, spill *[]byte) (int, error) {
	out := output{buf: in, spill: spill}
	i := 0
	for i < len(in) {
		switch g.state {
		case stStart:
			if in[i] == '*' {
				g.state = stMultiHdr
				g.hdr = append(g.hdr[:0], '*')
				i++
			} else {
				g.state = stInline
				g.inline = 0
			}
		case stInline:
			j := bytes.IndexByte(in[i:], '\n')
			end := len(in)
			if j >= 0 {
				end = i + j + 1
			}
			g.inline += end - i
			if g.inline > maxInline {
				return out.n, &protocolError{"too big inline request"}
			}
			out.emit(in[i:end], end)
			i = end
			if j >= 0 {
				g.state = stStart
			}
		case stMultiHdr, stBulkHdr:
			if g.state == stBulkHdr && len(g.hdr) == 0 {
				if in[i] != '$' {
					return out.n, &protocolError{fmt.Sprintf("expected '$', got '%s'", printable(in[i]))}
				}
			}
			j := bytes.IndexByte(in[i:], '\n')
			end := len(in)
			if j >= 0 {
				end = i + j + 1
			}
			g.hdr = append(g.hdr, in[i:end]...)
			i = end
			if len(g.hdr) > maxHeaderLine {
				if g.state == stMultiHdr {
					return out.n, &protocolError{"too big mbulk count string"}
				}
				return out.n, &protocolError{"too big bulk count string"}
			}
			if j < 0 {
				continue
			}
			if err := g.header(&out, i); err != nil {
				return out.n, err
			}
		case stBody:
			k := min(g.left, int64(len(in)-i))
			out.emit(in[i:i+int(k)], i+int(k))
			i += int(k)
			g.left -= k
			if g.left == 0 {
				g.nextArg()
			}
		case stSkip:
			k := min(g.left, int64(len(in)-i))
			i += int(k)
			g.left -= k
			if g.left == 0 {
				g.state = stSkipCR
			}
		case stAside:
			for g.state == stAside && i < len(in) {
				n := copy(g.asideRoom(), in[i:])
				i += n
				if ph := g.asideFilled(n); ph != nil {
					out.emit(ph, i)
				}
			}
		case stSkipCR, stSkipLF:
			want := byte('\r')
			if g.state == stSkipLF {
				want = '\n'
			}
			if in[i] != want {
				return out.n, &protocolError{"invalid bulk length"}
			}
			i++
			if g.state == stSkipCR {
				g.state = stSkipLF
			} else {
				g.nextArg()
			}
		}
	}
	return out.n, nil
}

// header handles a complete header line in g.hdr; readPos is where the
// scan is in the buffer.
func (g *guard) header(out *output, readPos int) error {
	h := g.hdr
	if len(h) < 4 || h[len(h)-2] != '\r' {
		if g.state == stMultiHdr {
			return &protocolError{"invalid multibulk length"}
		}
		return &protocolError{"invalid bulk length"}
	}
	n, ok := parseLen(h[1 : len(h)-2])
	if g.state == stMultiHdr {
		switch {
		case !ok || n > g.maxArgs:
			return &protocolError{"invalid multibulk length"}
		case n > unauthMaxArgs && g.unauth != nil && g.unauth():
			return &protocolError{"unauthenticated multibulk length"}
		case n <= 0:
			// Redis ignores "*0" and "*-1"; redcon would fail on them.
			g.state = stStart
			return nil
		}
		out.emit(h, readPos)
		g.args = n
		if err := g.reserve(int64(len(h))); err != nil {
			return err
		}
		g.state = stBulkHdr
		g.hdr = g.hdr[:0]
		return nil
	}
	if !ok || n < 0 {
		return &protocolError{"invalid bulk length"}
	}
	if n > unauthMaxBulk && g.unauthCmd {
		return &protocolError{"unauthenticated bulk length"}
	}
	if n > max(g.maxBulk, DefaultMaxBulk) {
		// Past Redis's proto-max-bulk-len no value could be meant: end
		// the connection as Redis does.
		return &protocolError{"invalid bulk length"}
	}
	if n > g.maxBulk {
		ph := g.placeholder(uint64(n))
		out.emit(ph, readPos)
		if err := g.reserve(int64(len(ph))); err != nil {
			return err
		}
		g.left = n
		g.state = stSkip
		if n == 0 {
			g.state = stSkipCR
		}
		return nil
	}
	if err := g.reserve(int64(len(h)) + n + 2); err != nil {
		return err
	}
	if g.asideFrom > 0 && n >= g.asideFrom {
		g.asideN++
		g.cur, g.curLen = nil, n
		g.left = n
		g.state = stAside
		return nil
	}
	out.emit(h, readPos)
	g.left = n + 2
	g.state = stBody
	return nil
}

func (g *guard) nextArg() {
	g.args--
	g.hdr = g.hdr[:0]
	if g.args == 0 {
		g.state = stStart
		g.query = 0
		g.release()
		return
	}
	g.state = stBulkHdr
}

// parseLen parses a header's decimal number: an optional '-' and at most
// 18 digits, so that it cannot overflow.
func parseLen(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// oversized reports whether arg is the placeholder, with nonce, for a bulk
// the guard dropped, and the dropped bulk's length.
func oversized(nonce *[nonceLen]byte, arg []byte) (int64, bool) {
	if len(arg) != placeholderLen || !bytes.Equal(arg[:nonceLen], nonce[:]) {
		return 0, false
	}
	n := binary.BigEndian.Uint64(arg[nonceLen:])
	return int64(n), n&asideTag == 0
}

func printable(c byte) string {
	if c >= ' ' && c < 0x7f {
		return string(rune(c))
	}
	return strconv.QuoteToASCII(string([]byte{c}))
}
