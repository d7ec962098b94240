package splice

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"pep/internal/dnsproxy"
	"pep/internal/dnsproxy/dnsmasqtest"
	"pep/internal/guard"
	"pep/internal/testenv"
	"pep/internal/viptls"
	"pep/internal/viptls/viptlstest"
)

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// setup starts dnsmasq (www.foo.com -> 127.0.0.1), a TLS origin on
// 127.0.0.1 and a Splicer in front of it serving subscribers 127.0.0.1/32.
// allowLoopback exempts 127.0.0.0/8 from the guard's checks.
func setup(t *testing.T, allowLoopback bool) (spliceAddr string, origin *httptest.Server, s *Splicer) {
	return setupWith(t, allowLoopback, []string{"host-record=www.foo.com,127.0.0.1", "local=/foo.com/"})
}

// setupWith is setup with dnsmasq's configuration lines.
func setupWith(t *testing.T, allowLoopback bool, dnsmasq []string) (spliceAddr string, origin *httptest.Server, s *Splicer) {
	up := dnsmasqtest.Start(t, dnsmasq)
	origin = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/photo.jpg" { // a real JPEG (internal/optimize's test photo)
			w.Header().Set("Content-Type", "image/jpeg")
			w.Write(testPhoto(t))
			return
		}
		io.WriteString(w, "origin says hello to "+r.Host)
	}))
	t.Cleanup(origin.Close)
	port, _ := strconv.Atoi(origin.URL[strings.LastIndexByte(origin.URL, ':')+1:])
	res, err := dnsproxy.NewUpstream(dnsproxy.UpstreamOptions{Resolvers: []string{up}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	gopts := guard.Options{Subscribers: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	if allowLoopback {
		gopts.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}
	s, err = New(Options{Resolver: res, Guard: guard.New(gopts), Port: uint16(port),
		HelloTimeout: 2 * time.Second, Registerer: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil && err != ErrServerClosed {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String(), origin, s
}

// TestSpliceHTTPS fetches a page over TLS through the splice and checks
// that the certificate is the origin's own (never decrypted).
func TestSpliceHTTPS(t *testing.T) {
	addr, origin, s := setup(t, true)
	pool := x509.NewCertPool()
	pool.AddCert(origin.Certificate())
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr) // "VIP:443"
		},
		// httptest's certificate names example.com; the SNI stays www.foo.com.
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "www.foo.com", InsecureSkipVerify: true,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if !cs.PeerCertificates[0].Equal(origin.Certificate()) {
					return errors.New("not the origin's certificate")
				}
				return nil
			}},
	}}
	for i := range 3 {
		resp, err := c.Get("https://www.foo.com/")
		if err != nil {
			t.Fatalf("GET %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got, want := string(body), "origin says hello to www.foo.com"; got != want {
			t.Errorf("body %q, want %q", got, want)
		}
		c.CloseIdleConnections()
	}
	if got := testutil.ToFloat64(s.m.splices); got != 3 {
		t.Errorf("pep_splice_splices_total = %v, want 3", got)
	}
	// Nothing is transformed over the splice (issue 11): an image asked
	// for with Accept: image/webp arrives as the origin's JPEG, byte for
	// byte, whether or not pepd's optimizer is on (it never sees HTTPS).
	req, _ := http.NewRequest("GET", "https://www.foo.com/photo.jpg", nil)
	req.Header.Set("Accept", "image/avif,image/webp,image/apng,image/*,*/*;q=0.8")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.CloseIdleConnections()
	if resp.Header.Get("Content-Type") != "image/jpeg" || !bytes.Equal(body, testPhoto(t)) {
		t.Errorf("the image over the splice changed: %q, %d bytes", resp.Header.Get("Content-Type"), len(body))
	}
}

func testPhoto(t testing.TB) []byte {
	b, err := os.ReadFile("../optimize/testdata/photo.jpg")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// isReset reports whether err is a connection reset by the peer.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// TestSpliceResets checks every reset case: the client sees a RST and the
// reason is counted.
func TestSpliceResets(t *testing.T) {
	addr, _, s := setup(t, false) // loopback origins refused by the guard
	cases := []struct {
		name   string
		from   string
		send   func(c net.Conn) error
		reason string
	}{
		{"no SNI", "127.0.0.1", func(c net.Conn) error {
			return tls.Client(c, &tls.Config{InsecureSkipVerify: true}).Handshake()
		}, ResetNoSNI},
		{"not TLS", "127.0.0.1", func(c net.Conn) error {
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: www.foo.com\r\n\r\n")
			_, err := c.Read(make([]byte, 1))
			return err
		}, ResetBadHello},
		{"not a subscriber", "127.0.0.2", func(c net.Conn) error {
			return tls.Client(c, &tls.Config{ServerName: "www.foo.com", InsecureSkipVerify: true}).Handshake()
		}, ResetNotSubscriber},
		{"name does not resolve", "127.0.0.1", func(c net.Conn) error {
			return tls.Client(c, &tls.Config{ServerName: "nothere.foo.com", InsecureSkipVerify: true}).Handshake()
		}, ResetResolve},
		{"origin on loopback refused by the guard", "127.0.0.1", func(c net.Conn) error {
			return tls.Client(c, &tls.Config{ServerName: "www.foo.com", InsecureSkipVerify: true}).Handshake()
		}, ResetDenied},
		{"hello never completes", "127.0.0.1", func(c net.Conn) error {
			c.Write([]byte{22, 3, 1, 0, 200, 1})
			_, err := c.Read(make([]byte, 1))
			return err
		}, ResetTimeout},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(tc.from)}}
			c, err := d.Dial("tcp", addr)
			switch {
			case isReset(err): // the RST came before connect(2) returned
			case err != nil:
				t.Fatal(err)
			default:
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if err := tc.send(c); !isReset(err) {
					t.Errorf("client got %v, want a connection reset", err)
				}
			}
			if got := testutil.ToFloat64(s.m.resets.WithLabelValues(tc.reason)); got != 1 {
				t.Errorf("pep_splice_resets_total{reason=%q} = %v, want 1", tc.reason, got)
			}
		})
	}
	if got := testutil.ToFloat64(s.m.splices); got != 0 {
		t.Errorf("pep_splice_splices_total = %v, want 0", got)
	}
}

// replay reads buf before the connection's own bytes.
type replay struct {
	net.Conn
	buf []byte
}

func (r *replay) Read(p []byte) (int, error) {
	if len(r.buf) > 0 {
		n := copy(p, r.buf)
		r.buf = r.buf[n:]
		return n, nil
	}
	return r.Conn.Read(p)
}

// TestTerminate: with a Terminator (the VIP's own HTTPS origin,
// internal/viptls), a ClientHello for the VIP's name, or without SNI to the
// VIP address its certificate names, is terminated with the VIP's
// certificate; any other name is still spliced to its origin with the
// origin's certificate; a non-subscriber is reset even for the VIP.
func TestTerminate(t *testing.T) {
	addr, origin, s := setup(t, true)
	ca, err := viptlstest.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	cf, kf, err := ca.WriteFiles(t.TempDir(), "vip.test", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	st, err := viptls.Load(cf, kf, []string{"vip.test"})
	if err != nil {
		t.Fatal(err)
	}
	// The splice's listener is 127.0.0.1: its local address stands for
	// the VIP (no nftables here).
	term, err := viptls.NewTerminator(st, netip.MustParseAddr("127.0.0.1"), []string{"vip.test"}, func(c net.Conn, hello []byte, cfg *tls.Config) {
		go func() {
			tc := tls.Server(&replay{Conn: c, buf: hello}, cfg)
			defer tc.Close()
			if err := tc.Handshake(); err != nil {
				return
			}
			io.WriteString(tc, "the VIP, over "+tc.ConnectionState().NegotiatedProtocol+"\n")
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	s.term = term
	read := func(src, serverName string, roots *x509.CertPool) (string, error) {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: serverName, RootCAs: roots, NextProtos: []string{"h2", "http/1.1"}})
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		return string(b), err
	}
	for _, name := range []string{"vip.test", "127.0.0.1"} { // an address: no SNI
		got, err := read("127.0.0.1", name, ca.Pool())
		if err != nil || got != "the VIP, over h2\n" {
			t.Errorf("%s: %q, %v; want the VIP's answer", name, got, err)
		}
	}
	if n := testutil.ToFloat64(s.m.terminated); n != 2 {
		t.Errorf("pep_splice_terminated_total = %v, want 2", n)
	}
	// Every other name is spliced, with the origin's own certificate.
	pool := x509.NewCertPool()
	pool.AddCert(origin.Certificate())
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "www.foo.com", InsecureSkipVerify: true,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if !cs.PeerCertificates[0].Equal(origin.Certificate()) {
					return errors.New("not the origin's certificate")
				}
				return nil
			}},
	}}
	resp, err := c.Get("https://www.foo.com/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "origin says hello to www.foo.com" {
		t.Errorf("spliced body %q", body)
	}
	c.CloseIdleConnections()
	// Not a subscriber: reset, never terminated.
	if got, err := read("127.0.0.2", "vip.test", ca.Pool()); err == nil {
		t.Errorf("non-subscriber got %q", got)
	}
	if n := testutil.ToFloat64(s.m.terminated); n != 2 {
		t.Errorf("pep_splice_terminated_total = %v after a non-subscriber, want 2", n)
	}
	if n := testutil.ToFloat64(s.m.resets.WithLabelValues(ResetNotSubscriber)); n != 1 {
		t.Errorf("not_subscriber resets = %v, want 1", n)
	}
	// Not a ClientHello at all (plain HTTP to the TLS port), and a
	// ClientHello cut short: reset, never handed to the VIP's origin.
	for _, bad := range [][]byte{[]byte("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), {22, 3, 1, 0, 200, 1, 0, 0, 196, 3, 3}} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(bad)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil || n > 0 {
			t.Errorf("%q: read %d bytes, %v; want a reset", bad, n, err)
		}
		c.Close()
	}
	if n := testutil.ToFloat64(s.m.terminated); n != 2 {
		t.Errorf("pep_splice_terminated_total = %v after bad hellos, want 2", n)
	}
	if n := testutil.ToFloat64(s.m.resets.WithLabelValues(ResetBadHello)); n != 2 {
		t.Errorf("bad_hello resets = %v, want 2", n)
	}
}

// TestSpliceDialFallbackAndFailure: a name whose first address refuses
// the connection is spliced to its next address; a name whose every
// address refuses is reset and counted as a dial failure (the guard
// allows loopback here; only 127.0.0.1 listens on the origin port).
func TestSpliceDialFallbackAndFailure(t *testing.T) {
	// dnsmasq answers the addresses of one name in the reverse order of
	// its lines: 127.0.0.3 (nothing listens) first, then 127.0.0.1.
	addr, origin, s := setupWith(t, true, []string{"host-record=www.foo.com,127.0.0.1", "local=/foo.com/",
		"address=/multi.foo.com/127.0.0.1", "address=/multi.foo.com/127.0.0.3", "address=/dead.foo.com/127.0.0.3"})
	got, err := s.res.LookupA(context.Background(), "multi.foo.com")
	if err != nil || len(got) != 2 || got[0] != netip.MustParseAddr("127.0.0.3") {
		t.Fatalf("multi.foo.com = %v, %v; the test needs 127.0.0.3 first", got, err)
	}
	c := httpsVia(addr, origin, "multi.foo.com")
	resp, err := c.Get("https://multi.foo.com/")
	if err != nil {
		t.Fatalf("through the second address: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.CloseIdleConnections()
	if want := "origin says hello to multi.foo.com"; string(body) != want {
		t.Errorf("body %q, want %q", body, want)
	}
	if got := testutil.ToFloat64(s.m.splices); got != 1 {
		t.Errorf("pep_splice_splices_total = %v after the fallback, want 1", got)
	}

	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(testenv.Scale(10 * time.Second)))
	if err := tls.Client(conn, &tls.Config{ServerName: "dead.foo.com", InsecureSkipVerify: true}).Handshake(); !isReset(err) {
		t.Errorf("every address refuses: client got %v, want a connection reset", err)
	}
	if got := testutil.ToFloat64(s.m.resets.WithLabelValues(ResetDial)); got != 1 {
		t.Errorf("pep_splice_resets_total{reason=%q} = %v, want 1", ResetDial, got)
	}
}

// TestSpliceShutdown: Shutdown lets a live splice finish within its
// context (a request on it completes), then closes the splices still open
// when the context ends and returns its error; new connections are
// refused from the start of Shutdown.
func TestSpliceShutdown(t *testing.T) {
	testenv.Log(t)
	addr, origin, s := setup(t, true)
	c := httpsVia(addr, origin, "www.foo.com")
	get := func() error {
		resp, err := c.Get("https://www.foo.com/")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	if err := get(); err != nil { // a kept-alive splice, idle in the client's pool
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Scale(time.Second))
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- s.Shutdown(ctx) }()
	// Shutdown has closed the listener once a new connection is refused.
	for deadline := time.Now().Add(testenv.Scale(5 * time.Second)); ; time.Sleep(5 * time.Millisecond) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		nc.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts during Shutdown")
		}
	}
	// The live splice still carries a request.
	if err := get(); err != nil {
		t.Errorf("a request on a live splice during Shutdown: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown with a splice open past its context: %v, want %v", err, context.DeadlineExceeded)
		}
		if took := time.Since(start); took < time.Second {
			t.Errorf("Shutdown returned after %s, before its context ended (1 s)", took)
		}
	case <-time.After(testenv.Scale(10 * time.Second)):
		t.Fatal("Shutdown did not return after its context ended")
	}
	// The splice was closed: the client's next request fails or takes a
	// new connection, which is refused.
	c.Transport.(*http.Transport).DisableKeepAlives = true
	if err := get(); err == nil {
		t.Error("a request after Shutdown succeeded")
	}
}

// httpsVia returns an HTTP client that dials the Splicer at addr for
// every https URL and accepts origin's certificate.
func httpsVia(addr string, origin *httptest.Server, name string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}
			return d.DialContext(ctx, network, addr)
		},
		TLSClientConfig: &tls.Config{ServerName: name, InsecureSkipVerify: true,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if !cs.PeerCertificates[0].Equal(origin.Certificate()) {
					return errors.New("not the origin's certificate")
				}
				return nil
			}},
	}}
}
