// Command messaging measures what issue 37 asks of messaging beside the
// redis-benchmark rows (bench/serve.sh has those, PUBLISH to 10
// subscribers among them) against one server:
//
//	go run ./bench/messaging -addr 127.0.0.1:6379 -pid 1234 [-json]
//
// It prints, for the server at -addr whose process is -pid:
//   - the latency from an RPUSH to the reply of the BLPOP blocked on that
//     list, p50 and p99 over -pushes round trips, one at a time (the
//     pusher sends the next RPUSH only after the BLPOP answered);
//   - the server's resident memory (VmRSS) while -subscribers connections
//     are subscribed to one channel and a publisher sends -rate
//     messages/s to it for -duration, one of the subscribers never
//     reading its socket: the peak, the last, and whether the server
//     dropped the stalled one (client-output-buffer-limit pubsub), with
//     the messages published and delivered to the others per second.
//
// bench/messaging.sh runs it on kvarray serve and durable Redis in one run.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// report is what one run prints (-json: as one JSON object).
type report struct {
	Addr           string  `json:"addr"`
	BLPOPp50us     float64 `json:"blpop_p50_us"`
	BLPOPp99us     float64 `json:"blpop_p99_us"`
	Subscribers    int     `json:"subscribers"`
	PublishedPerS  float64 `json:"published_per_s"`
	DeliveredPerS  float64 `json:"delivered_per_s"`
	RSSBeforeMiB   float64 `json:"rss_before_mib"`
	RSSPeakMiB     float64 `json:"rss_peak_mib"`
	RSSLastMiB     float64 `json:"rss_last_mib"`
	StalledDropped bool    `json:"stalled_dropped"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "server address")
	pid := flag.Int("pid", 0, "server process, for its resident memory (/proc/PID/status)")
	pushes := flag.Int("pushes", 5000, "RPUSH → BLPOP round trips")
	subs := flag.Int("subscribers", 1000, "subscribed connections (one of them stalled)")
	rate := flag.Int("rate", 10000, "messages published per second")
	msg := flag.Int("message", 64, "message bytes")
	dur := flag.Duration("duration", 45*time.Second, "how long the publisher runs")
	asJSON := flag.Bool("json", false, "print the report as JSON")
	flag.Parse()
	if *pid == 0 {
		log.Fatal("messaging: -pid is needed for the server's memory")
	}
	r := report{Addr: *addr, Subscribers: *subs}
	var err error
	if r.BLPOPp50us, r.BLPOPp99us, err = blpopLatency(*addr, *pushes); err != nil {
		log.Fatalf("messaging: blpop: %v", err)
	}
	if err := subscribers(&r, *addr, *pid, *subs, *rate, *msg, *dur); err != nil {
		log.Fatalf("messaging: subscribers: %v", err)
	}
	if *asJSON {
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	}
	fmt.Printf("%s: RPUSH→BLPOP p50 %.0f µs, p99 %.0f µs; %d subscribers (1 stalled) at %.0f msg/s published, %.0f delivered/s: RSS %.1f MiB before, peak %.1f, last %.1f; stalled one dropped: %v\n",
		r.Addr, r.BLPOPp50us, r.BLPOPp99us, r.Subscribers, r.PublishedPerS, r.DeliveredPerS,
		r.RSSBeforeMiB, r.RSSPeakMiB, r.RSSLastMiB, r.StalledDropped)
}

// blpopLatency times n RPUSHes, each to the list a BLPOP is blocked on,
// from sending the RPUSH to the BLPOP's reply.
func blpopLatency(addr string, n int) (p50, p99 float64, err error) {
	ctx := context.Background()
	popper := goredis.NewClient(&goredis.Options{Addr: addr, ReadTimeout: -1, PoolSize: 1})
	pusher := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 1})
	defer popper.Close()
	defer pusher.Close()
	const list = "bench:messaging:blpop"
	if err := pusher.Del(ctx, list).Err(); err != nil {
		return 0, 0, err
	}
	sent := make(chan time.Time, 1)
	lat := make([]float64, 0, n)
	errc := make(chan error, 1)
	go func() {
		for range n {
			if _, err := popper.BLPop(ctx, 0, list).Result(); err != nil {
				errc <- err
				return
			}
			lat = append(lat, float64(time.Since(<-sent).Microseconds()))
			errc <- nil
		}
	}()
	for range n {
		// The BLPOP must be blocked before the push: wait until the server
		// counts it (INFO clients' blocked_clients).
		for blocked(ctx, pusher) < 1 {
			time.Sleep(50 * time.Microsecond)
		}
		sent <- time.Now()
		if err := pusher.RPush(ctx, list, "x").Err(); err != nil {
			return 0, 0, err
		}
		if err := <-errc; err != nil {
			return 0, 0, err
		}
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100], nil
}

// blocked is INFO clients' blocked_clients.
func blocked(ctx context.Context, c *goredis.Client) int {
	info, err := c.Info(ctx, "clients").Result()
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "blocked_clients:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// subscribers runs the memory test (see the package doc).
func subscribers(r *report, addr string, pid, n, rate, size int, dur time.Duration) error {
	const channel = "bench:messaging:fanout"
	var delivered atomic.Int64
	var wg sync.WaitGroup
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		conns[i] = c
		if _, err := fmt.Fprintf(c, "*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n", len(channel), channel); err != nil {
			return err
		}
		br := bufio.NewReader(c)
		// The confirmation: *3, $9 subscribe, the channel, :1 (5 lines
		// of two, 6 in all).
		for range 6 {
			if _, err := br.ReadString('\n'); err != nil {
				return fmt.Errorf("subscriber %d: %w", i, err)
			}
		}
		if i == 0 {
			continue // the stalled one: never read again
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			count(br, &delivered)
		}()
	}
	before, err := rss(pid)
	if err != nil {
		return err
	}
	r.RSSBeforeMiB = before
	pub := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 1})
	defer pub.Close()
	ctx := context.Background()
	payload := strings.Repeat("m", size)
	stop := time.Now().Add(dur)
	start := time.Now()
	published := 0
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	next := time.Now().Add(time.Second)
	for now := range tick.C {
		if now.After(stop) {
			break
		}
		// One pipeline per tick: rate/100 messages, fewer when the server
		// is behind (the deficit is not caught up: the rate is a target).
		p := pub.Pipeline()
		for range rate / 100 {
			p.Publish(ctx, channel, payload)
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
		published += rate / 100
		if now.After(next) {
			next = now.Add(time.Second)
			m, err := rss(pid)
			if err != nil {
				return err
			}
			r.RSSPeakMiB = max(r.RSSPeakMiB, m)
		}
	}
	elapsed := time.Since(start).Seconds()
	r.PublishedPerS = float64(published) / elapsed
	r.DeliveredPerS = float64(delivered.Load()) / elapsed
	if r.RSSLastMiB, err = rss(pid); err != nil {
		return err
	}
	r.RSSPeakMiB = max(r.RSSPeakMiB, r.RSSLastMiB)
	// The stalled subscriber: dropped if its socket ends once drained.
	_ = conns[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.Copy(io.Discard, conns[0])
	r.StalledDropped = err == nil
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	return nil
}

// count counts the messages a subscriber receives (the lines starting a
// push of three: *3) until its connection ends.
func count(br *bufio.Reader, delivered *atomic.Int64) {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
		if len(line) == 4 && line[0] == '*' && line[1] == '3' {
			delivered.Add(1)
		}
	}
}

// rss is the resident memory of pid in MiB.
func rss(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
