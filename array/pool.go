package array

import (
	"context"
	"sync"
	"time"
)

// runPool calls fn(i) for i in [0, n) from workers goroutines, in order of
// i, and stops handing out work once ctx is done.
func runPool(ctx context.Context, n, workers int, fn func(i int)) {
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < max(1, workers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				fn(i)
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
}

// every calls fn every interval until the returned stop is called; stop
// waits for a call in progress. A nil fn or interval ≤ 0 does nothing.
func every(interval time.Duration, fn func()) (stop func()) {
	if fn == nil || interval <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn()
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}
