package cachepolicy

import (
	"context"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Policy is pepd's cache decision for one request to Squid, called from
// both HTTP paths (the relay's requestHead and the standard library's
// rewriteRequest) so that they mark alike, and its counters. A nil
// *Policy marks nothing and counts nothing. It is safe for concurrent use.
type Policy struct {
	adm *Admission
	on  atomic.Bool

	// mu makes a URL's filter lookup and the in-flight table one step,
	// so that a request is either the first-seen one or sees it in
	// flight (Mark).
	mu       sync.Mutex
	inflight map[string]chan struct{} // first-seen requests between Mark and Ticket.Done

	firstSeen    atomic.Int64
	admitted     atomic.Int64
	private      atomic.Int64
	held         atomic.Int64
	holdTimeouts atomic.Int64
}

// HoldMax bounds how long Ticket.Wait holds a request behind the
// first-seen request for its URL: a first-seen request whose response
// head takes longer (a slow origin) no longer delays the others, which
// then go to Squid beside it (counted, pep_cache_hold_timeouts_total).
const HoldMax = 3 * time.Second

// NewPolicy returns a Policy; adm nil runs no admission (config
// cache.admission off, which then cannot be switched on without a
// restart); on says whether admission starts switched on.
func NewPolicy(adm *Admission, on bool) *Policy {
	p := &Policy{adm: adm, inflight: map[string]chan struct{}{}}
	p.on.Store(on && adm != nil)
	return p
}

// SetAdmission switches admission on or off (SIGHUP) and returns the
// previous state; without an Admission it stays off.
func (p *Policy) SetAdmission(on bool) (prev bool) {
	return p.on.Swap(on && p.adm != nil)
}

// AdmissionOn reports whether requests are being marked first-seen.
func (p *Policy) AdmissionOn() bool { return p != nil && p.on.Load() }

// Mark decides the marks of one request for target that goes to Squid:
// private is what PrivateUA found (the caller adds PrivateHeader);
// Ticket.First reports that the caller adds FirstHeader: admission is on,
// the request is a GET that is not private (Squid stores neither private
// requests nor anything but GET responses), and its URL is first-seen
// (Admission.FirstSeen). Requests that bypass Squid are never passed
// here.
//
// The caller calls Ticket.Wait before it sends the request to Squid and
// Ticket.Done once Squid's response head came (or the round trip
// failed). A first-seen request must be alone at Squid for its URL:
// Squid 5 applies store_miss only when the reply head is parsed, after
// concurrent requests may have joined the fetch (collapsed forwarding;
// they are then forwarded again, each on its own) or started their own
// (the first-seen entry takes the URL's public key and releases theirs,
// so the object is not stored). So requests for a URL whose first-seen
// request is in flight wait for its response head (at most HoldMax), then
// go together: one of them fetches and stores the object, the others
// collapse on it. A burst of identical requests for a new object costs
// the origin two fetches.
func (p *Policy) Mark(method string, target *url.URL, private bool) Ticket {
	if p == nil {
		return Ticket{}
	}
	if private {
		p.private.Add(1)
		return Ticket{}
	}
	if method != "GET" || !p.on.Load() {
		return Ticket{}
	}
	key := Key(target)
	p.mu.Lock()
	if p.adm.FirstSeen(key) {
		t := Ticket{First: true, p: p, key: key}
		if _, ok := p.inflight[key]; !ok {
			t.ch = make(chan struct{})
			p.inflight[key] = t.ch
		}
		p.mu.Unlock()
		p.firstSeen.Add(1)
		return t
	}
	ch := p.inflight[key]
	p.mu.Unlock()
	p.admitted.Add(1)
	return Ticket{p: p, ch: ch}
}

// Ticket is Policy.Mark's decision for one request. The zero Ticket
// marks nothing and holds nothing.
type Ticket struct {
	// First: the caller adds FirstHeader to the request.
	First bool
	p     *Policy
	key   string        // First: the URL's key in the in-flight table
	ch    chan struct{} // First: closed by Done; otherwise the first-seen request's to wait for, nil for none
}

// Wait holds a request whose URL has a first-seen request in flight until
// that request's Done, HoldMax or the end of ctx, whichever comes first
// (Policy.Mark says why); any other request returns at once. It reports
// whether the request was held.
func (t Ticket) Wait(ctx context.Context) bool {
	if t.First || t.ch == nil {
		return false
	}
	t.p.held.Add(1)
	timer := time.NewTimer(HoldMax)
	defer timer.Stop()
	select {
	case <-t.ch:
	case <-timer.C:
		t.p.holdTimeouts.Add(1)
	case <-ctx.Done():
	}
	return true
}

// Done ends a first-seen request's hold on its URL: the caller calls it
// when Squid's response head came or the round trip failed. It is a
// no-op for other tickets and after the first call.
func (t Ticket) Done() {
	if !t.First || t.ch == nil {
		return
	}
	t.p.mu.Lock()
	if t.p.inflight[t.key] == t.ch {
		delete(t.p.inflight, t.key)
		close(t.ch)
	}
	t.p.mu.Unlock()
}

// Counts are a Policy's counters since start.
type Counts struct {
	// FirstSeen are GET requests marked with FirstHeader: Squid serves
	// their misses without storing them (admissions refused).
	FirstSeen int64 `json:"first_seen"`
	// Admitted are GET requests admission let through unmarked (seen
	// before within the window, or a filter false positive).
	Admitted int64 `json:"admitted"`
	// Private are requests marked with PrivateHeader (CK-Private).
	Private int64 `json:"private"`
	// Held are requests held behind the first-seen request for their URL
	// (Ticket.Wait); HoldTimeouts those of them released by HoldMax.
	Held         int64 `json:"held"`
	HoldTimeouts int64 `json:"hold_timeouts"`
}

// Counts returns the counters; zero for a nil Policy.
func (p *Policy) Counts() Counts {
	if p == nil {
		return Counts{}
	}
	return Counts{FirstSeen: p.firstSeen.Load(), Admitted: p.admitted.Load(), Private: p.private.Load(),
		Held: p.held.Load(), HoldTimeouts: p.holdTimeouts.Load()}
}

// Register registers pepd's own cache series with reg:
//
//	pep_cache_first_seen_total    GET requests marked first-seen (admissions refused)
//	pep_cache_admitted_total      GET requests admission let through unmarked
//	pep_cache_private_total       requests marked private (CK-Private)
//	pep_cache_held_total          requests held behind their URL's first-seen request
//	pep_cache_hold_timeouts_total held requests released by HoldMax
//	pep_cache_admission_enabled   1 while admission marks requests, 0 otherwise
//
// The error is a registration conflict.
func (p *Policy) Register(reg prometheus.Registerer) error {
	for _, c := range []struct {
		name, help string
		v          *atomic.Int64
	}{
		{"first_seen_total", "GET requests pepd marked first-seen (Pep-First): Squid serves their misses without storing them (admissions refused).", &p.firstSeen},
		{"admitted_total", "GET requests second-hit admission let through unmarked (URL seen within cache.window, or a filter false positive).", &p.admitted},
		{"private_total", "Requests pepd marked private (CK-Private in User-Agent): never stored nor served from the cache.", &p.private},
		{"held_total", "GET requests held until the first-seen request for their URL had its response head from Squid (a burst for a new object).", &p.held},
		{"hold_timeouts_total", "Held requests released after the hold bound (3 s) instead of by the first-seen request's response head.", &p.holdTimeouts},
	} {
		v := c.v
		if err := reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "pep", Subsystem: "cache", Name: c.name, Help: c.help,
		}, func() float64 { return float64(v.Load()) })); err != nil {
			return err
		}
	}
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "pep", Subsystem: "cache", Name: "admission_enabled",
		Help: "Second-hit admission: 1 while pepd marks first-seen requests, 0 otherwise (cache.admission).",
	}, func() float64 {
		if p.AdmissionOn() {
			return 1
		}
		return 0
	}))
}
