package rewrite

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the rewriter's Prometheus series (namespace pep, subsystem
// rewrite). Response counts every Result into them:
//
//	pep_rewrite_responses_total{result="rewritten|recoded|skipped",reason="...",kind="html|css|"}
//	pep_rewrite_urls_total         URLs put into the VIP form
//	pep_rewrite_urls_skipped_total URLs left alone as unsafe to rewrite (Stats.Skipped)
//	pep_rewrite_urls_kept_total    URLs on their document's own host left as they are (Stats.KeptOwn, Config.OwnHostMax)
//	pep_rewrite_seconds            time spent in Response for HTML and CSS bodies
type Metrics struct {
	responses   *prometheus.CounterVec
	urls        prometheus.Counter
	urlsSkipped prometheus.Counter
	urlsKept    prometheus.Counter
	seconds     prometheus.Histogram
}

// NewMetrics creates the series and registers them with reg (nil: not
// registered). The error is a registration conflict.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "pep", Subsystem: "rewrite", Name: "responses_total",
			Help: "Responses seen in URL mode, by result (rewritten; recoded: nothing to rewrite, the coding applied again smaller; skipped), reason for not rewriting and kind (html, css or empty).",
		}, []string{"result", "reason", "kind"}),
		urls: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "pep", Subsystem: "rewrite", Name: "urls_total",
			Help: "URLs put into the VIP form.",
		}),
		urlsSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "pep", Subsystem: "rewrite", Name: "urls_skipped_total",
			Help: "URLs in rewritable places left alone because their VIP form would not mean the same.",
		}),
		urlsKept: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "pep", Subsystem: "rewrite", Name: "urls_kept_total",
			Help: "URLs on their document's own host left as they are (https.own_host_max): an HTML document naming at most that many, a style sheet it kept on its host.",
		}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "pep", Subsystem: "rewrite", Name: "seconds",
			Help:    "Time spent buffering, decoding, rewriting and encoding one HTML or CSS body.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 8),
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.responses, m.urls, m.urlsSkipped, m.urlsKept, m.seconds} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *Metrics) observe(res Result, d time.Duration) {
	result := "skipped"
	switch {
	case res.Rewritten:
		result = "rewritten"
	case res.Recoded:
		result = "recoded"
	}
	m.responses.WithLabelValues(result, string(res.Reason), res.Kind).Inc()
	m.urls.Add(float64(res.Stats.URLs))
	m.urlsSkipped.Add(float64(res.Stats.Skipped))
	m.urlsKept.Add(float64(res.Stats.KeptOwn))
	if res.Kind != "" {
		m.seconds.Observe(d.Seconds())
	}
}
