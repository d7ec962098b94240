package cachepolicy

import (
	"net/url"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Policy is pepd's cache decision for one request to Squid, called from
// both HTTP paths (the relay's requestHead and the standard library's
// rewriteRequest) so that they mark alike, and its counters. A nil
// *Policy marks nothing and counts nothing. It is safe for concurrent use.
type Policy struct {
	adm *Admission
	on  atomic.Bool

	firstSeen atomic.Int64
	admitted  atomic.Int64
	private   atomic.Int64
}

// NewPolicy returns a Policy; adm nil runs no admission (config
// cache.admission off, which then cannot be switched on without a
// restart); on says whether admission starts switched on.
func NewPolicy(adm *Admission, on bool) *Policy {
	p := &Policy{adm: adm}
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
// private is what PrivateUA found (the caller adds PrivateHeader); first
// reports that the caller adds FirstHeader: admission is on, the request
// is a GET that is not private (Squid stores neither private requests
// nor anything but GET responses), and its URL is first-seen
// (Admission.FirstSeen). Requests that bypass Squid are never passed here.
func (p *Policy) Mark(method string, target *url.URL, private bool) (first bool) {
	if p == nil {
		return false
	}
	if private {
		p.private.Add(1)
		return false
	}
	if method != "GET" || !p.on.Load() {
		return false
	}
	if p.adm.FirstSeen(Key(target)) {
		p.firstSeen.Add(1)
		return true
	}
	p.admitted.Add(1)
	return false
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
}

// Counts returns the counters; zero for a nil Policy.
func (p *Policy) Counts() Counts {
	if p == nil {
		return Counts{}
	}
	return Counts{FirstSeen: p.firstSeen.Load(), Admitted: p.admitted.Load(), Private: p.private.Load()}
}

// Register registers pepd's own cache series with reg:
//
//	pep_cache_first_seen_total    GET requests marked first-seen (admissions refused)
//	pep_cache_admitted_total      GET requests admission let through unmarked
//	pep_cache_private_total       requests marked private (CK-Private)
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
