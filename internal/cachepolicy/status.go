package cachepolicy

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"pep/internal/squid"
)

// Status is the cache's status as GET /cache and `pepctl cache` show it.
type Status struct {
	// Admission is config cache.admission's value now in force: "off" or
	// "second-hit".
	Admission string `json:"admission"`
	// Window is cache.window (Go duration), "" with admission off.
	Window string `json:"window,omitempty"`
	// Pepd are pepd's own counters (marks it added).
	Pepd Counts `json:"pepd"`
	// Squid are Squid's figures; nil when they could not be read
	// (SquidError says why).
	Squid      *squid.Stats `json:"squid,omitempty"`
	SquidError string       `json:"squid_error,omitempty"`
	// HitRatio and ByteHitRatio are Squid's since it started.
	HitRatio     float64 `json:"hit_ratio"`
	ByteHitRatio float64 `json:"byte_hit_ratio"`
	// Collapsed is always null: Squid 5's cache manager counts no
	// collapsed requests (access.log marks them with CF_ in the tag).
	Collapsed *int64 `json:"collapsed"`
}

// StatusSource assembles a Status from a Policy and a Manager.
type StatusSource struct {
	// Policy gives the admission state and pepd's counters; nil: none.
	Policy *Policy
	// Window is cache.window, shown with admission on.
	Window time.Duration
	// Manager reads Squid; nil: no Squid figures.
	Manager *squid.Manager
}

// Status reads Squid (bounded by the Manager's Timeout and ctx) and
// returns the whole status; a Squid error is in SquidError, never fatal.
func (s *StatusSource) Status(ctx context.Context) Status {
	st := Status{Admission: AdmissionOff, Pepd: s.Policy.Counts()}
	if s.Policy.AdmissionOn() {
		st.Admission, st.Window = AdmissionSecondHit, s.Window.String()
	}
	if s.Manager == nil {
		st.SquidError = "no Squid manager configured"
		return st
	}
	sq, err := s.Manager.Fetch(ctx)
	if err != nil {
		st.SquidError = err.Error()
		return st
	}
	st.Squid = &sq
	st.HitRatio, st.ByteHitRatio = sq.HitRatio(), sq.ByteHitRatio()
	return st
}

// WriteText writes st as `pepctl cache` prints it: one "name: value"
// line each.
func (st Status) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "admission: %s", st.Admission)
	if st.Window != "" {
		fmt.Fprintf(&b, " (window %s)", st.Window)
	}
	fmt.Fprintf(&b, "\nfirst-seen (admissions refused): %d\nadmitted: %d\nprivate requests: %d\n",
		st.Pepd.FirstSeen, st.Pepd.Admitted, st.Pepd.Private)
	if st.Squid == nil {
		fmt.Fprintf(&b, "squid: %s\n", st.SquidError)
	} else {
		q := st.Squid
		fmt.Fprintf(&b, "requests: %d\nhits: %d\nhit ratio: %.1f %%\nbytes sent: %d\nhit bytes sent: %d\nbyte hit ratio: %.1f %%\n",
			q.Requests, q.Hits, 100*st.HitRatio, q.SentBytes, q.HitSentBytes, 100*st.ByteHitRatio)
		fmt.Fprintf(&b, "origin requests: %d\norigin bytes: %d\n", q.OriginRequests, q.OriginBytes)
		fmt.Fprintf(&b, "memory: %d objects, %d bytes\ndisk: %d objects, %d bytes\ndisk writes (swap outs): %d\ndisk reads (swap ins): %d\n",
			q.MemObjects, q.MemBytes, q.DiskObjects, q.DiskBytes, q.SwapOuts, q.SwapIns)
	}
	b.WriteString("collapsed requests: not counted by Squid 5 (access.log: CF_ tags)\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Collector exports Squid's figures as pep_cache_* series, read from the
// Manager on every scrape (bounded by its Timeout):
//
//	pep_cache_squid_up                      1 when the scrape read Squid, 0 otherwise
//	pep_cache_requests_total                client requests (client_http.requests)
//	pep_cache_hits_total                    of which hits (client_http.hits)
//	pep_cache_sent_bytes_total              bytes sent to clients (client_http.kbytes_out * 1024)
//	pep_cache_hit_sent_bytes_total          of which from the cache (client_http.hit_kbytes_out * 1024)
//	pep_cache_hit_ratio{by}                 hits/requests (by="requests"), hit bytes/bytes (by="bytes"), since Squid started
//	pep_cache_origin_requests_total         requests to origins and parents (server.all.requests)
//	pep_cache_origin_bytes_total            bytes from origins and parents (server.all.kbytes_in * 1024)
//	pep_cache_swap_outs_total               objects written to disk (swap.outs)
//	pep_cache_swap_ins_total                objects read from disk (swap.ins)
//	pep_cache_objects{store}                objects in memory (store="memory") and on disk (store="disk")
//	pep_cache_bytes{store}                  bytes in memory and on disk
//
// Register it together with Policy.Register (pepd's own pep_cache_*).
type Collector struct {
	// Manager reads Squid. Required.
	Manager *squid.Manager
}

var (
	descUp          = prometheus.NewDesc("pep_cache_squid_up", "1 when the last scrape read Squid's cache manager, 0 otherwise.", nil, nil)
	descRequests    = prometheus.NewDesc("pep_cache_requests_total", "Squid's client HTTP requests (client_http.requests; pepd's own manager requests taken out).", nil, nil)
	descHits        = prometheus.NewDesc("pep_cache_hits_total", "Squid's client requests served from the cache (client_http.hits).", nil, nil)
	descSent        = prometheus.NewDesc("pep_cache_sent_bytes_total", "Bytes Squid sent to clients (client_http.kbytes_out, KB resolution).", nil, nil)
	descHitSent     = prometheus.NewDesc("pep_cache_hit_sent_bytes_total", "Bytes Squid sent to clients from the cache (client_http.hit_kbytes_out, KB resolution).", nil, nil)
	descRatio       = prometheus.NewDesc("pep_cache_hit_ratio", "Squid's hit ratio since it started, by requests or bytes.", []string{"by"}, nil)
	descOriginReqs  = prometheus.NewDesc("pep_cache_origin_requests_total", "Requests Squid sent to origins and parents (server.all.requests).", nil, nil)
	descOriginBytes = prometheus.NewDesc("pep_cache_origin_bytes_total", "Bytes Squid received from origins and parents (server.all.kbytes_in, KB resolution).", nil, nil)
	descSwapOuts    = prometheus.NewDesc("pep_cache_swap_outs_total", "Objects Squid wrote to its disk cache (swap.outs): disk writes.", nil, nil)
	descSwapIns     = prometheus.NewDesc("pep_cache_swap_ins_total", "Objects Squid read from its disk cache (swap.ins).", nil, nil)
	descObjects     = prometheus.NewDesc("pep_cache_objects", "Objects in Squid's memory cache and disk cache.", []string{"store"}, nil)
	descBytes       = prometheus.NewDesc("pep_cache_bytes", "Bytes in Squid's memory cache (objects in transit included) and disk cache.", []string{"store"}, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descRequests, descHits, descSent, descHitSent, descRatio,
		descOriginReqs, descOriginBytes, descSwapOuts, descSwapIns, descObjects, descBytes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one Manager.Fetch.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.Manager.Fetch(context.Background())
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1)
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	counter(descRequests, s.Requests)
	counter(descHits, s.Hits)
	counter(descSent, s.SentBytes)
	counter(descHitSent, s.HitSentBytes)
	counter(descOriginReqs, s.OriginRequests)
	counter(descOriginBytes, s.OriginBytes)
	counter(descSwapOuts, s.SwapOuts)
	counter(descSwapIns, s.SwapIns)
	ch <- prometheus.MustNewConstMetric(descRatio, prometheus.GaugeValue, s.HitRatio(), "requests")
	ch <- prometheus.MustNewConstMetric(descRatio, prometheus.GaugeValue, s.ByteHitRatio(), "bytes")
	ch <- prometheus.MustNewConstMetric(descObjects, prometheus.GaugeValue, float64(s.MemObjects), "memory")
	ch <- prometheus.MustNewConstMetric(descObjects, prometheus.GaugeValue, float64(s.DiskObjects), "disk")
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.GaugeValue, float64(s.MemBytes), "memory")
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.GaugeValue, float64(s.DiskBytes), "disk")
}
