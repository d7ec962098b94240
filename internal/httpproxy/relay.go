package httpproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/textproto"
	"net/url"
	"strconv"
	"sync"
	"time"

	"pep/internal/mode"
	"pep/internal/optimize"

	"pep/internal/cachepolicy"
)

// The relay is the Server's HTTP/1.1 path for the common request: GET or
// HEAD in origin form, without a body, Expect or Upgrade, with a head that
// fits clientBufSize. It reads the request head in place from the
// connection's buffer, decides with the Proxy's one decision function
// (decide), writes the forward-proxy request head to a connection to
// Squid from the Proxy's pool (upstream.go: per subscriber address, so a
// PROXY protocol header, sent once at connect, names the right
// subscriber; given back once the response is read to its end), and
// relays the response by its framing (Content-Length, chunked, until
// close), copying the header lines it does not change byte for byte. A
// response whose headers pepd changes (VIP-path Location and Set-Cookie,
// url mode: rewrite.Rewriter.Response) goes through the same
// adjustResponse as the ReverseProxy path, on a header map of just the
// headers it reads or writes (rewriteHeaders); a body the rewriter reads
// is sent on with new framing.
//
// Everything else (malformed or unusual requests, refusals, the health
// path, direct forwarding after a host mismatch) is handed over with the
// connection, unread bytes included, to the standard library's
// http.Server and Proxy.ServeHTTP, which serve the connection from then
// on: decide has no side effects, so the request is decided again there
// and counted once.
const (
	clientBufSize = 8 << 10  // a request head larger than this is handed over
	flushBytes    = 32 << 10 // relayed bodies are written in pieces of about this size
)

// relayBufs holds the relay's write buffers (relayConn.out and .hbuf)
// between requests, so that a kept-alive connection waiting for its next
// request holds none: out grows to flushBytes plus what one read from
// Squid brings (up to about 96 KB), and 10,000 idle subscriber
// connections kept about 400 MB alive before (TestSoak). A buffer larger
// than maxPooledBuf (a huge response head) is left to the collector.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

const maxPooledBuf = 256 << 10

// relayConn is one subscriber connection served by the relay.
type relayConn struct {
	s     *Server
	p     *Proxy
	c     *conn
	br    *bufio.Reader // from the subscriber
	src   netip.AddrPort
	up    *upConn       // the connection to Squid while a request is served (from Proxy.pool)
	ubr   *bufio.Reader // from up, from upstreamReaders while a response is read
	out   []byte        // heads and body pieces being written (from relayBufs while a request is served)
	hbuf  []byte        // the response head (likewise)
	outP  *[]byte       // relayBufs' holders of out and hbuf, nil while idle
	hbufP *[]byte
	dl    int       // kind of read deadline armed on c
	dlAt  time.Time // when it was armed
	body  bodyReader
	hdr   http.Header   // the headers adjustResponse sees (rewriteHeaders)
	r     http.Response // the response adjustResponse sees
	req   http.Request  // for decide and the rewriter (Method, URL, Host, ...)
	head  reqHead
	resp  respHead
}

// serveRelay serves c until it closes, times out, or is handed over.
func (s *Server) serveRelay(c *conn) {
	p := s.p
	rc := &relayConn{s: s, p: p, c: c, br: bufio.NewReaderSize(c, clientBufSize)}
	rc.req.RemoteAddr = c.RemoteAddr().String()
	if ap, err := netip.ParseAddrPort(rc.req.RemoteAddr); err == nil {
		rc.src = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	rc.req.Proto, rc.req.ProtoMajor, rc.req.ProtoMinor = "HTTP/1.1", 1, 1
	handedOver := false
	defer func() {
		s.untrack(c)
		rc.releaseBufs()
		rc.closeUpstream()
		if !handedOver {
			c.Close()
		}
	}()
	rc.setDeadline(dlHeader, s.lim.ReadHeaderTimeout) // the first request, from the connection's start
	for first := true; ; first = false {
		if !first {
			rc.releaseBufs()
			c.active.Store(false)
			if s.closing() {
				return
			}
			c.idle.Store(true)
			if rc.br.Buffered() == 0 {
				c.waiting.Store(true)
				rc.setDeadline(dlIdle, s.lim.IdleTimeout)
				if _, err := rc.br.Peek(1); err != nil {
					return
				}
			}
		}
		// RFC 9112 §2.2: a server SHOULD ignore at least one empty line
		// (CRLF) received before the request-line; up to four are.
		if err := skipEmptyLines(rc.br, 4); err != nil {
			return
		}
		// The read header timeout runs from the first byte of the request
		// on: it is armed only if the head is not there with it.
		raw, err := readHead(rc.br, func() { rc.setDeadline(dlHeader, s.lim.ReadHeaderTimeout) })
		if err != nil {
			return // timeout (counted by conn), EOF or reset: closed without an answer, as net/http does
		}
		d, ok := rc.decide(raw)
		if !ok {
			c.SetReadDeadline(time.Time{})
			c.idle.Store(false)
			if raw != nil && hasCLAndTE(raw) {
				c.closeNext.Store(true)
			}
			if s.handOver(&handoffConn{conn: c, r: rc.br}) {
				handedOver = true
			}
			return
		}
		c.active.Store(true)
		rc.takeBufs()
		if !rc.forward(raw, d.ri) {
			return
		}
		if rc.head.close {
			return
		}
	}
}

// takeBufs gives rc its write buffers for one request (relayBufs).
func (rc *relayConn) takeBufs() {
	if rc.outP == nil {
		rc.outP, rc.hbufP = relayBufs.Get().(*[]byte), relayBufs.Get().(*[]byte)
		rc.out, rc.hbuf = (*rc.outP)[:0], (*rc.hbufP)[:0]
	}
}

// releaseBufs returns rc's write buffers to relayBufs (none held: no-op).
func (rc *relayConn) releaseBufs() {
	if rc.outP == nil {
		return
	}
	for _, b := range [...]struct {
		p   *[]byte
		buf []byte
	}{{rc.outP, rc.out}, {rc.hbufP, rc.hbuf}} {
		if cap(b.buf) <= maxPooledBuf {
			*b.p = b.buf[:0]
			relayBufs.Put(b.p)
		}
	}
	rc.outP, rc.hbufP, rc.out, rc.hbuf = nil, nil, nil, nil
}

// setDeadline arms the subscriber connection's read deadline.
func (rc *relayConn) setDeadline(kind int, d time.Duration) {
	now := time.Now()
	if kind == rc.dl && kind != dlHeader && now.Sub(rc.dlAt) < d/64 {
		return
	}
	rc.c.SetReadDeadline(now.Add(d))
	rc.dl, rc.dlAt = kind, now
}

// setUpDeadline arms (kind dlUpstream) or clears (dlNone) the upstream
// connection's read deadline.
func (rc *relayConn) setUpDeadline(kind int) { rc.up.armRead(kind, rc.p.upTimeout) }

var privateToken = []byte(cachepolicy.PrivateToken)

// hasCLAndTE reports whether a request head carries both Content-Length
// and Transfer-Encoding (RFC 9112 §6.1: the server MUST close the
// connection after responding to such a request).
func hasCLAndTE(head []byte) bool {
	var cl, te bool
	for _, l := range bytes.Split(head, []byte("\n"))[1:] {
		name, _, ok := bytes.Cut(l, []byte(":"))
		if !ok {
			continue
		}
		name = bytes.TrimSpace(name)
		cl = cl || eqFold(name, "content-length")
		te = te || eqFold(name, "transfer-encoding")
	}
	return cl && te
}

// skipEmptyLines consumes up to n empty lines (CRLF or a bare LF) at the
// start of br, waiting for bytes as needed (RFC 9112 §2.2).
func skipEmptyLines(br *bufio.Reader, n int) error {
	for range n {
		b, err := br.Peek(1)
		if err != nil {
			return err
		}
		switch b[0] {
		case '\n':
			br.Discard(1)
		case '\r':
			b, err = br.Peek(2)
			if err != nil {
				return err
			}
			if b[1] != '\n' {
				return nil
			}
			br.Discard(2)
		default:
			return nil
		}
	}
	return nil
}

// headEnd returns the length of the head at the start of buf, up to and
// including the empty line that ends it, or -1 when buf holds no empty
// line yet. Line ends are CRLF or, leniently, a bare LF (RFC 9112 §2.2:
// a recipient MAY recognize a single LF as a line terminator); a head
// with bare LFs is left to the standard library, which accepts them.
func headEnd(buf []byte) int {
	for i := 0; i < len(buf); i++ {
		if buf[i] != '\n' {
			continue
		}
		// buf[i] ends a line; the next line is empty if it is "\n" or "\r\n".
		switch {
		case i+1 < len(buf) && buf[i+1] == '\n':
			return i + 2
		case i+2 < len(buf) && buf[i+1] == '\r' && buf[i+2] == '\n':
			return i + 3
		}
	}
	return -1
}

// readHead returns the request or response head at the start of br's
// buffer, up to and including the empty line (headEnd), without
// consuming it; nil and no error if it does not fit in the buffer.
// beforeRead, if not nil, is called once before br has to read from its
// connection.
func readHead(br *bufio.Reader, beforeRead func()) ([]byte, error) {
	from := 0
	for {
		buf, _ := br.Peek(br.Buffered())
		if i := headEnd(buf[from:]); i >= 0 {
			return buf[:from+i], nil
		}
		if len(buf) == br.Size() {
			return nil, nil
		}
		from = max(0, len(buf)-3)
		if beforeRead != nil {
			beforeRead()
			beforeRead = nil
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return nil, nil
			}
			return nil, err
		}
	}
}

// decide parses a request head and runs the Proxy's decision on it. ok is
// false when the relay does not serve the request: the head is not
// simple (parseRequestHead), the target does not parse, or the decision
// is not "forward to Squid".
func (rc *relayConn) decide(raw []byte) (decision, bool) {
	h := &rc.head
	if raw == nil || !parseRequestHead(raw, h) {
		return decision{}, false
	}
	target := string(raw[h.target.from:h.target.to])
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return decision{}, false
	}
	r := &rc.req
	r.Method = h.method
	r.URL = u
	r.RequestURI = target
	r.Host = string(raw[h.host.from:h.host.to])
	orig, intercepted := rc.c.originalDst()
	d := rc.p.decide(r, rc.src, orig, intercepted)
	if d.ri == nil || d.ri.direct.IsValid() {
		return d, false
	}
	if h.origin.to > h.origin.from {
		d.ri.origin = string(raw[h.origin.from:h.origin.to])
	}
	rc.p.account(r, &d)
	return d, true
}

// forward sends the request (raw, parsed into rc.head) to Squid and
// relays the response. It returns false when the subscriber connection
// must close.
func (rc *relayConn) forward(raw []byte, ri *reqInfo) bool {
	p := rc.p
	out := rc.requestHead(raw, ri)
	rc.br.Discard(len(raw))
	ri.admit.Wait(context.Background())
	ri.started = time.Now()
	rh, err := rc.roundTrip(out)
	ri.admit.Done()
	if err != nil {
		rc.releaseReader()
		d := decision{md: ri.mode}.upstreamFailed(ri.kind, err)
		p.account(&rc.req, &d)
		rc.out = appendErrorAnswer(rc.out[:0], d.code, d.reason, rc.head.close || rc.s.closing())
		_, err := rc.c.Write(rc.out)
		return err == nil
	}
	p.m.upSquid.Observe(time.Since(ri.started).Seconds())
	p.rc[ri.mode][ri.kind][outSquid].Inc()
	ok := rc.relayResponse(rh, ri)
	rc.releaseReader()
	if rc.up != nil { // the response was read to its end, nothing after it
		rc.setLowat(1) // pooled connections wake their reader at every byte
		if rc.up != nil {
			p.pool.put(rc.up)
			rc.up = nil
		}
	}
	return ok
}

// requestHead builds the forward-proxy request head for Squid in rc.out:
// absolute URI and Host of the origin, the subscriber's header lines as
// they came except hop-by-hop and forwarding headers (as
// httputil.ReverseProxy with Rewrite removes them), VIP-path Cookie and
// Referer mapped (vipCookie, vipReferer), X-Forwarded-For without PROXY
// protocol.
func (rc *relayConn) requestHead(raw []byte, ri *reqInfo) []byte {
	h := &rc.head
	out := append(rc.out[:0], h.method...)
	out = append(out, " http://"...)
	out = append(out, ri.target.Host...)
	out = append(out, ri.target.RequestURI()...)
	out = append(out, " HTTP/1.1\r\nHost: "...)
	out = append(out, ri.target.Host...)
	out = append(out, "\r\n"...)
	private := false
	for _, l := range h.lines {
		line := raw[l.from:l.to]
		if bytes.Contains(line, privateToken) {
			if name, v, ok := bytes.Cut(line, []byte(":")); ok && eqFold(bytes.TrimSpace(name), "user-agent") {
				// The same mapping as the standard library path's
				// (Proxy.rewriteRequest): CacheKeeper's opt-out.
				var ua string
				if ua, private = cachepolicy.PrivateUA(string(bytes.TrimSpace(v)), ri.st.KeepPrivate); private {
					out = append(out, "User-Agent: "...)
					out = append(out, ua...)
					out = append(out, "\r\n"+cachepolicy.PrivateHeader+": 1\r\n"...)
					continue
				}
			}
		}
		out = append(out, line...)
		out = append(out, "\r\n"...)
	}
	if ri.kind == kindVIPPath {
		if len(h.cookies) > 0 {
			vals := make([]string, len(h.cookies))
			for i, c := range h.cookies {
				vals[i] = string(raw[c.from:c.to])
			}
			if v := vipCookie(vals, ri.target); v != "" {
				out = append(out, "Cookie: "...)
				out = append(out, v...)
				out = append(out, "\r\n"...)
			}
		}
		for _, r := range h.referers {
			if v, keep := vipReferer(string(raw[r.from:r.to]), ri.st.Rewriter); keep {
				out = append(out, "Referer: "...)
				out = append(out, v...)
				out = append(out, "\r\n"...)
			}
		}
	} else {
		for _, l := range h.cookieLines {
			out = append(out, raw[l.from:l.to]...)
			out = append(out, "\r\n"...)
		}
	}
	if h.teTrailers {
		out = append(out, "Te: trailers\r\n"...)
	}
	if rc.p.opt.Mark(h.method, ri.target.Hostname(), h.rng, h.noTransform) {
		out = append(out, optimize.MarkHeader+": 1\r\n"...)
		head := len(out)
		out = append(out, optimize.LinkRateHeader+": "...)
		if v := rc.c.appendLinkRate(out); len(v) > len(out) {
			out = append(v, "\r\n"...)
		} else {
			out = out[:head] // no estimate yet
		}
	}
	// The same decision as the standard library path's
	// (Proxy.rewriteRequest); a subscriber's own Pep-First was dropped
	// (parseRequestHead).
	if ri.admit = rc.p.cache.Mark(h.method, ri.target, private); ri.admit.First {
		out = append(out, cachepolicy.FirstHeader+": 1\r\n"...)
	}
	if rc.p.hints != nil && rc.p.hints.Switch.On() {
		rc.hintRequest(raw, ri, private)
	}
	if !rc.p.pp {
		out = append(out, "X-Forwarded-For: "...)
		out = rc.src.Addr().AppendTo(out)
		out = append(out, "\r\n"...)
	}
	out = append(out, "\r\n"...)
	rc.out = out
	return out
}

// roundTrip writes the request head to a connection to Squid from the
// pool (Proxy.pool: an idle one of the subscriber's, or a new one) and
// reads the response head, waiting at most Options.UpstreamTimeout. A
// kept-alive connection that fails before any byte of the response (Squid
// closed it while idle, or restarted) is replaced once, by a new
// connection: GET and HEAD are idempotent. The head is returned unread in
// rc.ubr; nil means it does not fit in the buffer.
func (rc *relayConn) roundTrip(out []byte) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		if rc.up == nil {
			c, err := rc.p.pool.get(context.Background(), rc.src, attempt > 0)
			if err != nil {
				return nil, err
			}
			rc.up = c
		}
		rc.setLowat(1)
		if rc.up == nil {
			continue // lowering SO_RCVLOWAT failed: closed, take another
		}
		if rc.ubr == nil {
			rc.ubr = upstreamReaders.Get().(*bufio.Reader)
		}
		rc.ubr.Reset(rc.up)
		_, err := rc.up.Write(out)
		var head []byte
		if err == nil {
			rc.setUpDeadline(dlUpstream)
			for {
				head, err = readHead(rc.ubr, nil)
				if err != nil || head == nil || !informational(head) {
					break
				}
				// 1xx (not 101): pass it on and read the final response.
				rc.out = appendInformational(rc.out[:0], head)
				rc.ubr.Discard(len(head))
				if _, werr := rc.c.Write(rc.out); werr != nil {
					return nil, werr
				}
			}
		}
		if err == nil {
			rc.up.used = true
			return head, nil
		}
		stale := rc.up.replaceable(attempt, rc.ubr.Buffered(), err)
		rc.closeUpstream()
		if !stale {
			return nil, err
		}
	}
}

func (rc *relayConn) closeUpstream() {
	if rc.up != nil {
		rc.up.Close()
		rc.up = nil
	}
}

// maxLowat bounds the upstream SO_RCVLOWAT: the rest of a body up to
// this size wakes the relay once (setLowat).
const maxLowat = 32 << 10

// setLowat sets the upstream connection's SO_RCVLOWAT to n bytes when it
// is not already n: copyBody sets the rest of a Content-Length body
// (at most maxLowat), roundTrip sets 1 again before a response head.
// Squid sends a cached object in 4 KB pieces (its client-side buffer);
// without it each piece would wake the relay. A failure to raise it is
// ignored (the relay is woken more often); a failure to lower it closes
// the connection, whose head could otherwise wait for bytes that never
// come (roundTrip then connects afresh).
func (rc *relayConn) setLowat(n int) {
	if rc.up == nil || n == rc.up.lowat {
		return
	}
	r, ok := rc.up.Conn.(*rawConn)
	if !ok {
		return
	}
	if err := r.setRcvLowat(n); err == nil {
		rc.up.lowat = n
	} else if n == 1 {
		rc.closeUpstream()
	}
}

// releaseReader returns the upstream reader to its pool once the response
// is done; bytes after the response close the connection.
func (rc *relayConn) releaseReader() {
	if rc.ubr == nil {
		return
	}
	if rc.ubr.Buffered() > 0 {
		rc.closeUpstream()
	}
	rc.ubr.Reset(nil)
	upstreamReaders.Put(rc.ubr)
	rc.ubr = nil
}

// relayResponse sends the response whose head is at the start of rc.ubr
// to the subscriber. It returns false when the subscriber connection must
// close.
func (rc *relayConn) relayResponse(raw []byte, ri *reqInfo) bool {
	h := &rc.resp
	if raw == nil || !parseResponseHead(raw, h) {
		return rc.relayParsed(ri)
	}
	// The head moves to rc.hbuf: the rewriter may read the body through
	// rc.ubr before the head is written.
	rc.hbuf = append(rc.hbuf[:0], raw...)
	rc.ubr.Discard(len(raw))
	rc.p.radioDone(h.diet, h.transform, h.hit)
	hb := rc.hbuf
	noBody := rc.head.method == http.MethodHead || h.status == http.StatusNoContent || h.status == http.StatusNotModified
	untilClose := !noBody && h.cl < 0 && !h.chunked
	if untilClose {
		h.closeUp = true // delimited by the end of the connection: sent on chunked
	}
	closeClient := rc.head.close || rc.s.closing()
	body := &rc.body
	*body = bodyReader{r: rc.ubr, cl: h.cl, chunked: h.chunked, noBody: noBody}
	var hdr http.Header
	// VIP-path responses are always adjusted: they get CORS (adjustResponse).
	adjust := ri.mode == mode.URL || ri.kind == kindVIPPath
	var links []string
	if ri.hint.on {
		links = rc.hintResponse(ri, noBody)
	}
	if adjust || untilClose || len(links) > 0 {
		if rc.hdr == nil {
			rc.hdr = make(http.Header, 4)
		}
		hdr = rc.hdr
		clear(hdr)
		for _, l := range h.lines {
			if l.managed != "" {
				hdr[l.managed] = append(hdr[l.managed], string(hb[l.vfrom:l.to]))
			}
		}
		resp := &rc.r
		*resp = http.Response{Status: string(hb[9:h.statusEnd]), StatusCode: h.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: hdr, Request: &rc.req, ContentLength: h.cl, Body: body}
		if noBody {
			resp.Body = http.NoBody
		} else if h.chunked {
			resp.TransferEncoding = []string{"chunked"}
		}
		if adjust {
			rc.p.adjustResponse(resp, ri)
		}
		if len(links) > 0 {
			hdr["Link"] = append(hdr["Link"], links...)
		}
		if untilClose || resp.Body != body && resp.Body != http.NoBody || body.touched {
			return rc.sendReframed(resp, body, closeClient)
		}
	}
	return rc.relayRaw(hdr, body, closeClient)
}

// hintRequest gives the hints what they need of the request in raw
// (Proxy.hintRequest).
func (rc *relayConn) hintRequest(raw []byte, ri *reqInfo, private bool) {
	h := &rc.head
	var accept, ae, ua, ref string
	for _, l := range h.lines {
		name, v, ok := bytes.Cut(raw[l.from:l.to], []byte(":"))
		if !ok {
			continue
		}
		switch name = bytes.TrimSpace(name); {
		case eqFold(name, "accept"):
			accept = string(bytes.TrimSpace(v))
		case eqFold(name, "accept-encoding"):
			ae = string(bytes.TrimSpace(v))
		case eqFold(name, "user-agent"):
			ua = string(bytes.TrimSpace(v))
		}
	}
	if len(h.referers) > 0 {
		ref = string(raw[h.referers[0].from:h.referers[0].to])
	}
	rc.p.hintRequest(ri, h.method, "http", string(raw[h.host.from:h.host.to]), string(raw[h.target.from:h.target.to]),
		ref, accept, ae, ua, private)
}

// hintResponse gives the hints the response head in rc.hbuf
// (Proxy.hintResponse) and returns the Link values to add.
func (rc *relayConn) hintResponse(ri *reqInfo, noBody bool) []string {
	h := &rc.resp
	var ct, cc string
	for _, l := range h.lines {
		switch l.managed {
		case "Content-Type":
			ct = string(rc.hbuf[l.vfrom:l.to])
		case "Cache-Control":
			if cc != "" {
				cc += ","
			}
			cc += string(rc.hbuf[l.vfrom:l.to])
		}
	}
	n := h.cl
	if noBody {
		n = 0
	}
	return rc.p.hintResponse(ri, h.status, ct, cc, n)
}

// relayRaw writes the response head (the upstream lines in rc.hbuf minus
// hop-by-hop ones, the headers in hdr instead of the lines they came
// from, the framing, and Connection: close if closing) and relays the body
// as it comes, chunk lines and trailers included.
func (rc *relayConn) relayRaw(hdr http.Header, body *bodyReader, closeClient bool) bool {
	h := &rc.resp
	head := rc.hbuf
	out := append(rc.out[:0], head[:h.statusEnd]...)
	out = append(out, "\r\n"...)
	for _, l := range h.lines {
		if hdr != nil && l.managed != "" {
			continue
		}
		if l.vary {
			if v := radioVary(string(head[l.vfrom:l.to])); v != "" {
				out = append(out, "Vary: "...)
				out = append(out, v...)
				out = append(out, "\r\n"...)
			}
			continue
		}
		out = append(out, head[l.from:l.to]...)
		out = append(out, "\r\n"...)
	}
	out = appendHeader(out, hdr)
	if h.cl >= 0 {
		out = append(out, "Content-Length: "...)
		out = strconv.AppendInt(out, h.cl, 10)
		out = append(out, "\r\n"...)
	} else if h.chunked && !body.noBody {
		out = append(out, "Transfer-Encoding: chunked\r\n"...)
	}
	if closeClient {
		out = append(out, "Connection: close\r\n"...)
	}
	out = append(out, "\r\n"...)
	var err error
	switch {
	case body.noBody:
	case h.chunked:
		out, err = rc.copyChunked(out)
	default: // Content-Length, or until the upstream closes
		out, err = rc.copyBody(out, h.cl)
	}
	if err != nil {
		rc.closeUpstream()
		var cw clientWriteError
		if !errors.As(err, &cw) {
			// Squid's body failed (issue 12, D5): the subscriber gets the
			// head and what came, then the close, a truncation it can
			// detect (short of Content-Length, or no last chunk).
			rc.c.Write(out)
			rc.p.m.truncated.Inc()
		}
		return false
	}
	if _, err := rc.c.Write(out); err != nil {
		rc.closeUpstream()
		return false
	}
	rc.out = out[:0]
	if h.closeUp {
		rc.closeUpstream()
	}
	return !closeClient
}

// copyBody appends n bytes of body (n < 0: until EOF) from rc.ubr to out,
// writing out to the subscriber whenever it grows past flushBytes. The
// returned slice holds what is left to write.
func (rc *relayConn) copyBody(out []byte, n int64) ([]byte, error) {
	for n != 0 {
		if rc.ubr.Buffered() == 0 {
			rc.setUpDeadline(dlNone) // Squid's body takes the origin's time
			if n > 0 {
				rc.setLowat(int(min(n, maxLowat)))
			}
			if _, err := rc.ubr.Peek(1); err != nil {
				if n < 0 && err == io.EOF {
					return out, nil
				}
				return out, err
			}
		}
		k := rc.ubr.Buffered()
		if n >= 0 && int64(k) > n {
			k = int(n)
		}
		b, _ := rc.ubr.Peek(k)
		if len(out) > 0 && len(out)+k > flushBytes && len(out)+k > cap(out) {
			if _, err := rc.c.Write(out); err != nil {
				return out, clientWriteError{err}
			}
			out = out[:0]
		}
		if len(out) == 0 && k >= flushBytes {
			if _, err := rc.c.Write(b); err != nil {
				return out, clientWriteError{err}
			}
		} else {
			out = append(out, b...)
		}
		rc.ubr.Discard(k)
		if n > 0 {
			n -= int64(k)
		}
	}
	return out, nil
}

// copyChunked appends a chunked body, chunk lines and trailers as they
// came, from rc.ubr to out (RFC 9112 section 7.1), writing out to the
// subscriber whenever it grows past flushBytes.
func (rc *relayConn) copyChunked(out []byte) ([]byte, error) {
	readLine := func() ([]byte, error) {
		if rc.ubr.Buffered() == 0 {
			rc.setUpDeadline(dlNone)
		}
		line, err := rc.ubr.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		if len(line) < 2 || line[len(line)-2] != '\r' {
			return nil, errBadChunk
		}
		return line, nil
	}
	for {
		line, err := readLine()
		if err != nil {
			return out, err
		}
		size, ok := chunkSize(line[:len(line)-2])
		if !ok {
			return out, errBadChunk
		}
		out = append(out, line...)
		if size == 0 {
			for { // trailer section, ending with an empty line
				line, err := readLine()
				if err != nil {
					return out, err
				}
				out = append(out, line...)
				if len(line) == 2 {
					return out, nil
				}
			}
		}
		if size > 1<<62 {
			return out, errBadChunk
		}
		if out, err = rc.copyBody(out, size); err != nil {
			return out, err
		}
		crlf, err := rc.ubr.Peek(2)
		if err != nil || crlf[0] != '\r' || crlf[1] != '\n' {
			return out, errBadChunk
		}
		out = append(out, crlf...)
		rc.ubr.Discard(2)
	}
}

var errBadChunk = errors.New("httpproxy: malformed chunked body from upstream")

// clientWriteError is a failed write to the subscriber while relaying a
// body (the other errors of copyBody and copyChunked are Squid's).
type clientWriteError struct{ error }

func (e clientWriteError) Unwrap() error { return e.error }

// readErrRecorder remembers the first read error of r (to tell a failed
// upstream body from a failed write to the subscriber).
type readErrRecorder struct {
	r   io.Reader
	err error
}

func (e *readErrRecorder) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// chunkSize parses a chunk-size line without its CRLF, extensions
// ignored.
func chunkSize(line []byte) (int64, bool) {
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 16 {
		return 0, false
	}
	var n int64
	for _, c := range line {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int64(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int64(c-'A'+10)
		default:
			return 0, false
		}
	}
	return n, n >= 0
}

// sendReframed sends a response whose body the rewriter read (rewritten,
// or passed on unchanged after reading): the head from the upstream lines
// and resp.Header, framed by resp.ContentLength (chunked if unknown), the
// body from resp.Body. The upstream connection is kept only if its body
// was read to the end.
func (rc *relayConn) sendReframed(resp *http.Response, body *bodyReader, closeClient bool) bool {
	h := &rc.resp
	full := resp.Header
	for _, l := range h.lines {
		if l.managed == "" {
			k := textproto.CanonicalMIMEHeaderKey(string(rc.hbuf[l.from:l.nameEnd]))
			v := string(rc.hbuf[l.vfrom:l.to])
			if l.vary {
				if v = radioVary(v); v == "" {
					continue
				}
			}
			full[k] = append(full[k], v)
		}
	}
	ok := rc.sendResponse(resp, closeClient)
	resp.Body.Close()
	if !body.done || h.closeUp {
		rc.closeUpstream()
	}
	return ok && !closeClient
}

// relayParsed serves a response whose head does not fit in the upstream
// buffer or is unusual (HTTP/1.0, a transfer coding other than chunked,
// a Connection header naming other headers): http.ReadResponse reads it
// and sendResponse sends it on, after adjustResponse. The upstream
// connection is closed after it.
func (rc *relayConn) relayParsed(ri *reqInfo) bool {
	rc.setUpDeadline(dlNone)
	resp, err := http.ReadResponse(rc.ubr, &rc.req)
	if err != nil {
		rc.closeUpstream()
		d := decision{md: ri.mode}.upstreamError(ri.kind, http.StatusBadGateway, "upstream failed", err)
		rc.p.account(&rc.req, &d)
		closeClient := rc.head.close || rc.s.closing()
		rc.out = appendErrorAnswer(rc.out[:0], d.code, d.reason, closeClient)
		_, err := rc.c.Write(rc.out)
		return err == nil && !closeClient
	}
	removeHopByHop(resp.Header)
	rc.p.radioDone(dietHeader(resp.Header))
	rc.p.adjustResponse(resp, ri)
	rc.p.addHints(resp, ri)
	closeClient := rc.head.close || rc.s.closing()
	ok := rc.sendResponse(resp, closeClient)
	resp.Body.Close()
	rc.closeUpstream()
	return ok && !closeClient
}

// sendResponse writes resp to the subscriber: status line, resp.Header
// without hop-by-hop headers and Content-Length, the framing
// (Content-Length if known, else chunked) and the body. An upstream read
// error in the body closes the subscriber connection (the response is cut
// short), as net/http does.
func (rc *relayConn) sendResponse(resp *http.Response, closeClient bool) bool {
	removeHopByHop(resp.Header)
	cl := resp.Header.Get("Content-Length")
	delete(resp.Header, "Content-Length")
	noBody := rc.head.method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 ")
	if resp.Status != "" {
		b.WriteString(resp.Status)
	} else {
		b.WriteString(strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode))
	}
	b.WriteString("\r\n")
	resp.Header.Write(&b)
	chunked := false
	switch {
	case noBody:
		if cl != "" {
			b.WriteString("Content-Length: " + cl + "\r\n")
		}
	case resp.ContentLength >= 0:
		b.WriteString("Content-Length: " + strconv.FormatInt(resp.ContentLength, 10) + "\r\n")
	default:
		b.WriteString("Transfer-Encoding: chunked\r\n")
		chunked = true
	}
	if closeClient {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n")
	bw := bufio.NewWriterSize(rc.c, flushBytes)
	bw.Write(b.Bytes())
	if !noBody {
		var w io.Writer = bw
		var cw io.WriteCloser
		if chunked {
			cw = httputil.NewChunkedWriter(bw)
			w = cw
		}
		var err error
		body := &readErrRecorder{r: resp.Body}
		if resp.ContentLength >= 0 {
			_, err = io.CopyN(w, body, resp.ContentLength)
		} else {
			_, err = io.Copy(w, body)
		}
		if err != nil {
			bw.Flush()
			if body.err != nil || errors.Is(err, io.EOF) {
				rc.p.m.truncated.Inc() // D5: the body from Squid ended early
			}
			return false
		}
		if chunked {
			cw.Close()
			bw.WriteString("\r\n")
		}
	}
	return bw.Flush() == nil
}

// appendHeader appends h's fields as header lines.
func appendHeader(out []byte, h http.Header) []byte {
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, k...)
			out = append(out, ": "...)
			out = append(out, v...)
			out = append(out, "\r\n"...)
		}
	}
	return out
}

// bodyReader reads a response body from the upstream reader by its
// framing, for the rewriter. Close does not close the connection.
type bodyReader struct {
	r       *bufio.Reader
	cl      int64 // -1: chunked or until EOF
	chunked bool
	noBody  bool
	cr      io.Reader
	touched bool // Read was called
	done    bool // the body was read to its end
}

func (b *bodyReader) Read(p []byte) (int, error) {
	b.touched = true
	if b.done || b.noBody {
		b.done = true
		return 0, io.EOF
	}
	switch {
	case b.chunked:
		if b.cr == nil {
			b.cr = httputil.NewChunkedReader(b.r)
		}
		n, err := b.cr.Read(p)
		if err == io.EOF {
			for { // trailer section
				line, lerr := b.r.ReadSlice('\n')
				if lerr != nil {
					return n, io.ErrUnexpectedEOF
				}
				if len(line) <= 2 {
					break
				}
			}
			b.done = true
		}
		return n, err
	case b.cl >= 0:
		if b.cl == 0 {
			b.done = true
			return 0, io.EOF
		}
		if int64(len(p)) > b.cl {
			p = p[:b.cl]
		}
		n, err := b.r.Read(p)
		b.cl -= int64(n)
		if err == io.EOF && b.cl > 0 {
			err = io.ErrUnexpectedEOF
		}
		if b.cl == 0 && err == nil {
			b.done = true
		}
		return n, err
	default:
		n, err := b.r.Read(p)
		if err == io.EOF {
			b.done = true
		}
		return n, err
	}
}

func (b *bodyReader) Close() error { return nil }

// handoffConn is a subscriber connection handed over to the standard
// library server: reads start with what the relay had buffered.
type handoffConn struct {
	*conn
	r *bufio.Reader
}

func (h *handoffConn) Read(b []byte) (int, error) { return h.r.Read(b) }

// handoffListener feeds handed-over connections to the http.Server.
type handoffListener struct {
	ch     chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newHandoffListener() *handoffListener {
	return &handoffListener{ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return &net.TCPAddr{} }
