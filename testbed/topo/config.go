package topo

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
)

// Config is the address plan of one testbed (../shared/DESIGN.md, "Testbed
// topology"). The zero value is not valid; start from Default.
type Config struct {
	// Prefix starts every namespace name of the run, e.g. "peptb-4711-1".
	// It must be unique among the runs on the machine; NewPrefix makes one.
	Prefix string

	// MN is the mobile node's address on the radio link (198.18.0.2), GWRadio
	// the gateway's (198.18.0.1); RadioBits is the link's prefix length (24).
	MN, GWRadio netip.Addr
	RadioBits   int

	// GWWired is the gateway's address on the wired link (198.18.1.1), Core
	// the core's (198.18.1.2, carrier resolver and replay origin).
	GWWired, Core netip.Addr
	WiredBits     int

	// Origins is the prefix the replay origin answers on, routed by gw to
	// core and made local in core (AnyIP): 198.19.0.0/16.
	Origins netip.Prefix

	// VIP is the appliance's virtual IP, local on gw (192.0.2.12).
	VIP netip.Addr

	// Resolver is the address mn's resolv.conf names: the carrier resolver,
	// Core by default.
	Resolver netip.Addr

	// WiredEmulated puts an emulator namespace between gw and core, like
	// the radio link, so that a wired delay can be emulated there. Without
	// it gw and core share one veth pair.
	WiredEmulated bool

	// CCPhone, CCGW and CCOrigin are the TCP congestion control of mn, gw
	// and core (net.ipv4.tcp_congestion_control, set per namespace: a new
	// namespace inherits the host's, bbr on this project's machines, and
	// most web servers and phones run CUBIC). Default: "cubic" each.
	CCPhone, CCGW, CCOrigin string

	// GWInitCwnd is the initial congestion window, in segments, of the TCP
	// connections the gateway (pepd, Squid) serves over the radio link: the
	// initcwnd of gw's route to the radio prefix (ip-route(8)); it applies
	// only to TCP that ends on gw, never to forwarded packets, so direct
	// mode is unchanged. 0 keeps the kernel's 10 segments (RFC 6928).
	GWInitCwnd int

	// GWInitCwndPorts, when not empty, limits GWInitCwnd to TCP the
	// gateway serves from these local ports (a policy rule per port, "ip
	// rule ipproto tcp sport P", to table GWInitCwndTable, which holds the
	// radio prefix's route with the initcwnd); the gateway's other
	// connections keep the kernel's 10 segments. Empty: every connection.
	GWInitCwndPorts []uint16

	// GWSlowStartAfterIdle is gw's net.ipv4.tcp_slow_start_after_idle: 1
	// (the kernel's default) restarts slow start on a connection idle for
	// one RTO (RFC 5681 §4.1), 0 keeps its window, as
	// deploy/sysctl/90-pep.conf sets on a gateway. Default 1.
	GWSlowStartAfterIdle int
}

// CCs returns the namespaces whose congestion control Plan sets and the
// algorithm of each: phone (mn), gateway (gw), origin (core).
func (c Config) CCs() []struct{ Role, NS, CC string } {
	return []struct{ Role, NS, CC string }{{"phone", c.MNNS(), c.CCPhone}, {"gateway", c.GWNS(), c.CCGW}, {"origin", c.CoreNS(), c.CCOrigin}}
}

// ReadCC reads back a namespace's TCP congestion control.
func ReadCC(ns string) (string, error) {
	return readSysctl(ns, "net.ipv4.tcp_congestion_control")
}

// readSysctl reads the value of key in namespace ns (sysctl -n).
func readSysctl(ns, key string) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-n", key).Output()
	if err != nil {
		return "", fmt.Errorf("topo: %s of %s: %w", key, ns, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// GWInitCwndTable is the routing table that holds the radio prefix's route
// with GWInitCwnd when GWInitCwndPorts limits it to some ports.
const GWInitCwndTable = "101"

// ReadGWTCP reads back the gateway's TCP toward the radio link: the
// largest initcwnd of gw's routes to the radio prefix in any table (0 when
// none sets one: the kernel's 10 segments) and
// net.ipv4.tcp_slow_start_after_idle.
func ReadGWTCP(c Config) (initcwnd, slowStartAfterIdle int, err error) {
	radio := netip.PrefixFrom(c.GWRadio, c.RadioBits).Masked()
	out, err := exec.Command("ip", "-n", c.GWNS(), "route", "show", "table", "all", radio.String()).Output()
	if err != nil {
		return 0, 0, fmt.Errorf("topo: route to %s in %s: %w", radio, c.GWNS(), err)
	}
	f := strings.Fields(string(out))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "initcwnd" {
			n, err := strconv.Atoi(f[i+1])
			if err != nil {
				return 0, 0, fmt.Errorf("topo: route to %s in %s: initcwnd %q", radio, c.GWNS(), f[i+1])
			}
			initcwnd = max(initcwnd, n)
		}
	}
	v, err := readSysctl(c.GWNS(), "net.ipv4.tcp_slow_start_after_idle")
	if err != nil {
		return 0, 0, err
	}
	if slowStartAfterIdle, err = strconv.Atoi(v); err != nil {
		return 0, 0, fmt.Errorf("topo: tcp_slow_start_after_idle of %s: %q", c.GWNS(), v)
	}
	return initcwnd, slowStartAfterIdle, nil
}

var prefixSeq atomic.Int64

// NewPrefix returns a namespace-name prefix unique to this process and call:
// "peptb-<pid>-<n>". The pid lets Sweep tell a live run from a leftover one.
func NewPrefix() string {
	return "peptb-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(prefixSeq.Add(1), 10)
}

// Default returns the design card's addresses with a fresh Prefix.
func Default() Config {
	return Config{
		Prefix:    NewPrefix(),
		MN:        netip.MustParseAddr("198.18.0.2"),
		GWRadio:   netip.MustParseAddr("198.18.0.1"),
		RadioBits: 24,
		GWWired:   netip.MustParseAddr("198.18.1.1"),
		Core:      netip.MustParseAddr("198.18.1.2"),
		WiredBits: 24,
		Origins:   netip.MustParsePrefix("198.19.0.0/16"),
		VIP:       netip.MustParseAddr("192.0.2.12"),
		Resolver:  netip.MustParseAddr("198.18.1.2"),
		CCPhone:   "cubic",
		CCGW:      "cubic",
		CCOrigin:  "cubic",

		GWSlowStartAfterIdle: 1,
	}
}

// Validate checks that every address is IPv4, that each link's two ends
// share their prefix and that the prefix is usable as a name.
func (c Config) Validate() error {
	if c.Prefix == "" || len(c.Prefix) > 40 {
		return fmt.Errorf("topo: prefix %q: want 1 to 40 characters", c.Prefix)
	}
	for _, a := range []struct {
		name string
		addr netip.Addr
	}{{"mn", c.MN}, {"gw_radio", c.GWRadio}, {"gw_wired", c.GWWired}, {"core", c.Core}, {"vip", c.VIP}, {"resolver", c.Resolver}} {
		if !a.addr.Is4() {
			return fmt.Errorf("topo: %s: %q is not an IPv4 address", a.name, a.addr)
		}
	}
	if !c.Origins.IsValid() || !c.Origins.Addr().Is4() {
		return fmt.Errorf("topo: origins: %q is not an IPv4 prefix", c.Origins)
	}
	radio := netip.PrefixFrom(c.MN, c.RadioBits).Masked()
	if c.RadioBits < 8 || c.RadioBits > 30 || !radio.Contains(c.GWRadio) || c.MN == c.GWRadio {
		return fmt.Errorf("topo: radio link: %s and %s are not two hosts of one /%d", c.MN, c.GWRadio, c.RadioBits)
	}
	wired := netip.PrefixFrom(c.Core, c.WiredBits).Masked()
	if c.WiredBits < 8 || c.WiredBits > 30 || !wired.Contains(c.GWWired) || c.Core == c.GWWired {
		return fmt.Errorf("topo: wired link: %s and %s are not two hosts of one /%d", c.GWWired, c.Core, c.WiredBits)
	}
	if radio.Overlaps(wired) || c.Origins.Overlaps(radio) || c.Origins.Overlaps(wired) {
		return fmt.Errorf("topo: radio %s, wired %s and origins %s must not overlap", radio, wired, c.Origins)
	}
	if c.GWInitCwnd < 0 || c.GWInitCwnd > 1000 {
		return fmt.Errorf("topo: gateway initcwnd %d: want 0 (the kernel's) to 1000 segments", c.GWInitCwnd)
	}
	if c.GWSlowStartAfterIdle != 0 && c.GWSlowStartAfterIdle != 1 {
		return fmt.Errorf("topo: gateway tcp_slow_start_after_idle %d: want 0 or 1", c.GWSlowStartAfterIdle)
	}
	return nil
}

// MNNS is the mobile node's namespace: Prefix + "-mn".
func (c Config) MNNS() string { return c.Prefix + "-mn" }

// GWNS is the gateway's namespace (nftables, pepd, Squid): Prefix + "-gw".
func (c Config) GWNS() string { return c.Prefix + "-gw" }

// CoreNS is the core's namespace (dnsmasq, replay origin): Prefix + "-core".
func (c Config) CoreNS() string { return c.Prefix + "-core" }

// RadioNS is the radio link emulator's namespace: Prefix + "-radio".
func (c Config) RadioNS() string { return c.Prefix + "-radio" }

// WiredNS is the wired link emulator's namespace (only with WiredEmulated):
// Prefix + "-wired".
func (c Config) WiredNS() string { return c.Prefix + "-wired" }

// Interface names. They live inside the namespaces, so they are the same in
// every run and never appear in the root namespace.
const (
	// IfMN is mn's radio interface; IfGWRadio gw's, IfGWWired gw's wired
	// interface and IfCore core's.
	IfMN      = "radio0"
	IfGWRadio = "radio0"
	IfGWWired = "wired0"
	IfCore    = "wired0"
	// IfEmuA and IfEmuB are the two ends inside an emulator namespace:
	// A faces the mobile (or gw) side, B the network (or core) side, as
	// netem's LinkSpec.IfA and IfB.
	IfEmuA = "emu0"
	IfEmuB = "emu1"
)
