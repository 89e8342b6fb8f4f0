package server

import (
	"log/slog"
	"sync"
	"time"

	"github.com/kvarray/kvarray/array"
)

// What the server reports about itself, for metrics and logs: command
// latencies through an observer, the connections open, and the heal
// operations (rebuild, resync, scrub) that run in it with their progress.

// hooks are the optional observers of a server.
type hooks struct {
	command  func(name string, d time.Duration)
	store    func(mechanism string)
	logger   *slog.Logger
	replacer Replacer
}

// WithCommandObserver has fn called after every command a client is
// allowed to run, with the command's name (lower case) and how long it
// took. fn must be safe for concurrent use and quick.
func WithCommandObserver(fn func(name string, d time.Duration)) Option {
	return func(o *options) { o.hooks.command = fn }
}

// WithStoreObserver has fn called for every value a client stores, with
// the mechanism the array's mode picks for its size, or "per-call" for
// KVARRAY.SET (whose mechanism the client names).
func WithStoreObserver(fn func(mechanism string)) Option {
	return func(o *options) { o.hooks.store = fn }
}

func (s *Server) observeStore(n int, opts []array.CallOption) {
	if fn := s.o.hooks.store; fn != nil {
		if len(opts) > 0 {
			fn("per-call")
			return
		}
		fn(s.a.Mechanism(n))
	}
}

// WithLogger sets where the server logs events: heal operations started,
// their progress every few seconds, finished. Default: none.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.hooks.logger = l } }

func (s *Server) observe(name string, start time.Time) {
	if fn := s.o.hooks.command; fn != nil {
		fn(name, time.Since(start))
	}
}

func (s *Server) log() *slog.Logger {
	if s.o.hooks.logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.o.hooks.logger
}

// Clients returns the number of open client connections.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Task is a heal operation running in the server, with its last progress.
type Task struct {
	ID   int64  `json:"id"`
	Kind string `json:"kind"` // rebuild, resync or scrub
	// Dev is the device healed; -1 for scrub.
	Dev     int       `json:"device"`
	Started time.Time `json:"started"`
	Keys    int64     `json:"keys"`
	// Total is the number of keys to do, 0 while they are being listed.
	Total   int64         `json:"total"`
	Bytes   int64         `json:"bytes"`
	Failed  int64         `json:"failed"`
	Elapsed time.Duration `json:"elapsed_ns"`
}

// Fraction is the share of the keys done, 0 to 1.
func (t Task) Fraction() float64 {
	if t.Total <= 0 {
		return 0
	}
	return min(1, float64(t.Keys)/float64(t.Total))
}

// ETA is the time left at the rate so far; 0 when unknown.
func (t Task) ETA() time.Duration {
	if t.Keys <= 0 || t.Total <= t.Keys {
		return 0
	}
	return time.Duration(float64(t.Elapsed) * float64(t.Total-t.Keys) / float64(t.Keys))
}

// tasks are the heal operations running.
type tasks struct {
	mu        sync.Mutex
	next      int64
	run       map[int64]*Task
	lastScrub time.Time // when the last scrub in this server finished
}

// LastScrub returns when the last scrub run in this server finished
// (zero: none has).
func (s *Server) LastScrub() time.Time {
	s.tasks.mu.Lock()
	defer s.tasks.mu.Unlock()
	return s.tasks.lastScrub
}

// taskProgressEvery is how often a running task's progress is taken.
var taskProgressEvery = 250 * time.Millisecond

// taskLogEvery is how often a running task's progress is logged.
const taskLogEvery = 5 * time.Second

// Tasks returns the heal operations running now, oldest first.
func (s *Server) Tasks() []Task {
	s.tasks.mu.Lock()
	defer s.tasks.mu.Unlock()
	out := make([]Task, 0, len(s.tasks.run))
	for id := int64(1); id <= s.tasks.next; id++ {
		if t := s.tasks.run[id]; t != nil {
			out = append(out, *t)
		}
	}
	return out
}

// startTask registers a heal operation; the options it returns feed its
// progress, and done removes it and logs how it ended.
func (s *Server) startTask(kind string, dev int) (opts []array.HealOption, done func(err error)) {
	s.tasks.mu.Lock()
	if s.tasks.run == nil {
		s.tasks.run = map[int64]*Task{}
	}
	s.tasks.next++
	t := &Task{ID: s.tasks.next, Kind: kind, Dev: dev, Started: time.Now()}
	s.tasks.run[t.ID] = t
	s.tasks.mu.Unlock()
	attrs := []any{"task", kind}
	if dev >= 0 {
		attrs = append(attrs, "device", dev)
	}
	log := s.log().With(attrs...)
	log.Info(kind + " started")
	lastLog := time.Now()
	update := func(p array.Progress) {
		s.tasks.mu.Lock()
		t.Keys, t.Total, t.Bytes, t.Failed, t.Elapsed = p.Keys, p.Total, p.Bytes, p.Failed, p.Elapsed
		snap := *t
		s.tasks.mu.Unlock()
		if !p.Completed && time.Since(lastLog) >= taskLogEvery {
			lastLog = time.Now()
			log.Info(kind+" progress", "keys", snap.Keys, "total", snap.Total, "percent", int(100*snap.Fraction()), "eta", snap.ETA().Round(time.Second).String())
		}
	}
	done = func(err error) {
		s.tasks.mu.Lock()
		delete(s.tasks.run, t.ID)
		if kind == "scrub" && err == nil {
			s.tasks.lastScrub = time.Now()
		}
		snap := *t
		s.tasks.mu.Unlock()
		if err != nil {
			log.Warn(kind+" stopped", "keys", snap.Keys, "total", snap.Total, "err", err)
			return
		}
		log.Info(kind+" finished", "keys", snap.Keys, "failed", snap.Failed, "elapsed", time.Since(snap.Started).Round(time.Millisecond).String())
	}
	return []array.HealOption{array.WithProgress(update, taskProgressEvery)}, done
}
