package server

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/redcon"

	"github.com/kvarray/kvarray/device/mem"
	"github.com/kvarray/kvarray/mechanism"
)

// shimConn is an in-memory redcon.Conn: replies go to a buffer.
type shimConn struct {
	buf    bytes.Buffer
	w      *redcon.Writer
	ctx    any
	closed bool
	pipe   []redcon.Command
}

func newShim(cl *conn) *shimConn {
	s := &shimConn{ctx: cl}
	s.w = redcon.NewWriter(&s.buf)
	return s
}

func (s *shimConn) RemoteAddr() string                 { return "shim" }
func (s *shimConn) Close() error                       { s.w.Flush(); s.closed = true; return nil }
func (s *shimConn) WriteError(msg string)              { s.w.WriteError(msg) }
func (s *shimConn) WriteString(str string)             { s.w.WriteString(str) }
func (s *shimConn) WriteBulk(bulk []byte)              { s.w.WriteBulk(bulk) }
func (s *shimConn) WriteBulkString(bulk string)        { s.w.WriteBulkString(bulk) }
func (s *shimConn) WriteInt(num int)                   { s.w.WriteInt(num) }
func (s *shimConn) WriteInt64(num int64)               { s.w.WriteInt64(num) }
func (s *shimConn) WriteUint64(num uint64)             { s.w.WriteUint64(num) }
func (s *shimConn) WriteArray(count int)               { s.w.WriteArray(count) }
func (s *shimConn) WriteNull()                         { s.w.WriteNull() }
func (s *shimConn) WriteRaw(data []byte)               { s.w.WriteRaw(data) }
func (s *shimConn) WriteAny(v any)                     { s.w.WriteAny(v) }
func (s *shimConn) Context() any                       { return s.ctx }
func (s *shimConn) SetContext(v any)                   { s.ctx = v }
func (s *shimConn) SetReadBuffer(int)                  {}
func (s *shimConn) Detach() redcon.DetachedConn        { panic("shimConn: Detach") }
func (s *shimConn) PeekPipeline() []redcon.Command     { return s.pipe }
func (s *shimConn) NetConn() net.Conn                  { return nil }
func (s *shimConn) WriteBulkFrom(n int64, r io.Reader) { s.w.WriteBulkFrom(n, r) }
func (s *shimConn) ReadPipeline() []redcon.Command {
	p := s.pipe
	s.pipe = nil
	return p
}

// replies parses everything written so far; each must be well formed.
func (s *shimConn) replies(t testing.TB) []reply {
	t.Helper()
	s.w.Flush()
	r := bufio.NewReader(bytes.NewReader(s.buf.Bytes()))
	var out []reply
	for {
		if _, err := r.Peek(1); err == io.EOF {
			return out
		}
		rep, err := readReply(r)
		if err != nil {
			t.Fatalf("malformed reply after %v: %v\nall: %q", out, err, s.buf.Bytes())
		}
		out = append(out, rep)
	}
}

var fuzzCommands = func() []string {
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	return append(names, "SET", "Get", "client", "unknown", "")
}()

// FuzzDispatch feeds arbitrary argument vectors to the command dispatch:
// no panic, and every command gets exactly one well-formed reply.
func FuzzDispatch(f *testing.F) {
	// Values of at most 1 MiB: SETRANGE and SETBIT at large offsets would
	// otherwise make every input that reaches them store hundreds of MiB.
	a, devs := openArray(f, memHybrid+"max_value: 1MiB\n")
	f.Cleanup(func() { a.Close() })
	s := New(a, WithDevices(devs))
	if err := s.start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.stopExpiry)
	var mu sync.Mutex
	for _, seed := range []string{
		"set\x00k\x00v", "set\x00k\x00v\x00nx", "set\x00k\x00v\x00ex\x0010", "get\x00k", "mset\x00a\x001\x00b\x002",
		"mget\x00a\x00b\x00c", "del\x00a\x00a", "scan\x000\x00match\x00*\x00count\x005", "keys\x00[a-", "hello\x003",
		"hello\x002\x00auth\x00default\x00x\x00setname\x00n", "client\x00setinfo\x00lib-name\x00x", "command\x00docs\x00get",
		"command\x00info\x00nosuch", "info\x00all", "kvarray.set\x00k\x00v\x00packing", "kvarray.fail\x001", "kvarray.recover\x001",
		"config\x00get\x00*", "quit", "select\x00-1", "kvarray.status", "exists\x00\x00", "strlen\x00k",
		"set\x00k\x00v\x00px\x00100\x00get", "incrbyfloat\x00k\x001.5", "setrange\x00k\x005\x00abc", "lcs\x00a\x00b\x00idx\x00withmatchlen",
		"expire\x00k\x0010\x00gt", "watch\x00k", "exec", "multi", "swapdb\x000\x001", "copy\x00a\x00b\x00db\x003", "bitcount\x00k\x000\x00-1\x00bit",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		args := bytes.Split(data, []byte{0})
		if len(args) > 64 {
			return
		}
		// A short first word picks a known command, so that the fuzzer
		// reaches the handlers.
		if len(args[0]) == 1 {
			args[0] = []byte(fuzzCommands[int(args[0][0])%len(fuzzCommands)])
		}
		// CLIENT REPLY OFF / SKIP owe no reply; CLIENT PAUSE would hold
		// the next inputs up.
		if len(args) > 1 && strings.EqualFold(string(args[0]), "client") &&
			(strings.EqualFold(string(args[1]), "reply") || strings.EqualFold(string(args[1]), "pause")) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		cl := &conn{s: nil, id: 1, addr: "shim"}
		shim := newShim(cl)
		s.serveRESP(shim, redcon.Command{Args: args})
		replies := shim.replies(t)
		if len(replies) != 1 {
			t.Fatalf("%q: %d replies %v, want 1", args, len(replies), replies)
		}
		if r := replies[0]; r.isError() && strings.HasPrefix(r.str, "ERR internal error") {
			t.Fatalf("%q: %v", args, r)
		}
		// Bring failed devices back, so that later inputs reach the
		// paths of a healthy array too.
		for i, d := range devs {
			if m, ok := d.(*mem.Device); ok && m.Failed() {
				m.Recover()
			}
			a.SetDeviceState(i, mechanism.Healthy)
		}
	})
}
