package server

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/kvarray/kvarray/collection"
	"github.com/kvarray/kvarray/internal/rdb"
	"github.com/kvarray/kvarray/keyspace"
	"github.com/kvarray/kvarray/pubsub"
)

// MIGRATE: DUMP here, RESTORE there (a Redis or another kvarray), then
// DEL here, as Redis's migrateCommand does, over a connection of its own
// per call (Redis caches them for 10 s; kvarray does not).

func init() {
	commands = append(commands, &command{name: "migrate", arity: -6, flags: []string{"write", "movablekeys"}, first: 3, last: 3, step: 1,
		acl: []string{"keyspace", "write", "slow", "dangerous"}, group: "generic", since: "2.6.0",
		summary:    "Moves keys to another Redis-protocol server (DUMP here, RESTORE there, DEL here unless COPY), with REPLACE, AUTH, AUTH2 and KEYS.",
		complexity: "O(N) where N is the number of elements of the keys moved",
		args: []arg{strArg("host"), intArg("port"), oneof("key-selector", keyArg("key"), token("\"\"")), intArg("destination-db"), intArg("timeout"),
			optional(token("COPY")), optional(token("REPLACE")),
			optional(oneof("authentication", tokenArg("AUTH", strArg("password")), tokenArg("AUTH2", block("username-password", strArg("username"), strArg("password"))))),
			optional(tokenArg("KEYS", multiple(keyArg("key"))))},
		run: cmdMigrate, noTx: true})
}

// redactedArg stands for MIGRATE's credentials in what is kept of the
// command once parsed (SLOWLOG), as Redis's redactClientCommandArgument.
var redactedArg = []byte("(redacted)")

// cmdMigrate: MIGRATE host port key|"" destination-db timeout [COPY]
// [REPLACE] [AUTH password | AUTH2 username password] [KEYS key ...].
// The keys stay locked from their DUMP to their DEL, so that what the
// target holds is what was deleted here.
func cmdMigrate(c *call) {
	var copyKeys, replace bool
	var user, pass []byte
	auth := false
	keys := [][]byte{c.args[3]}
	for i := 6; i < len(c.args); i++ {
		more := len(c.args) - 1 - i
		switch upper(c.args[i]) {
		case "COPY":
			copyKeys = true
		case "REPLACE":
			replace = true
		case "AUTH":
			if more < 1 {
				c.syntaxError()
				return
			}
			i++
			pass, auth = c.args[i], true
			c.args[i] = redactedArg
		case "AUTH2":
			if more < 2 {
				c.syntaxError()
				return
			}
			user, pass, auth = c.args[i+1], c.args[i+2], true
			c.args[i+1], c.args[i+2] = redactedArg, redactedArg
			i += 2
		case "KEYS":
			if len(c.args[3]) != 0 {
				c.error("ERR When using MIGRATE KEYS option, the key argument must be set to the empty string")
				return
			}
			keys = c.args[i+1:]
			i = len(c.args)
		default:
			c.syntaxError()
			return
		}
	}
	timeout, err := parseInt(c.args[5])
	if err != nil {
		c.error(errNotInt)
		return
	}
	dbid, err := parseInt(c.args[4])
	if err != nil {
		c.error(errNotInt)
		return
	}
	if timeout <= 0 {
		timeout = 1000
	}
	keys, unlock, ok := c.lockUnique(keys)
	if !ok {
		return
	}
	defer unlock()

	// The payloads, of the keys that exist.
	var moved [][]byte
	var cmds [][][]byte
	for _, k := range keys {
		v, found, err := c.getAny(c.cl.db, k)
		if err != nil {
			c.fail(err)
			return
		}
		if !found {
			continue
		}
		o, err := collection.ToObject(c.ctx, c.source(), v.ks(), c.s.limits.get(), c.s.ks.MaxElement())
		if err != nil {
			c.fail(err)
			return
		}
		ttl := int64(0)
		if v.at != 0 {
			ttl = max(v.at-keyspace.NowMs(), 1)
		}
		cmd := [][]byte{[]byte("RESTORE"), k, strconv.AppendInt(nil, ttl, 10), rdb.Dump(o)}
		if replace {
			cmd = append(cmd, []byte("REPLACE"))
		}
		moved = append(moved, k)
		cmds = append(cmds, cmd)
	}
	if len(moved) == 0 {
		c.w.WriteString("NOKEY")
		return
	}
	pre := [][][]byte{{[]byte("SELECT"), strconv.AppendInt(nil, dbid, 10)}}
	if auth {
		a := [][]byte{[]byte("AUTH"), pass}
		if user != nil {
			a = [][]byte{[]byte("AUTH"), user, pass}
		}
		pre = append([][][]byte{a}, pre...)
	}
	replies, err := migrateSend(c.args[1], c.args[2], time.Duration(timeout)*time.Millisecond, append(pre, cmds...))
	if err != nil {
		c.error(err.Error())
		return
	}
	// Redis reports the first error of AUTH, SELECT or a RESTORE, and
	// deletes here each key whose RESTORE succeeded, whatever the others.
	var firstErr string
	for _, r := range replies[:len(pre)] {
		if r[0] == '-' && firstErr == "" {
			firstErr = r[1:]
		}
	}
	for i, r := range replies[len(pre):] {
		if r[0] == '-' || firstErr != "" {
			if firstErr == "" {
				firstErr = r[1:]
			}
			continue
		}
		if copyKeys {
			continue
		}
		if _, err := c.remove(c.cl.db, moved[i]); err != nil {
			c.fail(err)
			return
		}
		c.notify(pubsub.Generic, "del", c.cl.db, moved[i])
	}
	if firstErr != "" {
		c.error("ERR Target instance replied with error: " + firstErr)
		return
	}
	c.ok()
}

// migrateSend sends cmds to host:port in one write and reads one line
// reply to each (+OK or -ERR …: what AUTH, SELECT and RESTORE answer),
// each step within timeout. Its errors are MIGRATE's IOERR replies.
func migrateSend(host, port []byte, timeout time.Duration, cmds [][][]byte) ([]string, error) {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(string(host), string(port)), timeout)
	if err != nil {
		return nil, fmt.Errorf("IOERR error or timeout connecting to the client")
	}
	defer conn.Close()
	var b []byte
	for _, cmd := range cmds {
		b = fmt.Appendf(b, "*%d\r\n", len(cmd))
		for _, a := range cmd {
			b = fmt.Appendf(b, "$%d\r\n", len(a))
			b = append(append(b, a...), "\r\n"...)
		}
	}
	conn.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(b); err != nil {
		return nil, fmt.Errorf("IOERR error or timeout writing to target instance")
	}
	r := bufio.NewReader(conn)
	replies := make([]string, len(cmds))
	for i := range cmds {
		conn.SetReadDeadline(time.Now().Add(timeout))
		line, err := r.ReadString('\n')
		if err != nil || len(line) < 3 {
			return nil, fmt.Errorf("IOERR error or timeout reading to target instance")
		}
		replies[i] = line[:len(line)-2]
	}
	return replies, nil
}
