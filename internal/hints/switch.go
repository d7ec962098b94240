package hints

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"pep/internal/mode"
)

// Switch is the hints' run-time on/off switch, orthogonal to the mode and
// to the optimizer: config hints.enabled at start and on SIGHUP, PUT
// /hints on the admin API, pepctl hints on|off. Off, pepd neither learns
// nor hints nor fetches ahead; what was learned is kept. A switch takes
// effect for the next request. Safe for concurrent use; a nil *Switch is
// off.
type Switch = mode.Toggle

// NewSwitch returns a Switch set to on.
func NewSwitch(on bool) *Switch { return mode.NewToggle(on) }

// Prefetch outcomes, the values of pep_hints_prefetches_total's outcome
// label: a fetch ahead that Squid answered from its cache (hit) or
// fetched from the origin (miss), one that failed (error), one not made
// because no slot was free when its document arrived: the subscriber's or
// the overall bound on fetches in flight was reached (busy; a document
// that gets a slot has all its URLs fetched, a slot's worker taking one
// after another).
var PrefetchOutcomes = []string{"hit", "miss", "error", "busy"}

// Metrics are the hints' Prometheus series (Register).
type Metrics struct {
	// Prefetches counts fetches ahead by outcome (PrefetchOutcomes).
	Prefetches *prometheus.CounterVec
	// EarlyHints counts 103 Early Hints responses sent (documents with
	// hints requested over HTTP/2, internal/httpproxy).
	EarlyHints prometheus.Counter
}

// Register registers the hints' series with reg, every one present from
// the start:
//
//	pep_hints_enabled                  1 while the switch is on, 0 otherwise
//	pep_hints_changes_total            switches since start
//	pep_hints_sent_total               Link preload hints sent (Counts.Hinted)
//	pep_hints_hinted_loads_total       documents given at least one hint
//	pep_hints_used_total               hinted URLs the load then requested
//	pep_hints_unused_total             hinted URLs the load never requested
//	pep_hints_unused_bytes_total       their last seen sizes, bytes
//	pep_hints_loads_total              loads ended and learned
//	pep_hints_pages                    pages remembered
//	pep_hints_entries                  subresource entries remembered
//	pep_hints_evicted_total            pages evicted for max_pages
//	pep_hints_prefetches_total{outcome} fetches ahead by outcome
//	pep_hints_early_total              103 Early Hints responses sent (HTTP/2)
//
// Loads whose window has passed are ended (Flush) at each scrape, so that
// used and unused are current within one scrape. The error is a
// registration conflict.
func Register(reg prometheus.Registerer, l *Learner, sw *Switch) (*Metrics, error) {
	counts := func() Counts {
		l.Flush(time.Now())
		return l.Counts()
	}
	m := &Metrics{Prefetches: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "pep", Subsystem: "hints", Name: "prefetches_total",
		Help: "Fetches ahead of hinted URLs through Squid, by outcome: hit, miss, error, busy (not made: a bound was reached).",
	}, []string{"outcome"}),
		EarlyHints: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "pep", Subsystem: "hints", Name: "early_total",
			Help: "103 Early Hints responses sent ahead of documents with hints requested over HTTP/2.",
		})}
	for _, o := range PrefetchOutcomes {
		m.Prefetches.WithLabelValues(o)
	}
	cs := []prometheus.Collector{m.Prefetches, m.EarlyHints,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "pep", Subsystem: "hints", Name: "enabled",
			Help: "The hints switch: 1 on, 0 off."}, func() float64 {
			if sw.On() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "pep", Subsystem: "hints", Name: "changes_total",
			Help: "Hints switches since start (admin API, pepctl, SIGHUP)."}, func() float64 { return float64(sw.Changes()) }),
	}
	for _, c := range []struct {
		name, help string
		gauge      bool
		v          func(Counts) int64
	}{
		{"sent_total", "Link preload hints sent on documents.", false, func(c Counts) int64 { return c.Hinted }},
		{"hinted_loads_total", "Documents given at least one hint.", false, func(c Counts) int64 { return c.HintedLoads }},
		{"used_total", "Hinted URLs that the load then requested.", false, func(c Counts) int64 { return c.Used }},
		{"unused_total", "Hinted URLs that the load never requested.", false, func(c Counts) int64 { return c.Unused }},
		{"unused_bytes_total", "Last seen sizes of hinted URLs the load never requested, bytes.", false, func(c Counts) int64 { return c.UnusedBytes }},
		{"loads_total", "Page loads ended and learned.", false, func(c Counts) int64 { return c.Loads }},
		{"evicted_total", "Pages evicted for hints.max_pages.", false, func(c Counts) int64 { return c.Evicted }},
		{"pages", "Pages remembered.", true, func(c Counts) int64 { return int64(c.Pages) }},
		{"entries", "Subresource entries remembered over all pages.", true, func(c Counts) int64 { return int64(c.URLs) }},
	} {
		v := c.v
		f := func() float64 { return float64(v(counts())) }
		if c.gauge {
			cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "pep", Subsystem: "hints", Name: c.name, Help: c.help}, f))
		} else {
			cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "pep", Subsystem: "hints", Name: c.name, Help: c.help}, f))
		}
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
