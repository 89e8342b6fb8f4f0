package server

import (
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

// pipelineWindow is how many commands of one connection run at once,
// at most; fewer when its replies are large (see replyEstimate).
const pipelineWindow = 16

// replyBudget is about how many bytes of replies one connection's
// pipelined commands, or one MGET, hold at once: values read and not yet
// sent. Commands and keys are started only while the replies expected fit
// (at least one at a time): sixteen 8 MiB values read at once would hold
// 128 MiB for one client, and keep both cores copying while other
// clients' commands wait (bench/memory.sh).
const replyBudget = 16 << 20

// replyEstimate is the size expected of the next reply: the largest seen,
// halved by each reply after it. It starts at half the budget, so that a
// connection runs two commands at once until its replies have shown
// themselves small (three small replies bring it to pipelineWindow).
type replyEstimate struct{ n int }

func newReplyEstimate() replyEstimate { return replyEstimate{replyBudget / 2} }

// window is how many replies of the expected size fit the budget, between
// 1 and limit.
func (e *replyEstimate) window(limit int) int {
	return max(1, min(limit, replyBudget/max(e.n, 1)))
}

// saw takes a reply of n bytes into the estimate.
func (e *replyEstimate) saw(n int) { e.n = max(n, e.n/2) }

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
	cmds := append(append(cl.run.cmds[:0], first), rc.ReadPipeline()...)
	defer func() { clear(cmds); cl.run.cmds = cmds[:0] }() // no reference to redcon's buffer is kept
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

// pipelineRun is a connection's state for its concurrent runs, reused
// from run to run so that a pipelined command costs no allocation of its
// own here (issue 36): its slot, its reply buffer, its completion channel
// and the function a worker runs are the slot's, made once.
type pipelineRun struct {
	cmds  []redcon.Command
	slots []*pipeSlot
}

// pipeSlot runs one command of a run on a worker.
type pipeSlot struct {
	s    *Server
	rc   redcon.Conn
	cl   *conn
	cmd  redcon.Command
	out  respWriter
	done chan struct{} // one value per command run
	run  func()        // s.serveOne of cmd into out, then done
}

// slot returns the i-th slot of the run, ready for cmd.
func (r *pipelineRun) slot(s *Server, rc redcon.Conn, cl *conn, i int, cmd redcon.Command) *pipeSlot {
	for len(r.slots) <= i {
		sl := &pipeSlot{s: s, done: make(chan struct{}, 1)}
		sl.run = func() {
			sl.s.serveOne(sl.rc, sl.cl, sl.cmd, &sl.out)
			sl.done <- struct{}{}
		}
		r.slots = append(r.slots, sl)
	}
	sl := r.slots[i]
	sl.rc, sl.cl, sl.cmd = rc, cl, cmd
	sl.out = respWriter{proto: cl.proto, keepRefs: true, b: sl.out.b[:0], refs: sl.out.refs[:0]}
	return sl
}

// release forgets what the slot referred to (redcon's buffer, values
// read), keeping its buffers.
func (sl *pipeSlot) release() {
	sl.rc, sl.cl, sl.cmd = nil, nil, redcon.Command{}
	clear(sl.out.refs)
	b, refs := sl.out.b[:0], sl.out.refs[:0]
	if cap(b) > 64<<10 {
		b = nil // a large reply's buffer is not kept for the small ones
	}
	sl.out = respWriter{b: b, refs: refs}
}

// runConcurrent runs cmds, each on a worker with its reply collected,
// except the last, which runs on the connection's goroutine once the
// others are handed out (one hop fewer per run), and writes each reply
// once it and those before it are done, while the later commands run.
// At most cl's reply window runs or waits at once. A handler that
// panicked (its reply is the error) closes the connection after its
// reply: the replies after it are dropped, as the commands after a panic
// are when they run one at a time. Every command started has finished
// when it returns (their arguments point into redcon's buffer).
func (s *Server) runConcurrent(rc redcon.Conn, cl *conn, cmds []redcon.Command) {
	r := &cl.run
	started := 0
	w := &respWriter{rc: rc, proto: cl.proto, cl: cl}
	for i := range cmds {
		for started < len(cmds) && started-i < cl.replies.window(pipelineWindow) {
			j := started
			started++
			sl := r.slot(s, rc, cl, j, cmds[j])
			if j == len(cmds)-1 {
				sl.run() // the last: no worker left to wait for it
			} else {
				workers.Go(sl.run)
			}
		}
		sl := r.slots[i]
		<-sl.done
		if !cl.quit {
			w.send(&sl.out)
		}
		cl.replies.saw(sl.out.size())
		fatal := sl.out.fatal
		sl.release() // its values may go
		if fatal || cl.quit {
			for j := i + 1; j < started; j++ {
				<-r.slots[j].done
				r.slots[j].release()
			}
			if fatal {
				rc.ReadPipeline()
				cl.quit = true
				rc.Close()
			}
			return
		}
	}
}
