package dnsproxy

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// FuzzRewrite feeds arbitrary upstream answers to the rewriter under every
// policy: it never panics, never changes its input, and a rewritten
// message always packs and parses again.
func FuzzRewrite(f *testing.F) {
	for _, m := range []*dns.Msg{
		answer(f, query("www.foo.com.", dns.TypeA, true, false), "www.foo.com. 10 IN A 198.19.0.10"),
		answer(f, query("www.chain.com.", dns.TypeA, false, false), "www.chain.com. 30 IN CNAME edge.cdn.net.", "edge.cdn.net. 10 IN A 198.19.0.20"),
		answer(f, query("www.foo.com.", dns.TypeAAAA, true, false), "www.foo.com. 10 IN AAAA 2001:db8::10"),
		answer(f, query("www.foo.com.", dns.TypeHTTPS, true, false), `www.foo.com. 10 IN HTTPS 1 . alpn="h3,h2" ipv4hint="198.19.0.10" ech="3q2+7w==" ipv6hint="2001:db8::10"`),
	} {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(0))
	}
	f.Fuzz(func(t *testing.T, wire []byte, variant uint8) {
		resp := new(dns.Msg)
		if resp.Unpack(wire) != nil || len(resp.Question) != 1 {
			return
		}
		q := new(dns.Msg)
		q.SetQuestion(resp.Question[0].Name, resp.Question[0].Qtype)
		q.Question[0].Qclass = resp.Question[0].Qclass
		rw := testRewriter()
		rw.TTL = []string{TTLRRset, TTLOrigin, TTLMin}[variant%3]
		rw.AAAA = []string{AAAAPass, AAAAFilter, AAAAVIP6}[variant/3%3]
		rw.HTTPS = []string{HTTPSFilter, HTTPSHints}[variant/9%2]
		before := resp.String()
		out, _ := rw.Rewrite(q, resp)
		if resp.String() != before {
			t.Fatalf("Rewrite modified its input")
		}
		if out == nil {
			return
		}
		b, err := out.Pack()
		if err != nil {
			t.Fatalf("rewritten message does not pack: %v\n%v", err, out)
		}
		back := new(dns.Msg)
		if err := back.Unpack(b); err != nil {
			t.Fatalf("rewritten message does not parse: %v\n%v", err, out)
		}
		if back.AuthenticatedData {
			t.Fatalf("rewritten message has AD")
		}
		if len(back.Question) != 1 || back.Question[0] != resp.Question[0] {
			t.Fatalf("question changed: %v", back.Question)
		}
	})
}

// FuzzFraming: the framing checker never panics and accepts whatever
// miekg/dns packs.
func FuzzFraming(f *testing.F) {
	m := answer(f, query("www.foo.com.", dns.TypeA, true, false), "www.foo.com. 10 IN A 198.19.0.10")
	b, _ := m.Pack()
	f.Add(b)
	f.Fuzz(func(t *testing.T, wire []byte) {
		_, err := checkFraming(wire)
		msg := new(dns.Msg)
		if err != nil || msg.Unpack(wire) != nil || len(msg.Question) != 1 {
			return
		}
		packed, err := msg.Pack()
		if err != nil {
			return
		}
		if _, err := checkFraming(packed); err != nil {
			t.Fatalf("miekg/dns packed a message the framing check refuses: %v", err)
		}
	})
}

// FuzzParseQuery: the fast path's query parser never panics, and whatever
// it takes, miekg/dns reads the same way: one question with the same
// name (lower-cased, no trailing dot), type and class, the same DO bit
// and UDP size, and a framing that ends where the message ends.
func FuzzParseQuery(f *testing.F) {
	for _, q := range []*dns.Msg{
		query("www.foo.com.", dns.TypeA, true, false),
		query("WWW.Foo.COM.", dns.TypeAAAA, false, false),
		query("ipv4only.arpa.", dns.TypeA, true, true),
		query(".", dns.TypeNS, false, false),
		query("a\\.b.foo.com.", dns.TypeA, false, false),
	} {
		f.Add(pack(f, q))
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		q, name, ok := parseQuery(wire, nil)
		if !ok {
			return
		}
		m := new(dns.Msg)
		if err := m.Unpack(wire); err != nil {
			t.Fatalf("parseQuery took a message miekg/dns cannot read: %v", err)
		}
		if len(m.Question) != 1 || m.Response || m.Opcode != dns.OpcodeQuery || len(m.Answer) != 0 || len(m.Ns) != 0 {
			t.Fatalf("parseQuery took %v", m)
		}
		want := strings.ToLower(strings.TrimSuffix(m.Question[0].Name, "."))
		if string(name) != want || q.qtype != m.Question[0].Qtype || q.qclass != m.Question[0].Qclass {
			t.Fatalf("parseQuery read %q %d %d, miekg/dns %q %d %d", name, q.qtype, q.qclass, want, m.Question[0].Qtype, m.Question[0].Qclass)
		}
		do, size := false, dns.MinMsgSize
		if o := m.IsEdns0(); o != nil {
			do, size = o.Do(), max(dns.MinMsgSize, int(o.UDPSize()))
		}
		if q.do != do || q.udpSize != size {
			t.Fatalf("parseQuery read DO %v size %d, miekg/dns DO %v size %d", q.do, q.udpSize, do, size)
		}
		if qend, err := questionEnd(wire); err != nil || qend != q.qend {
			t.Fatalf("question ends at %d, questionEnd says %d (%v)", q.qend, qend, err)
		}
	})
}
