package dnsproxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"pep/internal/guard"
	"pep/internal/mode"
	"pep/internal/testenv"
)

// dnsmasqZone is the carrier resolver's data for the integration tests.
// Origins are in 198.19.0.0/16 as in the testbed (DESIGN.md).
func dnsmasqZone() []string {
	z := []string{
		"host-record=www.foo.com,198.19.0.10,2001:db8::10",
		"host-record=www.foo.com,198.19.0.11",
		"host-record=edge.cdn.net,198.19.0.20",
		"host-record=www.other.net,198.19.0.30",
		"host-record=ipv4only.arpa,192.0.0.170",
		"host-record=one.foo.com,198.19.0.12",
		"cname=www.chain.com,cdn.chain.net",
		"cname=cdn.chain.net,edge.cdn.net",
		"local=/foo.com/",
		"local=/cdn.net/",
		// HTTPS 1 . alpn="h3,h2" ipv4hint=198.19.0.10,198.19.0.11 ech=3q2+7w== ipv6hint=2001:db8::10
		"dns-rr=www.foo.com,65,0001000001000602683302683200040008c613000ac613000b00050004deadbeef0006001020010db8000000000000000000000010",
	}
	for i := 1; i <= 40; i++ { // 669 bytes: more than 512, less than 1232
		z = append(z, fmt.Sprintf("host-record=mid.foo.com,198.19.1.%d", i))
	}
	for i := 1; i <= 120; i++ { // 1960 bytes: more than 1232
		z = append(z, fmt.Sprintf("host-record=big.foo.com,198.19.2.%d", i))
	}
	return z
}

func query(name string, t uint16, edns bool, do bool) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, t)
	m.Id = 0x4242
	if edns {
		m.SetEdns0(1232, do)
	}
	return m
}

func pack(t testing.TB, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDnsmasqRewrite checks rewritten answers against a real dnsmasq.
func TestDnsmasqRewrite(t *testing.T) {
	up := startDnsmasq(t, dnsmasqZone())
	o := defaultOptions(up)
	o.RewriteDomains = []string{"foo.com", "chain.com", "arpa"}
	_, filterAddr, _ := startProxy(t, o)
	o.HTTPSRecords, o.AAAA = HTTPSHints, AAAAVIP6
	_, hintsAddr, _ := startProxy(t, o)
	o.HTTPSRecords, o.AAAA, o.TTLPolicy = HTTPSFilter, AAAAFilter, TTLOrigin
	_, originAddr, _ := startProxy(t, o)

	cases := []struct {
		name   string
		proxy  string
		q      *dns.Msg
		answer []string
		ns     []string
	}{
		{"A: VIP first, origins kept, one TTL", filterAddr, query("www.foo.com.", dns.TypeA, true, false),
			[]string{"www.foo.com. 86400 IN A 192.0.2.12", "www.foo.com. 86400 IN A 198.19.0.10", "www.foo.com. 86400 IN A 198.19.0.11"}, nil},
		{"A: ttl_policy origin", originAddr, query("www.foo.com.", dns.TypeA, true, false),
			[]string{"www.foo.com. 10 IN A 192.0.2.12", "www.foo.com. 10 IN A 198.19.0.10", "www.foo.com. 10 IN A 198.19.0.11"}, nil},
		{"A: no EDNS", filterAddr, query("www.foo.com.", dns.TypeA, false, false),
			[]string{"www.foo.com. 86400 IN A 192.0.2.12", "www.foo.com. 86400 IN A 198.19.0.10", "www.foo.com. 86400 IN A 198.19.0.11"}, nil},
		{"A: name case kept", filterAddr, query("WWW.Foo.COM.", dns.TypeA, true, false),
			[]string{"WWW.Foo.COM. 86400 IN A 192.0.2.12", "WWW.Foo.COM. 86400 IN A 198.19.0.10", "WWW.Foo.COM. 86400 IN A 198.19.0.11"}, nil},
		{"CNAME chain intact, VIP owned by the final name", filterAddr, query("www.chain.com.", dns.TypeA, true, false),
			[]string{"www.chain.com. 10 IN CNAME cdn.chain.net.", "cdn.chain.net. 10 IN CNAME edge.cdn.net.",
				"edge.cdn.net. 86400 IN A 192.0.2.12", "edge.cdn.net. 86400 IN A 198.19.0.20"}, nil},
		{"AAAA filter: NODATA with SOA", filterAddr, query("www.foo.com.", dns.TypeAAAA, true, false),
			nil, []string{"www.foo.com. 86400 IN SOA www.foo.com. hostmaster.www.foo.com. 1 3600 600 86400 86400"}},
		{"AAAA vip6", hintsAddr, query("www.foo.com.", dns.TypeAAAA, true, false),
			[]string{"www.foo.com. 86400 IN AAAA 2001:db8::12", "www.foo.com. 86400 IN AAAA 2001:db8::10"}, nil},
		{"HTTPS filter: NODATA with SOA", filterAddr, query("www.foo.com.", dns.TypeHTTPS, true, false),
			nil, []string{"www.foo.com. 86400 IN SOA www.foo.com. hostmaster.www.foo.com. 1 3600 600 86400 86400"}},
		{"HTTPS hints: VIP first, no h3, ech kept", hintsAddr, query("www.foo.com.", dns.TypeHTTPS, true, false),
			[]string{`www.foo.com. 10 IN HTTPS 1 . alpn="h2" ipv4hint="192.0.2.12,198.19.0.10,198.19.0.11" ech="3q2+7w==" ipv6hint="2001:db8::12,2001:db8::10"`}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, tcp := range []bool{false, true} {
				ans := unpack(t, rawExchange(t, tc.proxy, pack(t, tc.q), tcp, nil))
				if ans.Id != tc.q.Id || ans.Rcode != dns.RcodeSuccess || ans.AuthenticatedData || ans.Truncated {
					t.Errorf("tcp=%v: header id=%#x rcode=%d ad=%v tc=%v, want id=%#x NOERROR, no AD, no TC",
						tcp, ans.Id, ans.Rcode, ans.AuthenticatedData, ans.Truncated, tc.q.Id)
				}
				if got := originsSorted(rrStrings(ans.Answer)); !slices.Equal(got, tc.answer) {
					t.Errorf("tcp=%v: answer\n got %q\nwant %q", tcp, got, tc.answer)
				}
				if got := rrStrings(ans.Ns); !slices.Equal(got, tc.ns) {
					t.Errorf("tcp=%v: authority\n got %q\nwant %q", tcp, got, tc.ns)
				}
				if (ans.IsEdns0() != nil) != (tc.q.IsEdns0() != nil) {
					t.Errorf("tcp=%v: EDNS0 in answer %v, in query %v", tcp, ans.IsEdns0() != nil, tc.q.IsEdns0() != nil)
				}
			}
		})
	}
}

// originsSorted sorts the records after the VIP's: dnsmasq rotates the
// records of an RRset from one answer to the next.
func originsSorted(rrs []string) []string {
	for i, rr := range rrs {
		if strings.HasSuffix(rr, " 192.0.2.12") || strings.HasSuffix(rr, " 2001:db8::12") {
			slices.Sort(rrs[i+1:])
			break
		}
	}
	return rrs
}

// TestDnsmasqPassthrough checks that answers the policy does not touch are
// the resolver's bytes.
func TestDnsmasqPassthrough(t *testing.T) {
	up := startDnsmasq(t, dnsmasqZone())
	o := defaultOptions(up)
	o.RewriteDomains = []string{"foo.com", "chain.com", "arpa", "cdn.net"}
	o.Mode = mode.NewSwitch(mode.DNS)
	_, addr, _ := startProxy(t, o)
	off := defaultOptions(up)
	off.Mode = mode.NewSwitch(mode.Off)
	_, offAddr, _ := startProxy(t, off)

	cases := []struct {
		name  string
		proxy string
		q     *dns.Msg
		rcode int
	}{
		{"name outside the policy", addr, query("www.other.net.", dns.TypeA, true, false), dns.RcodeSuccess},
		{"NXDOMAIN", addr, query("nothere.foo.com.", dns.TypeA, true, false), dns.RcodeNameError},
		{"NODATA (AAAA filter)", addr, query("edge.cdn.net.", dns.TypeAAAA, true, false), dns.RcodeSuccess},
		{"DO bit", addr, query("one.foo.com.", dns.TypeA, true, true), dns.RcodeSuccess},
		{"ipv4only.arpa (RFC 8880)", addr, query("ipv4only.arpa.", dns.TypeA, true, false), dns.RcodeSuccess},
		{"MX is not rewritten", addr, query("www.foo.com.", dns.TypeMX, true, false), dns.RcodeSuccess},
		{"mode off", offAddr, query("one.foo.com.", dns.TypeA, true, false), dns.RcodeSuccess},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wire := pack(t, tc.q)
			for _, tcp := range []bool{false, true} {
				want := rawExchange(t, up, wire, tcp, nil)
				got := rawExchange(t, tc.proxy, wire, tcp, nil)
				if !bytes.Equal(got, want) {
					t.Errorf("tcp=%v: proxied answer differs from dnsmasq's\n got %x\nwant %x", tcp, got, want)
				}
				if r := unpack(t, got).Rcode; r != tc.rcode {
					t.Errorf("tcp=%v: rcode %s, want %s", tcp, dns.RcodeToString[r], dns.RcodeToString[tc.rcode])
				}
			}
		})
	}
}

// TestDnsmasqTruncation checks TC for answers larger than the client's UDP
// size and the retry over TCP.
func TestDnsmasqTruncation(t *testing.T) {
	up := startDnsmasq(t, dnsmasqZone())
	_, addr, reg := startProxy(t, defaultOptions(up))
	cases := []struct {
		name    string
		q       *dns.Msg
		maxUDP  int
		records int // in the full answer over TCP, VIP included
	}{
		{"669-byte answer, client without EDNS (512)", query("mid.foo.com.", dns.TypeA, false, false), 512, 41},
		{"1960-byte answer, EDNS 1232 (upstream TC, TCP fallback)", query("big.foo.com.", dns.TypeA, true, false), 1232, 121},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wire := pack(t, tc.q)
			b := rawExchange(t, addr, wire, false, nil)
			if len(b) > tc.maxUDP {
				t.Errorf("UDP answer is %d bytes, client takes %d", len(b), tc.maxUDP)
			}
			if m := unpack(t, b); !m.Truncated || m.Id != tc.q.Id {
				t.Errorf("UDP answer TC=%v id=%#x, want TC and id %#x", m.Truncated, m.Id, tc.q.Id)
			}
			m := unpack(t, rawExchange(t, addr, wire, true, nil))
			if m.Truncated || len(m.Answer) != tc.records {
				t.Fatalf("TCP answer TC=%v with %d records, want no TC and %d", m.Truncated, len(m.Answer), tc.records)
			}
			if a := m.Answer[0].(*dns.A).A.String(); a != "192.0.2.12" {
				t.Errorf("TCP answer starts with %s, want the VIP", a)
			}
		})
	}
	if got := counterValue(t, reg, "pep_dns_truncations_total", nil); got != 2 {
		t.Errorf("pep_dns_truncations_total = %v, want 2", got)
	}
}

// TestDnsmasqRefusedAndAny checks the subscriber check and RFC 8482.
func TestDnsmasqRefusedAndAny(t *testing.T) {
	up := startDnsmasq(t, dnsmasqZone())
	_, addr, reg := startProxy(t, defaultOptions(up)) // subscribers: 127.0.0.1/32
	for _, tcp := range []bool{false, true} {
		m := unpack(t, rawExchange(t, addr, pack(t, query("www.foo.com.", dns.TypeA, true, false)), tcp, net.ParseIP("127.0.0.2")))
		if m.Rcode != dns.RcodeRefused || len(m.Answer) != 0 {
			t.Errorf("tcp=%v: from 127.0.0.2: %s with %d records, want REFUSED and none", tcp, dns.RcodeToString[m.Rcode], len(m.Answer))
		}
		m = unpack(t, rawExchange(t, addr, pack(t, query("www.foo.com.", dns.TypeANY, true, false)), tcp, nil))
		if got, want := rrStrings(m.Answer), []string{`www.foo.com. 8482 IN HINFO "RFC8482" ""`}; !slices.Equal(got, want) {
			t.Errorf("tcp=%v: ANY answer %q, want %q", tcp, got, want)
		}
	}
	if got := counterValue(t, reg, "pep_dns_queries_total", map[string]string{"type": "A", "outcome": "refused"}); got != 2 {
		t.Errorf(`pep_dns_queries_total{type="A",outcome="refused"} = %v, want 2`, got)
	}
}

// TestDig checks the proxy with dig, a client that is not ours: the
// rewritten order, and dig's own retry over TCP after TC.
func TestDig(t *testing.T) {
	dig, err := exec.LookPath("dig")
	if err != nil {
		t.Skip("dig not installed (apt-get install -y dnsutils)")
	}
	up := startDnsmasq(t, dnsmasqZone())
	_, addr, _ := startProxy(t, defaultOptions(up))
	host, port, _ := net.SplitHostPort(addr)
	run := func(args ...string) []string {
		out, err := exec.Command(dig, append([]string{"@" + host, "-p", port, "+short", "+tries=1", "+time=5"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("dig %v: %v\n%s", args, err, out)
		}
		return strings.Fields(string(out))
	}
	if got, want := run("www.foo.com", "A"), []string{"192.0.2.12", "198.19.0.10", "198.19.0.11"}; !slices.Equal(got, want) {
		t.Errorf("dig www.foo.com: %q, want %q", got, want)
	}
	if got := run("+noedns", "big.foo.com", "A"); len(got) != 121 || got[0] != "192.0.2.12" {
		t.Errorf("dig +noedns big.foo.com: %d addresses starting %q, want 121 starting with the VIP", len(got), got[:min(1, len(got))])
	}
	if got := run("www.foo.com", "AAAA"); len(got) != 0 {
		t.Errorf("dig www.foo.com AAAA: %q, want nothing (aaaa: filter)", got)
	}
}

// TestSERVFAIL checks the answer when no resolver answers.
func TestSERVFAIL(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0") // a resolver that never answers
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	o := defaultOptions(pc.LocalAddr().String())
	o.Timeout, o.Attempts = 100*time.Millisecond, 2
	_, addr, reg := startProxy(t, o)
	q := query("www.foo.com.", dns.TypeA, true, false)
	m := unpack(t, rawExchange(t, addr, pack(t, q), false, nil))
	if m.Rcode != dns.RcodeServerFailure || m.Id != q.Id || len(m.Question) != 1 || m.Question[0] != q.Question[0] {
		t.Errorf("got %s id=%#x question %v, want SERVFAIL to the question asked", dns.RcodeToString[m.Rcode], m.Id, m.Question)
	}
	if got := counterValue(t, reg, "pep_dns_upstream_errors_total", map[string]string{"reason": "timeout"}); got != 2 {
		t.Errorf(`pep_dns_upstream_errors_total{reason="timeout"} = %v, want 2`, got)
	}
}

// TestMalformedUpstream checks that a malformed answer and an answer with
// another ID are skipped and the real answer is still taken.
func TestMalformedUpstream(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() { // a resolver that sends garbage first
		buf := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := new(dns.Msg)
			if q.Unpack(buf[:n]) != nil {
				continue
			}
			r := new(dns.Msg)
			r.SetReply(q)
			r.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 10},
				A: net.ParseIP("198.19.0.10")}}
			good, _ := r.Pack()
			pc.WriteTo(good[:len(good)-3], from) // right ID, last record cut
			other := slices.Clone(good)
			binary.BigEndian.PutUint16(other, q.Id+1)
			pc.WriteTo(other, from)                  // another ID
			pc.WriteTo([]byte{buf[0], buf[1]}, from) // two bytes
			pc.WriteTo(good, from)
		}
	}()
	_, addr, reg := startProxy(t, defaultOptions(pc.LocalAddr().String()))
	m := unpack(t, rawExchange(t, addr, pack(t, query("www.foo.com.", dns.TypeA, true, false)), false, nil))
	want := []string{"www.foo.com. 86400 IN A 192.0.2.12", "www.foo.com. 86400 IN A 198.19.0.10"}
	if got := rrStrings(m.Answer); !slices.Equal(got, want) {
		t.Errorf("answer %q, want %q", got, want)
	}
	for reason, n := range map[string]float64{"malformed": 1, "mismatch": 2} {
		if got := counterValue(t, reg, "pep_dns_upstream_errors_total", map[string]string{"reason": reason}); got != n {
			t.Errorf(`pep_dns_upstream_errors_total{reason=%q} = %v, want %v`, reason, got, n)
		}
	}
}

// TestWildcardSource checks that a proxy on a socket bound to the
// unspecified address (pepd's default ":5353") answers from the address
// the query was sent to: the client's connected socket takes nothing
// else. 127.0.0.2 is not the source the kernel would pick for a reply on
// lo (127.0.0.1). The dual-stack socket gets the IPv4 query v4-mapped.
func TestWildcardSource(t *testing.T) {
	up := startDnsmasq(t, dnsmasqZone())
	for _, listen := range []string{"0.0.0.0:0", "[::]:0"} {
		t.Run(listen, func(t *testing.T) {
			o := defaultOptions(up)
			o.Guard = guard.New(guard.Options{Subscribers: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
			o.Logger = testLogger(t)
			p, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			pc, err := net.ListenPacket("udp", listen)
			if err != nil {
				t.Skipf("no socket on %s: %v", listen, err)
			}
			done := make(chan error, 1)
			go func() { done <- p.Serve(pc, nil) }()
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := p.Shutdown(ctx); err != nil {
					t.Errorf("shutdown: %v", err)
				}
				<-done
			})
			port := pc.LocalAddr().(*net.UDPAddr).Port
			for _, to := range []string{"127.0.0.1", "127.0.0.2"} {
				q := query("www.other.net.", dns.TypeA, true, false)
				m := unpack(t, rawExchange(t, net.JoinHostPort(to, strconv.Itoa(port)), pack(t, q), false, nil))
				if got, want := rrStrings(m.Answer), []string{"www.other.net. 10 IN A 198.19.0.30"}; m.Id != q.Id || !slices.Equal(got, want) {
					t.Errorf("to %s: id %#x answer %q, want id %#x and %q", to, m.Id, got, q.Id, want)
				}
			}
		})
	}
}

// TestMaxInflight checks the bound on queries waiting upstream: with
// max_inflight 1 and a resolver that never answers, the first query holds
// the only slot for its two attempts (2 x 1 s, scaled) while the second
// gives up after one timeout (1 s) without reaching the resolver; both get
// SERVFAIL. The second query must arrive while the first holds the slot:
// 1 s, not 200 ms, leaves a loaded machine room to send it.
func TestMaxInflight(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var seen atomic.Int32
	arrived := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			seen.Add(1)
			select {
			case arrived <- struct{}{}:
			default:
			}
		}
	}()
	o := defaultOptions(pc.LocalAddr().String())
	testenv.Log(t)
	o.Timeout, o.Attempts, o.MaxInflight = testenv.Scale(time.Second), 2, 1
	_, addr, reg := startProxy(t, o)
	first := make(chan *dns.Msg)
	go func() {
		first <- unpack(t, rawExchange(t, addr, pack(t, query("www.foo.com.", dns.TypeA, true, false)), false, nil))
	}()
	<-arrived // the first query holds the slot
	second := unpack(t, rawExchange(t, addr, pack(t, query("www.other.net.", dns.TypeA, true, false)), false, nil))
	if m := <-first; m.Rcode != dns.RcodeServerFailure || second.Rcode != dns.RcodeServerFailure {
		t.Errorf("rcodes %s and %s, want SERVFAIL twice", dns.RcodeToString[m.Rcode], dns.RcodeToString[second.Rcode])
	}
	if n := seen.Load(); n != 2 {
		t.Errorf("resolver saw %d queries, want 2 (the first query's two attempts)", n)
	}
	if got := counterValue(t, reg, "pep_dns_upstream_errors_total", map[string]string{"reason": "busy"}); got != 1 {
		t.Errorf(`pep_dns_upstream_errors_total{reason="busy"} = %v, want 1`, got)
	}
}

// TestRetryPolicy checks that the UDP fast path (a client's query through
// the proxy) and the blocking Upstream.Exchange follow the one retry
// policy: attempt n goes to resolver n mod 2, Attempts in all, then the
// client gets SERVFAIL and Exchange an error.
func TestRetryPolicy(t *testing.T) {
	var resolvers []string
	var got [2]atomic.Int32
	for i := range got {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0") // a resolver that counts and never answers
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		resolvers = append(resolvers, pc.LocalAddr().String())
		go func() {
			buf := make([]byte, 4096)
			for {
				if _, _, err := pc.ReadFrom(buf); err != nil {
					return
				}
				got[i].Add(1)
			}
		}()
	}
	counts := func() [2]int32 { return [2]int32{got[0].Swap(0), got[1].Swap(0)} }
	o := defaultOptions(resolvers[0])
	o.Resolvers, o.Timeout, o.Attempts = resolvers, 100*time.Millisecond, 3
	p, addr, _ := startProxy(t, o)
	m := unpack(t, rawExchange(t, addr, pack(t, query("www.foo.com.", dns.TypeA, true, false)), false, nil))
	if m.Rcode != dns.RcodeServerFailure {
		t.Errorf("fast path: %s, want SERVFAIL", dns.RcodeToString[m.Rcode])
	}
	if c := counts(); c != [2]int32{2, 1} {
		t.Errorf("fast path: queries per resolver %v, want [2 1]", c)
	}
	if _, err := p.up.Exchange(context.Background(), pack(t, query("www.foo.com.", dns.TypeA, false, false)), false); err == nil {
		t.Error("Exchange: no error from resolvers that never answer")
	}
	if c := counts(); c != [2]int32{2, 1} {
		t.Errorf("Exchange: queries per resolver %v, want [2 1]", c)
	}
}
