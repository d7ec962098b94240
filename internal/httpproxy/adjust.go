package httpproxy

// Requests and responses as pepd changes them on their way: the VIP
// path's request headers (Cookie, Referer) and response headers
// (Location, Set-Cookie, CORS), url mode's rewriting (adjustResponse, one
// function for both paths), and the standard library path's response hook
// (modifyResponse) with its truncation of a failed body.

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"

	"pep/internal/mode"
	"pep/internal/rewrite"
)

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

// vipReferer maps a Referer in VIP form (http://VIP/ or one of the https
// VIP origins) back to the origin URL; keep is false when it is in VIP
// form but not a valid VIP path (the header is then dropped). Other values
// come back unchanged.
func vipReferer(ref string, rw *rewrite.Rewriter) (v string, keep bool) {
	u, isVIP, err := rw.FromVIPURL(ref)
	switch {
	case !isVIP:
		return ref, true
	case err != nil:
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
		p.addHints(resp, ri)
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
		// §3.2.5: "*" does not match credentialed requests). A CORS
		// request from a page of another origin was cross-origin before
		// the rewrite too: it gets the origin's own answer, so that what
		// the origin refused (a font on a CDN without the header) stays
		// refused, as without pep, and Vary: Origin keeps the browser
		// from reusing that answer for the object's own site.
		if resp.Header.Get("Access-Control-Allow-Origin") == "" {
			if ri.origin == "" || sameOrigin(ri.origin, ri.target) {
				resp.Header.Set("Access-Control-Allow-Origin", "*")
			} else {
				resp.Header.Add("Vary", "Origin")
			}
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
		res := rw.Response(resp, ri.target, ri.kind == kindVIPPath)
		if res.Err != nil {
			p.log.Debug("rewrite: upstream body read failed", "url", ri.target, "err", res.Err)
		}
		if res.Rewritten {
			p.dnsPrefetch(ri.st.Resolver, res.Stats.Hosts)
		}
	}
}

// Rewrites reports whether pepd rewrites responses of mediaType (lowercase,
// without parameters) on their way to the phone now: in url mode, the
// rewriter's HTML and CSS types (rewrite.Rewriter.Handles). The optimizer
// passes those without its text transform (optimize.Options.Rewritten),
// which the rewriter's own encoding would undo.
func (p *Proxy) Rewrites(mediaType string) bool {
	rw := p.settings.Load().Rewriter
	return rw != nil && p.mode.Get() == mode.URL && rw.Handles(mediaType)
}

// MaxDNSPrefetch bounds the lookups DNS prefetch runs at once, over all
// subscribers; a host over the bound is not looked up ahead (its first
// request looks it up, as without prefetch).
const MaxDNSPrefetch = 64

// dnsPrefetch looks up hosts (rewrite.Stats.Hosts: the other hosts a body
// pepd rewrote into VIP form names, at most rewrite.MaxHosts) in the
// background, into r's cache. The browser asks pepd for these objects a
// radio round trip or more after the body leaves; a host's first request
// then finds its name resolved for the Host check and the guard
// (checkTarget), for Squid (internal/squiddns) and for the optimizer,
// instead of waiting for the carrier resolver (a round trip on the
// wired side; 20 ms in the testbed). Browsers do the same for the names
// a page links to (DNS prefetching); a name pepd looks up is one the
// browser would have made it look up a moment later.
func (p *Proxy) dnsPrefetch(r *Resolver, hosts []string) {
	for _, h := range hosts {
		select {
		case p.dnsAhead <- struct{}{}:
			p.m.prefetch.WithLabelValues("started").Inc()
			go func() {
				defer func() { <-p.dnsAhead }()
				r.Lookup(context.Background(), h)
			}()
		default:
			p.m.prefetch.WithLabelValues("skipped").Inc()
		}
	}
}

// addHints records resp for the hints and adds a document's Link fields
// (hintResponse) to a response the standard library path or the relay's
// parsed path sends.
func (p *Proxy) addHints(resp *http.Response, ri *reqInfo) {
	if !ri.hint.on {
		return
	}
	links := p.hintResponse(ri, resp.StatusCode, resp.Header.Get("Content-Type"),
		strings.Join(resp.Header.Values("Cache-Control"), ","), resp.ContentLength)
	if len(links) > 0 {
		resp.Header["Link"] = append(resp.Header["Link"], links...)
	}
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

// sameOrigin reports whether origin, a request's Origin value, is the
// origin of target, an http: URL: the ASCII serialization of RFC 6454
// §6.2 (scheme, host, and the port unless it is the scheme's default),
// compared without regard to case. "null" and a list never match.
func sameOrigin(origin string, target *url.URL) bool {
	host := target.Host
	if target.Port() == "80" {
		host = host[:len(host)-len(":80")]
	}
	return len(origin) == len("http://")+len(host) &&
		strings.EqualFold(origin[:len("http://")], "http://") &&
		strings.EqualFold(origin[len("http://"):], host)
}
