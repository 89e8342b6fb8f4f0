// Package workers runs short functions on goroutines that outlive them.
//
// Starting a goroutine per call costs more than a short call itself when
// the call is deep: a new goroutine starts with a small stack that grows,
// by copying, to the depth of what it runs (the array's store path, a
// Pebble read or commit). Under redis-benchmark SET, goroutines started
// per command and per Pebble call spent 7.5% of the server's CPU growing
// their stacks. Workers keep their grown stacks from one call to the next.
//
// Go(fn) hands fn to an idle worker, or to a new one when none is idle, so
// fn never waits for another call to finish; a worker exits after Idle
// without work. A function that never returns keeps its worker, as it
// would keep its own goroutine.
package workers

import "time"

// Idle is how long a worker waits for another function before exiting.
const Idle = 10 * time.Second

// work hands a function to an idle worker; unbuffered, so a send succeeds
// only when a worker is waiting.
var work = make(chan func())

// Go runs fn on a worker goroutine.
func Go(fn func()) {
	select {
	case work <- fn:
	default:
		go worker(fn)
	}
}

func worker(fn func()) {
	t := time.NewTimer(Idle)
	defer t.Stop()
	for {
		fn()
		fn = nil // not kept alive while idle
		t.Reset(Idle)
		select {
		case fn = <-work:
		case <-t.C:
			return
		}
	}
}
