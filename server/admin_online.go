package server

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/kvarray/kvarray/array"
)

// The admin commands the CLI needs to work on a served array online
// (`kvarray replace|resync|rebuild|scrub|status` through the admin
// socket), besides those in admin.go, and the heal options they share.

// Replacer swaps a new device in at position dev of the served array, as
// `kvarray replace DEV [SPEC] [--force]` does offline: the server does not
// know the config, so serve gives it one (WithReplacer). It returns what
// to tell the user.
type Replacer func(ctx context.Context, a *array.Array, dev int, spec string, force bool) (string, error)

// WithReplacer enables KVARRAY.REPLACE.
func WithReplacer(r Replacer) Option { return func(o *options) { o.hooks.replacer = r } }

func init() {
	commands = append(commands,
		&command{name: "kvarray.progress", arity: 1, flags: []string{"readonly", "admin"}, acl: []string{"admin", "fast"}, group: "kvarray", since: "0.2.0",
			summary:    "Returns the heal operations (rebuild, resync, scrub) running in the server, with their progress, as JSON.",
			complexity: "O(1)", run: cmdProgress},
		&command{name: "kvarray.resync", arity: -2, flags: []string{"admin"}, acl: []string{"admin", "slow"}, group: "kvarray", since: "0.2.0",
			summary:    "Re-admits device DEV, which was failed and answers again, and repairs the keys it missed; replies with the report as JSON.",
			complexity: "O(N) where N is the number of keys the device missed.",
			args:       []arg{intArg("dev"), optional(tokenArg("WORKERS", intArg("n")))}, run: cmdResync},
		&command{name: "kvarray.replace", arity: -2, flags: []string{"admin"}, acl: []string{"admin", "dangerous"}, group: "kvarray", since: "0.2.0",
			summary:    "Puts a new, empty device (the config's spec for DEV, or SPEC) at position DEV, marked rebuilding, as `kvarray replace` does.",
			complexity: "O(1)",
			args:       []arg{intArg("dev"), optional(strArg("spec")), optional(token("FORCE"))}, run: cmdReplace},
	)
}

// cmdProgress: KVARRAY.PROGRESS: {"tasks": [Task...], "last_scrub": time}.
func cmdProgress(c *call) {
	reply := struct {
		Tasks     []Task     `json:"tasks"`
		LastScrub *time.Time `json:"last_scrub,omitempty"`
	}{Tasks: c.s.Tasks()}
	if t := c.s.LastScrub(); !t.IsZero() {
		reply.LastScrub = &t
	}
	c.json(reply)
}

// device parses argument i as a device index, replying with an error when
// it is not one.
func (c *call) device(what string, i int) (int, bool) {
	dev, err := strconv.Atoi(string(c.args[i]))
	if err != nil || dev < 0 || dev >= c.s.a.N() {
		c.error(fmt.Sprintf("ERR %s: no device %s: the array has devices 0 to %d", what, truncate(c.args[i], 32), c.s.a.N()-1))
		return 0, false
	}
	return dev, true
}

// healOptions parses the options from argument i on: [REPAIR] (when
// repair is non-nil) and [WORKERS n].
func (c *call) healOptions(i int, repair *bool) ([]array.HealOption, bool) {
	var opts []array.HealOption
	for ; i < len(c.args); i++ {
		switch upper(c.args[i]) {
		case "REPAIR":
			if repair == nil {
				c.syntaxError()
				return nil, false
			}
			*repair = true
		case "WORKERS":
			if i+1 >= len(c.args) {
				c.syntaxError()
				return nil, false
			}
			n, err := strconv.Atoi(string(c.args[i+1]))
			if err != nil || n < 1 || n > 1024 {
				c.error("ERR WORKERS: want 1 to 1024")
				return nil, false
			}
			opts = append(opts, array.WithWorkers(n))
			i++
		default:
			c.syntaxError()
			return nil, false
		}
	}
	return opts, true
}

// cmdResync: KVARRAY.RESYNC DEV [WORKERS n].
func cmdResync(c *call) {
	dev, ok := c.device("KVARRAY.RESYNC", 1)
	if !ok {
		return
	}
	opts, ok := c.healOptions(2, nil)
	if !ok {
		return
	}
	track, done := c.s.startTask("resync", dev)
	rep, err := c.s.a.Resync(c.ctx, dev, append(opts, track...)...)
	done(err)
	if err != nil {
		c.fail(err)
		return
	}
	c.json(rep)
}

// cmdReplace: KVARRAY.REPLACE DEV [SPEC] [FORCE].
func cmdReplace(c *call) {
	if c.s.o.hooks.replacer == nil {
		c.error("ERR KVARRAY.REPLACE: this server was not given a replacer (server.WithReplacer): replace devices with it stopped")
		return
	}
	dev, ok := c.device("KVARRAY.REPLACE", 1)
	if !ok {
		return
	}
	spec, force := "", false
	for _, a := range c.args[2:] {
		switch {
		case upper(a) == "FORCE":
			force = true
		case spec == "":
			spec = string(a)
		default:
			c.syntaxError()
			return
		}
	}
	if spec != "" && !isAdminConn(c.cl.Conn) {
		// The operator names devices (config file, CLI); a client never
		// makes the server open a path or address of its choosing.
		c.error("ERR KVARRAY.REPLACE DEV SPEC: a new device spec is taken from the admin socket only ('kvarray replace DEV SPEC' on the server's machine); over the network, KVARRAY.REPLACE DEV reuses the config's spec")
		return
	}
	msg, err := c.s.o.hooks.replacer(c.ctx, c.s.a, dev, spec, force)
	if err != nil {
		c.error("ERR " + err.Error())
		return
	}
	c.s.log().Info("device replaced", "device", dev, "detail", msg)
	c.rc.WriteBulkString(msg)
}
