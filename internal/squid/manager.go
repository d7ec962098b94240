package squid

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
)

// Manager reads Squid's figures from its cache manager on Squid's port
// for pepd (Squid 5: GET /squid-internal-mgr/counters and .../info in
// origin form). configs/squid.conf allows the manager from localhost
// only (`http_access allow localhost manager`) and never caches its
// pages (`cache deny manager`); with PROXY protocol the Manager names
// 127.0.0.1 (::1 for an IPv6 Squid) in the header, without it Squid must
// listen on loopback so that pepd's source address is localhost.
// Squid's cache manager: https://wiki.squid-cache.org/Features/CacheManager/.
// A Manager is safe for concurrent use.
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

// Stats are Squid's figures since Squid started, from mgr:counters
// and mgr:info. Squid counts kilobytes; the byte fields are KB * 1024.
type Stats struct {
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
func (s Stats) HitRatio() float64 { return ratio(s.Hits, s.Requests) }

// ByteHitRatio is HitSentBytes/SentBytes, 0 without bytes.
func (s Stats) ByteHitRatio() float64 { return ratio(s.HitSentBytes, s.SentBytes) }

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
func (m *Manager) Fetch(ctx context.Context) (Stats, error) {
	timeout := m.Timeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	own := m.own.Load()
	var s Stats
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
		return "", fmt.Errorf("squid: cache manager: %w", err)
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
			return "", fmt.Errorf("squid: cache manager: %w", err)
		}
	}
	if _, err := fmt.Fprintf(c, "GET /squid-internal-mgr/%s HTTP/1.1\r\nHost: %s\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n", name, m.Addr); err != nil {
		return "", fmt.Errorf("squid: cache manager: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", fmt.Errorf("squid: cache manager %s: %w", name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("squid: cache manager %s: %w", name, err)
	}
	m.own.Add(1)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("squid: cache manager %s: %s (configs/squid.conf allows the manager from localhost only)", name, resp.Status)
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
			return fmt.Errorf("squid: cache manager counters: %s: %w", name, err)
		}
		*p = n
		found++
	}
	if found != len(want) {
		return fmt.Errorf("squid: cache manager counters: %d of %d fields found (not a Squid 5 counters page?)", found, len(want))
	}
	return nil
}

// parseInfo reads the storage lines of mgr:info:
//
//	Storage Swap size:	8 KB
//	Storage Mem size:	228 KB
//	     2 Hot Object Cache Items
//	     2 on-disk objects
func parseInfo(page string, s *Stats) error {
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
		return errors.New("squid: cache manager info: storage lines missing (not a Squid 5 info page?)")
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
