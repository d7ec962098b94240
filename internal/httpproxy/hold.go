package httpproxy

import (
	"crypto/tls"
	"errors"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"
)

// The surplus handshake hold (Limits.HoldSurplus, config
// https.hold_surplus; issue 27). A browser that does not yet know that the
// VIP speaks HTTP/2 opens a connection per request it has ready (Chromium:
// up to 6 per origin, 8-9 SYNs to the VIP on a small page), and once the
// first one's ALPN says h2 it sends every request over that one and
// closes the rest. By then each of them has cost its ClientHello up the
// radio link and pepd's ServerHello, certificate and signature (about 5
// kB with the hybrid key exchange) down it, and pepd a key exchange and a
// signature. So a ClientHello offering h2 that arrives while the same
// subscriber's first handshake with the same origin is in flight is held
// before pepd answers: until that handshake ends and holdGrace after it
// (the browser's close of its surplus sockets leaves with its Finished),
// or HoldSurplus at most. A held connection the subscriber closes
// meanwhile costs no answer; one it keeps is served as if it had just
// arrived. Measured before it was built (testbed/README.md, session 30):
// Chromium closed 31 of 40 held handshakes on 8 small pages, radio bytes
// per load 138 -> 127 kB.

// holdGrace is how long after the first handshake's end a held
// connection is still watched for the subscriber's close: the close and
// the first connection's Finished leave the phone together and cross the
// same uplink, so the close arrives within the Finished's own jitter.
const holdGrace = 40 * time.Millisecond

// holdKey is one origin of one subscriber: its source address, the
// ClientHello's SNI and the VIP address and port it dialled (conn.orig:
// the shards are distinct origins, each with its own first connection).
type holdKey struct {
	src  netip.Addr
	dst  netip.AddrPort
	name string
}

// handshakes are the first handshakes in flight, one per holdKey: a
// channel closed when it ends.
type handshakes struct {
	mu sync.Mutex
	m  map[holdKey]chan struct{}
}

// enter registers the handshake of k: the first in flight gets end (to
// call when its handshake ends, whatever the outcome) and a nil wait; a
// later one, while the first is in flight, gets the first's wait.
func (h *handshakes) enter(k holdKey) (end func(), wait <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ch, ok := h.m[k]; ok {
		return nil, ch
	}
	if h.m == nil {
		h.m = make(map[holdKey]chan struct{})
	}
	ch := make(chan struct{})
	h.m[k] = ch
	return func() {
		h.mu.Lock()
		delete(h.m, k)
		h.mu.Unlock()
		close(ch)
	}, nil
}

// errSurplusClosed ends the handshake of a held connection its subscriber
// closed (no byte is written to it).
var errSurplusClosed = errors.New("the subscriber closed a surplus handshake while it was held")

// holdConfig returns cfg with the hold in its GetConfigForClient (which
// Go's TLS server calls with the parsed ClientHello, before it writes a
// byte), or cfg itself when HoldSurplus is off. The wrapped copy is
// made once per cfg (the Terminator's, which stays the same).
func (s *Server) holdConfig(cfg *tls.Config) *tls.Config {
	if s.lim.HoldSurplus <= 0 {
		return cfg
	}
	if p := s.holdCfg.Load(); p != nil && p[0] == cfg {
		return p[1]
	}
	next := cfg.GetConfigForClient
	held := cfg.Clone()
	held.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		if rc, ok := hi.Conn.(*replayConn); ok && slices.Contains(hi.SupportedProtos, "h2") {
			end, wait := s.handshakes.enter(holdKey{src: rc.cc.src, dst: rc.cc.orig, name: hi.ServerName})
			rc.end = end
			if wait != nil {
				if err := s.holdSurplus(rc, wait); err != nil {
					return nil, err
				}
			}
		}
		if next != nil {
			return next(hi)
		}
		return nil, nil
	}
	s.holdCfg.Store(&[2]*tls.Config{cfg, held})
	return held
}

// holdSurplus holds rc's handshake until wait is closed and holdGrace
// more, or HoldSurplus at most, watching its socket: a close by the
// subscriber meanwhile closes rc and returns errSurplusClosed; bytes it
// sends (none are due before pepd's ServerHello) are kept for the
// handshake. The handshake's read deadline starts again after the hold.
func (s *Server) holdSurplus(rc *replayConn, wait <-chan struct{}) error {
	cc := &rc.cc.countConn
	t0 := time.Now()
	cc.SetReadDeadline(t0.Add(s.lim.HoldSurplus))
	type result struct {
		n   int
		err error
	}
	buf := make([]byte, 512)
	got := make(chan result, 1)
	go func() {
		n, err := cc.Read(buf)
		got <- result{n, err}
	}()
	var r result
	select {
	case r = <-got:
	case <-wait:
		cc.SetReadDeadline(time.Now().Add(holdGrace))
		r = <-got
	}
	cc.SetReadDeadline(time.Now().Add(s.lim.ReadHeaderTimeout))
	s.m.surplusHeld.Add(time.Since(t0).Seconds())
	if r.n == 0 && r.err != nil && !errors.Is(r.err, os.ErrDeadlineExceeded) {
		s.m.surplus.WithLabelValues("closed").Inc()
		rc.cc.Close()
		return errSurplusClosed
	}
	s.m.surplus.WithLabelValues("served").Inc()
	rc.buf = append(rc.buf, buf[:r.n]...)
	return nil
}
