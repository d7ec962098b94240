package httpproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"pep/internal/mode"
	"pep/internal/testenv"
	"pep/internal/viptls"
	"pep/internal/viptls/viptlstest"
)

// tlsFront is the VIP's HTTPS origin in tests: a loopback listener whose
// connections are handed to Server.ServeTLS, as the SNI splice hands them
// over in pepd, with a certificate from a test CA for the VIP address and
// vip.test.
type tlsFront struct {
	Addr string
	CA   *viptlstest.CA
}

func startTLSFront(t testing.TB, p *pepd) *tlsFront {
	t.Helper()
	ca, err := viptlstest.NewCA("pep test CA")
	if err != nil {
		t.Fatal(err)
	}
	cf, kf, err := ca.WriteFiles(t.TempDir(), "vip.test", testVIP.String())
	if err != nil {
		t.Fatal(err)
	}
	st, err := viptls.Load(cf, kf, []string{"vip.test", testVIP.String()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.Config()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.Srv.ServeTLS(c, nil, cfg)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return &tlsFront{Addr: ln.Addr().String(), CA: ca}
}

// client returns an HTTPS client from src that sends every request to the
// front, trusting the test CA (never skipping verification); protos are
// the ALPN protocols it offers: "h2" gives HTTP/2, "http/1.1" alone
// HTTP/1.1 over TLS.
func (f *tlsFront) client(src string, protos ...string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, f.Addr)
		},
		TLSClientConfig:    &tls.Config{RootCAs: f.CA.Pool(), NextProtos: protos},
		DisableCompression: true,
		ForceAttemptHTTP2:  true,
	}
	if len(protos) == 1 && protos[0] == "http/1.1" {
		tr.ForceAttemptHTTP2 = false
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

var httpsVIPURLRE = regexp.MustCompile(`https://192\.0\.2\.12(:8443|:8444)?/([^/"')]+)/[^"')]*`)

// tlsWorld is world with https VIP origins (k = len(origins)).
func tlsWorld(t *testing.T, origins []string, lim Limits) (*pepd, *squid, *origin) {
	return tlsWorldOpts(t, origins, lim, pepdOpts{})
}

// tlsWorldOpts is tlsWorld with pepd's maxUpstream from extra.
func tlsWorldOpts(t *testing.T, origins []string, lim Limits, extra pepdOpts) (*pepd, *squid, *origin) {
	ns, o, sq := siteStack(t, sitePages)
	port := o.Addr.Port()
	p := startPepd(t, pepdOpts{squid: sq.Addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.URL,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80, port},
		origins: origins, vipNames: []string{"vip.test"}, limits: lim, maxUpstream: extra.maxUpstream})
	return p, sq, o
}

// TestTLSOrigin: url mode writes https VIP URLs over 3 shards (each host
// always on one), and the VIP serves them over HTTP/2 and HTTP/1.1 over
// TLS through the same path as plain HTTP: Squid (a second load is a
// hit, the subscriber's address in access.log), CORS, the header diet,
// CSS rewritten to the https origins, a Referer in https VIP form mapped
// back to the origin URL.
func TestTLSOrigin(t *testing.T) {
	origins := []string{"https://192.0.2.12", "https://192.0.2.12:8443", "https://192.0.2.12:8444"}
	p, sq, o := tlsWorld(t, origins, Limits{})
	f := startTLSFront(t, p)
	page := get(t, p.client("127.0.0.9"), "http://www.site.test:"+o.Port+"/", 200)
	ms := httpsVIPURLRE.FindAllStringSubmatch(page, -1)
	if len(ms) != 3 {
		t.Fatalf("https VIP URLs %q, want 3 (style.css, app.js, logo.png):\n%s", ms, page)
	}
	shardOf := map[string]string{}
	for _, m := range ms {
		if prev, ok := shardOf[m[2]]; ok && prev != m[1] {
			t.Errorf("host %s on two shards (%q and %q)", m[2], prev, m[1])
		}
		shardOf[m[2]] = m[1]
	}
	for _, keep := range []string{`<a href="http://www.site.test:` + o.Port + `/next.html">`, `src="https://img.cdn.test/secure.png"`} {
		if !strings.Contains(page, keep) {
			t.Errorf("%q was rewritten:\n%s", keep, page)
		}
	}
	h2 := f.client("127.0.0.9", "h2")
	fetch := func(c *http.Client, url string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("GET %s: body: %v", url, err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
		}
		return resp, string(b)
	}
	want := map[string]string{"app.js": "console.log(1)", "logo.png": "PNG-logo"}
	for load := 1; load <= 2; load++ {
		for _, m := range ms {
			hdr := map[string]string{"Referer": origins[1] + "/www.site.test:" + o.Port + "/"}
			resp, body := fetch(h2, m[0], hdr)
			if resp.ProtoMajor != 2 {
				t.Errorf("%s: %s, want HTTP/2", m[0], resp.Proto)
			}
			if resp.Header.Get("Access-Control-Allow-Origin") != "*" {
				t.Errorf("%s: no Access-Control-Allow-Origin: *", m[0])
			}
			for _, h := range []string{"Via", "X-Cache", "X-Cache-Lookup"} {
				if v := resp.Header.Get(h); v != "" {
					t.Errorf("%s: %s: %q reached the subscriber (header diet)", m[0], h, v)
				}
			}
			name := m[0][strings.LastIndexByte(m[0], '/')+1:]
			if w, ok := want[name]; ok && body != w {
				t.Errorf("%s = %q, want %q", m[0], body, w)
			}
			if name == "style.css" {
				bg := shardOf["static.other.test:"+o.Port] + "/static.other.test:" + o.Port + "/bg.png"
				if wantCSS := "body{background:url(https://192.0.2.12" + bg + ")}"; body != wantCSS {
					t.Errorf("css = %q, want %q", body, wantCSS)
				}
			}
		}
	}
	if ref := o.lastHeader("img.cdn.test/logo.png").Get("Referer"); ref != "http://www.site.test:"+o.Port+"/" {
		t.Errorf("origin got Referer %q, want the page's own URL", ref)
	}
	// HTTP/1.1 over TLS, on a new connection.
	resp, body := fetch(f.client("127.0.0.9", "http/1.1"), "https://192.0.2.12/img.cdn.test:"+o.Port+"/logo.png", nil)
	if resp.ProtoMajor != 1 || body != "PNG-logo" {
		t.Errorf("HTTP/1.1 over TLS: %s %q", resp.Proto, body)
	}
	// The VIP's name in the URL is the VIP too (vip_path).
	resp, body = fetch(h2, "https://vip.test/img.cdn.test:"+o.Port+"/logo.png", nil)
	if body != "PNG-logo" {
		t.Errorf("https://vip.test/...: %q", body)
	}
	// CORS over HTTP/2 as over the relay: the object's own site gets
	// "*", another site's page the origin's answer (none here) and
	// Vary: Origin.
	for _, c := range []struct{ origin, acao, vary string }{
		{"http://img.cdn.test:" + o.Port, "*", ""},
		{"http://www.site.test:" + o.Port, "", "Origin"},
	} {
		resp, _ = fetch(h2, "https://192.0.2.12/img.cdn.test:"+o.Port+"/logo.png", map[string]string{"Origin": c.origin})
		if got, vary := resp.Header.Get("Access-Control-Allow-Origin"), strings.Join(resp.Header.Values("Vary"), ", "); got != c.acao || !strings.Contains(vary, c.vary) || c.vary == "" && strings.Contains(vary, "Origin") {
			t.Errorf("Origin %s over HTTP/2: Access-Control-Allow-Origin %q, Vary %q; want %q, %q", c.origin, got, vary, c.acao, c.vary)
		}
	}
	for _, k := range []string{"www.site.test/app.js", "static.other.test/style.css", "img.cdn.test/logo.png"} {
		if n := o.hitCount(k); n != 1 {
			t.Errorf("origin saw %s %d times, want 1 (the rest from Squid's cache)", k, n)
		}
	}
	lines := accessLogWith(t, sq, 5, "HIT", "127.0.0.9")
	if len(lines) < 5 {
		t.Errorf("access.log has %d hits from the subscriber 127.0.0.9, want at least 5:\n%s", len(lines), strings.Join(sq.AccessLog(t), "\n"))
	}
}

// TestTLSStreamLimit: a subscriber's requests over TLS beyond
// MaxStreamsPerSubscriber are answered 429 while the others go on.
func TestTLSStreamLimit(t *testing.T) {
	p, _, o := tlsWorld(t, []string{"https://192.0.2.12"}, Limits{MaxStreamsPerSubscriber: 2})
	f := startTLSFront(t, p)
	c := f.client("127.0.0.9", "h2")
	var wg sync.WaitGroup
	codes := make(chan int, 3)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// click.png takes 300 ms at the origin: the three overlap.
			resp, err := c.Get("https://192.0.2.12/img.cdn.test:" + o.Port + "/click.png")
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(codes)
	n := map[int]int{}
	for c := range codes {
		n[c]++
	}
	if n[200] != 2 || n[429] != 1 {
		t.Errorf("answers %v, want two 200 and one 429", n)
	}
	// Another subscriber is not held back.
	start := time.Now()
	if b := get(t, f.client("127.0.0.10", "h2"), "https://192.0.2.12/img.cdn.test:"+o.Port+"/logo.png", 200); b != "PNG-logo" {
		t.Errorf("other subscriber: %q", b)
	}
	t.Logf("other subscriber served in %v", time.Since(start))
}

// TestTLSOptimizer: an image asked for over HTTP/2 through the VIP's
// HTTPS origin (a VIP-form URL) is transformed by the optimizer as over
// HTTP/1.1: WebP for a browser that accepts it, Squid's headers off.
func TestTLSOptimizer(t *testing.T) {
	w := startOptWorld(t, time.Minute)
	f := startTLSFront(t, w.p)
	req, _ := http.NewRequest(http.MethodGet, "https://192.0.2.12/img.opt.test:"+w.o.port+"/photo.jpg", nil)
	req.Header.Set("Accept", chromeImageAccept)
	resp, err := f.client("127.0.0.9", "h2").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/webp" {
		t.Fatalf("%s %s %q, %d bytes (original %d): not a WebP over HTTP/2", resp.Proto, resp.Status, resp.Header.Get("Content-Type"), len(b), len(w.images["photo.jpg"]))
	}
}

// TestUpstreamPoolGrows: 24 concurrent HTTP/2 streams of one subscriber
// on one connection, each for an object Squid may not store (no-store,
// 300 ms at the origin, so that they overlap): the pool to Squid opens a
// connection per request in flight up to its bound (MaxUpstreamConns),
// never more; past it requests wait for a connection and are all served.
// With a bound of 64 the pool grows to the concurrency itself.
func TestUpstreamPoolGrows(t *testing.T) {
	const streams = 24
	for _, c := range []struct {
		bound    int
		min, max int // the peak of open connections must be within
	}{
		{bound: 4, min: 4, max: 4},
		{bound: 64, min: streams * 3 / 4, max: streams},
	} {
		t.Run(fmt.Sprintf("bound %d", c.bound), func(t *testing.T) {
			p, _, o := tlsWorldOpts(t, []string{"https://192.0.2.12"}, Limits{}, pepdOpts{maxUpstream: c.bound})
			f := startTLSFront(t, p)
			cl := f.client("127.0.0.9", "h2")
			var wg sync.WaitGroup
			codes := make(chan int, streams)
			start := time.Now()
			for i := 0; i < streams; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := cl.Get("https://192.0.2.12/img.cdn.test:" + o.Port + "/private.png")
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.ProtoMajor != 2 {
						t.Errorf("%s, want HTTP/2", resp.Proto)
					}
					codes <- resp.StatusCode
				}()
			}
			wg.Wait()
			close(codes)
			n := map[int]int{}
			for code := range codes {
				n[code]++
			}
			peak, waits := p.Proxy.pool.peakOpen(), testutilValue(p.M.upstreamWaits)
			open := testutilValue(p.M.upstreamOpen)
			t.Logf("bound %d: %d streams answered %v in %v; peak %d connections to squid open, %v requests waited, %v open after",
				c.bound, streams, n, time.Since(start), peak, waits, open)
			if n[200] != streams {
				t.Errorf("answers %v, want %d times 200", n, streams)
			}
			if peak < c.min || peak > c.max {
				t.Errorf("peak of open connections to squid %d, want %d..%d", peak, c.min, c.max)
			}
			if open > float64(c.bound) {
				t.Errorf("pep_http_upstream_open_connections %v above the bound %d", open, c.bound)
			}
			if c.bound < streams && waits == 0 {
				t.Errorf("no request waited for a connection with %d streams over a bound of %d", streams, c.bound)
			}
		})
	}
}

// TestTLSResumption: through ServeTLS, as pepd serves the VIP, a client
// that keeps its session cache resumes on its second connection (no
// certificate sent again), over TLS 1.3 when it offers 1.3 and 1.2; so
// does openssl s_client (another TLS stack, sessions in a file) when it
// is installed. It logs the bytes the server sends for a full and a
// resumed handshake.
func TestTLSResumption(t *testing.T) {
	p, _ := attackWorld(t, Limits{})
	f := startTLSFront(t, p)
	cache := tls.NewLRUClientSessionCache(8)
	var full int
	for i := 0; i < 2; i++ {
		raw, err := net.Dial("tcp", f.Addr)
		if err != nil {
			t.Fatal(err)
		}
		cc := &viptlstest.ReadCounter{Conn: raw}
		c := tls.Client(cc, &tls.Config{RootCAs: f.CA.Pool(), ServerName: testVIP.String(), NextProtos: []string{"h2"}, ClientSessionCache: cache})
		if err := c.Handshake(); err != nil {
			t.Fatal(err)
		}
		hs := cc.N
		st := c.ConnectionState()
		// A TLS 1.3 ticket comes after the handshake: read until the
		// server's SETTINGS (the h2 preface) so that it has arrived.
		io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
		c.SetReadDeadline(time.Now().Add(testenv.Scale(5 * time.Second)))
		c.Read(make([]byte, 64))
		c.Close()
		t.Logf("connection %d: %s, ALPN %s, resumed %v, %d bytes from the server in the handshake, chain of %d certificates (%d bytes)",
			i+1, tls.VersionName(st.Version), st.NegotiatedProtocol, st.DidResume, hs, len(st.PeerCertificates), chainBytes(st.PeerCertificates))
		if st.Version != tls.VersionTLS13 {
			t.Errorf("connection %d: %s, want TLS 1.3", i+1, tls.VersionName(st.Version))
		}
		if i == 0 {
			full = hs
			if st.DidResume {
				t.Error("first connection resumed")
			}
			if len(st.PeerCertificates) != 1 {
				t.Errorf("the server sent %d certificates, want the leaf alone (the CA is in the client's store)", len(st.PeerCertificates))
			}
		} else {
			if !st.DidResume {
				t.Error("second connection not resumed")
			}
			if hs >= full {
				t.Errorf("resumed handshake %d bytes from the server, the full one %d", hs, full)
			}
		}
	}
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Log("openssl not installed: no s_client check")
		return
	}
	dir := t.TempDir()
	caFile, sess := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "sess.pem")
	os.WriteFile(caFile, f.CA.PEM, 0o644)
	for i, arg := range []string{"-sess_out", "-sess_in"} {
		cmd := exec.Command(openssl, "s_client", "-connect", f.Addr, "-CAfile", caFile, "-verify_return_error", "-alpn", "h2", arg, sess)
		// Wait for the ticket (sent after the handshake) before closing.
		cmd.Stdin = strings.NewReader("")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("openssl s_client %s: %v\n%s", arg, err, out)
		}
		o := string(out)
		reused := strings.Contains(o, "\nReused, ")
		t.Logf("openssl connection %d: reused %v; %s", i+1, reused, firstLine(o, "Protocol"))
		if !strings.Contains(o, "Verify return code: 0 (ok)") {
			t.Errorf("openssl connection %d: certificate not verified:\n%s", i+1, o)
		}
		if i == 1 && !reused {
			t.Errorf("openssl's second connection not resumed:\n%s", o)
		}
	}
}

func chainBytes(cs []*x509.Certificate) int {
	n := 0
	for _, c := range cs {
		n += len(c.Raw)
	}
	return n
}

// firstLine returns the first line of s containing sub, trimmed.
func firstLine(s, sub string) string {
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// TestTLSHandshakeTimeout: a connection to the VIP's HTTPS origin that
// sends half a ClientHello and stops is closed within ReadHeaderTimeout
// of its start, counted as a tls_handshake timeout (not read_header: an
// HTTP slowloris is counted apart).
func TestTLSHandshakeTimeout(t *testing.T) {
	p, _ := attackWorld(t, Limits{ReadHeaderTimeout: 500 * time.Millisecond})
	f := startTLSFront(t, p)
	// The server's timeout runs from its accept, which can come before
	// Dial returns here: the time is taken before the dial (CI once saw
	// 499.85 ms counted from after it).
	start := time.Now()
	c, err := net.Dial("tcp", f.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A TLS record header for a 512-byte handshake message, and 5 bytes.
	c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03})
	c.SetReadDeadline(time.Now().Add(testenv.Scale(5 * time.Second)))
	_, err = c.Read(make([]byte, 1))
	took := time.Since(start)
	tlsTO, hdrTO := testutilValue(p.M.timeouts.WithLabelValues("tls_handshake")), testutilValue(p.M.timeouts.WithLabelValues("read_header"))
	t.Logf("half a ClientHello: closed after %v (%v); timeouts tls_handshake %v, read_header %v", took, err, tlsTO, hdrTO)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("still open after %v", took)
	}
	if took < 500*time.Millisecond || took > 500*time.Millisecond+testenv.Scale(2*time.Second) {
		t.Errorf("closed after %v, want about the read header timeout (500ms)", took)
	}
	if tlsTO != 1 || hdrTO != 0 {
		t.Errorf("timeouts tls_handshake %v, read_header %v; want 1 and 0", tlsTO, hdrTO)
	}
}

// finishLater delays the first write after the ClientHello (the client's
// Finished) by d: the server's handshake stays in flight that long.
type finishLater struct {
	net.Conn
	writes int
	d      time.Duration
}

func (c *finishLater) Write(b []byte) (int, error) {
	if c.writes++; c.writes == 2 {
		time.Sleep(c.d)
	}
	return c.Conn.Write(b)
}

// TestTLSSurplusHold: while a subscriber's first handshake with the VIP
// is in flight (its Finished delayed a second), its second ClientHello
// offering h2 gets no answer before that handshake ends, and one it
// closes meanwhile gets none at all (counted closed, no byte read); a
// ClientHello offering HTTP/1.1 alone, or from another subscriber, is
// answered at once; the held one that stays is served (counted served)
// and speaks h2.
func TestTLSSurplusHold(t *testing.T) {
	const finish = time.Second
	p, f := attackWorld(t, Limits{HoldSurplus: testenv.Scale(10 * time.Second)})
	type done struct {
		at    time.Duration
		read  int
		proto string
		err   error
	}
	start := time.Now()
	// handshake dials from src, offers protos and returns when the
	// handshake ends; closeAfter > 0 closes the connection then instead.
	handshake := func(src string, protos []string, delay, closeAfter time.Duration) <-chan done {
		ch := make(chan done, 1)
		go func() {
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
			raw, err := d.Dial("tcp", f.Addr)
			if err != nil {
				ch <- done{err: err}
				return
			}
			defer raw.Close()
			rc := &viptlstest.ReadCounter{Conn: &finishLater{Conn: raw, d: delay}}
			c := tls.Client(rc, &tls.Config{RootCAs: f.CA.Pool(), ServerName: testVIP.String(), NextProtos: protos})
			if closeAfter > 0 {
				time.AfterFunc(closeAfter, func() { raw.Close() })
			}
			err = c.Handshake()
			ch <- done{at: time.Since(start), read: rc.N, proto: c.ConnectionState().NegotiatedProtocol, err: err}
		}()
		return ch
	}
	h2 := []string{"h2", "http/1.1"}
	first := handshake("127.0.0.1", h2, finish, 0)
	time.Sleep(200 * time.Millisecond) // the first ClientHello is in
	held := handshake("127.0.0.1", h2, 0, 0)
	closed := handshake("127.0.0.1", h2, 0, 300*time.Millisecond)
	h1 := handshake("127.0.0.1", []string{"http/1.1"}, 0, 0)
	other := handshake("127.0.0.2", h2, 0, 0)
	for name, ch := range map[string]<-chan done{"HTTP/1.1 only": h1, "another subscriber": other} {
		d := <-ch
		t.Logf("%s: handshake ended at %v (%v)", name, d.at, d.err)
		if d.err != nil || d.at >= finish {
			t.Errorf("%s: handshake ended at %v (%v), want before the first's end (%v): not held", name, d.at, d.err, finish)
		}
	}
	c := <-closed
	t.Logf("closed while held: %d bytes read, %v", c.read, c.err)
	if c.read != 0 {
		t.Errorf("closed while held: the server sent %d bytes, want none", c.read)
	}
	d1, d2 := <-first, <-held
	t.Logf("first: ended at %v (%s, %v); held: ended at %v (%s, %v)", d1.at, d1.proto, d1.err, d2.at, d2.proto, d2.err)
	if d1.err != nil || d2.err != nil || d2.proto != "h2" {
		t.Fatalf("first %v, held %v %q; want both handshakes made, h2", d1.err, d2.err, d2.proto)
	}
	if d2.at < finish {
		t.Errorf("held handshake ended at %v, before the first's Finished was sent (%v)", d2.at, finish)
	}
	// The close reaches the server while it holds: counted when read.
	deadline := time.Now().Add(testenv.Scale(5 * time.Second))
	for testutilValue(p.M.surplus.WithLabelValues("closed")) < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cl, sv := testutilValue(p.M.surplus.WithLabelValues("closed")), testutilValue(p.M.surplus.WithLabelValues("served"))
	if cl != 1 || sv != 1 {
		t.Errorf("pep_http_tls_surplus_total closed %v, served %v; want 1 and 1", cl, sv)
	}
	if h := testutilValue(p.M.surplusHeld); h < 0.5 {
		t.Errorf("held %v s in all, want at least the served one's wait (about 0.8 s)", h)
	}
}
