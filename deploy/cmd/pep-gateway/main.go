// Command pep-gateway renders the gateway's nftables ruleset and policy
// routing with an operator's values (package pep/deploy does the work).
//
//	pep-gateway render [flags] > /etc/pep/pep-gateway.nft
//	                   (-pepd-config /etc/pep/pepd.yaml: the VIP's TLS ports from https.*)
//	pep-gateway env    [flags] > /etc/default/pep-gateway   (read by pep-nftables.service)
//	pep-gateway routes [flags]                              (the ip(8) commands, one a line)
//	pep-gateway dns-guard -probe 127.0.0.1:5353             (keeps the dns_alive set; pep-dns-guard.service)
//	pep-gateway director -gateway gw1=10.0.1.2,http://10.0.1.2:9090/healthz -gateway gw2=...
//	                                                        (a gateway array's director: ruleset, routes, health checks)
//	pep-gateway director-render|director-routes [same flags] (print the director's ruleset or ip commands)
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"pep/deploy"
	"pep/internal/config"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmd := os.Args[1]
	switch cmd {
	case "dns-guard":
		dnsGuard(os.Args[2:])
		return
	case "director", "director-render", "director-routes":
		director(cmd, os.Args[2:])
		return
	}
	g := deploy.Default()
	fs := flag.NewFlagSet("pep-gateway "+cmd, flag.ExitOnError)
	ifs := fs.String("sub-if", strings.Join(g.SubscriberIfs, ","), "subscriber-facing interfaces, comma-separated")
	nets := fs.String("sub-net", "198.18.0.0/24", "subscriber source ranges, comma-separated")
	vip := fs.String("vip", g.VIP.String(), "pepd's VIP (made a local address on lo)")
	http := fs.Uint("http-port", uint(g.HTTPPort), "pepd listen.tproxy port")
	tls := fs.Uint("tls-port", uint(g.TLSPort), "pepd listen.tls port")
	dns := fs.Uint("dns-port", uint(g.DNSPort), "pepd listen.dns port")
	mark := fs.Uint("mark", uint(g.Mark), "fwmark bit for the local route table")
	table := fs.Int("table", g.Table, "routing table for local 0.0.0.0/0")
	prio := fs.Int("rule-priority", g.RulePriority, "ip rule priority")
	src := fs.String("ruleset", "", "ruleset template (default: the one built in)")
	tlsPorts := fs.String("vip-tls-ports", "443", "the VIP's TCP ports steered to -tls-port, comma-separated: 443 and each https shard port (https.shard_ports)")
	pepdConf := fs.String("pepd-config", "", "pepd's config file: the VIP's TLS ports are 443 and its https shards' ports (https.shards, https.shard_ports), instead of -vip-tls-ports")
	fs.Parse(os.Args[2:])

	g.SubscriberIfs = strings.Split(*ifs, ",")
	g.SubscriberNets = nil
	for _, s := range strings.Split(*nets, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			fail(fmt.Errorf("pep-gateway: -sub-net: %q: %w", s, err))
		}
		g.SubscriberNets = append(g.SubscriberNets, p)
	}
	a, err := netip.ParseAddr(*vip)
	if err != nil {
		fail(fmt.Errorf("pep-gateway: -vip: %q: %w", *vip, err))
	}
	g.VIP = a
	for _, p := range []struct {
		name string
		v    uint
	}{{"http-port", *http}, {"tls-port", *tls}, {"dns-port", *dns}} {
		if p.v > 65535 {
			fail(fmt.Errorf("pep-gateway: -%s: %d is not a port", p.name, p.v))
		}
	}
	g.HTTPPort, g.TLSPort, g.DNSPort = uint16(*http), uint16(*tls), uint16(*dns)
	g.Mark, g.Table, g.RulePriority = uint32(*mark), *table, *prio
	if *pepdConf != "" {
		c, err := config.Load(*pepdConf)
		if err != nil {
			fail(fmt.Errorf("pep-gateway: -pepd-config: %w", err))
		}
		if c.HTTPS.Enabled() {
			g.VIPTLSPorts = c.HTTPS.Ports()
		}
	} else {
		for _, f := range strings.Split(*tlsPorts, ",") {
			p, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
			if err != nil {
				fail(fmt.Errorf("pep-gateway: -vip-tls-ports: %q is not a port", f))
			}
			g.VIPTLSPorts = append(g.VIPTLSPorts, uint16(p))
		}
	}
	if err := g.Validate(); err != nil {
		fail(err)
	}

	switch cmd {
	case "render":
		tmpl := deploy.Ruleset
		if *src != "" {
			if tmpl, err = os.ReadFile(*src); err != nil {
				fail(fmt.Errorf("pep-gateway: %w", err))
			}
		}
		out, err := deploy.RenderRuleset(tmpl, g)
		if err != nil {
			fail(err)
		}
		os.Stdout.Write(out)
	case "env":
		fmt.Print(deploy.EnvFile(g))
	case "routes":
		for _, c := range deploy.RoutingPlan(g) {
			fmt.Println(strings.Join(c, " "))
		}
	default:
		usage()
	}
}

func dnsGuard(args []string) {
	fs := flag.NewFlagSet("pep-gateway dns-guard", flag.ExitOnError)
	g := deploy.DNSGuard{}
	fs.StringVar(&g.Probe, "probe", "127.0.0.1:5353", "pepd's DNS listener (listen.dns), host:port")
	fs.DurationVar(&g.Interval, "interval", time.Second, "time between probes")
	fs.DurationVar(&g.Timeout, "timeout", 500*time.Millisecond, "timeout of one probe")
	fs.DurationVar(&g.TTL, "ttl", 3*time.Second, "how long DNS stays redirected after the last good probe")
	fs.StringVar(&g.Table, "table", "ip pep", "nftables family and table holding the dns_alive set")
	fs.Parse(args)
	g.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "dns-guard")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := g.Run(ctx); err != nil {
		fail(err)
	}
}

// gatewayFlags collects repeated -gateway NAME=NEXTHOP,HEALTHURL values.
type gatewayFlags []deploy.ArrayGateway

func (g *gatewayFlags) String() string { return fmt.Sprint(*g) }

func (g *gatewayFlags) Set(v string) error {
	name, rest, ok := strings.Cut(v, "=")
	hop, health, ok2 := strings.Cut(rest, ",")
	if !ok || !ok2 || name == "" {
		return fmt.Errorf("%q is not NAME=NEXTHOP,HEALTHURL", v)
	}
	a, err := netip.ParseAddr(hop)
	if err != nil {
		return fmt.Errorf("%q: next hop: %w", v, err)
	}
	*g = append(*g, deploy.ArrayGateway{Name: name, NextHop: a, Health: health})
	return nil
}

// director runs (or prints the ruleset or routes of) a gateway array's
// director (deploy.Director): at start it installs the policy routing and
// the ruleset with every gateway up, then health-checks until SIGTERM.
func director(cmd string, args []string) {
	fs := flag.NewFlagSet("pep-gateway "+cmd, flag.ExitOnError)
	var gws gatewayFlags
	fs.Var(&gws, "gateway", "a gateway of the array, NAME=NEXTHOP,HEALTHURL (repeat; the same order on every director)")
	ifs := fs.String("sub-if", "sub0", "subscriber-facing interfaces, comma-separated")
	nets := fs.String("sub-net", "198.18.0.0/24", "subscriber source ranges, comma-separated")
	d := deploy.Director{}
	fs.DurationVar(&d.Interval, "interval", 200*time.Millisecond, "time between probes of each gateway")
	fs.DurationVar(&d.Timeout, "timeout", 300*time.Millisecond, "timeout of one probe")
	fs.IntVar(&d.Fall, "fall", 2, "failed probes in a row that withdraw a gateway")
	fs.IntVar(&d.Rise, "rise", 2, "good probes in a row that bring it back")
	fs.Parse(args)
	d.Gateways = gws
	d.SubscriberIfs = strings.Split(*ifs, ",")
	for _, s := range strings.Split(*nets, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			fail(fmt.Errorf("pep-gateway: -sub-net: %q: %w", s, err))
		}
		d.SubscriberNets = append(d.SubscriberNets, p)
	}
	d.Log = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "director")
	rules, err := d.Ruleset()
	if err != nil {
		fail(err)
	}
	switch cmd {
	case "director-render":
		os.Stdout.Write(rules)
		return
	case "director-routes":
		for _, c := range d.Routes() {
			fmt.Println(strings.Join(c, " "))
		}
		return
	}
	for _, c := range d.Routes() {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil && !strings.Contains(string(out), "File exists") {
			fail(fmt.Errorf("pep-gateway: %s: %v: %s", strings.Join(c, " "), err, out))
		}
	}
	if err := d.Nft(string(rules)); err != nil {
		fail(err)
	}
	d.Log.Info("director started", "gateways", len(d.Gateways))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := d.Run(ctx); err != nil {
		fail(err)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: pep-gateway render|env|routes|dns-guard|director|director-render|director-routes [flags]  (pep-gateway render -h lists the flags)")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
