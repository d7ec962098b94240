package config

import (
	"flag"
	"fmt"
	"net/netip"
	"strings"

	"pep/internal/mode"
)

// Flags are the command-line settings that override the file (issue 2
// "Foundations"). Register them with RegisterFlags, parse the FlagSet, then
// call Apply: only flags given on the command line override.
type Flags struct {
	fs                                                    *flag.FlagSet
	Config                                                string
	mode, vip, subscribers, resolver, httpListen          string
	dnsListen, adminListen, squid, rewriteDomains, tproxy string
	tlsListen                                             string
	procs                                                 int
}

// RegisterFlags defines pepd's flags on fs and returns their holder.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs}
	fs.StringVar(&f.Config, "config", "", "YAML config file (see configs/pepd.yaml)")
	fs.StringVar(&f.mode, "mode", "", "mode at start: off, dns or url")
	fs.StringVar(&f.vip, "vip", "", "the caching proxy's VIP (IPv4)")
	fs.StringVar(&f.subscribers, "subscribers", "", "subscriber source ranges, comma-separated CIDRs")
	fs.StringVar(&f.resolver, "resolver", "", "carrier resolvers, comma-separated host:port")
	fs.StringVar(&f.httpListen, "http-listen", "", "listen address for REDIRECT-intercepted and VIP HTTP")
	fs.StringVar(&f.tproxy, "tproxy-listen", "", "listen address for TPROXY-intercepted HTTP")
	fs.StringVar(&f.tlsListen, "tls-listen", "", "listen address for TLS to VIP:443 (SNI splice)")
	fs.StringVar(&f.dnsListen, "dns-listen", "", "listen address for DNS, UDP and TCP")
	fs.StringVar(&f.adminListen, "admin-listen", "", "listen address for the admin API and /metrics")
	fs.StringVar(&f.squid, "squid", "", "Squid's host:port")
	fs.IntVar(&f.procs, "procs", 0, "OS threads running Go code at once (GOMAXPROCS); 0 = one per CPU")
	fs.StringVar(&f.rewriteDomains, "rewrite-domains", "", "DNS mode: domain suffixes to rewrite, comma-separated; * = all")
	return f
}

// Apply writes the flags given on the command line over c and validates
// the result. Errors name the flag.
func (f *Flags) Apply(c *Config) error {
	var err error
	f.fs.Visit(func(fl *flag.Flag) {
		if err != nil {
			return
		}
		if e := f.apply(c, fl.Name); e != nil {
			err = fmt.Errorf("flag -%s: %w", fl.Name, e)
		}
	})
	if err != nil {
		return err
	}
	if e := c.Validate(); e != nil {
		return fmt.Errorf("config after flags: %w", c.locate(e))
	}
	return nil
}

func (f *Flags) apply(c *Config, name string) error {
	switch name {
	case "mode":
		m, err := mode.Parse(f.mode)
		if err != nil {
			return err
		}
		c.Mode = m
	case "vip":
		a, err := netip.ParseAddr(f.vip)
		if err != nil {
			return fmt.Errorf("%q is not an IPv4 address", f.vip)
		}
		c.VIP = a
	case "subscribers":
		c.Subscribers = nil
		for _, s := range splitList(f.subscribers) {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return fmt.Errorf("%q is not a CIDR prefix", s)
			}
			c.Subscribers = append(c.Subscribers, p)
		}
	case "resolver":
		c.Resolvers = splitList(f.resolver)
	case "http-listen":
		c.Listen.HTTP = f.httpListen
	case "tproxy-listen":
		c.Listen.TPROXY = f.tproxy
	case "procs":
		c.Procs = f.procs
	case "tls-listen":
		c.Listen.TLS = f.tlsListen
	case "dns-listen":
		c.Listen.DNS = f.dnsListen
	case "admin-listen":
		c.Listen.Admin = f.adminListen
	case "squid":
		c.Squid = f.squid
	case "rewrite-domains":
		c.DNS.RewriteDomains = splitList(f.rewriteDomains)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
