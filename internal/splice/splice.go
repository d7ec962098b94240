// Package splice is the TLS side of pepd's dns mode (DESIGN.md "pepd":
// "TLS to VIP:443 is spliced to the origin by SNI, never decrypted").
//
// A browser that got the VIP for a name in a rewritten DNS answer also
// connects to it for https:// URLs. The Splicer accepts those connections,
// reads the ClientHello, resolves its SNI name through the carrier
// resolver (answers never rewritten), checks each address with the
// not-an-open-proxy guard on port 443, connects to the origin, replays the
// bytes read and copies both ways until both sides are done. TLS is never
// terminated: the origin's certificate reaches the browser untouched.
// Connections from outside the subscriber ranges, without SNI, or with a
// bad ClientHello are reset (SO_LINGER 0) and counted.
package splice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"pep/internal/guard"
)

// Resolver resolves a host name to IPv4 addresses through the carrier
// resolver; *dnsproxy.Upstream implements it.
type Resolver interface {
	LookupA(ctx context.Context, name string) ([]netip.Addr, error)
}

// Options configure a Splicer.
type Options struct {
	// Resolver resolves SNI names. Required.
	Resolver Resolver
	// Guard is the not-an-open-proxy policy; the Splicer uses
	// Guard.WithPorts(Port) for its dials. Required.
	Guard *guard.Policy
	// Port is the origin port. Zero means 443.
	Port uint16
	// HelloTimeout bounds the wait for the whole ClientHello. Zero means
	// 10s.
	HelloTimeout time.Duration
	// DialTimeout bounds resolving the name and connecting to the origin
	// (all addresses). Zero means 10s.
	DialTimeout time.Duration
	// Logger gets resets at debug level and errors. Nil discards.
	Logger *slog.Logger
	// Registerer gets the pep_splice_* metrics. Nil registers nothing.
	Registerer prometheus.Registerer
	// Terminator takes the connections whose ClientHello is for the VIP's
	// own HTTPS origin (internal/viptls); nil: every connection is spliced.
	Terminator Terminator
}

// Terminator is the VIP's own HTTPS origin (issue 25), which the Splicer
// asks about every well-formed ClientHello from a subscriber before it
// splices: the connection is routed once, at its first bytes.
type Terminator interface {
	// Wants reports whether a ClientHello with server name sni ("" when it
	// has none) sent to dst (the original destination) is for the VIP.
	Wants(sni string, dst netip.AddrPort) bool
	// Terminate takes over c, whose ClientHello hello was read from it;
	// it returns when it no longer needs the Splicer (it may keep serving
	// c in goroutines of its own).
	Terminate(c net.Conn, hello []byte)
}

// ErrServerClosed is returned by Serve and ListenAndServe when called
// after Shutdown.
var ErrServerClosed = errors.New("splice: server closed")

// Splicer accepts TLS connections and splices them to their SNI's origin.
type Splicer struct {
	res     Resolver
	guard   *guard.Policy
	port    uint16
	hello   time.Duration
	dialT   time.Duration
	log     *slog.Logger
	m       *metrics
	term    Terminator
	mu      sync.Mutex
	lns     map[net.Listener]struct{}
	conns   map[net.Conn]struct{}
	closing bool
	wg      sync.WaitGroup
}

// New returns a Splicer for o; it fails without a Resolver or Guard.
func New(o Options) (*Splicer, error) {
	if o.Resolver == nil {
		return nil, errors.New("splice: no resolver")
	}
	if o.Guard == nil {
		return nil, errors.New("splice: no guard policy")
	}
	if o.Port == 0 {
		o.Port = 443
	}
	if o.HelloTimeout <= 0 {
		o.HelloTimeout = 10 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Splicer{res: o.Resolver, guard: o.Guard.WithPorts(o.Port), port: o.Port,
		hello: o.HelloTimeout, dialT: o.DialTimeout, log: o.Logger, m: newMetrics(o.Registerer), term: o.Terminator,
		lns: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}}, nil
}

// ListenAndServe listens on addr (TCP "host:port") and serves until
// Shutdown; a listen error is returned at once.
func (s *Splicer) ListenAndServe(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("splice: %w", err)
	}
	return s.Serve(ln)
}

// Serve accepts connections on ln until Shutdown (then it returns nil) or
// an accept error that is not temporary. It closes ln. Called after
// Shutdown it returns ErrServerClosed.
func (s *Splicer) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) ||
				isTemporary(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("splice: %w", err)
		}
		backoff = 0
		if !s.track(c, true) {
			reset(c)
			s.m.resets.WithLabelValues(ResetShutdown).Inc()
			continue
		}
		go s.handle(c)
	}
}

// isTemporary reports accept errors worth retrying (EMFILE, ENFILE,
// ECONNABORTED ...).
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// track adds (add) or removes c from the open connections; it refuses to
// add while shutting down.
func (s *Splicer) track(c net.Conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.closing {
			return false
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.m.open.Inc()
		return true
	}
	if _, ok := s.conns[c]; ok {
		delete(s.conns, c)
		s.wg.Done()
		s.m.open.Dec()
	}
	return true
}

// Shutdown stops accepting, waits until ctx is done for spliced
// connections to finish, then closes the rest and returns ctx's error.
func (s *Splicer) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for ln := range s.lns {
		ln.Close()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	<-done
	return ctx.Err()
}

// reset closes c with SO_LINGER 0, so that the client gets a RST.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

func (s *Splicer) handle(c net.Conn) {
	defer s.track(c, false)
	src, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	fail := func(reason string, err error) {
		s.m.resets.WithLabelValues(reason).Inc()
		s.log.Debug("reset", "client", src.String(), "reason", reason, "err", err)
		reset(c)
	}
	if !s.guard.ClientAllowed(src.Addr()) {
		fail(ResetNotSubscriber, nil)
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(s.hello))
	raw, sni, err := ReadClientHello(c)
	if s.term != nil && (err == nil || errors.Is(err, ErrNoSNI)) && s.term.Wants(sni, originalDst(c)) {
		_ = c.SetReadDeadline(time.Time{})
		s.m.terminated.Inc()
		s.log.Debug("terminate", "client", src.String(), "sni", sni)
		s.term.Terminate(c, raw)
		return
	}
	if err != nil {
		switch {
		case errors.Is(err, ErrNoSNI):
			fail(ResetNoSNI, err)
		case errors.Is(err, ErrBadSNI):
			fail(ResetBadSNI, err)
		case errors.Is(err, os.ErrDeadlineExceeded):
			fail(ResetTimeout, err)
		case errors.Is(err, ErrBadHello):
			fail(ResetBadHello, err)
		default: // the client went away (EOF, reset) before a whole hello
			fail(ResetBadHello, err)
		}
		return
	}
	_ = c.SetReadDeadline(time.Time{})

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.dialT)
	defer cancel()
	addrs, err := s.res.LookupA(ctx, sni)
	if err != nil {
		fail(ResetResolve, err)
		return
	}
	var origin net.Conn
	var lastErr error
	allDenied := true
	d := net.Dialer{Control: s.guard.Control}
	for _, a := range addrs {
		target := netip.AddrPortFrom(a, s.port)
		if err := s.guard.CheckTarget(target); err != nil {
			lastErr = err
			continue
		}
		allDenied = false
		origin, lastErr = d.DialContext(ctx, "tcp", net.JoinHostPort(a.String(), strconv.Itoa(int(s.port))))
		if lastErr == nil {
			break
		}
	}
	if origin == nil {
		if allDenied {
			fail(ResetDenied, lastErr)
		} else {
			fail(ResetDial, lastErr)
		}
		return
	}
	s.m.dial.Observe(time.Since(start).Seconds())
	s.m.splices.Inc()
	s.log.Debug("splice", "client", src.String(), "sni", sni, "origin", origin.RemoteAddr().String())
	s.splice(c, origin, raw)
}

// originalDst is where c was sent before nftables steered it (an
// intercept.Conn), else its local address.
func originalDst(c net.Conn) netip.AddrPort {
	if od, ok := c.(interface {
		OriginalDst() (netip.AddrPort, bool)
	}); ok {
		a, _ := od.OriginalDst()
		return a
	}
	a, _ := netip.ParseAddrPort(c.LocalAddr().String())
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// splice replays hello to origin and copies both ways; each direction's
// end is passed on as a half close, and both connections are closed when
// both directions are done.
func (s *Splicer) splice(client, origin net.Conn, hello []byte) {
	defer origin.Close()
	defer client.Close()
	s.mu.Lock()
	closing := s.closing
	if !closing {
		s.conns[origin] = struct{}{} // so that Shutdown closes it too
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, origin)
		s.mu.Unlock()
	}()
	n, err := origin.Write(hello)
	s.m.bytes.WithLabelValues("up").Add(float64(n))
	if err != nil {
		reset(client)
		return
	}
	// A direction that ends with an error (a reset, Shutdown) aborts both;
	// one that ends with EOF is passed on as a half close.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		n, err := io.Copy(origin, client)
		s.m.bytes.WithLabelValues("up").Add(float64(n))
		s.end(origin, client, err)
	}()
	n64, err := io.Copy(client, origin)
	s.m.bytes.WithLabelValues("down").Add(float64(n64))
	s.end(client, origin, err)
	wg.Wait()
}

// end finishes the copy into dst from src: on EOF (err nil) it half-closes
// dst; on an error it closes both.
func (s *Splicer) end(dst, src net.Conn, err error) {
	if err != nil {
		dst.Close()
		src.Close()
		return
	}
	closeWrite(dst)
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		return
	}
	c.Close()
}
