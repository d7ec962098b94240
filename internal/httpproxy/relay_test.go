package httpproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"pep/internal/mode"
)

// scripted is an upstream standing in for Squid where the test needs exact
// bytes on the wire (framing, 1xx, HTTP/1.0, a silent close): a real TCP
// server on loopback that skips a PROXY header, reads each request with
// http.ReadRequest, records it and answers with answer(request). close
// makes it close the connection after an answer.
type scripted struct {
	addr   string
	mu     sync.Mutex
	reqs   []*http.Request
	bodies []string
	conns  int
}

type scriptedAnswer struct {
	raw   string
	close bool
	hang  bool // answer nothing
}

// startUpstream runs a loopback server standing in for Squid and returns
// its address: per connection, serve gets the connection and a reader on
// it past the PROXY header, if one came; the connection is closed when
// serve returns.
func startUpstream(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				if b, _ := br.Peek(6); string(b) == "PROXY " {
					br.ReadString('\n')
				}
				serve(c, br)
			}()
		}
	}()
	return l.Addr().String()
}

func startScripted(t *testing.T, answer func(r *http.Request) scriptedAnswer) *scripted {
	t.Helper()
	s := &scripted{}
	s.addr = startUpstream(t, func(c net.Conn, br *bufio.Reader) {
		s.mu.Lock()
		s.conns++
		s.mu.Unlock()
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body, _ := io.ReadAll(r.Body)
			s.mu.Lock()
			s.reqs = append(s.reqs, r)
			s.bodies = append(s.bodies, string(body))
			s.mu.Unlock()
			a := answer(r)
			if a.hang {
				io.Copy(io.Discard, br)
				return
			}
			io.WriteString(c, a.raw)
			if a.close {
				return
			}
		}
	})
	return s
}

func (s *scripted) last() (*http.Request, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		return nil, ""
	}
	return s.reqs[len(s.reqs)-1], s.bodies[len(s.bodies)-1]
}

func (s *scripted) connCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// keepAlive sends requests one after another on one connection from
// 127.0.0.9 and returns the responses with their bodies read.
type keepAlive struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialKeepAlive(t *testing.T, addr string) *keepAlive {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.9")}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return &keepAlive{t: t, c: c, br: bufio.NewReader(c)}
}

func (k *keepAlive) do(req string) (*http.Response, string) {
	k.t.Helper()
	if _, err := io.WriteString(k.c, req); err != nil {
		k.t.Fatal(err)
	}
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(k.br, &http.Request{Method: method})
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 { // 1xx before the response
		resp, err = http.ReadResponse(k.br, &http.Request{Method: method})
	}
	if err != nil {
		k.t.Fatalf("reading the response to %q: %v", req, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		k.t.Fatalf("reading the body of the response to %q: %v", req, err)
	}
	resp.Body.Close()
	return resp, string(b)
}

// relayWorld is pepd (relay on) in front of a scripted upstream.
func relayWorld(t *testing.T, md mode.Mode, pp bool, answer func(r *http.Request) scriptedAnswer) (*pepd, *scripted) {
	ns := startDNS(t, siteRecords)
	up := startScripted(t, answer)
	p := startPepd(t, pepdOpts{squid: up.addr, proxyProtocol: pp, resolver: ns.Addr, mode: md,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80}})
	return p, up
}

// TestRelayFraming: each response framing Squid may send reaches the
// subscriber with the same status, headers and body, hop-by-hop headers
// removed, and the kept-alive connection serves the next request.
func TestRelayFraming(t *testing.T) {
	cases := []struct {
		name     string
		md       mode.Mode
		method   string
		reqLines string // request header lines added, each ending in CRLF
		upstream scriptedAnswer
		wantCode int
		wantBody string
		want     map[string]string // header -> value ("" = absent)
		trailer  map[string]string
	}{
		{name: "content-length", upstream: scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 5\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nX-Cache: HIT\r\nVia: 1.1 pep (squid)\r\nX-Custom: kept\r\n\r\nhello"},
			// Squid's X-Cache and Via stay off the radio link (header diet); the origin's headers pass.
			wantCode: 200, wantBody: "hello", want: map[string]string{"Content-Length": "5", "Keep-Alive": "", "X-Cache": "", "Via": "", "X-Custom": "kept", "Content-Type": "image/png"}},
		{name: "Vary without the optimizer's mark", upstream: scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Type: image/webp\r\nVary: Accept, Pep-Optimize\r\nPep-Transform: webp\r\nContent-Length: 5\r\n\r\nhello"},
			wantCode: 200, wantBody: "hello", want: map[string]string{"Vary": "Accept", "Pep-Transform": ""}},
		{name: "chunked with extension and trailer", upstream: scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nTrailer: X-T\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;ext=1\r\nlo\r\n0\r\nX-T: 1\r\n\r\n"},
			wantCode: 200, wantBody: "hello", trailer: map[string]string{"X-T": "1"}},
		{name: "until close", upstream: scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n\r\nhello", close: true},
			wantCode: 200, wantBody: "hello"},
		{name: "HEAD with Content-Length", method: "HEAD", upstream: scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 100\r\n\r\n"},
			wantCode: 200, wantBody: "", want: map[string]string{"Content-Length": "100"}},
		{name: "304", upstream: scriptedAnswer{raw: "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n"},
			wantCode: 304, wantBody: "", want: map[string]string{"Etag": `"x"`}},
		{name: "103 early hints then 200", upstream: scriptedAnswer{raw: "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
			wantCode: 200, wantBody: "ok"},
		{name: "HTTP/1.0 response", upstream: scriptedAnswer{raw: "HTTP/1.0 200 OK\r\nContent-Type: image/png\r\n\r\nhello", close: true},
			wantCode: 200, wantBody: "hello"},
		{name: "malformed status line", upstream: scriptedAnswer{raw: "HTTP/1.1 2x0 OK\r\n\r\n", close: true},
			wantCode: 502, wantBody: "502 Bad Gateway: upstream failed\n"},
		{name: "url mode: chunked HTML rewritten", md: mode.URL, upstream: scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: \"e\"\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"10\r\n<img src=\"http:/\r\n15\r\n/img.cdn.test/a.png\">\r\n0\r\n\r\n"},
			wantCode: 200, wantBody: `<img src="http://192.0.2.12/img.cdn.test/a.png">`, want: map[string]string{"Etag": `W/"e"`, "Content-Length": "48"}},
		{name: "url mode: no-transform passes", md: mode.URL, upstream: scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: no-transform\r\nContent-Length: 37\r\n\r\n<img src=\"http://img.cdn.test/a.png\">"},
			wantCode: 200, wantBody: `<img src="http://img.cdn.test/a.png">`, want: map[string]string{"Cache-Control": "no-transform"}},
		{name: "url mode: image passes", md: mode.URL, upstream: scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nETag: \"e\"\r\nContent-Length: 2\r\n\r\nok"},
			wantCode: 200, wantBody: "ok", want: map[string]string{"Etag": `"e"`}},
		{name: "vip path: Location and Set-Cookie mapped", upstream: scriptedAnswer{raw: "HTTP/1.1 302 Found\r\nLocation: /b.png\r\nSet-Cookie: s=1; Path=/\r\nContent-Length: 0\r\n\r\n"},
			wantCode: 302, want: map[string]string{"Location": "http://192.0.2.12/img.cdn.test/b.png", "Set-Cookie": "img.cdn.test|s=1; Path=/img.cdn.test/"}},
		{name: "vip path: CORS added", upstream: scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Type: font/woff2\r\nContent-Length: 2\r\n\r\nok"},
			wantCode: 200, wantBody: "ok", want: map[string]string{"Access-Control-Allow-Origin": "*", "Content-Type": "font/woff2"}},
		{name: "vip path: origin's CORS kept", upstream: scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: http://a.test\r\nContent-Length: 2\r\n\r\nok"},
			wantCode: 200, wantBody: "ok", want: map[string]string{"Access-Control-Allow-Origin": "http://a.test"}},
		{name: "vip path: CORS from the object's own site", reqLines: "Origin: http://IMG.cdn.test\r\n",
			upstream: scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Type: font/woff2\r\nContent-Length: 2\r\n\r\nok"},
			wantCode: 200, wantBody: "ok", want: map[string]string{"Access-Control-Allow-Origin": "*", "Vary": ""}},
		// A font on a CDN that sends no CORS header is refused to
		// another site's page without pep: it stays refused.
		{name: "vip path: CORS from another site gets the origin's answer", reqLines: "Origin: http://www.site.test\r\n",
			upstream: scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Type: font/woff2\r\nVary: Accept-Encoding\r\nContent-Length: 2\r\n\r\nok"},
			wantCode: 200, wantBody: "ok", want: map[string]string{"Access-Control-Allow-Origin": "", "Vary": "Accept-Encoding, Origin"}},
		{name: "vip path: CORS from another site, origin's CORS kept", reqLines: "Origin: http://www.site.test\r\n",
			upstream: scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: *\r\nContent-Length: 2\r\n\r\nok"},
			wantCode: 200, wantBody: "ok", want: map[string]string{"Access-Control-Allow-Origin": "*", "Vary": ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, up := relayWorld(t, c.md, true, func(r *http.Request) scriptedAnswer {
				if r.URL.Path == "/next" {
					return scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext"}
				}
				return c.upstream
			})
			method := c.method
			if method == "" {
				method = "GET"
			}
			k := dialKeepAlive(t, p.Addr)
			resp, body := k.do(method + " /img.cdn.test/a.png HTTP/1.1\r\nHost: 192.0.2.12\r\nConnection: keep-alive\r\n" + c.reqLines + "\r\n")
			if resp.StatusCode != c.wantCode || body != c.wantBody {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, body, c.wantCode, c.wantBody)
			}
			for h, v := range c.want { // a field's lines joined (RFC 9110 §5.3)
				if got := strings.Join(resp.Header.Values(h), ", "); got != v {
					t.Errorf("%s = %q, want %q", h, got, v)
				}
			}
			for h, v := range c.trailer {
				if got := resp.Trailer.Get(h); got != v {
					t.Errorf("trailer %s = %q, want %q", h, got, v)
				}
			}
			if resp.Close {
				t.Fatal("pepd closes the subscriber connection")
			}
			resp, body = k.do("GET /img.cdn.test/next HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n")
			if resp.StatusCode != 200 || body != "next" {
				t.Errorf("next request on the connection: %d %q", resp.StatusCode, body)
			}
			r, _ := up.last()
			if r.RequestURI != "http://img.cdn.test/next" || r.Host != "img.cdn.test" {
				t.Errorf("Squid got %q Host %q, want http://img.cdn.test/next Host img.cdn.test", r.RequestURI, r.Host)
			}
		})
	}
}

// TestRelayRequestHeaders: what Squid receives for a VIP-path request:
// absolute URI, the origin's Host, hop-by-hop and forwarding headers
// removed, only the site's cookies, Referer mapped back, X-Forwarded-For
// naming the subscriber without PROXY protocol.
func TestRelayRequestHeaders(t *testing.T) {
	p, up := relayWorld(t, mode.URL, false, func(*http.Request) scriptedAnswer {
		return scriptedAnswer{raw: "HTTP/1.1 204 No Content\r\n\r\n"}
	})
	k := dialKeepAlive(t, p.Addr)
	resp, _ := k.do("GET /img.cdn.test/a.png?q=1 HTTP/1.1\r\nHost: 192.0.2.12\r\nUser-Agent: ua\r\nConnection: keep-alive\r\n" +
		"Proxy-Connection: keep-alive\r\nKeep-Alive: 5\r\nTE: trailers\r\nX-Forwarded-For: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\n" +
		"Cookie: img.cdn.test|a=1; other.test|b=2\r\nReferer: http://192.0.2.12/www.site.test/page.html\r\n\r\n")
	if resp.StatusCode != 204 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	r, _ := up.last()
	want := map[string]string{
		"User-Agent": "ua", "Connection": "", "Proxy-Connection": "", "Keep-Alive": "", "Te": "trailers",
		"X-Forwarded-For": "127.0.0.9", "Forwarded": "", "Cookie": "a=1", "Referer": "http://www.site.test/page.html",
	}
	if r.RequestURI != "http://img.cdn.test/a.png?q=1" || r.Host != "img.cdn.test" {
		t.Errorf("request %q Host %q", r.RequestURI, r.Host)
	}
	for h, v := range want {
		if got := strings.Join(r.Header.Values(h), ","); got != v {
			t.Errorf("Squid got %s %q, want %q", h, got, v)
		}
	}
}

// TestRelayHandsOver: on one kept-alive connection a GET is relayed, a
// POST with a body (not the relay's) is handed to the standard library
// with the connection, which serves it and the GET after it. Every request
// is counted once.
func TestRelayHandsOver(t *testing.T) {
	p, up := relayWorld(t, mode.Off, true, func(r *http.Request) scriptedAnswer {
		return scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"}
	})
	k := dialKeepAlive(t, p.Addr)
	for i, req := range []string{
		"GET /img.cdn.test/1 HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n",
		"POST /img.cdn.test/2 HTTP/1.1\r\nHost: 192.0.2.12\r\nContent-Length: 4\r\n\r\nbody",
		"GET /img.cdn.test/3 HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n",
	} {
		resp, body := k.do(req)
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q", i+1, resp.StatusCode, body)
		}
		if i == 1 {
			if r, b := up.last(); r.Method != "POST" || b != "body" {
				t.Errorf("Squid got %s with body %q, want POST body", r.Method, b)
			}
		}
	}
	if got := testutilValue(p.M.requests.WithLabelValues("off", "vip_path", "squid")); got != 3 {
		t.Errorf("pep_http_requests_total{off,vip_path,squid} = %v, want 3", got)
	}
	if got := testutilValue(p.M.conns); got != 1 {
		t.Errorf("pep_http_connections_total = %v, want 1", got)
	}
	// net/http stops its background read after each handler with a read
	// deadline in the past: not a timeout (issue 12 soak: one spurious
	// read_header timeout per handed-over connection).
	for _, phase := range []string{"read_header", "idle"} {
		if got := testutilValue(p.M.timeouts.WithLabelValues(phase)); got != 0 {
			t.Errorf("pep_http_timeouts_total{phase=%s} = %v, want 0", phase, got)
		}
	}
}

// TestRelayStaleUpstream: Squid closes a kept-alive upstream connection
// while it is idle (without Connection: close); the next request is sent
// again on a new connection and succeeds.
func TestRelayStaleUpstream(t *testing.T) {
	p, up := relayWorld(t, mode.Off, true, func(r *http.Request) scriptedAnswer {
		return scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", close: true}
	})
	k := dialKeepAlive(t, p.Addr)
	for i := range 3 {
		resp, body := k.do("GET /img.cdn.test/x HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n")
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q", i+1, resp.StatusCode, body)
		}
	}
	if n := up.connCount(); n != 3 {
		t.Errorf("upstream connections %d, want 3", n)
	}
}

// TestRelayUpstreamTimeout: no response head within the upstream timeout
// gives 504, and the subscriber connection stays usable.
func TestRelayUpstreamTimeout(t *testing.T) {
	ns := startDNS(t, siteRecords)
	up := startScripted(t, func(r *http.Request) scriptedAnswer {
		if r.URL.Path == "/slow" {
			return scriptedAnswer{hang: true}
		}
		return scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"}
	})
	p := startPepd(t, pepdOpts{squid: up.addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.Off,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80}, upTimeout: 300 * time.Millisecond})
	k := dialKeepAlive(t, p.Addr)
	resp, body := k.do("GET /img.cdn.test/slow HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n")
	if resp.StatusCode != 504 || body != "504 Gateway Timeout: upstream timed out\n" {
		t.Errorf("got %d %q, want 504 upstream timed out", resp.StatusCode, body)
	}
	resp, body = k.do("GET /img.cdn.test/fast HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n")
	if resp.StatusCode != 200 || body != "ok" {
		t.Errorf("after the timeout: %d %q", resp.StatusCode, body)
	}
	if got := testutilValue(p.M.requests.WithLabelValues("off", "vip_path", "upstream_error")); got != 1 {
		t.Errorf("pep_http_requests_total{off,vip_path,upstream_error} = %v, want 1", got)
	}
}

// TestRelayClientClose: a request with Connection: close is answered with
// Connection: close and the connection is closed after it.
func TestRelayClientClose(t *testing.T) {
	p, _ := relayWorld(t, mode.Off, true, func(r *http.Request) scriptedAnswer {
		return scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"}
	})
	k := dialKeepAlive(t, p.Addr)
	resp, body := k.do("GET /img.cdn.test/x HTTP/1.1\r\nHost: 192.0.2.12\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != 200 || body != "ok" || !resp.Close {
		t.Errorf("got %d %q close=%v, want 200 ok with Connection: close", resp.StatusCode, body, resp.Close)
	}
	if n, err := k.br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read after the response: %d %v, want EOF", n, err)
	}
}

// TestRelayShutdown: Shutdown closes a kept-alive relay connection waiting
// for its next request and returns.
func TestRelayShutdown(t *testing.T) {
	p, _ := relayWorld(t, mode.Off, true, func(r *http.Request) scriptedAnswer {
		return scriptedAnswer{raw: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"}
	})
	k := dialKeepAlive(t, p.Addr)
	if resp, _ := k.do("GET /img.cdn.test/x HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n, err := k.br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read after Shutdown: %d %v, want EOF", n, err)
	}
	if got := testutilValue(p.M.openConns); got != 0 {
		t.Errorf("pep_http_open_connections = %v, want 0", got)
	}
}

// FuzzParseRequestHead: whatever the relay accepts, net/http reads the
// same way (method, target, Host), so the relay never serves a request the
// standard library would have refused or read differently.
func FuzzParseRequestHead(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /img.cdn.test/a.png?q=1 HTTP/1.1\r\nHost: 192.0.2.12\r\nCookie: a=1\r\nConnection: keep-alive, close\r\n\r\n",
		"HEAD /x HTTP/1.1\r\nHost: [::1]:80\r\nTE: trailers\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost : a\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		i := bytes.Index(b, []byte("\r\n\r\n"))
		if i < 0 {
			return
		}
		head := b[:i+4]
		var h reqHead
		if !parseRequestHead(head, &h) {
			return
		}
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
		if err != nil {
			t.Fatalf("relay accepts %q, net/http does not: %v", head, err)
		}
		if r.Method != h.method || r.RequestURI != string(head[h.target.from:h.target.to]) || r.Host != string(head[h.host.from:h.host.to]) {
			t.Fatalf("relay reads %q as %s %q Host %q, net/http as %s %q Host %q", head, h.method,
				head[h.target.from:h.target.to], head[h.host.from:h.host.to], r.Method, r.RequestURI, r.Host)
		}
		if r.ContentLength > 0 || len(r.TransferEncoding) > 0 {
			t.Fatalf("relay accepts %q with a body", head)
		}
	})
}

// FuzzParseResponseHead: whatever head the relay accepts from Squid,
// net/http reads with the same status and framing.
func FuzzParseResponseHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 404\r\nConnection: close\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
		"HTTP/1.1 302 Found\r\nLocation: /x\r\nSet-Cookie: a=1\r\nContent-Length: 0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		i := bytes.Index(b, []byte("\r\n\r\n"))
		if i < 0 {
			return
		}
		head := b[:i+4]
		var h respHead
		if !parseResponseHead(head, &h) {
			return
		}
		r, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), &http.Request{Method: "GET"})
		if err != nil {
			t.Fatalf("relay accepts %q, net/http does not: %v", head, err)
		}
		chunked := len(r.TransferEncoding) == 1 && r.TransferEncoding[0] == "chunked"
		noBody := h.status == http.StatusNoContent || h.status == http.StatusNotModified // the relay sends none whatever the framing
		if r.StatusCode != h.status || !noBody && (chunked != h.chunked || !chunked && r.ContentLength != h.cl) {
			t.Fatalf("relay reads %q as %d chunked=%v cl=%d, net/http as %d chunked=%v cl=%d", head,
				h.status, h.chunked, h.cl, r.StatusCode, chunked, r.ContentLength)
		}
	})
}

// TestRelayBodyInPieces: a Content-Length body that Squid writes in
// pieces with pauses between them (Squid sends a cached object in 4 KB
// pieces; a miss arrives at the origin's pace) reaches the subscriber
// whole, below and above the relay's SO_RCVLOWAT bound (maxLowat), and
// the next request on the kept-alive connections is answered (the bound
// is lowered again for its head). A body cut short by Squid closing ends
// the subscriber's connection before the announced length instead of
// leaving it waiting (the relay holds up to flushBytes before it writes,
// so here the connection closes before the head).
func TestRelayBodyInPieces(t *testing.T) {
	body := func(n int) string { return strings.Repeat("0123456789abcdef", n/16+1)[:n] }
	squid := startUpstream(t, func(c net.Conn, br *bufio.Reader) {
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			var n, sent int
			var pieces []int
			switch r.URL.Path {
			case "/small.png":
				n, pieces = 10<<10, []int{4096 - 100, 4096, 2048 + 100}
			case "/large.png":
				n, pieces = 100<<10, []int{4096, 30 << 10, 40 << 10, 30<<10 - 4096}
			case "/short.png":
				n, pieces = 50<<10, []int{20 << 10}
			default:
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext")
				continue
			}
			b := body(n)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: "+strconv.Itoa(n)+"\r\n\r\n")
			for _, k := range pieces {
				time.Sleep(20 * time.Millisecond)
				if _, err := io.WriteString(c, b[sent:sent+k]); err != nil {
					return
				}
				sent += k
			}
			if sent < n {
				return // cut short
			}
		}
	})
	ns := startDNS(t, siteRecords)
	p := startPepd(t, pepdOpts{squid: squid, proxyProtocol: true, resolver: ns.Addr, mode: mode.URL,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80}})
	for _, c := range []struct {
		path string
		size int
	}{{"/small.png", 10 << 10}, {"/large.png", 100 << 10}} {
		t.Run(c.path, func(t *testing.T) {
			k := dialKeepAlive(t, p.Addr)
			for range 2 {
				resp, got := k.do("GET /img.cdn.test" + c.path + " HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n")
				if resp.StatusCode != 200 || got != body(c.size) {
					t.Fatalf("got %d, %d bytes (equal: %v), want 200, %d bytes", resp.StatusCode, len(got), got == body(c.size), c.size)
				}
				resp, got = k.do("GET /img.cdn.test/next HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n")
				if resp.StatusCode != 200 || got != "next" {
					t.Fatalf("next request: %d %q", resp.StatusCode, got)
				}
			}
		})
	}
	t.Run("/short.png", func(t *testing.T) {
		k := dialKeepAlive(t, p.Addr)
		io.WriteString(k.c, "GET /img.cdn.test/short.png HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n")
		got, err := io.ReadAll(k.br) // the connection's end, or the deadline
		if err != nil || len(got) >= 50<<10 {
			t.Fatalf("read %d bytes, err %v: want the connection closed (not the deadline) before 51200 bytes", len(got), err)
		}
	})
}

// TestRelayTruncatedBody (issue 12, D5): Squid's body fails (the
// connection closes) before its Content-Length or chunked end, early (a
// few bytes, under the relay's first write) and late (past it). The
// subscriber gets the head and what came, then a close: a truncation it
// can detect (Go's client reports unexpected EOF); the relay counts the
// response as truncated.
func TestRelayTruncatedBody(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	for _, tc := range []struct{ name, raw string }{
		{"content-length, early", "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 1000\r\n\r\n" + "0123456789"},
		{"content-length, late", "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 200000\r\n\r\n" + big},
		{"chunked, early", "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"},
		{"url mode html, early", "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 1000\r\n\r\n<html><img src=\"http://a.test/x.png\">"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := mode.Off
			if strings.HasPrefix(tc.name, "url") {
				md = mode.URL
			}
			p, _ := relayWorld(t, md, true, func(*http.Request) scriptedAnswer { return scriptedAnswer{raw: tc.raw, close: true} })
			before := testutilValue(p.M.truncated)
			c, err := net.Dial("tcp", p.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "GET /img.cdn.test/a.png HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no response head: %v", err)
			}
			body, err := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("%s, %d body bytes, read error %v: want 200 and a detectable truncation", resp.Status, len(body), err)
			}
			if got := testutilValue(p.M.truncated) - before; got != 1 {
				t.Errorf("pep_http_responses_truncated_total +%v, want +1", got)
			}
		})
	}
}
