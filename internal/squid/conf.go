package squid

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"text/template"
)

// Conf are the variables of the configs/squid.conf template (Template;
// its header lists them): what Render fills in. DefaultConf gives the
// gateway's defaults. Addresses are strings as Squid writes them: CIDR
// prefixes, IP addresses, host:port.
type Conf struct {
	Listen          string   // Squid's port for pepd, host:port
	ProxyProtocol   bool     // require-proxy-header (else X-Forwarded-For from Pepd)
	Pepd            []string // pepd's source addresses, CIDR
	Subscribers     []string // subscriber ranges, CIDR
	Resolvers       []string // pepd's listen.squid_dns when set, then the carrier resolvers: IP addresses (Squid takes no port)
	HostsFile       string   // a hosts file, or "none"
	AllowedPorts    []uint16 // destination ports
	Forbidden       []string // refused destination ranges, CIDR
	AllowDst        []string // exceptions to Forbidden, CIDR
	CacheDir        string   // cache_dir aufs folder (also coredump_dir)
	CacheDirMB      int      // cache_dir size, MB
	CacheMemMB      int      // cache_mem, MB
	LogDir          string   // access.log and cache.log go here
	PidFile         string   // pid_filename
	User            string   // cache_effective_user (Squid switches to it when started as root)
	ShutdownSeconds int      // shutdown_lifetime, seconds
	// Peers are the cache array's members (docs/operations.md §6), each the
	// host:port of its PeerListen, this gateway's own included, in the same
	// order on every member. Empty: a single cache. With peers, Squid
	// forwards a request from pepd to the member that CARP (Squid's
	// cache_peer carp, the Cache Array Routing Protocol draft) assigns the
	// URL, and only that member stores the object: each object is fetched
	// from the origin and stored once for the whole array.
	Peers []string
	// PeerListen is this member's array port, host:port, reachable from the
	// other members; required with Peers.
	PeerListen string
	// Optimizer is pepd's optimizer, host:port (config optimize.listen),
	// Squid's parent; "" renders no parent.
	Optimizer string
	// Admission renders second-hit disk admission (config cache.admission
	// second-hit, internal/cachepolicy): a miss pepd marked with
	// cachepolicy.FirstHeader is served but not stored (store_miss deny).
	Admission bool
	// MemoryMaxObjectKB is maximum_object_size_in_memory in KB (config
	// cache.memory_max_object): larger objects are never kept in the memory
	// cache. Zero renders DefaultMemoryMaxObjectKB.
	MemoryMaxObjectKB int
	// MemoryTier is the memory tier's port, host:port (config
	// cache.memory_tier): a memory-only Squid rendered with MemoryOnly,
	// this cache's parent for every request but private ones, so that a
	// miss this cache does not store (second-hit admission's first-seen
	// objects) is still kept in memory for its second request
	// (CacheSifter's transient objects, seed 001; internal/cachepolicy).
	// "" renders no tier. Not with Peers.
	MemoryTier string
	// MemoryOnly renders the memory tier itself: no cache_dir (Squid 5
	// then stores in cache_mem only); its Listen is the disk cache's
	// MemoryTier and its clients (Pepd, Subscribers) the disk cache's
	// address.
	MemoryOnly bool
}

// DefaultMemoryMaxObjectKB is maximum_object_size_in_memory when
// Conf.MemoryMaxObjectKB is zero: 1 MB, the gateway's value before it
// was a setting (Squid's own default is 512 KB).
const DefaultMemoryMaxObjectKB = 1024

// ForbiddenRanges are the destination ranges Squid refuses, the same as
// internal/guard's special-purpose ranges (pepd also adds the VIP and its
// own addresses).
var ForbiddenRanges = []string{
	"127.0.0.0/8", "::1", "169.254.0.0/16", "fe80::/10", "10.0.0.0/8", "172.16.0.0/12",
	"192.168.0.0/16", "fc00::/7", "100.64.0.0/10", "0.0.0.0/8", "192.0.0.0/24",
	"224.0.0.0/4", "240.0.0.0/4", "ff00::/8", "64:ff9b:1::/48",
}

// DefaultConf returns the gateway defaults for vip.
func DefaultConf(vip netip.Addr) Conf {
	return Conf{
		Listen: "127.0.0.1:3128", ProxyProtocol: true,
		Pepd: []string{"127.0.0.1/32"}, Subscribers: []string{"198.18.0.0/24"},
		Resolvers: []string{"198.18.1.2"}, HostsFile: "none", AllowedPorts: []uint16{80},
		Forbidden: append(append([]string(nil), ForbiddenRanges...), vip.String()),
		CacheDir:  "/var/spool/squid", CacheDirMB: 10000, CacheMemMB: 256,
		LogDir: "/var/log/squid", PidFile: "/run/squid.pid", User: "proxy", ShutdownSeconds: 10,
		MemoryMaxObjectKB: DefaultMemoryMaxObjectKB,
	}
}

// Render executes the template text tmpl (configs/squid.conf, Template)
// with c and writes the result to w: the same bytes for the same tmpl and
// c (testdata/conf pins them). Errors, before anything is written: an
// empty list where Squid needs at least one value (Pepd, Subscribers,
// Resolvers, AllowedPorts, Forbidden), a negative MemoryMaxObjectKB, an
// Optimizer, MemoryTier or peer that is not host:port, Peers without
// PeerListen, a MemoryTier with Peers or MemoryOnly; then a template error
// (a name tmpl uses that Conf lacks). Squid's directives:
// https://www.squid-cache.org/Doc/config/.
func Render(w io.Writer, tmpl string, c Conf) error {
	for name, l := range map[string]int{"Pepd": len(c.Pepd), "Subscribers": len(c.Subscribers),
		"Resolvers": len(c.Resolvers), "AllowedPorts": len(c.AllowedPorts), "Forbidden": len(c.Forbidden)} {
		if l == 0 {
			return fmt.Errorf("squid: squid.conf: %s is empty", name)
		}
	}
	if c.MemoryMaxObjectKB < 0 {
		return fmt.Errorf("squid: squid.conf: MemoryMaxObjectKB %d is negative", c.MemoryMaxObjectKB)
	}
	if c.MemoryMaxObjectKB == 0 {
		c.MemoryMaxObjectKB = DefaultMemoryMaxObjectKB
	}
	if c.Optimizer != "" {
		if _, _, err := net.SplitHostPort(c.Optimizer); err != nil {
			return fmt.Errorf("squid: squid.conf: optimizer %q: %w", c.Optimizer, err)
		}
	}
	if c.MemoryTier != "" {
		if _, _, err := net.SplitHostPort(c.MemoryTier); err != nil {
			return fmt.Errorf("squid: squid.conf: memory tier %q: %w", c.MemoryTier, err)
		}
		if len(c.Peers) > 0 || c.MemoryOnly {
			return fmt.Errorf("squid: squid.conf: a memory tier is not built for a CARP array member or for the tier itself")
		}
	}
	if len(c.Peers) > 0 {
		if c.PeerListen == "" {
			return fmt.Errorf("squid: squid.conf: Peers without PeerListen")
		}
		for _, p := range c.Peers {
			if _, _, err := net.SplitHostPort(p); err != nil {
				return fmt.Errorf("squid: squid.conf: peer %q: %w", p, err)
			}
		}
	}
	t, err := template.New("squid.conf").Option("missingkey=error").Funcs(template.FuncMap{
		"join": strings.Join,
		"host": func(hp string) string { h, _, _ := net.SplitHostPort(hp); return h },
		"port": func(hp string) string { _, p, _ := net.SplitHostPort(hp); return p },
		"hosts": func(hps []string) string {
			var hs []string
			for _, hp := range hps {
				h, _, _ := net.SplitHostPort(hp)
				hs = append(hs, h)
			}
			return strings.Join(hs, " ")
		},
		"joinInts": func(p []uint16, sep string) string {
			s := make([]string, len(p))
			for i, x := range p {
				s[i] = strconv.Itoa(int(x))
			}
			return strings.Join(s, sep)
		},
	}).Parse(tmpl)
	if err != nil {
		return fmt.Errorf("squid: squid.conf template: %w", err)
	}
	if err := t.Execute(w, c); err != nil {
		return fmt.Errorf("squid: squid.conf template: %w", err)
	}
	return nil
}
