package dnsproxy

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the DNS proxy's Prometheus metrics (namespace pep, subsystem
// dns); README.md lists them.
type metrics struct {
	queries     *counters                // type, outcome
	rewrites    *counters                // type, reason
	passthrough *counters                // reason
	upstream    *prometheus.HistogramVec // proto
	upErrors    *prometheus.CounterVec   // reason
	servfails   *prometheus.CounterVec   // source
	truncations prometheus.Counter
}

// newMetrics registers the metrics with reg; a nil reg registers nothing
// (the metrics still count).
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		queries: newCounters(f.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "dns", Name: "queries_total",
			Help: "Queries from clients by query type and outcome (rewritten, passed, refused, servfail, any, formerr)."},
			[]string{"type", "outcome"})),
		rewrites: newCounters(f.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "dns", Name: "rewrites_total",
			Help: "Answers rewritten, by query type and policy reason (domain, www, all)."},
			[]string{"type", "reason"})),
		passthrough: newCounters(f.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "dns", Name: "passthrough_total",
			Help: "Answers passed unchanged, by reason (no_match, excluded, special_use, mode, do_bit, rcode, nodata, signed, type, aaaa_pass, truncated, question, unparsable)."},
			[]string{"reason"})),
		upstream: f.NewHistogramVec(prometheus.HistogramOpts{Namespace: "pep", Subsystem: "dns", Name: "upstream_duration_seconds",
			Help:    "Time from sending a query to the carrier resolver to its matching answer, by transport.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5}},
			[]string{"proto"}),
		upErrors: f.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "dns", Name: "upstream_errors_total",
			Help: "Upstream problems by reason: timeout, network, malformed (answer that does not parse), mismatch (ID or question of another query), busy (max_inflight reached)."},
			[]string{"reason"}),
		servfails: f.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "dns", Name: "servfails_total",
			Help: "SERVFAIL answers sent to clients, by source: pepd (no usable upstream answer) or upstream (passed through)."},
			[]string{"source"}),
		truncations: f.NewCounter(prometheus.CounterOpts{Namespace: "pep", Subsystem: "dns", Name: "truncations_total",
			Help: "UDP answers truncated with TC because they exceeded the client's UDP payload size."}),
	}
	// Both sources exported from the start (at 0), so that an alert's
	// ratio of SERVFAILs to queries is 0, not absent, while none happen
	// (deploy/prometheus/pep-alerts.yml PepDNSServfail).
	m.servfails.WithLabelValues("pepd")
	m.servfails.WithLabelValues("upstream")
	return m
}

// counters caches the children of a CounterVec with one or two labels,
// so that counting a query does not hash its label values: the cache is
// an immutable map swapped on the first use of new values.
type counters struct {
	vec   *prometheus.CounterVec
	mu    sync.Mutex
	cache atomic.Pointer[map[[2]string]prometheus.Counter]
}

func newCounters(v *prometheus.CounterVec) *counters {
	c := &counters{vec: v}
	c.cache.Store(&map[[2]string]prometheus.Counter{})
	return c
}

// with returns the counter for label values a and b ("" for a vector
// with one label).
func (c *counters) with(a, b string) prometheus.Counter {
	k := [2]string{a, b}
	if ctr, ok := (*c.cache.Load())[k]; ok {
		return ctr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.cache.Load()
	if ctr, ok := old[k]; ok {
		return ctr
	}
	var ctr prometheus.Counter
	if b == "" {
		ctr = c.vec.WithLabelValues(a)
	} else {
		ctr = c.vec.WithLabelValues(a, b)
	}
	m := make(map[[2]string]prometheus.Counter, len(old)+1)
	maps.Copy(m, old)
	m[k] = ctr
	c.cache.Store(&m)
	return ctr
}

// typeLabel bounds the "type" label to the types worth telling apart.
func typeLabel(t uint16) string {
	switch t {
	case dns.TypeA, dns.TypeAAAA, dns.TypeHTTPS, dns.TypeSVCB, dns.TypeCNAME, dns.TypeMX, dns.TypeTXT,
		dns.TypePTR, dns.TypeSRV, dns.TypeNS, dns.TypeSOA, dns.TypeANY, dns.TypeDS, dns.TypeDNSKEY:
		return dns.TypeToString[t]
	}
	return "other"
}
