package httpproxy

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"
	"golang.org/x/sys/unix"

	"pep/internal/config/field"
)

// Limits are the subscriber-facing limits of a Server (config section
// "http").
type Limits struct {
	// MaxHeaderBytes bounds a request's header block; more gets 431. Go's
	// server allows 4096 bytes of slack over it. Zero means 32 KiB.
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds the time to read a request's headers
	// (slowloris); the connection is closed without an answer. Zero means
	// 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a kept-alive connection idle this long. Zero
	// means 120s.
	IdleTimeout time.Duration
	// MaxConns bounds concurrent subscriber connections over all of the
	// Server's listeners; more wait in the kernel's accept queue. Zero
	// means 10000.
	MaxConns int
	// WriteTimeout bounds each write to a subscriber: a subscriber that
	// stops reading for this long is closed (issue 12, D1). Squid's
	// write_timeout and HAProxy's "timeout client" play this part. Zero
	// means 30s: on the slowest radio profile (EDGE, about 200 kbit/s
	// down) the relay's largest write, 32 KiB, takes under 2 s to drain
	// once the socket buffer is full, so 30 s is idleness, not slowness.
	WriteTimeout time.Duration
	// MaxConnsPerSubscriber bounds the concurrent connections of one
	// source address, so that one subscriber cannot take the whole
	// MaxConns pool (D1: 50 non-reading connections from one address kept
	// others waiting). More are closed at accept, counted and logged once.
	// Zero means 1024; negative means no bound. Not 256, Chromium's socket
	// limit per profile: pepd counts a connection until the subscriber's
	// close has crossed the radio link and been read, so one browser at its
	// limit is seen above it (the testbed's tp5n campaign, off and dns
	// modes, 100 pages: 36 to 84 of about 1,950 connections per testbed
	// closed at accept with 256, one page load failed with
	// ERR_EMPTY_RESPONSE), and a phone has more than one browser.
	MaxConnsPerSubscriber int
	// Radio are socket options for every accepted subscriber connection
	// (issue 11, "a short radio queue"); the zero value sets none.
	Radio RadioOptions
	// MaxStreams bounds the concurrent HTTP/2 streams of one TLS
	// connection to the VIP (ServeTLS; SETTINGS_MAX_CONCURRENT_STREAMS,
	// RFC 9113 §6.5.2). Zero means 100.
	MaxStreams int
	// MaxStreamsPerSubscriber bounds the concurrent requests over TLS of
	// one source address, all its connections together; more are answered
	// 429 "too many concurrent requests". Zero means 512.
	MaxStreamsPerSubscriber int
	// H2Priority is the HTTP/2 write scheduler of ServeTLS's connections:
	// H2RoundRobin ("" too) or H2RFC7540 (config https.priority).
	H2Priority string
	// HoldSurplus bounds how long ServeTLS holds the answer to a
	// ClientHello offering h2 while the same subscriber's first handshake
	// with the same origin is in flight (hold.go: the surplus connections
	// a browser closes once it has HTTP/2). Zero or negative: no hold.
	HoldSurplus time.Duration
}

// The HTTP/2 write schedulers of Limits.H2Priority.
const (
	// H2RoundRobin gives every ready stream its turn (Go's default).
	H2RoundRobin = "round-robin"
	// H2RFC7540 follows the client's stream dependencies and weights
	// (RFC 7540 §5.3), golang.org/x/net/http2.NewPriorityWriteScheduler.
	H2RFC7540 = "rfc7540"
)

// RadioOptions are TCP socket options of subscriber-facing connections,
// set at accept; they are pepd's "radio" section (zero: the default). Each is kept only where the testbed
// measured it to lower PLT or LCP (internal/httpproxy/README.md, "Radio
// queue"); the zero value leaves the namespace's defaults.
type RadioOptions struct {
	// Congestion is TCP_CONGESTION (tcp(7)), e.g. "bbr" or "cubic"; it
	// must be in net.ipv4.tcp_allowed_congestion_control. "" keeps the
	// namespace's default (net.ipv4.tcp_congestion_control).
	Congestion string `yaml:"congestion"`
	// NotsentLowat is TCP_NOTSENT_LOWAT in bytes: at most this much
	// unsent data waits in the socket, so pepd's writes block instead of
	// queueing behind the radio link. 0: the system's.
	NotsentLowat field.ByteSize `yaml:"notsent_lowat"`
	// MaxPacingRate is SO_MAX_PACING_RATE in bytes per second (socket(7);
	// TCP paces internally without the fq qdisc). 0: none.
	MaxPacingRate field.ByteSize `yaml:"max_pacing_rate"`
}

// apply sets o's options on c (a *net.TCPConn); the first error is
// returned, the others are still tried.
func (o RadioOptions) apply(c net.Conn) error {
	if o == (RadioOptions{}) {
		return nil
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var first error
	keep := func(err error, what string) {
		if err != nil && first == nil {
			first = fmt.Errorf("httpproxy: radio %s: %w", what, err)
		}
	}
	cerr := rc.Control(func(fd uintptr) {
		if o.Congestion != "" {
			keep(unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, o.Congestion), "congestion "+o.Congestion)
		}
		if o.NotsentLowat > 0 {
			keep(unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, int(o.NotsentLowat)), "notsent_lowat")
		}
		if o.MaxPacingRate > 0 {
			keep(unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE, int(o.MaxPacingRate)), "max_pacing_rate")
		}
	})
	if cerr != nil {
		return cerr
	}
	return first
}

// Server serves a Proxy on one or more listeners (intercept.Listener for
// REDIRECT/TPROXY with original destinations, or any net.Listener for
// direct connections), with Limits. Build it with NewServer.
//
// Each connection is served by the relay (relay.go), pepd's HTTP/1.1 fast
// path for GET and HEAD requests to Squid; a connection with a request the
// relay does not serve is handed over, with what it had read, to the
// standard library's http.Server running Proxy.ServeHTTP.
type Server struct {
	srv *http.Server
	// handshakes are the first TLS handshakes in flight per subscriber
	// and origin, holdCfg the TLS configuration with the hold and the
	// one it wraps (hold.go).
	handshakes handshakes
	holdCfg    atomic.Pointer[[2]*tls.Config]
	p          *Proxy
	lim        Limits
	m          *Metrics
	sem        chan struct{}
	// perSub counts open connections per subscriber address
	// (Limits.MaxConnsPerSubscriber).
	perSub subscriberConns
	done   chan struct{}
	once   sync.Once
	log    *slog.Logger
	// radioWarned: a radio socket option failed once (logged once).
	radioWarned atomic.Bool
	// perSubWarned: a connection was closed at accept by the
	// per-subscriber limit (logged once; every one is counted).
	perSubWarned atomic.Bool

	relayOff bool // tests and benchmarks: serve every connection with net/http
	hl       *handoffListener
	hlOnce   sync.Once
	// tlsSrv serves the connections ServeTLS takes (HTTP/2 and HTTP/1.1
	// over TLS), with the same Proxy.ServeHTTP as srv; fed by tlsHL.
	tlsSrv    *http.Server
	tlsHL     *handoffListener
	tlsOnce   sync.Once
	streams   subscriberConns // requests in flight over TLS per subscriber
	mu        sync.Mutex
	relayed   map[*conn]struct{}    // connections the relay serves now
	listeners map[net.Listener]bool // being served by Serve
	// unbatched serves new TLS connections without batchConn: the
	// benchmark's peer phase (BenchmarkH2CPU h2-c1m8-unbatched).
	unbatched atomic.Bool
}

// NewServer returns a Server for p. m may be nil (not counted).
func NewServer(p *Proxy, lim Limits, log *slog.Logger, m *Metrics) *Server {
	d, ds := DefaultConfig(), DefaultHTTPS()
	lim.MaxHeaderBytes = cmp.Or(lim.MaxHeaderBytes, int(d.MaxHeaderBytes))
	lim.ReadHeaderTimeout = cmp.Or(lim.ReadHeaderTimeout, d.ReadHeaderTimeout)
	lim.IdleTimeout = cmp.Or(lim.IdleTimeout, d.IdleTimeout)
	lim.WriteTimeout = cmp.Or(lim.WriteTimeout, d.WriteTimeout)
	lim.MaxConnsPerSubscriber = cmp.Or(lim.MaxConnsPerSubscriber, d.MaxConnsPerSubscriber)
	lim.MaxConns = cmp.Or(lim.MaxConns, d.MaxConns)
	lim.MaxStreams = cmp.Or(lim.MaxStreams, ds.MaxStreams)
	lim.MaxStreamsPerSubscriber = cmp.Or(lim.MaxStreamsPerSubscriber, ds.MaxStreamsPerSubscriber)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = p.m
	}
	s := &Server{p: p, lim: lim, m: m, sem: make(chan struct{}, lim.MaxConns), done: make(chan struct{}), log: log.With("component", "httpproxy"),
		hl: newHandoffListener(), tlsHL: newHandoffListener(), relayed: make(map[*conn]struct{}), listeners: make(map[net.Listener]bool)}
	connContext := func(ctx context.Context, c net.Conn) context.Context {
		if cc := baseConn(c); cc != nil {
			return context.WithValue(ctx, connCtxKey{}, cc)
		}
		return ctx
	}
	connState := func(c net.Conn, st http.ConnState) {
		if cc := baseConn(c); cc != nil && st == http.StateIdle {
			cc.active.Store(false)
			cc.idle.Store(true)
		}
	}
	// newHTTPServer is the one http.Server shape of both listeners (plain
	// and TLS): the same limits, logging and connection tracking.
	newHTTPServer := func(h http.Handler) *http.Server {
		return &http.Server{
			Handler:                      h,
			ReadHeaderTimeout:            lim.ReadHeaderTimeout,
			IdleTimeout:                  lim.IdleTimeout,
			MaxHeaderBytes:               lim.MaxHeaderBytes,
			DisableGeneralOptionsHandler: true,
			ErrorLog:                     slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
			ConnContext:                  connContext,
			ConnState:                    connState,
		}
	}
	s.srv = newHTTPServer(p)
	s.tlsSrv = newHTTPServer(http.HandlerFunc(s.serveTLSRequest))
	// No HTTP2Config.WriteByteTimeout: conn.Write arms the write deadline
	// (WriteTimeout) under the TLS connection as for every subscriber
	// connection, so a reader that takes no byte for that long is closed
	// (the slow reader); Go's would set and clear a deadline around every
	// flush (two timer updates per frame batch).
	// MaxReadFrameSize: the protocol's initial SETTINGS_MAX_FRAME_SIZE
	// (16,384 bytes, RFC 9113 §6.5.2) rather than Go's 1 MiB, so that a
	// frame over it is the FRAME_SIZE_ERROR connection error of §4.2 (h2spec
	// 4.2/3); browsers send no larger frames.
	s.tlsSrv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: lim.MaxStreams, MaxReadFrameSize: 16 << 10}
	if lim.H2Priority == H2RFC7540 {
		// net/http's own HTTP/2 server has no scheduler setting: x/net's
		// server (the same code, exported) takes the connections instead.
		if err := http2.ConfigureServer(s.tlsSrv, &http2.Server{
			NewWriteScheduler: func() http2.WriteScheduler { return http2.NewPriorityWriteScheduler(nil) },
		}); err != nil {
			// Only a TLSConfig with a bad cipher suite list fails, and
			// tlsSrv has no TLSConfig (ServeTLS takes TLS connections).
			panic("httpproxy: http2.ConfigureServer: " + err.Error())
		}
	}
	return s
}

// baseConn returns the subscriber connection under c, nil if c is not one.
func baseConn(c net.Conn) *conn {
	switch c := c.(type) {
	case *conn:
		return c
	case *handoffConn:
		return c.conn
	case *tls.Conn:
		return baseConn(c.NetConn())
	case *replayConn:
		return baseConn(c.Conn)
	case *batchConn:
		return baseConn(c.Conn)
	}
	return nil
}

// ServeTLS serves c, a TLS connection to the VIP's own HTTPS origin that
// the SNI splice handed over (issue 25; viptls.Terminator.Serve): hello
// is its ClientHello, already read, cfg the VIP's TLS configuration. The
// connection counts against MaxConns (closed at once when they are all
// taken) and MaxConnsPerSubscriber like any other; its requests, HTTP/2
// (ALPN h2) or HTTP/1.1, go to the same Proxy.ServeHTTP as the standard
// library path's, so that they are decided, sent to Squid, adjusted and
// marked as every other request (one request path), bounded by
// MaxStreams per connection and MaxStreamsPerSubscriber. The handshake
// must end within ReadHeaderTimeout (a timeout is counted as
// pep_http_timeouts_total{phase="tls_handshake"}). It returns at once; c
// is served until it closes or Shutdown.
func (s *Server) ServeTLS(c net.Conn, hello []byte, cfg *tls.Config) {
	if s.closing() {
		c.Close()
		return
	}
	select {
	case s.sem <- struct{}{}:
	default:
		s.m.limitWaits.Inc()
		s.m.refused.WithLabelValues("connection limit").Inc()
		c.Close()
		return
	}
	cc, ok := s.newConn(c)
	if !ok {
		<-s.sem
		return
	}
	s.tlsOnce.Do(func() { go s.tlsSrv.Serve(s.tlsHL) })
	var under net.Conn = newBatchConn(cc)
	if s.unbatched.Load() {
		under = cc
	}
	rc := &replayConn{Conn: under, buf: hello, cc: cc}
	tc := tls.Server(rc, s.holdConfig(cfg))
	// The handshake is made here, within ReadHeaderTimeout (what
	// http.Server would allow it), so that a subscriber that stalls it is
	// told from a slowloris of HTTP: its timeout is counted as
	// tls_handshake (conn.Read), not read_header.
	cc.handshaking.Store(true)
	go func() {
		tc.SetReadDeadline(time.Now().Add(s.lim.ReadHeaderTimeout))
		err := tc.Handshake()
		if rc.end != nil {
			rc.end() // the handshakes held behind this one go on
		}
		if err != nil {
			s.log.Debug("TLS handshake failed", "src", cc.src, "err", err)
			tc.Close()
			return
		}
		// The read deadline goes; the write deadline is conn.Write's
		// (WriteTimeout, armed by the handshake's own writes).
		tc.SetReadDeadline(time.Time{})
		cc.handshaking.Store(false)
		select {
		case s.tlsHL.ch <- tc:
		case <-s.tlsHL.closed:
			tc.Close()
		}
	}()
}

// serveTLSRequest is the TLS server's handler: Proxy.ServeHTTP within the
// per-subscriber bound on requests in flight.
func (s *Server) serveTLSRequest(w http.ResponseWriter, r *http.Request) {
	src := netip.Addr{}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		src = ap.Addr().Unmap()
	}
	if !s.streams.take(src, s.lim.MaxStreamsPerSubscriber) {
		s.m.refused.WithLabelValues("per-subscriber stream limit").Inc()
		httpError(w, http.StatusTooManyRequests, "too many concurrent requests")
		return
	}
	defer s.streams.release(src)
	if r.ProtoMajor != 2 || s.lim.WriteTimeout < 0 {
		s.p.ServeHTTP(w, r)
		return
	}
	sw := &stallWriter{ResponseWriter: w, rc: http.NewResponseController(w), limit: s.lim.WriteTimeout, m: s.m}
	sw.mu.Lock()
	sw.t = time.AfterFunc(sw.limit, sw.check)
	sw.mu.Unlock()
	defer sw.finish()
	s.p.ServeHTTP(sw, r)
}

// stallWriter bounds the time one write of an HTTP/2 response may block
// (the stalled flow-control window): a client that opens a stream and
// never sends WINDOW_UPDATE leaves the handler's Write waiting for window
// with the response's Squid connection and buffers held, while the
// connection itself stays busy with other streams or idle, so neither the
// connection's write deadline (conn.Write) nor its idle timeout ends it.
// A write blocked for Limits.WriteTimeout resets the stream (Go's server:
// RST_STREAM INTERNAL_ERROR, the same as its own stream write deadline),
// the Write returns an error, httputil.ReverseProxy stops, and the Squid
// connection is closed (its body was not read to the end); counted in
// pep_http_timeouts_total{phase="stream_write"}. One timer per request,
// started with it and checked when it fires (no per-write deadline: Go's
// SetWriteDeadline on a stream is a message to the connection's serve
// loop).
type stallWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	limit time.Duration
	m     *Metrics
	since atomic.Int64 // when the Write in progress began (UnixNano); 0: none

	mu    sync.Mutex  // check against finish
	t     *time.Timer // nil once finished
	reset bool
}

// finish stops the timer before the handler returns: Go's server frees
// the stream's writer after that, and a check must not touch it then.
func (w *stallWriter) finish() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Stop()
	w.t = nil
}

func (w *stallWriter) Write(b []byte) (int, error) {
	w.since.Store(time.Now().UnixNano())
	n, err := w.ResponseWriter.Write(b)
	w.since.Store(0)
	return n, err
}

// check runs on the timer: it resets the stream if a Write has waited for
// the limit, or arms the timer for when the one in progress would reach
// it.
func (w *stallWriter) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.t == nil || w.reset {
		return
	}
	next := w.limit
	if s := w.since.Load(); s != 0 {
		waited := time.Since(time.Unix(0, s))
		if waited >= w.limit {
			w.reset = true
			w.m.timeouts.WithLabelValues("stream_write").Inc()
			w.rc.SetWriteDeadline(aLongTimeAgo) // resets the stream at once
			return
		}
		next = w.limit - waited
	}
	w.t.Reset(next)
}

// FlushError flushes (http.ResponseController); a flush waits for window
// as a Write does.
func (w *stallWriter) FlushError() error {
	w.since.Store(time.Now().UnixNano())
	err := w.rc.Flush()
	w.since.Store(0)
	return err
}

func (w *stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// replayConn reads buf (a ClientHello the splice read) before the
// connection's own bytes.
type replayConn struct {
	net.Conn
	buf []byte
	// cc is the subscriber connection under Conn (ServeTLS), end the
	// end of its handshake's turn as its origin's first (holdConfig).
	cc  *conn
	end func()
}

func (r *replayConn) Read(p []byte) (int, error) {
	if len(r.buf) > 0 {
		n := copy(p, r.buf)
		r.buf = r.buf[n:]
		return n, nil
	}
	return r.Conn.Read(p)
}

// Serve accepts connections on l until Shutdown; it returns
// http.ErrServerClosed after Shutdown.
func (s *Server) Serve(l net.Listener) error {
	ll := &listener{Listener: l, s: s}
	if s.relayOff {
		return s.srv.Serve(ll)
	}
	s.hlOnce.Do(func() { go s.srv.Serve(s.hl) })
	s.mu.Lock()
	if s.closing() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.listeners[l] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		c, err := ll.Accept()
		if err != nil {
			if s.closing() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
				errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) {
				// as http.Server: back off on temporary accept errors
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "delay", delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		cc := c.(*conn)
		cc.waiting.Store(true)
		s.mu.Lock()
		s.relayed[cc] = struct{}{}
		s.mu.Unlock()
		go s.serveRelay(cc)
	}
}

// closing reports whether Shutdown has begun.
func (s *Server) closing() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// untrack forgets a connection the relay no longer serves.
func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.relayed, c)
	s.mu.Unlock()
}

// handOver gives c to the standard library server; false (and c closed)
// if that server has shut down.
func (s *Server) handOver(c *handoffConn) bool {
	select {
	case s.hl.ch <- c:
		return true
	case <-s.hl.closed:
		c.Close()
		return false
	}
}

// Shutdown stops accepting, lets requests in flight finish until ctx ends,
// then closes the connections (as http.Server.Shutdown does, for the
// relay's connections and the standard library's).
func (s *Server) Shutdown(ctx context.Context) error {
	s.once.Do(func() { close(s.done) })
	s.mu.Lock()
	for l := range s.listeners {
		l.Close()
	}
	s.mu.Unlock()
	// Connections waiting for a request are closed; the others close
	// after their response (serveRelay checks closing).
	poll := time.Millisecond
	for {
		s.mu.Lock()
		n := len(s.relayed)
		for c := range s.relayed {
			if c.waiting.Load() {
				c.Close()
			}
		}
		s.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			s.mu.Lock()
			for c := range s.relayed {
				c.Close()
			}
			s.mu.Unlock()
			s.srv.Close()
			s.tlsSrv.Close()
			return ctx.Err()
		case <-time.After(poll):
			poll = min(2*poll, 100*time.Millisecond)
		}
	}
	// http.Server.Shutdown leaves its active connections open when ctx
	// ends first: close them (the deadline force-closes, as for the
	// relay's).
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	s.hl.Close()
	s.tlsHL.Close()
	if e := s.tlsSrv.Shutdown(ctx); err == nil {
		err = e
	}
	return err
}

// Check sends GET HealthPath to addr (a listener's address; an unspecified
// host means loopback) and returns nil if the answer is 200 within ctx. It
// proves that the listener accepts and the handler answers: pepd gates its
// systemd watchdog pings on it.
func Check(ctx context.Context, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("httpproxy: health check: %w", err)
	}
	if a, err := netip.ParseAddr(host); host == "" || err == nil && a.IsUnspecified() {
		host = "127.0.0.1"
		if err == nil && a.Is6() && !a.Is4In6() {
			host = "::1"
		}
	}
	d := net.Dialer{}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, port))
	if err != nil {
		return fmt.Errorf("httpproxy: health check: %w", err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("GET " + HealthPath + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")); err != nil {
		return fmt.Errorf("httpproxy: health check: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return fmt.Errorf("httpproxy: health check: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("httpproxy: health check: status %q", resp.Status)
	}
	return nil
}

// listener bounds concurrent connections (a semaphore released when a
// connection closes, as golang.org/x/net/netutil.LimitListener does; that
// one hides the accepted connection's type, which carries the original
// destination) and wraps each connection for metrics.
type listener struct {
	net.Listener
	s *Server
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case l.s.sem <- struct{}{}:
	default:
		l.s.m.limitWaits.Inc()
		select {
		case l.s.sem <- struct{}{}:
		case <-l.s.done:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.s.sem
		return nil, err
	}
	cc, ok := l.s.newConn(c)
	if !ok {
		<-l.s.sem
		return l.Accept()
	}
	return cc, nil
}

// newConn wraps an accepted connection: the per-subscriber bound (false:
// c closed, counted, logged once), metrics, the original destination,
// radio socket options, byte counts and raw system calls. The caller holds
// a place in s.sem, which the connection's Close gives back.
func (s *Server) newConn(c net.Conn) (*conn, bool) {
	src := remoteAddr(c)
	if !s.perSub.take(src, s.lim.MaxConnsPerSubscriber) {
		c.Close()
		s.m.refused.WithLabelValues("per-subscriber connection limit").Inc()
		if s.perSubWarned.CompareAndSwap(false, true) {
			s.log.Warn("subscriber connection closed at accept: per-subscriber limit reached (logged once; counted in pep_http_refused_total)",
				"subscriber", src, "limit", s.lim.MaxConnsPerSubscriber, "key", "http.max_conns_per_subscriber")
		}
		return nil, false
	}
	s.m.conns.Inc()
	s.m.openConns.Inc()
	cc := &conn{s: s, src: src}
	if od, ok := c.(interface {
		OriginalDst() (netip.AddrPort, bool)
	}); ok {
		cc.orig, cc.intercepted = od.OriginalDst()
	} else if ap, err := netip.ParseAddrPort(c.LocalAddr().String()); err == nil {
		cc.orig = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	nc := c
	if u, ok := c.(interface{ NetConn() net.Conn }); ok {
		nc = u.NetConn() // the original destination is read: the TCP connection itself from here on
	}
	if err := s.lim.Radio.apply(nc); err != nil && s.radioWarned.CompareAndSwap(false, true) {
		s.log.Warn("radio socket options not applied (logged once)", "err", err)
	}
	cc.countConn = countConn{Conn: newRawConn(nc), in: s.m.clientIn, out: s.m.clientOut}
	return cc, true
}

// conn is a subscriber connection.
type conn struct {
	countConn
	s           *Server
	orig        netip.AddrPort
	intercepted bool
	active      atomic.Bool // a request of this connection reached the handler and is not finished
	idle        atomic.Bool // waiting for the next request, no byte of it read yet
	waiting     atomic.Bool // relay: waiting for a request, no byte of it read yet (Shutdown closes it)
	handshaking atomic.Bool // ServeTLS: in its TLS handshake
	closed      atomic.Bool
	src         netip.Addr   // the subscriber's address (per-subscriber bound)
	rateAt      atomic.Int64 // unix ns of the last link-rate sample (appendLinkRate)
	wdlAt       time.Time    // when the write deadline was last armed
	timedOut    atomic.Bool  // counted once
	// abortRead: the read deadline was set in the distant past, as
	// net/http's server does to stop its background read after a handler
	// (abortPendingRead): the read it ends is not a timeout.
	abortRead atomic.Bool
	// closeNext: the next request handed to the standard library came
	// with both Content-Length and Transfer-Encoding; its response closes
	// the connection (RFC 9112 §6.1). Go's server drops the Content-Length
	// before the handler could see it, so the relay, which read the raw
	// head, sets this when it hands the connection over (the requests
	// after it, and heads over the relay's buffer: ambiguousFraming).
	closeNext atomic.Bool
}

func (c *conn) originalDst() (netip.AddrPort, bool) { return c.orig, c.intercepted }
func (c *conn) setActive()                          { c.active.Store(true) }
func (c *conn) takeCloseNext() bool                 { return c.closeNext.Swap(false) }

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.countConn.Read(b)
	if n > 0 {
		c.idle.Store(false)
		c.waiting.Store(false)
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && !c.abortRead.Load() && c.timedOut.CompareAndSwap(false, true) {
		phase := "read_header"
		if c.idle.Load() {
			phase = "idle"
		}
		if c.handshaking.Load() {
			phase = "tls_handshake"
		}
		c.s.m.timeouts.WithLabelValues(phase).Inc()
	}
	return n, err
}

// SetReadDeadline notes a deadline in the distant past (abortRead).
func (c *conn) SetReadDeadline(t time.Time) error {
	c.abortRead.Store(!t.IsZero() && t.Unix() < 1e9)
	return c.countConn.SetReadDeadline(t)
}

// Write counts the error answers Go's server writes on its own (400, 431,
// 501) when no request of the connection is in the handler.
func (c *conn) Write(b []byte) (int, error) {
	if !c.active.Load() && len(b) >= 12 && string(b[:9]) == "HTTP/1.1 " {
		if code, err := strconv.Atoi(string(b[9:12])); err == nil && code >= 400 {
			c.s.m.badRequests.WithLabelValues(string(b[9:12])).Inc()
		}
	}
	// A write deadline per write (D1): a subscriber that stops reading is
	// closed after WriteTimeout. Re-armed only when older than 1/64 of the
	// timeout (a timer update per write costs; see setDeadline).
	if wt := c.s.lim.WriteTimeout; wt > 0 {
		if now := time.Now(); now.Sub(c.wdlAt) >= wt/64 {
			c.SetWriteDeadline(now.Add(wt))
			c.wdlAt = now
		}
	}
	n, err := c.countConn.Write(b)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		c.s.m.timeouts.WithLabelValues("write").Inc()
	}
	return n, err
}

// CloseWrite shuts down the writing side (a FIN). net/http's server does
// it before it closes a connection with input left unread (after a 431,
// or a request body it did not read: its closeWriteAndWait), so that the
// subscriber reads the answer and its end rather than a reset that can
// discard it; without this method on the wrapper it was skipped.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *conn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		// What the connection delivered last is a sample of the
		// subscriber's link for its next loads (a page's document
		// connection carries no request after the document).
		c.s.p.links.sample(c.src, c.countConn.Conn)
		c.s.m.openConns.Dec()
		c.s.perSub.release(c.src)
		<-c.s.sem
	}
	return c.Conn.Close()
}

// countConn counts bytes each way.
type countConn struct {
	net.Conn
	in, out prometheus.Counter
}

func (c *countConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.in.Add(float64(n))
	}
	return n, err
}

func (c *countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.out.Add(float64(n))
	}
	return n, err
}

// remoteAddr is a connection's source address, unmapped; invalid if it
// cannot be read.
func remoteAddr(c net.Conn) netip.Addr {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// subscriberConns counts open connections per source address.
type subscriberConns struct {
	mu sync.Mutex
	n  map[netip.Addr]int
}

// take counts a new connection of src; false (not counted) when src has
// max already (max < 0: no bound).
func (s *subscriberConns) take(src netip.Addr, max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[netip.Addr]int{}
	}
	if max >= 0 && s.n[src] >= max {
		return false
	}
	s.n[src]++
	return true
}

func (s *subscriberConns) release(src netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[src]--; s.n[src] <= 0 {
		delete(s.n, src)
	}
}
