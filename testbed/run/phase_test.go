package run

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestPhaseGate: testbeds of one phase share the gate; a testbed of the
// other phase waits until the last one leaves; once it waits, no testbed
// joins the phase in progress; at the change of turn every waiter of the
// other phase enters together; a cancelled wait returns ctx's error and
// lets the others go on.
func TestPhaseGate(t *testing.T) {
	ctx := context.Background()
	var g phaseGate
	enter := func(p phase) func() {
		t.Helper()
		leave, _, err := g.enter(ctx, p)
		if err != nil {
			t.Fatalf("enter %v: %v", p, err)
		}
		return leave
	}
	// Measurements share the gate without waiting.
	m1, m2 := enter(phaseMeasure), enter(phaseMeasure)

	// A preparation waits for both.
	prepIn := make(chan func(), 2)
	go func() { prepIn <- enter(phasePrepare) }()
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.waiting[phasePrepare] == 1 })

	// A measurement arriving now waits too: no one joins a phase while the
	// other phase waits.
	m3In := make(chan func(), 1)
	go func() { m3In <- enter(phaseMeasure) }()
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.waiting[phaseMeasure] == 1 })
	// A second preparation queues behind the first.
	go func() { prepIn <- enter(phasePrepare) }()
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.waiting[phasePrepare] == 2 })

	m1()
	m1() // leaving twice counts once
	select {
	case <-prepIn:
		t.Fatal("a preparation entered while a measurement ran")
	case <-time.After(50 * time.Millisecond):
	}
	m2()
	// Both preparations enter together; the measurement still waits.
	p1, p2 := recvLeave(t, prepIn), recvLeave(t, prepIn)
	select {
	case <-m3In:
		t.Fatal("a measurement entered while a preparation ran")
	case <-time.After(50 * time.Millisecond):
	}
	// A cancelled wait for the measurement phase returns ctx's error.
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { _, _, err := g.enter(cctx, phaseMeasure); errc <- err }()
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.waiting[phaseMeasure] == 2 })
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("cancelled enter: %v, want context.Canceled", err)
	}
	p1()
	p2()
	m3 := recvLeave(t, m3In)
	m3()
	// An idle gate admits either phase at once.
	leave, waited, err := g.enter(ctx, phasePrepare)
	if err != nil || waited > time.Second {
		t.Fatalf("idle gate: waited %v, err %v", waited, err)
	}
	leave()
}

// TestPhaseGateExclusive: many testbeds entering both phases at random
// never have the two phases inside at once, and all of them get through.
func TestPhaseGateExclusive(t *testing.T) {
	var g phaseGate
	var mu sync.Mutex
	inside := [2]int{}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				p := phase((i + j) % 2)
				leave, _, err := g.enter(context.Background(), p)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inside[p]++
				if inside[1-p] != 0 {
					t.Errorf("%v and %v inside at once", p, 1-p)
				}
				mu.Unlock()
				time.Sleep(time.Duration(i%3) * 100 * time.Microsecond)
				mu.Lock()
				inside[p]--
				mu.Unlock()
				leave()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("testbeds stuck at the gate")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
	}
}

func recvLeave(t *testing.T, c chan func()) func() {
	t.Helper()
	select {
	case f := <-c:
		return f
	case <-time.After(5 * time.Second):
		t.Fatal("no entry in 5 s")
		return nil
	}
}

// TestRunPairs: the two testbeds of a run enter the measure phase
// together: the first waits for the second; once in, a preparation waits
// for both to leave, and a preparation waiting when the pair arrives does
// not split it (it enters after both).
func TestRunPairs(t *testing.T) {
	ctx := context.Background()
	var g phaseGate
	r := runPairs{size: 2}
	type entry struct {
		leave func()
		err   error
	}
	enter := func(run int, mode string) chan entry {
		c := make(chan entry, 1)
		go func() {
			turn, _, err := r.enterMeasure(ctx, &g, session{profile: "p", run: run, mode: mode})
			if err != nil {
				c <- entry{nil, err}
				return
			}
			c <- entry{turn.leave, nil}
		}()
		return c
	}
	// A preparation is in; run 1's direct arrives and waits for its pair.
	prep, _, err := g.enter(ctx, phasePrepare)
	if err != nil {
		t.Fatal(err)
	}
	d1 := enter(1, "direct")
	select {
	case <-d1:
		t.Fatal("run 1's direct entered without its pair")
	case <-time.After(50 * time.Millisecond):
	}
	u1 := enter(1, "url")
	// Both wait for the preparation, then enter together.
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.waiting[phaseMeasure] == 1 })
	// A second preparation queues behind the pair.
	prep2 := make(chan func(), 1)
	go func() { l, _, _ := g.enter(ctx, phasePrepare); prep2 <- l }()
	prep()
	a, b := <-d1, <-u1
	if a.err != nil || b.err != nil {
		t.Fatal(a.err, b.err)
	}
	g.mu.Lock()
	n := g.n
	g.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d testbeds in the measure phase, want the pair", n)
	}
	a.leave()
	select {
	case <-prep2:
		t.Fatal("a preparation entered while half the pair measured")
	case <-time.After(50 * time.Millisecond):
	}
	b.leave()
	recvLeave(t, prep2)()
	// Without pairing (size 1), enterMeasure is the gate's enter.
	turn, _, err := (&runPairs{}).enterMeasure(ctx, &g, session{profile: "p", run: 2, mode: "direct"})
	if err != nil {
		t.Fatal(err)
	}
	if w, err := turn.page(ctx); w != 0 || err != nil {
		t.Fatalf("an unpaired testbed's page waited %v, %v", w, err)
	}
	turn.leave()
}

// TestLockstep: the testbeds of a run start each page together; a faster
// one waits at its next page for the slower; one that leaves early (its
// session failed) no longer holds the others back; a cancelled wait
// returns ctx's error.
func TestLockstep(t *testing.T) {
	ctx := context.Background()
	var g phaseGate
	r := runPairs{size: 2}
	turns := make(chan *measureTurn, 2)
	for _, m := range []string{"direct", "url"} {
		go func() {
			turn, _, err := r.enterMeasure(ctx, &g, session{profile: "p", run: 1, mode: m})
			if err != nil {
				t.Error(err)
			}
			turns <- turn
		}()
	}
	fast, slow := <-turns, <-turns
	if fast == nil || slow == nil {
		t.FailNow()
	}
	if fast.step != slow.step {
		t.Fatal("the testbeds of one run got different barriers")
	}
	// Page 0: both arrive, both go.
	done := make(chan error, 1)
	go func() { _, err := slow.page(ctx); done <- err }()
	if _, err := fast.page(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Page 1: the fast testbed waits until the slow one arrives.
	go func() { _, err := fast.page(ctx); done <- err }()
	select {
	case <-done:
		t.Fatal("page 1 began before the run's other testbed finished page 0")
	case <-time.After(50 * time.Millisecond):
	}
	w, err := slow.page(ctx)
	if err != nil || w != 0 {
		t.Fatalf("the last arrival waited %v, %v", w, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Page 2: a cancelled wait ends with ctx's error and counts no arrival.
	cctx, cancel := context.WithCancel(ctx)
	go func() { _, err := fast.page(cctx); done <- err }()
	waitFor(t, func() bool { fast.step.mu.Lock(); defer fast.step.mu.Unlock(); return fast.step.arrived == 1 })
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("cancelled wait: %v, want context.Canceled", err)
	}
	// The fast one waits again; the slow one's session fails and leaves:
	// the fast one goes on alone, and later pages do not wait.
	go func() { _, err := fast.page(ctx); done <- err }()
	waitFor(t, func() bool { fast.step.mu.Lock(); defer fast.step.mu.Unlock(); return fast.step.arrived == 1 })
	slow.leave()
	slow.leave() // a second call does nothing
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if w, err := fast.page(ctx); w != 0 || err != nil {
		t.Fatalf("alone, a page waited %v, %v", w, err)
	}
	fast.leave()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n != 0 {
		t.Fatalf("%d testbeds still in the measure phase", g.n)
	}
}
