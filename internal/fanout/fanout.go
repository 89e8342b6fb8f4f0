// Package fanout runs one call per index concurrently, a bounded number
// at a time: the array serves concurrent calls in parallel, so reading or
// deleting many values costs about the slowest of a window, not the sum.
package fanout

import "sync"

// Each runs fn(i) for i in 0..n-1, at most width at once, and returns the
// first error by index (nil if none). Every call runs, errors or not.
func Each(n, width int, fn func(i int) error) error {
	for _, err := range All(n, width, fn) {
		if err != nil {
			return err
		}
	}
	return nil
}

// All is Each returning every call's error, by index. One call runs on
// the caller's goroutine.
func All(n, width int, fn func(i int) error) []error {
	errs := make([]error, n)
	if n == 1 {
		errs[0] = fn(0)
		return errs
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(width, 1))
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			errs[i] = fn(i)
			<-sem
		}()
	}
	wg.Wait()
	return errs
}
