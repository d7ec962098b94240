package netem

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vishvananda/netlink"

	"pep/internal/testenv"
)

var (
	testMN = netip.MustParsePrefix("198.18.0.2/24")
	testGW = netip.MustParsePrefix("198.18.0.1/24")
)

// topo is a mobile and a gateway namespace joined by a link namespace.
type topo struct {
	mn, gw string
	spec   LinkSpec
}

// newTopo builds a topology with run-unique names and removes it when t ends.
func newTopo(t testing.TB) topo {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, AF_PACKET); CI runs as root: sudo go test ./netem")
	}
	tp := topo{mn: UniqueName("tm"), gw: UniqueName("tg")}
	for _, ns := range []string{tp.mn, tp.gw} {
		if err := CreateNamespace(ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := DeleteNamespace(ns); err != nil {
				t.Error(err)
			}
		})
		// No IPv6 on the test link: router solicitations, MLD reports and
		// DAD would cross it at their own times and spoil exact counts.
		err := InNamespace(ns, func() error {
			for _, c := range []string{"all", "default"} {
				if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+c+"/disable_ipv6", []byte("1"), 0); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	spec, undo, err := Wire(WireSpec{
		Namespace: UniqueName("tl"),
		A:         WireEnd{Namespace: tp.mn, Interface: "radio0", Addr: testMN},
		B:         WireEnd{Namespace: tp.gw, Interface: "radio0", Addr: testGW},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := undo(); err != nil {
			t.Error(err)
		}
	})
	tp.spec = spec
	return tp
}

// listen opens a listener of network ("tcp4" or "udp4") on the gateway.
func (tp topo) listenTCP(t testing.TB, port int) net.Listener {
	t.Helper()
	var l net.Listener
	err := InNamespace(tp.gw, func() (err error) {
		l, err = net.Listen("tcp4", netip.AddrPortFrom(testGW.Addr(), uint16(port)).String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func (tp topo) listenUDP(t testing.TB, port int) net.PacketConn {
	t.Helper()
	var c net.PacketConn
	err := InNamespace(tp.gw, func() (err error) {
		c, err = net.ListenPacket("udp4", netip.AddrPortFrom(testGW.Addr(), uint16(port)).String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dial connects from the mobile namespace.
func (tp topo) dial(t testing.TB, network, addr string) net.Conn {
	t.Helper()
	var c net.Conn
	err := InNamespace(tp.mn, func() (err error) {
		c, err = net.DialTimeout(network, addr, 10*time.Second)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// echo serves UDP and TCP echo on the gateway until the test ends.
func echo(u net.PacketConn, l net.Listener) {
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := u.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = u.WriteTo(buf[:n], from)
		}
	}()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 2048)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					_, _ = c.Write(buf[:n])
				}
			}()
		}
	}()
}

func roundTrip(t *testing.T, c net.Conn, msg string) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	if string(buf) != msg {
		t.Fatalf("echo %q, want %q", buf, msg)
	}
	return time.Since(start)
}

func TestLinkUserspaceCounters(t *testing.T) {
	tp := newTopo(t)
	p, err := LoadProfile("fast")
	if err != nil {
		t.Fatal(err)
	}
	link, err := NewLink(t.Context(), tp.spec, p, Options{Backend: Userspace, Logger: testLogger(t), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	if link.Backend() != Userspace {
		t.Fatalf("backend %v", link.Backend())
	}
	echo(tp.listenUDP(t, 53), tp.listenTCP(t, 53))
	gw53 := netip.AddrPortFrom(testGW.Addr(), 53).String()
	udp := tp.dial(t, "udp4", gw53)
	// A DNS query's first bytes; the echo server sends it back.
	query := "\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00"
	// The first round trip also resolves ARP (which crosses unimpaired).
	roundTrip(t, udp, query)
	link.ResetCounters()
	// Packets never leave early: 10 ms each way plus serialization.
	if rtt := roundTrip(t, udp, query); rtt < 20*time.Millisecond {
		t.Fatalf("UDP round trip %v, below the profile's 20 ms", rtt)
	}
	tcp := tp.dial(t, "tcp4", gw53)
	roundTrip(t, tcp, "\x00\x0d"+query)
	c := link.Counters()
	gw := testGW.Addr()
	if c.Up.SYNs != 1 || c.Up.ConnsByDst[gw] != 1 || len(c.Up.ConnsByDst) != 1 {
		t.Errorf("up: %d SYNs, by destination %v; want 1 SYN to %v", c.Up.SYNs, c.Up.ConnsByDst, gw)
	}
	if c.Up.DNSQueries != 2 {
		t.Errorf("up: %d DNS queries, want 2 (one UDP, one TCP)", c.Up.DNSQueries)
	}
	if c.Down.SYNs != 0 || c.Down.DNSQueries != 0 {
		t.Errorf("down: %d SYNs %d DNS queries, want 0 and 0", c.Down.SYNs, c.Down.DNSQueries)
	}
	// Up: the UDP query, SYN, ACK, TCP query; down: UDP answer, SYN-ACK, TCP answer (ACKs may lag).
	if c.Up.Packets < 4 || c.Down.Packets < 3 || c.Up.Drops+c.Down.Drops != 0 || c.Up.CaptureDrops != 0 {
		t.Errorf("counters %+v", c)
	}
	// The same figures through the Prometheus collector.
	want := `
# HELP pep_netem_dns_queries_total DNS queries (UDP or TCP to port 53) that entered the radio link.
# TYPE pep_netem_dns_queries_total counter
pep_netem_dns_queries_total{direction="down",profile="fast"} 0
pep_netem_dns_queries_total{direction="up",profile="fast"} 2
# HELP pep_netem_syns_total TCP SYNs (without ACK) that entered the radio link.
# TYPE pep_netem_syns_total counter
pep_netem_syns_total{direction="down",profile="fast"} 0
pep_netem_syns_total{direction="up",profile="fast"} 1
# HELP pep_netem_syns_by_dst_total TCP SYNs (without ACK) that entered the radio link, by destination address ("other": beyond the series bound).
# TYPE pep_netem_syns_by_dst_total counter
pep_netem_syns_by_dst_total{direction="up",dst="` + gw.String() + `",profile="fast"} 1
`
	if err := testutil.CollectAndCompare(NewCollector(link), strings.NewReader(want), "pep_netem_syns_total", "pep_netem_dns_queries_total", "pep_netem_syns_by_dst_total"); err != nil {
		t.Error(err)
	}
	link.ResetCounters()
	if c := link.Counters(); c.Up.Packets != 0 || c.Up.SYNs != 0 || len(c.Up.ConnsByDst) != 0 {
		t.Errorf("after ResetCounters: %+v", c.Up)
	}
}

// TestLinkSetProfile: a running userspace link changes profile between
// round trips (200 ms, then 20 ms, then 200 ms again) without losing a
// packet, and the counters carry on.
func TestLinkSetProfile(t *testing.T) {
	tp := newTopo(t)
	fast, err := LoadProfile("fast")
	if err != nil {
		t.Fatal(err)
	}
	slow := Profile{Name: "slow", Up: Direction{Delay: 100 * time.Millisecond}, Down: Direction{Delay: 100 * time.Millisecond}}
	link, err := NewLink(t.Context(), tp.spec, slow, Options{Backend: Userspace, Logger: testLogger(t), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	echo(tp.listenUDP(t, 53), tp.listenTCP(t, 53))
	udp := tp.dial(t, "udp4", netip.AddrPortFrom(testGW.Addr(), 53).String())
	roundTrip(t, udp, "arp") // the first round trip also resolves ARP
	// Packets never leave early, so the lower bounds are exact; the fast
	// link's upper bound leaves 100 ms for a busy machine.
	if rtt := roundTrip(t, udp, "slow"); rtt < 200*time.Millisecond {
		t.Fatalf("slow: round trip %v, below the profile's 200 ms", rtt)
	}
	if err := link.SetProfile(fast); err != nil {
		t.Fatal(err)
	}
	if got := link.Profile().Name; got != "fast" {
		t.Errorf("Profile() = %q after SetProfile(fast)", got)
	}
	for i := range 3 {
		if rtt := roundTrip(t, udp, "fast"); rtt < 20*time.Millisecond || rtt >= 120*time.Millisecond {
			t.Errorf("fast, round trip %d: %v, want 20 ms (at most 120)", i, rtt)
		}
	}
	if err := link.SetProfile(slow); err != nil {
		t.Fatal(err)
	}
	if rtt := roundTrip(t, udp, "slow"); rtt < 200*time.Millisecond {
		t.Errorf("slow again: round trip %v, below 200 ms", rtt)
	}
	if c := link.Counters(); c.Up.Packets < 6 || c.Down.Packets < 6 || c.Up.Drops+c.Down.Drops != 0 {
		t.Errorf("counters after three profiles: up %d packets, down %d, drops %d: want every round trip counted, none dropped", c.Up.Packets, c.Down.Packets, c.Up.Drops+c.Down.Drops)
	}
}

func TestLinkUserspaceQueueDrops(t *testing.T) {
	tp := newTopo(t)
	// 1 Mbit/s: a 1028-byte packet takes 8.2 ms; the queue holds 4.
	p := Profile{Name: "tiny-queue",
		Up:   Direction{Delay: time.Millisecond, Rate: MbitPerSecond, Queue: Queue{Packets: 4}},
		Down: Direction{Delay: time.Millisecond}}
	link, err := NewLink(t.Context(), tp.spec, p, Options{Backend: Userspace, Logger: testLogger(t), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	srv := tp.listenUDP(t, 9000)
	echo(srv, tp.listenTCP(t, 9000))
	cli := tp.dial(t, "udp4", netip.AddrPortFrom(testGW.Addr(), 9000).String())
	roundTrip(t, cli, "warm-up") // ARP
	link.ResetCounters()
	const burst = 50
	const packetTime = 8224 * time.Microsecond // 1028 B at 1 Mbit/s
	payload := make([]byte, 1000)              // + 8 UDP + 20 IP = 1028 B
	start := time.Now()
	for range burst {
		if _, err := cli.Write(payload); err != nil {
			t.Fatal(err)
		}
	}
	var c Counters
	waitFor(t, func() bool { c = link.Counters(); return c.Up.Packets == burst })
	// 4 are queued, the rest refused, but for those that left the queue
	// while the burst arrived: at most one per packet time of the time it
	// took to arrive (measured to the moment the counters had it all, so
	// a loaded machine's slower writer or reader widens the bound instead
	// of failing it; an idle one takes 1-3 ms).
	arrived := time.Since(start)
	minDrops := burst - 4 - int(arrived/packetTime) - 2
	t.Logf("burst of %d arrived within %s: %d queue drops (want %d..%d)", burst, arrived.Round(time.Millisecond), c.Up.QueueDrops, minDrops, burst-4)
	if c.Up.Packets != burst || int(c.Up.QueueDrops) < minDrops || c.Up.QueueDrops > burst-4 || c.Up.LossDrops != 0 {
		t.Fatalf("up: %d packets, %d queue drops, %d loss drops; want %d packets, %d..%d queue drops, 0 loss",
			c.Up.Packets, c.Up.QueueDrops, c.Up.LossDrops, burst, minDrops, burst-4)
	}
	// Every packet the queue accepted is echoed back.
	delivered := int(c.Up.Packets - c.Up.Drops)
	buf := make([]byte, 2048)
	_ = cli.SetReadDeadline(time.Now().Add(testenv.Scale(5 * time.Second)))
	for i := range delivered {
		if _, err := cli.Read(buf); err != nil {
			t.Fatalf("echo %d of %d: %v", i+1, delivered, err)
		}
	}
	_ = cli.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := cli.Read(buf); err == nil {
		t.Fatalf("more echoes than the %d packets the link delivered", delivered)
	}
}

func TestLinkTCBridgeCounters(t *testing.T) {
	if _, err := os.Stat("/usr/sbin/tc"); err != nil {
		t.Skip("tc(8) not installed (Debian package iproute2)")
	}
	tp := newTopo(t)
	// Nothing to emulate: the plan is the bridge alone, which any kernel runs.
	p, err := LoadProfile("h2a-rtt0-loss0")
	if err != nil {
		t.Fatal(err)
	}
	link, err := NewLink(t.Context(), tp.spec, p, Options{Backend: TC, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	l := tp.listenTCP(t, 80)
	echo(tp.listenUDP(t, 80), l)
	c := tp.dial(t, "tcp4", netip.AddrPortFrom(testGW.Addr(), 80).String())
	roundTrip(t, c, "GET / HTTP/1.0\r\n\r\n")
	// The taps observe beside the kernel's path: their count may lag the echo.
	var got Counters
	waitFor(t, func() bool { got = link.Counters(); return got.Up.SYNs >= 1 })
	if got.Up.SYNs != 1 || got.Up.ConnsByDst[testGW.Addr()] != 1 || got.Down.SYNs != 0 {
		t.Errorf("SYNs up %d (by destination %v) down %d; want 1 to %v, 0", got.Up.SYNs, got.Up.ConnsByDst, got.Down.SYNs, testGW.Addr())
	}
	if err := link.Close(); err != nil {
		t.Fatal(err)
	}
	if br := bridgeIn(t, tp.spec.Namespace); br {
		t.Fatalf("bridge %s left in %s after Close", BridgeName, tp.spec.Namespace)
	}
}

// TestLinkTCFailsCleanly forces the tc backend where its netem step
// fails: NewLink must fail naming the tc step and leave no bridge. On a
// kernel without sch_netem the real tc fails it; on one with sch_netem a
// tc of the test's own, first in PATH, fails the netem qdisc step as such
// a kernel does ("qdisc kind is unknown", exit 2) and runs the real
// /usr/sbin/tc for every other step, so the path runs on every machine.
func TestLinkTCFailsCleanly(t *testing.T) {
	if _, err := os.Stat("/usr/sbin/tc"); err != nil {
		t.Skip("tc(8) not installed (Debian package iproute2)")
	}
	tp := newTopo(t)
	if b, _ := DetectBackend(); b == TC {
		dir := t.TempDir()
		script := "#!/bin/sh\nfor a; do [ \"$a\" = netem ] && { echo 'Error: Specified qdisc kind is unknown.' >&2; exit 2; }; done\nexec /usr/sbin/tc \"$@\"\n"
		if err := os.WriteFile(filepath.Join(dir, "tc"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		t.Log("this kernel has sch_netem: the netem step fails through a tc wrapper first in PATH")
	}
	p, err := LoadProfile("paper-average")
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewLink(context.Background(), tp.spec, p, Options{Backend: TC, Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), `netem: step 7 "tc -n `+tp.spec.Namespace+` qdisc replace dev rb root handle 1: netem`) {
		t.Fatalf("err = %v, want the failing tc step", err)
	}
	if bridgeIn(t, tp.spec.Namespace) {
		t.Fatalf("bridge left behind after a failed plan")
	}
}

func bridgeIn(t *testing.T, ns string) bool {
	h, err := openNS(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	_, err = nl.LinkByName(BridgeName)
	var nf netlink.LinkNotFoundError
	return !errors.As(err, &nf)
}

func TestFindPeer(t *testing.T) {
	tp := newTopo(t)
	ep, err := findPeer(tp.spec.Namespace, tp.spec.IfA)
	if err != nil {
		t.Fatal(err)
	}
	if ep.Namespace != tp.mn || ep.Interface != "radio0" {
		t.Fatalf("peer of %s = %+v, want %s:radio0", tp.spec.IfA, ep, tp.mn)
	}
}

// waitFor polls cond until it holds, failing the test after 10 s (scaled):
// the emulator reads packets asynchronously, so a counter lags the write.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testenv.Scale(10 * time.Second))
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", testenv.Scale(10*time.Second))
		}
		time.Sleep(time.Millisecond)
	}
}
