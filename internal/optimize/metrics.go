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
	reuse      *prometheus.CounterVec // transform
	avifs      *prometheus.CounterVec // outcome
	avifDepth  prometheus.Gauge
	backlog    *prometheus.GaugeVec // transform
	busy       prometheus.Gauge
	linkWaits  prometheus.Counter
	// linkShortWaits counts the waits Options.LinkFloor shortened.
	linkShortWaits prometheus.Counter
	quicks         *prometheus.CounterVec // outcome
}

// NewMetrics registers the optimizer's series with reg:
//
//	pep_optimize_bytes_total{transform,type,direction}  body bytes into and out of transforms that were served
//	pep_optimize_transforms_total{transform,type}        transformed bodies served (webp, avif, jpeg, gzip, br; by original type)
//	pep_optimize_skipped_total{reason}                   bodies passed untouched, by Skip* reason
//	pep_optimize_transform_seconds{transform}            time in a transform (webp, avif, quick: libvips; gzip, br), seconds
//	pep_optimize_queue_depth                             transforms waiting for a worker
//	pep_optimize_served_total{transform,cache}           transformed variants sent to subscribers, Squid hit or miss
//	pep_optimize_results_reused_total{transform}         misses answered from a finished transform (deferred before), no transform run
//	pep_optimize_avif_total{outcome}                     image requests that accept AVIF, by outcome (AVIFServed, AVIFLarger, AVIFPending, AVIFLate, AVIFOverload)
//	pep_optimize_avif_queue_depth                        AVIF searches waiting for an AVIF worker
//	pep_optimize_running                                 transforms running on a worker (WebP, text and AVIF; with the queue depths 0: the optimizer is idle)
//	pep_optimize_quick_total{outcome}                    image responses turned away by the backlog that tried the quick WebP (QuickServed, QuickMissed, QuickLate, QuickOverload)
//	pep_optimize_link_waits_total                        responses allowed a wait above optimize.deadline by their subscriber's link rate (Options.LinkDeadline)
//	pep_optimize_link_short_waits_total                  responses given a wait below optimize.deadline by their subscriber's link rate (Options.LinkFloor)
//	pep_optimize_backlog_seconds{transform}              estimated work of the WebP (webp), text (gzip: gzip and brotli), quick WebP (quick) or AVIF (avif) transforms waiting and running, seconds (what SkipBacklog and AVIFLate predict from)
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "optimize", Name: "bytes_total",
			Help: "Body bytes into (direction=in) and out of (out) transforms that were served."}, []string{"transform", "type", "direction"}),
		transforms: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "optimize", Name: "transforms_total",
			Help: "Transformed bodies served to Squid (fresh or reused), by transform and original media type."}, []string{"transform", "type"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "optimize", Name: "skipped_total",
			Help: "Bodies of optimizable requests passed untouched, by reason."}, []string{"reason"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "pep", Subsystem: "optimize", Name: "transform_seconds",
			Help:    "Time in one transform (decode, encode), seconds.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5}}, []string{"transform"}),
		depth: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "pep", Subsystem: "optimize", Name: "queue_depth",
			Help: "Transforms waiting for a worker."}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "optimize", Name: "served_total",
			Help: "Transformed variants sent to subscribers, by Squid's cache result (hit: no transform ran)."}, []string{"transform", "cache"}),
		reuse: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "optimize", Name: "results_reused_total",
			Help: "Misses answered from a transform finished earlier (one that was deferred, or a body seen before): no transform ran."}, []string{"transform"}),
		avifs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "optimize", Name: "avif_total",
			Help: "Image requests accepting AVIF whose WebP outcome was known, by outcome: served (AVIF smaller), larger (WebP or original kept), pending (AVIF encoding: served unstored), late (the AVIF backlog predicted it past the deadline: served unstored at once), overload (AVIF queue full)."}, []string{"outcome"}),
		avifDepth: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "pep", Subsystem: "optimize", Name: "avif_queue_depth",
			Help: "AVIF searches waiting for an AVIF worker."}),
		busy: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "pep", Subsystem: "optimize", Name: "running",
			Help: "Transforms running on a worker (WebP, text and AVIF), for a response or for the next miss."}),
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "pep", Subsystem: "optimize", Name: "backlog_seconds",
			Help: "Estimated work of the transforms waiting and running (each from its size by its format's cost line, fitted to recent transforms), seconds, by pool (webp; gzip: the text transforms, gzip and brotli; quick: the quick WebPs; avif: the AVIF searches)."}, []string{"transform"}),
		quicks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "optimize", Name: "quick_total",
			Help: "Image responses the backlog turned away that tried the quick WebP (optimize.quick_quality), by outcome: served (reached the SSIM target in time; not stored), missed (below the target or not smaller), late (predicted or found past the wait), overload (queue full)."}, []string{"outcome"}),
		linkShortWaits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "pep", Subsystem: "optimize", Name: "link_short_waits_total",
			Help: "Responses given a wait for their transform shorter than optimize.deadline, by their subscriber's downlink rate (optimize.link_floor): the link needs less than the deadline for the originals of that subscriber's waiting responses and this one."}),
		linkWaits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "pep", Subsystem: "optimize", Name: "link_waits_total",
			Help: "Responses allowed to wait for their transform longer than optimize.deadline, by their subscriber's downlink rate (optimize.link_deadline): the link needs longer than the deadline for the originals of that subscriber's waiting responses and this one."}),
	}
	for _, c := range []prometheus.Collector{m.bytes, m.transforms, m.skipped, m.seconds, m.depth, m.served, m.reuse, m.avifs, m.avifDepth, m.backlog, m.busy, m.linkWaits, m.linkShortWaits, m.quicks} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every reason and outcome is exported from the start, at 0, so that a
	// dashboard's rate shows 0 before the first one rather than no series.
	for _, r := range skipReasons {
		m.skipped.WithLabelValues(r)
	}
	for _, o := range []string{QuickServed, QuickMissed, QuickLate, QuickOverload} {
		m.quicks.WithLabelValues(o)
	}
	return m, nil
}

func (m *Metrics) skip(reason string) {
	if m != nil {
		m.skipped.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) reused(transform string) {
	if m != nil {
		m.reuse.WithLabelValues(transform).Inc()
	}
}

func (m *Metrics) queueDepth(d float64) {
	if m != nil {
		m.depth.Add(d)
	}
}

// running moves the running-transforms gauge by d.
func (m *Metrics) running(d float64) {
	if m != nil {
		m.busy.Add(d)
	}
}

func (m *Metrics) avif(outcome string) {
	if m != nil {
		m.avifs.WithLabelValues(outcome).Inc()
	}
}

// backlogSeconds returns the setter of transform's backlog gauge.
func (m *Metrics) backlogSeconds(transform string) func(float64) {
	return func(s float64) {
		if m != nil {
			m.backlog.WithLabelValues(transform).Set(s)
		}
	}
}

func (m *Metrics) avifQueueDepth(d float64) {
	if m != nil {
		m.avifDepth.Add(d)
	}
}

// quick counts one quick WebP's outcome (QuickServed, ...).
func (m *Metrics) quick(outcome string) {
	if m != nil {
		m.quicks.WithLabelValues(outcome).Inc()
	}
}

// linkWait records a response whose wait its subscriber's link lengthened.
func (m *Metrics) linkWait() {
	if m != nil {
		m.linkWaits.Inc()
	}
}

// linkShortWait records a response whose wait its subscriber's link
// shortened.
func (m *Metrics) linkShortWait() {
	if m != nil {
		m.linkShortWaits.Inc()
	}
}

// done records the time d of one transform run.
func (m *Metrics) done(transform string, d time.Duration) {
	if m != nil {
		m.seconds.WithLabelValues(transform).Observe(d.Seconds())
	}
}

// transformed records a transformed body served to Squid: in bytes of
// media type mt became out bytes (fresh from a transform or reused).
func (m *Metrics) transformed(transform, mt string, in, out int) {
	if m == nil {
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
