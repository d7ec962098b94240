// Package dnsproxy is pepd's DNS rewriting mode (seed paper §3.2, Fig. 3;
// DESIGN.md "pepd", dns mode): a DNS proxy on UDP and TCP for intercepted
// subscriber queries that answers through the carrier resolvers and, for
// names in the rewrite policy, puts the VIP first in A answers, keeping
// the origin addresses after it so that a phone that cannot reach the VIP
// falls back to the origin (§5.3.2).
//
// Everything the rewriter does not change is passed byte for byte (only
// the ID differs from the resolver's answer): names outside the policy,
// NXDOMAIN/NODATA/SERVFAIL, signed answers and DO-bit queries,
// special-use names (RFC 6761, RFC 8880). See README.md.
package dnsproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"pep/internal/guard"
	"pep/internal/mode"
)

// Proxy is the DNS proxy. Build it with New, run it with ListenAndServe or
// Serve, reload the domain file with Reload, stop it with Shutdown.
type Proxy struct {
	opts   Options
	policy atomic.Pointer[Policy]
	rw     Rewriter
	up     *Upstream
	guard  *guard.Policy
	mode   *mode.Switch
	log    *slog.Logger
	m      *metrics

	mu      sync.Mutex
	servers []server
	udp     []*udpServer
	closed  bool
}

// New checks o, reads the rewrite domain file and returns a Proxy. Errors
// name the bad option or the file and line.
func New(o Options) (*Proxy, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	pol, err := NewPolicy(o.RewriteDomains, o.RewriteDomainsFile, o.RewriteWWW, o.Exclude)
	if err != nil {
		return nil, err
	}
	m := newMetrics(o.Registerer)
	up, err := NewUpstream(UpstreamOptions{Resolvers: o.Resolvers, Timeout: o.Timeout,
		Attempts: o.Attempts, MaxInflight: o.MaxInflight, Logger: o.Logger}, m)
	if err != nil {
		return nil, err
	}
	p := &Proxy{opts: o, up: up, guard: o.Guard, mode: o.Mode, log: o.Logger, m: m,
		rw: Rewriter{VIP: o.VIP, VIP6: o.VIP6, VIPTTL: o.VIPTTL, TTL: o.TTLPolicy, Origins: o.Origins, AAAA: o.AAAA, HTTPS: o.HTTPSRecords}}
	p.policy.Store(pol)
	return p, nil
}

// Upstream returns the proxy's carrier-resolver client; the SNI splice
// resolves names with its LookupA (answers never rewritten).
func (p *Proxy) Upstream() *Upstream { return p.up }

// Reload reads the rewrite domain file again (on SIGHUP) and swaps the new
// policy in for the next query. On error the old policy stays and the
// error names the file and line.
func (p *Proxy) Reload() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	pol, err := NewPolicy(p.opts.RewriteDomains, p.opts.RewriteDomainsFile, p.opts.RewriteWWW, p.opts.Exclude)
	if err != nil {
		return err
	}
	p.policy.Store(pol)
	p.log.Info("rewrite policy reloaded", "file", p.opts.RewriteDomainsFile)
	return nil
}

// ReloadConfig is Reload for a new dns section (pepd's SIGHUP): the
// policy is rebuilt from d's rewrite_domains, rewrite_domains_file,
// rewrite_www and exclude, which later Reloads keep. The other settings
// (VIP, TTL, AAAA and HTTPS policies, resolvers, limits) take effect at the
// next start. On error nothing changes.
func (p *Proxy) ReloadConfig(d Config) error {
	pol, err := NewPolicy(d.RewriteDomains, d.RewriteDomainsFile, d.RewriteWWW, d.Exclude)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.opts.RewriteDomains, p.opts.RewriteDomainsFile = d.RewriteDomains, d.RewriteDomainsFile
	p.opts.RewriteWWW, p.opts.Exclude = d.RewriteWWW, d.Exclude
	p.policy.Store(pol)
	p.mu.Unlock()
	p.log.Info("rewrite policy reloaded", "file", d.RewriteDomainsFile, "domains", len(d.RewriteDomains))
	return nil
}

// ListenAndServe binds addr ("host:port") on UDP and TCP and serves until
// Shutdown, after which it returns nil. A bind error is returned at once.
func (p *Proxy) ListenAndServe(addr string) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return fmt.Errorf("dnsproxy: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		pc.Close()
		return fmt.Errorf("dnsproxy: %w", err)
	}
	return p.Serve(pc, ln)
}

// ErrServerClosed is returned by Serve and ListenAndServe when called
// after Shutdown.
var ErrServerClosed = errors.New("dnsproxy: server closed")

// server is one miekg/dns server (TCP, or UDP on a PacketConn that is not
// a *net.UDPConn) and a channel closed once it has started (or failed
// to), so that Shutdown never races its start.
type server struct {
	s     *dns.Server
	ready chan struct{}
}

// Serve answers queries on pc (UDP) and ln (TCP); either may be nil. It
// blocks until Shutdown (then returns nil) or a socket fails. After
// Shutdown it closes pc and ln and returns ErrServerClosed.
//
// UDP on a *net.UDPConn is served by pepd's own loop (udp.go: batched
// reads and writes, answers relayed as bytes); TCP, and UDP on any other
// PacketConn, by miekg/dns's server. A socket bound to the unspecified
// address answers from the address each query was sent to.
func (p *Proxy) Serve(pc net.PacketConn, ln net.Listener) error {
	var srvs []server
	var udp *udpServer
	if uc, ok := pc.(*net.UDPConn); ok {
		var err error
		if udp, err = newUDPServer(p, uc); err != nil {
			pc.Close()
			if ln != nil {
				ln.Close()
			}
			return fmt.Errorf("dnsproxy: %w", err)
		}
	} else if pc != nil {
		srvs = append(srvs, server{&dns.Server{PacketConn: pc, Handler: p}, make(chan struct{})})
	}
	if ln != nil {
		srvs = append(srvs, server{&dns.Server{Listener: ln, Handler: p}, make(chan struct{})})
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		if pc != nil {
			pc.Close()
		}
		if ln != nil {
			ln.Close()
		}
		return ErrServerClosed
	}
	p.servers = append(p.servers, srvs...)
	if udp != nil {
		p.udp = append(p.udp, udp)
	}
	p.mu.Unlock()
	errc := make(chan error, len(srvs)+1)
	for _, s := range srvs {
		var once sync.Once
		s.s.NotifyStartedFunc = func() { once.Do(func() { close(s.ready) }) }
		go func() {
			err := s.s.ActivateAndServe()
			once.Do(func() { close(s.ready) })
			errc <- err
		}()
	}
	n := len(srvs)
	if udp != nil {
		n++
		go func() { errc <- udp.serve() }()
	}
	var first error
	for range n {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if first != nil && !closed {
		return fmt.Errorf("dnsproxy: %w", first)
	}
	return nil
}

// Shutdown stops the listeners and waits, until ctx is done, for queries
// being answered.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	srvs, udps := p.servers, p.udp
	p.mu.Unlock()
	var errs []error
	for _, u := range udps {
		if err := u.shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range srvs {
		select {
		case <-s.ready:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := s.s.ShutdownContext(ctx); err != nil && err.Error() != "dns: server not started" {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// anyTTL is the TTL of the synthesized RFC 8482 HINFO answer.
const anyTTL = 8482

// ServeDNS implements dns.Handler: it answers one client query. The query
// r is never modified; every reply answers r's question.
func (p *Proxy) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	if len(r.Question) != 1 || r.Response {
		p.reply(w, r, dns.RcodeFormatError, "other", "formerr")
		return
	}
	q := r.Question[0]
	tl := typeLabel(q.Qtype)
	src, _ := netip.ParseAddrPort(w.RemoteAddr().String())
	if !p.guard.ClientAllowed(src.Addr()) {
		p.reply(w, r, dns.RcodeRefused, tl, "refused")
		return
	}
	if q.Qtype == dns.TypeANY {
		p.any(w, r)
		return
	}
	_, overTCP := w.LocalAddr().(*net.TCPAddr)

	// Decide from the query alone whether the answer may be rewritten, so
	// that pass-through answers are never unpacked.
	reason, candidate := p.candidate(r)
	wire, err := r.Pack()
	if err != nil {
		p.reply(w, r, dns.RcodeFormatError, tl, "formerr")
		return
	}
	// Each attempt may take a UDP and a TCP exchange.
	ctx, cancel := context.WithTimeout(context.Background(), 2*p.up.timeout*time.Duration(p.up.attempts))
	defer cancel()
	ans, err := p.up.Exchange(ctx, wire, overTCP)
	if err != nil {
		p.log.Debug("no upstream answer", "name", q.Name, "type", tl, "err", err)
		p.m.servfails.WithLabelValues("pepd").Inc()
		p.reply(w, r, dns.RcodeServerFailure, tl, "servfail")
		return
	}
	cq := &question{wire: wire, msg: r, id: r.Id, tl: tl, reason: reason, candidate: candidate, udpSize: udpSize(r)}
	if _, err := w.Write(p.answer(cq, ans, overTCP)); err != nil {
		p.log.Debug("writing answer", "client", w.RemoteAddr().String(), "err", err)
	}
}

// answer turns ans, the upstream answer to q (framing checked, any ID),
// into the client's answer: rewritten if q is a candidate and the
// rewriter takes it, else ans itself; with the client's ID; over UDP cut
// to the client's size with TC. It may change ans in place, and counts
// the query's outcome.
func (p *Proxy) answer(q *question, ans []byte, overTCP bool) []byte {
	if ans[3]&0x0F == dns.RcodeServerFailure {
		p.m.servfails.WithLabelValues("upstream").Inc()
	}
	outcome, reason := "passed", q.reason
	var msg *dns.Msg // ans unpacked, if it was
	if q.candidate {
		resp := new(dns.Msg)
		if err := resp.Unpack(ans); err != nil {
			// Framing was checked; a record whose RDATA does not parse is
			// passed unchanged.
			p.log.Debug("upstream answer does not unpack, passed unchanged", "type", q.tl, "err", err)
			reason = "unparsable"
		} else {
			// The rewriter reads the query's question and DO bit only:
			// Upstream.accept matched the answer's question to the
			// query's, and decide takes no DO query as a candidate; so
			// the fast path need not unpack the query.
			r := q.msg
			if r == nil {
				r = &dns.Msg{Question: resp.Question}
			}
			out, b, skip := p.rw.rewritePacked(r, resp, true)
			switch {
			case out != nil:
				binary.BigEndian.PutUint16(b, q.id)
				out.Id = q.id
				ans, msg, outcome = b, out, "rewritten"
				p.m.rewrites.with(q.tl, reason).Inc()
			case skip == SkipPack: // resp may have been changed: not msg
				reason = skip
			default:
				reason, msg = skip, resp
			}
		}
	}
	if outcome == "passed" {
		p.m.passthrough.with(reason, "").Inc()
	}
	binary.BigEndian.PutUint16(ans, q.id)
	if !overTCP && len(ans) > q.udpSize {
		ans = p.truncate(q, ans, msg)
	}
	p.m.queries.with(q.tl, outcome).Inc()
	return ans
}

// servfail returns a SERVFAIL answer to q (no resolver answered) and
// counts it.
func (p *Proxy) servfail(q *question) []byte {
	p.m.servfails.WithLabelValues("pepd").Inc()
	p.m.queries.with(q.tl, "servfail").Inc()
	if r, err := q.unpacked(); err == nil {
		if b, err := rcodeMsg(r, dns.RcodeServerFailure).Pack(); err == nil {
			return b
		}
	}
	return headerOnly(q.wire, q.id, dns.RcodeServerFailure, false)
}

// headerOnly returns a reply to the one-question message wire with its
// question and no records: ID id, QR, rcode, TC if tc.
func headerOnly(wire []byte, id uint16, rcode int, tc bool) []byte {
	qend, err := questionEnd(wire)
	if err != nil {
		qend = headerLen
	}
	b := append([]byte(nil), wire[:qend]...)
	binary.BigEndian.PutUint16(b, id)
	b[2] = b[2]&^0x02 | 0x80
	if tc {
		b[2] |= 0x02
	}
	b[3] = b[3]&0xF0 | byte(rcode&0x0F)
	clear(b[6:headerLen])
	return b
}

// candidate reports whether the answer to r may be rewritten, or the
// pass-through reason if not.
func (p *Proxy) candidate(r *dns.Msg) (reason string, ok bool) {
	q := r.Question[0]
	do := false
	if o := r.IsEdns0(); o != nil {
		do = o.Do()
	}
	return p.decide(q.Qtype, q.Qclass, do, []byte(strings.ToLower(strings.TrimSuffix(q.Name, "."))))
}

// decide reports whether the answer to a query of qtype and qclass for
// name (lower-case, no trailing dot) may be rewritten, or the
// pass-through reason if not; do is the query's DO bit.
func (p *Proxy) decide(qtype, qclass uint16, do bool, name []byte) (reason string, ok bool) {
	if p.mode != nil && p.mode.Get() != mode.DNS {
		return SkipMode, false
	}
	if qclass != dns.ClassINET {
		return SkipType, false
	}
	switch qtype {
	case dns.TypeA, dns.TypeHTTPS:
	case dns.TypeAAAA:
		if p.rw.AAAA == AAAAPass {
			return SkipAAAAPass, false
		}
	default:
		return SkipType, false
	}
	if do {
		return SkipDO, false
	}
	return p.policy.Load().matchName(name)
}

// udpSize is the largest UDP answer the client of r takes: its EDNS0
// payload size, at least 512 (RFC 6891 §6.2.5), else 512 (RFC 1035 §4.2.1).
func udpSize(r *dns.Msg) int {
	if o := r.IsEdns0(); o != nil {
		return max(dns.MinMsgSize, int(o.UDPSize()))
	}
	return dns.MinMsgSize
}

// truncate returns ans, the answer to q, cut to q's UDP size with TC set
// (RFC 2181 §9, RFC 7766 §5): the client asks again over TCP. msg is ans
// unpacked, or nil.
func (p *Proxy) truncate(q *question, ans []byte, msg *dns.Msg) []byte {
	p.m.truncations.Inc()
	if msg == nil {
		msg = new(dns.Msg)
		if err := msg.Unpack(ans); err != nil {
			msg = nil
		}
	} else {
		msg = msg.Copy()
	}
	if msg != nil {
		msg.Id = q.id
		msg.Truncate(q.udpSize)
		msg.Truncated = true
		if b, err := msg.Pack(); err == nil && len(b) <= q.udpSize {
			return b
		}
	}
	// The answer cannot be cut record by record: send its header and
	// question only, with TC.
	return headerOnly(ans, q.id, int(ans[3]&0x0F), true)
}

// reply sends an answer with rcode and no records to r's question.
func (p *Proxy) reply(w dns.ResponseWriter, r *dns.Msg, rcode int, tl, outcome string) {
	p.m.queries.with(tl, outcome).Inc()
	if err := w.WriteMsg(rcodeMsg(r, rcode)); err != nil {
		p.log.Debug("writing answer", "client", w.RemoteAddr().String(), "err", err)
	}
}

// rcodeMsg returns an answer with rcode and no records to r's question,
// with an OPT record if r has one.
func rcodeMsg(r *dns.Msg, rcode int) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(r, rcode)
	if o := r.IsEdns0(); o != nil {
		m.SetEdns0(dns.DefaultMsgSize, o.Do())
	}
	return m
}

// any answers a query of type ANY with one synthesized HINFO record
// (RFC 8482 §4.2), without asking upstream.
func (p *Proxy) any(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Answer = []dns.RR{&dns.HINFO{
		Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeHINFO, Class: r.Question[0].Qclass, Ttl: anyTTL},
		Cpu: "RFC8482", Os: ""}}
	if o := r.IsEdns0(); o != nil {
		m.SetEdns0(dns.DefaultMsgSize, o.Do())
	}
	p.m.queries.with("ANY", "any").Inc()
	if err := w.WriteMsg(m); err != nil {
		p.log.Debug("writing answer", "client", w.RemoteAddr().String(), "err", err)
	}
}
