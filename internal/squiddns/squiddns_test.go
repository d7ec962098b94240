package squiddns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"pep/internal/dnsproxy"
	"pep/internal/dnsproxy/dnsmasqtest"
	"pep/internal/httpproxy"
	"pep/internal/intercept/nstest"
	"pep/internal/testenv"
)

// carrier is a real dnsmasq standing for the carrier resolver, logging
// every query it gets.
func carrier(t *testing.T) *dnsmasqtest.Server {
	t.Helper()
	lines := []string{"log-queries", "address=/www.foo.com/198.51.100.7", "host-record=v6only.foo.com,2001:db8::7",
		"address=/nowhere.foo.com/", "ptr-record=7.100.51.198.in-addr.arpa,www.foo.com"}
	for i := 1; i <= 40; i++ { // 40 A records: 656 bytes, more than a 512-byte UDP answer holds
		lines = append(lines, fmt.Sprintf("host-record=many.foo.com,198.51.100.%d", i))
	}
	return dnsmasqtest.StartServer(t, lines)
}

// serve runs a Server on addr (UDP and TCP) over a Resolver and an
// Upstream asking resolver, and returns it, the Resolver and the address.
func serve(t *testing.T, addr, resolver string) (*Server, *httpproxy.Resolver, string) {
	t.Helper()
	return serveIn(t, func(f func() error) error { return f() }, addr, resolver)
}

// serveIn is serve with the listening sockets opened inside in (a network
// namespace's nstest.Topology.InGateway).
func serveIn(t *testing.T, in func(func() error) error, addr, resolver string) (*Server, *httpproxy.Resolver, string) {
	t.Helper()
	res := &httpproxy.Resolver{Servers: []string{resolver}, Timeout: time.Second}
	up, err := dnsproxy.NewUpstream(dnsproxy.UpstreamOptions{Resolvers: []string{resolver}, Timeout: time.Second, Attempts: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := New(func() *httpproxy.Resolver { return res }, up, 3*time.Second, nil)
	var pc net.PacketConn
	var ln net.Listener
	host, port, _ := net.SplitHostPort(addr)
	if err := in(func() error {
		var err error
		pc, ln, err = testenv.ListenDNS(host, port)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_, port, _ = net.SplitHostPort(pc.LocalAddr().String())
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: s}, {Listener: ln, Handler: s}} {
		go srv.ActivateAndServe()
		t.Cleanup(func() { srv.Shutdown() })
	}
	return s, res, net.JoinHostPort(host, port)
}

func ask(t *testing.T, network, server, name string, qt uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qt)
	c := &dns.Client{Net: network, Timeout: 3 * time.Second}
	in, _, err := c.Exchange(m, server)
	if err != nil {
		t.Fatalf("%s %s %s: %v", network, name, dns.TypeToString[qt], err)
	}
	return in
}

func count(s *Server, source string) float64 {
	return testutil.ToFloat64(s.answers.WithLabelValues(source))
}

// TestFromCache: Squid's A question for a name pepd has just resolved is
// answered from pepd's cache, with the addresses pepd checked and the
// TTL its entry has left; the carrier resolver is asked once in all.
func TestFromCache(t *testing.T) {
	dm := carrier(t)
	s, res, addr := serve(t, "127.0.0.1:0", dm.Addr)
	if _, err := res.Lookup(context.Background(), "www.foo.com"); err != nil { // pepd's HTTP path
		t.Fatal(err)
	}
	for _, network := range []string{"udp", "tcp"} {
		in := ask(t, network, addr, "www.foo.com", dns.TypeA)
		if in.Rcode != dns.RcodeSuccess || len(in.Answer) != 1 {
			t.Fatalf("%s: %v", network, in)
		}
		a := in.Answer[0].(*dns.A)
		if !a.A.Equal(net.ParseIP("198.51.100.7")) || a.Hdr.Name != "www.foo.com." || a.Hdr.Ttl < 1 || a.Hdr.Ttl > 10 {
			t.Errorf("%s: answer %v, want www.foo.com. A 198.51.100.7 with a TTL of 1-10s (dnsmasq's local-ttl)", network, a)
		}
	}
	if in := ask(t, "udp", addr, "www.foo.com", dns.TypeAAAA); in.Rcode != dns.RcodeSuccess || len(in.Answer) != 0 {
		t.Errorf("AAAA of an IPv4-only name: %v, want NOERROR and no answer (NODATA)", in)
	}
	if got := strings.Count(dm.Output(), "query[A] www.foo.com from"); got != 1 {
		t.Errorf("the carrier resolver was asked for www.foo.com's A record %d times, want once:\n%s", got, dm.Output())
	}
	if c := count(s, SourceCache); c != 3 {
		t.Errorf("%v answers from the cache, want 3", c)
	}
	// A name pepd has not seen is looked up into the same cache.
	if in := ask(t, "udp", addr, "v6only.foo.com", dns.TypeAAAA); len(in.Answer) != 1 || !in.Answer[0].(*dns.AAAA).AAAA.Equal(net.ParseIP("2001:db8::7")) {
		t.Errorf("AAAA v6only.foo.com: %v", in)
	}
	if a, err := res.Lookup(context.Background(), "v6only.foo.com"); err != nil || len(a) != 1 || a[0] != netip.MustParseAddr("2001:db8::7") {
		t.Errorf("pepd's cache after Squid's question: %v, %v", a, err)
	}
}

// TestRelayed: what the cache cannot answer exactly goes to the carrier
// resolver and comes back as it answered (the client's ID, the negative
// answer's rcode); no resolver is SERVFAIL.
func TestRelayed(t *testing.T) {
	dm := carrier(t)
	s, _, addr := serve(t, "127.0.0.1:0", dm.Addr)
	if in := ask(t, "udp", addr, "7.100.51.198.in-addr.arpa", dns.TypePTR); in.Rcode != dns.RcodeSuccess || len(in.Answer) != 1 ||
		in.Answer[0].(*dns.PTR).Ptr != "www.foo.com." {
		t.Errorf("PTR: %v", in)
	}
	if in := ask(t, "udp", addr, "nowhere.foo.com", dns.TypeA); in.Rcode != dns.RcodeNameError {
		t.Errorf("a name that does not exist: %v, want NXDOMAIN as the resolver answered", in)
	}
	if c := count(s, SourceRelayed); c != 2 {
		t.Errorf("%v relayed, want 2", c)
	}
	dead := fmt.Sprintf("127.0.0.1:%d", dnsmasqtest.FreePort(t)) // nobody answers there
	s2, _, addr2 := serve(t, "127.0.0.1:0", dead)
	if in := ask(t, "udp", addr2, "www.foo.com", dns.TypeA); in.Rcode != dns.RcodeServerFailure {
		t.Errorf("no resolver: %v, want SERVFAIL", in)
	}
	if c := count(s2, SourceServfail); c != 1 {
		t.Errorf("%v servfail, want 1", c)
	}
}

// TestTruncated: an answer larger than the client's UDP size is cut with
// TC set; over TCP it is whole.
func TestTruncated(t *testing.T) {
	dm := carrier(t)
	_, _, addr := serve(t, "127.0.0.1:0", dm.Addr)
	if in := ask(t, "udp", addr, "many.foo.com", dns.TypeA); !in.Truncated || len(in.Answer) == 40 {
		t.Errorf("UDP: TC %v with %d answers, want TC and fewer than 40", in.Truncated, len(in.Answer))
	}
	if in := ask(t, "tcp", addr, "many.foo.com", dns.TypeA); in.Truncated || len(in.Answer) != 40 {
		t.Errorf("TCP: TC %v with %d answers, want all 40", in.Truncated, len(in.Answer))
	}
}

// TestRefused: a query from an address that is not loopback is refused
// (Squid's resolver on the box, not a resolver for subscribers). The
// server listens in a gateway namespace and the query comes from a client
// namespace over a veth pair (nstest), as a subscriber's would. Needs
// root, as every namespace test.
func TestRefused(t *testing.T) {
	topo := nstest.ForTest(t)
	dm := carrier(t)
	s, _, addr := serveIn(t, topo.InGateway, nstest.GatewayAddr+":0", dm.Addr)
	var in *dns.Msg
	if err := topo.InClient(func() error {
		m := new(dns.Msg)
		m.SetQuestion("www.foo.com.", dns.TypeA)
		var err error
		in, _, err = (&dns.Client{Timeout: 3 * time.Second}).Exchange(m, addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if in.Rcode != dns.RcodeRefused {
		t.Errorf("from %s: %v, want REFUSED", nstest.ClientAddr, in)
	}
	if c := count(s, SourceRefused); c != 1 {
		t.Errorf("%v refused, want 1", c)
	}
}
