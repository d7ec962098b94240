// Package deploy holds what an operator installs on a pep gateway (the
// nftables ruleset, systemd units, sysctl settings, Squid drop-in, log
// rotation, Prometheus alert rules) and the docker-compose testbed, with the
// tests that check them: the ruleset loads in a namespace, TPROXY steering
// fails open when pepd dies, and a watchdog covers the hung case.
//
// The Go part renders the gateway ruleset (nftables/pep-gateway.nft) with an
// operator's values and plans the policy routing TPROXY needs. The ruleset
// explains the fail-open mechanism; docs/operations.md the rest.
package deploy

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Ruleset is deploy/nftables/pep-gateway.nft as shipped, with the testbed's
// values in its define lines.
//
//go:embed nftables/pep-gateway.nft
var Ruleset []byte

// Gateway holds the values the gateway ruleset and its policy routing are
// rendered with. Default returns the testbed's (DESIGN.md topology).
type Gateway struct {
	// SubscriberIfs are the names of the subscriber-facing interfaces
	// (at most 15 bytes each, IFNAMSIZ-1). nftables wildcards ("ppp*") are
	// allowed.
	SubscriberIfs []string
	// SubscriberNets are the subscriber source ranges (IPv4).
	SubscriberNets []netip.Prefix
	// VIP is pepd's VIP, an IPv4 address that must be local on the gateway.
	VIP netip.Addr
	// HTTPPort is pepd's TPROXY listener (config listen.tproxy) for
	// intercepted port 80 and VIP:80.
	HTTPPort uint16
	// TLSPort is pepd's TLS listener (config listen.tls) for VIP:443 and
	// the VIP's other TLS ports (VIPTLSPorts).
	TLSPort uint16
	// VIPTLSPorts are the VIP's TCP ports steered to TLSPort: 443 (the
	// SNI splice, and the first shard of the VIP's HTTPS origin) and
	// every other port of its k shards (pepd's https.shards and
	// https.shard_ports: config.HTTPS.Ports). Empty means 443 alone.
	VIPTLSPorts []uint16
	// DNSPort is pepd's DNS listener (config listen.dns), UDP and TCP.
	DNSPort uint16
	// Mark is the fwmark bit that selects the local route table; one bit,
	// so that it combines with other users of the mark.
	Mark uint32
	// Table is the routing table holding `local 0.0.0.0/0 dev lo`, 1-252.
	Table int
	// RulePriority is the `ip rule` priority of the fwmark rule, below the
	// main table's 32766.
	RulePriority int
}

// Default returns the values shipped in pep-gateway.nft: the testbed's
// subscriber interface and range, VIP 192.0.2.12, configs/pepd.yaml's ports,
// mark 0x1, table 100, priority 100.
func Default() Gateway {
	return Gateway{
		SubscriberIfs:  []string{"sub0"},
		SubscriberNets: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")},
		VIP:            netip.MustParseAddr("192.0.2.12"),
		HTTPPort:       3130,
		TLSPort:        3443,
		DNSPort:        5353,
		Mark:           0x1,
		Table:          100,
		RulePriority:   100,
	}
}

var ifnameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]+\*?$`)

// Validate reports the first value that cannot go into the ruleset, naming
// the field: `deploy: vip: "::1" is not an IPv4 address`.
func (g Gateway) Validate() error {
	if len(g.SubscriberIfs) == 0 {
		return errors.New("deploy: subscriber-ifs: empty")
	}
	for _, n := range g.SubscriberIfs {
		if len(n) > 15 || !ifnameRE.MatchString(n) {
			return fmt.Errorf("deploy: subscriber-ifs: %q is not an interface name (at most 15 of A-Za-z0-9_.:- with an optional trailing *)", n)
		}
	}
	if len(g.SubscriberNets) == 0 {
		return errors.New("deploy: subscriber-nets: empty")
	}
	for _, p := range g.SubscriberNets {
		if !p.IsValid() || !p.Addr().Is4() {
			return fmt.Errorf("deploy: subscriber-nets: %q is not an IPv4 prefix", p)
		}
		if p != p.Masked() {
			return fmt.Errorf("deploy: subscriber-nets: %q has host bits set (want %s)", p, p.Masked())
		}
	}
	if !g.VIP.IsValid() || !g.VIP.Is4() || g.VIP.IsUnspecified() {
		return fmt.Errorf("deploy: vip: %q is not an IPv4 address", g.VIP)
	}
	for _, p := range []struct {
		name string
		v    uint16
	}{{"http-port", g.HTTPPort}, {"tls-port", g.TLSPort}, {"dns-port", g.DNSPort}} {
		if p.v == 0 {
			return fmt.Errorf("deploy: %s: 0 is not a port", p.name)
		}
	}
	for i, p := range g.VIPTLSPorts {
		if p == 0 || slices.Contains(g.VIPTLSPorts[:i], p) {
			return fmt.Errorf("deploy: vip-tls-ports: port %d is zero or repeated", p)
		}
	}
	if g.Mark == 0 || g.Mark&(g.Mark-1) != 0 {
		return fmt.Errorf("deploy: mark: %#x is not a single bit", g.Mark)
	}
	if g.Table < 1 || g.Table > 252 {
		return fmt.Errorf("deploy: table: %d is outside 1-252 (253-255 are default, main, local)", g.Table)
	}
	if g.RulePriority < 1 || g.RulePriority >= 32766 {
		return fmt.Errorf("deploy: rule-priority: %d is outside 1-32765 (it must come before the main table)", g.RulePriority)
	}
	return nil
}

var defineRE = regexp.MustCompile(`^define ([A-Z_]+) = (.*?)(\s+#.*)?$`)

// RenderRuleset returns src (normally Ruleset) with the value of each define
// line replaced by g's, keeping the comments. Every define src uses must be
// one RenderRuleset knows, and each must appear: an unknown or missing name
// is an error, so that the file and this function cannot drift apart.
func RenderRuleset(src []byte, g Gateway) ([]byte, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	values := map[string]string{
		"SUB_IFS":       ifSet(g.SubscriberIfs),
		"SUB_NETS":      netSet(g.SubscriberNets),
		"VIP":           g.VIP.String(),
		"HTTP_PORT":     strconv.Itoa(int(g.HTTPPort)),
		"TLS_PORT":      strconv.Itoa(int(g.TLSPort)),
		"VIP_TLS_PORTS": portSet(g.vipTLSPorts()),
		"DNS_PORT":      strconv.Itoa(int(g.DNSPort)),
		"MARK":          fmt.Sprintf("0x%08x", g.Mark),
	}
	return setDefines(src, values, "ruleset")
}

// vipTLSPorts returns VIPTLSPorts with 443 first, whether or not it was
// given (the splice needs it).
func (g Gateway) vipTLSPorts() []uint16 {
	out := []uint16{443}
	for _, p := range g.VIPTLSPorts {
		if p != 443 {
			out = append(out, p)
		}
	}
	return out
}

// portSet formats ports as an nft anonymous set: { 443, 8443 }.
func portSet(ports []uint16) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return "{ " + strings.Join(s, ", ") + " }"
}

// ifSet and netSet format interface names and prefixes as nft anonymous
// sets: { "sub0", "ppp*" }, { 198.18.0.0/24 }.
func ifSet(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strconv.Quote(n)
	}
	return "{ " + strings.Join(quoted, ", ") + " }"
}

func netSet(nets []netip.Prefix) string {
	s := make([]string, len(nets))
	for i, p := range nets {
		s[i] = p.String()
	}
	return "{ " + strings.Join(s, ", ") + " }"
}

// setDefines returns src with the value of each `define NAME = VALUE`
// line replaced by values[NAME], keeping the comments in their column
// where the value fits. Every define src uses must be in values, and each
// of values must appear: an unknown or missing name is an error naming
// what (the ruleset's name), so that a shipped file and its renderer
// cannot drift apart.
func setDefines(src []byte, values map[string]string, what string) ([]byte, error) {
	seen := map[string]bool{}
	lines := bytes.SplitAfter(src, []byte("\n"))
	var out bytes.Buffer
	for i, l := range lines {
		body := bytes.TrimRight(l, "\n")
		m := defineRE.FindSubmatch(body)
		if m == nil {
			out.Write(l)
			continue
		}
		name := string(m[1])
		v, ok := values[name]
		if !ok {
			return nil, fmt.Errorf("deploy: %s line %d: unknown define %q", what, i+1, name)
		}
		seen[name] = true
		head := "define " + name + " = " + v
		if c := string(m[3]); c != "" {
			hash := strings.IndexByte(c, '#')
			col := len("define "+name+" = ") + len(m[2]) + hash
			head += strings.Repeat(" ", max(col-len(head), 1)) + c[hash:]
		}
		out.WriteString(head)
		out.Write(l[len(body):])
	}
	for name := range values {
		if !seen[name] {
			return nil, fmt.Errorf("deploy: %s: define %q is missing", what, name)
		}
	}
	return out.Bytes(), nil
}

// RoutingPlan returns the commands that make TPROXY-marked packets local
// (`ip rule` for the mark, `local 0.0.0.0/0 dev lo` in g.Table) and make the
// VIP a local address, each an argv for ip(8). The first command removes a
// rule left by an earlier run and may fail; Apply ignores its error. Undo
// is RoutingUndoPlan.
func RoutingPlan(g Gateway) [][]string {
	mark := fmt.Sprintf("%#x/%#x", g.Mark, g.Mark)
	table := strconv.Itoa(g.Table)
	prio := strconv.Itoa(g.RulePriority)
	return [][]string{
		{"ip", "-4", "rule", "del", "fwmark", mark, "lookup", table, "priority", prio},
		{"ip", "-4", "rule", "add", "fwmark", mark, "lookup", table, "priority", prio},
		{"ip", "-4", "route", "replace", "local", "0.0.0.0/0", "dev", "lo", "table", table},
		{"ip", "-4", "address", "replace", g.VIP.String() + "/32", "dev", "lo"},
	}
}

// RoutingUndoPlan returns the commands that remove what RoutingPlan added.
// Each may fail if the thing is already gone.
func RoutingUndoPlan(g Gateway) [][]string {
	mark := fmt.Sprintf("%#x/%#x", g.Mark, g.Mark)
	table := strconv.Itoa(g.Table)
	return [][]string{
		{"ip", "-4", "rule", "del", "fwmark", mark, "lookup", table, "priority", strconv.Itoa(g.RulePriority)},
		{"ip", "-4", "route", "flush", "table", table},
		{"ip", "-4", "address", "del", g.VIP.String() + "/32", "dev", "lo"},
	}
}

// EnvFile returns /etc/default/pep-gateway for pep-nftables.service: the
// values its ip(8) commands use (RoutingPlan's, as shell variables).
func EnvFile(g Gateway) string {
	return fmt.Sprintf(`# pep-nftables.service: policy routing for TPROXY (written by pep-gateway env)
PEP_MARK=%#x
PEP_TABLE=%d
PEP_RULE_PRIORITY=%d
PEP_VIP=%s
`, g.Mark, g.Table, g.RulePriority, g.VIP)
}
