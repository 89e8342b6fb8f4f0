package server

import (
	"github.com/kvarray/kvarray/collection"
	"strconv"

	"github.com/tidwall/redcon"
)

// respWriter writes one connection's replies in the protocol it chose with
// HELLO: RESP2 (the default) or RESP3. It is the one place that knows the
// difference, so handlers say what they reply (a map, a set, a double, a
// null) and never check the protocol themselves.
//
// A respWriter either writes through to the connection (rc set), or collects
// into b: EXEC runs its queued commands into a buffer, so that nothing is
// sent unless the whole transaction is committed, and the commands of a
// concurrent run (pipeline.go) collect their replies on their own
// goroutines.
//
// Replies written through are flushed to the socket once a connection has
// flushAt bytes waiting (redcon would otherwise hold every reply of a
// pipeline until its last command ran): a connection holds at most about
// one reply beyond that, and a client that does not read blocks only its
// own connection, with bounded memory.
//
// A bulk string of bigBulk bytes or more is never copied into a buffer:
// written through, it goes from the value to the socket; collected with
// keepRefs, the reply keeps a reference to it. Each copy of an 8 MiB value
// costs the memory bandwidth and garbage that other clients' commands wait
// behind (bench/memory.sh).
type respWriter struct {
	rc      redcon.Conn
	b       []byte
	scratch []byte
	proto   int // 2 or 3
	// cl is the connection written through, whose unsent bytes (not yet
	// flushed) w counts; nil when collecting.
	cl *conn
	// keepRefs: collect big bulks by reference (into refs) rather than
	// copy them. Only for replies sent before anything can change the
	// values they reference: a value the array returned is the reader's
	// own, and a concurrent run's arguments stay valid until the run ends.
	keepRefs bool
	refs     []bulkRef
	// fatal: the handler panicked (a concurrent run's command): the
	// connection is closed once this reply is sent.
	fatal bool
}

// bulkRef is a big bulk string of a collected reply: its bytes go before
// b[at:].
type bulkRef struct {
	at int
	v  []byte
}

// flushAt is how many bytes of replies a connection holds before they are
// sent, mid-pipeline.
const flushAt = 256 << 10

// bigBulk is the length from which a bulk string is sent from the value
// itself rather than copied (see respWriter).
const bigBulk = 64 << 10

var crlf = []byte("\r\n")

// wrote accounts for n bytes written through and flushes past flushAt.
func (w *respWriter) wrote(n int) {
	if w.cl == nil {
		return
	}
	if w.cl.unsent += n; w.cl.unsent >= flushAt {
		w.flush()
	}
}

// flush sends what redcon holds for the connection. A write error ends
// the connection at redcon's next flush.
func (w *respWriter) flush() {
	if bw := redcon.BaseWriter(w.rc); bw != nil {
		_ = bw.Flush()
	}
	if w.cl != nil {
		w.cl.unsent = 0
	}
}

// sendValue writes v, a big bulk's bytes, to the socket without copying
// it, after what redcon holds. When the connection is not redcon's own
// (no base writer), v is copied as any reply.
func (w *respWriter) sendValue(v []byte) {
	bw := redcon.BaseWriter(w.rc)
	if bw == nil {
		w.rc.WriteRaw(v)
		return
	}
	if err := bw.Flush(); err != nil {
		return // the connection ends after this pipeline
	}
	if w.cl != nil {
		w.cl.unsent = 0
	}
	if _, err := w.rc.NetConn().Write(v); err != nil {
		// The reply is cut: nothing after it may be sent, and the
		// commands after it do not run (the client is gone).
		if w.cl != nil {
			w.cl.quit = true
		}
		w.rc.Close()
	}
}

func (w *respWriter) raw(b []byte) {
	if w.rc != nil {
		w.rc.WriteRaw(b)
		w.wrote(len(b))
		return
	}
	w.b = append(w.b, b...)
}

// send writes r, a collected reply, through w, its big bulks from their
// values.
func (w *respWriter) send(r *respWriter) {
	if w.rc == nil {
		for _, ref := range r.refs {
			w.refs = append(w.refs, bulkRef{len(w.b) + ref.at, ref.v})
		}
		w.b = append(w.b, r.b...)
		return
	}
	at := 0
	for _, ref := range r.refs {
		w.raw(r.b[at:ref.at])
		w.sendValue(ref.v)
		at = ref.at
	}
	w.raw(r.b[at:])
}

// size is how many bytes the collected reply holds.
func (w *respWriter) size() int {
	n := len(w.b)
	for _, r := range w.refs {
		n += len(r.v)
	}
	return n
}

// emit writes what f appends.
func (w *respWriter) emit(f func([]byte) []byte) {
	if w.rc != nil {
		w.scratch = f(w.scratch[:0])
		w.rc.WriteRaw(w.scratch)
		w.wrote(len(w.scratch))
		return
	}
	w.b = f(w.b)
}

func (w *respWriter) resp3() bool { return w.proto == 3 }

func (w *respWriter) WriteString(s string) {
	w.emit(func(b []byte) []byte { return redcon.AppendString(b, s) })
}

func (w *respWriter) WriteError(s string) {
	w.emit(func(b []byte) []byte { return redcon.AppendError(b, s) })
}

func (w *respWriter) WriteBulk(v []byte) {
	switch {
	case len(v) >= bigBulk && w.rc != nil:
		w.emit(func(b []byte) []byte { return bulkHeader(b, len(v)) })
		w.sendValue(v)
		w.raw(crlf)
	case len(v) >= bigBulk && w.keepRefs:
		w.b = bulkHeader(w.b, len(v))
		w.refs = append(w.refs, bulkRef{len(w.b), v})
		w.b = append(w.b, crlf...)
	case w.rc != nil:
		w.rc.WriteBulk(v)
		w.wrote(len(v) + 16)
	default:
		w.b = redcon.AppendBulk(w.b, v)
	}
}

// bulkHeader appends a bulk string's header, "$n\r\n".
func bulkHeader(b []byte, n int) []byte {
	return append(strconv.AppendInt(append(b, '$'), int64(n), 10), '\r', '\n')
}

func (w *respWriter) WriteBulkString(s string) {
	w.emit(func(b []byte) []byte { return redcon.AppendBulkString(b, s) })
}

func (w *respWriter) WriteInt(n int) { w.WriteInt64(int64(n)) }

func (w *respWriter) WriteInt64(n int64) {
	w.emit(func(b []byte) []byte { return redcon.AppendInt(b, n) })
}

func (w *respWriter) WriteArray(n int) {
	w.emit(func(b []byte) []byte { return redcon.AppendArray(b, n) })
}

// WriteNull is the null bulk string ($-1 in RESP2, _ in RESP3).
func (w *respWriter) WriteNull() {
	if w.resp3() {
		w.raw([]byte("_\r\n"))
		return
	}
	w.raw([]byte("$-1\r\n"))
}

// WriteNullArray is the null array (*-1 in RESP2, _ in RESP3): EXEC
// aborted by WATCH.
func (w *respWriter) WriteNullArray() {
	if w.resp3() {
		w.raw([]byte("_\r\n"))
		return
	}
	w.raw([]byte("*-1\r\n"))
}

// WriteMap starts a map of n pairs (a flat array of 2n in RESP2).
func (w *respWriter) WriteMap(n int) {
	if w.resp3() {
		w.emit(func(b []byte) []byte { return append(strconv.AppendInt(append(b, '%'), int64(n), 10), '\r', '\n') })
		return
	}
	w.WriteArray(2 * n)
}

// WriteDouble is a double (a bulk string in RESP2), formatted as Redis's
// addReplyDouble (%.17g; inf, -inf).
func (w *respWriter) WriteDouble(f float64) {
	s := collection.FormatScore(f)
	if w.resp3() {
		w.emit(func(b []byte) []byte { return append(append(append(b, ','), s...), '\r', '\n') })
		return
	}
	w.WriteBulkString(s)
}

// WriteSet starts a set of n elements (an array in RESP2).
func (w *respWriter) WriteSet(n int) {
	if w.resp3() {
		w.emit(func(b []byte) []byte { return append(strconv.AppendInt(append(b, '~'), int64(n), 10), '\r', '\n') })
		return
	}
	w.WriteArray(n)
}

// WriteVerbatim is a verbatim text string (txt) in RESP3, a bulk string
// in RESP2: INFO, CLIENT LIST and CLIENT INFO, as Redis 7.
func (w *respWriter) WriteVerbatim(s string) {
	if w.resp3() {
		w.emit(func(b []byte) []byte {
			b = append(strconv.AppendInt(append(b, '='), int64(len(s)+4), 10), '\r', '\n')
			return append(append(append(b, "txt:"...), s...), '\r', '\n')
		})
		return
	}
	w.WriteBulkString(s)
}
