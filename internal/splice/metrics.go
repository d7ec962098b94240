package splice

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the splice's Prometheus metrics (namespace pep, subsystem
// splice); README.md lists them.
type metrics struct {
	splices    prometheus.Counter
	terminated prometheus.Counter
	resets     *prometheus.CounterVec // reason
	bytes      *prometheus.CounterVec // direction
	open       prometheus.Gauge
	dial       prometheus.Histogram
}

// Reasons a connection is reset; the "reason" label of
// pep_splice_resets_total.
const (
	ResetNotSubscriber = "not_subscriber" // source outside the subscriber ranges
	ResetNoSNI         = "no_sni"         // ClientHello without server_name
	ResetBadHello      = "bad_hello"      // not TLS, or a malformed ClientHello
	ResetBadSNI        = "bad_sni"        // SNI is not a host name
	ResetTimeout       = "timeout"        // no whole ClientHello within HelloTimeout
	ResetResolve       = "resolve"        // the SNI name does not resolve
	ResetDenied        = "denied"         // every address refused by the guard
	ResetDial          = "dial"           // no origin address accepted the connection
	ResetShutdown      = "shutdown"       // pepd is stopping
)

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		splices: f.NewCounter(prometheus.CounterOpts{Namespace: "pep", Subsystem: "splice", Name: "splices_total",
			Help: "TLS connections spliced to the origin named by their SNI."}),
		terminated: f.NewCounter(prometheus.CounterOpts{Namespace: "pep", Subsystem: "splice", Name: "terminated_total",
			Help: "TLS connections for the VIP's own HTTPS origin, handed to it instead of spliced."}),
		resets: f.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "splice", Name: "resets_total",
			Help: "TLS connections reset (SO_LINGER 0) by reason: not_subscriber, no_sni, bad_hello, bad_sni, timeout, resolve, denied, dial, shutdown."},
			[]string{"reason"}),
		bytes: f.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "splice", Name: "bytes_total",
			Help: "Bytes spliced by direction: up (client to origin, ClientHello included) and down."},
			[]string{"direction"}),
		open: f.NewGauge(prometheus.GaugeOpts{Namespace: "pep", Subsystem: "splice", Name: "open_connections",
			Help: "TLS connections being read or spliced."}),
		dial: f.NewHistogram(prometheus.HistogramOpts{Namespace: "pep", Subsystem: "splice", Name: "origin_connect_seconds",
			Help:    "Time to resolve the SNI name and connect to the origin.",
			Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10}}),
	}
}
