package httpproxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"pep/internal/mode"
	"pep/internal/testenv"
)

// h2conn is a raw HTTP/2 client connection over TLS (ALPN h2) to the VIP's
// front, trusting the front's CA: the framer writes what a misbehaving
// client would.
type h2conn struct {
	c   *tls.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

func dialH2(t *testing.T, f *tlsFront, settings ...http2.Setting) *h2conn {
	t.Helper()
	c, err := tls.Dial("tcp", f.Addr, &tls.Config{RootCAs: f.CA.Pool(), ServerName: testVIP.String(), NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q, want h2", p)
	}
	t.Cleanup(func() { c.Close() })
	h := &h2conn{c: c, fr: http2.NewFramer(c, c)}
	h.enc = hpack.NewEncoder(&h.buf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return h
}

// headers returns a GET request's header block for path on the VIP.
func (h *h2conn) headers(path string, extra ...string) []byte {
	h.buf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", testVIP.String()}, {":path", path}} {
		h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for i := 0; i+1 < len(extra); i += 2 {
		h.enc.WriteField(hpack.HeaderField{Name: extra[i], Value: extra[i+1]})
	}
	return bytes.Clone(h.buf.Bytes())
}

// readUntilClosed reads frames until the connection ends (EOF, a reset, a
// GOAWAY) or d passes; it returns whether it ended and the GOAWAY code.
func (h *h2conn) readUntilClosed(d time.Duration) (closed bool, goAway http2.ErrCode, err error) {
	h.c.SetReadDeadline(time.Now().Add(d))
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return false, goAway, err
			}
			return true, goAway, err
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			goAway = ga.ErrCode
		}
	}
}

func attackWorld(t *testing.T, lim Limits) (*pepd, *tlsFront) {
	p := startPepd(t, pepdOpts{squid: "127.0.0.1:1", resolver: "127.0.0.1:1", mode: mode.URL, subscribers: []string{"127.0.0.0/8"},
		limits: lim, log: slog.New(slog.DiscardHandler)})
	return p, startTLSFront(t, p)
}

func heapMB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapInuse) / (1 << 20)
}

// TestH2RapidReset (CVE-2023-44487): 20,000 streams opened and reset at
// once on one connection. The work they cause is bounded: pepd's heap and
// goroutines come back near where they were, the whole attack takes at most
// a few seconds, and the server (Go's, with MaxStreams 100) either goes on
// serving the connection or ends it; a second connection is served.
func TestH2RapidReset(t *testing.T) {
	p, f := attackWorld(t, Limits{})
	heap0, g0 := heapMB(), runtime.NumGoroutine()
	h := dialH2(t, f)
	block := h.headers(HealthPath)
	start := time.Now()
	const n = 20000
	sent := 0
	for i := 0; i < n; i++ {
		id := uint32(2*i + 1)
		if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
			break
		}
		if err := h.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			break
		}
		sent++
	}
	closed, code, _ := h.readUntilClosed(3 * time.Second)
	took := time.Since(start)
	var g1 int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if g1 = runtime.NumGoroutine(); g1 < g0+50 || time.Now().After(deadline) {
			break
		}
	}
	heap1 := heapMB()
	t.Logf("rapid reset: %d of %d HEADERS+RST_STREAM pairs written in %v; connection ended by the server: %v (GOAWAY %v); heap %.1f -> %.1f MB; goroutines %d -> %d",
		sent, n, took, closed, code, heap0, heap1, g0, g1)
	if g1 >= g0+50 {
		t.Errorf("goroutines %d after the attack, %d before", g1, g0)
	}
	if heap1-heap0 > 32 {
		t.Errorf("heap grew by %.1f MB", heap1-heap0)
	}
	if took > 20*time.Second {
		t.Errorf("attack took %v", took)
	}
	if b := get(t, f.client("127.0.0.1", "h2"), "https://192.0.2.12"+HealthPath, 200); b != "ok\n" {
		t.Errorf("after the attack: %q", b)
	}
	_ = p
}

// TestH2ContinuationFlood (CVE-2024-27316 class, Go's CVE-2023-45288):
// one HEADERS frame without END_HEADERS followed by CONTINUATION frames
// without end. The server ends the connection once the header block
// passes its bound (MaxHeaderBytes), long before the 64 MB the client is
// ready to send, within seconds and without holding the bytes.
func TestH2ContinuationFlood(t *testing.T) {
	_, f := attackWorld(t, Limits{MaxHeaderBytes: 32 << 10})
	heap0 := heapMB()
	h := dialH2(t, f)
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.headers(HealthPath), EndStream: true}); err != nil {
		t.Fatal(err)
	}
	// Each CONTINUATION carries 16 KB of new literal header fields.
	h.buf.Reset()
	for h.buf.Len() < 16<<10 {
		h.enc.WriteField(hpack.HeaderField{Name: "x-flood", Value: strings.Repeat("a", 1000), Sensitive: true})
	}
	frag := bytes.Clone(h.buf.Bytes())
	done := make(chan struct{})
	var closed bool
	go func() { closed, _, _ = h.readUntilClosed(30 * time.Second); close(done) }()
	start := time.Now()
	written := 0
	for written < 64<<20 {
		h.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if err := h.fr.WriteContinuation(1, false, frag); err != nil {
			break
		}
		written += len(frag)
	}
	<-done
	took := time.Since(start)
	heap1 := heapMB()
	t.Logf("CONTINUATION flood: %d KB written before the server ended the connection (closed %v) in %v; heap %.1f -> %.1f MB", written>>10, closed, took, heap0, heap1)
	if !closed || written >= 64<<20 {
		t.Fatalf("server took %d KB of CONTINUATION frames without ending the connection", written>>10)
	}
	if written > 8<<20 {
		t.Errorf("server read %d KB before ending the connection, want about its header bound", written>>10)
	}
	if heap1-heap0 > 16 {
		t.Errorf("heap grew by %.1f MB", heap1-heap0)
	}
}

// h2World is the world with one large object (16 MB) for the slow-reader
// tests.
func h2World(t *testing.T, lim Limits) (*pepd, *tlsFront, *origin) {
	ns := startDNS(t, map[string]string{"big.test": originIP})
	o := startOrigin(t, originIP, map[string]page{"big.test/big.bin": {ctype: "application/octet-stream", body: strings.Repeat("x", 16<<20)}})
	sc := siteSquidConf(t, ns, map[string]string{"big.test": originIP}, o.Addr.Port())
	sc.ProxyProtocol = true
	sq := startSquid(t, sc)
	p := startPepd(t, pepdOpts{squid: sq.Addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.URL,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80, o.Addr.Port()},
		limits: lim, log: slog.New(slog.DiscardHandler)})
	return p, startTLSFront(t, p), o
}

// TestH2SlowReader: a client that opens its flow-control windows wide,
// asks for 16 MB and stops reading is closed by the write deadline
// (WriteTimeout 1 s, counted as a write timeout) within a few seconds; a
// client that never opens its stream window (initial window 0, no
// WINDOW_UPDATE) holds one stream, bounded by MaxStreams per connection:
// the streams beyond it are refused by the server, and the others of the
// subscriber go on.
func TestH2SlowReader(t *testing.T) {
	p, f, o := h2World(t, Limits{WriteTimeout: time.Second, MaxStreams: 4})
	path := "/big.test:" + o.Port + "/big.bin"
	t.Run("stops reading", func(t *testing.T) {
		h := dialH2(t, f, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
		h.fr.WriteWindowUpdate(0, 1<<31-1-65535)
		w0 := testutil.ToFloat64(p.M.timeouts.WithLabelValues("write"))
		start := time.Now()
		if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.headers(path), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		// Read nothing; wait for the server to give up on us.
		var w1 float64
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if w1 = testutil.ToFloat64(p.M.timeouts.WithLabelValues("write")); w1 > w0 {
				break
			}
		}
		took := time.Since(start)
		t.Logf("slow reader closed after %v (write timeouts %v -> %v)", took, w0, w1)
		if w1 <= w0 {
			t.Fatalf("no write timeout within %v of the request", took)
		}
		if closed, _, _ := h.readUntilClosed(5 * time.Second); !closed {
			t.Errorf("connection still open after the write timeout")
		}
	})
	t.Run("stalled window", func(t *testing.T) {
		h := dialH2(t, f, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		block := h.headers(path)
		for i := 0; i < 8; i++ { // twice MaxStreams
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
		}
		h.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		heads, refused := 0, 0
		for heads+refused < 8 {
			fr, err := h.fr.ReadFrame()
			if err != nil {
				t.Fatalf("after %d heads and %d refusals: %v", heads, refused, err)
			}
			switch fr := fr.(type) {
			case *http2.HeadersFrame:
				heads++
			case *http2.RSTStreamFrame:
				if fr.ErrCode == http2.ErrCodeRefusedStream || fr.ErrCode == http2.ErrCodeProtocol {
					refused++
				}
			case *http2.DataFrame:
				if len(fr.Data()) > 0 {
					t.Fatalf("DATA of %d bytes on a zero window", len(fr.Data()))
				}
			}
		}
		t.Logf("stalled window: %d response heads (no DATA: window 0), %d streams refused", heads, refused)
		if heads > 4 {
			t.Errorf("%d streams served on one connection, MaxStreams 4", heads)
		}
		// The subscriber's other connections are served meanwhile.
		if b := get(t, f.client("127.0.0.1", "h2"), "https://192.0.2.12"+HealthPath, 200); b != "ok\n" {
			t.Errorf("other connection: %q", b)
		}
	})
}

// TestH2IdleMemory: the memory an idle HTTP/2 connection to the VIP costs
// pepd (TLS state, the HTTP/2 server's connection, its goroutines), over
// 200 connections that each made one request and then wait: the heap and
// goroutine stacks after a collection, divided by the connections. It
// fails above 128 KB a connection.
func TestH2IdleMemory(t *testing.T) {
	_, f := attackWorld(t, Limits{})
	const n = 200
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	var clients []*h2conn
	for i := 0; i < n; i++ {
		h := dialH2(t, f)
		if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.headers(HealthPath), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		h.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for ended := false; !ended; {
			fr, err := h.fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if d, ok := fr.(*http2.DataFrame); ok && d.StreamEnded() {
				ended = true
			}
		}
		clients = append(clients, h)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	// Both ends of every connection live in this process: the client's
	// share (a framer, a TLS conn, its hpack state) is counted too, so the
	// figure is an upper bound of pepd's.
	per := float64(int64(m1.HeapInuse+m1.StackInuse)-int64(m0.HeapInuse+m0.StackInuse)) / n
	t.Logf("idle HTTP/2 connection: %.1f KB each (client side included), %d connections, goroutines %d", per/1024, n, runtime.NumGoroutine())
	if per > 128<<10 {
		t.Errorf("%.0f KB per idle HTTP/2 connection", per/1024)
	}
	_ = clients
}

// TestH2StalledWindow: a client that opens a stream for a 16 MB object
// with a stream window of 0 and never sends WINDOW_UPDATE gets the
// response head, then, once the handler's write has waited WriteTimeout
// (1 s) for window, RST_STREAM INTERNAL_ERROR: counted in
// pep_http_timeouts_total{phase="stream_write"}, and the Squid connection
// that carried the response is closed (pep_http_upstream_open_connections
// back to 0), its buffers with it; the goroutines come back. The
// connection itself is not closed (it answers a PING).
func TestH2StalledWindow(t *testing.T) {
	const limit = time.Second
	p, f, o := h2World(t, Limits{WriteTimeout: limit})
	g0 := runtime.NumGoroutine()
	h := dialH2(t, f, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	s0 := testutil.ToFloat64(p.M.timeouts.WithLabelValues("stream_write"))
	start := time.Now()
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.headers("/big.test:" + o.Port + "/big.bin"), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	h.c.SetReadDeadline(time.Now().Add(testenv.Scale(15 * time.Second)))
	var head, reset time.Duration
	var code http2.ErrCode
	for reset == 0 {
		fr, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %v (head after %v): %v; the stalled stream was not reset", time.Since(start), head, err)
		}
		switch fr := fr.(type) {
		case *http2.HeadersFrame:
			head = time.Since(start)
		case *http2.DataFrame:
			if len(fr.Data()) > 0 {
				t.Fatalf("DATA of %d bytes on a zero window", len(fr.Data()))
			}
		case *http2.RSTStreamFrame:
			reset, code = time.Since(start), fr.ErrCode
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v after %v: the connection, not the stream, was ended", fr.ErrCode, time.Since(start))
		}
	}
	// The Squid connection is closed and the handler's goroutines end.
	var open float64
	var g1 int
	for deadline := time.Now().Add(testenv.Scale(5 * time.Second)); ; time.Sleep(20 * time.Millisecond) {
		open, g1 = testutil.ToFloat64(p.M.upstreamOpen), runtime.NumGoroutine()
		if open == 0 || time.Now().After(deadline) {
			break
		}
	}
	s1 := testutil.ToFloat64(p.M.timeouts.WithLabelValues("stream_write"))
	t.Logf("stalled window: head after %v, RST_STREAM %v after %v (write timeout %v); stream_write timeouts %v -> %v; connections to squid open %v; goroutines %d -> %d",
		head, code, reset, limit, s0, s1, open, g0, g1)
	if head == 0 {
		t.Error("no response head before the reset")
	}
	if code != http2.ErrCodeInternal {
		t.Errorf("RST_STREAM %v, want INTERNAL_ERROR (a write timeout)", code)
	}
	if reset < limit || reset > limit+testenv.Scale(3*time.Second) {
		t.Errorf("stream reset %v after the request, want within %v..%v", reset, limit, limit+testenv.Scale(3*time.Second))
	}
	if s1 != s0+1 {
		t.Errorf("pep_http_timeouts_total{phase=stream_write} %v -> %v, want one more", s0, s1)
	}
	if open != 0 {
		t.Errorf("%v connections to squid still open after the reset", open)
	}
	// The connection goes on: a PING is answered.
	if err := h.fr.WritePing(false, [8]byte{1}); err != nil {
		t.Fatal(err)
	}
	for {
		fr, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("connection after the reset: %v", err)
		}
		if pf, ok := fr.(*http2.PingFrame); ok && pf.IsAck() {
			break
		}
	}
}

// TestH2Priority: the VIP's HTTP/2 write scheduler (https.priority). Two
// responses wait for the connection's flow-control window at once: an
// image the client asked for first with the lowest weight, then a
// stylesheet it made the exclusive parent of the image with the highest
// weight (RFC 7540 §5.3, as Chromium marks a render-blocking stylesheet).
// With rfc7540 the stylesheet's bytes go first (the image gets what was
// already queued for it, under half the stylesheet's size); with
// round-robin the two streams share the connection's bytes, so the image
// gets about as much as the stylesheet while the stylesheet goes.
func TestH2Priority(t *testing.T) {
	const cssSize, imgSize = 256 << 10, 2 << 20
	for _, tc := range []struct {
		priority string
		css      bool // the stylesheet ends before the image has half its size
	}{{H2RFC7540, true}, {H2RoundRobin, false}} {
		t.Run(tc.priority, func(t *testing.T) {
			ns := startDNS(t, map[string]string{"prio.test": originIP})
			o := startOrigin(t, originIP, map[string]page{
				"prio.test/img.bin":   {ctype: "application/octet-stream", body: strings.Repeat("i", imgSize)},
				"prio.test/style.css": {ctype: "text/css", body: strings.Repeat("c", cssSize)},
			})
			sc := siteSquidConf(t, ns, map[string]string{"prio.test": originIP}, o.Addr.Port())
			sc.ProxyProtocol = true
			sq := startSquid(t, sc)
			p := startPepd(t, pepdOpts{squid: sq.Addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.URL,
				subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80, o.Addr.Port()},
				limits: Limits{H2Priority: tc.priority}, log: slog.New(slog.DiscardHandler)})
			f := startTLSFront(t, p)
			// Stream windows wide open; the connection's window stays at
			// its initial 65,535 bytes until both responses are queued.
			h := dialH2(t, f, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
			path := func(obj string) []byte { return h.headers("/prio.test:" + o.Port + "/" + obj) }
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: path("img.bin"), EndStream: true, EndHeaders: true,
				Priority: http2.PriorityParam{StreamDep: 0, Weight: 0}}); err != nil {
				t.Fatal(err)
			}
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: path("style.css"), EndStream: true, EndHeaders: true,
				Priority: http2.PriorityParam{StreamDep: 0, Exclusive: true, Weight: 255}}); err != nil {
				t.Fatal(err)
			}
			// Let both heads and the first window's bytes go out, and
			// both handlers block on the connection's window.
			got := map[uint32]int{}
			h.c.SetReadDeadline(time.Now().Add(testenv.Scale(15 * time.Second)))
			heads := 0
			for heads < 2 {
				fr, err := h.fr.ReadFrame()
				if err != nil {
					t.Fatalf("waiting for the heads: %v", err)
				}
				switch fr := fr.(type) {
				case *http2.HeadersFrame:
					heads++
				case *http2.DataFrame:
					got[fr.StreamID] += len(fr.Data())
				}
			}
			time.Sleep(testenv.Scale(500 * time.Millisecond))
			// A slow link: the connection's window opens 16 KB at a
			// time, a little after the last 16 KB were read, so that both
			// streams have bytes waiting whenever the window opens (on
			// loopback the socket would otherwise take every frame at once
			// and no scheduler would have a choice to make).
			var imgAtCSSEnd = -1
			read := got[1] + got[3] // read, not yet given back to the window
			imgBefore := got[1]
			for imgAtCSSEnd < 0 || got[1] < imgSize {
				if read >= 16<<10 {
					time.Sleep(2 * time.Millisecond)
					if err := h.fr.WriteWindowUpdate(0, uint32(read)); err != nil {
						t.Fatal(err)
					}
					read = 0
				}
				fr, err := h.fr.ReadFrame()
				if err != nil {
					t.Fatalf("after %d of the stylesheet's and %d of the image's bytes: %v", got[3], got[1], err)
				}
				if df, ok := fr.(*http2.DataFrame); ok {
					got[df.StreamID] += len(df.Data())
					read += len(df.Data())
					if df.StreamID == 3 && df.StreamEnded() {
						imgAtCSSEnd = got[1] - imgBefore
					}
				}
			}
			t.Logf("%s: the image got %d bytes (of %d; %d before the window opened) while the stylesheet's %d went", tc.priority, imgAtCSSEnd, imgSize, imgBefore, got[3])
			if got[3] != cssSize {
				t.Fatalf("stylesheet %d bytes, want %d", got[3], cssSize)
			}
			if first := imgAtCSSEnd < cssSize/2; first != tc.css {
				t.Errorf("%s: the image got %d bytes while the stylesheet's %d went: stylesheet first = %v, want %v", tc.priority, imgAtCSSEnd, cssSize, first, tc.css)
			}
		})
	}
}
