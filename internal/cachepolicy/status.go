package cachepolicy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pires/go-proxyproto"
	"github.com/prometheus/client_golang/prometheus"
)

// Manager reads Squid's figures from its cache manager on Squid's port
// for pepd (Squid 5: GET /squid-internal-mgr/counters and .../info in
// origin form). configs/squid.conf allows the manager from localhost
// only (`http_access allow localhost manager`) and never caches its
// pages (`cache deny manager`); with PROXY protocol the Manager names
// 127.0.0.1 (::1 for an IPv6 Squid) in the header, without it Squid must
// listen on loopback so that pepd's source address is localhost.
type Manager struct {
	// Addr is Squid's port for pepd, host:port (config squid).
	Addr string
	// ProxyProtocol sends a PROXY v1 header first, as pepd's requests do
	// (config squid_proxy_protocol).
	ProxyProtocol bool
	// Timeout bounds one Fetch (both pages); zero means 2s.
	Timeout time.Duration

	// own counts the manager requests this Manager completed: Squid counts
	// them in client_http.requests, and Fetch takes them out again.
	own atomic.Int64
}

// SquidStats are Squid's figures since Squid started, from mgr:counters
// and mgr:info. Squid counts kilobytes; the byte fields are KB * 1024.
type SquidStats struct {
	// Requests are client HTTP requests (client_http.requests), less the
	// manager requests of this Manager (other manager clients, such as an
	// operator's squidclient, are still in).
	Requests int64 `json:"requests"`
	// Hits are requests served from the cache (client_http.hits).
	Hits int64 `json:"hits"`
	// SentBytes are bytes sent to clients (client_http.kbytes_out).
	SentBytes int64 `json:"sent_bytes"`
	// HitSentBytes are the bytes of SentBytes sent from the cache
	// (client_http.hit_kbytes_out).
	HitSentBytes int64 `json:"hit_sent_bytes"`
	// OriginRequests are requests to origins and parents
	// (server.all.requests).
	OriginRequests int64 `json:"origin_requests"`
	// OriginBytes are bytes received from origins and parents
	// (server.all.kbytes_in).
	OriginBytes int64 `json:"origin_bytes"`
	// SwapOuts are objects written to the disk cache (swap.outs): disk
	// writes.
	SwapOuts int64 `json:"swap_outs"`
	// SwapIns are objects read from the disk cache (swap.ins).
	SwapIns int64 `json:"swap_ins"`
	// MemObjects are the objects in the memory cache (info: Hot Object
	// Cache Items).
	MemObjects int64 `json:"memory_objects"`
	// MemBytes is the memory cache's size (info: Storage Mem size), in
	// bytes; it includes objects in transit.
	MemBytes int64 `json:"memory_bytes"`
	// DiskObjects are the objects in the disk cache (info: on-disk
	// objects).
	DiskObjects int64 `json:"disk_objects"`
	// DiskBytes is the disk cache's size (info: Storage Swap size), in
	// bytes.
	DiskBytes int64 `json:"disk_bytes"`
}

// HitRatio is Hits/Requests, 0 without requests.
func (s SquidStats) HitRatio() float64 { return ratio(s.Hits, s.Requests) }

// ByteHitRatio is HitSentBytes/SentBytes, 0 without bytes.
func (s SquidStats) ByteHitRatio() float64 { return ratio(s.HitSentBytes, s.SentBytes) }

func ratio(a, b int64) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Fetch reads mgr:counters and mgr:info. Errors: Squid unreachable, a
// manager answer other than 200 (403: Squid does not allow pepd's
// address, see Manager), a page without the expected fields, or the
// Timeout.
func (m *Manager) Fetch(ctx context.Context) (SquidStats, error) {
	timeout := m.Timeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	own := m.own.Load()
	var s SquidStats
	counters, err := m.Page(ctx, "counters")
	if err != nil {
		return s, err
	}
	info, err := m.Page(ctx, "info")
	if err != nil {
		return s, err
	}
	c := map[string]*int64{
		"client_http.requests": &s.Requests, "client_http.hits": &s.Hits,
		"client_http.kbytes_out": &s.SentBytes, "client_http.hit_kbytes_out": &s.HitSentBytes,
		"server.all.requests": &s.OriginRequests, "server.all.kbytes_in": &s.OriginBytes,
		"swap.outs": &s.SwapOuts, "swap.ins": &s.SwapIns,
	}
	if err := parseCounters(counters, c); err != nil {
		return s, err
	}
	s.SentBytes *= 1024
	s.HitSentBytes *= 1024
	s.OriginBytes *= 1024
	s.Requests = max(0, s.Requests-own)
	if err := parseInfo(info, &s); err != nil {
		return s, err
	}
	return s, nil
}

// Page GETs one manager page (name as in mgr:name, e.g. "active_requests")
// on a new connection and returns its body (at most 1 MiB). Errors as
// Fetch's; it is bounded by ctx alone, not by Timeout.
func (m *Manager) Page(ctx context.Context, name string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", m.Addr)
	if err != nil {
		return "", fmt.Errorf("cachepolicy: squid manager: %w", err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if m.ProxyProtocol {
		lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
		if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil && ap.Addr().Unmap().Is6() {
			lo = netip.IPv6Loopback()
		}
		dst, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		h := proxyproto.HeaderProxyFromAddrs(1, net.TCPAddrFromAddrPort(netip.AddrPortFrom(lo, 0)),
			net.TCPAddrFromAddrPort(netip.AddrPortFrom(lo, dst.Port())))
		if _, err := h.WriteTo(c); err != nil {
			return "", fmt.Errorf("cachepolicy: squid manager: %w", err)
		}
	}
	if _, err := fmt.Fprintf(c, "GET /squid-internal-mgr/%s HTTP/1.1\r\nHost: %s\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n", name, m.Addr); err != nil {
		return "", fmt.Errorf("cachepolicy: squid manager: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", fmt.Errorf("cachepolicy: squid manager %s: %w", name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("cachepolicy: squid manager %s: %w", name, err)
	}
	m.own.Add(1)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("cachepolicy: squid manager %s: %s (configs/squid.conf allows the manager from localhost only)", name, resp.Status)
	}
	return string(b), nil
}

// parseCounters reads "name = value" lines of mgr:counters into want;
// every name of want must be present.
func parseCounters(page string, want map[string]*int64) error {
	found := 0
	for _, l := range strings.Split(page, "\n") {
		name, v, ok := strings.Cut(l, " = ")
		if !ok {
			continue
		}
		p, ok := want[strings.TrimSpace(name)]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return fmt.Errorf("cachepolicy: squid counters: %s: %w", name, err)
		}
		*p = n
		found++
	}
	if found != len(want) {
		return fmt.Errorf("cachepolicy: squid counters: %d of %d fields found (not a Squid 5 counters page?)", found, len(want))
	}
	return nil
}

// parseInfo reads the storage lines of mgr:info:
//
//	Storage Swap size:	8 KB
//	Storage Mem size:	228 KB
//	     2 Hot Object Cache Items
//	     2 on-disk objects
func parseInfo(page string, s *SquidStats) error {
	found := 0
	for _, l := range strings.Split(page, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "Storage Swap size:"):
			s.DiskBytes = kb(l[len("Storage Swap size:"):])
			found++
		case strings.HasPrefix(l, "Storage Mem size:"):
			s.MemBytes = kb(l[len("Storage Mem size:"):])
			found++
		case strings.HasSuffix(l, " Hot Object Cache Items"):
			s.MemObjects, _ = strconv.ParseInt(strings.TrimSuffix(l, " Hot Object Cache Items"), 10, 64)
			found++
		case strings.HasSuffix(l, " on-disk objects"):
			s.DiskObjects, _ = strconv.ParseInt(strings.TrimSuffix(l, " on-disk objects"), 10, 64)
			found++
		}
	}
	if found != 4 {
		return errors.New("cachepolicy: squid info: storage lines missing (not a Squid 5 info page?)")
	}
	return nil
}

// kb parses " 228 KB" into bytes.
func kb(v string) int64 {
	f := strings.Fields(v)
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(f[0], 10, 64)
	return n * 1024
}

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
	Squid      *SquidStats `json:"squid,omitempty"`
	SquidError string      `json:"squid_error,omitempty"`
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
	Manager *Manager
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
	Manager *Manager
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
