package optimize

import (
	"container/heap"
	"strconv"
	"strings"
	"sync"
)

// workPool bounds work: at most workers jobs run at once and queue wait
// for a worker. Waiting jobs start in the order of their urgency (RFC
// 9218 §4.1: 0 the most urgent), then of their arrival; with byArrival
// set, in the order of arrival alone. backlog, when set, predicts when a
// job queued now would finish (the WebP and gzip pools).
type workPool struct {
	mu        sync.Mutex
	free      int // workers not running a job
	queue     int // most jobs waiting
	byArrival bool
	waiting   waiters
	seq       uint64
	depth     func(d float64)
	busy      func(d float64) // moves the running-jobs gauge; nil: none
	backlog   *backlog
}

// newWorkPool returns a pool of workers and queue waiting places; depth
// moves the queue-depth gauge (Metrics.queueDepth), busy the running-jobs
// gauge (Metrics.running; nil: none).
func newWorkPool(workers, queue int, byArrival bool, depth, busy func(float64), b *backlog) *workPool {
	return &workPool{free: workers, queue: queue, byArrival: byArrival, depth: depth, busy: busy, backlog: b}
}

// acquire returns at once with a worker when one is free and nothing
// waits (urgency: RFC 9218's 0-7, or nextMiss); else it takes a waiting
// place and waits for its turn. In a full queue a job a response waits
// for takes the place of the newest nextMiss job (dropNextMiss), whose
// acquire then returns false; otherwise acquire returns false at once.
// release frees the worker.
func (p *workPool) acquire(urgency int) (release func(), ok bool) {
	p.mu.Lock()
	if p.free > 0 && len(p.waiting) == 0 {
		p.free--
		p.mu.Unlock()
		p.started(1)
		return p.done, true
	}
	rank := p.rank(urgency)
	if len(p.waiting) >= p.queue && !p.dropNextMiss(rank) {
		p.mu.Unlock()
		return nil, false
	}
	w := &waiter{urgency: rank, seq: p.seq, ready: make(chan struct{})}
	p.seq++
	heap.Push(&p.waiting, w)
	p.mu.Unlock()
	p.depth(1)
	<-w.ready
	p.depth(-1)
	if w.dropped {
		return nil, false
	}
	p.started(1)
	return p.done, true
}

// full reports whether acquire(DefaultUrgency) would return false now:
// no worker free to start at once and every waiting place taken (a job a
// response waits for may still take a nextMiss job's place; the AVIF
// pool, its one user, has none).
func (p *workPool) full() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !(p.free > 0 && len(p.waiting) == 0) && len(p.waiting) >= p.queue
}

// started moves the running-jobs gauge by d.
func (p *workPool) started(d float64) {
	if p.busy != nil {
		p.busy(d)
	}
}

// done ends a job: the gauge down, its worker to the next (release).
func (p *workPool) done() {
	p.started(-1)
	p.release()
}

// dropNextMiss makes room in a full queue for a job of rank that a
// response waits for: the newest waiting nextMiss job leaves the queue
// (its acquire returns false: nothing runs, its response went long ago).
// It reports whether it made room. p.mu is held.
func (p *workPool) dropNextMiss(rank int) bool {
	if rank >= nextMiss {
		return false
	}
	last := -1
	for i, w := range p.waiting {
		if w.urgency == nextMiss && (last < 0 || w.seq > p.waiting[last].seq) {
			last = i
		}
	}
	if last < 0 {
		return false
	}
	w := heap.Remove(&p.waiting, last).(*waiter)
	w.dropped = true
	close(w.ready)
	return true
}

// nextMiss is the rank of a job that no response waits for: a transform
// the backlog predicted past the deadline (SkipBacklog), run for the next
// miss of its object. It starts after every job a response waits for,
// of any urgency, and its work is not counted ahead of theirs (backlog).
const nextMiss = 8

// rank is the urgency the pool orders a job of urgency by: 0 for every
// job when it orders by arrival alone; nextMiss stays nextMiss.
func (p *workPool) rank(urgency int) int {
	if urgency >= nextMiss {
		return nextMiss
	}
	if p.byArrival {
		return 0
	}
	return urgency
}

// release hands the worker to the first waiting job, or frees it.
func (p *workPool) release() {
	p.mu.Lock()
	if len(p.waiting) > 0 {
		w := heap.Pop(&p.waiting).(*waiter)
		p.mu.Unlock()
		close(w.ready)
		return
	}
	p.free++
	p.mu.Unlock()
}

// waiter is a job waiting for a worker.
type waiter struct {
	urgency int
	seq     uint64
	ready   chan struct{}
	dropped bool // left the queue without a worker (dropNextMiss); set before ready closes
}

// waiters is a heap of waiting jobs, the most urgent and then the oldest
// first (container/heap).
type waiters []*waiter

func (h waiters) Len() int { return len(h) }
func (h waiters) Less(i, j int) bool {
	return h[i].urgency < h[j].urgency || h[i].urgency == h[j].urgency && h[i].seq < h[j].seq
}
func (h waiters) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *waiters) Push(x any)   { *h = append(*h, x.(*waiter)) }
func (h *waiters) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	return w
}

// DefaultUrgency is a request's urgency without a Priority field (RFC
// 9218 §4.1: 3). Chromium sends none over HTTP/1.1, and over HTTP/2
// u=0 for documents and stylesheets, 1 for scripts, 2 for the first
// images (Medium) and more for the rest.
const DefaultUrgency = 3

// Urgency returns the u parameter of a Priority request field's values
// (RFC 9218 §4.1, a Structured Field Dictionary: "u=2, i"), 0 to 7;
// DefaultUrgency when it is absent or not an integer in that range.
func Urgency(values []string) int {
	u := DefaultUrgency
	for _, v := range values {
		for _, m := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(m), "=")
			if !ok || k != "u" {
				continue
			}
			if n, err := strconv.Atoi(val); err == nil && n >= 0 && n <= 7 {
				u = n
			}
		}
	}
	return u
}
