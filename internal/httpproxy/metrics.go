package httpproxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the HTTP path's Prometheus series (namespace pep, subsystem
// http). The URL rewriter counts its own work as pep_rewrite_* (see
// internal/rewrite):
//
//	pep_http_requests_total{mode,kind,outcome}     requests answered
//	pep_http_refused_total{reason}                 403s: not a subscriber, forbidden target, method
//	pep_http_bad_requests_total{code}              4xx/5xx the Go server sent before pepd saw a request (400, 431, 501)
//	pep_http_client_bytes_total{direction}         bytes read from / written to subscribers
//	pep_http_upstream_bytes_total{direction}       bytes written to / read from Squid and direct origins
//	pep_http_upstream_seconds{path}                time to upstream response headers (squid, direct)
//	pep_http_upstream_connections_total{path}      upstream connections opened
//	pep_http_upstream_open_connections             connections to Squid open now (idle and in use; Options.MaxUpstreamConns)
//	pep_http_upstream_pool_waits_total             requests that waited because the pool to Squid was at its bound
//	pep_http_open_connections                      subscriber connections open now
//	pep_http_connections_total                     subscriber connections accepted
//	pep_http_connection_limit_waits_total          accepts that waited because http.max_conns were open
//	pep_http_timeouts_total{phase}                 connections closed by read_header_timeout (read_header; tls_handshake for the VIP's TLS handshake), idle_timeout or write_timeout; HTTP/2 streams reset by write_timeout (stream_write)
//	pep_http_host_mismatch_total{action}           intercepted requests whose Host did not resolve to the original destination
//	pep_http_radio_header_bytes_removed            per response from Squid: header bytes the radio-side diet left out (Via, X-Cache, ...)
//	pep_http_responses_truncated_total             responses cut short because Squid's body failed (the subscriber sees the close)
//	pep_http_dns_prefetch_total{outcome}           hosts of a rewritten body looked up ahead (started), or not for the bound (skipped)
//	pep_http_tls_surplus_total{outcome}            TLS handshakes to the VIP held behind the subscriber's first to the same origin (https.hold_surplus): closed by the subscriber while held (no answer sent), or served after the hold
//	pep_http_tls_surplus_hold_seconds_total        time those handshakes were held, summed
type Metrics struct {
	requests        *prometheus.CounterVec
	refused         *prometheus.CounterVec
	badRequests     *prometheus.CounterVec
	clientBytes     *prometheus.CounterVec
	upstreamBytes   *prometheus.CounterVec
	upstreamSeconds *prometheus.HistogramVec
	upstreamConns   *prometheus.CounterVec
	upstreamOpen    prometheus.Gauge
	upstreamWaits   prometheus.Counter
	openConns       prometheus.Gauge
	conns           prometheus.Counter
	limitWaits      prometheus.Counter
	timeouts        *prometheus.CounterVec
	hostMismatch    *prometheus.CounterVec
	dietBytes       prometheus.Histogram
	truncated       prometheus.Counter
	prefetch        *prometheus.CounterVec
	surplus         *prometheus.CounterVec
	surplusHeld     prometheus.Counter

	clientIn, clientOut     prometheus.Counter
	upstreamIn, upstreamOut prometheus.Counter
	upSquid, upDirect       prometheus.Observer
}

// NewMetrics creates the series and registers them with reg (nil: not
// registered, for tests). The error is a registration conflict.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	opts := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "pep", Subsystem: "http", Name: name, Help: help}
	}
	m := &Metrics{
		requests: prometheus.NewCounterVec(opts("requests_total",
			"Requests answered, by mode at arrival, kind (intercepted, vip_path, vip_host) and outcome (squid, direct, refused, bad_request, upstream_error)."),
			[]string{"mode", "kind", "outcome"}),
		refused: prometheus.NewCounterVec(opts("refused_total",
			"Requests refused with 403, by reason (guard reasons, CONNECT, PURGE, cache_object, host mismatch), and connections closed at accept (per-subscriber connection limit)."),
			[]string{"reason"}),
		badRequests: prometheus.NewCounterVec(opts("bad_requests_total",
			"Error answers the HTTP server sent before a request reached pepd (400 malformed, 431 header too large, 501 transfer coding), by status code."),
			[]string{"code"}),
		clientBytes: prometheus.NewCounterVec(opts("client_bytes_total",
			"Bytes on subscriber connections, by direction (received, sent)."), []string{"direction"}),
		upstreamBytes: prometheus.NewCounterVec(opts("upstream_bytes_total",
			"Bytes on upstream connections (Squid, direct origins), by direction (sent, received)."), []string{"direction"}),
		upstreamSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "pep", Subsystem: "http", Name: "upstream_seconds",
			Help:    "Time from sending a request upstream to its response headers, by path (squid, direct).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
		}, []string{"path"}),
		upstreamConns: prometheus.NewCounterVec(opts("upstream_connections_total",
			"Upstream connections opened, by path (squid, direct)."), []string{"path"}),
		upstreamOpen: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "pep", Subsystem: "http", Name: "upstream_open_connections",
			Help: "Connections to Squid open now, idle and in use (bounded by the pool's MaxUpstreamConns)."}),
		upstreamWaits: prometheus.NewCounter(opts("upstream_pool_waits_total",
			"Requests that found the pool of connections to Squid at its bound and waited for one.")),
		openConns: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "pep", Subsystem: "http", Name: "open_connections",
			Help: "Subscriber connections open now."}),
		conns: prometheus.NewCounter(opts("connections_total", "Subscriber connections accepted.")),
		limitWaits: prometheus.NewCounter(opts("connection_limit_waits_total",
			"Accepts that had to wait because http.max_conns connections were open.")),
		timeouts: prometheus.NewCounterVec(opts("timeouts_total",
			"Subscriber connections closed by a timeout, by phase (read_header, tls_handshake, idle, write); stream_write: HTTP/2 streams reset because a write waited write_timeout for flow-control window."), []string{"phase"}),
		hostMismatch: prometheus.NewCounterVec(opts("host_mismatch_total",
			"Intercepted requests whose Host does not resolve to the original destination, by action (direct, refuse)."), []string{"action"}),
		truncated: prometheus.NewCounter(opts("responses_truncated_total",
			"Responses whose body from Squid failed before its end: the subscriber got the head and part of the body, then a close (a detectable truncation).")),
		prefetch: prometheus.NewCounterVec(opts("dns_prefetch_total",
			"Hosts named by a body pepd rewrote, looked up ahead of the browser's requests for them (started), or not because MaxDNSPrefetch lookups were running (skipped)."), []string{"outcome"}),
		surplus: prometheus.NewCounterVec(opts("tls_surplus_total",
			"TLS handshakes to the VIP held behind the same subscriber's first handshake with the same origin (https.hold_surplus), by outcome: closed (the subscriber closed it while held; pepd sent nothing) or served (it went on after the hold)."), []string{"outcome"}),
		surplusHeld: prometheus.NewCounter(opts("tls_surplus_hold_seconds_total",
			"Seconds the held TLS handshakes to the VIP waited, summed (https.hold_surplus).")),
		dietBytes: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "pep", Subsystem: "http", Name: "radio_header_bytes_removed",
			Help:    "Header bytes of one response from Squid that the radio-side diet left out (Via, X-Cache, X-Cache-Lookup, the optimizer's marks).",
			Buckets: []float64{0, 32, 64, 96, 128, 160, 192, 256, 384}}),
	}
	m.clientIn = m.clientBytes.WithLabelValues("received")
	m.clientOut = m.clientBytes.WithLabelValues("sent")
	m.upstreamIn = m.upstreamBytes.WithLabelValues("received")
	m.upstreamOut = m.upstreamBytes.WithLabelValues("sent")
	m.upSquid = m.upstreamSeconds.WithLabelValues("squid")
	m.upDirect = m.upstreamSeconds.WithLabelValues("direct")
	m.prefetch.WithLabelValues("started")
	m.prefetch.WithLabelValues("skipped")
	m.surplus.WithLabelValues("closed")
	m.surplus.WithLabelValues("served")
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.refused, m.badRequests, m.clientBytes,
			m.upstreamBytes, m.upstreamSeconds, m.upstreamConns, m.upstreamOpen, m.upstreamWaits, m.openConns, m.conns, m.limitWaits,
			m.timeouts, m.hostMismatch, m.dietBytes, m.truncated, m.prefetch, m.surplus, m.surplusHeld} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// Kinds of request (the "kind" label).
type kind uint8

const (
	kindNone        kind = iota // refused before it was classified
	kindIntercepted             // (a) intercepted, original destination known
	kindVIPPath                 // (b) to the VIP, VIP-form path /host/path
	kindVIPHost                 // (c) to the VIP, routed by Host (dns mode)
	numKinds
)

var kindNames = [numKinds]string{"none", "intercepted", "vip_path", "vip_host"}

// Outcomes of a request (the "outcome" label).
type outcome uint8

const (
	outSquid         outcome = iota // forwarded to Squid
	outDirect                       // forwarded to the original destination, bypassing Squid
	outRefused                      // 403
	outBadRequest                   // 400
	outUpstreamError                // 502, 504
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"squid", "direct", "refused", "bad_request", "upstream_error"}

// requestCounters holds the pep_http_requests_total children, resolved
// once so that the hot path does not hash label values.
type requestCounters [3][numKinds][numOutcomes]prometheus.Counter

func (m *Metrics) requestCounters(modes []string) *requestCounters {
	var rc requestCounters
	for i, md := range modes {
		for k := range numKinds {
			for o := range numOutcomes {
				rc[i][k][o] = m.requests.WithLabelValues(md, kindNames[k], outcomeNames[o])
			}
		}
	}
	return &rc
}
