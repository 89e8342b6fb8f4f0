package server

import (
	"math"
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
// sent unless the whole transaction is committed.
//
// Replies written through are flushed to the socket once a connection has
// flushAt bytes waiting (redcon would otherwise hold every reply of a
// pipeline until its last command ran): a connection holds at most about
// one reply beyond that, and a client that does not read blocks only its
// own connection, with bounded memory.
type respWriter struct {
	rc      redcon.Conn
	b       []byte
	scratch []byte
	proto   int  // 2 or 3
	unsent  *int // bytes written through and not yet flushed, per connection
	// fatal: the handler panicked (a concurrent run's command): the
	// connection is closed once this reply is sent.
	fatal bool
}

// flushAt is how many bytes of replies a connection holds before they are
// sent, mid-pipeline.
const flushAt = 256 << 10

// wrote accounts for n bytes written through and flushes past flushAt.
func (w *respWriter) wrote(n int) {
	if w.unsent == nil {
		return
	}
	if *w.unsent += n; *w.unsent >= flushAt {
		if bw := redcon.BaseWriter(w.rc); bw != nil {
			_ = bw.Flush() // a write error ends the connection at its next flush
		}
		*w.unsent = 0
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
	if w.rc != nil {
		w.rc.WriteBulk(v)
		w.wrote(len(v) + 16)
		return
	}
	w.b = redcon.AppendBulk(w.b, v)
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

// formatFloat formats as Redis's long double output for INCRBYFLOAT: no
// exponent, no trailing zeros.
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}
