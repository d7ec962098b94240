package netem

import (
	"math/rand/v2"
	"time"
)

// Verdict is what the scheduler decided for one packet.
type Verdict int

// Verdicts, in the order a packet meets the stages of a Direction.
const (
	Deliver   Verdict = iota // leaves the link at the returned time
	DropLoss                 // lost by the loss model
	DropQueue                // refused by the full drop-tail queue
)

func (v Verdict) String() string {
	switch v {
	case Deliver:
		return "deliver"
	case DropLoss:
		return "drop-loss"
	case DropQueue:
		return "drop-queue"
	}
	return "verdict?"
}

// Scheduler decides, for one direction of a link, whether a packet is
// delivered and when. It is a pure function of its inputs: the caller passes
// the arrival time as an offset from any fixed origin, so a test can drive it
// with a fake clock. It is not safe for concurrent use.
//
// A packet of n IP bytes arriving at t, when the serializer is idle, leaves at
// t + n*8/Rate + Delay (+ jitter). The serializer sends one packet at a time,
// first come first served (Mahimahi's link_queue, mm-link(1)); the queue holds
// the packets that have not finished serialization, the one on the wire
// included, and refuses a packet that would exceed the limit (drop-tail).
// Jitter never reorders: a packet never leaves before the one ahead of it.
type Scheduler struct {
	d        Direction
	rng      *rand.Rand
	geBad    bool          // Gilbert-Elliott state
	txFree   time.Duration // when the serializer finishes the last accepted packet
	backlog  []txEntry     // accepted packets not yet serialized, FIFO
	head     int           // first live entry in backlog
	qBytes   int           // IP bytes in backlog[head:]
	lastSend time.Duration // departure time of the last accepted packet
}

type txEntry struct {
	end  time.Duration
	size int
}

// NewScheduler returns a Scheduler for d whose random draws (loss, jitter)
// come from seed: the same seed and arrivals give the same verdicts.
func NewScheduler(d Direction, seed uint64) *Scheduler {
	return &Scheduler{d: d, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// SetDirection makes the packets that arrive from now on meet d. The
// packets already accepted keep their departure times: the serializer
// finishes them at the old rate before it starts a new one, and no later
// packet leaves before them (never reordered). The loss model's state and
// the random draws carry on.
func (s *Scheduler) SetDirection(d Direction) { s.d = d }

// Backlog is the number of packets and IP bytes in the queue at time now:
// those accepted that have not finished serialization.
func (s *Scheduler) Backlog(now time.Duration) (packets, bytes int) {
	s.expire(now)
	return len(s.backlog) - s.head, s.qBytes
}

func (s *Scheduler) expire(now time.Duration) {
	for s.head < len(s.backlog) && s.backlog[s.head].end <= now {
		s.qBytes -= s.backlog[s.head].size
		s.head++
	}
	if s.head == len(s.backlog) {
		s.backlog, s.head = s.backlog[:0], 0
	} else if s.head > 1024 && s.head*2 > len(s.backlog) {
		n := copy(s.backlog, s.backlog[s.head:])
		s.backlog, s.head = s.backlog[:n], 0
	}
}

// lost draws the loss model once per packet.
func (s *Scheduler) lost() bool {
	if g := s.d.Loss.GilbertElliott; g != nil {
		var lost bool
		if s.geBad {
			lost = s.draw(g.LossBad)
			if s.draw(g.R) {
				s.geBad = false
			}
		} else {
			lost = s.draw(g.LossGood)
			if s.draw(g.P) {
				s.geBad = true
			}
		}
		return lost
	}
	return s.draw(s.d.Loss.Random)
}

func (s *Scheduler) draw(p Probability) bool {
	switch {
	case p <= 0:
		return false
	case p >= 1:
		return true
	}
	return s.rng.Float64() < float64(p)
}

// Admit schedules a packet of size IP bytes that arrives at now. Arrivals must
// come in non-decreasing now. It returns the verdict and, for Deliver, the
// time the packet leaves the link (same origin as now).
func (s *Scheduler) Admit(now time.Duration, size int) (time.Duration, Verdict) {
	s.expire(now)
	if s.lost() {
		return 0, DropLoss
	}
	if s.d.Rate > 0 {
		q := s.d.Queue
		if q.Packets > 0 && len(s.backlog)-s.head >= q.Packets ||
			q.Bytes > 0 && s.qBytes+size > q.Bytes {
			return 0, DropQueue
		}
	}
	start := max(now, s.txFree)
	end := start + s.d.Rate.TxTime(size)
	if s.d.Rate > 0 {
		s.txFree = end
		s.backlog = append(s.backlog, txEntry{end: end, size: size})
		s.qBytes += size
	}
	delay := s.d.Delay
	if j := s.d.Jitter; j > 0 {
		delay += time.Duration(s.rng.Int64N(int64(2*j)+1)) - j
	}
	at := max(end+delay, s.lastSend)
	s.lastSend = at
	return at, Deliver
}
