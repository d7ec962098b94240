package optimize

import (
	"mime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the optimizer's Prometheus series (namespace pep, subsystem
// optimize). A nil *Metrics records nothing.
type Metrics struct {
	bytes      *prometheus.CounterVec   // transform, type, direction (in|out)
	transforms *prometheus.CounterVec   // transform, type
	skipped    *prometheus.CounterVec   // reason
	seconds    *prometheus.HistogramVec // transform
	depth      prometheus.Gauge
	served     *prometheus.CounterVec // transform, cache (hit|miss)
}

// NewMetrics registers the optimizer's series with reg:
//
//	pep_optimize_bytes_total{transform,type,direction}  body bytes into and out of transforms that were served
//	pep_optimize_transforms_total{transform,type}        transforms served (webp, gzip; by original type)
//	pep_optimize_skipped_total{reason}                   bodies passed untouched, by Skip* reason
//	pep_optimize_transform_seconds{transform}            time in a transform (libvips, gzip), seconds
//	pep_optimize_queue_depth                             transforms waiting for a worker
//	pep_optimize_served_total{transform,cache}           transformed variants sent to subscribers, Squid hit or miss
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "optimize", Name: "bytes_total",
			Help: "Body bytes into (direction=in) and out of (out) transforms that were served."}, []string{"transform", "type", "direction"}),
		transforms: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "optimize", Name: "transforms_total",
			Help: "Transforms done and served, by transform and original media type."}, []string{"transform", "type"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "optimize", Name: "skipped_total",
			Help: "Bodies of optimizable requests passed untouched, by reason."}, []string{"reason"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "pep", Subsystem: "optimize", Name: "transform_seconds",
			Help:    "Time in one transform (decode, encode), seconds.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1}}, []string{"transform"}),
		depth: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "pep", Subsystem: "optimize", Name: "queue_depth",
			Help: "Transforms waiting for a worker."}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "optimize", Name: "served_total",
			Help: "Transformed variants sent to subscribers, by Squid's cache result (hit: no transform ran)."}, []string{"transform", "cache"}),
	}
	for _, c := range []prometheus.Collector{m.bytes, m.transforms, m.skipped, m.seconds, m.depth, m.served} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) skip(reason string) {
	if m != nil {
		m.skipped.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) queueDepth(d float64) {
	if m != nil {
		m.depth.Add(d)
	}
}

// done records one transform of in bytes of media type mt into out bytes
// taking d; served is false when its result was not used (a skip).
func (m *Metrics) done(transform, mt string, d time.Duration, in, out int, served bool) {
	if m == nil {
		return
	}
	m.seconds.WithLabelValues(transform).Observe(d.Seconds())
	if !served {
		return
	}
	if t, _, err := mime.ParseMediaType(mt); err == nil {
		mt = t
	}
	m.transforms.WithLabelValues(transform, mt).Inc()
	m.bytes.WithLabelValues(transform, mt, "in").Add(float64(in))
	m.bytes.WithLabelValues(transform, mt, "out").Add(float64(out))
}

// Served counts a transformed variant (TransformHeader's value) sent to a
// subscriber; hit is Squid's X-Cache result. Called by pepd's HTTP path.
func (m *Metrics) Served(transform string, hit bool) {
	if m == nil {
		return
	}
	c := "miss"
	if hit {
		c = "hit"
	}
	m.served.WithLabelValues(transform, c).Inc()
}
