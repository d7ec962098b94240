package corpus

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// DefaultPrefix is the origin address block of the testbed (DESIGN.md:
// "one address per hostname from 198.19.0.0/16").
var DefaultPrefix = netip.MustParsePrefix("198.19.0.0/16")

// Plan assigns origin addresses to hostnames: the i-th hostname in sorted
// order gets the i-th address after the prefix's network address (per host
// several consecutive addresses when PerHost > 1), so the same hostnames
// always get the same addresses.
type Plan struct {
	// Prefix is the block the addresses come from.
	Prefix netip.Prefix
	// Hosts are the planned hostnames, sorted.
	Hosts []string
	// Addrs maps each hostname to its addresses (one per A record).
	Addrs map[string][]netip.Addr

	byAddr map[netip.Addr]string
}

// NewPlan plans perHost (at least 1) IPv4 addresses for each distinct
// hostname from prefix, skipping the network address and, for prefixes
// shorter than /31, the broadcast address. Too many hostnames for the
// prefix is an error giving both counts.
func NewPlan(hosts []string, prefix netip.Prefix, perHost int) (*Plan, error) {
	if !prefix.Addr().Is4() {
		return nil, fmt.Errorf("corpus: plan: prefix %q is not IPv4", prefix)
	}
	if perHost < 1 {
		return nil, fmt.Errorf("corpus: plan: %d addresses per host, want at least 1", perHost)
	}
	prefix = prefix.Masked()
	set := map[string]bool{}
	for _, h := range hosts {
		set[normHost(h)] = true
	}
	sorted := sortedKeys(set)
	size := uint64(1) << (32 - prefix.Bits())
	usable := size
	if prefix.Bits() < 31 {
		usable -= 2
	}
	if need := uint64(len(sorted) * perHost); need > usable {
		return nil, fmt.Errorf("corpus: plan: %d hostnames x %d addresses do not fit %s (%d usable)", len(sorted), perHost, prefix, usable)
	}
	p := &Plan{Prefix: prefix, Hosts: sorted, Addrs: map[string][]netip.Addr{}, byAddr: map[netip.Addr]string{}}
	a := prefix.Addr()
	if prefix.Bits() < 31 {
		a = a.Next()
	}
	for _, h := range sorted {
		for i := 0; i < perHost; i++ {
			p.Addrs[h] = append(p.Addrs[h], a)
			p.byAddr[a] = h
			a = a.Next()
		}
	}
	return p, nil
}

// PlanFor plans one address per hostname of c from prefix.
func PlanFor(c *Corpus, prefix netip.Prefix) (*Plan, error) {
	return NewPlan(c.Hosts(), prefix, 1)
}

// Host returns the hostname planned at addr.
func (p *Plan) Host(addr netip.Addr) (string, bool) {
	h, ok := p.byAddr[addr.Unmap()]
	return h, ok
}

// Addr returns the first address of host.
func (p *Plan) Addr(host string) (netip.Addr, bool) {
	a := p.Addrs[normHost(host)]
	if len(a) == 0 {
		return netip.Addr{}, false
	}
	return a[0], true
}

// HostsFile renders the plan in /etc/hosts format, one "address name" line
// per A record, in plan order.
func (p *Plan) HostsFile() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# pep testbed origins: %d hostnames from %s\n", len(p.Hosts), p.Prefix)
	for _, h := range p.Hosts {
		for _, a := range p.Addrs[h] {
			fmt.Fprintf(&b, "%s %s\n", a, h)
		}
	}
	return b.Bytes()
}

// DnsmasqOptions tunes the carrier resolver configuration.
type DnsmasqOptions struct {
	// TTL is the TTL of the answers (dnsmasq local-ttl, whole seconds);
	// zero means 1 hour. dnsmasq's own default, 0 s, would make every
	// lookup cross the link again.
	TTL time.Duration
	// LogQueries adds log-queries (one log line per query).
	LogQueries bool
}

// DnsmasqConf renders a dnsmasq configuration that answers the planned
// names from hostsPath (addn-hosts, exact names, several A records per
// name allowed) and NXDOMAIN for every other name: no-resolv and no-hosts
// drop upstreams and /etc/hosts, local=/#/ makes every domain local
// (dnsmasq(8)). A planned name has no AAAA record: its AAAA query gets an
// empty NOERROR answer. Listening (listen-address, port, bind-interfaces)
// is left to the command line.
func (p *Plan) DnsmasqConf(hostsPath string, opt DnsmasqOptions) []byte {
	ttl := opt.TTL
	if ttl <= 0 {
		ttl = time.Hour
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# pep testbed carrier resolver: %d hostnames from %s, NXDOMAIN for the rest\n", len(p.Hosts), p.Prefix)
	b.WriteString("no-resolv\nno-hosts\n")
	fmt.Fprintf(&b, "addn-hosts=%s\n", hostsPath)
	b.WriteString("local=/#/\n")
	fmt.Fprintf(&b, "local-ttl=%d\n", int(ttl/time.Second))
	if opt.LogQueries {
		b.WriteString("log-queries\n")
	}
	return b.Bytes()
}

// WriteDnsmasq writes confPath and, beside it, confPath+".hosts", both mode
// 0644 so that dnsmasq can read them after dropping privileges. Start it as
// dnsmasq --keep-in-foreground --conf-file=confPath --listen-address=IP
// --bind-interfaces [--port=N] [--user=root].
func (p *Plan) WriteDnsmasq(confPath string, opt DnsmasqOptions) error {
	hostsPath, err := filepath.Abs(confPath + ".hosts")
	if err != nil {
		return fmt.Errorf("corpus: dnsmasq hosts path: %w", err)
	}
	if err := os.WriteFile(hostsPath, p.HostsFile(), 0o644); err != nil {
		return fmt.Errorf("corpus: %w", err)
	}
	if err := os.WriteFile(confPath, p.DnsmasqConf(hostsPath, opt), 0o644); err != nil {
		return fmt.Errorf("corpus: %w", err)
	}
	return nil
}

// Prefixes returns the plan's addresses as sorted single-address prefixes
// (useful for nftables sets).
func (p *Plan) Prefixes() []netip.Prefix {
	var out []netip.Prefix
	for a := range p.byAddr {
		out = append(out, netip.PrefixFrom(a, 32))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr().Less(out[j].Addr()) })
	return out
}
