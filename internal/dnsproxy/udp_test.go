package dnsproxy

import (
	"net"
	"testing"

	"github.com/miekg/dns"
)

// TestParseQuery checks which queries the fast path takes and what it
// reads from them; the rest go to miekg/dns (slow path).
func TestParseQuery(t *testing.T) {
	with := func(q *dns.Msg, f func(*dns.Msg)) *dns.Msg { f(q); return q }
	a := &dns.A{Hdr: dns.RR_Header{Name: "x.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: net.IPv4(192, 0, 2, 1)}
	cases := []struct {
		name  string
		wire  []byte
		ok    bool
		qname string
		qtype uint16
		do    bool
		size  int
	}{
		{"A with EDNS0", pack(t, query("www.foo.com.", dns.TypeA, true, false)), true, "www.foo.com", dns.TypeA, false, 1232},
		{"upper case, no EDNS0", pack(t, query("WWW.Foo.COM.", dns.TypeAAAA, false, false)), true, "www.foo.com", dns.TypeAAAA, false, 512},
		{"DO bit", pack(t, query("ipv4only.arpa.", dns.TypeA, true, true)), true, "ipv4only.arpa", dns.TypeA, true, 1232},
		{"EDNS0 size below 512", pack(t, with(query("a.b.", dns.TypeA, false, false), func(m *dns.Msg) { m.SetEdns0(100, false) })), true, "a.b", dns.TypeA, false, 512},
		{"root", pack(t, query(".", dns.TypeNS, false, false)), true, "", dns.TypeNS, false, 512},
		{"escaped dot in a label", pack(t, query(`a\.b.foo.com.`, dns.TypeA, false, false)), false, "", 0, false, 0},
		{"response", pack(t, with(query("a.b.", dns.TypeA, false, false), func(m *dns.Msg) { m.Response = true })), false, "", 0, false, 0},
		{"opcode NOTIFY", pack(t, with(query("a.b.", dns.TypeSOA, false, false), func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify })), false, "", 0, false, 0},
		{"answer record", pack(t, with(query("a.b.", dns.TypeA, false, false), func(m *dns.Msg) { m.Answer = []dns.RR{a} })), false, "", 0, false, 0},
		{"additional record other than OPT", pack(t, with(query("a.b.", dns.TypeA, false, false), func(m *dns.Msg) { m.Extra = []dns.RR{a} })), false, "", 0, false, 0},
		{"byte after the question", append(pack(t, query("a.b.", dns.TypeA, false, false)), 0), false, "", 0, false, 0},
		{"compressed question name", []byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 12, 0, 1, 0, 1}, false, "", 0, false, 0},
		{"question cut short", pack(t, query("a.b.", dns.TypeA, false, false))[:17], false, "", 0, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, name, ok := parseQuery(tc.wire, nil)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if string(name) != tc.qname || q.qtype != tc.qtype || q.do != tc.do || q.udpSize != tc.size {
				t.Errorf("read %q type %d DO %v size %d, want %q type %d DO %v size %d",
					name, q.qtype, q.do, q.udpSize, tc.qname, tc.qtype, tc.do, tc.size)
			}
		})
	}
}
