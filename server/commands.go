package server

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"
)

// command is one row of the command table: how to run it and what
// COMMAND INFO / COMMAND DOCS say of it.
type command struct {
	name  string // lower case, as COMMAND reports it
	arity int    // Redis's: n means exactly n words, -n at least n
	flags []string
	// first, last and step locate the key arguments (COMMAND INFO).
	first, last, step int
	acl               []string // ACL categories, without '@'
	group             string
	since             string
	summary           string
	complexity        string
	args              []arg
	run               func(*call)
	// noTx: refused inside MULTI (its effect is not one of the
	// transaction's writes).
	noTx bool
	// exclusive: takes the transaction lock exclusively itself (EXEC,
	// SWAPDB), so serveRESP does not take it shared.
	exclusive bool
}

// arg documents one argument for COMMAND DOCS (redis-cli's hints).
type arg struct {
	name, typ, token   string
	optional, multiple bool
	sub                []arg
}

// entry is a command with its call counter (INFO commandstats).
type entry struct {
	*command
	// container: Redis's table gives the command subcommands, so that
	// CLIENT LIST and the latency histograms name it with one.
	container   bool
	calls, usec atomic.Int64
	// rejected: refused before running (arity, NOAUTH, NOPERM, ...);
	// failed: ran and replied with an error (INFO commandstats).
	rejected, failed atomic.Int64
}

func (e *entry) admin() bool       { return slices.Contains(e.flags, "admin") }
func (e *entry) write() bool       { return slices.Contains(e.flags, "write") }
func (e *entry) skipMonitor() bool { return slices.Contains(e.flags, "skip_monitor") }

// Argument builders for the table.
func keyArg(name string) arg         { return arg{name: name, typ: "key"} }
func strArg(name string) arg         { return arg{name: name, typ: "string"} }
func intArg(name string) arg         { return arg{name: name, typ: "integer"} }
func token(tok string) arg           { return arg{name: strings.ToLower(tok), typ: "pure-token", token: tok} }
func optional(a arg) arg             { a.optional = true; return a }
func multiple(a arg) arg             { a.multiple = true; return a }
func tokenArg(tok string, a arg) arg { a.token = tok; return a }
func oneof(name string, as ...arg) arg {
	return arg{name: name, typ: "oneof", sub: as}
}
func block(name string, as ...arg) arg {
	return arg{name: name, typ: "block", sub: as}
}

// commands is the command table. To add a command, add a row; COMMAND,
// COMMAND DOCS and INFO commandstats pick it up.
var commands = []*command{
	// Connection.
	{name: "ping", arity: -1, flags: []string{"fast"}, acl: []string{"fast", "connection"}, group: "connection", since: "1.0.0",
		summary: "Returns the server's liveliness response.", complexity: "O(1)",
		args: []arg{optional(strArg("message"))}, run: cmdPing},
	{name: "echo", arity: 2, flags: []string{"fast"}, acl: []string{"fast", "connection"}, group: "connection", since: "1.0.0",
		summary: "Returns the given string.", complexity: "O(1)", args: []arg{strArg("message")}, run: cmdEcho},
	{name: "hello", arity: -1, flags: []string{"noscript", "loading", "stale", "fast", "no_auth", "allow_busy"}, acl: []string{"fast", "connection"},
		group: "connection", since: "6.0.0", complexity: "O(1)",
		summary: "Handshakes with the server: HELLO 3 switches the connection to RESP3, HELLO 2 to RESP2.",
		args: []arg{optional(block("arguments", intArg("protover"),
			optional(tokenArg("AUTH", block("username-password", strArg("username"), strArg("password")))),
			optional(tokenArg("SETNAME", strArg("clientname")))))}, run: cmdHello},
	{name: "auth", arity: -2, flags: []string{"noscript", "loading", "stale", "fast", "no_auth", "allow_busy"}, acl: []string{"fast", "connection"},
		group: "connection", since: "1.0.0", complexity: "O(N) where N is the number of passwords defined for the user",
		summary: "Authenticates the connection as the default user (requirepass) or an ACL user.",
		args:    []arg{optional(strArg("username")), strArg("password")}, run: cmdAuth},
	{name: "client", arity: -2, acl: []string{"slow", "connection"}, group: "connection", since: "2.4.0",
		summary:    "A container for client connection commands: ID, GETNAME, SETNAME, SETINFO, INFO, LIST, KILL, PAUSE, UNPAUSE, REPLY, NO-EVICT, NO-TOUCH.",
		complexity: "Depends on subcommand.", args: []arg{strArg("subcommand"), optional(multiple(strArg("arg")))}, run: cmdClient},
	{name: "select", arity: 2, flags: []string{"loading", "stale", "fast"}, acl: []string{"keyspace", "fast"}, group: "connection", since: "1.0.0",
		summary: "Changes the selected database.", complexity: "O(1)",
		args: []arg{intArg("index")}, run: cmdSelect},
	{name: "quit", arity: -1, flags: []string{"allow_busy", "noscript", "loading", "stale", "fast", "no_auth"}, acl: []string{"fast", "connection"},
		group: "connection", since: "1.0.0", summary: "Closes the connection.", complexity: "O(1)", run: cmdQuit},
	{name: "reset", arity: 1, flags: []string{"noscript", "loading", "stale", "fast", "no_auth", "allow_busy"}, acl: []string{"fast", "connection"},
		group: "connection", since: "6.2.0", summary: "Resets the connection: no transaction, no watches, database 0, RESP2, no name.", complexity: "O(1)", run: cmdReset},
	{name: "readonly", arity: 1, flags: []string{"loading", "stale", "fast"}, acl: []string{"fast", "connection"}, group: "cluster", since: "3.0.0",
		summary: "Accepted (OK) so that cluster-aware clients connect; there is no cluster.", complexity: "O(1)", run: cmdReadonly},
	{name: "readwrite", arity: 1, flags: []string{"loading", "stale", "fast"}, acl: []string{"fast", "connection"}, group: "cluster", since: "3.0.0",
		summary: "Accepted (OK); there is no cluster.", complexity: "O(1)", run: cmdReadonly},

	// Strings.
	rcmd("get", 2, "string", "1.0.0", "Returns the value of a key (nil if it does not exist).", cmdGet, keyArg("key")),
	wcmd("set", -3, "string", "1.0.0", "Sets the value of a key, with NX, XX, GET and an expiry (EX, PX, EXAT, PXAT, KEEPTTL).", cmdSet,
		keyArg("key"), strArg("value"), optional(oneof("condition", token("NX"), token("XX"))), optional(token("GET")),
		optional(oneof("expiration", tokenArg("EX", intArg("seconds")), tokenArg("PX", intArg("milliseconds")),
			tokenArg("EXAT", intArg("unix-time-seconds")), tokenArg("PXAT", intArg("unix-time-milliseconds")), token("KEEPTTL")))),
	wcmd("setnx", 3, "string", "1.0.0", "Sets the value of a key only when it does not exist: 1 if set, 0 if not.", cmdSetNX, keyArg("key"), strArg("value")),
	wcmd("setex", 4, "string", "2.0.0", "Sets the value and expiration time (seconds) of a key.", cmdSetEx, keyArg("key"), intArg("seconds"), strArg("value")),
	wcmd("psetex", 4, "string", "2.6.0", "Sets the value and expiration time (milliseconds) of a key.", cmdSetEx, keyArg("key"), intArg("milliseconds"), strArg("value")),
	wcmd("getex", -2, "string", "6.2.0", "Returns the value of a key after optionally setting its expiration time.", cmdGetEx, keyArg("key"),
		optional(oneof("expiration", tokenArg("EX", intArg("seconds")), tokenArg("PX", intArg("milliseconds")),
			tokenArg("EXAT", intArg("unix-time-seconds")), tokenArg("PXAT", intArg("unix-time-milliseconds")), token("PERSIST")))),
	wcmd("getset", 3, "string", "1.0.0", "Returns the previous value of a key after setting it to a new value (and removing its expiry).", cmdGetSet, keyArg("key"), strArg("value")),
	wcmd("getdel", 2, "string", "6.2.0", "Returns the value of a key after deleting the key.", cmdGetDel, keyArg("key")),
	keyPos(rcmd("mget", -2, "string", "1.0.0", "Returns the values of one or more keys.", cmdMget, multiple(keyArg("key"))), -1, 1),
	keyPos(wcmd("mset", -3, "string", "1.0.1", "Sets the values of one or more keys (concurrently; atomic for readers only inside MULTI).", cmdMset,
		multiple(block("data", keyArg("key"), strArg("value")))), -1, 2),
	keyPos(wcmd("msetnx", -3, "string", "1.0.1", "Sets the values of one or more keys only when none of them exists: 1 if set, 0 if not.", cmdMset,
		multiple(block("data", keyArg("key"), strArg("value")))), -1, 2),
	rcmd("strlen", 2, "string", "2.2.0", "Returns the length of a value (reads its header, not the value).", cmdStrlen, keyArg("key")),
	wcmd("append", 3, "string", "2.0.0", "Appends a string to the value of a key (the array reads, edits and stores the value: docs/partial-io.md).", cmdAppend, keyArg("key"), strArg("value")),
	rcmd("getrange", 4, "string", "2.4.0", "Returns a substring of the value of a key (reads only what covers it: docs/partial-io.md).", cmdGetRange, keyArg("key"), intArg("start"), intArg("end")),
	rcmd("substr", 4, "string", "1.0.0", "Returns a substring of the value of a key (GETRANGE).", cmdGetRange, keyArg("key"), intArg("start"), intArg("end")),
	wcmd("setrange", 4, "string", "2.2.0", "Overwrites part of a value at an offset (the array reads, edits and stores the value).", cmdSetRange, keyArg("key"), intArg("offset"), strArg("value")),
	wcmd("incr", 2, "string", "1.0.0", "Increments the integer value of a key by one.", cmdIncr, keyArg("key")),
	wcmd("decr", 2, "string", "1.0.0", "Decrements the integer value of a key by one.", cmdIncr, keyArg("key")),
	wcmd("incrby", 3, "string", "1.0.0", "Increments the integer value of a key by a number.", cmdIncr, keyArg("key"), intArg("increment")),
	wcmd("decrby", 3, "string", "1.0.0", "Decrements the integer value of a key by a number.", cmdIncr, keyArg("key"), intArg("decrement")),
	wcmd("incrbyfloat", 3, "string", "2.6.0", "Increments the floating point value of a key by a number.", cmdIncrByFloat, keyArg("key"), arg{name: "increment", typ: "double"}),
	wcmd("setbit", 4, "bitmap", "2.2.0", "Sets or clears the bit at offset of the value (written in place: docs/partial-io.md).", cmdSetBit, keyArg("key"), intArg("offset"), intArg("value")),
	rcmd("getbit", 3, "bitmap", "2.2.0", "Returns the bit at offset of the value (reads its byte).", cmdGetBit, keyArg("key"), intArg("offset")),
	rcmd("bitcount", -2, "bitmap", "2.6.0", "Counts the set bits of a value, optionally in a range of bytes or bits.", cmdBitCount, keyArg("key"),
		optional(block("range", intArg("start"), intArg("end"), optional(oneof("unit", token("BYTE"), token("BIT")))))),
	keyPos(rcmd("lcs", -3, "string", "7.0.0", "Finds the longest common subsequence of two values.", cmdLCS,
		keyArg("key1"), keyArg("key2"), optional(token("LEN")), optional(token("IDX")),
		optional(tokenArg("MINMATCHLEN", intArg("min-match-len"))), optional(token("WITHMATCHLEN"))), 2, 1),

	// Hashes (hash.go; how they live on the array: package collection).
	wcmd("hset", -4, "hash", "2.0.0", "Sets fields of a hash; returns how many were new.", cmdHSet, keyArg("key"), multiple(block("data", strArg("field"), strArg("value")))),
	wcmd("hmset", -4, "hash", "2.0.0", "Sets fields of a hash.", cmdHSet, keyArg("key"), multiple(block("data", strArg("field"), strArg("value")))),
	wcmd("hsetnx", 4, "hash", "2.0.0", "Sets a field of a hash only when it does not exist.", cmdHSetNX, keyArg("key"), strArg("field"), strArg("value")),
	rcmd("hget", 3, "hash", "2.0.0", "Returns the value of a field of a hash.", cmdHGet, keyArg("key"), strArg("field")),
	rcmd("hmget", -3, "hash", "2.0.0", "Returns the values of fields of a hash.", cmdHMGet, keyArg("key"), multiple(strArg("field"))),
	wcmd("hdel", -3, "hash", "2.0.0", "Deletes fields of a hash; returns how many existed.", cmdHDel, keyArg("key"), multiple(strArg("field"))),
	rcmd("hlen", 2, "hash", "2.0.0", "Returns the number of fields of a hash.", cmdHLen, keyArg("key")),
	rcmd("hstrlen", 3, "hash", "3.2.0", "Returns the length of the value of a field of a hash.", cmdHStrlen, keyArg("key"), strArg("field")),
	rcmd("hexists", 3, "hash", "2.0.0", "Tells whether a field of a hash exists.", cmdHStrlen, keyArg("key"), strArg("field")),
	rcmd("hgetall", 2, "hash", "2.0.0", "Returns every field of a hash and its value.", cmdHGetAll, keyArg("key")),
	rcmd("hkeys", 2, "hash", "2.0.0", "Returns every field of a hash.", cmdHGetAll, keyArg("key")),
	rcmd("hvals", 2, "hash", "2.0.0", "Returns every value of a hash.", cmdHGetAll, keyArg("key")),
	wcmd("hincrby", 4, "hash", "2.0.0", "Increments the integer value of a field of a hash.", cmdHIncrBy, keyArg("key"), strArg("field"), intArg("increment")),
	wcmd("hincrbyfloat", 4, "hash", "2.6.0", "Increments the floating point value of a field of a hash.", cmdHIncrByFloat, keyArg("key"), strArg("field"), arg{name: "increment", typ: "double"}),
	rcmd("hrandfield", -2, "hash", "6.2.0", "Returns random fields of a hash.", cmdHRandField, keyArg("key"),
		optional(block("options", intArg("count"), optional(token("WITHVALUES"))))),
	rcmd("hscan", -3, "hash", "2.8.0", "Iterates over the fields of a hash.", cmdHScan, keyArg("key"), intArg("cursor"),
		optional(tokenArg("MATCH", arg{name: "pattern", typ: "pattern"})), optional(tokenArg("COUNT", intArg("count")))),

	// Lists (list.go) and their blocking forms (blocking.go).
	wcmd("lpush", -3, "list", "1.0.0", "Prepends elements to a list; returns its length.", cmdPush, keyArg("key"), multiple(strArg("element"))),
	wcmd("rpush", -3, "list", "1.0.0", "Appends elements to a list; returns its length.", cmdPush, keyArg("key"), multiple(strArg("element"))),
	wcmd("lpushx", -3, "list", "2.2.0", "Prepends elements to a list only when it exists.", cmdPush, keyArg("key"), multiple(strArg("element"))),
	wcmd("rpushx", -3, "list", "2.2.0", "Appends elements to a list only when it exists.", cmdPush, keyArg("key"), multiple(strArg("element"))),
	wcmd("lpop", -2, "list", "1.0.0", "Removes and returns the first elements of a list.", cmdPop, keyArg("key"), optional(intArg("count"))),
	wcmd("rpop", -2, "list", "1.0.0", "Removes and returns the last elements of a list.", cmdPop, keyArg("key"), optional(intArg("count"))),
	rcmd("llen", 2, "list", "1.0.0", "Returns the length of a list.", cmdLLen, keyArg("key")),
	rcmd("lrange", 4, "list", "1.0.0", "Returns a range of elements of a list.", cmdLRange, keyArg("key"), intArg("start"), intArg("stop")),
	rcmd("lindex", 3, "list", "1.0.0", "Returns an element of a list by its index.", cmdLIndex, keyArg("key"), intArg("index")),
	wcmd("lset", 4, "list", "1.0.0", "Sets the element at an index of a list.", cmdLSet, keyArg("key"), intArg("index"), strArg("element")),
	wcmd("linsert", 5, "list", "2.2.0", "Inserts an element before or after another in a list.", cmdLInsert, keyArg("key"),
		oneof("where", token("BEFORE"), token("AFTER")), strArg("pivot"), strArg("element")),
	wcmd("lrem", 4, "list", "1.0.0", "Removes elements equal to a value from a list.", cmdLRem, keyArg("key"), intArg("count"), strArg("element")),
	wcmd("ltrim", 4, "list", "1.0.0", "Keeps only a range of elements of a list.", cmdLTrim, keyArg("key"), intArg("start"), intArg("stop")),
	rcmd("lpos", -3, "list", "6.0.6", "Returns the indexes of elements equal to a value in a list.", cmdLPos, keyArg("key"), strArg("element"),
		optional(tokenArg("RANK", intArg("rank"))), optional(tokenArg("COUNT", intArg("num-matches"))), optional(tokenArg("MAXLEN", intArg("len")))),
	keyPos(wcmd("lmove", 5, "list", "6.2.0", "Moves an element from one list to another, all or nothing.", cmdLMove, keyArg("source"), keyArg("destination"),
		oneof("wherefrom", token("LEFT"), token("RIGHT")), oneof("whereto", token("LEFT"), token("RIGHT"))), 2, 1),
	keyPos(wcmd("rpoplpush", 3, "list", "1.2.0", "Moves the last element of a list to the head of another.", cmdRPopLPush, keyArg("source"), keyArg("destination")), 2, 1),
	{name: "lmpop", arity: -4, flags: []string{"write"}, first: 2, last: -1, step: 1, acl: []string{"write", "list", "slow"}, group: "list", since: "7.0.0",
		summary: "Pops elements from the first non-empty of lists.", complexity: "O(N+M) array calls",
		args: []arg{intArg("numkeys"), multiple(keyArg("key")), oneof("where", token("LEFT"), token("RIGHT")), optional(tokenArg("COUNT", intArg("count")))}, run: cmdLMPop},
	noScript(blocking(keyPos(wcmd("blpop", -3, "list", "2.0.0", "Pops the first element of the first non-empty list, or blocks until one is pushed.", cmdBPop,
		multiple(keyArg("key")), arg{name: "timeout", typ: "double"}), -2, 1))),
	noScript(blocking(keyPos(wcmd("brpop", -3, "list", "2.0.0", "Pops the last element of the first non-empty list, or blocks until one is pushed.", cmdBPop,
		multiple(keyArg("key")), arg{name: "timeout", typ: "double"}), -2, 1))),
	noScript(blocking(keyPos(wcmd("blmove", 6, "list", "6.2.0", "LMOVE, or blocks until the source has an element.", cmdBLMove, keyArg("source"), keyArg("destination"),
		oneof("wherefrom", token("LEFT"), token("RIGHT")), oneof("whereto", token("LEFT"), token("RIGHT")), arg{name: "timeout", typ: "double"}), 2, 1))),
	noScript(blocking(keyPos(wcmd("brpoplpush", 4, "list", "2.2.0", "RPOPLPUSH, or blocks until the source has an element.", cmdBRPopLPush,
		keyArg("source"), keyArg("destination"), arg{name: "timeout", typ: "double"}), 2, 1))),
	blocking(&command{name: "blmpop", arity: -5, flags: []string{"write"}, first: 3, last: -1, step: 1, acl: []string{"write", "list", "slow"}, group: "list", since: "7.0.0",
		summary: "LMPOP, or blocks until one of the lists has an element.", complexity: "O(N+M) array calls",
		args: []arg{arg{name: "timeout", typ: "double"}, intArg("numkeys"), multiple(keyArg("key")), oneof("where", token("LEFT"), token("RIGHT")), optional(tokenArg("COUNT", intArg("count")))}, run: cmdBLMPop}),

	// Sets (set.go).
	wcmd("sadd", -3, "set", "1.0.0", "Adds members to a set; returns how many were new.", cmdSAdd, keyArg("key"), multiple(strArg("member"))),
	wcmd("srem", -3, "set", "1.0.0", "Removes members from a set; returns how many were there.", cmdSRem, keyArg("key"), multiple(strArg("member"))),
	rcmd("scard", 2, "set", "1.0.0", "Returns the number of members of a set.", cmdSCard, keyArg("key")),
	rcmd("sismember", 3, "set", "1.0.0", "Tells whether a member is in a set.", cmdSIsMember, keyArg("key"), strArg("member")),
	rcmd("smismember", -3, "set", "6.2.0", "Tells whether each member is in a set.", cmdSIsMember, keyArg("key"), multiple(strArg("member"))),
	rcmd("smembers", 2, "set", "1.0.0", "Returns every member of a set.", cmdSMembers, keyArg("key")),
	rcmd("srandmember", -2, "set", "1.0.0", "Returns random members of a set.", cmdSRandMember, keyArg("key"), optional(intArg("count"))),
	wcmd("spop", -2, "set", "1.0.0", "Removes and returns random members of a set.", cmdSPop, keyArg("key"), optional(intArg("count"))),
	keyPos(wcmd("smove", 4, "set", "1.0.0", "Moves a member from one set to another, all or nothing.", cmdSMove, keyArg("source"), keyArg("destination"), strArg("member")), 2, 1),
	keyPos(rcmd("sinter", -2, "set", "1.0.0", "Returns the intersection of sets.", cmdSetAlgebra, multiple(keyArg("key"))), -1, 1),
	keyPos(rcmd("sunion", -2, "set", "1.0.0", "Returns the union of sets.", cmdSetAlgebra, multiple(keyArg("key"))), -1, 1),
	keyPos(rcmd("sdiff", -2, "set", "1.0.0", "Returns the difference of the first set and the others.", cmdSetAlgebra, multiple(keyArg("key"))), -1, 1),
	keyPos(wcmd("sinterstore", -3, "set", "1.0.0", "Stores the intersection of sets.", cmdSetStore, keyArg("destination"), multiple(keyArg("key"))), -1, 1),
	keyPos(wcmd("sunionstore", -3, "set", "1.0.0", "Stores the union of sets.", cmdSetStore, keyArg("destination"), multiple(keyArg("key"))), -1, 1),
	keyPos(wcmd("sdiffstore", -3, "set", "1.0.0", "Stores the difference of the first set and the others.", cmdSetStore, keyArg("destination"), multiple(keyArg("key"))), -1, 1),
	{name: "sintercard", arity: -3, flags: []string{"readonly"}, first: 2, last: -1, step: 1, acl: []string{"read", "set", "slow"}, group: "set", since: "7.0.0",
		summary: "Returns the number of members of the intersection of sets.", complexity: "O(N*M) worst case",
		args: []arg{intArg("numkeys"), multiple(keyArg("key")), optional(tokenArg("LIMIT", intArg("limit")))}, run: cmdSInterCard},
	rcmd("sscan", -3, "set", "2.6.0", "Iterates over the members of a set.", cmdSScan, keyArg("key"), intArg("cursor"),
		optional(tokenArg("MATCH", arg{name: "pattern", typ: "pattern"})), optional(tokenArg("COUNT", intArg("count")))),

	// Sorted sets (zset.go).
	wcmd("zadd", -4, "sorted-set", "1.2.0", "Adds members to a sorted set or updates their scores (NX, XX, GT, LT, CH, INCR).", cmdZAdd, keyArg("key"),
		optional(oneof("condition", token("NX"), token("XX"))), optional(oneof("comparison", token("GT"), token("LT"))), optional(token("CH")),
		optional(token("INCR")), multiple(block("data", arg{name: "score", typ: "double"}, strArg("member")))),
	wcmd("zincrby", 4, "sorted-set", "1.2.0", "Increments the score of a member of a sorted set.", cmdZAdd, keyArg("key"), intArg("increment"), strArg("member")),
	wcmd("zrem", -3, "sorted-set", "1.2.0", "Removes members from a sorted set.", cmdZRem, keyArg("key"), multiple(strArg("member"))),
	rcmd("zcard", 2, "sorted-set", "1.2.0", "Returns the number of members of a sorted set.", cmdZCard, keyArg("key")),
	rcmd("zscore", 3, "sorted-set", "1.2.0", "Returns the score of a member of a sorted set.", cmdZScore, keyArg("key"), strArg("member")),
	rcmd("zmscore", -3, "sorted-set", "6.2.0", "Returns the scores of members of a sorted set.", cmdZScore, keyArg("key"), multiple(strArg("member"))),
	rcmd("zrank", 3, "sorted-set", "2.0.0", "Returns the rank of a member (lists the entries before it).", cmdZRank, keyArg("key"), strArg("member")),
	rcmd("zrevrank", 3, "sorted-set", "2.0.0", "Returns the rank of a member from the highest score.", cmdZRank, keyArg("key"), strArg("member")),
	rcmd("zcount", 4, "sorted-set", "2.0.0", "Counts the members with scores in a range.", cmdZCount, keyArg("key"), arg{name: "min", typ: "double"}, arg{name: "max", typ: "double"}),
	rcmd("zlexcount", 4, "sorted-set", "2.8.9", "Counts the members in a lexicographical range.", cmdZCount, keyArg("key"), strArg("min"), strArg("max")),
	rcmd("zrange", -4, "sorted-set", "1.2.0", "Returns members in a range of ranks, scores (BYSCORE) or members (BYLEX).", zrangeRead("", false, false), keyArg("key"),
		strArg("start"), strArg("stop"), optional(oneof("sortby", token("BYSCORE"), token("BYLEX"))), optional(token("REV")),
		optional(tokenArg("LIMIT", block("limit", intArg("offset"), intArg("count")))), optional(token("WITHSCORES"))),
	keyPos(wcmd("zrangestore", -5, "sorted-set", "6.2.0", "Stores a range of a sorted set.", cmdZRangeStore, keyArg("dst"), keyArg("src"),
		strArg("min"), strArg("max"), optional(oneof("sortby", token("BYSCORE"), token("BYLEX"))), optional(token("REV")),
		optional(tokenArg("LIMIT", block("limit", intArg("offset"), intArg("count"))))), 2, 1),
	rcmd("zrangebyscore", -4, "sorted-set", "1.0.5", "Returns members with scores in a range.", zrangeRead("score", false, true), keyArg("key"),
		arg{name: "min", typ: "double"}, arg{name: "max", typ: "double"}, optional(token("WITHSCORES")), optional(tokenArg("LIMIT", block("limit", intArg("offset"), intArg("count"))))),
	rcmd("zrevrangebyscore", -4, "sorted-set", "2.2.0", "Returns members with scores in a range, highest first.", zrangeRead("score", true, true), keyArg("key"),
		arg{name: "max", typ: "double"}, arg{name: "min", typ: "double"}, optional(token("WITHSCORES")), optional(tokenArg("LIMIT", block("limit", intArg("offset"), intArg("count"))))),
	rcmd("zrangebylex", -4, "sorted-set", "2.8.9", "Returns members in a lexicographical range.", zrangeRead("lex", false, true), keyArg("key"),
		strArg("min"), strArg("max"), optional(tokenArg("LIMIT", block("limit", intArg("offset"), intArg("count"))))),
	rcmd("zrevrangebylex", -4, "sorted-set", "2.8.9", "Returns members in a lexicographical range, in reverse.", zrangeRead("lex", true, true), keyArg("key"),
		strArg("max"), strArg("min"), optional(tokenArg("LIMIT", block("limit", intArg("offset"), intArg("count"))))),
	rcmd("zrevrange", -4, "sorted-set", "1.2.0", "Returns members in a range of ranks, highest score first.", zrangeRead("rank", true, true), keyArg("key"),
		intArg("start"), intArg("stop"), optional(token("WITHSCORES"))),
	wcmd("zpopmin", -2, "sorted-set", "5.0.0", "Removes and returns the members with the lowest scores.", cmdZPop, keyArg("key"), optional(intArg("count"))),
	wcmd("zpopmax", -2, "sorted-set", "5.0.0", "Removes and returns the members with the highest scores.", cmdZPop, keyArg("key"), optional(intArg("count"))),
	{name: "zmpop", arity: -4, flags: []string{"write"}, first: 2, last: -1, step: 1, acl: []string{"write", "sorted-set", "slow"}, group: "sorted-set", since: "7.0.0",
		summary: "Removes and returns members from the first non-empty sorted set.", complexity: "O(K) + O(M*log(N))",
		args: []arg{intArg("numkeys"), multiple(keyArg("key")), oneof("where", token("MIN"), token("MAX")), optional(tokenArg("COUNT", intArg("count")))}, run: cmdZMPop},
	noScript(blocking(keyPos(wcmd("bzpopmin", -3, "sorted-set", "5.0.0", "ZPOPMIN of the first non-empty sorted set, or blocks until one has a member.", cmdBZPop,
		multiple(keyArg("key")), arg{name: "timeout", typ: "double"}), -2, 1))),
	noScript(blocking(keyPos(wcmd("bzpopmax", -3, "sorted-set", "5.0.0", "ZPOPMAX of the first non-empty sorted set, or blocks until one has a member.", cmdBZPop,
		multiple(keyArg("key")), arg{name: "timeout", typ: "double"}), -2, 1))),
	blocking(&command{name: "bzmpop", arity: -5, flags: []string{"write"}, first: 3, last: -1, step: 1, acl: []string{"write", "sorted-set", "slow"}, group: "sorted-set", since: "7.0.0",
		summary: "ZMPOP, or blocks until one of the sorted sets has a member.", complexity: "O(K) + O(M*log(N))",
		args: []arg{arg{name: "timeout", typ: "double"}, intArg("numkeys"), multiple(keyArg("key")), oneof("where", token("MIN"), token("MAX")), optional(tokenArg("COUNT", intArg("count")))}, run: cmdBZMPop}),
	wcmd("zremrangebyrank", 4, "sorted-set", "2.0.0", "Removes the members in a range of ranks.", cmdZRemRange, keyArg("key"), intArg("start"), intArg("stop")),
	wcmd("zremrangebyscore", 4, "sorted-set", "1.2.0", "Removes the members with scores in a range.", cmdZRemRange, keyArg("key"), arg{name: "min", typ: "double"}, arg{name: "max", typ: "double"}),
	wcmd("zremrangebylex", 4, "sorted-set", "2.8.9", "Removes the members in a lexicographical range.", cmdZRemRange, keyArg("key"), strArg("min"), strArg("max")),
	zalgebraCmd("zunion", false, "Returns the union of sorted sets (and sets)."),
	zalgebraCmd("zinter", false, "Returns the intersection of sorted sets (and sets)."),
	zalgebraCmd("zdiff", false, "Returns the difference of the first sorted set and the others."),
	zalgebraCmd("zunionstore", true, "Stores the union of sorted sets (and sets)."),
	zalgebraCmd("zinterstore", true, "Stores the intersection of sorted sets (and sets)."),
	zalgebraCmd("zdiffstore", true, "Stores the difference of the first sorted set and the others."),
	zalgebraCmd("zintercard", false, "Returns the number of members of the intersection of sorted sets."),
	rcmd("zrandmember", -2, "sorted-set", "6.2.0", "Returns random members of a sorted set.", cmdZRandMember, keyArg("key"),
		optional(block("options", intArg("count"), optional(token("WITHSCORES"))))),
	rcmd("zscan", -3, "sorted-set", "2.8.0", "Iterates over the members of a sorted set and their scores.", cmdZScan, keyArg("key"), intArg("cursor"),
		optional(tokenArg("MATCH", arg{name: "pattern", typ: "pattern"})), optional(tokenArg("COUNT", intArg("count")))),

	// Keyspace.
	keyPos(wcmd("del", -2, "generic", "1.0.0", "Deletes one or more keys; returns how many existed.", cmdDel, multiple(keyArg("key"))), -1, 1),
	keyPos(wcmd("unlink", -2, "generic", "4.0.0", "Deletes one or more keys (as DEL: deletes are not deferred).", cmdDel, multiple(keyArg("key"))), -1, 1),
	keyPos(rcmd("exists", -2, "generic", "1.0.0", "Counts how many of the given keys exist.", cmdExists, multiple(keyArg("key"))), -1, 1),
	keyPos(rcmd("touch", -2, "generic", "3.2.1", "Counts how many of the given keys exist (kvarray keeps no access times).", cmdExists, multiple(keyArg("key"))), -1, 1),
	rcmd("type", 2, "generic", "1.0.0", "Returns string for a key that exists, none otherwise.", cmdType, keyArg("key")),
	rcmd("ttl", 2, "generic", "1.0.0", "Returns the time to live of a key in seconds (-1 no expiry, -2 no key).", cmdTTL, keyArg("key")),
	rcmd("pttl", 2, "generic", "2.6.0", "Returns the time to live of a key in milliseconds (-1 no expiry, -2 no key).", cmdTTL, keyArg("key")),
	rcmd("expiretime", 2, "generic", "7.0.0", "Returns the expiration time of a key as a Unix timestamp in seconds.", cmdTTL, keyArg("key")),
	rcmd("pexpiretime", 2, "generic", "7.0.0", "Returns the expiration time of a key as a Unix timestamp in milliseconds.", cmdTTL, keyArg("key")),
	wcmd("expire", -3, "generic", "1.0.0", "Sets the expiration time of a key in seconds (NX, XX, GT, LT).", cmdExpire, keyArg("key"), intArg("seconds"), expireCond),
	wcmd("pexpire", -3, "generic", "2.6.0", "Sets the expiration time of a key in milliseconds (NX, XX, GT, LT).", cmdExpire, keyArg("key"), intArg("milliseconds"), expireCond),
	wcmd("expireat", -3, "generic", "1.2.0", "Sets the expiration time of a key to a Unix timestamp in seconds (NX, XX, GT, LT).", cmdExpire, keyArg("key"), intArg("unix-time-seconds"), expireCond),
	wcmd("pexpireat", -3, "generic", "2.6.0", "Sets the expiration time of a key to a Unix timestamp in milliseconds (NX, XX, GT, LT).", cmdExpire, keyArg("key"), intArg("unix-time-milliseconds"), expireCond),
	wcmd("persist", 2, "generic", "2.2.0", "Removes the expiration time of a key.", cmdPersist, keyArg("key")),
	keyPos(wcmd("rename", 3, "generic", "1.0.0", "Renames a key, overwriting the destination.", cmdRename, keyArg("key"), keyArg("newkey")), 2, 1),
	keyPos(wcmd("renamenx", 3, "generic", "1.0.0", "Renames a key only when the destination does not exist.", cmdRename, keyArg("key"), keyArg("newkey")), 2, 1),
	keyPos(wcmd("copy", -3, "generic", "6.2.0", "Copies the value of a key (and its expiry) to a new key.", cmdCopy, keyArg("source"), keyArg("destination"),
		optional(tokenArg("DB", intArg("destination-db"))), optional(token("REPLACE"))), 2, 1),
	wcmd("move", 3, "generic", "1.0.0", "Moves a key to another database.", cmdMove, keyArg("key"), intArg("db")),
	{name: "randomkey", arity: 1, flags: []string{"readonly"}, acl: []string{"keyspace", "read", "slow"}, group: "generic", since: "1.0.0",
		summary: "Returns a random key name from the database (lists the keys).", complexity: "O(N) in kvarray: the keys are listed.", run: cmdRandomKey},
	{name: "object", arity: -2, flags: []string{"readonly"}, acl: []string{"keyspace", "read", "slow"}, group: "generic", since: "2.2.3",
		summary: "OBJECT ENCODING, REFCOUNT, IDLETIME, FREQ, HELP.", complexity: "O(1)",
		args: []arg{strArg("subcommand"), optional(multiple(strArg("arg")))}, run: cmdObject},
	{name: "memory", arity: -2, flags: []string{"readonly"}, acl: []string{"read", "slow"}, group: "server", since: "4.0.0",
		summary: "MEMORY USAGE key: the value's bytes plus the key's and the mapping's overhead; MEMORY HELP.", complexity: "O(1)",
		args: []arg{strArg("subcommand"), optional(multiple(strArg("arg")))}, run: cmdMemory},
	// Keyspace listing (each call lists the database's keys) and databases.
	{name: "scan", arity: -2, flags: []string{"readonly"}, acl: []string{"keyspace", "read", "slow"}, group: "generic", since: "2.8.0",
		summary:    "Iterates over the keys. The cursor is a position in hash order; each call lists all keys.",
		complexity: "O(N log N) per call in kvarray, N the number of keys.",
		args: []arg{intArg("cursor"), optional(tokenArg("MATCH", arg{name: "pattern", typ: "pattern"})),
			optional(tokenArg("COUNT", intArg("count"))), optional(tokenArg("TYPE", strArg("type")))}, run: cmdScan},
	{name: "keys", arity: 2, flags: []string{"readonly"}, acl: []string{"keyspace", "read", "slow", "dangerous"}, group: "generic", since: "1.0.0",
		summary: "Returns the keys that match a pattern, in byte order.", complexity: "O(N) with N being the number of keys.",
		args: []arg{{name: "pattern", typ: "pattern"}}, run: cmdKeys},
	{name: "dbsize", arity: 1, flags: []string{"readonly"}, acl: []string{"keyspace", "read", "slow"}, group: "server", since: "1.0.0",
		summary: "Returns the number of keys in the database.", complexity: "O(N) in kvarray: the keys are listed.", run: cmdDBSize},
	{name: "flushdb", arity: -1, flags: []string{"write"}, acl: []string{"keyspace", "write", "slow", "dangerous"}, group: "server", since: "1.0.0",
		summary: "Deletes every key of the database (ASYNC and SYNC both delete before replying).", complexity: "O(N) where N is the number of keys in the selected database",
		args: []arg{optional(oneof("flush-type", token("ASYNC"), token("SYNC")))}, run: cmdFlushDB},
	{name: "flushall", arity: -1, flags: []string{"write"}, acl: []string{"keyspace", "write", "slow", "dangerous"}, group: "server", since: "1.0.0",
		summary: "Deletes every key of every database (ASYNC and SYNC both delete before replying).", complexity: "O(N) where N is the total number of keys in all databases",
		args: []arg{optional(oneof("flush-type", token("ASYNC"), token("SYNC")))}, run: cmdFlushAll},
	{name: "swapdb", arity: 3, flags: []string{"write", "fast"}, acl: []string{"keyspace", "write", "fast", "dangerous"}, group: "server", since: "4.0.0",
		summary: "Swaps two databases (one write of the database map; not allowed inside MULTI).", complexity: "O(1)",
		args: []arg{intArg("index1"), intArg("index2")}, run: cmdSwapDB, noTx: true, exclusive: true},

	// Transactions.
	{name: "multi", arity: 1, flags: []string{"noscript", "loading", "stale", "fast", "allow_busy"}, acl: []string{"fast", "transaction"},
		group: "transactions", since: "1.2.0", summary: "Starts a transaction.", complexity: "O(1)", run: cmdMulti},
	{name: "exec", arity: 1, flags: []string{"noscript", "loading", "stale", "skip_slowlog"}, acl: []string{"slow", "transaction"},
		group: "transactions", since: "1.2.0", summary: "Executes all commands in a transaction, atomically and all-or-nothing across a crash.",
		complexity: "Depends on commands in the transaction", run: cmdExec, exclusive: true},
	{name: "discard", arity: 1, flags: []string{"noscript", "loading", "stale", "fast", "allow_busy"}, acl: []string{"fast", "transaction"},
		group: "transactions", since: "2.0.0", summary: "Discards a transaction.", complexity: "O(N), when N is the number of queued commands", run: cmdDiscard},
	keyPos(&command{name: "watch", arity: -2, flags: []string{"noscript", "loading", "stale", "fast", "allow_busy"}, acl: []string{"fast", "transaction"},
		group: "transactions", since: "2.2.0", summary: "Monitors changes to keys to determine the execution of a transaction.",
		complexity: "O(1) for every key.", args: []arg{multiple(keyArg("key"))}, run: cmdWatch}, -1, 1),
	{name: "unwatch", arity: 1, flags: []string{"noscript", "loading", "stale", "fast", "allow_busy"}, acl: []string{"fast", "transaction"},
		group: "transactions", since: "2.2.0", summary: "Forgets about watched keys of a transaction.", complexity: "O(1)", run: cmdUnwatch},

	// Server.
	{name: "save", arity: 1, flags: []string{"admin", "noscript", "no_async_loading", "no_multi"}, acl: []string{"admin", "slow", "dangerous"}, group: "server", since: "1.0.0",
		summary: "Writes every key to the RDB file (CONFIG GET dir, dbfilename); the devices stay the persistence.", complexity: "O(1)", run: cmdSave, noTx: true},
	{name: "lastsave", arity: 1, flags: []string{"loading", "stale", "fast"}, acl: []string{"admin", "fast", "dangerous"}, group: "server", since: "1.0.0",
		summary: "The time of the last SAVE or BGSAVE that succeeded (the server's start before one).", complexity: "O(1)", run: cmdLastSave},
	{name: "shutdown", arity: -1, flags: []string{"admin", "noscript", "loading", "stale", "no_multi", "allow_busy"}, acl: []string{"admin", "slow", "dangerous"}, group: "server", since: "1.0.0",
		summary: "Refused: stop kvarray serve with SIGTERM.", complexity: "O(1)", run: cmdShutdown, noTx: true},
	{name: "time", arity: 1, flags: []string{"loading", "stale", "fast"}, acl: []string{"fast"}, group: "server", since: "2.6.0",
		summary: "Returns the server time.", complexity: "O(1)", run: cmdTime},
	{name: "wait", arity: 3, acl: []string{"slow", "connection"}, group: "generic", since: "3.0.0",
		summary: "Waits for replicas: there are none (the array's redundancy is synchronous), so 0 at once.", complexity: "O(1)",
		args: []arg{intArg("numreplicas"), intArg("timeout")}, run: cmdWait},
	{name: "info", arity: -1, flags: []string{"loading", "stale"}, acl: []string{"slow", "dangerous"}, group: "server", since: "1.0.0",
		summary:    "Returns information and statistics: server, clients, memory, persistence, stats, replication, cpu, cluster, keyspace, commandstats, kvarray.",
		complexity: "O(N): keyspace lists the keys; kvarray (not in the default sections) reads every value's header.", args: []arg{optional(multiple(strArg("section")))}, run: cmdInfo},
	{name: "command", arity: -1, flags: []string{"loading", "stale"}, acl: []string{"slow", "connection"}, group: "server", since: "2.8.13",
		summary:    "Returns detailed information about commands: COMMAND, COMMAND COUNT, COMMAND INFO, COMMAND DOCS, COMMAND LIST.",
		complexity: "O(N) where N is the total number of commands", run: cmdCommand},
	{name: "config", arity: -2, acl: []string{"slow"}, group: "server", since: "2.0.0",
		summary: "CONFIG GET reports the parameters kvarray has; CONFIG SET changes those it can at run time; CONFIG RESETSTAT.", complexity: "Depends on subcommand.",
		args: []arg{strArg("subcommand"), optional(multiple(strArg("arg")))}, run: cmdConfig},

	// Admin: the array's own commands.
	{name: "kvarray.status", arity: -1, flags: []string{"readonly", "admin"}, acl: []string{"admin", "slow"}, group: "kvarray", since: "0.1.0",
		summary:    "Returns the array's status (devices; with DEEP, objects per mechanism and storage overhead) as JSON.",
		complexity: "O(devices); O(N) with DEEP, which reads every value's header.",
		args:       []arg{optional(strArg("DEEP"))}, run: cmdStatus},
	{name: "kvarray.set", arity: 4, flags: []string{"write", "denyoom"}, first: 1, last: 1, step: 1, acl: []string{"write", "string", "slow"},
		group: "kvarray", since: "0.1.0", summary: "Sets the value of a key with the named reliability mechanism.", complexity: "O(1)",
		args: []arg{keyArg("key"), strArg("value"), strArg("mechanism")}, run: cmdKvSet},
	{name: "kvarray.fail", arity: 2, flags: []string{"admin"}, acl: []string{"admin", "dangerous"}, group: "kvarray", since: "0.1.0",
		summary: "Fails device DEV (mem devices only) and marks it failed in the array.", complexity: "O(1)",
		args: []arg{intArg("dev")}, run: cmdFail},
	{name: "kvarray.recover", arity: 2, flags: []string{"admin"}, acl: []string{"admin", "dangerous"}, group: "kvarray", since: "0.1.0",
		summary:    "Brings failed mem device DEV back with the data it had and resyncs it; replies with the resync report as JSON.",
		complexity: "O(N) where N is the number of keys the device missed.",
		args:       []arg{intArg("dev")}, run: cmdRecover},
	{name: "kvarray.scrub", arity: -1, flags: []string{"admin"}, acl: []string{"admin", "slow"}, group: "kvarray", since: "0.1.0",
		summary:    "Reads every value and redundant piece and verifies them; with REPAIR, repairs what is bad. Replies with the report as JSON.",
		complexity: "O(N) where N is the number of keys.",
		args:       []arg{optional(token("REPAIR")), optional(tokenArg("WORKERS", intArg("n")))}, run: cmdScrub},
	{name: "kvarray.rebuild", arity: -2, flags: []string{"admin"}, acl: []string{"admin", "dangerous", "slow"}, group: "kvarray", since: "0.1.0",
		summary:    "Rebuilds device DEV (a mem device is first replaced by an empty one); replies with the report as JSON.",
		complexity: "O(N) where N is the number of keys on the neighbouring devices.",
		args:       []arg{intArg("dev"), optional(tokenArg("WORKERS", intArg("n")))}, run: cmdRebuild},
}

// expireCond is EXPIRE's NX | XX | GT | LT.
var expireCond = optional(oneof("condition", token("NX"), token("XX"), token("GT"), token("LT")))

// rcmd is a row for a read command on one key (the first argument).
func rcmd(name string, arity int, group, since, summary string, run func(*call), args ...arg) *command {
	return &command{name: name, arity: arity, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1,
		acl: []string{"read", group, "fast"}, group: group, since: since, summary: summary, complexity: "O(1) array calls", args: args, run: run}
}

// wcmd is a row for a write command on one key (the first argument).
func wcmd(name string, arity int, group, since, summary string, run func(*call), args ...arg) *command {
	return &command{name: name, arity: arity, flags: []string{"write", "denyoom"}, first: 1, last: 1, step: 1,
		acl: []string{"write", group, "slow"}, group: group, since: since, summary: summary, complexity: "O(1) array calls", args: args, run: run}
}

// blocking flags a row as a blocking command (COMMAND INFO's flag and
// ACL category).
func blocking(c *command) *command {
	c.flags = append(slices.Clone(c.flags), "blocking")
	c.acl = append(slices.Clone(c.acl), "blocking")
	return c
}

// noScript flags a row noscript, as Redis 7.0 flags BLPOP, BRPOP, BLMOVE
// and BRPOPLPUSH (not BLMPOP): scripts are refused them.
func noScript(c *command) *command {
	c.flags = append(slices.Clone(c.flags), "noscript")
	return c
}

// zalgebraCmd is a row of ZUNION, ZINTER, ZDIFF, their STORE forms (a
// destination first) or ZINTERCARD: numkeys, then the keys.
func zalgebraCmd(name string, store bool, summary string) *command {
	c := &command{name: name, arity: -3, flags: []string{"readonly"}, first: 2, last: -1, step: 1,
		acl: []string{"read", "sorted-set", "slow"}, group: "sorted-set", since: "6.2.0", summary: summary,
		complexity: "O(N) array calls, N the members of the inputs", run: cmdZAlgebra}
	c.args = []arg{intArg("numkeys"), multiple(keyArg("key"))}
	if store {
		c.arity, c.flags, c.acl, c.first = -4, []string{"write", "denyoom"}, []string{"write", "sorted-set", "slow"}, 1
		c.args = append([]arg{keyArg("destination")}, c.args...)
	}
	if name == "zintercard" {
		c.since = "7.0.0"
	}
	return c
}

// keyPos sets where a row's keys are (COMMAND INFO).
func keyPos(c *command, last, step int) *command {
	c.last, c.step = last, step
	return c
}

// call is one command being run.
type call struct {
	s    *Server
	rc   redcon.Conn
	w    *respWriter
	cl   *conn
	args [][]byte
	ctx  context.Context
	e    *entry
	// shown is the command's full name ("client|list"; nil: e's name).
	shown *string
	// tx is the transaction EXEC is running this command in, if any.
	tx *txn
	// held: the command holds its keys' locks already (a blocking
	// command's tries, blocking.go): lockKeys takes none.
	held bool
	// blocked: the command registered this waiter; the connection waits
	// once the command has released its locks (afterCommand).
	blocked *waiter
	// phased: writeOps applies the ops of one list's push or pop in
	// phases rather than through an intent record (list.go).
	phased bool
	// using is KVARRAY.SET's mechanism, kept for the transaction's
	// intent record.
	using string
	// running: e.run has started; an error reply before it rejects the
	// command, after it fails it.
	running bool
	// noTrack: its writes send no invalidation of their own (FLUSHDB's
	// deletes: a null invalidation says it all, tracking.go).
	noTrack bool
}

// error replies with an error; msg starts with its code (ERR, NOPROTO…).
func (c *call) error(msg string) {
	c.s.countError(msg)
	c.countFailure()
	c.w.WriteError(msg)
}

// countError counts an error reply (msg without its '-') in INFO stats and
// errorstats.
func (s *Server) countError(msg string) {
	s.stats.errors.Add(1)
	s.errorStats.count(msg)
}

// countFailure counts the command as failed (it ran) or rejected (it did
// not) in INFO commandstats.
func (c *call) countFailure() {
	switch {
	case c.e == nil:
	case c.running:
		c.e.failed.Add(1)
	default:
		c.e.rejected.Add(1)
	}
}

// fail replies with the error for err.
func (c *call) fail(err error) { c.error(errorReply(err)) }

func (c *call) syntaxError() { c.error("ERR syntax error") }

// arityError is Redis's error for a command (or "container|sub") given
// the wrong number of arguments.
func (c *call) arityError(name string) {
	c.error(fmt.Sprintf("ERR wrong number of arguments for '%s' command", name))
}

func (c *call) ok() { c.w.WriteString("OK") }

// serveRESP is redcon's handler: it looks the command up and runs it, or,
// at the head of a pipeline of single-key commands, runs the pipeline
// (pipeline.go).
func (s *Server) serveRESP(rc redcon.Conn, cmd redcon.Command) {
	cl, _ := rc.Context().(*conn)
	if cl == nil || cl.quit || len(cmd.Args) == 0 {
		return
	}
	if cl.push == nil && cl.wantPush.Load() {
		cl.startPush()
	}
	if cl.push != nil || subscribing(cmd.Args[0]) || monitoring(cmd.Args[0]) {
		// Messages may be sent to this connection: its replies go out
		// with the write lock held, never split by one (pubsub.go).
		cl.wmu.Lock()
		defer cl.wmu.Unlock()
		if cl.push != nil {
			// Replies still buffered first (commands before the queue
			// started), then the messages queued before this command.
			if bw := redcon.BaseWriter(rc); bw != nil {
				_ = bw.Flush()
			}
			cl.push.drain()
		}
		s.serveOne(rc, cl, cmd, nil)
		if bw := redcon.BaseWriter(rc); bw != nil {
			_ = bw.Flush()
		}
		cl.unsent = 0
		return
	}
	if s.pipeline(rc, cl, cmd) {
		return
	}
	s.serveOne(rc, cl, cmd, nil)
}

// serveOne runs one command. Its reply goes to the connection, or into
// out when given: a command of a concurrent run (pipeline.go), which
// runs on its own goroutine and must not touch rc.
func (s *Server) serveOne(rc redcon.Conn, cl *conn, cmd redcon.Command, out *respWriter) {
	s.stats.commands.Add(1)
	cl.last.Store(time.Now().UnixNano())
	w := out
	if w == nil {
		w = &respWriter{rc: rc, proto: cl.proto, cl: cl}
		switch cl.replyMode {
		case replyOff:
			w.rc = nil // collected and dropped
		case replySkip:
			w.rc = nil
			cl.replyMode = replyOn
		}
	}
	c := &call{s: s, rc: rc, cl: cl, args: cmd.Args, ctx: s.ctx, w: w}
	// Deferred first, so it runs last: after the command's locks are
	// released.
	defer s.afterCommand(c)
	for i, a := range cmd.Args {
		if v, ok := cl.g.takeAside(a); ok {
			if v == nil {
				c.error("ERR internal error: a large argument was lost")
				return
			}
			cmd.Args[i] = v
			continue
		}
		if n, ok := oversized(&s.nonce, a); ok {
			c.error(fmt.Sprintf("ERR value too large: an argument of %d bytes, over the server's limit of %d bytes per argument (the array's largest value is %d bytes)",
				n, s.o.maxBulk, s.maxValue))
			return
		}
	}
	// The checks run in Redis's order, inside MULTI too: a command that
	// fails one is refused with its error and, in a transaction, makes
	// EXEC abort; only a command that passes them all is queued. (Queuing
	// first let a data user run admin commands through EXEC.)
	e := s.lookup(cmd.Args[0])
	if e == nil {
		c.unknownCommand()
		c.abortTx()
		return
	}
	c.e = e
	c.shown = s.shownName(e, cmd.Args)
	cl.lastCmd.Store(c.shown)
	if n := len(cmd.Args); e.arity > 0 && n != e.arity || e.arity < 0 && n < -e.arity {
		c.arityError(e.name)
		c.abortTx()
		return
	}
	if !s.permit(c) {
		c.abortTx()
		return
	}
	if e.write() && !cl.master && s.repl.readOnly.Load() {
		c.error(readonlyReply)
		c.abortTx()
		return
	}
	if cl.proto == 2 && !allowedSubscribed[e.name] && cl.subscribed() {
		c.error(subscribedRefusal(e.name))
		c.abortTx()
		return
	}
	if cl.multi && (e.name == "exec" || !txCommands[e.name]) && !s.waitScript(c, e) {
		return // BUSY: a script runs (scripting.go)
	}
	if c.queue(e) {
		return
	}
	if !s.waitScript(c, e) {
		return
	}
	defer s.observe(e.name, time.Now())
	e.calls.Add(1)
	// Admin commands work on the array, not on keys, and may run long
	// (rebuild): they do not hold EXEC up.
	s.waitPause(e)
	switch {
	case e.admin() || e.exclusive:
	case slices.Contains(e.flags, "allow_busy") && e.name != "watch":
		// Connection state only (MULTI, DISCARD, AUTH, HELLO, ...): they
		// run while a script holds the lock, as Redis runs them.
	case e.write():
		if err := s.lockForWrite(c.ctx); err != nil {
			c.fail(err)
			return
		}
		defer s.txmu.RUnlock()
	default:
		s.txmu.RLock()
		defer s.txmu.RUnlock()
	}
	start := time.Now()
	defer func() {
		d := time.Since(start)
		e.usec.Add(d.Microseconds())
		s.recordSlow(c, d)
		name := e.name
		if c.shown != nil {
			name = *c.shown
		}
		s.recordLatency(e, name, d)
	}()
	defer func() {
		if r := recover(); r != nil {
			// A bug: the reply may be half written, so the connection
			// cannot go on. Other connections are not affected.
			s.o.errorLog.Printf("kvarray server: panic in %s from %s: %v\n%s", e.name, cl.addr, r, debug.Stack())
			c.error(fmt.Sprintf("ERR internal error in '%s' (logged); closing the connection", e.name))
			if out != nil {
				out.fatal = true // the run closes the connection after this reply
				return
			}
			rc.ReadPipeline()
			cl.quit = true
			rc.Close()
		}
	}()
	c.running = true
	if cl.tracking.Load() && readTracked(e) {
		s.trackKeys(cl, c.args)
	}
	s.feedMonitorsFirst(c)
	e.run(c)
	// Idle from the command's end (CONFIG timeout), not its start.
	cl.last.Store(time.Now().UnixNano())
	s.feedMonitors(c)
}

// shownName is the command's name as CLIENT LIST shows it: a container's
// with its subcommand ("client|list").
func (s *Server) shownName(e *entry, args [][]byte) *string {
	if e.container && len(args) > 1 {
		if sc := s.acl.Table().Resolve(args); sc != nil && sc.Parent() != nil {
			return &sc.Name
		}
	}
	return &e.name
}

// lookup finds a command by name, in any case, without allocating.
func (s *Server) lookup(name []byte) *entry {
	var buf [32]byte
	if len(name) > len(buf) {
		return nil
	}
	for i, ch := range name {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		buf[i] = ch
	}
	return s.cmds[string(buf[:len(name)])]
}

// unknownCommand replies as Redis 7 does, quoting the first 128 bytes of
// the arguments.
func (c *call) unknownCommand() {
	var b strings.Builder
	for _, a := range c.args[1:] {
		if b.Len() >= 128 {
			break
		}
		fmt.Fprintf(&b, "'%s' ", truncate(a, 128-b.Len()))
	}
	c.error(fmt.Sprintf("ERR unknown command '%s', with args beginning with: %s", truncate(c.args[0], 128), b.String()))
}

// unknownSubcommand replies as Redis 7 does for a container command.
func (c *call) unknownSubcommand(container string) {
	c.error(fmt.Sprintf("ERR unknown subcommand '%s'. Try %s HELP.", truncate(c.args[1], 128), strings.ToUpper(container)))
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// upper returns an ASCII option word in upper case, for comparisons.
func upper(b []byte) string {
	if len(b) > 32 {
		return ""
	}
	return strings.ToUpper(string(b))
}
