package workers

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestGo: every function runs, concurrently (a function blocked on
// another's result does not hold it up), and workers are reused: after a
// first round finishes, the second round's functions find idle workers.
func TestGo(t *testing.T) {
	const n = 50
	release := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		Go(func() {
			defer wg.Done()
			if i < n-1 {
				<-release // waits for the last function, started after it
			} else {
				close(release)
			}
		})
	}
	wg.Wait()
	// Let the first round's workers go idle, then run one function at a
	// time: each finds an idle worker, so no goroutine is added.
	time.Sleep(10 * time.Millisecond)
	base := runtime.NumGoroutine()
	for range 100 {
		done := make(chan struct{})
		Go(func() { close(done) })
		<-done
	}
	if g := runtime.NumGoroutine(); g > base {
		t.Errorf("%d goroutines after 100 calls on idle workers, %d before", g, base)
	}
	if base < n {
		t.Errorf("%d goroutines with %d workers idle: the workers exited", base, n)
	}
}
