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
	"sync"
	"time"

	"github.com/miekg/dns"
)

// ErrBusy is returned by Exchange when max_inflight queries are already
// waiting for the carrier resolvers.
var ErrBusy = errors.New("dnsproxy: too many upstream queries in flight")

// Upstream asks the carrier resolvers (DESIGN.md "Carrier resolver"). Every
// query goes out with a fresh random ID from a fresh socket (a random
// source port chosen by the kernel), only an answer with that ID and the
// same question is taken (RFC 5452 §9.1), and queries in flight are
// bounded. Safe for concurrent use.
type Upstream struct {
	servers  []string // host:port
	timeout  time.Duration
	attempts int
	sem      chan struct{}
	log      *slog.Logger
	m        *metrics
	dialer   net.Dialer
	idle     map[string]chan *pooledConn // per resolver: connected UDP sockets not in use
}

// Source-port reuse: a UDP socket serves one query at a time and at most
// socketUses queries in all, so the source port (chosen at random by the
// kernel for each new socket) changes every few queries while most queries
// skip socket(2), connect(2) and close(2). A socket that saw a timeout or an
// error is closed, never reused. idleSockets bounds the pool per resolver.
const (
	socketUses  = 64
	idleSockets = 256
)

type pooledConn struct {
	c    net.Conn
	uses int
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
	idle := map[string]chan *pooledConn{}
	for _, r := range o.Resolvers {
		idle[r] = make(chan *pooledConn, idleSockets)
	}
	return &Upstream{servers: o.Resolvers, timeout: o.Timeout, attempts: o.Attempts,
		sem: make(chan struct{}, o.MaxInflight), log: o.Logger, m: m, idle: idle}, nil
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, dns.MaxMsgSize); return &b }}

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
	for i := range u.attempts {
		server := u.servers[i%len(u.servers)]
		binary.BigEndian.PutUint16(q, uint16(rand.Uint32()))
		var ans []byte
		if overTCP {
			ans, err = u.exchangeTCP(ctx, server, q, qend)
		} else {
			ans, err = u.exchangeUDP(ctx, server, q, qend)
			if err == nil && ans[2]&0x02 != 0 { // TC: ask again over TCP (RFC 7766 §5)
				binary.BigEndian.PutUint16(q, uint16(rand.Uint32()))
				ans, err = u.exchangeTCP(ctx, server, q, qend)
			}
		}
		if err == nil {
			return ans, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		reason := "network"
		if errors.Is(err, os.ErrDeadlineExceeded) {
			reason = "timeout"
		}
		u.m.upErrors.WithLabelValues(reason).Inc()
		u.log.Debug("upstream attempt failed", "resolver", server, "attempt", i+1, "err", err)
	}
	return nil, err
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
		if ans[2]&0x02 != 0 && len(ans) >= qend && sameQuestion(ans[headerLen:min(qend, len(ans))], q[headerLen:qend]) {
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
	start := time.Now()
	deadline := start.Add(u.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	var pc *pooledConn
	select {
	case pc = <-u.idle[server]:
	default:
		c, err := u.dialer.DialContext(ctx, "udp", server)
		if err != nil {
			return nil, err
		}
		pc = &pooledConn{c: c}
	}
	pc.uses++
	ans, err := u.readUDP(pc.c, server, q, qend, deadline)
	if err != nil || pc.uses >= socketUses {
		pc.c.Close()
	} else {
		select {
		case u.idle[server] <- pc:
		default:
			pc.c.Close()
		}
	}
	if err == nil {
		u.m.upstream.WithLabelValues("udp").Observe(time.Since(start).Seconds())
	}
	return ans, err
}

// readUDP sends q on c and reads until the answer to q arrives or the
// deadline passes.
func (u *Upstream) readUDP(c net.Conn, server string, q []byte, qend int, deadline time.Time) ([]byte, error) {
	if err := c.SetDeadline(deadline); err != nil {
		return nil, err
	}
	if _, err := c.Write(q); err != nil {
		return nil, err
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err // deadline, or ICMP port unreachable: no resolver there
		}
		ans := buf[:n]
		if err, bad := u.accept(q, ans, qend); err != nil {
			u.skip(server, err, bad)
			continue
		}
		return append([]byte(nil), ans...), nil
	}
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
