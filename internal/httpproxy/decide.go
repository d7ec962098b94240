package httpproxy

// The request decision, one for both HTTP paths: who may ask, for which
// target, routed how (intercepted, VIP path, VIP host), answered or sent on
// (decide, with no side effects), and how it is counted and logged
// (account). The relay calls it from relayConn.decide, the standard
// library path from Proxy.ServeHTTP.

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"

	"pep/internal/guard"
	"pep/internal/mode"
	"pep/internal/rewrite"
)

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
	ri := &reqInfo{mode: md, src: src, st: st, origin: r.Header.Get("Origin")}
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
	for _, n := range p.vipNames {
		if strings.EqualFold(h, n) {
			return true
		}
	}
	a, ok := ipLiteral(h)
	return ok && (a.Unmap() == p.vip || local.IsValid() && a.Unmap() == local.Addr())
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
	if _, ok := ipLiteral(h); ok {
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
