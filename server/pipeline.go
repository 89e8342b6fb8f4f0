package server

import (
	"sync"

	"github.com/tidwall/redcon"

	"github.com/kvarray/kvarray/internal/workers"
)

// Pipelined commands of one connection run concurrently across different
// keys, so that a client pipelining P commands keeps P array operations in
// flight (and their device writes share synced commits) instead of one.
//
// Contract, as the client sees it:
//   - Replies come in the order the commands were sent.
//   - Commands on the same key run in the order they were sent: a run
//     ends before a command whose key an earlier command of the run has.
//   - Only single-key commands run concurrently (see concurrent); every
//     other command (MULTI/EXEC, WATCH, SELECT, CLIENT, multi-key and
//     whole-keyspace commands, admin commands) is a barrier: it runs alone
//     once every command before it has finished, and the commands after it
//     start only once it has finished. Inside MULTI nothing runs
//     concurrently (commands are queued), nor with CLIENT REPLY OFF/SKIP.
//   - What another client may see differs from Redis: two pipelined
//     writes to different keys may become visible in either order (each
//     is acknowledged only once durable, as always). A client that needs
//     one write visible before another waits for its reply, or uses
//     MULTI/EXEC.

// pipelineWindow is how many commands of one connection run at once. It
// bounds the replies a connection holds in memory while they wait for
// the commands before them (a GET of a large value holds the value): at
// most pipelineWindow replies per connection.
const pipelineWindow = 16

// serial are single-key commands that still run as barriers: MOVE writes
// the key in another database too.
var serial = map[string]bool{"move": true}

// concurrent reports whether cmd may run concurrently with its
// neighbours on cl: a known command of exactly one key (the first
// argument), with valid arity, that is neither an admin command nor one
// that takes the transaction lock itself, on a connection outside MULTI
// whose replies are on.
func (s *Server) concurrent(cl *conn, cmd redcon.Command) bool {
	if cl.multi || cl.replyMode != replyOn || len(cmd.Args) < 2 {
		return false
	}
	e := s.lookup(cmd.Args[0])
	if e == nil || e.first != 1 || e.last != 1 || e.admin() || e.exclusive || serial[e.name] {
		return false
	}
	n := len(cmd.Args)
	return e.arity > 0 && n == e.arity || e.arity < 0 && n >= -e.arity
}

// pipeline runs first and the rest of the pipeline redcon has read, when
// first and the command after it may run concurrently; it reports
// whether it did (if not, the caller runs first alone). It takes the
// whole pipeline from redcon: runs of concurrent commands with distinct
// keys, at most pipelineWindow each, run on their own goroutines and their
// replies are written in order; every other command runs alone, in order.
// The commands' arguments point into redcon's read buffer, which stays
// valid until this handler returns, and every goroutine has finished by
// then.
func (s *Server) pipeline(rc redcon.Conn, cl *conn, first redcon.Command) bool {
	next := rc.PeekPipeline()
	if len(next) == 0 || !s.concurrent(cl, first) || !s.concurrent(cl, next[0]) {
		return false
	}
	cmds := append([]redcon.Command{first}, rc.ReadPipeline()...)
	for i := 0; i < len(cmds) && !cl.quit; {
		if !s.concurrent(cl, cmds[i]) {
			s.serveOne(rc, cl, cmds[i], nil)
			i++
			continue
		}
		j := i + 1
		for j < len(cmds) && j-i < pipelineWindow && s.concurrent(cl, cmds[j]) && !sameKey(cmds[i:j], cmds[j]) {
			j++
		}
		s.runConcurrent(rc, cl, cmds[i:j])
		i = j
	}
	return true
}

// sameKey reports whether cmd's key is the key of one of run.
func sameKey(run []redcon.Command, cmd redcon.Command) bool {
	for _, r := range run {
		if string(r.Args[1]) == string(cmd.Args[1]) {
			return true
		}
	}
	return false
}

// runConcurrent runs cmds, each on its own goroutine with its reply
// collected, then writes the replies in order. A handler that panicked
// (its reply is the error) closes the connection after its reply: the
// replies after it are dropped, as the commands after a panic are when
// they run one at a time.
func (s *Server) runConcurrent(rc redcon.Conn, cl *conn, cmds []redcon.Command) {
	outs := make([]respWriter, len(cmds))
	var wg sync.WaitGroup
	for i := range cmds {
		outs[i].proto = cl.proto
		wg.Add(1)
		workers.Go(func() {
			defer wg.Done()
			s.serveOne(rc, cl, cmds[i], &outs[i])
		})
	}
	wg.Wait()
	w := &respWriter{rc: rc, proto: cl.proto, unsent: &cl.unsent}
	for i := range outs {
		w.raw(outs[i].b)
		if outs[i].fatal {
			rc.ReadPipeline()
			cl.quit = true
			rc.Close()
			return
		}
	}
}
