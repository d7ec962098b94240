// Command replay is the testbed's replay origin: it serves a page corpus
// for every corpus hostname at once (one listener, AnyIP route for the
// origin prefix), writes the test CA and the carrier resolver's dnsmasq
// configuration, and runs until SIGINT or SIGTERM.
//
//	replay -corpus default -http 0.0.0.0:80 -https 0.0.0.0:443 \
//	    -ca-out /run/pep/ca.pem -dnsmasq-conf /run/pep/dnsmasq.conf -prefix 198.19.0.0/16
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"pep/testbed/corpus"
	"pep/testbed/origin"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "replay:", err)
		os.Exit(1)
	}
}

func run() error {
	spec := flag.String("corpus", "default", `"default", a tp5n .tar.gz or directory, a .warc[.gz] file or a directory of them`)
	pages := flag.String("pages", "", `page selection: "" (all), N (first N) or a comma-separated list of names`)
	httpAddr := flag.String("http", "0.0.0.0:80", "HTTP listen address (empty: none)")
	httpsAddr := flag.String("https", "0.0.0.0:443", "HTTPS listen address (empty: none)")
	caOut := flag.String("ca-out", "", "write the test CA certificate (PEM) to this file")
	dnsConf := flag.String("dnsmasq-conf", "", "write the dnsmasq configuration to this file (and FILE.hosts)")
	prefix := flag.String("prefix", corpus.DefaultPrefix.String(), "origin address block")
	ttl := flag.Duration("dns-ttl", 0, "TTL of the resolver's answers (0: 1h)")
	verbose := flag.Bool("v", false, "log every miss")
	flag.Parse()

	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("component", "replay")

	pfx, err := netip.ParsePrefix(*prefix)
	if err != nil {
		return fmt.Errorf("-prefix %q: %w", *prefix, err)
	}
	c, err := corpus.Open(*spec)
	if err != nil {
		return err
	}
	if c, err = c.SelectSpec(*pages); err != nil {
		return err
	}
	plan, err := corpus.PlanFor(c, pfx)
	if err != nil {
		return err
	}
	if *dnsConf != "" {
		if err := plan.WriteDnsmasq(*dnsConf, corpus.DnsmasqOptions{TTL: *ttl}); err != nil {
			return err
		}
	}
	o, err := origin.New(origin.Config{Corpus: c, Plan: plan, Logger: log})
	if err != nil {
		return err
	}
	if *caOut != "" {
		if err := o.CA().WriteFile(*caOut); err != nil {
			return err
		}
	}
	var plain, secure net.Listener
	if *httpAddr != "" {
		if plain, err = net.Listen("tcp", *httpAddr); err != nil {
			return err
		}
	}
	if *httpsAddr != "" {
		if secure, err = net.Listen("tcp", *httpsAddr); err != nil {
			return err
		}
	}
	fmt.Printf("replay: %d pages, %d hosts, %d objects from %s; http %s https %s; spki %s\n",
		len(c.Pages), len(c.Hosts()), c.Len(), c.Source, *httpAddr, *httpsAddr, o.CA().SPKIHash())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return o.Serve(ctx, plain, secure)
}
