package dnsproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrBusy is returned by Exchange when max_inflight queries are already
// waiting for the carrier resolvers.
var ErrBusy = errors.New("dnsproxy: too many upstream queries in flight")

// Upstream asks the carrier resolvers (DESIGN.md "Carrier resolver"). Every
// query goes out with a fresh random ID, over UDP from a socket whose
// random source port changes every socketUses queries (mux.go), only an
// answer with that ID and the same question is taken (RFC 5452 §9.1), and
// queries in flight are bounded. Safe for concurrent use.
type Upstream struct {
	servers  []string // host:port
	timeout  time.Duration
	attempts int
	sem      chan struct{}
	log      *slog.Logger
	m        *metrics
	dialer   net.Dialer
	mux      udpMux

	udpLatency prometheus.Observer
	timeouts   prometheus.Counter
	netErrors  prometheus.Counter
}

// UpstreamOptions configure an Upstream.
type UpstreamOptions struct {
	// Resolvers are host:port addresses, tried in turn, one per attempt.
	Resolvers []string
	// Timeout bounds one attempt (one resolver, UDP plus TCP if the UDP
	// answer was truncated). Zero means 2s.
	Timeout time.Duration
	// Attempts is the number of attempts over all resolvers. Zero means 3.
	Attempts int
	// MaxInflight bounds the queries waiting for an answer; a query that
	// cannot get a slot within Timeout fails with ErrBusy. Zero means 1024.
	MaxInflight int
	// Logger gets malformed answers and network errors at debug level.
	// Nil discards.
	Logger *slog.Logger
}

// NewUpstream returns an Upstream; it fails if no resolver is given or a
// resolver is not host:port.
func NewUpstream(o UpstreamOptions, m *metrics) (*Upstream, error) {
	if len(o.Resolvers) == 0 {
		return nil, errors.New("dnsproxy: no resolver")
	}
	for _, r := range o.Resolvers {
		if _, _, err := net.SplitHostPort(r); err != nil {
			return nil, fmt.Errorf("dnsproxy: resolver %q: %w", r, err)
		}
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Attempts <= 0 {
		o.Attempts = 3
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = 1024
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = newMetrics(nil)
	}
	u := &Upstream{servers: o.Resolvers, timeout: o.Timeout, attempts: o.Attempts,
		sem: make(chan struct{}, o.MaxInflight), log: o.Logger, m: m,
		udpLatency: m.upstream.WithLabelValues("udp"),
		timeouts:   m.upErrors.WithLabelValues("timeout"), netErrors: m.upErrors.WithLabelValues("network")}
	u.mux = udpMux{u: u, cur: map[string]*udpSocket{}}
	return u, nil
}

// Exchange sends the wire query (one question; its ID is replaced) to
// the resolvers and returns the matching answer in a new slice, with the
// ID the query was sent with (the caller puts its client's ID back). Over
// UDP a truncated answer is asked again over TCP from the same resolver;
// overTCP asks over TCP from the start. An answer with another ID or
// question, or one whose records do not frame, is counted and skipped
// while the wait for the real one goes on. After Attempts attempts the
// last error is returned.
func (u *Upstream) Exchange(ctx context.Context, query []byte, overTCP bool) ([]byte, error) {
	qend, err := questionEnd(query)
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(u.timeout)
	select {
	case u.sem <- struct{}{}:
		t.Stop()
	case <-t.C:
		u.m.upErrors.WithLabelValues("busy").Inc()
		return nil, ErrBusy
	case <-ctx.Done():
		t.Stop()
		return nil, ctx.Err()
	}
	defer func() { <-u.sem }()

	q := make([]byte, len(query))
	copy(q, query)
	for i := 0; ; i++ {
		server, ok := u.attemptServer(i)
		if !ok {
			return nil, err
		}
		var ans []byte
		if overTCP {
			ans, err = u.tcpAttempt(ctx, server, q, qend)
		} else {
			binary.BigEndian.PutUint16(q, uint16(rand.Uint32()))
			ans, err = u.exchangeUDP(ctx, server, q, qend)
			if err == nil && truncated(ans) {
				ans, err = u.tcpAttempt(ctx, server, q, qend)
			}
		}
		if err == nil {
			return ans, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		u.attemptFailed(server, i, err)
	}
}

// The retry policy of every exchange with the resolvers, the blocking one
// (Exchange) and the UDP fast path's (clientQuery, udp.go), is written
// here once: attempt n (0-based) goes to resolver n mod len(resolvers)
// over UDP (attemptServer); a truncated answer is asked again over TCP
// from the same resolver within the same attempt (truncated, tcpAttempt;
// RFC 7766 §5); a failed attempt is counted (attemptFailed) and the next
// one follows; when no attempt is left the exchange fails (a client gets
// SERVFAIL).

// attemptServer returns the resolver of attempt n (0-based), or false
// when the Attempts are used up.
func (u *Upstream) attemptServer(n int) (string, bool) {
	if n >= u.attempts {
		return "", false
	}
	return u.servers[n%len(u.servers)], true
}

// truncated reports whether the answer ans has the TC bit set (RFC 1035
// §4.1.1): it is asked again over TCP.
func truncated(ans []byte) bool { return ans[2]&0x02 != 0 }

// tcpAttempt asks q (question ending at qend) over TCP from server with a
// fresh random ID written into q.
func (u *Upstream) tcpAttempt(ctx context.Context, server string, q []byte, qend int) ([]byte, error) {
	binary.BigEndian.PutUint16(q, uint16(rand.Uint32()))
	return u.exchangeTCP(ctx, server, q, qend)
}

// attemptFailed counts and logs a failed attempt (0-based) at server.
func (u *Upstream) attemptFailed(server string, attempt int, err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		u.timeouts.Inc()
	} else {
		u.netErrors.Inc()
	}
	u.log.Debug("upstream attempt failed", "resolver", server, "attempt", attempt+1, "err", err)
}

// accept checks an answer read for query q: it returns nil if ans is the
// answer, or why not; malformed reports an answer with the right ID that
// does not frame (counted apart from answers to other queries).
func (u *Upstream) accept(q, ans []byte, qend int) (err error, malformed bool) {
	if len(ans) < headerLen || ans[0] != q[0] || ans[1] != q[1] || ans[2]&0x80 == 0 {
		return errors.New("dnsproxy: answer to another query"), false
	}
	aqend, err := checkFraming(ans)
	if err != nil {
		if truncated(ans) && len(ans) >= qend && sameQuestion(ans[headerLen:min(qend, len(ans))], q[headerLen:qend]) {
			return nil, false // a truncated answer may end anywhere; TCP gets the whole
		}
		return err, true
	}
	if aqend != qend || !sameQuestion(ans[headerLen:aqend], q[headerLen:qend]) {
		return errors.New("dnsproxy: answer to another question"), false
	}
	return nil, false
}

func (u *Upstream) skip(server string, err error, malformed bool) {
	if malformed {
		u.m.upErrors.WithLabelValues("malformed").Inc()
		u.log.Warn("malformed upstream answer skipped", "resolver", server, "err", err)
		return
	}
	u.m.upErrors.WithLabelValues("mismatch").Inc()
	u.log.Debug("upstream answer skipped", "resolver", server, "err", err)
}

func (u *Upstream) exchangeUDP(ctx context.Context, server string, q []byte, qend int) ([]byte, error) {
	return u.mux.exchange(ctx, server, q, qend)
}

func (u *Upstream) exchangeTCP(ctx context.Context, server string, q []byte, qend int) ([]byte, error) {
	start := time.Now()
	deadline := start.Add(u.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	c, err := u.dialer.DialContext(dctx, "tcp", server)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(deadline); err != nil {
		return nil, err
	}
	msg := make([]byte, 2+len(q))
	binary.BigEndian.PutUint16(msg, uint16(len(q)))
	copy(msg[2:], q)
	if _, err := c.Write(msg); err != nil {
		return nil, err
	}
	for {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return nil, err
		}
		ans := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, ans); err != nil {
			return nil, err
		}
		if err, bad := u.accept(q, ans, qend); err != nil {
			u.skip(server, err, bad)
			continue
		}
		u.m.upstream.WithLabelValues("tcp").Observe(time.Since(start).Seconds())
		return ans, nil
	}
}

// LookupA resolves name's IPv4 addresses through the carrier resolvers,
// following the CNAME chain in the answer, for the SNI splice (it is
// never rewritten). It fails for NXDOMAIN, SERVFAIL and NODATA.
func (u *Upstream) LookupA(ctx context.Context, name string) ([]netip.Addr, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	m.SetEdns0(1232, false)
	q, err := m.Pack()
	if err != nil {
		return nil, fmt.Errorf("dnsproxy: lookup %q: %w", name, err)
	}
	ans, err := u.Exchange(ctx, q, false)
	if err != nil {
		return nil, fmt.Errorf("dnsproxy: lookup %q: %w", name, err)
	}
	r := new(dns.Msg)
	if err := r.Unpack(ans); err != nil {
		return nil, fmt.Errorf("dnsproxy: lookup %q: %w", name, err)
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("dnsproxy: lookup %q: %s", name, dns.RcodeToString[r.Rcode])
	}
	final := chainEnd(m.Question[0].Name, r.Answer)
	var out []netip.Addr
	for _, rr := range r.Answer {
		if owned(rr, final, dns.TypeA) {
			out = append(out, addrOf(rr))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("dnsproxy: lookup %q: no A record", name)
	}
	return out, nil
}
