package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
)

// TestTPROXYFailsOpen checks, in namespaces and against the kernel, what the
// shipped ruleset does with and without a listener on pepd's ports: the claim
// "TPROXY to a port with no listener lets flows continue to the origin" holds
// for this ruleset because the mark is set after `tproxy to` (nft_tproxy
// BREAKs when it finds no transparent socket), and does not hold when the mark
// comes first (the case "mark before tproxy").
func TestTPROXYFailsOpen(t *testing.T) {
	needRoot(t)
	tp := newTopo(t)
	tp.serveOrigin(t, nil)

	markFirst := bytes.ReplaceAll(Ruleset,
		[]byte("tcp dport 80 tproxy to :$HTTP_PORT meta mark set $MARK counter accept"),
		[]byte("tcp dport 80 meta mark set $MARK tproxy to :$HTTP_PORT counter accept"))
	if bytes.Equal(markFirst, Ruleset) {
		t.Fatal("the port 80 rule changed: update the test's mark-first variant")
	}

	// pep answers HTTP on a gateway listener with the original destination
	// it saw (the accepted socket's local address).
	pep := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "pep saw "+r.Context().Value(http.LocalAddrContextKey).(net.Addr).String())
	})

	cases := []struct {
		name     string
		rules    []byte
		listener string // "", "transparent", "plain"
		url      string
		want     string // body, "refused" or "timeout" (2 s)
	}{
		{"port 80 with a transparent listener: steered", Ruleset, "transparent",
			"http://" + originHTTP + "/", "pep saw " + originHTTP + ":80"},
		{"port 80 without a listener: forwarded to the origin", Ruleset, "",
			"http://" + originHTTP + "/", originSuffix + clientAddr},
		{"port 80 with a listener lacking IP_TRANSPARENT: forwarded", Ruleset, "plain",
			"http://" + originHTTP + "/", originSuffix + clientAddr},
		{"mark before tproxy, no listener: SYNs vanish (fails closed)", markFirst, "",
			"http://" + originHTTP + "/", "timeout"},
		{"VIP:80 with a transparent listener: steered", Ruleset, "transparent",
			"http://" + testVIP + "/", "pep saw " + testVIP + ":80"},
		{"VIP:80 without a listener: refused at once", Ruleset, "",
			"http://" + testVIP + "/", "refused"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tp.loadRuleset(t, c.rules)
			if c.listener != "" {
				l := tp.gw.listen(t, ":"+strconv.Itoa(tproxyPort), c.listener == "transparent")
				srv := &http.Server{Handler: pep}
				go srv.Serve(l)
				defer srv.Close()
			}
			got, err := get(tp.clientHTTP(2*time.Second), c.url)
			var ne net.Error
			switch {
			case errors.Is(err, syscall.ECONNREFUSED):
				got, err = "refused", nil
			case errors.As(err, &ne) && ne.Timeout():
				got, err = "timeout", nil
			}
			if err != nil {
				t.Fatalf("GET %s: %v", c.url, err)
			}
			if got != c.want {
				t.Errorf("GET %s = %q, want %q", c.url, got, c.want)
			}
		})
	}

}

// TestDNSRedirectGuarded checks the DNS half of the ruleset: REDIRECT to
// pepd's DNS port while the dns_alive set holds the protocol, the subscriber's
// own resolver otherwise; and why not TPROXY: a transparent socket cannot
// answer from the original destination's port.
func TestDNSRedirectGuarded(t *testing.T) {
	needRoot(t)
	tp := newTopo(t)
	serveDNS(t, tp.origin, "udp", originDNS+":53", "198.19.0.1")
	serveDNS(t, tp.origin, "tcp", originDNS+":53", "198.19.0.1")
	const fromPep = "192.0.2.12"
	tp.loadRuleset(t, Ruleset)

	t.Run("no element: the subscriber's resolver answers", func(t *testing.T) {
		for _, proto := range []string{"udp", "tcp"} {
			if got, err := lookupA(tp.client, proto, originDNS+":53"); err != nil || got != "198.19.0.1" {
				t.Errorf("%s: answer %q, %v; want 198.19.0.1", proto, got, err)
			}
		}
	})
	t.Run("element, no listener: refused until the element expires", func(t *testing.T) {
		tp.gw.exec(t, "nft", "add", "element", "ip", "pep", "dns_alive", "{ udp timeout 1h }")
		defer tp.gw.exec(t, "nft", "flush", "set", "ip", "pep", "dns_alive")
		_, err := lookupA(tp.client, "udp", originDNS+":53")
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("err = %v, want connection refused (ICMP port unreachable)", err)
		}
	})
	t.Run("element and listener: redirected to pepd, answered from the original destination", func(t *testing.T) {
		for _, proto := range []string{"udp", "tcp"} {
			serveDNS(t, tp.gw, proto, ":"+strconv.Itoa(dnsPort), fromPep)
			tp.gw.exec(t, "nft", "add", "element", "ip", "pep", "dns_alive", "{ "+proto+" timeout 1h }")
			if got, err := lookupA(tp.client, proto, originDNS+":53"); err != nil || got != fromPep {
				t.Errorf("%s: answer %q, %v; want %s", proto, got, err, fromPep)
			}
		}
		tp.gw.exec(t, "nft", "flush", "set", "ip", "pep", "dns_alive")
	})
	t.Run("TPROXY to a transparent UDP socket: the answer leaves from pepd's port", func(t *testing.T) {
		tp.gw.exec(t, "nft", "add table ip t; add chain ip t p { type filter hook prerouting priority mangle; }; "+
			"add rule ip t p udp dport 53 tproxy to :5354 meta mark set 1 accept")
		defer tp.gw.exec(t, "nft", "delete", "table", "ip", "t")
		src := serveTransparentUDP(t, tp.gw, ":5354", []byte("pep"))
		from, err := udpFrom(tp.client, originDNS+":53")
		if err != nil {
			t.Fatal(err)
		}
		if got := (<-src).Addr(); got != netip.MustParseAddr(originDNS) {
			t.Errorf("pep saw the query for %v, want %s", got, originDNS)
		}
		// IP_PKTINFO set the address; the port is the socket's own, so a
		// stub's connected socket (glibc, Chromium) drops the answer.
		if want := netip.MustParseAddrPort(originDNS + ":5354"); from != want {
			t.Errorf("answer from %v, want %v", from, want)
		}
	})
}

// serveDNS answers every A question on addr (proto "udp" or "tcp") in n
// with one record holding answer.
func serveDNS(t *testing.T, n *netNS, proto, addr, answer string) {
	t.Helper()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		if len(q.Question) == 1 && q.Question[0].Qtype == dns.TypeA {
			rr, _ := dns.NewRR(q.Question[0].Name + " 60 IN A " + answer)
			m.Answer = append(m.Answer, rr)
		}
		w.WriteMsg(m)
	})
	srv := &dns.Server{Handler: h}
	err := n.do(func() (err error) {
		if proto == "udp" {
			srv.PacketConn, err = net.ListenPacket("udp4", addr)
		} else {
			srv.Listener, err = net.Listen("tcp4", addr)
		}
		return err
	})
	if err != nil {
		t.Fatalf("dns %s %s in %s: %v", proto, addr, n.name, err)
	}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
}

// lookupA asks server (host:port) for www.example.com A over proto from a
// socket in n, as a stub does (a connected UDP socket, a fresh port each
// time), and returns the first address.
func lookupA(n *netNS, proto, server string) (string, error) {
	var conn net.Conn
	if err := n.do(func() (err error) { conn, err = net.DialTimeout(proto, server, 2*time.Second); return err }); err != nil {
		return "", err
	}
	defer conn.Close()
	c := &dns.Client{Net: proto, Timeout: 2 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	r, _, err := c.ExchangeWithConn(m, &dns.Conn{Conn: conn})
	if err != nil {
		return "", err
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String(), nil
		}
	}
	return "", fmt.Errorf("no A in %v", r)
}

// serveTransparentUDP answers each datagram steered to addr in n with reply,
// sent from the datagram's original destination: IP_TRANSPARENT lets the
// socket send from an address that is not local, IP_PKTINFO names it. This
// is what pepd's DNS listener must do to take TPROXY-steered UDP.
func serveTransparentUDP(t *testing.T, n *netNS, addr string, reply []byte) <-chan netip.AddrPort {
	t.Helper()
	var c net.PacketConn
	err := n.do(func() (err error) {
		lc := net.ListenConfig{Control: setTransparent}
		c, err = lc.ListenPacket(t.Context(), "udp4", addr)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	pc := ipv4.NewPacketConn(c)
	if err := pc.SetControlMessage(ipv4.FlagDst, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	dst := make(chan netip.AddrPort, 16)
	go func() {
		buf := make([]byte, 1500)
		for {
			_, cm, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var out *ipv4.ControlMessage
			if cm != nil {
				out = &ipv4.ControlMessage{Src: cm.Dst}
				a, _ := netip.AddrFromSlice(cm.Dst.To4())
				select {
				case dst <- netip.AddrPortFrom(a, 0):
				default:
				}
			}
			pc.WriteTo(reply, out, from)
		}
	}()
	return dst
}

// udpFrom sends a datagram to addr from an unconnected UDP socket in n
// and returns the source of the first answer.
func udpFrom(n *netNS, addr string) (netip.AddrPort, error) {
	var pc net.PacketConn
	if err := n.do(func() (err error) { pc, err = net.ListenPacket("udp4", ":0"); return err }); err != nil {
		return netip.AddrPort{}, err
	}
	defer pc.Close()
	to := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr))
	buf := make([]byte, 1500)
	for range 3 {
		if _, err := pc.WriteTo([]byte("query"), to); err != nil {
			return netip.AddrPort{}, err
		}
		pc.SetReadDeadline(time.Now().Add(time.Second))
		_, from, err := pc.ReadFrom(buf)
		if err == nil {
			return from.(*net.UDPAddr).AddrPort(), nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return netip.AddrPort{}, err
		}
	}
	return netip.AddrPort{}, errors.New("udp: no answer from " + addr + " in 3 tries")
}
