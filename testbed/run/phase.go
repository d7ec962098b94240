package run

import (
	"context"
	"sync"
	"time"
)

// phase is what a testbed's browser is doing on the shared machine: the
// discarded loads that prepare a session (a warm cache's passes, the hints'
// teaching pass, the waits for the optimizer behind them) or the loads a
// session measures.
type phase int

const (
	phasePrepare phase = iota
	phaseMeasure
)

func (p phase) String() string {
	if p == phasePrepare {
		return "prepare"
	}
	return "measure"
}

// phaseGate keeps the parallel testbeds of a campaign (-parallel) from
// measuring a page load while another testbed prepares: any number of
// testbeds may be in one phase at once, never two phases. A warm-up pass
// is the optimizer's heaviest work (every image a miss), and on a 2-core
// machine a load measured beside it measures the other testbed's
// transcodes as much as its own path (testbed/README.md, session 20: runs
// measured beside another testbed's first pass were 0.80-0.87 of direct's
// PLT, the others 0.64-0.66).
//
// Turns alternate: once a testbed waits for the other phase, no testbed
// joins the phase in progress, and when that phase's last testbed leaves,
// every waiter of the other phase enters together. So neither phase
// starves, and the testbeds of a phase start together. The zero value is
// ready for use; a campaign with no preparing session never waits.
type phaseGate struct {
	mu      sync.Mutex
	cond    *sync.Cond
	active  phase // the phase of the testbeds inside (or the last one)
	n       int   // testbeds inside
	waiting [2]int
	turn    int // waiters of active let in by the last change of turn
}

// enter blocks until the calling testbed may run phase p, and returns the
// function that leaves it (call it once) and how long it waited. It
// returns ctx's error, without entering, when ctx ends first.
func (g *phaseGate) enter(ctx context.Context, p phase) (leave func(), waited time.Duration, err error) {
	leaves, waited, err := g.enterN(ctx, p, 1)
	if err != nil {
		return nil, waited, err
	}
	return leaves[0], waited, nil
}

// enterN is enter for k testbeds that enter together (k >= 1): one wait,
// and k functions, one to leave for each.
func (g *phaseGate) enterN(ctx context.Context, p phase, k int) (leaves []func(), waited time.Duration, err error) {
	start := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
	other := 1 - p
	admit := func(waiter bool) bool {
		switch {
		case waiter && g.active == p && g.turn > 0:
			g.turn-- // one of the batch the change of turn let in
			return true
		case g.n == 0 && (g.active == p || g.waiting[other] == 0):
		case g.n > 0 && g.active == p && g.waiting[other] == 0:
		default:
			return false
		}
		if g.active != p {
			g.turn = 0
		}
		return true
	}
	if !admit(false) {
		stop := context.AfterFunc(ctx, func() {
			g.mu.Lock()
			g.cond.Broadcast()
			g.mu.Unlock()
		})
		defer stop()
		g.waiting[p]++
		in := false
		for !in && ctx.Err() == nil {
			if in = admit(true); !in {
				g.cond.Wait()
			}
		}
		g.waiting[p]--
		if !in {
			g.cond.Broadcast() // a waiter less may admit the other phase
			return nil, time.Since(start), ctx.Err()
		}
	}
	g.active = p
	g.n += k
	for range k {
		var once sync.Once
		leaves = append(leaves, func() {
			once.Do(func() {
				g.mu.Lock()
				defer g.mu.Unlock()
				g.n--
				if g.n == 0 && g.waiting[other] > 0 {
					// Their turn: every one waiting now enters.
					g.active, g.turn = other, g.waiting[other]
				}
				g.cond.Broadcast()
			})
		})
	}
	return leaves, time.Since(start), nil
}

// runPairs makes the testbeds of one run, one per mode (-split-modes),
// enter the measure phase together, so that every mode of a run measures
// its loads beside the same other testbeds: with the phase gate alone, the
// modes that prepare (warm) measured beside each other and the rest beside
// each other, and the CPU they shared differed (testbed/README.md, session
// 21: the 18 https pages pep never touches came out at 1.06 of direct's
// PLT and 1.15 of its FCP). Inside the measure phase the testbeds of a run
// also load their pages in lockstep (measureTurn.page): page i starts on
// every testbed of the run once each has finished page i-1, so a faster
// mode's last pages do not meet a lighter machine than a slower mode's
// (session 21: with the phase alone, the https controls pep never touches
// still came out at 1.08-1.30 of direct's PLT). The zero value pairs
// nothing.
type runPairs struct {
	mu     sync.Mutex
	size   int // testbeds of a run; 0 or 1: no pairing
	groups map[runKey]*pairGroup
}

type runKey struct {
	profile string
	run     int
}

type pairGroup struct {
	arrived int
	ready   chan struct{} // closed when the group entered (or failed to)
	leaves  []func()
	err     error
	step    lockstep
}

// measureTurn is one testbed's place in the measure phase: page waits for
// the other testbeds of its run before each page load, leave gives the
// place up (call it once; later calls do nothing).
type measureTurn struct {
	step  *lockstep // nil: not paired, page never waits
	leave func()
}

// page blocks until every testbed of the run still measuring has reached
// its next page load, and returns how long it waited, or ctx's error.
func (m *measureTurn) page(ctx context.Context) (time.Duration, error) {
	if m.step == nil {
		return 0, nil
	}
	return m.step.wait(ctx)
}

// lockstep is a reusable barrier for the testbeds of a run: each call of
// wait is one testbed's arrival at its next page, and the arrivals of
// every member still in (members) release them together. A member that
// leaves early (its session failed) is dropped, so the others go on.
type lockstep struct {
	mu      sync.Mutex
	cond    *sync.Cond
	members int
	arrived int
	gen     int // count of releases
}

func (l *lockstep) wait(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cond == nil {
		l.cond = sync.NewCond(&l.mu)
	}
	l.arrived++
	if l.arrived >= l.members {
		l.release()
		return 0, nil
	}
	gen := l.gen
	stop := context.AfterFunc(ctx, func() {
		l.mu.Lock()
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	defer stop()
	for l.gen == gen && ctx.Err() == nil {
		l.cond.Wait()
	}
	if l.gen == gen {
		l.arrived--
		return time.Since(start), ctx.Err()
	}
	return time.Since(start), nil
}

// drop takes a member out; the others waiting may now be all.
func (l *lockstep) drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.members--
	if l.arrived > 0 && l.arrived >= l.members {
		l.release()
	}
}

func (l *lockstep) release() {
	l.gen++
	l.arrived = 0
	if l.cond != nil {
		l.cond.Broadcast()
	}
}

// enterMeasure enters the measure phase of g for session s together with
// the other testbeds of its run (the last to arrive enters for all), and
// returns s's turn (its page barrier and its leave) and how long s waited.
// It returns ctx's error when ctx ends first.
func (r *runPairs) enterMeasure(ctx context.Context, g *phaseGate, s session) (*measureTurn, time.Duration, error) {
	if r.size < 2 {
		leave, waited, err := g.enter(ctx, phaseMeasure)
		if err != nil {
			return nil, waited, err
		}
		return &measureTurn{leave: leave}, waited, nil
	}
	start := time.Now()
	r.mu.Lock()
	if r.groups == nil {
		r.groups = map[runKey]*pairGroup{}
	}
	k := runKey{s.profile, s.run}
	grp := r.groups[k]
	if grp == nil {
		grp = &pairGroup{ready: make(chan struct{})}
		grp.step.members = r.size
		r.groups[k] = grp
	}
	me := grp.arrived
	grp.arrived++
	last := grp.arrived == r.size
	r.mu.Unlock()
	if last {
		grp.leaves, _, grp.err = g.enterN(ctx, phaseMeasure, r.size)
		close(grp.ready)
	}
	select {
	case <-grp.ready:
	case <-ctx.Done():
		return nil, time.Since(start), ctx.Err()
	}
	if grp.err != nil {
		return nil, time.Since(start), grp.err
	}
	var once sync.Once
	leave := func() {
		once.Do(func() {
			grp.step.drop()
			grp.leaves[me]()
		})
	}
	return &measureTurn{step: &grp.step, leave: leave}, time.Since(start), nil
}
