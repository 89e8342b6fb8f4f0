package server

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/kvarray/kvarray/collection"
	"github.com/kvarray/kvarray/keyspace"
	"github.com/kvarray/kvarray/pubsub"
)

// The stream commands: parsing, replies and notifications; the stream
// itself is collection.Stream. Every command opens the stream under its
// key's lock and writes what it changed as one all-or-nothing write
// (collection), so an XREADGROUP's delivery and its pending entries, an
// XACK, an XCLAIM take effect whole or not at all across a crash. The
// blocking forms of XREAD and XREADGROUP are blockSpecs (blocking.go).

const (
	errStreamID     = "ERR Invalid stream ID specified as stream command argument"
	errStreamTop    = "ERR The ID specified in XADD is equal or smaller than the target stream top item"
	errNoGroupKey   = "NOGROUP No such key '%s' or consumer group '%s'"
	errBusyGroup    = "BUSYGROUP Consumer Group name already exists"
	errStreamExists = "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically."
)

func init() {
	commands = append(commands, streamCommands()...)
	params = append(params, streamParams()...)
}

func streamCommands() []*command {
	idArg := strArg("id")
	xread := &command{name: "xread", arity: -4, flags: []string{"readonly", "blocking"}, acl: []string{"read", "stream", "slow", "blocking"},
		group: "stream", since: "5.0.0", summary: "Returns entries of streams after IDs, or blocks until there are some.",
		complexity: "O(N) array calls, N the entries returned", run: cmdXRead,
		args: []arg{optional(tokenArg("COUNT", intArg("count"))), optional(tokenArg("BLOCK", intArg("milliseconds"))),
			tokenArg("STREAMS", block("streams", multiple(keyArg("key")), multiple(idArg)))}}
	xreadgroup := &command{name: "xreadgroup", arity: -7, flags: []string{"write", "blocking"}, acl: []string{"write", "stream", "slow", "blocking"},
		group: "stream", since: "5.0.0", summary: "Delivers entries of streams to a consumer of a group, or blocks until there are some.",
		complexity: "O(N) array calls, N the entries delivered", run: cmdXRead,
		args: []arg{tokenArg("GROUP", block("group-block", strArg("group"), strArg("consumer"))), optional(tokenArg("COUNT", intArg("count"))),
			optional(tokenArg("BLOCK", intArg("milliseconds"))), optional(token("NOACK")),
			tokenArg("STREAMS", block("streams", multiple(keyArg("key")), multiple(idArg)))}}
	sub := func(name string, arity int, write bool, summary string, run func(*call)) *command {
		c := rcmd(name, arity, "stream", "5.0.0", summary, run, strArg("subcommand"), keyArg("key"), optional(multiple(strArg("arg"))))
		if write {
			c = wcmd(name, arity, "stream", "5.0.0", summary, run, strArg("subcommand"), keyArg("key"), optional(multiple(strArg("arg"))))
		}
		c.first, c.last = 2, 2
		return c
	}
	return []*command{
		wcmd("xadd", -5, "stream", "5.0.0", "Appends an entry to a stream (NOMKSTREAM, MAXLEN, MINID, LIMIT).", cmdXAdd, keyArg("key"),
			optional(token("NOMKSTREAM")), optional(block("trim", oneof("strategy", token("MAXLEN"), token("MINID")),
				optional(oneof("operator", token("="), token("~"))), strArg("threshold"), optional(tokenArg("LIMIT", intArg("count"))))),
			oneof("id-selector", token("*"), idArg), multiple(block("data", strArg("field"), strArg("value")))),
		wcmd("xtrim", -4, "stream", "5.0.0", "Removes entries from the head of a stream (MAXLEN, MINID, LIMIT).", cmdXTrim, keyArg("key"),
			oneof("strategy", token("MAXLEN"), token("MINID")), optional(oneof("operator", token("="), token("~"))), strArg("threshold"),
			optional(tokenArg("LIMIT", intArg("count")))),
		rcmd("xlen", 2, "stream", "5.0.0", "Returns the number of entries of a stream.", cmdXLen, keyArg("key")),
		rcmd("xrange", -4, "stream", "5.0.0", "Returns the entries of a stream in a range of IDs.", cmdXRange, keyArg("key"),
			strArg("start"), strArg("end"), optional(tokenArg("COUNT", intArg("count")))),
		rcmd("xrevrange", -4, "stream", "5.0.0", "Returns the entries of a stream in a range of IDs, the last first.", cmdXRange, keyArg("key"),
			strArg("end"), strArg("start"), optional(tokenArg("COUNT", intArg("count")))),
		wcmd("xdel", -3, "stream", "5.0.0", "Deletes entries of a stream.", cmdXDel, keyArg("key"), multiple(idArg)),
		wcmd("xsetid", -3, "stream", "5.0.0", "Sets a stream's last ID (ENTRIESADDED, MAXDELETEDID).", cmdXSetID, keyArg("key"), strArg("last-id"),
			optional(tokenArg("ENTRIESADDED", intArg("entries-added"))), optional(tokenArg("MAXDELETEDID", strArg("max-deleted-id")))),
		xread, xreadgroup,
		wcmd("xack", -4, "stream", "5.0.0", "Acknowledges pending entries of a consumer group.", cmdXAck, keyArg("key"), strArg("group"), multiple(idArg)),
		rcmd("xpending", -3, "stream", "5.0.0", "Returns the pending entries of a consumer group (IDLE).", cmdXPending, keyArg("key"), strArg("group"),
			optional(block("filters", optional(tokenArg("IDLE", intArg("min-idle-time"))), strArg("start"), strArg("end"), intArg("count"),
				optional(strArg("consumer"))))),
		wcmd("xclaim", -6, "stream", "5.0.0", "Gives pending entries to another consumer (IDLE, TIME, RETRYCOUNT, FORCE, JUSTID, LASTID).", cmdXClaim,
			keyArg("key"), strArg("group"), strArg("consumer"), strArg("min-idle-time"), multiple(idArg)),
		wcmd("xautoclaim", -6, "stream", "6.2.0", "Gives pending entries idle long enough to another consumer, from a start ID (COUNT, JUSTID).", cmdXAutoClaim,
			keyArg("key"), strArg("group"), strArg("consumer"), strArg("min-idle-time"), strArg("start"), optional(tokenArg("COUNT", intArg("count"))),
			optional(token("JUSTID"))),
		sub("xgroup", -2, true, "XGROUP CREATE, SETID, DESTROY, CREATECONSUMER, DELCONSUMER, HELP: a stream's consumer groups.", cmdXGroup),
		sub("xinfo", -2, false, "XINFO STREAM [FULL], GROUPS, CONSUMERS, HELP: a stream and its groups.", cmdXInfo),
	}
}

// streamParams are stream-node-max-entries and -bytes.
func streamParams() []param {
	p := func(name string, v func(*Server) *atomic.Int64) param {
		return param{name: name, get: func(s *Server) string { return strconv.FormatInt(v(s).Load(), 10) },
			set: func(s *Server, a string) error {
				n, err := parseInt([]byte(a))
				if err != nil || n < 0 {
					return fmt.Errorf("argument couldn't be parsed into an integer")
				}
				v(s).Store(n)
				return nil
			}}
	}
	return []param{
		p("stream-node-max-entries", func(s *Server) *atomic.Int64 { return &s.limits.streamEntries }),
		p("stream-node-max-bytes", func(s *Server) *atomic.Int64 { return &s.limits.streamBytes }),
	}
}

func (s *Server) streamLim() collection.StreamLimits {
	return collection.StreamLimits{NodeEntries: s.limits.streamEntries.Load(), NodeBytes: s.limits.streamBytes.Load()}
}

// stream runs fn on the stream under key (collection), then writes what
// fn changed. fn returns false when it replied with an error.
func (c *call) stream(key []byte, fn func(st *collection.Stream) bool) bool {
	return c.collection(key, keyspace.TypeStream, func(v keyspace.Value, found bool) ([]keyspace.Op, bool) {
		st, err := collection.OpenStream(c.ctx, c.source(), v, found, c.s.streamLim())
		if err != nil {
			c.fail(err)
			return nil, false
		}
		if !fn(st) {
			return nil, false
		}
		return c.collOps(key, st), true
	})
}

// parseStreamID parses ms-seq, ms (seq missing), - and + (unless strict).
func parseStreamID(a []byte, missingSeq uint64, strict bool) (collection.StreamID, bool) {
	s := string(a)
	if s == "-" || s == "+" {
		if strict {
			return collection.StreamID{}, false
		}
		if s == "-" {
			return collection.StreamID{}, true
		}
		return collection.MaxStreamID, true
	}
	msPart, seqPart, dash := strings.Cut(s, "-")
	ms, err := strconv.ParseUint(msPart, 10, 64)
	if err != nil || msPart == "" || msPart[0] == '+' {
		return collection.StreamID{}, false
	}
	seq := missingSeq
	if dash {
		if seq, err = strconv.ParseUint(seqPart, 10, 64); err != nil || seqPart == "" || seqPart[0] == '+' {
			return collection.StreamID{}, false
		}
	}
	return collection.StreamID{Ms: ms, Seq: seq}, true
}

// streamID parses an ID argument or replies with Redis's error.
func (c *call) streamID(a []byte, missingSeq uint64, strict bool) (collection.StreamID, bool) {
	id, ok := parseStreamID(a, missingSeq, strict)
	if !ok {
		c.error(errStreamID)
	}
	return id, ok
}

// writeEntries writes entries as XRANGE does.
func writeEntries(w *respWriter, es []collection.StreamEntry) {
	w.WriteArray(len(es))
	for _, e := range es {
		writeEntry(w, e)
	}
}

func writeEntry(w *respWriter, e collection.StreamEntry) {
	w.WriteArray(2)
	w.WriteBulkString(e.ID.String())
	if e.Fields == nil {
		w.WriteNullArray()
		return
	}
	w.WriteArray(len(e.Fields))
	for _, f := range e.Fields {
		w.WriteBulk(f)
	}
}

// trimArgs are XADD's and XTRIM's trimming options.
type trimArgs struct {
	strategy string // "", "maxlen" or "minid"
	approx   bool
	maxLen   int64
	minID    collection.StreamID
	limit    int64
}

// parseTrim parses the options from args[2:] (streamParseAddOrTrimArgs):
// for XADD it stops at the ID and returns its position.
func (c *call) parseTrim(xadd bool) (t trimArgs, noMk bool, idPos int, ok bool) {
	args := c.args
	limitGiven := false
	i := 2
	for ; i < len(args); i++ {
		more := len(args) - 1 - i
		opt := strings.ToLower(string(args[i]))
		switch {
		case xadd && opt == "*":
			goto done
		case (opt == "maxlen" || opt == "minid") && more > 0:
			if t.strategy != "" {
				c.error("ERR syntax error, MAXLEN and MINID options at the same time are not compatible")
				return t, false, 0, false
			}
			t.approx = false
			if next := string(args[i+1]); more >= 2 && (next == "~" || next == "=") {
				t.approx = next == "~"
				i++
			}
			i++
			if opt == "maxlen" {
				n, err := parseInt(args[i])
				if err != nil {
					c.error(errNotInt)
					return t, false, 0, false
				}
				if n < 0 {
					c.error("ERR The MAXLEN argument must be >= 0.")
					return t, false, 0, false
				}
				t.maxLen = n
			} else {
				id, ok := c.streamID(args[i], 0, true)
				if !ok {
					return t, false, 0, false
				}
				t.minID = id
			}
			t.strategy = opt
		case opt == "limit" && more > 0:
			n, err := parseInt(args[i+1])
			if err != nil {
				c.error(errNotInt)
				return t, false, 0, false
			}
			if n < 0 {
				c.error("ERR The LIMIT argument must be >= 0.")
				return t, false, 0, false
			}
			t.limit, limitGiven = n, true
			i++
		case xadd && opt == "nomkstream":
			noMk = true
		case xadd:
			goto done
		default:
			c.syntaxError()
			return t, false, 0, false
		}
	}
done:
	if t.limit != 0 && t.strategy == "" {
		c.error("ERR syntax error, LIMIT cannot be used without specifying a trimming strategy")
		return t, false, 0, false
	}
	if !xadd && t.strategy == "" {
		c.error("ERR syntax error, XTRIM must be called with a trimming strategy")
		return t, false, 0, false
	}
	if limitGiven && !t.approx {
		c.error("ERR syntax error, LIMIT cannot be used without the special ~ option")
		return t, false, 0, false
	}
	if !limitGiven && t.approx {
		t.limit = min(max(100*c.s.streamLim().NodeEntries, 0), 1000000)
		if t.limit <= 0 {
			t.limit = 10000
		}
	}
	return t, noMk, i, true
}

// trim applies t to st and notifies xtrim when it removed entries.
func (c *call) trim(st *collection.Stream, t trimArgs, key []byte) (int64, bool) {
	if t.strategy == "" {
		return 0, true
	}
	n, err := st.Trim(t.strategy == "minid", t.maxLen, t.minID, t.approx, t.limit)
	if err != nil {
		c.fail(err)
		return 0, false
	}
	if n > 0 {
		c.notify(pubsub.Stream, "xtrim", c.cl.db, key)
	}
	return n, true
}

// cmdXAdd: XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT n]] *|id field value [field value ...]
func cmdXAdd(c *call) {
	t, noMk, idPos, ok := c.parseTrim(true)
	if !ok {
		return
	}
	fields := c.args[idPos+1:]
	if idPos >= len(c.args) || len(fields) < 2 || len(fields)%2 == 1 {
		c.arityError("xadd")
		return
	}
	for _, f := range fields {
		if err := c.s.checkValue(f); err != nil {
			c.fail(err)
			return
		}
	}
	idArg := string(c.args[idPos])
	msAuto, seqAuto := idArg == "*", false
	var id collection.StreamID
	if !msAuto {
		if ms, ok := strings.CutSuffix(idArg, "-*"); ok {
			seqAuto = true
			var err error
			if id.Ms, err = strconv.ParseUint(ms, 10, 64); err != nil || ms == "" || ms[0] == '+' {
				c.error(errStreamID)
				return
			}
		} else if id, ok = c.streamID(c.args[idPos], 0, true); !ok {
			return
		} else if id.IsZero() {
			c.error("ERR The ID specified in XADD must be greater than 0-0")
			return
		}
	}
	key := c.args[1]
	var added collection.StreamID
	created := false
	if !c.stream(key, func(st *collection.Stream) bool {
		if !st.Exists() {
			if noMk {
				return true
			}
			created = true
		}
		if st.LastID == collection.MaxStreamID {
			c.error("ERR The stream has exhausted the last possible ID, unable to add more items")
			return false
		}
		if msAuto || seqAuto {
			var ok bool
			if id, ok = st.NextID(uint64(keyspace.NowMs()), id.Ms, msAuto, seqAuto); !ok {
				c.error(errStreamTop)
				return false
			}
		}
		if err := st.Add(id, fields); err != nil {
			c.error(errStreamTop)
			return false
		}
		added = id
		if created {
			c.notify(pubsub.New, "new", c.cl.db, key)
		}
		c.notify(pubsub.Stream, "xadd", c.cl.db, key)
		_, ok := c.trim(st, t, key)
		return ok
	}) {
		return
	}
	if added.IsZero() {
		c.w.WriteNull()
		return
	}
	c.w.WriteBulkString(added.String())
}

// cmdXTrim: XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT n]
func cmdXTrim(c *call) {
	t, _, _, ok := c.parseTrim(false)
	if !ok {
		return
	}
	var n int64
	if !c.stream(c.args[1], func(st *collection.Stream) bool {
		var ok bool
		n, ok = c.trim(st, t, c.args[1])
		return ok
	}) {
		return
	}
	c.w.WriteInt64(n)
}

func cmdXLen(c *call) {
	var n int64
	if c.stream(c.args[1], func(st *collection.Stream) bool { n = st.Length; return true }) {
		c.w.WriteInt64(n)
	}
}

// rangeID parses an interval bound of XRANGE ("(" exclusive).
func (c *call) rangeID(a []byte, missingSeq uint64, start bool) (collection.StreamID, bool) {
	if len(a) > 1 && a[0] == '(' {
		id, ok := c.streamID(a[1:], missingSeq, true)
		if !ok {
			return id, false
		}
		if start {
			if id, ok = id.Next(); !ok {
				c.error("ERR invalid start ID for the interval")
			}
		} else if id, ok = id.Prev(); !ok {
			c.error("ERR invalid end ID for the interval")
		}
		return id, ok
	}
	return c.streamID(a, missingSeq, false)
}

// cmdXRange serves XRANGE key start end [COUNT n] and XREVRANGE key end start [COUNT n].
func cmdXRange(c *call) {
	rev := c.e.name == "xrevrange"
	sa, ea := c.args[2], c.args[3]
	if rev {
		sa, ea = ea, sa
	}
	start, ok := c.rangeID(sa, 0, true)
	if !ok {
		return
	}
	end, ok := c.rangeID(ea, math.MaxUint64, false)
	if !ok {
		return
	}
	count := int64(-1)
	for j := 4; j < len(c.args); j++ {
		if upper(c.args[j]) == "COUNT" && j+1 < len(c.args) {
			n, err := parseInt(c.args[j+1])
			if err != nil {
				c.error(errNotInt)
				return
			}
			count = max(n, 0)
			j++
			continue
		}
		c.syntaxError()
		return
	}
	var es []collection.StreamEntry
	if !c.stream(c.args[1], func(st *collection.Stream) bool {
		if count == 0 {
			return true
		}
		var err error
		if es, err = st.Range(start, end, int(count), rev); err != nil {
			c.fail(err)
			return false
		}
		return true
	}) {
		return
	}
	if count == 0 {
		c.w.WriteNullArray()
		return
	}
	writeEntries(c.w, es)
}

// streamIDs parses the exact IDs args (XDEL's, XACK's), replying the
// error of the first that is none.
func (c *call) streamIDs(args [][]byte) ([]collection.StreamID, bool) {
	ids := make([]collection.StreamID, 0, len(args))
	for _, a := range args {
		id, ok := c.streamID(a, 0, true)
		if !ok {
			return nil, false
		}
		ids = append(ids, id)
	}
	return ids, true
}

func cmdXDel(c *call) {
	ids, ok := c.streamIDs(c.args[2:])
	if !ok {
		return
	}
	var n int64
	if !c.stream(c.args[1], func(st *collection.Stream) bool {
		var err error
		if n, err = st.Delete(ids); err != nil {
			c.fail(err)
			return false
		}
		if n > 0 {
			c.notify(pubsub.Stream, "xdel", c.cl.db, c.args[1])
		}
		return true
	}) {
		return
	}
	c.w.WriteInt64(n)
}

// cmdXSetID: XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id]
func cmdXSetID(c *call) {
	id, ok := c.streamID(c.args[2], 0, true)
	if !ok {
		return
	}
	entriesAdded := int64(-1)
	var maxDel collection.StreamID
	for i := 3; i < len(c.args); i++ {
		switch opt := upper(c.args[i]); {
		case opt == "ENTRIESADDED" && i+1 < len(c.args):
			n, err := parseInt(c.args[i+1])
			if err != nil {
				c.error(errNotInt)
				return
			}
			if n < 0 {
				c.error("ERR entries_added must be positive")
				return
			}
			entriesAdded = n
			i++
		case opt == "MAXDELETEDID" && i+1 < len(c.args):
			if maxDel, ok = c.streamID(c.args[i+1], 0, true); !ok {
				return
			}
			if id.Compare(maxDel) < 0 {
				c.error("ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id")
				return
			}
			i++
		default:
			c.syntaxError()
			return
		}
	}
	if !c.stream(c.args[1], func(st *collection.Stream) bool {
		if !st.Exists() {
			c.error("ERR no such key")
			return false
		}
		if err := st.SetID(id, entriesAdded, maxDel, entriesAdded >= 0); err != nil {
			var refused collection.RefusedError
			if errors.As(err, &refused) {
				c.error(string(refused))
			} else {
				c.fail(err)
			}
			return false
		}
		c.notify(pubsub.Stream, "xsetid", c.cl.db, c.args[1])
		return true
	}) {
		return
	}
	c.ok()
}

// streamRead is one key of an XREAD or XREADGROUP.
type streamRead struct {
	key []byte
	id  collection.StreamID
	// last: the ID was $ (XREAD, resolved when the command starts);
	// newOnly: > (XREADGROUP).
	newOnly bool
}

// cmdXRead serves XREAD and XREADGROUP.
func cmdXRead(c *call) {
	group := c.e.name == "xreadgroup"
	var count int64
	timeout := int64(-1)
	var gname, cname []byte
	noack := false
	streamsAt := 0
	for i := 1; i < len(c.args) && streamsAt == 0; i++ {
		more := len(c.args) - 1 - i
		switch o := upper(c.args[i]); {
		case o == "BLOCK" && more > 0:
			// As Redis: a script cannot block, and says so rather than
			// answering as if the timeout had passed.
			if c.inScript() {
				c.error(fmt.Sprintf("ERR %s command is not allowed with BLOCK option from scripts", c.args[0]))
				return
			}
			n, err := parseInt(c.args[i+1])
			if err != nil {
				c.error("ERR timeout is not an integer or out of range")
				return
			}
			if n < 0 {
				c.error("ERR timeout is negative")
				return
			}
			timeout = n
			i++
		case o == "COUNT" && more > 0:
			n, err := parseInt(c.args[i+1])
			if err != nil {
				c.error(errNotInt)
				return
			}
			count = max(n, 0)
			i++
		case o == "STREAMS" && more > 0:
			streamsAt = i + 1
			if (len(c.args)-streamsAt)%2 != 0 {
				c.error("ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.")
				return
			}
		case o == "GROUP" && more >= 2:
			if !group {
				c.error("ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.")
				return
			}
			gname, cname = c.args[i+1], c.args[i+2]
			i += 2
		case o == "NOACK":
			if !group {
				c.error("ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.")
				return
			}
			noack = true
		default:
			c.syntaxError()
			return
		}
	}
	if streamsAt == 0 {
		c.syntaxError()
		return
	}
	if group && gname == nil {
		c.error("ERR Missing GROUP option for XREADGROUP")
		return
	}
	n := (len(c.args) - streamsAt) / 2
	reads := make([]streamRead, n)
	keys := make([][]byte, n)
	for i := range reads {
		k, a := c.args[streamsAt+i], c.args[streamsAt+n+i]
		reads[i].key, keys[i] = k, k
		switch string(a) {
		case "$":
			if group {
				c.error("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.")
				return
			}
			reads[i].id = collection.MaxStreamID // resolved below
			reads[i].newOnly = true
		case ">":
			if !group {
				c.error("ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.")
				return
			}
			reads[i].newOnly = true
		default:
			id, ok := c.streamID(a, 0, true)
			if !ok {
				return
			}
			reads[i].id = id
		}
	}
	x := &xread{group: group, gname: gname, cname: cname, noack: noack, count: count}
	if !c.checkKeys(keys...) {
		return
	}
	// The first try, over every key at once (the reply names each key
	// that had entries); $ is resolved to each stream's last ID here.
	unlock, err := c.lockKeys(c.cl.db, keys...)
	if err != nil {
		c.fail(err)
		return
	}
	out := &respWriter{proto: c.w.proto}
	served := 0
	var failed bool
	for i := range reads {
		r := &reads[i]
		if !group && r.newOnly {
			// $: the last ID now.
			r.newOnly = false
			r.id = collection.StreamID{}
			v, found, err := c.getAny(c.cl.db, r.key)
			if err == nil && found && v.typ == keyspace.TypeStream {
				st, err := collection.OpenStream(c.ctx, c.source(), v.ks(), true, c.s.streamLim())
				if err == nil {
					r.id = st.LastID
				}
			}
		}
	}
	var replies []*respWriter
	for i := range reads {
		w := &respWriter{proto: c.w.proto}
		got, ok := x.serveKey(c, w, &reads[i], false)
		if !ok {
			failed = true
			c.w.send(w)
			break
		}
		if got {
			served++
			replies = append(replies, w)
		}
	}
	unlock()
	if failed {
		return
	}
	if served > 0 {
		if out.resp3() {
			out.WriteMap(served)
		} else {
			out.WriteArray(served)
		}
		for _, w := range replies {
			out.b = append(out.b, w.b...)
		}
		c.w.send(out)
		return
	}
	if timeout < 0 {
		c.w.WriteNullArray()
		return
	}
	byKey := map[string]*streamRead{}
	for i := range reads {
		if _, dup := byKey[string(reads[i].key)]; !dup {
			byKey[string(reads[i].key)] = &reads[i]
		}
	}
	if x.count == 0 {
		x.count = 1000 // Redis's default for a blocked read
	}
	c.block(&blockSpec{keys: keys, types: []byte{keyspace.TypeStream}, timeout: timeout, anyValue: group,
		serve: func(sc *call, key []byte) bool {
			w := &respWriter{proto: sc.w.proto}
			// sc is c on the tries before blocking, a waiter's call after.
			got, ok := x.serveKey(sc, w, byKey[string(key)], sc != c)
			if !ok {
				sc.w.send(w)
				return true
			}
			if !got {
				return false
			}
			if sc.w.resp3() {
				sc.w.WriteMap(1)
			} else {
				sc.w.WriteArray(1)
			}
			sc.w.send(w)
			return true
		},
		timedOut: func(w *respWriter) { w.WriteNullArray() }})
}

// keyHeader starts a key's part of an XREAD reply: a pair in RESP2, a
// map entry in RESP3.
func keyHeader(w *respWriter, key []byte) {
	if !w.resp3() {
		w.WriteArray(2)
	}
	w.WriteBulk(key)
}

// xread is what an XREAD or XREADGROUP asks of each key.
type xread struct {
	group        bool
	gname, cname []byte
	noack        bool
	count        int64
}

// serveKey reads (or delivers) r's entries into w as [key, entries]: got
// false when there are none to serve, ok false when w holds an error.
// blocked: a waiter being served (a missing group is then NOGROUP too).
func (x *xread) serveKey(c *call, w *respWriter, r *streamRead, blocked bool) (got, ok bool) {
	if r == nil {
		return false, true
	}
	ok = true
	errw := func(msg string) {
		(&call{s: c.s, e: c.e, w: w, running: true}).error(msg)
		ok = false
	}
	v, found, err := c.getAny(c.cl.db, r.key)
	if err != nil {
		errw(errorReply(err))
		return false, false
	}
	if blocked && x.group && (!found || v.typ != keyspace.TypeStream) {
		errw("UNBLOCKED the stream key no longer exists")
		return false, false
	}
	if found && v.typ != keyspace.TypeStream {
		errw(keyspace.ErrWrongType.Error())
		return false, false
	}
	if !x.group {
		if !found {
			return false, true
		}
		st, err := collection.OpenStream(c.ctx, c.source(), v.ks(), true, c.s.streamLim())
		if err != nil {
			errw(errorReply(err))
			return false, false
		}
		start, more := r.id.Next()
		if !more {
			return false, true
		}
		es, err := st.Range(start, collection.MaxStreamID, int(x.count), false)
		if err != nil {
			errw(errorReply(err))
			return false, false
		}
		if len(es) == 0 {
			return false, true
		}
		keyHeader(w, r.key)
		writeEntries(w, es)
		return true, true
	}
	// XREADGROUP: a write, through stream's all-or-nothing commit; the
	// entries go to w only once it is written (else w has its error).
	body := &respWriter{proto: w.proto}
	sub := &call{s: c.s, cl: c.cl, args: c.args, ctx: c.ctx, e: c.e, w: w, tx: c.tx, held: true, running: true}
	if !sub.stream(r.key, func(st *collection.Stream) bool {
		g := st.Group(x.gname)
		if blocked && g == nil {
			errw("NOGROUP the consumer group this client was blocked on no longer exists")
			return false
		}
		if !st.Exists() || g == nil {
			errw(fmt.Sprintf("NOGROUP No such key '%s' or consumer group '%s' in XREADGROUP with GROUP option", r.key, x.gname))
			return false
		}
		now := keyspace.NowMs()
		if !r.newOnly {
			// History: the consumer's own pending entries from r.id.
			cons, isNew := st.CreateConsumer(g, x.cname, now)
			if isNew {
				sub.notify(pubsub.Stream, "xgroup-createconsumer", sub.cl.db, r.key)
			}
			st.Seen(cons, now)
			var es []collection.StreamEntry
			from, more := r.id.Next()
			if !more {
				from = collection.MaxStreamID
			}
			err := st.PendingRange(g, from, collection.MaxStreamID, cons, func(p collection.Pending) (bool, error) {
				f, found, err := st.Get(p.ID)
				if err != nil {
					return false, err
				}
				e := collection.StreamEntry{ID: p.ID}
				if found {
					e.Fields = f
					old := p
					p.DeliveryTime, p.Count = now, p.Count+1
					st.SetPending(g, p, old, true)
				}
				es = append(es, e)
				return x.count == 0 || int64(len(es)) < x.count, nil
			})
			if err != nil {
				errw(errorReply(err))
				return false
			}
			keyHeader(body, r.key)
			writeEntries(body, es)
			got = true
			return true
		}
		start, more := g.LastID.Next()
		if !more {
			return true
		}
		es, err := st.Range(start, collection.MaxStreamID, int(x.count), false)
		if err != nil {
			errw(errorReply(err))
			return false
		}
		if len(es) == 0 {
			return true
		}
		cons, isNew := st.CreateConsumer(g, x.cname, now)
		if isNew {
			sub.notify(pubsub.Stream, "xgroup-createconsumer", sub.cl.db, r.key)
		}
		st.Seen(cons, now)
		for _, e := range es {
			st.Delivered(g, e.ID)
			if x.noack {
				continue
			}
			old, had, err := st.PendingEntry(g, e.ID)
			if err != nil {
				errw(errorReply(err))
				return false
			}
			st.SetPending(g, collection.Pending{ID: e.ID, Consumer: cons, DeliveryTime: now, Count: 1}, old, had)
		}
		keyHeader(body, r.key)
		writeEntries(body, es)
		got = true
		return true
	}) {
		return false, false
	}
	w.send(body)
	return got, ok
}

// cmdXAck: XACK key group id [id ...]
func cmdXAck(c *call) {
	ids, ok := c.streamIDs(c.args[3:])
	if !ok {
		return
	}
	var n int64
	if !c.stream(c.args[1], func(st *collection.Stream) bool {
		g := st.Group(c.args[2])
		if g == nil {
			return true
		}
		for _, id := range ids {
			acked, err := st.Ack(g, id)
			if err != nil {
				c.fail(err)
				return false
			}
			if acked {
				n++
			}
		}
		return true
	}) {
		return
	}
	c.w.WriteInt64(n)
}

// cmdXPending: XPENDING key group [[IDLE min-idle] start end count [consumer]]
func cmdXPending(c *call) {
	args := c.args
	extended := len(args) > 3
	var minIdle int64
	var start, end collection.StreamID
	var count int64
	var consName []byte
	if extended {
		i := 3
		if upper(args[i]) == "IDLE" {
			if len(args) < 8 {
				c.syntaxError()
				return
			}
			n, err := parseInt(args[i+1])
			if err != nil {
				c.error(errNotInt)
				return
			}
			minIdle = n
			i += 2
		}
		if len(args)-i < 3 || len(args)-i > 4 {
			c.syntaxError()
			return
		}
		var ok bool
		if start, ok = c.rangeID(args[i], 0, true); !ok {
			return
		}
		if end, ok = c.rangeID(args[i+1], math.MaxUint64, false); !ok {
			return
		}
		n, err := parseInt(args[i+2])
		if err != nil {
			c.error(errNotInt)
			return
		}
		count = max(n, 0)
		if len(args)-i == 4 {
			consName = args[i+3]
		}
	}
	out := &respWriter{proto: c.w.proto}
	if !c.stream(args[1], func(st *collection.Stream) bool {
		var g *collection.StreamGroup
		if st.Exists() {
			g = st.Group(args[2])
		}
		if g == nil {
			c.error(fmt.Sprintf("NOGROUP No such key '%s' or consumer group '%s'", args[1], args[2]))
			return false
		}
		if !extended {
			if g.Pending == 0 {
				out.WriteArray(4)
				out.WriteInt64(0)
				out.WriteNull()
				out.WriteNull()
				out.WriteNullArray()
				return true
			}
			var first, last collection.StreamID
			seen := false
			err := st.PendingRange(g, collection.StreamID{}, collection.MaxStreamID, nil, func(p collection.Pending) (bool, error) {
				if !seen {
					first, seen = p.ID, true
				}
				last = p.ID
				return true, nil
			})
			if err != nil {
				c.fail(err)
				return false
			}
			w := 0
			for _, cons := range g.Consumers {
				if cons.Pending > 0 {
					w++
				}
			}
			out.WriteArray(4)
			out.WriteInt64(g.Pending)
			out.WriteBulkString(first.String())
			out.WriteBulkString(last.String())
			out.WriteArray(w)
			for _, cons := range g.Consumers {
				if cons.Pending > 0 {
					out.WriteArray(2)
					out.WriteBulk(cons.Name)
					out.WriteBulkString(strconv.FormatInt(cons.Pending, 10))
				}
			}
			return true
		}
		var cons *collection.StreamConsumer
		if consName != nil {
			if cons = g.Consumer(consName); cons == nil {
				out.WriteArray(0)
				return true
			}
		}
		now := keyspace.NowMs()
		var ps []collection.Pending
		if count > 0 {
			err := st.PendingRange(g, start, end, cons, func(p collection.Pending) (bool, error) {
				if minIdle > 0 && now-p.DeliveryTime < minIdle {
					return true, nil
				}
				ps = append(ps, p)
				return int64(len(ps)) < count, nil
			})
			if err != nil {
				c.fail(err)
				return false
			}
		}
		out.WriteArray(len(ps))
		for _, p := range ps {
			out.WriteArray(4)
			out.WriteBulkString(p.ID.String())
			out.WriteBulk(p.Consumer.Name)
			out.WriteInt64(max(now-p.DeliveryTime, 0))
			out.WriteInt64(p.Count)
		}
		return true
	}) {
		return
	}
	c.w.send(out)
}

// claimTo gives pending entry p of g to cons (XCLAIM and XAUTOCLAIM):
// the delivery time at, and the count increased unless justID.
func claimTo(st *collection.Stream, g *collection.StreamGroup, p collection.Pending, had bool, cons *collection.StreamConsumer, at, retry int64, justID bool) {
	np := p
	np.Consumer, np.DeliveryTime = cons, at
	if retry >= 0 {
		np.Count = retry
	} else if !justID {
		np.Count++
	}
	st.SetPending(g, np, p, had)
}

// cmdXClaim: XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME ms] [RETRYCOUNT n] [FORCE] [JUSTID] [LASTID id]
func cmdXClaim(c *call) {
	args := c.args
	minIdle, err := parseInt(args[4])
	if err != nil {
		c.error("ERR Invalid min-idle-time argument for XCLAIM")
		return
	}
	minIdle = max(minIdle, 0)
	var ids []collection.StreamID
	j := 5
	for ; j < len(args); j++ {
		id, ok := parseStreamID(args[j], 0, true)
		if !ok {
			break
		}
		ids = append(ids, id)
	}
	now := keyspace.NowMs()
	deliveryTime, retry := int64(-1), int64(-1)
	force, justID := false, false
	var lastID collection.StreamID
	hasLast := false
	for ; j < len(args); j++ {
		more := len(args) - 1 - j
		switch o := upper(args[j]); {
		case o == "FORCE":
			force = true
		case o == "JUSTID":
			justID = true
		case o == "IDLE" && more > 0:
			n, err := parseInt(args[j+1])
			if err != nil {
				c.error(errNotInt)
				return
			}
			deliveryTime = now - n
			j++
		case o == "TIME" && more > 0:
			n, err := parseInt(args[j+1])
			if err != nil {
				c.error(errNotInt)
				return
			}
			deliveryTime = n
			j++
		case o == "RETRYCOUNT" && more > 0:
			n, err := parseInt(args[j+1])
			if err != nil {
				c.error(errNotInt)
				return
			}
			retry = n
			j++
		case o == "LASTID" && more > 0:
			var ok bool
			if lastID, ok = c.streamID(args[j+1], 0, true); !ok {
				return
			}
			hasLast = true
			j++
		default:
			c.error(fmt.Sprintf("ERR Unrecognized XCLAIM option '%s'", args[j]))
			return
		}
	}
	if deliveryTime < 0 || deliveryTime > now {
		// Redis takes now for a time in the future or before the epoch.
		deliveryTime = now
	}
	out := &respWriter{proto: c.w.proto}
	if !c.stream(args[1], func(st *collection.Stream) bool {
		var g *collection.StreamGroup
		if st.Exists() {
			g = st.Group(args[2])
		}
		if g == nil {
			c.error(fmt.Sprintf("NOGROUP No such key '%s' or consumer group '%s'", args[1], args[2]))
			return false
		}
		if hasLast && lastID.Compare(g.LastID) > 0 {
			g.LastID = lastID
			st.SetGroupID(g, lastID, g.EntriesRead)
		}
		var claimed []collection.StreamEntry
		var cons *collection.StreamConsumer
		for _, id := range ids {
			p, had, err := st.PendingEntry(g, id)
			if err != nil {
				c.fail(err)
				return false
			}
			f, exists, err := st.Get(id)
			if err != nil {
				c.fail(err)
				return false
			}
			if !had {
				if !force || !exists {
					continue
				}
			}
			if had && !exists {
				// The entry was deleted: its pending entry goes too.
				if _, err := st.Ack(g, id); err != nil {
					c.fail(err)
					return false
				}
				continue
			}
			if had && minIdle > 0 && now-p.DeliveryTime < minIdle {
				continue
			}
			if cons == nil {
				var isNew bool
				if cons, isNew = st.CreateConsumer(g, args[3], now); isNew {
					c.notify(pubsub.Stream, "xgroup-createconsumer", c.cl.db, args[1])
				}
				st.Seen(cons, now)
			}
			if !had {
				// FORCE: a new pending entry, delivered once (Redis's
				// streamCreateNACK), then counted as claims are.
				p = collection.Pending{ID: id, Count: 1}
			}
			claimTo(st, g, p, had, cons, deliveryTime, retry, justID)
			e := collection.StreamEntry{ID: id, Fields: f}
			claimed = append(claimed, e)
		}
		out.WriteArray(len(claimed))
		for _, e := range claimed {
			if justID {
				out.WriteBulkString(e.ID.String())
			} else {
				writeEntry(out, e)
			}
		}
		return true
	}) {
		return
	}
	c.w.send(out)
}

// cmdXAutoClaim: XAUTOCLAIM key group consumer min-idle-time start [COUNT n] [JUSTID]
func cmdXAutoClaim(c *call) {
	args := c.args
	minIdle, err := parseInt(args[4])
	if err != nil {
		c.error("ERR Invalid min-idle-time argument for XAUTOCLAIM")
		return
	}
	minIdle = max(minIdle, 0)
	start, ok := c.rangeID(args[5], 0, true)
	if !ok {
		return
	}
	count, justID := int64(100), false
	for j := 6; j < len(args); j++ {
		switch o := upper(args[j]); {
		case o == "COUNT" && j+1 < len(args):
			n, err := parseInt(args[j+1])
			if err != nil || n < 1 || n > math.MaxInt64/10 {
				c.error("ERR COUNT must be > 0")
				return
			}
			count = n
			j++
		case o == "JUSTID":
			justID = true
		default:
			c.syntaxError()
			return
		}
	}
	out := &respWriter{proto: c.w.proto}
	if !c.stream(args[1], func(st *collection.Stream) bool {
		var g *collection.StreamGroup
		if st.Exists() {
			g = st.Group(args[2])
		}
		if g == nil {
			c.error(fmt.Sprintf("NOGROUP No such key '%s' or consumer group '%s'", args[1], args[2]))
			return false
		}
		now := keyspace.NowMs()
		var claimed []collection.StreamEntry
		var deleted []collection.StreamID
		var cons *collection.StreamConsumer
		next := collection.StreamID{}
		// As Redis: at most count entries claimed or dropped, after at
		// most 10 × count visited; next is the entry after the last one
		// visited.
		left, attempts := count, count*10
		err := st.PendingRange(g, start, collection.MaxStreamID, nil, func(p collection.Pending) (bool, error) {
			if attempts == 0 || left == 0 {
				next = p.ID
				return false, nil
			}
			attempts--
			f, exists, err := st.Get(p.ID)
			if err != nil {
				return false, err
			}
			if !exists {
				if _, err := st.Ack(g, p.ID); err != nil {
					return false, err
				}
				deleted = append(deleted, p.ID)
				left--
				return true, nil
			}
			if minIdle > 0 && now-p.DeliveryTime < minIdle {
				return true, nil
			}
			if cons == nil {
				var isNew bool
				if cons, isNew = st.CreateConsumer(g, args[3], now); isNew {
					c.notify(pubsub.Stream, "xgroup-createconsumer", c.cl.db, args[1])
				}
				st.Seen(cons, now)
			}
			claimTo(st, g, p, true, cons, now, -1, justID)
			claimed = append(claimed, collection.StreamEntry{ID: p.ID, Fields: f})
			left--
			return true, nil
		})
		if err != nil {
			c.fail(err)
			return false
		}
		out.WriteArray(3)
		out.WriteBulkString(next.String())
		out.WriteArray(len(claimed))
		for _, e := range claimed {
			if justID {
				out.WriteBulkString(e.ID.String())
			} else {
				writeEntry(out, e)
			}
		}
		out.WriteArray(len(deleted))
		for _, id := range deleted {
			out.WriteBulkString(id.String())
		}
		return true
	}) {
		return
	}
	c.w.send(out)
}

var xgroupHelp = []string{
	"XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"CREATE <key> <groupname> <id|$> [option]",
	"    Create a new consumer group. Options are:",
	"    * MKSTREAM",
	"      Create the empty stream if it does not exist.",
	"    * ENTRIESREAD entries_read",
	"      Set the group's entries_read counter (internal use).",
	"CREATECONSUMER <key> <groupname> <consumer>",
	"    Create a new consumer in the specified group.",
	"DELCONSUMER <key> <groupname> <consumer>",
	"    Remove the specified consumer.",
	"DESTROY <key> <groupname>",
	"    Remove the specified group.",
	"SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
	"    Set the current group ID and entries_read counter.",
	"HELP",
	"    Print this help.",
}

var xinfoHelp = []string{
	"XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"CONSUMERS <key> <groupname>",
	"    Show consumers of <groupname>.",
	"GROUPS <key>",
	"    Show the stream consumer groups.",
	"STREAM <key> [FULL [COUNT <count>]",
	"    Show information about the stream.",
	"HELP",
	"    Print this help.",
}

func (c *call) writeHelp(lines []string) {
	c.w.WriteArray(len(lines))
	for _, l := range lines {
		c.w.WriteString(l)
	}
}

// subError replies to a subcommand of XGROUP or XINFO that is unknown
// or has the wrong number of arguments (known says which), as Redis 7.
func (c *call) subError(known bool) {
	if known {
		c.arityError(c.e.name + "|" + strings.ToLower(string(c.args[1])))
		return
	}
	c.error(fmt.Sprintf("ERR unknown subcommand '%s'. Try %s HELP.", c.args[1], strings.ToUpper(c.e.name)))
}

// cmdXGroup serves XGROUP's subcommands.
func cmdXGroup(c *call) {
	args := c.args
	sub := upper(args[1])
	arity := map[string][2]int{"CREATE": {5, 8}, "SETID": {5, 7}, "DESTROY": {4, 4}, "CREATECONSUMER": {5, 5}, "DELCONSUMER": {5, 5}, "HELP": {2, 2}}
	a, known := arity[sub]
	if !known || len(args) < a[0] || len(args) > a[1] {
		c.subError(known)
		return
	}
	if sub == "HELP" {
		c.writeHelp(xgroupHelp)
		return
	}
	key, gname := args[2], args[3]
	mkstream := false
	entriesRead := int64(-1)
	var id collection.StreamID
	dollar := false
	if sub == "CREATE" || sub == "SETID" {
		for i := 5; i < len(args); i++ {
			switch o := upper(args[i]); {
			case sub == "CREATE" && o == "MKSTREAM":
				mkstream = true
			case o == "ENTRIESREAD" && i+1 < len(args):
				n, err := parseInt(args[i+1])
				if err != nil {
					c.error(errNotInt)
					return
				}
				if n < 0 && n != -1 {
					c.error("ERR value for ENTRIESREAD must be positive or -1")
					return
				}
				entriesRead = n
				i++
			default:
				c.syntaxError()
				return
			}
		}
		if string(args[4]) == "$" {
			dollar = true
		} else {
			var ok bool
			if id, ok = c.streamID(args[4], 0, false); !ok {
				return
			}
		}
	}
	var reply func()
	if !c.stream(key, func(st *collection.Stream) bool {
		if !st.Exists() {
			if sub != "CREATE" || !mkstream {
				c.error(errStreamExists)
				return false
			}
			st.Create()
			c.notify(pubsub.New, "new", c.cl.db, key)
		}
		if dollar {
			id = st.LastID
		}
		switch sub {
		case "CREATE":
			if !st.CreateGroup(gname, id, entriesRead) {
				c.error(errBusyGroup)
				return false
			}
			c.notify(pubsub.Stream, "xgroup-create", c.cl.db, key)
			reply = c.ok
			return true
		}
		g := st.Group(gname)
		if g == nil && sub == "DESTROY" {
			reply = func() { c.w.WriteInt(0) }
			return true
		}
		if g == nil {
			c.error(fmt.Sprintf("NOGROUP No such consumer group '%s' for key name '%s'", gname, key))
			return false
		}
		switch sub {
		case "SETID":
			st.SetGroupID(g, id, entriesRead)
			c.notify(pubsub.Stream, "xgroup-setid", c.cl.db, key)
			reply = c.ok
		case "DESTROY":
			st.DestroyGroup(gname)
			c.notify(pubsub.Stream, "xgroup-destroy", c.cl.db, key)
			reply = func() { c.w.WriteInt(1) }
		case "CREATECONSUMER":
			_, isNew := st.CreateConsumer(g, args[4], keyspace.NowMs())
			if isNew {
				c.notify(pubsub.Stream, "xgroup-createconsumer", c.cl.db, key)
			}
			reply = func() { c.w.WriteInt(b2i(isNew)) }
		case "DELCONSUMER":
			n := st.DeleteConsumer(g, args[4])
			if n >= 0 {
				c.notify(pubsub.Stream, "xgroup-delconsumer", c.cl.db, key)
			}
			reply = func() { c.w.WriteInt64(max(n, 0)) }
		}
		return true
	}) {
		return
	}
	reply()
}

// cmdXInfo serves XINFO's subcommands.
func cmdXInfo(c *call) {
	args := c.args
	sub := upper(args[1])
	arity := map[string][2]int{"STREAM": {3, 6}, "GROUPS": {3, 3}, "CONSUMERS": {4, 4}, "HELP": {2, 2}}
	a, known := arity[sub]
	if !known || len(args) < a[0] || len(args) > a[1] {
		c.subError(known)
		return
	}
	if sub == "HELP" {
		c.writeHelp(xinfoHelp)
		return
	}
	full, count := false, int64(10)
	if sub == "STREAM" && len(args) > 3 {
		if upper(args[3]) != "FULL" {
			c.syntaxError()
			return
		}
		full = true
		if len(args) > 4 {
			if len(args) != 6 || upper(args[4]) != "COUNT" {
				c.syntaxError()
				return
			}
			n, err := parseInt(args[5])
			if err != nil {
				c.error(errNotInt)
				return
			}
			count = max(n, 0)
		}
	}
	out := &respWriter{proto: c.w.proto}
	if !c.stream(args[2], func(st *collection.Stream) bool {
		if !st.Exists() {
			c.error("ERR no such key")
			return false
		}
		now := keyspace.NowMs()
		switch sub {
		case "GROUPS":
			out.WriteArray(len(st.Groups))
			for _, g := range st.Groups {
				out.WriteMap(6)
				out.WriteBulkString("name")
				out.WriteBulk(g.Name)
				out.WriteBulkString("consumers")
				out.WriteInt(len(g.Consumers))
				out.WriteBulkString("pending")
				out.WriteInt64(g.Pending)
				out.WriteBulkString("last-delivered-id")
				out.WriteBulkString(g.LastID.String())
				writeGroupCounters(out, st, g)
			}
		case "CONSUMERS":
			g := st.Group(args[3])
			if g == nil {
				c.error(fmt.Sprintf("NOGROUP No such consumer group '%s' for key name '%s'", args[3], args[2]))
				return false
			}
			out.WriteArray(len(g.Consumers))
			for _, cons := range g.Consumers {
				out.WriteMap(3)
				out.WriteBulkString("name")
				out.WriteBulk(cons.Name)
				out.WriteBulkString("pending")
				out.WriteInt64(cons.Pending)
				out.WriteBulkString("idle")
				out.WriteInt64(max(now-cons.SeenTime, 0))
			}
		case "STREAM":
			return c.xinfoStream(out, st, full, count)
		}
		return true
	}) {
		return
	}
	c.w.send(out)
}

// writeGroupCounters writes a group's entries-read and lag.
func writeGroupCounters(out *respWriter, st *collection.Stream, g *collection.StreamGroup) {
	out.WriteBulkString("entries-read")
	if g.EntriesRead >= 0 {
		out.WriteInt64(g.EntriesRead)
	} else {
		out.WriteNull()
	}
	out.WriteBulkString("lag")
	if lag, ok := st.Lag(g); ok {
		out.WriteInt64(lag)
	} else {
		out.WriteNull()
	}
}

func (c *call) xinfoStream(out *respWriter, st *collection.Stream, full bool, count int64) bool {
	fail := func(err error) bool { c.fail(err); return false }
	n := 10
	if full {
		n = 9
	}
	out.WriteMap(n)
	out.WriteBulkString("length")
	out.WriteInt64(st.Length)
	// Redis's radix tree: one key per node (an estimate here).
	out.WriteBulkString("radix-tree-keys")
	nodes := int64(0)
	if st.Length > 0 {
		nodes = 1 + (st.Length-1)/max(c.s.streamLim().NodeEntries, 1)
	}
	out.WriteInt64(nodes)
	out.WriteBulkString("radix-tree-nodes")
	out.WriteInt64(nodes + 1)
	out.WriteBulkString("last-generated-id")
	out.WriteBulkString(st.LastID.String())
	out.WriteBulkString("max-deleted-entry-id")
	out.WriteBulkString(st.MaxDeleted.String())
	out.WriteBulkString("entries-added")
	out.WriteInt64(st.EntriesAdded)
	out.WriteBulkString("recorded-first-entry-id")
	out.WriteBulkString(st.FirstID.String())
	if !full {
		out.WriteBulkString("groups")
		out.WriteInt(len(st.Groups))
		for _, rev := range []bool{false, true} {
			if rev {
				out.WriteBulkString("last-entry")
			} else {
				out.WriteBulkString("first-entry")
			}
			es, err := st.Range(collection.StreamID{}, collection.MaxStreamID, 1, rev)
			if err != nil {
				return fail(err)
			}
			if len(es) == 0 {
				out.WriteNull()
			} else {
				writeEntry(out, es[0])
			}
		}
		return true
	}
	out.WriteBulkString("entries")
	es, err := st.Range(collection.StreamID{}, collection.MaxStreamID, int(count), false)
	if err != nil {
		return fail(err)
	}
	writeEntries(out, es)
	out.WriteBulkString("groups")
	out.WriteArray(len(st.Groups))
	for _, g := range st.Groups {
		out.WriteMap(7)
		out.WriteBulkString("name")
		out.WriteBulk(g.Name)
		out.WriteBulkString("last-delivered-id")
		out.WriteBulkString(g.LastID.String())
		writeGroupCounters(out, st, g)
		out.WriteBulkString("pel-count")
		out.WriteInt64(g.Pending)
		var ps []collection.Pending
		collect := func(cons *collection.StreamConsumer) error {
			ps = ps[:0]
			return st.PendingRange(g, collection.StreamID{}, collection.MaxStreamID, cons, func(p collection.Pending) (bool, error) {
				ps = append(ps, p)
				return count == 0 || int64(len(ps)) < count, nil
			})
		}
		if err := collect(nil); err != nil {
			return fail(err)
		}
		out.WriteBulkString("pending")
		out.WriteArray(len(ps))
		for _, p := range ps {
			out.WriteArray(4)
			out.WriteBulkString(p.ID.String())
			out.WriteBulk(p.Consumer.Name)
			out.WriteInt64(p.DeliveryTime)
			out.WriteInt64(p.Count)
		}
		out.WriteBulkString("consumers")
		out.WriteArray(len(g.Consumers))
		for _, cons := range g.Consumers {
			if err := collect(cons); err != nil {
				return fail(err)
			}
			out.WriteMap(4)
			out.WriteBulkString("name")
			out.WriteBulk(cons.Name)
			out.WriteBulkString("seen-time")
			out.WriteInt64(cons.SeenTime)
			out.WriteBulkString("pel-count")
			out.WriteInt64(cons.Pending)
			out.WriteBulkString("pending")
			out.WriteArray(len(ps))
			for _, p := range ps {
				out.WriteArray(3)
				out.WriteBulkString(p.ID.String())
				out.WriteInt64(p.DeliveryTime)
				out.WriteInt64(p.Count)
			}
		}
	}
	return true
}
