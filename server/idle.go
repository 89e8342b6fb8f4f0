package server

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// CONFIG SET timeout and maxmemory-policy. timeout closes a client idle
// for that many seconds, checked once a second as Redis's clientsCron
// does, except (as Redis) a subscriber, a monitor and a blocked client;
// 0 (the default) never. maxmemory-policy is kept and reported: kvarray
// has no maxmemory (its data is on the devices), so nothing is evicted
// whatever the policy.

type idleConfig struct {
	timeout atomic.Int64 // seconds; 0 none
	once    sync.Once
	policy  atomic.Pointer[string]
}

var evictionPolicies = []string{"volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl",
	"allkeys-lru", "allkeys-lfu", "allkeys-random", "noeviction"}

func init() {
	params = append(params,
		param{name: "timeout",
			get: func(s *Server) string { return strconv.FormatInt(s.idle.timeout.Load(), 10) },
			set: func(s *Server, v string) error {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < 0 || n > 1<<31-1 {
					return fmt.Errorf("argument must be between 0 and %d inclusive", 1<<31-1)
				}
				s.idle.timeout.Store(n)
				if n > 0 {
					s.idle.once.Do(func() { go s.closeIdle() })
				}
				return nil
			}},
		param{name: "maxmemory-policy",
			get: (*Server).maxmemoryPolicy,
			set: func(s *Server, v string) error {
				v = strings.ToLower(v)
				for _, p := range evictionPolicies {
					if p == v {
						s.idle.policy.Store(&p)
						return nil
					}
				}
				return fmt.Errorf("argument(s) must be one of the following: %s", strings.Join(evictionPolicies, ", "))
			}})
}

// closeIdle runs until the server stops, closing the clients idle past
// the timeout.
func (s *Server) closeIdle() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			limit := s.idle.timeout.Load()
			if limit == 0 {
				continue
			}
			s.mu.Lock()
			conns := s.connList()
			s.mu.Unlock()
			for _, cl := range conns {
				if now.Sub(time.Unix(0, cl.last.Load())) <= time.Duration(limit)*time.Second || cl.push != nil || s.isBlocked(cl) {
					continue
				}
				cl.Conn.Close()
			}
		}
	}
}

func (s *Server) isBlocked(cl *conn) bool {
	s.blk.mu.Lock()
	defer s.blk.mu.Unlock()
	_, ok := s.blk.byConn[cl]
	return ok
}

// maxmemoryPolicy is CONFIG's and INFO's maxmemory-policy.
func (s *Server) maxmemoryPolicy() string {
	if p := s.idle.policy.Load(); p != nil {
		return *p
	}
	return "noeviction"
}
