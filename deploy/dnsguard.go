package deploy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// DNSGuard keeps the gateway ruleset's dns_alive set in step with pepd's
// DNS listener: every Interval it asks the listener one question over UDP
// and over TCP, and for each protocol that got an answer (any answer: a
// REFUSED for the guard's own address is one) it refreshes that protocol's
// element with timeout TTL. When pepd dies or hangs, the elements expire
// and the ruleset stops redirecting subscriber DNS to it (fail open; see
// nftables/pep-gateway.nft). If the guard itself dies, the same happens.
type DNSGuard struct {
	// Probe is pepd's DNS listener, host:port, e.g. "127.0.0.1:5353".
	Probe string
	// Interval between probes. Default 1s.
	Interval time.Duration
	// Timeout for one probe. Default 500ms.
	Timeout time.Duration
	// TTL is the element timeout: how long DNS stays redirected after the
	// last good probe. It bounds how long subscribers' queries meet a dead
	// pepd. Default 3s; must exceed Interval.
	TTL time.Duration
	// Table is the nftables table holding the set. Default "ip pep".
	Table string
	// Nft runs an nft(8) script (nft -f -). Default: exec nft -f -.
	Nft func(ctx context.Context, script string) error
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (g *DNSGuard) defaults() error {
	if g.Interval == 0 {
		g.Interval = time.Second
	}
	if g.Timeout == 0 {
		g.Timeout = 500 * time.Millisecond
	}
	if g.TTL == 0 {
		g.TTL = 3 * time.Second
	}
	if g.Table == "" {
		g.Table = "ip pep"
	}
	if g.Nft == nil {
		g.Nft = RunNft
	}
	if g.Logger == nil {
		g.Logger = slog.Default()
	}
	if g.Probe == "" {
		return errors.New("deploy: dns-guard: probe: empty (want pepd's listen.dns, host:port)")
	}
	if g.TTL <= g.Interval {
		return fmt.Errorf("deploy: dns-guard: ttl %s must exceed interval %s", g.TTL, g.Interval)
	}
	return nil
}

// RunNft runs script with `nft -f -`.
func RunNft(ctx context.Context, script string) error {
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("deploy: nft: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// RefreshScript returns the nft script that (re)sets protocol proto's
// element in the dns_alive set with timeout ttl, in one transaction: add
// (a no-op if present), delete, add, so that the timeout restarts on every
// kernel, with or without element timeout update.
func RefreshScript(table, proto string, ttl time.Duration) string {
	el := fmt.Sprintf("{ %s timeout %dms }", proto, ttl.Milliseconds())
	return fmt.Sprintf("add element %s dns_alive %s\ndelete element %s dns_alive { %s }\nadd element %s dns_alive %s\n",
		table, el, table, proto, table, el)
}

// Run probes until ctx ends, then returns nil; it returns an error at once
// if the settings are bad. Probe failures and nft errors are logged, never
// fatal: the elements expire, which is the safe state.
func (g *DNSGuard) Run(ctx context.Context) error {
	if err := g.defaults(); err != nil {
		return err
	}
	up := map[string]bool{}
	tick := time.NewTicker(g.Interval)
	defer tick.Stop()
	for {
		for _, proto := range []string{"udp", "tcp"} {
			err := g.probe(ctx, proto)
			if err == nil {
				err = g.Nft(ctx, RefreshScript(g.Table, proto, g.TTL))
			}
			if ok := err == nil; ok != up[proto] {
				up[proto] = ok
				if ok {
					g.Logger.Info("pepd DNS answers: redirecting subscriber DNS to it", "proto", proto)
				} else {
					g.Logger.Warn("pepd DNS does not answer: subscriber DNS bypasses pepd once the element expires",
						"proto", proto, "ttl", g.TTL, "err", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (g *DNSGuard) probe(ctx context.Context, proto string) error {
	c := &dns.Client{Net: proto, Timeout: g.Timeout}
	m := new(dns.Msg)
	m.SetQuestion("pep-dns-guard.invalid.", dns.TypeA) // RFC 6761 §6.4: never a real name
	_, _, err := c.ExchangeContext(ctx, m, g.Probe)
	if err != nil {
		return fmt.Errorf("deploy: dns-guard: probe %s %s: %w", proto, g.Probe, err)
	}
	return nil
}
