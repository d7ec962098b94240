package dnsproxy

import (
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// TestLossyResolverUnderLoad drives many concurrent queries through the
// fast path to a resolver that drops every third query: every client
// query gets exactly one answer, with its ID and question, either the
// resolver's (at the first or second attempt) or SERVFAIL; the timeouts
// and retries of the shared upstream sockets lose nothing.
func TestLossyResolverUnderLoad(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 4096)
		for n := 0; ; n++ {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := new(dns.Msg)
			if q.Unpack(buf[:k]) != nil || n%3 == 2 {
				continue
			}
			r := new(dns.Msg)
			r.SetReply(q)
			r.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 10},
				A: net.IPv4(198, 19, 0, 10)}}
			b, _ := r.Pack()
			pc.WriteTo(b, from)
		}
	}()
	o := defaultOptions(pc.LocalAddr().String())
	o.Timeout, o.Attempts, o.MaxInflight = 100*time.Millisecond, 2, 4096
	o.Logger = slog.New(slog.DiscardHandler)
	_, addr, reg := startProxy(t, o)

	const clients, each = 8, 100
	var answered, servfail atomic.Int32
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("udp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			// A window of queries in flight per client, so that no
			// socket's receive buffer overflows (the kernel would drop
			// datagrams, which is not the proxy's doing).
			const window = 10
			sent := map[uint16]string{}
			next := 0
			send := func() error {
				q := query(fmt.Sprintf("n%d-%d.other.net.", c, next), dns.TypeA, true, false)
				q.Id = uint16(c*each + next)
				next++
				sent[q.Id] = q.Question[0].Name
				b, _ := q.Pack()
				_, err := conn.Write(b)
				return err
			}
			for next < window {
				if err := send(); err != nil {
					t.Error(err)
					return
				}
			}
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, 4096)
			for len(sent) > 0 {
				n, err := conn.Read(buf)
				if err != nil {
					t.Errorf("client %d: %d queries unanswered: %v", c, len(sent), err)
					return
				}
				m := new(dns.Msg)
				if err := m.Unpack(buf[:n]); err != nil {
					t.Errorf("answer does not unpack: %v", err)
					continue
				}
				name, ok := sent[m.Id]
				if !ok || len(m.Question) != 1 || m.Question[0].Name != name {
					t.Errorf("answer id %#x question %v: no such query outstanding", m.Id, m.Question)
					continue
				}
				delete(sent, m.Id)
				if next < each {
					if err := send(); err != nil {
						t.Error(err)
						return
					}
				}
				switch {
				case m.Rcode == dns.RcodeServerFailure:
					servfail.Add(1)
				case m.Rcode == dns.RcodeSuccess && len(m.Answer) == 1:
					answered.Add(1)
				default:
					t.Errorf("answer %v", m)
				}
			}
		}()
	}
	wg.Wait()
	if a, s := answered.Load(), servfail.Load(); a+s != clients*each || a == 0 || s == 0 {
		t.Errorf("%d answered, %d SERVFAIL, want %d in all, some of each", a, s, clients*each)
	}
	if got := counterValue(t, reg, "pep_dns_servfails_total", map[string]string{"source": "pepd"}); got != float64(servfail.Load()) {
		t.Errorf(`pep_dns_servfails_total{source="pepd"} = %v, want %d`, got, servfail.Load())
	}
}
