package netem

import (
	"math"
	"testing"
	"time"
)

const ms = time.Millisecond

// offer is one packet offered to a Scheduler in a test.
type offer struct {
	at   time.Duration
	size int
}

// outcome is what the Scheduler decided, written out in the tables.
type outcome struct {
	leave time.Duration
	v     Verdict
}

func TestSchedulerTiming(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Direction
		in   []offer
		want []outcome
	}{
		{
			// 1500 B at 12 Mbit/s is 1 ms on the wire, then 35 ms of propagation.
			name: "one packet leaves after N*8/R plus the delay",
			d:    Direction{Delay: 35 * ms, Rate: 12 * MbitPerSecond, Queue: Queue{Packets: 50}},
			in:   []offer{{0, 1500}},
			want: []outcome{{36 * ms, Deliver}},
		},
		{
			// 1000 B at 80 kbit/s is 100 ms: back-to-back packets queue behind each other.
			name: "back to back packets are serialized one after another",
			d:    Direction{Delay: 200 * ms, Rate: 80 * KbitPerSecond, Queue: Queue{Packets: 50}},
			in:   []offer{{0, 1000}, {0, 1000}, {10 * ms, 500}},
			want: []outcome{{300 * ms, Deliver}, {400 * ms, Deliver}, {450 * ms, Deliver}},
		},
		{
			name: "an idle serializer starts at the offer",
			d:    Direction{Delay: 10 * ms, Rate: 80 * KbitPerSecond, Queue: Queue{Packets: 50}},
			in:   []offer{{0, 1000}, {500 * ms, 100}},
			want: []outcome{{110 * ms, Deliver}, {520 * ms, Deliver}},
		},
		{
			// Packets limit 2: the queue holds the packet on the wire and one
			// waiting; the third offer while both are there is dropped,
			// and one arriving after the first left is accepted.
			name: "the queue drops beyond its packet limit",
			d:    Direction{Delay: 0, Rate: 80 * KbitPerSecond, Queue: Queue{Packets: 2}},
			in:   []offer{{0, 1000}, {0, 1000}, {50 * ms, 1000}, {100 * ms, 1000}, {100 * ms, 1000}},
			want: []outcome{{100 * ms, Deliver}, {200 * ms, Deliver}, {0, DropQueue}, {300 * ms, Deliver}, {0, DropQueue}},
		},
		{
			// 3000-byte limit: 1500 + 1000 fit, another 1000 would make 3500.
			name: "the queue drops beyond its byte limit",
			d:    Direction{Delay: 0, Rate: 80 * KbitPerSecond, Queue: Queue{Bytes: 3000}},
			in:   []offer{{0, 1500}, {0, 1000}, {0, 1000}, {0, 500}},
			want: []outcome{{150 * ms, Deliver}, {250 * ms, Deliver}, {0, DropQueue}, {300 * ms, Deliver}},
		},
		{
			name: "unlimited rate: delay only, no queue",
			d:    Direction{Delay: 50 * ms, Queue: Queue{Packets: 1}},
			in:   []offer{{0, 1500}, {0, 1500}, {1 * ms, 1500}},
			want: []outcome{{50 * ms, Deliver}, {50 * ms, Deliver}, {51 * ms, Deliver}},
		},
		{
			name: "100% loss model drops everything before the queue",
			d:    Direction{Delay: 1 * ms, Rate: 80 * KbitPerSecond, Loss: Loss{GilbertElliott: &GilbertElliott{LossGood: 1, LossBad: 1}}},
			in:   []offer{{0, 1000}, {0, 1000}},
			want: []outcome{{0, DropLoss}, {0, DropLoss}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewScheduler(tc.d, 1)
			for i, a := range tc.in {
				leave, v := s.Admit(a.at, a.size)
				if got := (outcome{leave, v}); got != tc.want[i] {
					t.Errorf("packet %d (%d B at %v): got leave %v %v, want %v %v", i, a.size, a.at, leave, v, tc.want[i].leave, tc.want[i].v)
				}
			}
		})
	}
}

func TestSchedulerBacklog(t *testing.T) {
	s := NewScheduler(Direction{Rate: 80 * KbitPerSecond, Queue: Queue{Packets: 10}}, 1)
	for range 3 {
		s.Admit(0, 1000) // leave at 100, 200, 300 ms
	}
	for _, tc := range []struct {
		at             time.Duration
		packets, bytes int
	}{{0, 3, 3000}, {100 * ms, 2, 2000}, {250 * ms, 1, 1000}, {300 * ms, 0, 0}} {
		if p, b := s.Backlog(tc.at); p != tc.packets || b != tc.bytes {
			t.Errorf("Backlog(%v) = %d packets %d B, want %d, %d", tc.at, p, b, tc.packets, tc.bytes)
		}
	}
}

func TestSchedulerJitterNeverReorders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		gap    time.Duration // between arrivals
		spread bool          // delays must spread over the jitter range
	}{
		// Dense: a packet drawn short waits for the one ahead of it.
		{"dense arrivals keep their order", 100 * time.Microsecond, false},
		// Sparse (gap above twice the jitter): delays are the raw draws.
		{"sparse arrivals spread over the jitter", 200 * ms, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewScheduler(Direction{Delay: 100 * ms, Jitter: 80 * ms}, 7)
			var last time.Duration
			var minD, maxD time.Duration = time.Hour, 0
			for i := range 5000 {
				now := time.Duration(i) * tc.gap
				leave, v := s.Admit(now, 100)
				if v != Deliver {
					t.Fatalf("packet %d: %v", i, v)
				}
				if leave < last {
					t.Fatalf("packet %d leaves at %v, before the previous one at %v", i, leave, last)
				}
				last = leave
				minD, maxD = min(minD, leave-now), max(maxD, leave-now)
			}
			// Delays stay within [Delay-Jitter, Delay+Jitter] = [20, 180] ms.
			if minD < 20*ms || maxD > 180*ms {
				t.Fatalf("delays in [%v, %v], want within [20ms, 180ms]", minD, maxD)
			}
			if tc.spread && (minD > 25*ms || maxD < 175*ms) {
				t.Fatalf("delays in [%v, %v], want them to reach both ends of [20ms, 180ms]", minD, maxD)
			}
		})
	}
}

func TestSchedulerLossRates(t *testing.T) {
	const n = 200000
	for _, tc := range []struct {
		name string
		loss Loss
		want float64 // long-run loss rate
		// mean burst length of consecutive losses (1/r for GE with loss_bad 100%)
		burst float64
	}{
		{"random 2%", Loss{Random: 0.02}, 0.02, 1 / 0.98},
		{"gilbert-elliott p=1% r=25%", Loss{GilbertElliott: &GilbertElliott{P: 0.01, R: 0.25, LossBad: 1}}, 0.01 / 0.26, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewScheduler(Direction{Loss: tc.loss}, 3)
			lost, bursts, prevLost := 0, 0, false
			for i := range n {
				_, v := s.Admit(time.Duration(i), 100)
				isLost := v == DropLoss
				if isLost {
					lost++
					if !prevLost {
						bursts++
					}
				}
				prevLost = isLost
			}
			rate := float64(lost) / n
			// 99% bound: 2.576 standard deviations, widened 3x for the
			// correlation of bursts.
			sd := math.Sqrt(tc.want * (1 - tc.want) / n)
			if math.Abs(rate-tc.want) > 3*2.576*sd {
				t.Errorf("loss rate %.4f, want %.4f", rate, tc.want)
			}
			if burst := float64(lost) / float64(bursts); math.Abs(burst-tc.burst)/tc.burst > 0.1 {
				t.Errorf("mean burst %.2f, want %.2f", burst, tc.burst)
			}
			if got := tc.loss.Mean(); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("Mean() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSchedulerSeedRepeats(t *testing.T) {
	d := Direction{Delay: 10 * ms, Jitter: 5 * ms, Loss: Loss{Random: 0.3}}
	a, b := NewScheduler(d, 99), NewScheduler(d, 99)
	for i := range 1000 {
		la, va := a.Admit(time.Duration(i)*ms, 100)
		lb, vb := b.Admit(time.Duration(i)*ms, 100)
		if la != lb || va != vb {
			t.Fatalf("packet %d: %v %v vs %v %v with the same seed", i, la, va, lb, vb)
		}
	}
}

func BenchmarkSchedulerAdmit(b *testing.B) {
	s := NewScheduler(Direction{Delay: 35 * ms, Rate: 12 * MbitPerSecond, Queue: Queue{Packets: 50}, Loss: Loss{Random: 0.01}}, 1)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Admit(time.Duration(i)*time.Millisecond, 1500)
	}
}

// TestSchedulerSetDirection: a new direction applies to the packets that
// arrive after it; a packet accepted before keeps its departure time, and
// the first one after never leaves before it (no reordering), even when
// the new direction's delay is shorter.
func TestSchedulerSetDirection(t *testing.T) {
	s := NewScheduler(Direction{Delay: 100 * time.Millisecond, Rate: 1_000_000}, 1) // 1 Mbit/s
	at1, v := s.Admit(0, 1250)                                                      // 10 ms on the wire
	if v != Deliver || at1 != 110*time.Millisecond {
		t.Fatalf("before: %v at %v, want deliver at 110ms", v, at1)
	}
	s.SetDirection(Direction{Delay: 5 * time.Millisecond})
	at2, v := s.Admit(time.Millisecond, 1250)
	if v != Deliver || at2 != at1 {
		t.Errorf("just after: %v at %v, want deliver at %v (not before the packet ahead)", v, at2, at1)
	}
	// Later, once the first has left: the new direction alone.
	at3, _ := s.Admit(200*time.Millisecond, 1250)
	if at3 != 205*time.Millisecond {
		t.Errorf("later: at %v, want 205ms (no rate, 5 ms delay)", at3)
	}
}
