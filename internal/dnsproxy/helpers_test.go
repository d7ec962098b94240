package dnsproxy

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"pep/internal/dnsproxy/dnsmasqtest"
	"pep/internal/guard"
	"pep/internal/testenv"
)

// tWriter sends log lines to t.Log.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func startDnsmasq(t testing.TB, lines []string) string { return dnsmasqtest.Start(t, lines) }

// startProxy starts a Proxy on a free loopback port for UDP and TCP with
// o (Guard defaults to subscribers 127.0.0.1/32) and returns it and its
// address.
func startProxy(t testing.TB, o Options) (*Proxy, string, *prometheus.Registry) {
	t.Helper()
	if o.Guard == nil {
		o.Guard = guard.New(guard.Options{Subscribers: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	}
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	reg := prometheus.NewRegistry()
	o.Registerer = reg
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	pc, ln, err := testenv.ListenDNS("127.0.0.1", "0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(pc, ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil && err != ErrServerClosed {
			t.Errorf("serve: %v", err)
		}
	})
	return p, pc.LocalAddr().String(), reg
}

// defaultOptions are the Options of pepd's defaults with the given
// resolver.
func defaultOptions(resolver string) Options {
	return Options{
		VIP: netip.MustParseAddr("192.0.2.12"), VIP6: netip.MustParseAddr("2001:db8::12"),
		Resolvers: []string{resolver}, Config: Config{RewriteDomains: []string{"foo.com"},
			VIPTTL: 24 * time.Hour, TTLPolicy: TTLRRset, AAAA: AAAAFilter, HTTPSRecords: HTTPSFilter,
			Timeout: 2 * time.Second, Attempts: 2, MaxInflight: 64},
	}
}

// rawExchange sends wire over UDP (or TCP) to addr and returns the answer
// bytes. From may be nil (kernel chooses the source).
func rawExchange(t testing.TB, addr string, wire []byte, tcp bool, from net.IP) []byte {
	t.Helper()
	d := net.Dialer{Timeout: testenv.Scale(5 * time.Second)}
	network := "udp"
	if tcp {
		network = "tcp"
	}
	if from != nil {
		if tcp {
			d.LocalAddr = &net.TCPAddr{IP: from}
		} else {
			d.LocalAddr = &net.UDPAddr{IP: from}
		}
	}
	c, err := d.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(testenv.Scale(10 * time.Second)))
	if tcp {
		b := append([]byte{byte(len(wire) >> 8), byte(len(wire))}, wire...)
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		var l [2]byte
		if _, err := c.Read(l[:]); err != nil {
			t.Fatal(err)
		}
		ans := make([]byte, int(l[0])<<8|int(l[1]))
		for n := 0; n < len(ans); {
			k, err := c.Read(ans[n:])
			if err != nil {
				t.Fatal(err)
			}
			n += k
		}
		return ans
	}
	if _, err := c.Write(wire); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

func unpack(t testing.TB, b []byte) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		t.Fatalf("answer does not unpack: %v", err)
	}
	return m
}

// rrStrings renders records one a line in presentation form with tabs
// turned to single spaces.
func rrStrings(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		out = append(out, strings.Join(strings.Fields(rr.String()), " "))
	}
	return out
}
