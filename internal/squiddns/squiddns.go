// Package squiddns answers Squid's DNS lookups from pepd's resolver cache
// (config listen.squid_dns; configs/squid.conf dns_nameservers).
//
// Why. On a cache miss two lookups of the same name used to run one after
// the other on the request's path: pepd's, for the Host check and the guard
// (httpproxy.Resolver, shared with the optimizer), and Squid's own, for its
// destination ACL (pep_forbidden_dst), before Squid forwards to its parent.
// In the testbed each is a round trip to the carrier resolver (20 ms with
// `-wired origin-20ms`), on the document's path and on every new host's
// first object (a packet capture on the gateway, testbed/README.md session
// 27). Squid asks pepd instead, which answers an A or AAAA question from the
// answer it got a moment before: no round trip, and Squid's ACL sees the
// very addresses pepd's guard checked, so a name re-bound between the two
// lookups (DNS rebinding) can no longer differ between them.
//
// What it answers. A query (opcode QUERY, one question, class IN) for A or
// AAAA is answered from httpproxy.Resolver.LookupTTL: the addresses of the
// family asked, owned by the question's name, with the TTL the cache entry
// has left (NOERROR with no answer when the name has only the other
// family). Anything else (other types such as Squid's PTR lookups of client
// addresses, a name that does not exist, a failed lookup, several
// questions) is relayed to the carrier resolvers unchanged
// (dnsproxy.Upstream.Exchange) and their answer returned with the client's
// ID, so negative answers keep their SOA; no resolver answering is
// SERVFAIL. Queries from a non-loopback address are REFUSED: this is
// Squid's resolver on the box, not a resolver for subscribers.
package squiddns

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"pep/internal/httpproxy"
)

// Exchanger relays a wire-format query to the carrier resolvers and
// returns their answer with the query's ID as sent (dnsproxy.Upstream).
type Exchanger interface {
	Exchange(ctx context.Context, query []byte, overTCP bool) ([]byte, error)
}

// Server is a dns.Handler for Squid's queries. Build it with New.
type Server struct {
	resolver func() *httpproxy.Resolver
	upstream Exchanger
	timeout  time.Duration
	answers  *prometheus.CounterVec
}

// Answer sources, the "source" label of pep_squid_dns_answers_total.
const (
	SourceCache    = "cache"    // A or AAAA from pepd's resolver cache
	SourceRelayed  = "relayed"  // the carrier resolvers' own answer
	SourceServfail = "servfail" // no resolver answered
	SourceRefused  = "refused"  // a query from off the box
)

// New returns a Server that answers A and AAAA from resolver() (called per
// query: pepd swaps its Resolver when the carrier resolvers change on
// SIGHUP) and relays the rest through up, each query bounded by timeout
// (zero: 5s). reg registers pep_squid_dns_answers_total{source}; nil
// registers nothing.
func New(resolver func() *httpproxy.Resolver, up Exchanger, timeout time.Duration, reg prometheus.Registerer) *Server {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	s := &Server{resolver: resolver, upstream: up, timeout: timeout,
		answers: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{Namespace: "pep", Subsystem: "squid_dns", Name: "answers_total",
			Help: "Answers to Squid's DNS queries by source: cache (pepd's resolver cache), relayed (the carrier resolvers' answer), servfail, refused."},
			[]string{"source"})}
	for _, src := range []string{SourceCache, SourceRelayed, SourceServfail, SourceRefused} {
		s.answers.WithLabelValues(src)
	}
	return s
}

// ServeDNS implements dns.Handler.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	if !fromLoopback(w.RemoteAddr()) {
		s.reply(w, r, new(dns.Msg).SetRcode(r, dns.RcodeRefused), SourceRefused)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if m := s.fromCache(ctx, r); m != nil {
		s.reply(w, r, m, SourceCache)
		return
	}
	wire, err := r.Pack()
	if err == nil {
		var ans []byte
		_, overTCP := w.RemoteAddr().(*net.TCPAddr)
		if ans, err = s.upstream.Exchange(ctx, wire, overTCP); err == nil {
			m := new(dns.Msg)
			if err = m.Unpack(ans); err == nil {
				m.Id = r.Id
				s.reply(w, r, m, SourceRelayed)
				return
			}
		}
	}
	s.reply(w, r, new(dns.Msg).SetRcode(r, dns.RcodeServerFailure), SourceServfail)
}

// fromCache answers an A or AAAA question from the resolver cache, or
// returns nil when the query is anything else or the lookup did not give
// addresses (the resolvers' own answer is relayed then).
func (s *Server) fromCache(ctx context.Context, r *dns.Msg) *dns.Msg {
	if r.Opcode != dns.OpcodeQuery || len(r.Question) != 1 {
		return nil
	}
	q := r.Question[0]
	if q.Qclass != dns.ClassINET || q.Qtype != dns.TypeA && q.Qtype != dns.TypeAAAA {
		return nil
	}
	addrs, ttl, err := s.resolver().LookupTTL(ctx, q.Name)
	if err != nil || len(addrs) == 0 {
		return nil
	}
	m := new(dns.Msg).SetReply(r)
	m.RecursionAvailable = true
	hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: uint32(ttl / time.Second)}
	for _, a := range addrs {
		switch {
		case q.Qtype == dns.TypeA && a.Is4():
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
		case q.Qtype == dns.TypeAAAA && a.Is6():
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
		}
	}
	return m
}

// reply writes m to w, cut to the client's UDP size (RFC 1035 §4.2.1,
// EDNS0 RFC 6891 §6.2.3) with TC set when it does not fit, and counts it.
func (s *Server) reply(w dns.ResponseWriter, r, m *dns.Msg, source string) {
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if o := r.IsEdns0(); o != nil {
			size = max(int(o.UDPSize()), dns.MinMsgSize)
		}
		m.Truncate(size)
	}
	s.answers.WithLabelValues(source).Inc()
	w.WriteMsg(m)
}

// fromLoopback reports whether addr is a loopback address.
func fromLoopback(addr net.Addr) bool {
	ap, err := netip.ParseAddrPort(addr.String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
}
