package array

import (
	"context"
	"iter"
	"sync"
	"time"
)

// runEach calls fn for each value seq yields, from workers goroutines, in
// the order seq yields them, and stops handing out work (and iterating
// seq) once ctx is done.
func runEach[T any](ctx context.Context, seq iter.Seq[T], workers int, fn func(T)) {
	jobs := make(chan T)
	var wg sync.WaitGroup
	for w := 0; w < max(1, workers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := range jobs {
				fn(v)
			}
		}()
	}
	for v := range seq {
		if ctx.Err() != nil {
			break
		}
		jobs <- v
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
