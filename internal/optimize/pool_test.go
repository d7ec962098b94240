package optimize

import (
	"container/heap"
	"slices"
	"sync"
	"testing"
	"time"
)

// occupy takes workers of p's workers and fills waiting of its waiting
// places, as running and queued jobs would; undo gives them back.
func (p *workPool) occupy(workers, waiting int) (undo func()) {
	p.mu.Lock()
	p.free -= workers
	held := make([]*waiter, waiting)
	for i := range held {
		held[i] = &waiter{urgency: 7, seq: ^uint64(0) - uint64(i), ready: make(chan struct{})}
		heap.Push(&p.waiting, held[i])
	}
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		for _, w := range held {
			for i, x := range p.waiting {
				if x == w {
					heap.Remove(&p.waiting, i)
					break
				}
			}
		}
		p.mu.Unlock()
		for range workers {
			p.release() // to a job that waits, as a finished job does
		}
	}
}

// TestUrgency: RFC 9218 §4.1's u parameter of a Priority field, as
// Chromium sends it, and the default 3 for none or a bad value.
func TestUrgency(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want int
	}{
		{nil, 3}, {[]string{"u=0"}, 0}, {[]string{"u=2, i"}, 2}, {[]string{"i, u=5"}, 5},
		{[]string{"u=9"}, 3}, {[]string{"u=x"}, 3}, {[]string{"i"}, 3},
	} {
		if got := Urgency(c.in); got != c.want {
			t.Errorf("Urgency(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestPoolOrder: with the one worker busy, jobs waiting start by urgency
// and then arrival; with byArrival, by arrival alone; a full queue
// refuses at once.
func TestPoolOrder(t *testing.T) {
	for _, byArrival := range []bool{false, true} {
		var busy, peak float64 // the running gauge, under mu
		var mu sync.Mutex
		p := newWorkPool(1, 8, byArrival, func(float64) {}, func(d float64) {
			mu.Lock()
			busy += d
			peak = max(peak, busy)
			mu.Unlock()
		}, nil)
		first, ok := p.acquire(3)
		if !ok {
			t.Fatal("a free worker was refused")
		}
		var order []int
		var wg sync.WaitGroup
		urgencies := []int{5, 3, 1, 3, 0}
		for i, u := range urgencies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				release, ok := p.acquire(u)
				if !ok {
					t.Errorf("job %d refused", i)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				release()
			}()
			// Arrival order is the order of the calls.
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				p.mu.Lock()
				n := len(p.waiting)
				p.mu.Unlock()
				if n == i+1 || time.Now().After(deadline) {
					break
				}
			}
		}
		first()
		wg.Wait()
		want := []int{4, 2, 1, 3, 0} // u=0, u=1, the two u=3 in arrival order, u=5
		if byArrival {
			want = []int{0, 1, 2, 3, 4}
		}
		if !slices.Equal(order, want) {
			t.Errorf("byArrival %v: jobs started in the order %v, want %v", byArrival, order, want)
		}
		if busy != 0 || peak != 1 {
			t.Errorf("running gauge %v at the end (want 0), %v at most (want 1: one worker)", busy, peak)
		}
	}
	p := newWorkPool(1, 1, false, func(float64) {}, nil, nil)
	undo := p.occupy(1, 1)
	if _, ok := p.acquire(0); ok {
		t.Error("a full queue took a job")
	}
	undo()
	if release, ok := p.acquire(0); !ok {
		t.Error("a free pool refused a job")
	} else {
		release()
	}
}

// TestPoolNextMiss: a job no response waits for (nextMiss) starts after
// every waiting job of any urgency, by arrival among its own, in either
// order; in a full queue a job a response waits for takes the place of
// the newest nextMiss job, whose acquire returns false, while a nextMiss
// job finding the queue full is refused.
func TestPoolNextMiss(t *testing.T) {
	for _, byArrival := range []bool{false, true} {
		p := newWorkPool(1, 3, byArrival, func(float64) {}, nil, nil)
		first, ok := p.acquire(3)
		if !ok {
			t.Fatal("a free worker was refused")
		}
		var mu sync.Mutex
		var order []int
		var refused []int
		var wg sync.WaitGroup
		// Jobs 0 and 1 are for the next miss; job 2 waits at urgency 7 and
		// job 3 at 0: the queue (3 places) is full at job 3, which takes
		// job 1's place.
		urgencies := []int{nextMiss, nextMiss, 7, 0}
		for i, u := range urgencies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				release, ok := p.acquire(u)
				mu.Lock()
				defer mu.Unlock()
				if !ok {
					refused = append(refused, i)
					return
				}
				order = append(order, i)
				release()
			}()
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				mu.Lock()
				gone := len(refused)
				mu.Unlock()
				p.mu.Lock()
				n := len(p.waiting)
				p.mu.Unlock()
				if n+gone == i+1 || time.Now().After(deadline) {
					break
				}
			}
		}
		if _, ok := p.acquire(nextMiss); ok {
			t.Errorf("byArrival %v: a next-miss job took a place in a full queue", byArrival)
		}
		first()
		wg.Wait()
		want := []int{3, 2, 0} // u=0, u=7, then the next miss
		if byArrival {
			want = []int{2, 3, 0} // arrival among the waited-for, then the next miss
		}
		if !slices.Equal(order, want) {
			t.Errorf("byArrival %v: jobs started in the order %v, want %v", byArrival, order, want)
		}
		if !slices.Equal(refused, []int{1}) {
			t.Errorf("byArrival %v: refused %v, want [1] (the newest next-miss job)", byArrival, refused)
		}
	}
}
