// Package httpproxy is pepd's HTTP path (DESIGN.md "pepd"; issue 2): it
// takes subscribers' HTTP requests, decides where each one goes, refuses
// what would make pepd an open proxy, and forwards the rest to Squid as
// forward-proxy requests (absolute URI), keeping the subscriber's address
// for Squid with a PROXY protocol header or X-Forwarded-For. In url mode
// HTML and CSS responses are rewritten by internal/rewrite.
//
// Three kinds of request reach it:
//
//   - intercepted: steered by nftables REDIRECT or TPROXY, so the original
//     destination is known (internal/intercept). The Host is resolved
//     through the carrier resolver; if the original destination is not
//     among the answers the request is never cached under that name
//     (Options.HostMismatch: forwarded straight to the original
//     destination, bypassing Squid, or refused with 403).
//   - vip_path: to the VIP with Host = the VIP and a VIP-form path
//     /host[:port]/path?query (url mode's objects): mapped back to
//     http://host[:port]/path?query; Location and Set-Cookie are mapped to
//     the VIP form and Cookie filtered per site.
//   - vip_host: to the VIP with a name in Host (dns mode): routed by Host.
//
// Both VIP kinds are served in every mode: browsers keep VIP-form URLs and
// VIP DNS answers long after a mode switch. The mode decides only whether
// responses are rewritten (url).
package httpproxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"pep/internal/cachepolicy"
	"pep/internal/guard"
	"pep/internal/mode"
	"pep/internal/optimize"
	"pep/internal/rewrite"
)

// HealthPath answers 200 "ok" to requests from a loopback address, before
// any other check: pepd's watchdog probes its own listener with it.
const HealthPath = "/.pep/healthz"

// Options configure a Proxy. Fields marked "reloadable" live in Settings.
type Options struct {
	// VIP is the caching proxy's address as subscribers see it. Required.
	VIP netip.Addr
	// VIPNames are the VIP's DNS names (config https.names, lowercase): a
	// request whose Host is one of them is for the VIP (vip_path), as one
	// to the VIP address is.
	VIPNames []string
	// Squid is Squid's forward-proxy port, host:port. Required.
	Squid string
	// SquidProxyProtocol sends a PROXY protocol v1 header with the
	// subscriber's address first on every connection to Squid (Squid:
	// http_port ... require-proxy-header). Upstream connections are then
	// pooled per subscriber address. False: one shared pool and an
	// X-Forwarded-For header (Squid: follow_x_forwarded_for for pepd only).
	SquidProxyProtocol bool
	// UpstreamTimeout bounds the wait for response headers from Squid or a
	// direct origin. Zero means 60s.
	UpstreamTimeout time.Duration
	// MaxIdlePerSubscriber bounds idle connections to Squid kept per
	// subscriber (PROXY protocol); without PROXY protocol the bound for
	// the one shared pool is 64 times this. It should cover a subscriber's
	// concurrent requests (a browser opens about 6 connections per host),
	// or connections are closed and opened again. Both HTTP paths take
	// their connections from this pool (upstream.go). Zero means 16.
	MaxIdlePerSubscriber int
	// MaxUpstreamConns bounds the connections to Squid open at once, idle
	// and in use, for all subscribers and both HTTP paths: the pool grows
	// with the requests in flight up to it, and a request past it waits
	// for a connection to be given back or closed, at most
	// UpstreamTimeout (then 504). Zero means 4096.
	MaxUpstreamConns int
	// UpstreamIdle is how long an idle connection to Squid is kept for
	// reuse; keep it below Squid's client_idle_pconn_timeout (2 min by
	// default), or Squid closes it first (a request then finds it stale
	// and is retried on a new one). Zero means 60s.
	UpstreamIdle time.Duration
	// Mode is the run-time mode switch, read once per request. Required.
	Mode *mode.Switch
	// Log receives one line per refused or failed request (debug for
	// routine ones). Nil discards.
	Log *slog.Logger
	// Metrics counts requests; nil counts nothing.
	Metrics *Metrics
	// Optimize decides which requests to Squid carry the optimizer's mark
	// (optimize.Policy.Mark) and counts transformed variants served; nil:
	// no optimizer.
	Optimize *optimize.Policy
	// Cache decides the cache marks of requests to Squid (second-hit
	// admission's cachepolicy.FirstHeader) and counts them and the
	// private ones (cachepolicy.Policy.Mark); nil: no admission, no counts.
	Cache *cachepolicy.Policy
	// Hints learns pages' dependency sets and hints them on documents
	// (hints.go, issue 26); nil: none.
	Hints *Hints
	// Settings are the reloadable settings at start.
	Settings Settings
}

// Settings are what SIGHUP can change in a running Proxy (Proxy.Reload).
type Settings struct {
	// Policy is the not-an-open-proxy policy. Required.
	Policy *guard.Policy
	// Resolver resolves target names through the carrier resolvers.
	// Required.
	Resolver *Resolver
	// Rewriter rewrites responses in url mode and maps VIP-form paths,
	// Location and cookies. Required (url mode needs it; the VIP-form
	// mappings are used in every mode).
	Rewriter *rewrite.Rewriter
	// HostMismatch is "direct" or "refuse" (config http.host_mismatch).
	HostMismatch string
	// KeepPrivate passes the CK-Private token on to the origin (config
	// http.keep_private_token); false strips it (cachepolicy.PrivateUA).
	KeepPrivate bool
}

// Proxy is the HTTP handler of pepd's HTTP path. Build it with New; serve
// it with a Server (which supplies each connection's original
// destination). It is safe for concurrent use.
type Proxy struct {
	vip        netip.Addr
	vipStr     string
	vipNames   []string
	mode       *mode.Switch
	opt        *optimize.Policy
	cache      *cachepolicy.Policy
	hints      *Hints
	links      *linkRates    // subscribers' downlink rates, for the optimizer's wait (optimize.LinkRateHeader)
	dnsAhead   chan struct{} // DNS prefetch's lookups running (dnsPrefetch), at most MaxDNSPrefetch
	pf         prefetcher
	log        *slog.Logger
	m          *Metrics
	rc         *requestCounters
	settings   atomic.Pointer[Settings]
	rp         *httputil.ReverseProxy
	pool       *squidPool      // connections to Squid, both paths (upstream.go)
	direct     *http.Transport // to an origin after a host mismatch
	squidAddr  string
	pp         bool
	bufs       sync.Pool
	upTimeout  time.Duration
	nilMetrics bool
}

// New builds a Proxy. Errors name the bad option.
func New(o Options) (*Proxy, error) {
	if !o.VIP.IsValid() {
		return nil, errors.New("httpproxy: no VIP")
	}
	if _, _, err := net.SplitHostPort(o.Squid); err != nil {
		return nil, fmt.Errorf("httpproxy: squid %q is not host:port", o.Squid)
	}
	if o.Mode == nil {
		return nil, errors.New("httpproxy: no mode switch")
	}
	if err := o.Settings.validate(); err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{
		vip:       o.VIP.Unmap(),
		vipStr:    o.VIP.Unmap().String(),
		vipNames:  o.VIPNames,
		mode:      o.Mode,
		opt:       o.Optimize,
		cache:     o.Cache,
		hints:     o.Hints,
		links:     newLinkRates(),
		pf:        prefetcher{per: map[netip.Addr]int{}},
		dnsAhead:  make(chan struct{}, MaxDNSPrefetch),
		log:       o.Log.With("component", "httpproxy"),
		m:         o.Metrics,
		squidAddr: o.Squid,
		pp:        o.SquidProxyProtocol,
		upTimeout: o.UpstreamTimeout,
	}
	if p.upTimeout == 0 {
		p.upTimeout = DefaultConfig().UpstreamTimeout
	}
	if p.m == nil {
		p.m, _ = NewMetrics(nil)
		p.nilMetrics = true
	}
	p.rc = p.m.requestCounters([]string{mode.Off.String(), mode.DNS.String(), mode.URL.String()})
	p.settings.Store(&o.Settings)
	idle := o.MaxIdlePerSubscriber
	if idle == 0 {
		idle = 16
	}
	if !p.pp {
		idle *= 64
	}
	p.pool = newSquidPool(p, idle, cmp.Or(o.MaxUpstreamConns, 4096), cmp.Or(o.UpstreamIdle, DefaultConfig().UpstreamIdle))
	p.direct = &http.Transport{
		DialContext:           p.dialDirect,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: p.upTimeout,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	p.bufs.New = func() any { b := make([]byte, 32<<10); return &b }
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewriteRequest,
		Transport:      roundTripper{p},
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
		BufferPool:     bufferPool{&p.bufs},
		ErrorLog:       slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	return p, nil
}

func (s *Settings) validate() error {
	switch {
	case s.Policy == nil:
		return errors.New("httpproxy: no guard policy")
	case s.Resolver == nil:
		return errors.New("httpproxy: no resolver")
	case s.Rewriter == nil:
		return errors.New("httpproxy: no rewriter")
	case s.HostMismatch != "direct" && s.HostMismatch != "refuse":
		return fmt.Errorf("httpproxy: host mismatch action %q is not one of direct, refuse", s.HostMismatch)
	}
	return nil
}

// Reload replaces the reloadable settings; requests in flight finish with
// the old ones.
func (p *Proxy) Reload(s Settings) error {
	if err := s.validate(); err != nil {
		return err
	}
	p.settings.Store(&s)
	return nil
}

// Close closes idle upstream connections, and those to Squid given back
// later.
func (p *Proxy) Close() {
	p.pool.closeIdle(true)
	p.direct.CloseIdleConnections()
}

// reqInfo is what ServeHTTP decided about one request, for the
// ReverseProxy hooks.
type reqInfo struct {
	kind    kind
	mode    mode.Mode
	target  *url.URL       // the origin URL
	direct  netip.AddrPort // valid: bypass Squid, connect here
	src     netip.AddrPort // the subscriber
	origin  string         // the request's Origin value (RFC 6454 §7), "" without one
	st      *Settings
	started time.Time
	body    *subscriberBody // the subscriber's request body, nil without one
	w       http.ResponseWriter
	admit   cachepolicy.Ticket // second-hit admission's mark and hold (cachepolicy.Policy.Mark)
	hint    hintReq            // what the hints need of it (hints.go)
}

// subscriberBody is a subscriber's request body as the reverse proxy reads it;
// it keeps the first read error that is not io.EOF, so that a failed round
// trip can be told apart: the subscriber sent a malformed body (a bad
// chunk size, a body cut short: 400, a subscriber error) or the upstream
// failed (502, an upstream error).
type subscriberBody struct {
	io.ReadCloser
	err error
}

func (b *subscriberBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}

type ctxKey struct{}

// connInfo is what a Server knows about a subscriber connection.
type connInfo interface {
	originalDst() (netip.AddrPort, bool)
	setActive()
	takeCloseNext() bool
	appendLinkRate(dst []byte) []byte
}

type connCtxKey struct{}

// ServeHTTP answers one subscriber request: it refuses, answers 400, or
// forwards it (see the package comment). The reason of every refusal is in
// the 403 body; details go to the log.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ci, _ := r.Context().Value(connCtxKey{}).(connInfo)
	closeAfter := false
	if ci != nil {
		ci.setActive()
		closeAfter = ci.takeCloseNext()
	}
	if closeAfter || ambiguousFraming(r) {
		w = &closingWriter{ResponseWriter: w}
	}
	src, _ := netip.ParseAddrPort(r.RemoteAddr)
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	if r.URL.Path == HealthPath && src.Addr().IsLoopback() {
		drainBody(r)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
		return
	}
	var orig netip.AddrPort
	var intercepted bool
	if ci != nil {
		orig, intercepted = ci.originalDst()
	}
	d := p.decide(r, src, orig, intercepted)
	p.account(r, &d)
	if d.ri == nil {
		httpError(w, d.code, d.reason)
		return
	}
	d.ri.started = time.Now()
	sw := &flushLockWriter{ResponseWriter: w}
	d.ri.w = sw
	if r.Body != nil && r.Body != http.NoBody {
		d.ri.body = &subscriberBody{ReadCloser: r.Body}
		r.Body = d.ri.body
	}
	defer func() { d.ri.admit.Done() }() // roundTripper's, unless the request failed before it
	p.rp.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), ctxKey{}, d.ri)))
}

// flushLockWriter serialises flushes of one response. httputil.ReverseProxy
// flushes a response without Content-Length from a timer goroutine (its
// "headers get flushed even if body writes are delayed" timer, which fires
// at once for such responses) while truncatedBody flushes from the copying
// goroutine when Squid's body fails: unserialised, both wrote the head
// (net/http's chunkWriter.wroteHeader is not synchronised), and the
// subscriber got it twice, 6 times in 300 bad-chunk responses.
type flushLockWriter struct {
	http.ResponseWriter
	mu sync.Mutex
}

// FlushError flushes the head and the buffered body under the lock; it is
// what http.ResponseController.Flush calls, from either goroutine.
func (f *flushLockWriter) FlushError() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return http.NewResponseController(f.ResponseWriter).Flush()
}

func (f *flushLockWriter) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// ambiguousFraming reports a request whose body framing a peer in front
// of pepd may have read otherwise, so that the connection closes after
// its response (RFC 9112 §6.1: a server MUST close after responding to a
// request with both Content-Length and Transfer-Encoding, and after an
// HTTP/1.0 request with Transfer-Encoding). net/http drops the
// Content-Length of a chunked request, and the Transfer-Encoding of an
// HTTP/1.0 one, before the handler sees them, and the relay reads only
// the head it hands over (not those after it on the connection, nor one
// larger than its buffer): so every chunked request closes, and every
// HTTP/1.0 request with a Content-Length (issue 12: a request hidden after
// the last chunk of such a request, after a handed-over one or behind an
// 8 KiB head, was served as the next request).
func ambiguousFraming(r *http.Request) bool {
	return len(r.TransferEncoding) > 0 || !r.ProtoAtLeast(1, 1) && r.Header["Content-Length"] != nil
}

// closingWriter sets "Connection: close" as the head is written (after
// the hop-by-hop fields of the upstream response were removed), so that
// the server closes the connection after this response.
type closingWriter struct{ http.ResponseWriter }

func (c *closingWriter) WriteHeader(code int) {
	c.Header().Set("Connection", "close")
	c.ResponseWriter.WriteHeader(code)
}

func (c *closingWriter) Write(b []byte) (int, error) {
	c.Header().Set("Connection", "close")
	return c.ResponseWriter.Write(b)
}

func (c *closingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// rewriteRequest is the ReverseProxy's Rewrite hook: the outbound request
// carries the origin URL (sent to Squid in absolute form by the
// Transport's Proxy), or for a direct request the original destination.
func (p *Proxy) rewriteRequest(pr *httputil.ProxyRequest) {
	ri := pr.In.Context().Value(ctxKey{}).(*reqInfo)
	u := *ri.target
	pr.Out.URL = &u
	pr.Out.Host = ""
	if ri.direct.IsValid() {
		pr.Out.Host = hostHeader(pr.In, ri.target)
		pr.Out.URL.Host = ri.direct.String()
	}
	if !p.pp && !ri.direct.IsValid() {
		pr.Out.Header["X-Forwarded-For"] = []string{ri.src.Addr().String()}
	}
	// pepd's server has answered Expect: 100-continue itself (net/http
	// sends 100 when the body is read); forwarded, the upstream's 100
	// would reach the phone as a second one (RFC 9110 §10.1.1).
	pr.Out.Header.Del("Expect")
	if ri.kind == kindVIPPath {
		p.vipRequestHeaders(pr.Out.Header, ri.target, ri.st.Rewriter)
	}
	private := false
	if ua := pr.Out.Header.Get("User-Agent"); ua != "" {
		var v string
		if v, private = cachepolicy.PrivateUA(ua, ri.st.KeepPrivate); private {
			pr.Out.Header.Set("User-Agent", v)
			pr.Out.Header.Set(cachepolicy.PrivateHeader, "1")
		}
	}
	// pepd's own mark (a subscriber's is dropped, pepd decides), the same
	// decision as the relay's (relayConn.requestHead).
	delete(pr.Out.Header, cachepolicy.FirstHeader)
	if !ri.direct.IsValid() {
		if ri.admit = p.cache.Mark(pr.In.Method, ri.target, private); ri.admit.First {
			pr.Out.Header.Set(cachepolicy.FirstHeader, "1")
		}
	}
	if !ri.direct.IsValid() {
		in := pr.In.Header
		scheme := "http"
		if pr.In.TLS != nil {
			scheme = "https"
		}
		p.hintRequest(ri, pr.In.Method, scheme, pr.In.Host, pr.In.RequestURI, in.Get("Referer"), in.Get("Accept"),
			in.Get("Accept-Encoding"), in.Get("User-Agent"), private)
		p.earlyHints(ri, pr.In.ProtoMajor)
	}
	delete(pr.Out.Header, optimize.MarkHeader)
	delete(pr.Out.Header, optimize.LinkRateHeader)
	if !ri.direct.IsValid() && p.opt.Mark(pr.In.Method, ri.target.Hostname(), pr.In.Header.Get("Range") != "",
		hasNoTransform(pr.In.Header.Values("Cache-Control"))) {
		pr.Out.Header.Set(optimize.MarkHeader, "1")
		if ci, _ := pr.In.Context().Value(connCtxKey{}).(connInfo); ci != nil {
			if v := ci.appendLinkRate(nil); len(v) > 0 {
				pr.Out.Header.Set(optimize.LinkRateHeader, string(v))
			}
		}
	}
}

// errorHandler answers a failed round trip: 400 if the subscriber's
// request body was malformed, 403 if the guard refused the dial, 504 on
// an upstream timeout, 502 otherwise.
func (p *Proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	ri := r.Context().Value(ctxKey{}).(*reqInfo)
	if ri.body != nil && ri.body.err != nil {
		// The subscriber's body did not parse: its error, not Squid's
		// (issue 12, D3: counted as upstream_error it paged the operator
		// through PepSquidErrors). The connection closes after the answer:
		// the rest of the body cannot be framed.
		w.Header().Set("Connection", "close")
		p.answer(w, r, decision{md: ri.mode}.badRequest(ri.kind, "malformed request body"))
		p.log.Debug("malformed request body", "src", r.RemoteAddr, "url", ri.target, "err", ri.body.err)
		return
	}
	if d, ok := guard.IsDenied(err); ok {
		p.answer(w, r, decision{md: ri.mode}.refuse(ri.kind, string(d.Reason), "target", d.Target))
		return
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		p.rc[ri.mode][ri.kind][outUpstreamError].Inc()
		p.log.Debug("client went away", "src", r.RemoteAddr, "url", ri.target)
		return
	}
	p.answer(w, r, decision{md: ri.mode}.upstreamFailed(ri.kind, err))
}

// dialDirect connects to the original destination of a host-mismatch
// request; the guard checks the address again before connect(2).
func (p *Proxy) dialDirect(ctx context.Context, network, addr string) (net.Conn, error) {
	st := p.settings.Load()
	d := &net.Dialer{Timeout: 10 * time.Second, Control: func(network, address string, rc syscall.RawConn) error {
		return st.Policy.Control(network, address, rc)
	}}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	p.m.upstreamConns.WithLabelValues("direct").Inc()
	return &countConn{Conn: newRawConn(c), in: p.m.upstreamIn, out: p.m.upstreamOut}, nil
}

// roundTripper sends a request through Squid (the pool of upstream.go)
// or directly, and times it.
type roundTripper struct{ p *Proxy }

func (t roundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	ri := r.Context().Value(ctxKey{}).(*reqInfo)
	ri.admit.Wait(r.Context())
	start := time.Now()
	var resp *http.Response
	var err error
	obs := t.p.m.upSquid
	if ri.direct.IsValid() {
		obs = t.p.m.upDirect
		resp, err = t.p.direct.RoundTrip(r)
	} else {
		resp, err = t.p.pool.roundTrip(r, ri.src)
	}
	ri.admit.Done()
	if err == nil {
		obs.Observe(time.Since(start).Seconds())
	}
	return resp, err
}

type bufferPool struct{ p *sync.Pool }

func (b bufferPool) Get() []byte  { return *b.p.Get().(*[]byte) }
func (b bufferPool) Put(x []byte) { b.p.Put(&x) }

// maxDrain is how much of a request body pepd reads before it answers a
// request itself (bytes).
const maxDrain = 64 << 10

// drainBody reads up to maxDrain bytes of r's body before pepd answers the
// request itself, so that the server's framing checks see the whole
// request first: over HTTP/2 a body that disagrees with its Content-Length
// is then a PROTOCOL_ERROR stream reset (RFC 9113 §8.1.1) rather than a
// 200 that raced the reset.
func drainBody(r *http.Request) {
	if r.Body != nil && r.Body != http.NoBody {
		io.Copy(io.Discard, io.LimitReader(r.Body, maxDrain))
	}
}
