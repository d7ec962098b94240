package netem

import (
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// frame decodes a hex dump written out in a test (spaces ignored).
func frame(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic("bad hex in test: " + err.Error())
	}
	return b
}

const (
	eth4 = "020000000001 020000000002 0800 "
	eth6 = "020000000001 020000000002 86dd "
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		hex  string
		want pktInfo
	}{
		{
			name: "IPv4 TCP SYN to 198.19.0.7:80",
			hex: eth4 + "4500 003c 0001 4000 4006 0000 c6120002 c6130007" +
				"c350 0050 00000001 00000000 a002 ffff 0000 0000" + strings.Repeat("00", 20),
			want: pktInfo{ip: true, size: 60, dst: netip.MustParseAddr("198.19.0.7"), syn: true},
		},
		{
			name: "IPv4 TCP SYN-ACK is not a SYN",
			hex: eth4 + "4500 003c 0001 4000 4006 0000 c6130007 c6120002" +
				"0050 c350 00000001 00000002 a012 ffff 0000 0000" + strings.Repeat("00", 20),
			want: pktInfo{ip: true, size: 60, dst: netip.MustParseAddr("198.18.0.2")},
		},
		{
			name: "IPv4 UDP DNS query to port 53",
			hex: eth4 + "4500 0029 0002 0000 4011 0000 c6120002 c6120101" +
				"d431 0035 0015 0000" + "1234 0100 0001 0000 0000 0000 00",
			want: pktInfo{ip: true, size: 41, dst: netip.MustParseAddr("198.18.1.1"), dns: true},
		},
		{
			name: "IPv4 DNS answer from port 53 is not a query",
			hex: eth4 + "4500 0029 0002 0000 4011 0000 c6120101 c6120002" +
				"0035 d431 0015 0000" + "1234 8180 0001 0000 0000 0000 00",
			want: pktInfo{ip: true, size: 41, dst: netip.MustParseAddr("198.18.0.2")},
		},
		{
			name: "IPv4 TCP DNS with payload counts, its bare ACK does not",
			hex: eth4 + "4500 002e 0003 4000 4006 0000 c6120002 c6120101" +
				"c351 0035 00000001 00000001 5018 ffff 0000 0000" + "0004 1234 0100",
			want: pktInfo{ip: true, size: 46, dst: netip.MustParseAddr("198.18.1.1"), dns: true},
		},
		{
			name: "IPv4 TCP ACK to port 53 without payload",
			hex: eth4 + "4500 0028 0003 4000 4006 0000 c6120002 c6120101" +
				"c351 0035 00000001 00000001 5010 ffff 0000 0000",
			want: pktInfo{ip: true, size: 40, dst: netip.MustParseAddr("198.18.1.1")},
		},
		{
			name: "IPv4 later fragment: size only",
			hex: eth4 + "4500 0030 0004 00b9 4011 0000 c6120002 c6120101" +
				"0035 0035 0010 0000" + strings.Repeat("00", 20),
			want: pktInfo{ip: true, size: 48, dst: netip.MustParseAddr("198.18.1.1")},
		},
		{
			name: "Ethernet padding is not counted: size from the IP header",
			hex: eth4 + "4500 001c 0005 0000 4011 0000 c6120002 c6120101" +
				"1000 2000 0008 0000" + strings.Repeat("00", 18),
			want: pktInfo{ip: true, size: 28, dst: netip.MustParseAddr("198.18.1.1")},
		},
		{
			name: "IPv6 TCP SYN behind a hop-by-hop header",
			hex: eth6 + "6000 0000 0020 0040 " + "2001 0db8 0000 0000 0000 0000 0000 0002" +
				"2001 0db8 0000 0000 0000 0000 0000 0007" +
				"0600 0000 0000 0000" + // hop-by-hop: next TCP, 8 bytes
				"c350 0050 00000001 00000000 5002 ffff 0000 0000",
			want: pktInfo{ip: true, size: 72, dst: netip.MustParseAddr("2001:db8::7"), syn: true},
		},
		{
			name: "IPv6 UDP DNS query",
			hex: eth6 + "6000 0000 0008 1140 " + "2001 0db8 0000 0000 0000 0000 0000 0002" +
				"2001 0db8 0000 0000 0000 0000 0000 0053" + "d431 0035 0008 0000",
			want: pktInfo{ip: true, size: 48, dst: netip.MustParseAddr("2001:db8::53"), dns: true},
		},
		{
			name: "802.1Q tagged IPv4 SYN",
			hex: "020000000001 020000000002 8100 0064 0800 " +
				"4500 0028 0001 4000 4006 0000 c6120002 c6130007" +
				"c350 01bb 00000001 00000000 5002 ffff 0000 0000",
			want: pktInfo{ip: true, size: 40, dst: netip.MustParseAddr("198.19.0.7"), syn: true},
		},
		{
			name: "ARP is not IP",
			hex:  "ffffffffffff 020000000002 0806 0001 0800 0604 0001 020000000002 c6120002 000000000000 c6120001",
			want: pktInfo{},
		},
		{
			name: "truncated IPv4 header",
			hex:  eth4 + "4500 003c 0001",
			want: pktInfo{},
		},
		{
			name: "truncated TCP header: IP only",
			hex:  eth4 + "4500 003c 0001 4000 4006 0000 c6120002 c6130007 c350 0050",
			want: pktInfo{ip: true, size: 60, dst: netip.MustParseAddr("198.19.0.7")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(frame(tc.hex)); got != tc.want {
				t.Fatalf("classify = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func FuzzClassify(f *testing.F) {
	f.Add([]byte{})
	f.Add(frame(eth4 + "4500 003c 0001 4000 4006 0000 c6120002 c6130007" +
		"c350 0050 00000001 00000000 a002 ffff 0000 0000"))
	f.Add(frame(eth6 + "6000 0000 0020 0040 " + strings.Repeat("00", 32) + "0600 0000 0000 0000"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := classify(b) // must not panic
		if !p.ip && (p.syn || p.dns || p.size != 0) {
			t.Fatalf("non-IP frame with L4 facts: %+v", p)
		}
	})
}

func TestCountersSub(t *testing.T) {
	a, b := netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.0.2")
	var d DirCounters
	syn := func(dst netip.Addr) pktInfo { return pktInfo{ip: true, size: 60, dst: dst, syn: true} }
	d.count(syn(a))
	before := Counters{Up: d.clone()}
	d.count(syn(a))
	d.count(syn(b))
	d.count(pktInfo{ip: true, size: 41, dst: b, dns: true})
	d.count(pktInfo{})
	diff := Counters{Up: d.clone()}.Sub(before)
	want := DirCounters{Packets: 3, Bytes: 161, SYNs: 2, DNSQueries: 1, NonIP: 1}
	got := diff.Up
	if got.Packets != want.Packets || got.Bytes != want.Bytes || got.SYNs != want.SYNs ||
		got.DNSQueries != want.DNSQueries || got.NonIP != want.NonIP {
		t.Fatalf("diff = %+v, want %+v", got, want)
	}
	if len(got.ConnsByDst) != 2 || got.ConnsByDst[a] != 1 || got.ConnsByDst[b] != 1 {
		t.Fatalf("ConnsByDst = %v, want %v:1 %v:1", got.ConnsByDst, a, b)
	}
	if diff.Down.ConnsByDst == nil {
		t.Fatal("ConnsByDst of an empty direction is nil, want an empty map")
	}
}

// udpDNS returns an Ethernet frame with an IPv4 UDP datagram to
// 198.18.1.1:53 holding a DNS query for name (type A) with id.
func udpDNS(t *testing.T, id uint16, name string) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	m.Id = id
	payload, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	f := frame(eth4)
	ip := make([]byte, 20)
	ip[0], ip[8], ip[9] = 0x45, 64, protoUDP
	binary.BigEndian.PutUint16(ip[2:4], uint16(20+8+len(payload)))
	copy(ip[12:16], []byte{198, 18, 0, 2})
	copy(ip[16:20], []byte{198, 18, 1, 1})
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[0:2], 40000+id)
	binary.BigEndian.PutUint16(udp[2:4], 53)
	binary.BigEndian.PutUint16(udp[4:6], uint16(8+len(payload)))
	return append(append(append(f, ip...), udp...), payload...)
}

// TestDNSRepeats: a query whose question was sent within DNSRepeatWindow
// (a retransmission: new ID and port, same question; case aside) counts
// in DNSRepeats; another name, another type or the same question later
// does not; a reply (QR set) is not a question.
func TestDNSRepeats(t *testing.T) {
	var d DirCounters
	t0 := time.Unix(1000, 0)
	send := func(f []byte, at time.Time) {
		p := classify(f)
		if !p.dns {
			t.Fatalf("not classified as DNS: %+v", p)
		}
		d.DNSQueries++
		if p.dnsQ != "" {
			d.countQuestion(p.dnsQ, at)
		}
	}
	send(udpDNS(t, 1, "www.site.test"), t0)
	send(udpDNS(t, 2, "WWW.Site.test"), t0.Add(time.Second)) // retransmission
	send(udpDNS(t, 3, "img.site.test"), t0.Add(time.Second))
	send(udpDNS(t, 4, "www.site.test"), t0.Add(time.Second+DNSRepeatWindow)) // asked again later
	if d.DNSQueries != 4 || d.DNSRepeats != 1 {
		t.Errorf("DNSQueries %d, DNSRepeats %d; want 4, 1", d.DNSQueries, d.DNSRepeats)
	}
	reply := udpDNS(t, 5, "www.site.test")
	reply[14+20+8+2] |= 0x80
	if q := classify(reply).dnsQ; q != "" {
		t.Errorf("a reply's question read as a query's: %q", q)
	}
	if q := classify(udpDNS(t, 6, "a.test")).dnsQ; q != "\x01a\x04test\x00\x00\x01\x00\x01" {
		t.Errorf("question %q", q)
	}
	// Through count, with snapshots: the repeat shows in Sub.
	var c DirCounters
	p := classify(udpDNS(t, 7, "x.test"))
	c.count(p)
	before := Counters{Up: c.clone()}
	c.count(classify(udpDNS(t, 8, "x.test")))
	if diff := (Counters{Up: c.clone()}).Sub(before).Up; diff.DNSQueries != 1 || diff.DNSRepeats != 1 {
		t.Errorf("diff DNSQueries %d, DNSRepeats %d; want 1, 1", diff.DNSQueries, diff.DNSRepeats)
	}
}
