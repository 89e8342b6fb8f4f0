package keylock

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestFIFOPerKey(t *testing.T) {
	tb := New()
	var mu sync.Mutex
	var order []int
	var tickets []*Ticket
	for i := 0; i < 50; i++ {
		tickets = append(tickets, tb.Enqueue([]byte("k")))
	}
	var wg sync.WaitGroup
	// Start the waiters in reverse order: they must still run in ticket order.
	for i := len(tickets) - 1; i >= 0; i-- {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := tickets[i].Wait(context.Background()); err != nil {
				t.Error(err)
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			tickets[i].Release()
		}()
	}
	wg.Wait()
	for i, v := range order {
		if v != i {
			t.Fatalf("turn %d ran at position %d: %v", v, i, order)
		}
	}
	if tb.Len() != 0 {
		t.Fatalf("%d keys left in the table", tb.Len())
	}
}

func TestMutualExclusion(t *testing.T) {
	tb := New()
	var inside, maxInside int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk, err := tb.Lock(context.Background(), []byte("k"))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			inside++
			maxInside = max(maxInside, inside)
			mu.Unlock()
			mu.Lock()
			inside--
			mu.Unlock()
			tk.Release()
		}()
	}
	wg.Wait()
	if maxInside != 1 {
		t.Fatalf("%d holders at once", maxInside)
	}
}

func TestOtherKeysDoNotWait(t *testing.T) {
	tb := New()
	a, _ := tb.Lock(context.Background(), []byte("a"))
	defer a.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := tb.Lock(ctx, []byte("b"))
	if err != nil {
		t.Fatalf("key b waited on key a: %v", err)
	}
	b.Release()
}

func TestCancelledWaitKeepsOrder(t *testing.T) {
	tb := New()
	first, _ := tb.Lock(context.Background(), []byte("k"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tb.Lock(ctx, []byte("k")); err == nil {
		t.Fatal("cancelled wait succeeded while the key was held")
	}
	third := tb.Enqueue([]byte("k"))
	got := make(chan struct{})
	go func() {
		_ = third.Wait(context.Background())
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("third turn ran while the first was still held")
	case <-time.After(20 * time.Millisecond):
	}
	first.Release()
	<-got
	third.Release()
	if tb.Len() != 0 {
		t.Fatalf("%d keys left", tb.Len())
	}
}

// countHolder counts the turns a Table reports.
type countHolder struct {
	mu         sync.Mutex
	begun, end int
}

func (h *countHolder) Begin() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.begun++
	return uint64(h.begun)
}

func (h *countHolder) End(ep uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if int(ep) > h.begun {
		panic("End of a turn never begun")
	}
	h.end++
}

func (h *countHolder) counts() (int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.begun, h.end
}

// TestHolderSeesHeldTurns: the holder hears of a turn from when it comes
// until it is released, and never of a turn that was not waited for or
// whose wait was cancelled.
func TestHolderSeesHeldTurns(t *testing.T) {
	h := &countHolder{}
	tb := New(WithHolder(h))
	first, err := tb.Lock(context.Background(), []byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	if b, e := h.counts(); b != 1 || e != 0 {
		t.Fatalf("while held: %d begun, %d ended, want 1, 0", b, e)
	}
	tb.Enqueue([]byte("k")).Release() // never waited for
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tb.Lock(ctx, []byte("k")); err == nil {
		t.Fatal("a turn behind a held one came with its context cancelled")
	}
	first.Release()
	if b, e := h.counts(); b != 1 || e != 1 {
		t.Fatalf("after release: %d begun, %d ended, want 1, 1", b, e)
	}
}
