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
	"os"
	"strconv"
	"strings"
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
	mode       *mode.Switch
	opt        *optimize.Policy
	cache      *cachepolicy.Policy
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
		mode:      o.Mode,
		opt:       o.Optimize,
		cache:     o.Cache,
		log:       o.Log.With("component", "httpproxy"),
		m:         o.Metrics,
		squidAddr: o.Squid,
		pp:        o.SquidProxyProtocol,
		upTimeout: o.UpstreamTimeout,
	}
	if p.upTimeout == 0 {
		p.upTimeout = 60 * time.Second
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
	p.pool = newSquidPool(p, idle, cmp.Or(o.UpstreamIdle, 60*time.Second))
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
	st      *Settings
	started time.Time
	body    *subscriberBody // the subscriber's request body, nil without one
	w       http.ResponseWriter
	admit   cachepolicy.Ticket // second-hit admission's mark and hold (cachepolicy.Policy.Mark)
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

// decision is what decide made of a request: forward it (ri set; ri.direct
// valid means bypass Squid), or answer it with code and reason. decide has
// no side effects beyond the resolver's cache; account counts and logs the
// decision, once, on the path that serves the request (the relay or
// ServeHTTP), so that a request the relay hands to the standard library
// is decided again there and counted once.
type decision struct {
	ri      *reqInfo
	code    int
	reason  string
	md      mode.Mode
	kind    kind
	outcome outcome // outRefused, outBadRequest or outUpstreamError when ri is nil
	err     error   // behind an upstream error
	logArgs []any
	// mismatch is the host mismatch action taken ("direct", "refuse"),
	// empty when the Host matched or was not verified.
	mismatch     string
	mismatchHost string
	orig         netip.AddrPort
}

// decide classifies a request and checks it against the policy: subscriber
// source, method, request target, Host verification for intercepted
// connections (orig, intercepted), VIP-path mapping, and the guard on
// every resolved address of the target. It is the only place these
// decisions are made, for both the relay and the standard library path.
func (p *Proxy) decide(r *http.Request, src, orig netip.AddrPort, intercepted bool) decision {
	md := p.mode.Get()
	st := p.settings.Load()
	d := decision{md: md}
	if !st.Policy.ClientAllowed(src.Addr()) {
		return d.refuse(kindNone, string(guard.ReasonNotSubscriber), "source", src.Addr())
	}
	switch {
	case strings.EqualFold(r.Method, http.MethodConnect):
		// Any case: Squid's relaxed parser reads "connect" as CONNECT.
		return d.refuse(kindNone, "CONNECT not allowed")
	case strings.EqualFold(r.Method, "PURGE"):
		return d.refuse(kindNone, "PURGE not allowed")
	case r.URL.IsAbs() && !strings.EqualFold(r.URL.Scheme, "http"):
		return d.badRequest(kindNone, "only http: URLs are proxied")
	case r.RequestURI == "*":
		return d.badRequest(kindNone, "asterisk-form request-target not supported")
	case strings.IndexByte(r.RequestURI, '#') >= 0:
		// RFC 9112 §3.2: a request-target has no fragment; forwarded, it
		// would reach the origin as %23 (another resource, another cache
		// key). Refused the same way on every path (issue 12, D6).
		return d.badRequest(kindNone, "fragment in request-target")
	}
	host := r.Host
	if r.URL.IsAbs() {
		host = r.URL.Host
	}
	ri := &reqInfo{mode: md, src: src, st: st}
	switch {
	case intercepted && orig.Addr() != p.vip:
		ri.kind = kindIntercepted
		if !p.intercepted(r, ri, host, orig, &d) {
			return d
		}
	case p.isVIPHost(host, orig):
		ri.kind = kindVIPPath
		target := r.RequestURI
		if r.URL.IsAbs() {
			target = r.URL.RequestURI()
		}
		u, err := rewrite.ParseVIPPath(target)
		if err != nil {
			reason := "invalid VIP path"
			var pe *rewrite.PathError
			if errors.As(err, &pe) {
				reason = "invalid VIP path: " + pe.Reason
			}
			return d.badRequest(ri.kind, reason)
		}
		ri.target = u
	default:
		ri.kind = kindVIPHost
		u, err := hostURL(host, r)
		if err != nil {
			return d.badRequest(ri.kind, err.Error())
		}
		ri.target = u
	}
	if !ri.direct.IsValid() && !p.checkTarget(r, ri, &d) {
		return d
	}
	d.ri, d.kind = ri, ri.kind
	return d
}

func (d decision) refuse(k kind, reason string, logArgs ...any) decision {
	d.code, d.reason, d.kind, d.outcome, d.logArgs = http.StatusForbidden, reason, k, outRefused, logArgs
	return d
}

func (d decision) badRequest(k kind, reason string) decision {
	d.code, d.reason, d.kind, d.outcome = http.StatusBadRequest, reason, k, outBadRequest
	return d
}

func (d decision) upstreamError(k kind, code int, reason string, err error) decision {
	d.code, d.reason, d.kind, d.outcome, d.err = code, reason, k, outUpstreamError, err
	return d
}

// upstreamFailed is upstreamError for a round trip to Squid that got no
// response: 504 "upstream timed out" when err is a timeout (a net.Error
// whose Timeout is true, or a passed deadline), else 502 "upstream failed"
// (RFC 9110 §15.6.3, §15.6.5). Both HTTP paths classify such failures here.
func (d decision) upstreamFailed(k kind, err error) decision {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
		return d.upstreamError(k, http.StatusGatewayTimeout, "upstream timed out", err)
	}
	return d.upstreamError(k, http.StatusBadGateway, "upstream failed", err)
}

// account counts and logs a decision: the host mismatch, and for an
// answered request its outcome (a forwarded request is counted when its
// response arrives).
func (p *Proxy) account(r *http.Request, d *decision) {
	if d.mismatch != "" {
		p.m.hostMismatch.WithLabelValues(d.mismatch).Inc()
		p.log.Info("host does not resolve to the original destination", "host", d.mismatchHost, "orig", d.orig, "src", r.RemoteAddr, "action", d.mismatch)
	}
	if d.ri != nil {
		return
	}
	p.rc[d.md][d.kind][d.outcome].Inc()
	switch d.outcome {
	case outRefused:
		p.m.refused.WithLabelValues(d.reason).Inc()
		p.log.Info("refused", append([]any{"reason", d.reason, "src", r.RemoteAddr, "method", r.Method, "target", r.RequestURI, "host", r.Host}, d.logArgs...)...)
	case outBadRequest:
		p.log.Debug("bad request", "reason", d.reason, "src", r.RemoteAddr, "target", r.RequestURI, "host", r.Host)
	default:
		p.log.Warn("upstream error", "reason", d.reason, "err", d.err, "src", r.RemoteAddr, "target", r.RequestURI, "host", r.Host)
	}
}

// intercepted fills ri for an intercepted request, verifying the Host
// against the original destination. It fills d with the answer and
// returns false if the request goes no further.
func (p *Proxy) intercepted(r *http.Request, ri *reqInfo, host string, orig netip.AddrPort, d *decision) bool {
	if host == "" { // HTTP/1.0 without Host: the original destination is all we know
		host = orig.String()
	}
	u, err := hostURL(host, r)
	if err != nil {
		*d = d.badRequest(ri.kind, err.Error())
		return false
	}
	ri.target = u
	port := uint16(80)
	if ps := u.Port(); ps != "" {
		n, _ := strconv.ParseUint(ps, 10, 16)
		port = uint16(n)
	}
	match := false
	if port == orig.Port() {
		addrs, err := ri.st.Resolver.Lookup(r.Context(), u.Hostname())
		if err != nil && !errors.Is(err, ErrNXDomain) {
			*d = d.upstreamError(ri.kind, http.StatusBadGateway, "cannot resolve host", err)
			return false
		}
		for _, a := range addrs {
			if a == orig.Addr() {
				match = true
				break
			}
		}
	}
	if match {
		return true
	}
	action := ri.st.HostMismatch
	d.mismatch, d.mismatchHost, d.orig = action, host, orig
	if action == "refuse" {
		*d = d.refuse(ri.kind, "host does not match destination", "host", host, "orig", orig)
		return false
	}
	if err := ri.st.Policy.CheckTarget(orig); err != nil {
		g, _ := guard.IsDenied(err)
		*d = d.refuse(ri.kind, string(g.Reason), "target", orig)
		return false
	}
	ri.direct = orig
	return true
}

// checkTarget resolves ri.target's host through the carrier resolver and
// checks every address with the guard policy (Squid may connect to any of
// them). It fills d with the answer and returns false if the request goes
// no further.
func (p *Proxy) checkTarget(r *http.Request, ri *reqInfo, d *decision) bool {
	port := uint16(80)
	if ps := ri.target.Port(); ps != "" {
		n, err := strconv.ParseUint(ps, 10, 16)
		if err != nil {
			*d = d.badRequest(ri.kind, fmt.Sprintf("invalid port %q", ps))
			return false
		}
		port = uint16(n)
	}
	addrs, err := ri.st.Resolver.Lookup(r.Context(), ri.target.Hostname())
	if err != nil {
		*d = d.upstreamError(ri.kind, http.StatusBadGateway, "cannot resolve host", err)
		return false
	}
	for _, a := range addrs {
		if err := ri.st.Policy.CheckTarget(netip.AddrPortFrom(a, port)); err != nil {
			g, _ := guard.IsDenied(err)
			*d = d.refuse(ri.kind, string(g.Reason), "host", ri.target.Host, "addr", a)
			return false
		}
	}
	return true
}

// isVIPHost reports whether a request's Host names the VIP (or, for a
// connection made to pepd directly, the address it connected to).
func (p *Proxy) isVIPHost(host string, local netip.AddrPort) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.Trim(h, "[]")
	if h == "" || h == p.vipStr {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && (a.Unmap() == p.vip || local.IsValid() && a.Unmap() == local.Addr())
}

// hostURL builds http://host/path?query from a Host value and the
// request's target.
func hostURL(host string, r *http.Request) (*url.URL, error) {
	h, port := host, ""
	if hh, pp, err := net.SplitHostPort(host); err == nil {
		h, port = hh, pp
	}
	h = strings.ToLower(strings.Trim(h, "[]"))
	if h == "" || !validHostName(h) {
		return nil, fmt.Errorf("invalid Host %q", host)
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("invalid port in Host %q", host)
		}
		if n == 80 {
			port = ""
		} else {
			port = strconv.Itoa(n)
		}
	}
	u := &url.URL{Scheme: "http", Host: h, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery, ForceQuery: r.URL.ForceQuery}
	if strings.IndexByte(h, ':') >= 0 {
		u.Host = "[" + h + "]"
	}
	if port != "" {
		u.Host += ":" + port
	}
	if u.Path == "" {
		u.Path = "/"
	}
	return u, nil
}

// validHostName accepts letters, digits, '.', '-', '_' and IP literals.
func validHostName(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	if len(h) > 253 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// answer counts, logs and writes an answer decision.
func (p *Proxy) answer(w http.ResponseWriter, r *http.Request, d decision) {
	p.account(r, &d)
	httpError(w, d.code, d.reason)
}

// httpError writes a short text answer and closes the connection after it
// when the request body was not read.
func httpError(w http.ResponseWriter, code int, reason string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	io.WriteString(w, strconv.Itoa(code)+" "+http.StatusText(code)+": "+reason+"\n")
}

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
	delete(pr.Out.Header, optimize.MarkHeader)
	if !ri.direct.IsValid() && p.opt.Mark(pr.In.Method, ri.target.Hostname(), pr.In.Header.Get("Range") != "",
		hasNoTransform(pr.In.Header.Values("Cache-Control"))) {
		pr.Out.Header.Set(optimize.MarkHeader, "1")
	}
}

// hasNoTransform reports a Cache-Control no-transform directive.
func hasNoTransform(values []string) bool {
	for _, v := range values {
		found := false
		forTokens([]byte(v), func(t []byte) { found = found || eqFold(t, "no-transform") })
		if found {
			return true
		}
	}
	return false
}

// radioDone counts what the header diet removed from one response and a
// transformed variant served (optimize.Metrics.Served).
func (p *Proxy) radioDone(saved int, transform string, hit bool) {
	if p.m != nil {
		p.m.dietBytes.Observe(float64(saved))
	}
	if transform != "" && p.opt != nil {
		p.opt.Metrics.Served(transform, hit)
	}
}

func hostHeader(r *http.Request, target *url.URL) string {
	if r.Host != "" {
		return r.Host
	}
	return target.Host
}

// vipRequestHeaders makes a VIP-path request look as the origin would have
// seen it without the VIP: only the site's own cookies (renamed back), and
// a Referer/Origin in VIP form mapped back to the origin URL.
func (p *Proxy) vipRequestHeaders(h http.Header, origin *url.URL, rw *rewrite.Rewriter) {
	if cs := h.Values("Cookie"); len(cs) > 0 {
		if v := vipCookie(cs, origin); v != "" {
			h["Cookie"] = []string{v}
		} else {
			delete(h, "Cookie")
		}
	}
	if ref := h.Get("Referer"); ref != "" {
		if v, keep := vipReferer(ref, rw); !keep {
			delete(h, "Referer")
		} else if v != ref {
			h.Set("Referer", v)
		}
	}
}

// vipCookie returns the Cookie header a VIP-path request for origin sends
// on, from the values the subscriber sent: only origin's cookies, renamed
// back (rewrite.CookieHeader); "" sends none.
func vipCookie(values []string, origin *url.URL) string {
	return rewrite.CookieHeader(strings.Join(values, "; "), origin)
}

// vipReferer maps a Referer in VIP form back to the origin URL; keep is
// false when it is in VIP form but not a valid VIP path (the header is then
// dropped). Other values come back unchanged.
func vipReferer(ref string, rw *rewrite.Rewriter) (v string, keep bool) {
	prefix := "http://" + rw.VIP() + "/"
	if !strings.HasPrefix(ref, prefix) {
		return ref, true
	}
	u, err := rewrite.ParseVIPPath(ref[len(prefix)-1:])
	if err != nil {
		return "", false
	}
	return u.String(), true
}

// modifyResponse maps Location and Set-Cookie for VIP-path responses and
// rewrites HTML and CSS in url mode.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	ri := resp.Request.Context().Value(ctxKey{}).(*reqInfo)
	if ri.direct.IsValid() {
		p.rc[ri.mode][ri.kind][outDirect].Inc()
		// A response from an origin that does not own the Host name is
		// passed as it is: not rewritten, and marked uncacheable for any
		// cache after pepd.
		resp.Header.Set("Cache-Control", "no-store")
	} else {
		p.rc[ri.mode][ri.kind][outSquid].Inc()
		p.radioDone(dietHeader(resp.Header))
		p.adjustResponse(resp, ri)
	}
	if resp.Body != nil && resp.Body != http.NoBody && ri.w != nil {
		// Read from here on only after the head is written.
		resp.Body = &truncatedBody{ReadCloser: resp.Body, w: ri.w, r: resp.Request, m: p.m}
	}
	return nil
}

// truncatedBody is an upstream response body as httputil.ReverseProxy
// copies it to the subscriber, after the head. When it fails before its
// end (Squid closed mid-body, a bad chunk) the head and what came are
// flushed before the ReverseProxy aborts the handler (which closes the
// connection), and the response is counted as truncated: the subscriber
// sees a truncation it can detect (short of Content-Length, or no last
// chunk), as on the relay (issue 12, D5). Without the flush net/http's
// buffer (the first 4 KB of a Content-Length response) was dropped and the
// connection closed without any answer.
type truncatedBody struct {
	io.ReadCloser
	w      http.ResponseWriter
	r      *http.Request
	m      *Metrics
	err    error // held back for the next Read, so that the bytes that came with it are written first
	failed bool
}

func (b *truncatedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return b.fail()
	}
	n, err := b.ReadCloser.Read(p)
	if err == nil || err == io.EOF || b.r.Context().Err() != nil {
		return n, err // done, or the subscriber went away
	}
	b.err = err
	if n > 0 {
		return n, nil
	}
	return b.fail()
}

func (b *truncatedBody) fail() (int, error) {
	if !b.failed {
		b.failed = true
		b.m.truncated.Inc()
		http.NewResponseController(b.w).Flush()
	}
	return 0, b.err
}

// adjustResponse is what pepd changes in a response from Squid, on both
// paths (ReverseProxy and relay): for a VIP-path request Location and
// Set-Cookie are mapped to the VIP form and Access-Control-Allow-Origin: *
// is added where the origin sent none, and in url mode HTML and CSS
// bodies are rewritten (rewrite.Rewriter.Response, which leaves every other
// body untouched and unread). It reads and changes only the Location,
// Set-Cookie, Access-Control-Allow-Origin and the rewriter's headers
// (rewriteHeaders).
func (p *Proxy) adjustResponse(resp *http.Response, ri *reqInfo) {
	rw := ri.st.Rewriter
	if ri.kind == kindVIPPath {
		// Every VIP-path object shares one origin, http://VIP, which is
		// not its page's origin: fonts, module scripts and crossorigin
		// elements that were same-origin with their page are now CORS
		// requests, blocked without this header. The objects are public
		// cache content; credentialed CORS stays refused (RFC 6454, Fetch
		// §3.2.5: "*" does not match credentialed requests).
		if resp.Header.Get("Access-Control-Allow-Origin") == "" {
			resp.Header.Set("Access-Control-Allow-Origin", "*")
		}
		if loc := resp.Header.Get("Location"); loc != "" {
			if v, ok := rw.Location(loc, ri.target); ok {
				resp.Header.Set("Location", v)
			}
		}
		if scs := resp.Header.Values("Set-Cookie"); len(scs) > 0 {
			out := scs[:0:0]
			for _, sc := range scs {
				if v, ok := rewrite.SetCookie(sc, ri.target); ok {
					out = append(out, v)
				}
			}
			if len(out) > 0 {
				resp.Header["Set-Cookie"] = out
			} else {
				delete(resp.Header, "Set-Cookie")
			}
		}
	}
	if ri.mode == mode.URL {
		res := rw.Response(resp, ri.target)
		if res.Err != nil {
			p.log.Debug("rewrite: upstream body read failed", "url", ri.target, "err", res.Err)
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
