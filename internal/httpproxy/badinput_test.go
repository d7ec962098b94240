package httpproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"pep/internal/mode"
	"pep/internal/rewrite"
	"pep/internal/testenv"
)

// TestBadInput sends each kind of bad request to pepd (in front of a real
// Squid) and checks the answer: status and the reason in the body.
func TestBadInput(t *testing.T) {
	p, sq, o := world(t, mode.URL, true)
	big := strings.Repeat("a", 70<<10)
	cases := []struct {
		name     string
		req      string
		wantCode int
		wantBody string
	}{
		{"malformed request line", "GARBAGE\r\n\r\n", 400, "400 Bad Request"},
		{"oversized headers", "GET / HTTP/1.1\r\nHost: 192.0.2.12\r\nX-Big: " + big + "\r\n\r\n", 431, "431 Request Header Fields Too Large"},
		{"vip path /", "GET / HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n", 400, "invalid VIP path: no host"},
		{"vip path %zz", "GET /%zz/ HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n", 400, "400 Bad Request"},
		{"vip path port out of range", "GET /host:99999/ HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n", 400, `invalid VIP path: port "99999" out of range`},
		{"vip path userinfo", "GET /user@host/ HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n", 400, "invalid VIP path: userinfo in host"},
		{"bad Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "400 Bad Request"},
		{"private target", "GET /private.test/ HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n", 403, "private address"},
		{"link-local target", "GET /linklocal.test/ HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n", 403, "link-local address"},
		{"CGNAT target", "GET /cgnat.test/ HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n", 403, "shared address space (CGNAT)"},
		{"loopback target", "GET /loopback.test/ HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n", 403, "loopback address"},
		{"loopback literal", "GET /127.0.0.1/ HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n", 403, "loopback address"},
		{"reserved target", "GET /reserved.test/ HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n", 403, "reserved or special-purpose address"},
		{"the VIP as target", "GET /vip.test/ HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n", 403, "the proxy's own address"},
		{"the VIP literal as target", "GET /192.0.2.12/ HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n", 403, "the proxy's own address"},
		{"port not allowed", "GET /www.site.test:8081/ HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n", 403, "port not allowed"},
		{"private target by Host", "GET / HTTP/1.1\r\nHost: private.test\r\n\r\n", 403, "private address"},
		{"unknown host", "GET /nonexistent.test/ HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n", 502, "cannot resolve host"},
		{"CONNECT", "CONNECT www.site.test:443 HTTP/1.1\r\nHost: www.site.test:443\r\n\r\n", 403, "CONNECT not allowed"},
		{"PURGE", "PURGE /www.site.test:" + o.Port + "/ HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n", 403, "PURGE not allowed"},
		// Go's server refuses the scheme ('_' is not allowed in a URI scheme).
		{"cache_object", "GET cache_object://localhost/info HTTP/1.1\r\nHost: localhost\r\n\r\n", 400, "400 Bad Request"},
		{"cache_object opaque", "GET cache_object:info HTTP/1.1\r\nHost: localhost\r\n\r\n", 400, "400 Bad Request"},
		{"https absolute URI", "GET https://www.site.test/ HTTP/1.1\r\nHost: www.site.test\r\n\r\n", 400, "only http: URLs are proxied"},
		{"squid-internal-mgr via VIP path", "GET /127.0.0.1:3128/squid-internal-mgr/info HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n", 403, "port not allowed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := p.raw(t, "127.0.0.9", c.req)
			if resp.StatusCode != c.wantCode || !strings.Contains(body, c.wantBody) {
				t.Errorf("got %d %q, want %d containing %q", resp.StatusCode, body, c.wantCode, c.wantBody)
			}
		})
	}
	for _, l := range sq.AccessLog(t) {
		for _, bad := range []string{"private.test", "PURGE", "cache_object", "CONNECT"} {
			if strings.Contains(l, bad) {
				t.Errorf("a refused request reached Squid: %s", l)
			}
		}
	}
	if got := testutilValue(p.M.badRequests.WithLabelValues("431")); got != 1 {
		t.Errorf("pep_http_bad_requests_total{code=431} = %v, want 1", got)
	}
	if got := testutilValue(p.M.refused.WithLabelValues("private address")); got != 2 {
		t.Errorf(`pep_http_refused_total{reason="private address"} = %v, want 2`, got)
	}
}

// TestNotSubscriber: a source outside the subscriber ranges gets 403.
func TestNotSubscriber(t *testing.T) {
	ns := startDNS(t, siteRecords)
	p := startPepd(t, pepdOpts{squid: "127.0.0.1:9", resolver: ns.Addr, subscribers: []string{"198.18.0.0/24"}})
	resp, body := p.raw(t, "127.0.0.9", "GET /www.site.test/ HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n")
	if resp.StatusCode != 403 || !strings.Contains(body, "not a subscriber") {
		t.Errorf("got %d %q, want 403 not a subscriber", resp.StatusCode, body)
	}
	// The watchdog's probe is answered from loopback whatever the ranges.
	if err := Check(t.Context(), p.Addr); err != nil {
		t.Errorf("health check: %v", err)
	}
}

// TestReadHeaderTimeout: a client that never finishes its headers is cut
// off after http.read_header_timeout, and counted.
func TestReadHeaderTimeout(t *testing.T) {
	ns := startDNS(t, siteRecords)
	p := startPepd(t, pepdOpts{squid: "127.0.0.1:9", resolver: ns.Addr, subscribers: []string{"127.0.0.0/8"},
		limits: Limits{ReadHeaderTimeout: 200 * time.Millisecond, IdleTimeout: 200 * time.Millisecond}})
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: 192.0.2.12\r\nX-Slow: ")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if n, err := c.Read(make([]byte, 100)); err != io.EOF {
		t.Fatalf("read %d, %v; want EOF (closed by pepd)", n, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("closed after %v", d)
	}
	if got := testutilValue(p.M.timeouts.WithLabelValues("read_header")); got != 1 {
		t.Errorf("pep_http_timeouts_total{phase=read_header} = %v, want 1", got)
	}
}

// TestMaxConns: with max_conns 1, a second connection waits until the
// first closes, and the wait is counted.
func TestMaxConns(t *testing.T) {
	ns := startDNS(t, siteRecords)
	p := startPepd(t, pepdOpts{squid: "127.0.0.1:9", resolver: ns.Addr, subscribers: []string{"127.0.0.0/8"}, limits: Limits{MaxConns: 1}})
	c1, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c1, "GET "+HealthPath+" HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c1)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first connection: %v %v", resp, err)
	}
	c2, err := net.Dial("tcp", p.Addr) // completes in the kernel's accept queue
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	io.WriteString(c2, "GET "+HealthPath+" HTTP/1.1\r\nHost: x\r\n\r\n")
	c2.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Fatal("second connection served while the first is open")
	}
	c1.Close()
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(c2), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("second connection after the first closed: %v %v", resp, err)
	}
	if got := testutilValue(p.M.limitWaits); got < 1 {
		t.Errorf("pep_http_connection_limit_waits_total = %v, want >= 1", got)
	}
}

// fakeIntercept marks every accepted connection as intercepted with the
// given original destination: it stands in for the kernel's REDIRECT
// (internal/intercept's namespace test covers the kernel part).
type fakeIntercept struct {
	net.Listener
	orig netip.AddrPort
}

type fakeConn struct {
	net.Conn
	orig netip.AddrPort
}

func (f fakeConn) OriginalDst() (netip.AddrPort, bool) { return f.orig, true }

func (l fakeIntercept) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return fakeConn{c, l.orig}, nil
}

// TestHostVerification: an intercepted request whose Host resolves to the
// original destination goes through Squid (and is cached); one whose Host
// does not is never cached under that name: "direct" fetches it from the
// original destination bypassing Squid, "refuse" answers 403.
func TestHostVerification(t *testing.T) {
	ns := startDNS(t, siteRecords)
	o := startOrigin(t, originIP, sitePages)
	port := o.Addr.Port()
	sc := siteSquidConf(t, ns, siteRecords, port)
	sq := startSquid(t, sc)
	for _, action := range []string{"direct", "refuse"} {
		t.Run(action, func(t *testing.T) {
			p := startPepd(t, pepdOpts{squid: sq.Addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.Off,
				subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{port}, hostMismatch: action,
				listener: func(l net.Listener) net.Listener { return fakeIntercept{l, o.Addr} }})
			// Host matches the original destination: via Squid.
			resp, body := p.raw(t, "127.0.0.9", "GET /app.js HTTP/1.1\r\nHost: www.site.test:"+o.Port+"\r\n\r\n")
			if resp.StatusCode != 200 || body != "console.log(1)" {
				t.Fatalf("matching Host: %d %q", resp.StatusCode, body)
			}
			// elsewhere.test resolves to 127.0.0.3, not to the origin at
			// 127.0.0.2 the connection was really for.
			before := o.hitCount("elsewhere.test/app.js")
			resp, body = p.raw(t, "127.0.0.9", "GET /app.js HTTP/1.1\r\nHost: elsewhere.test:"+o.Port+"\r\n\r\n")
			switch action {
			case "direct":
				if resp.StatusCode != 404 || resp.Header.Get("Cache-Control") != "no-store" {
					t.Errorf("mismatching Host, direct: %d %q Cache-Control %q; want the origin's 404, no-store", resp.StatusCode, body, resp.Header.Get("Cache-Control"))
				}
				if got := o.hitCount("elsewhere.test/app.js"); got != before+1 {
					t.Errorf("origin saw elsewhere.test %d times, want %d", got, before+1)
				}
			case "refuse":
				if resp.StatusCode != 403 || !strings.Contains(body, "host does not match destination") {
					t.Errorf("mismatching Host, refuse: %d %q", resp.StatusCode, body)
				}
				if got := o.hitCount("elsewhere.test/app.js"); got != before {
					t.Errorf("origin saw elsewhere.test")
				}
			}
		})
	}
	for _, l := range sq.AccessLog(t) {
		if strings.Contains(l, "elsewhere.test") {
			t.Errorf("a mismatching Host reached Squid: %s", l)
		}
	}
}

// TestModeSwitchKeepsConnection: a kept-alive connection survives a mode
// switch and its next request is served in the new mode.
func TestModeSwitchKeepsConnection(t *testing.T) {
	p, _, o := world(t, mode.Off, true)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.9")}}
	c, err := d.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	req := "GET / HTTP/1.1\r\nHost: www.site.test:" + o.Port + "\r\n\r\n"
	read := func() string {
		t.Helper()
		io.WriteString(c, req)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(b)
	}
	if b := read(); strings.Contains(b, "192.0.2.12") {
		t.Fatalf("mode off rewrote the page:\n%s", b)
	}
	p.Mode.Set(mode.URL)
	if b := read(); !strings.Contains(b, "http://192.0.2.12/img.cdn.test:"+o.Port+"/logo.png") {
		t.Fatalf("after the switch to url the page was not rewritten:\n%s", b)
	}
	if got := testutilValue(p.M.conns); got != 1 {
		t.Errorf("pep_http_connections_total = %v, want 1 (one kept-alive connection)", got)
	}
}

// TestRequestHeadLineEnds: issue 12's D2 and D7, through pepd and a real
// Squid. A head whose lines end in a bare LF is answered at once (RFC 9112
// §2.2: a recipient MAY recognize LF; before, the relay waited for CRLF
// CRLF until read_header_timeout and closed), and empty lines before the
// request-line are ignored (§2.2: SHOULD ignore at least one; before, 400).
func TestRequestHeadLineEnds(t *testing.T) {
	p, _, o := world(t, mode.URL, true)
	target := "/www.site.test:" + o.Port + "/"
	for _, tc := range []struct{ name, req string }{
		{"bare LF", "GET " + target + " HTTP/1.1\nHost: 192.0.2.12\n\n"},
		{"mixed line ends", "GET " + target + " HTTP/1.1\r\nHost: 192.0.2.12\n\r\n"},
		{"one empty line first", "\r\nGET " + target + " HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n"},
		{"two empty lines first, one bare", "\r\n\nGET " + target + " HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			resp, body := p.raw(t, "127.0.0.9", tc.req)
			if resp.StatusCode != 200 || time.Since(start) > 3*time.Second {
				t.Errorf("%d after %s: %.80q; want 200 at once", resp.StatusCode, time.Since(start), body)
			}
		})
	}
}

// TestFragmentRefused: a #fragment in the request-target gets the same 400
// on the VIP path and when routed by Host (issue 12, D6: the Host-routed
// request reached the origin as %23frag, another resource).
func TestFragmentRefused(t *testing.T) {
	p, _, o := world(t, mode.URL, true)
	for _, req := range []string{
		"GET /www.site.test:" + o.Port + "/#frag HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n",
		"GET /#frag HTTP/1.1\r\nHost: www.site.test:" + o.Port + "\r\n\r\n",
		"GET /a?b=1#frag HTTP/1.1\r\nHost: www.site.test:" + o.Port + "\r\n\r\n",
	} {
		resp, body := p.raw(t, "127.0.0.9", req)
		if resp.StatusCode != 400 || !strings.Contains(body, "fragment in request-target") {
			t.Errorf("%q: %d %q, want 400 naming the fragment", req, resp.StatusCode, body)
		}
	}
}

// TestMalformedRequestBody: a chunked request body with a bad chunk size
// is the subscriber's error: 400 and outcome bad_request, not 502 and
// upstream_error (issue 12, D3: that series pages the operator).
func TestMalformedRequestBody(t *testing.T) {
	p, _, o := world(t, mode.URL, true)
	req := "POST /www.site.test:" + o.Port + "/form HTTP/1.1\r\nHost: 192.0.2.12\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n"
	resp, body := p.raw(t, "127.0.0.9", req)
	if resp.StatusCode != 400 || !strings.Contains(body, "malformed request body") {
		t.Errorf("got %d %q, want 400 malformed request body", resp.StatusCode, body)
	}
	if got := testutilValue(p.M.requests.WithLabelValues("url", "vip_path", "upstream_error")); got != 0 {
		t.Errorf("counted %v upstream errors, want 0", got)
	}
	if got := testutilValue(p.M.requests.WithLabelValues("url", "vip_path", "bad_request")); got != 1 {
		t.Errorf("counted %v bad requests, want 1", got)
	}
}

// TestCLAndTECloses: a request with both Content-Length and
// Transfer-Encoding: chunked is handled as chunked, and the connection
// closes after the response (issue 12, D4; RFC 9112 §6.1).
func TestCLAndTECloses(t *testing.T) {
	p, _, o := world(t, mode.URL, true)
	req := "POST /www.site.test:" + o.Port + "/form HTTP/1.1\r\nHost: 192.0.2.12\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
	resp, _ := p.raw(t, "127.0.0.9", req)
	// ReadResponse reads "Connection: close" into resp.Close.
	if !resp.Close {
		t.Errorf("%d without Connection: close; want the connection closed after the response", resp.StatusCode)
	}
}

// TestSlowReaderAndPerSubscriberBound: issue 12, D1. A subscriber that
// stops reading a large response is closed after the write timeout (before:
// held past 150 s), counted as a write timeout; one address cannot hold
// more than its share of connections, and another subscriber is served
// meanwhile (before: 50 non-reading connections from one address kept a
// second subscriber waiting about 80 s).
func TestSlowReaderAndPerSubscriberBound(t *testing.T) {
	ns := startDNS(t, siteRecords)
	big := strings.Repeat("x", 10<<20)
	o := startOrigin(t, originIP, map[string]page{"img.cdn.test/big.bin": {ctype: "application/octet-stream", body: big}})
	port := o.Addr.Port()
	sc := siteSquidConf(t, ns, siteRecords, port)
	sq := startSquid(t, sc)
	p := startPepd(t, pepdOpts{squid: sq.Addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.Off,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80, port},
		limits: Limits{WriteTimeout: time.Second, MaxConnsPerSubscriber: 3}})

	// The slow reader: asks for 10 MiB and reads nothing.
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.22")}}
	slow, err := d.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	slow.(*net.TCPConn).SetReadBuffer(4096)
	io.WriteString(slow, "GET /img.cdn.test:"+o.Port+"/big.bin HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n")
	start := time.Now()
	// The write timeout (1 s) runs from a write that blocks, which comes
	// once the socket buffers are full: well under a second after the
	// request on loopback. So the close comes after 1 s and before 2.5 s
	// (the slack scaled by testenv); before the fix it came after 150 s.
	testenv.Log(t)
	bound := time.Second + testenv.Scale(1500*time.Millisecond)
	deadline := time.Now().Add(2 * bound)
	for testutilValue(p.M.timeouts.WithLabelValues("write")) < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	closedAfter := time.Since(start)
	slow.SetReadDeadline(time.Now().Add(testenv.Scale(5 * time.Second)))
	n, _ := io.Copy(io.Discard, slow)
	if testutilValue(p.M.timeouts.WithLabelValues("write")) < 1 || n >= int64(len(big)) {
		t.Fatalf("slow reader: no write timeout within %s (read %d bytes afterwards)", closedAfter, n)
	}
	if closedAfter < time.Second || closedAfter > bound {
		t.Errorf("slow reader closed %s after its request, want after the 1 s write timeout and within %s", closedAfter.Round(10*time.Millisecond), bound)
	}
	t.Logf("slow reader closed %s after its request (write timeout 1 s), %d bytes had been sent", closedAfter.Round(10*time.Millisecond), n)

	// Three connections from one address are its bound; the fourth is
	// closed at accept, while another address is served.
	d = &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.20")}}
	accepted := testutilValue(p.M.conns)
	for i := range 3 {
		c, err := d.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = i
	}
	for deadline := time.Now().Add(testenv.Scale(5 * time.Second)); testutilValue(p.M.conns) < accepted+3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%v of 3 connections accepted", testutilValue(p.M.conns)-accepted)
		}
	}
	fourth, err := d.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fourth.Close()
	fourth.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := fourth.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("fourth connection of one subscriber: %v, want closed at accept", err)
	}
	if resp, _ := p.raw(t, "127.0.0.21", "GET "+HealthPath+" HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
		t.Errorf("another subscriber: %d, want served", resp.StatusCode)
	}
	if got := testutilValue(p.M.refused.WithLabelValues("per-subscriber connection limit")); got != 1 {
		t.Errorf("refused by the per-subscriber bound: %v, want 1", got)
	}
}

// TestReloadHostMismatch: Proxy.Reload (what pepd's SIGHUP applies;
// cmd/pepd's TestReloadHTTPSettings runs the binary) changes
// http.host_mismatch and the rewriter for the next request, on a
// kept-alive connection too; settings that do not validate are refused
// and the running ones stay.
func TestReloadHostMismatch(t *testing.T) {
	ns := startDNS(t, siteRecords)
	o := startOrigin(t, originIP, sitePages)
	port := o.Addr.Port()
	sc := siteSquidConf(t, ns, siteRecords, port)
	sq := startSquid(t, sc)
	p := startPepd(t, pepdOpts{squid: sq.Addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.URL,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{port}, hostMismatch: "refuse",
		listener: func(l net.Listener) net.Listener { return fakeIntercept{l, o.Addr} }})
	k := dialKeepAlive(t, p.Addr)
	mismatch := "GET /app.js HTTP/1.1\r\nHost: elsewhere.test:" + o.Port + "\r\n\r\n"
	pageReq := "GET / HTTP/1.1\r\nHost: www.site.test:" + o.Port + "\r\n\r\n"
	if resp, body := k.do(mismatch); resp.StatusCode != 403 || !strings.Contains(body, "host does not match destination") {
		t.Fatalf("refuse: %d %q", resp.StatusCode, body)
	}
	if resp, body := k.do(pageReq); resp.StatusCode != 200 || !strings.Contains(body, "http://192.0.2.12/static.other.test") {
		t.Fatalf("url mode page before the reload: %d, not rewritten: %.300q", resp.StatusCode, body)
	}

	st := *p.Proxy.settings.Load()
	st.HostMismatch = "direct"
	rw, err := rewrite.New(testVIP.String(), rewrite.Config{HTMLTypes: []string{"application/xhtml+xml"}}, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	st.Rewriter = rw // text/html pages pass unrewritten
	if err := p.Proxy.Reload(st); err != nil {
		t.Fatal(err)
	}
	before := o.hitCount("elsewhere.test/app.js")
	if resp, _ := k.do(mismatch); resp.StatusCode != 404 || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("direct after the reload, same connection: %d Cache-Control %q; want the origin's 404, no-store", resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
	if got := o.hitCount("elsewhere.test/app.js"); got != before+1 {
		t.Errorf("origin saw elsewhere.test %d times, want %d", got, before+1)
	}
	if resp, body := k.do(pageReq); resp.StatusCode != 200 || strings.Contains(body, "http://192.0.2.12/") || !strings.Contains(body, "http://static.other.test") {
		t.Errorf("url mode page after the reload with a rewriter of XHTML only: %d, want it unrewritten: %.300q", resp.StatusCode, body)
	}

	bad := st
	bad.HostMismatch = "bounce"
	if err := p.Proxy.Reload(bad); err == nil {
		t.Error("Reload accepted host_mismatch \"bounce\"")
	}
	if resp, _ := k.do(mismatch); resp.StatusCode != 404 {
		t.Errorf("after a refused reload: %d, want the running setting's (direct) 404", resp.StatusCode)
	}
}
