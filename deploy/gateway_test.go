package deploy

import (
	"net/netip"
	"os"
	"strings"
	"testing"
)

// TestRenderRulesetGolden renders the shipped ruleset with an operator's
// values and compares it with testdata/operator.nft.
func TestRenderRulesetGolden(t *testing.T) {
	g := Default()
	g.SubscriberIfs = []string{"eth1", "ppp*"}
	g.SubscriberNets = []netip.Prefix{netip.MustParsePrefix("100.64.0.0/10"), netip.MustParsePrefix("10.20.0.0/16")}
	g.VIP = netip.MustParseAddr("10.0.0.12")
	g.HTTPPort, g.TLSPort, g.DNSPort, g.Mark = 8080, 8443, 5300, 0x100
	g.VIPTLSPorts = []uint16{443, 9443, 9444} // https.shards 3, https.shard_ports [443, 9443, 9444]
	got, err := RenderRuleset(Ruleset, g)
	if err != nil {
		t.Fatal(err)
	}
	const golden = "testdata/operator.nft"
	if os.Getenv("PEP_UPDATE_GOLDEN") != "" {
		os.WriteFile(golden, got, 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("rendered ruleset differs from %s (PEP_UPDATE_GOLDEN=1 rewrites it):\n%s", golden, got)
	}
}

// TestRenderVIPTLSPorts: every shard port of the VIP's HTTPS origin is
// steered to listen.tls, 443 always (the splice), each port once.
func TestRenderVIPTLSPorts(t *testing.T) {
	for _, c := range []struct {
		ports []uint16
		want  string
	}{
		{nil, "{ 443 }"},
		{[]uint16{443}, "{ 443 }"},
		{[]uint16{443, 8443, 8444}, "{ 443, 8443, 8444 }"},
		{[]uint16{8443, 8444}, "{ 443, 8443, 8444 }"},
	} {
		g := Default()
		g.VIPTLSPorts = c.ports
		got, err := RenderRuleset(Ruleset, g)
		if err != nil {
			t.Fatal(err)
		}
		if line := "define VIP_TLS_PORTS = " + c.want; !strings.Contains(string(got), line+" ") {
			t.Errorf("ports %v: no line %q in\n%s", c.ports, line, got)
		}
		if !strings.Contains(string(got), "ip daddr $VIP tcp dport $VIP_TLS_PORTS tproxy to :$TLS_PORT") {
			t.Errorf("ports %v: no TPROXY rule for $VIP_TLS_PORTS", c.ports)
		}
	}
}

// TestRenderDefaultIsIdentity: the shipped file holds Default's values.
func TestRenderDefaultIsIdentity(t *testing.T) {
	got, err := RenderRuleset(Ruleset, Default())
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(Ruleset) {
		t.Errorf("Default() does not reproduce nftables/pep-gateway.nft:\n%s", got)
	}
}

func TestRenderRulesetErrors(t *testing.T) {
	cases := []struct {
		name string
		src  string
		mod  func(*Gateway)
		want string
	}{
		{"unknown define", "define FOO = 1\n", nil, `deploy: ruleset line 1: unknown define "FOO"`},
		{"missing define", "define VIP = 1.2.3.4\n", nil, `deploy: ruleset: define "`},
		{"IPv6 VIP", string(Ruleset), func(g *Gateway) { g.VIP = netip.MustParseAddr("2001:db8::1") }, `deploy: vip: "2001:db8::1" is not an IPv4 address`},
		{"host bits", string(Ruleset), func(g *Gateway) { g.SubscriberNets = []netip.Prefix{netip.MustParsePrefix("10.0.0.1/8")} }, `deploy: subscriber-nets: "10.0.0.1/8" has host bits set (want 10.0.0.0/8)`},
		{"bad ifname", string(Ruleset), func(g *Gateway) { g.SubscriberIfs = []string{`eth0"; flush ruleset`} }, `deploy: subscriber-ifs: "eth0\"; flush ruleset" is not an interface name`},
		{"long ifname", string(Ruleset), func(g *Gateway) { g.SubscriberIfs = []string{"abcdefghijklmnop"} }, `deploy: subscriber-ifs: "abcdefghijklmnop" is not an interface name`},
		{"two-bit mark", string(Ruleset), func(g *Gateway) { g.Mark = 3 }, `deploy: mark: 0x3 is not a single bit`},
		{"main table", string(Ruleset), func(g *Gateway) { g.Table = 254 }, `deploy: table: 254 is outside 1-252`},
		{"zero port", string(Ruleset), func(g *Gateway) { g.DNSPort = 0 }, `deploy: dns-port: 0 is not a port`},
		{"repeated shard port", string(Ruleset), func(g *Gateway) { g.VIPTLSPorts = []uint16{443, 8443, 8443} }, `deploy: vip-tls-ports: port 8443 is zero or repeated`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := Default()
			if c.mod != nil {
				c.mod(&g)
			}
			_, err := RenderRuleset([]byte(c.src), g)
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("err = %v, want prefix %q", err, c.want)
			}
		})
	}
}

func TestRoutingPlan(t *testing.T) {
	got := RoutingPlan(Default())
	want := []string{
		"ip -4 rule del fwmark 0x1/0x1 lookup 100 priority 100",
		"ip -4 rule add fwmark 0x1/0x1 lookup 100 priority 100",
		"ip -4 route replace local 0.0.0.0/0 dev lo table 100",
		"ip -4 address replace 192.0.2.12/32 dev lo",
	}
	if len(got) != len(want) {
		t.Fatalf("%d commands, want %d: %q", len(got), len(want), got)
	}
	for i := range want {
		if s := strings.Join(got[i], " "); s != want[i] {
			t.Errorf("command %d = %q, want %q", i, s, want[i])
		}
	}
}

func TestRefreshScript(t *testing.T) {
	got := RefreshScript("ip pep", "udp", 3e9)
	want := "add element ip pep dns_alive { udp timeout 3000ms }\n" +
		"delete element ip pep dns_alive { udp }\n" +
		"add element ip pep dns_alive { udp timeout 3000ms }\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestRulesetLoads loads the shipped ruleset and the golden operator one
// into a throwaway namespace with nft -f (and again, to prove a reload
// replaces the table), then applies a DNS guard refresh script twice.
func TestRulesetLoads(t *testing.T) {
	needRoot(t)
	n := newNetNS(t, "pep6r-"+runSuffix())
	for _, f := range []string{"nftables/pep-gateway.nft", "testdata/operator.nft", "nftables/pep-gateway.nft"} {
		n.exec(t, "nft", "-f", f)
	}
	for range 2 {
		n.exec(t, "nft", RefreshScript("ip pep", "udp", 3e9))
	}
	if out := n.exec(t, "nft", "list", "set", "ip", "pep", "dns_alive"); !strings.Contains(out, "elements = { udp timeout 3s") {
		t.Errorf("dns_alive after refresh:\n%s", out)
	}
}
