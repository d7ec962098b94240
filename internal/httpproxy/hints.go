package httpproxy

// Dependency hints (issue 26, internal/hints): the one place where both
// paths meet the learner. A request is described once (hintRequest: the
// URL as the browser asked for it, Referer, CK-Private, whether it is a
// navigation); a response head once (hintResponse: status, Content-Type,
// Cache-Control, body bytes). A navigation's hints come back as Link
// field values, data that the relay writes as raw header lines and the
// standard library path adds to its http.Header; the fetch ahead to Squid
// starts when the navigation arrives.
//
// Hints are sent on no-transform responses too: a Link header field does
// not change the representation (RFC 9111 §5.2.2.6 and RFC 9110 §7.7 forbid
// transforming the content; adding a header field that describes other
// resources is not a transformation of it).

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"pep/internal/cachepolicy"
	"pep/internal/hints"
	"pep/internal/optimize"
	"pep/internal/rewrite"
)

// Hints wires the dependency learner into the HTTP path (Options.Hints).
type Hints struct {
	// Learner learns and hands out each page's dependency set. Required.
	Learner *hints.Learner
	// Switch turns learning, hints and fetch ahead on and off at run time;
	// nil is off.
	Switch *hints.Switch
	// Metrics counts fetches ahead; nil counts nothing.
	Metrics *hints.Metrics
	// PrefetchPerSubscriber bounds the fetches ahead in flight for one
	// subscriber; 0 makes none.
	PrefetchPerSubscriber int
	// PrefetchMax bounds the fetches ahead in flight over all
	// subscribers; 0 makes none.
	PrefetchMax int
}

// hintReq is what the hints need of one request, filled by hintRequest.
type hintReq struct {
	on      bool
	url     string // as the browser requested it
	referer string
	private bool
	doc     bool         // a navigation that started a load
	hints   []hints.Hint // that load's hints
}

// acceptsHTML reports whether an Accept value names text/html: Chromium
// sends it on navigations (top-level and frames), not on subresources.
func acceptsHTML(accept string) bool { return strings.Contains(accept, "text/html") }

// hintRequest records what the hints need of a request that goes to
// Squid. scheme ("http", or "https" on pepd's own TLS origin), host and
// requestURI are the Host value and the request target as
// the browser sent them (VIP form for a VIP-path request). A GET
// navigation (Accept names text/html) that is not a frame of the
// subscriber's load in progress starts a load (Learner.Document); its
// hints are kept for hintResponse and fetched ahead. A navigation to a
// VIP-path URL counts as any other: over TLS it is the one document
// request that can come over HTTP/2 (earlyHints).
func (p *Proxy) hintRequest(ri *reqInfo, method, scheme, host, requestURI, referer, accept, acceptEncoding, ua string, private bool) {
	h := p.hints
	if h == nil || !h.Switch.On() {
		return
	}
	hr := &ri.hint
	*hr = hintReq{on: true, url: scheme + "://" + host + requestURI, referer: referer, private: private}
	if method != http.MethodGet || !acceptsHTML(accept) {
		return
	}
	now := time.Now()
	if h.Learner.InLoad(ri.src.Addr(), referer, now) {
		return
	}
	hr.doc = true
	hr.hints = h.Learner.Document(ri.src.Addr(), hr.url, private, now)
	if len(hr.hints) > 0 {
		p.prefetch(ri.src, hr.hints, acceptEncoding, ua)
	}
}

// hintResponse records a response head the subscriber gets (every one
// that came from Squid) and returns the Link field values to add to it:
// the load's hints when this is its document (GET, 200, text/html), nil
// otherwise. bytes is the body's length, -1 when unknown.
func (p *Proxy) hintResponse(ri *reqInfo, status int, contentType, cacheControl string, bytes int64) []string {
	hr := &ri.hint
	if !hr.on {
		return nil
	}
	if hr.doc {
		ct, _, _ := strings.Cut(contentType, ";")
		if status != http.StatusOK || !strings.EqualFold(strings.TrimSpace(ct), "text/html") {
			return nil
		}
		return hintLinks(hr.hints)
	}
	if status < 200 || status >= 300 {
		return nil
	}
	cacheable := !hr.private && !noStore(cacheControl)
	p.hints.Learner.Subresource(ri.src.Addr(), hr.url, hr.referer, contentType, max(bytes, 0), cacheable, time.Now())
	return nil
}

// hintLinks formats the preloaded ones of hs as Link field values, one
// per hint; nil when none is (the others are only fetched ahead).
func hintLinks(hs []hints.Hint) []string {
	var links []string
	for _, x := range hs {
		if x.Preload {
			links = append(links, x.Link())
		}
	}
	return links
}

// earlyHints sends the load's hints as a 103 Early Hints response (RFC
// 8297) when the request is a navigation that started a load with hints
// and came over HTTP/2 (proto is the request's major version): called
// before the request goes to Squid, so that the browser can start its
// preloads while pepd waits for the document. Chromium acts on 103 only
// for top-level navigations over HTTP/2 or later, and over HTTP/1.1 a
// 1xx can confuse an intermediary, so HTTP/1.x gets the Link fields on
// the final response only (hintResponse). The final response carries
// the same Link fields again: a browser that ignored the 103 still
// preloads. In pepd only the VIP's own https origin speaks HTTP/2
// (Server.ServeTLS), so only a navigation to a VIP-path https URL gets
// one (see the README's "Dependency hints").
func (p *Proxy) earlyHints(ri *reqInfo, proto int) {
	hr := &ri.hint
	if proto < 2 || !hr.doc {
		return
	}
	links := hintLinks(hr.hints)
	if links == nil {
		return
	}
	fw, ok := ri.w.(*flushLockWriter)
	if !ok {
		return
	}
	w := fw.ResponseWriter
	if cw, ok := w.(*closingWriter); ok {
		w = cw.ResponseWriter // no Connection field on a 103
	}
	fw.mu.Lock()
	defer fw.mu.Unlock()
	h := w.Header()
	saved := h["Link"]
	h["Link"] = links
	// net/http writes a 1xx head with the header map at this moment
	// (HTTP/2: one HEADERS frame, written before WriteHeader returns)
	// and keeps the map for the final response.
	w.WriteHeader(http.StatusEarlyHints)
	if saved == nil {
		delete(h, "Link")
	} else {
		h["Link"] = saved
	}
	if p.hints.Metrics != nil {
		p.hints.Metrics.EarlyHints.Inc()
	}
}

// noStore reports a Cache-Control value that forbids a shared cache to
// store the response: no-store or private (RFC 9111 §5.2.2.5, §5.2.2.7).
func noStore(cc string) bool {
	found := false
	forTokens([]byte(cc), func(t []byte) {
		if i := strings.IndexByte(string(t), '='); i >= 0 {
			t = t[:i]
		}
		found = found || eqFold(t, "no-store") || eqFold(t, "private")
	})
	return found
}

// prefetcher bounds the fetches ahead in flight, per subscriber and
// overall.
type prefetcher struct {
	mu    sync.Mutex
	per   map[netip.Addr]int
	total int
}

func (f *prefetcher) take(sub netip.Addr, perSub, max int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.total >= max || f.per[sub] >= perSub {
		return false
	}
	f.total++
	f.per[sub]++
	return true
}

func (f *prefetcher) release(sub netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.total--
	if f.per[sub]--; f.per[sub] <= 0 {
		delete(f.per, sub)
	}
}

// prefetchAccept is the Accept value Chromium sends for a destination, so
// that Squid stores the variant (Vary: Accept, the optimizer's WebP) the
// browser's own request will ask for.
func prefetchAccept(as string) string {
	switch as {
	case "image":
		return "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8"
	case "style":
		return "text/css,*/*;q=0.1"
	}
	return "*/*"
}

// originURL maps a hinted URL (as the browser requests it) to the URL
// Squid is asked for: a VIP-form URL (on the VIP address or one of its
// https names) back to its origin URL.
func (p *Proxy) originURL(u string) (*url.URL, error) {
	t, err := url.Parse(u)
	if err != nil {
		return nil, err
	}
	if h := strings.ToLower(t.Hostname()); h == p.vipStr || slices.Contains(p.vipNames, h) {
		// http://VIP/host/path and https://VIP/host/path alike: Squid is
		// asked for http://host/path.
		return rewrite.ParseVIPPath(t.RequestURI())
	}
	return t, nil
}

// prefetch asks Squid for each hinted URL, preloaded or not, as the
// subscriber sub (same PROXY identity, same pool), with the document's
// Accept-Encoding and User-Agent and the destination's Accept, and
// discards the bodies. Only learned URLs are hinted, and the learner keeps
// only cacheable ones. The bounds are on fetches in flight: the document
// gets as many workers as slots are free (at most one per URL), and each
// worker fetches the next URL in hint order until none is left; URLs are
// counted busy only when no slot was free at all.
func (p *Proxy) prefetch(sub netip.AddrPort, hs []hints.Hint, acceptEncoding, ua string) {
	h := p.hints
	count := func(outcome string, n int) {
		if h.Metrics != nil && n > 0 {
			h.Metrics.Prefetches.WithLabelValues(outcome).Add(float64(n))
		}
	}
	type target struct {
		u  *url.URL
		as string
	}
	ts := make([]target, 0, len(hs))
	for _, x := range hs {
		u, err := p.originURL(x.URL)
		if err != nil || u.Scheme != "http" {
			count("error", 1)
			continue
		}
		ts = append(ts, target{u, x.As})
	}
	var next atomic.Int32
	workers := 0
	for workers < len(ts) && p.pf.take(sub.Addr(), h.PrefetchPerSubscriber, h.PrefetchMax) {
		workers++
		go func() {
			defer p.pf.release(sub.Addr())
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ts) {
					return
				}
				count(p.fetchAhead(sub, ts[i].u, ts[i].as, acceptEncoding, ua), 1)
			}
		}()
	}
	if workers == 0 {
		count("busy", len(ts))
	}
}

// fetchAhead asks Squid for target as prefetch does for one URL of
// destination as and returns the outcome (hints.PrefetchOutcomes).
func (p *Proxy) fetchAhead(sub netip.AddrPort, target *url.URL, as, acceptEncoding, ua string) string {
	ctx, cancel := context.WithTimeout(context.Background(), p.upTimeout)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return "error"
	}
	r.Header.Set("Accept", prefetchAccept(as))
	if acceptEncoding != "" {
		r.Header.Set("Accept-Encoding", acceptEncoding)
	}
	if ua != "" {
		r.Header.Set("User-Agent", ua)
	}
	if !p.pp {
		r.Header.Set("X-Forwarded-For", sub.Addr().String())
	}
	if p.opt.Mark(http.MethodGet, target.Hostname(), false, false) {
		r.Header.Set(optimize.MarkHeader, "1")
	}
	t := p.cache.Mark(http.MethodGet, target, false)
	if t.First {
		r.Header.Set(cachepolicy.FirstHeader, "1")
	}
	t.Wait(ctx)
	resp, err := p.pool.roundTrip(r, sub)
	t.Done()
	if err != nil {
		return "error"
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return "error"
	case strings.HasPrefix(resp.Header.Get("X-Cache"), "HIT"):
		return "hit"
	}
	return "miss"
}
