package server

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestListGroup (listgroup.go): 16 clients push to one list at once,
// each its own numbered elements at either end, with LPUSHX and RPUSHX
// among them, and 8 others pop from it meanwhile. Grouped into batches,
// every command must still behave as if it ran alone at its place:
//   - the pushes' replies are the lengths the list went through, so while
//     nothing pops, n pushes of one element each reply 1…n, each once;
//   - no element is popped twice or lost: popped and left are together
//     exactly what was pushed;
//   - each client's elements keep its order: those it RPUSHed read from
//     head to tail, and those it LPUSHed the other way, in what is left;
//     one popper at the head gets a client's RPUSHed elements in push
//     order, one at the tail its LPUSHed ones.
func TestListGroup(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	// An external list (elements stored apart) from the first push on.
	if err := ts.client().ConfigSet(ctx, "list-max-listpack-size", "4").Err(); err != nil {
		t.Fatal(err)
	}
	const producers, perProducer = 16, 60
	push := func(c *redis.Client, p, i int, key string) (int64, error) {
		v := fmt.Sprintf("%d:%d", p, i)
		switch {
		case p%4 == 3 && i > 0:
			return c.RPushX(ctx, key, v).Result()
		case p%2 == 1:
			return c.LPush(ctx, key, v).Result()
		}
		return c.RPush(ctx, key, v).Result()
	}

	// Pushes alone: the replies are 1…n.
	var mu sync.Mutex
	var lens []int64
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			c := ts.client()
			for i := range perProducer {
				n, err := push(c, p, i, "alone")
				if err != nil {
					t.Errorf("push %d:%d: %v", p, i, err)
					return
				}
				mu.Lock()
				lens = append(lens, n)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(lens)
	for i, n := range lens {
		if n != int64(i+1) {
			t.Fatalf("push replies sorted: %v…; want 1…%d, each once", lens[max(0, i-3):i+1], producers*perProducer)
		}
	}
	left, err := ts.client().LRange(ctx, "alone", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != producers*perProducer {
		t.Fatalf("the list holds %d elements, want %d", len(left), producers*perProducer)
	}
	checkOrder(t, "alone", left, asList)

	// Pushes and pops together.
	var popped []string
	var byPopper [8][]string
	stop := make(chan struct{})
	var pops sync.WaitGroup
	for q := range 8 {
		pops.Go(func() {
			c := ts.client()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var vs []string
				var err error
				if q%2 == 0 {
					vs, err = c.LPopCount(ctx, "mixed", 1+q/2).Result()
				} else {
					var v string
					v, err = c.RPop(ctx, "mixed").Result()
					vs = []string{v}
				}
				if err == redis.Nil {
					continue
				}
				if err != nil {
					t.Errorf("pop: %v", err)
					return
				}
				mu.Lock()
				popped = append(popped, vs...)
				mu.Unlock()
				byPopper[q] = append(byPopper[q], vs...)
			}
		})
	}
	for p := range producers {
		wg.Go(func() {
			c := ts.client()
			for i := range perProducer {
				if _, err := push(c, p, i, "mixed"); err != nil {
					t.Errorf("push %d:%d: %v", p, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	pops.Wait()
	left, err = ts.client().LRange(ctx, "mixed", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	// RPUSHX to a list popped empty pushes nothing: count what it did.
	all := append(slices.Clone(popped), left...)
	seen := map[string]bool{}
	for _, v := range all {
		if seen[v] {
			t.Fatalf("element %s popped or left twice", v)
		}
		seen[v] = true
	}
	for p := range producers {
		if p%4 == 3 {
			continue
		}
		for i := range perProducer {
			if v := fmt.Sprintf("%d:%d", p, i); !seen[v] {
				t.Fatalf("element %s pushed, acknowledged, neither popped nor left", v)
			}
		}
	}
	checkOrder(t, "mixed", left, asList)
	for q, vs := range byPopper {
		how := poppedHead
		if q%2 == 1 {
			how = poppedTail
		}
		checkOrder(t, fmt.Sprintf("popper %d", q), vs, how)
	}
}

// The ways checkOrder reads a sequence of elements.
const (
	asList     = iota // a list head to tail
	poppedHead        // one popper's, from the head
	poppedTail        // one popper's, from the tail
)

// checkOrder checks that each producer's elements keep its order in vs.
// In a list, RPUSHed elements are in push order and LPUSHed ones in
// reverse. One popper at the head gets RPUSHed ones in push order, one at
// the tail LPUSHed ones; the others may come out of order (a newer one,
// pushed after a pop, is popped before older ones). Producers p%4 == 3
// (an LPUSH, then RPUSHXes) are skipped.
func checkOrder(t *testing.T, what string, vs []string, how int) {
	t.Helper()
	last := map[int]int{}
	for _, v := range vs {
		ps, is, _ := strings.Cut(v, ":")
		p, _ := strconv.Atoi(ps)
		i, _ := strconv.Atoi(is)
		rpushed := p%2 == 0
		if p%4 == 3 || how == poppedHead && !rpushed || how == poppedTail && rpushed {
			continue
		}
		forward := rpushed || how == poppedTail
		if prev, ok := last[p]; ok && (forward && i < prev || !forward && i > prev) {
			t.Fatalf("%s: producer %d's %d after its %d (%v)", what, p, i, prev, vs)
		}
		last[p] = i
	}
}
