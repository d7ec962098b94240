package dnsproxy

import (
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the DNS proxy's Prometheus metrics (namespace pep, subsystem
// dns); README.md lists them.
type metrics struct {
	queries     *prometheus.CounterVec   // type, outcome
	rewrites    *prometheus.CounterVec   // type, reason
	passthrough *prometheus.CounterVec   // reason
	upstream    *prometheus.HistogramVec // proto
	upErrors    *prometheus.CounterVec   // reason
	servfails   *prometheus.CounterVec   // source
	truncations prometheus.Counter
}

// newMetrics registers the metrics with reg; a nil reg registers nothing
// (the metrics still count).
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		queries: f.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "dns", Name: "queries_total",
			Help: "Queries from clients by query type and outcome (rewritten, passed, refused, servfail, any, formerr)."},
			[]string{"type", "outcome"}),
		rewrites: f.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "dns", Name: "rewrites_total",
			Help: "Answers rewritten, by query type and policy reason (domain, www, all)."},
			[]string{"type", "reason"}),
		passthrough: f.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "dns", Name: "passthrough_total",
			Help: "Answers passed unchanged, by reason (no_match, excluded, special_use, mode, do_bit, rcode, nodata, signed, type, aaaa_pass, truncated, question, unparsable)."},
			[]string{"reason"}),
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
