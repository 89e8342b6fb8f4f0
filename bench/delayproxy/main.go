// Command delayproxy forwards TCP connections to another address and
// holds what the server answers for a delay before passing it on: a
// device behind a slow link, for bench/slowdevice.sh. SIGUSR1 turns the
// delay on and off (it starts off), so that one run measures the array
// healthy and then with the device slow, with the same connections.
//
// Usage: delayproxy -listen 127.0.0.1:7000 -to 127.0.0.1:6379 -delay 200ms
package main

import (
	"flag"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	to := flag.String("to", "", "address to forward to")
	delay := flag.Duration("delay", 200*time.Millisecond, "how long answers are held while the delay is on (SIGUSR1 toggles it)")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	var on atomic.Bool
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		for range sig {
			log.Printf("delay on: %v", !on.Load())
			on.Store(!on.Load())
		}
	}()
	log.Printf("listening on %s, forwarding to %s", ln.Addr(), *to)
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c, *to, func() time.Duration {
			if on.Load() {
				return *delay
			}
			return 0
		})
	}
}

// chunk is bytes the server sent, due to the client at a time.
type chunk struct {
	due time.Time
	b   []byte
}

// serve forwards c to addr: requests at once, answers each held for
// delay() from when it arrived, in order (a pipelined client's answers
// keep their order and their spacing).
func serve(c net.Conn, addr string, delay func() time.Duration) {
	defer c.Close()
	s, err := net.Dial("tcp", addr)
	if err != nil {
		log.Print(err)
		return
	}
	defer s.Close()
	go func() {
		_, _ = io.Copy(s, c)
		_ = s.Close()
	}()
	q := make(chan chunk, 1<<16)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 64<<10)
			n, err := s.Read(b)
			if n > 0 {
				q <- chunk{due: time.Now().Add(delay()), b: b[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range q {
		time.Sleep(time.Until(ch.due))
		if _, err := c.Write(ch.b); err != nil {
			return
		}
	}
}
