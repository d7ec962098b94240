package httpproxy

import (
	"bytes"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"

	"pep/internal/rewrite"
)

// span is a byte range [from, to) of a head.
type span struct{ from, to int }

// reqHead is a request head the relay serves, as offsets into its bytes.
type reqHead struct {
	method      string // "GET" or "HEAD"
	target      span   // origin-form request-target
	host        span   // the Host value
	close       bool   // Connection: close
	teTrailers  bool   // TE names "trailers" (passed on, as httputil.ReverseProxy does)
	lines       []span // header lines passed on as they are
	cookies     []span // Cookie values
	referers    []span // Referer values
	origin      span   // the (last) Origin value, empty without one (RFC 6454 §7)
	cookieLines []span // the Cookie and Referer lines (passed on unless VIP path)
	rng         bool   // a Range header (the optimizer serves such requests untransformed)
	noTransform bool   // Cache-Control names no-transform (RFC 9111 §5.2.1.6)
}

// parseRequestHead parses head (request line, header lines, empty line,
// CRLF line ends) into h. It accepts only what the relay serves and the
// standard library would accept the same way (RFC 9112 sections 3 and 5):
// GET or HEAD, an origin-form target of visible ASCII outside the
// health path, HTTP/1.1, header names that are tokens, values without
// control characters, exactly one valid Host, no Content-Length,
// Transfer-Encoding, Expect or Upgrade, a Connection header naming only
// close or keep-alive. Anything else returns false: the standard library
// serves it (and answers malformed input with its 400, 431 or 501).
func parseRequestHead(head []byte, h *reqHead) bool {
	*h = reqHead{lines: h.lines[:0], cookies: h.cookies[:0], referers: h.referers[:0], cookieLines: h.cookieLines[:0]}
	eol := bytes.Index(head, []byte("\r\n"))
	if eol < 0 {
		return false
	}
	line := head[:eol]
	switch {
	case bytes.HasPrefix(line, []byte("GET /")):
		h.method, h.target.from = http.MethodGet, 4
	case bytes.HasPrefix(line, []byte("HEAD /")):
		h.method, h.target.from = http.MethodHead, 5
	default:
		return false
	}
	if !bytes.HasSuffix(line, []byte(" HTTP/1.1")) {
		return false
	}
	h.target.to = len(line) - len(" HTTP/1.1")
	if h.target.to <= h.target.from {
		return false
	}
	for _, c := range head[h.target.from:h.target.to] {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	if bytes.HasPrefix(head[h.target.from:], []byte("/.pep/")) {
		return false // HealthPath and anything pepd may answer itself
	}
	hosts := 0
	for pos := eol + 2; ; {
		i := bytes.Index(head[pos:], []byte("\r\n"))
		if i < 0 {
			return false
		}
		l := span{pos, pos + i}
		pos += i + 2
		if l.to == l.from {
			break
		}
		colon := bytes.IndexByte(head[l.from:l.to], ':')
		if colon <= 0 {
			return false
		}
		name := head[l.from : l.from+colon]
		for _, c := range name {
			if !isTokenByte(c) {
				return false
			}
		}
		v := span{l.from + colon + 1, l.to}
		for v.from < v.to && (head[v.from] == ' ' || head[v.from] == '\t') {
			v.from++
		}
		for v.to > v.from && (head[v.to-1] == ' ' || head[v.to-1] == '\t') {
			v.to--
		}
		for _, c := range head[v.from:v.to] {
			if c < ' ' && c != '\t' || c == 0x7f {
				return false
			}
		}
		value := head[v.from:v.to]
		switch {
		case eqFold(name, "host"):
			hosts++
			h.host = v
		case eqFold(name, "content-length"), eqFold(name, "transfer-encoding"), eqFold(name, "expect"), eqFold(name, "upgrade"):
			return false
		case eqFold(name, "connection"):
			closes, ok := connectionTokens(value)
			if !ok {
				return false
			}
			h.close = h.close || closes
		case eqFold(name, "te"):
			forTokens(value, func(t []byte) {
				if eqFold(t, "trailers") {
					h.teTrailers = true
				}
			})
		case isHopByHop(name), eqFold(name, "forwarded"),
			eqFold(name, "x-forwarded-for"), eqFold(name, "x-forwarded-host"), eqFold(name, "x-forwarded-proto"):
		case eqFold(name, "pep-optimize"), eqFold(name, "pep-link-rate"), eqFold(name, "pep-first"):
			// pepd's own marks for the optimizer (optimize.MarkHeader,
			// optimize.LinkRateHeader) and for admission
			// (cachepolicy.FirstHeader): a subscriber's are dropped, pepd
			// decides.
		case eqFold(name, "range"):
			h.rng = true
			h.lines = append(h.lines, l)
		case eqFold(name, "cache-control"):
			forTokens(value, func(t []byte) {
				if eqFold(t, "no-transform") {
					h.noTransform = true
				}
			})
			h.lines = append(h.lines, l)
		case eqFold(name, "cookie"):
			h.cookies = append(h.cookies, v)
			h.cookieLines = append(h.cookieLines, l)
		case eqFold(name, "referer"):
			h.referers = append(h.referers, v)
			h.cookieLines = append(h.cookieLines, l)
		case eqFold(name, "origin"):
			h.origin = v
			h.lines = append(h.lines, l)
		default:
			h.lines = append(h.lines, l)
		}
	}
	return hosts == 1 && h.host.to > h.host.from && httpguts.ValidHostHeader(string(head[h.host.from:h.host.to]))
}

// Bits of respHead.has.
const (
	bitLocation = 1 << iota
	bitSetCookie
)

// respLine is one header line of a response head.
type respLine struct {
	from, nameEnd, vfrom, to int
	// managed is the canonical name of a header adjustResponse may read
	// or change (rewriteHeaders), "" for the others.
	managed string
	// vary is a Vary line naming optimize.MarkHeader: sent without it.
	vary bool
}

// respHead is a response head from Squid, as offsets into its bytes.
type respHead struct {
	status    int
	statusEnd int        // end of the status line
	lines     []respLine // without hop-by-hop, Content-Length and Transfer-Encoding
	cl        int64      // Content-Length, -1 if none
	chunked   bool
	closeUp   bool // Connection: close from Squid
	has       int  // bitLocation, bitSetCookie
	// diet is the bytes of the header lines left out (radioDiet).
	diet int
	// transform is the optimizer's TransformHeader value ("" if none);
	// hit is Squid's X-Cache saying HIT.
	transform string
	hit       bool
}

// radioDiet are the response headers that never cross the radio link
// (issue 11, header diet): what Squid adds for debugging (Via, X-Cache,
// X-Cache-Lookup: pepd's own metrics and Squid's access.log say the same)
// and the optimizer's marks (optimize.TransformHeader,
// optimize.DeferredHeader). Hop-by-hop headers
// are removed anyway. The relay's parser and dietHeader both follow it.
var radioDiet = map[string]bool{"via": true, "x-cache": true, "x-cache-lookup": true, "pep-transform": true, "pep-deferred": true}

// vipPathHeaders are the response headers adjustResponse maps for a
// VIP-path request (Location and Set-Cookie mapped, Access-Control-Allow-Origin
// added).
var vipPathHeaders = []string{"Location", "Set-Cookie", "Access-Control-Allow-Origin"}

// rewriteHeaders are the response headers adjustResponse reads or writes,
// lower-case name to canonical name: vipPathHeaders and the ones the
// rewriter reads or changes (rewrite.ResponseHeaders, the rewriter's own
// list) but Content-Length, which is the relay's framing. The relay puts
// just these into the header map it gives adjustResponse.
var rewriteHeaders = func() map[string]string {
	m := map[string]string{}
	for _, h := range append(append([]string(nil), vipPathHeaders...), rewrite.ResponseHeaders...) {
		if h = http.CanonicalHeaderKey(h); h != "Content-Length" {
			m[strings.ToLower(h)] = h
		}
	}
	return m
}()

// parseResponseHead parses a response head from Squid: HTTP/1.1, a final
// status (200-599), framing by Content-Length or chunked, a Connection
// header naming only close or keep-alive. Anything else returns false and
// goes through http.ReadResponse (relayParsed).
func parseResponseHead(head []byte, h *respHead) bool {
	*h = respHead{lines: h.lines[:0], cl: -1}
	eol := bytes.Index(head, []byte("\r\n"))
	if eol < 12 || !bytes.HasPrefix(head, []byte("HTTP/1.1 ")) || eol > 12 && head[12] != ' ' {
		return false
	}
	for _, c := range head[9:12] {
		if c < '0' || c > '9' {
			return false
		}
		h.status = h.status*10 + int(c-'0')
	}
	if h.status < 200 || h.status > 599 {
		return false
	}
	if bytes.IndexByte(head[:eol], '\n') >= 0 || bytes.IndexByte(head[:eol], '\r') >= 0 {
		return false
	}
	h.statusEnd = eol
	var lower [32]byte
	for pos := eol + 2; ; {
		i := bytes.Index(head[pos:], []byte("\r\n"))
		if i < 0 {
			return false
		}
		l := respLine{from: pos, to: pos + i}
		pos += i + 2
		if l.to == l.from {
			break
		}
		if bytes.IndexByte(head[l.from:l.to], '\n') >= 0 || bytes.IndexByte(head[l.from:l.to], '\r') >= 0 {
			return false
		}
		colon := bytes.IndexByte(head[l.from:l.to], ':')
		if colon <= 0 {
			return false
		}
		name := head[l.from : l.from+colon]
		for _, c := range name {
			if !isTokenByte(c) {
				return false
			}
		}
		l.nameEnd = l.from + colon
		l.vfrom = l.nameEnd + 1
		for l.vfrom < l.to && (head[l.vfrom] == ' ' || head[l.vfrom] == '\t') {
			l.vfrom++
		}
		for l.to > l.vfrom && (head[l.to-1] == ' ' || head[l.to-1] == '\t') {
			l.to--
		}
		value := head[l.vfrom:l.to]
		for _, c := range value {
			if c < ' ' && c != '\t' || c == 0x7f {
				return false
			}
		}
		switch {
		case eqFold(name, "content-length"):
			n, ok := parseContentLength(value)
			if !ok || h.cl >= 0 && h.cl != n {
				return false
			}
			h.cl = n
		case eqFold(name, "transfer-encoding"):
			if !eqFold(value, "chunked") || h.chunked {
				return false
			}
			h.chunked = true
		case eqFold(name, "connection"):
			closes, ok := connectionTokens(value)
			if !ok {
				return false
			}
			h.closeUp = h.closeUp || closes
		case isHopByHop(name) && !eqFold(name, "trailer"):
			// Trailer stays: the relay passes a chunked body's trailers
			// on as they came.
		default:
			if len(name) <= len(lower) {
				n := copy(lower[:], name)
				for j := range n {
					if c := lower[j]; c >= 'A' && c <= 'Z' {
						lower[j] = c + 'a' - 'A'
					}
				}
				name := lower[:n]
				if radioDiet[string(name)] {
					h.diet += l.to - l.from + 2
					switch string(name) {
					case "x-cache":
						h.hit = bytes.HasPrefix(value, []byte("HIT"))
					case "pep-transform":
						h.transform = string(value)
					}
					continue
				}
				if string(name) == "vary" && bytes.Contains(bytes.ToLower(value), markLower) {
					l.vary = true
				}
				l.managed = rewriteHeaders[string(name)]
				switch l.managed {
				case "Location":
					h.has |= bitLocation
				case "Set-Cookie":
					h.has |= bitSetCookie
				}
			}
			h.lines = append(h.lines, l)
		}
	}
	if h.chunked {
		h.cl = -1 // RFC 9112 section 6.3: Transfer-Encoding overrides Content-Length
	}
	return true
}

// parseContentLength parses a Content-Length value: decimal digits.
func parseContentLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// informational reports a 1xx response head other than 101.
func informational(head []byte) bool {
	return len(head) >= 12 && bytes.HasPrefix(head, []byte("HTTP/1.1 1")) && string(head[9:12]) != "101"
}

// appendInformational appends a 1xx head as it came.
func appendInformational(out, head []byte) []byte { return append(out, head...) }

// eqFold compares b with the lowercase ASCII s, ignoring case.
func eqFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// connectionTokens reads a Connection field value (RFC 9110 §7.6.1):
// closes when it names close; ok is false when it names anything but
// close and keep-alive (parseRequestHead and parseResponseHead leave such
// a head to the standard library).
func connectionTokens(v []byte) (closes, ok bool) {
	ok = true
	forTokens(v, func(t []byte) {
		switch {
		case eqFold(t, "close"):
			closes = true
		case eqFold(t, "keep-alive"):
		default:
			ok = false
		}
	})
	return closes, ok
}

// forTokens calls f with each non-empty comma-separated element of v,
// trimmed.
func forTokens(v []byte, f func([]byte)) {
	for len(v) > 0 {
		t := v
		if i := bytes.IndexByte(v, ','); i >= 0 {
			t, v = v[:i], v[i+1:]
		} else {
			v = nil
		}
		t = bytes.Trim(t, " \t")
		if len(t) > 0 {
			f(t)
		}
	}
}

// isTokenByte reports a tchar (RFC 9110 section 5.6.2).
func isTokenByte(c byte) bool {
	return c < 0x80 && httpguts.IsTokenRune(rune(c))
}

// hopHeaders are removed from requests and responses passing through
// (RFC 9110 section 7.6.1; the list of httputil.ReverseProxy).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// isHopByHop reports whether name is one of hopHeaders (any case): the
// relay's parsers (parseRequestHead, parseResponseHead) leave these lines
// out, as removeHopByHop does on the standard library path.
func isHopByHop(name []byte) bool {
	for _, h := range hopLower {
		if eqFold(name, h) {
			return true
		}
	}
	return false
}

// hopLower is hopHeaders in lower case (eqFold's second argument).
var hopLower = func() []string {
	l := make([]string, len(hopHeaders))
	for i, h := range hopHeaders {
		l[i] = strings.ToLower(h)
	}
	return l
}()

// removeHopByHop removes the hop-by-hop headers and those Connection
// names.
func removeHopByHop(h http.Header) {
	for _, f := range h["Connection"] {
		for _, sf := range bytes.Split([]byte(f), []byte(",")) {
			if sf = bytes.TrimSpace(sf); len(sf) > 0 {
				h.Del(string(sf))
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}
