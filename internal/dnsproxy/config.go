package dnsproxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"pep/internal/config"
	"pep/internal/guard"
	"pep/internal/mode"
)

// Options configure a Proxy. OptionsFrom fills the settings from pepd's
// config; the caller adds Mode, Guard, Logger and Registerer.
type Options struct {
	// VIP is put first in rewritten A answers (IPv4).
	VIP netip.Addr
	// VIP6 is put first in AAAA answers when AAAA is "vip6".
	VIP6 netip.Addr
	// Resolvers are the carrier resolvers, host:port.
	Resolvers []string
	// RewriteDomains, RewriteDomainsFile, RewriteWWW and Exclude make the
	// rewrite Policy (see NewPolicy). The file is read again by Reload.
	RewriteDomains     []string
	RewriteDomainsFile string
	RewriteWWW         bool
	Exclude            []string
	// VIPTTL is the VIP's TTL, whole seconds, 1s..2^31s.
	VIPTTL time.Duration
	// TTLPolicy is TTLRRset, TTLOrigin or TTLMin.
	TTLPolicy string
	// Origins is OriginsKeep (default when empty) or OriginsDrop: whether a
	// rewritten RRset keeps the origin addresses after the VIP.
	Origins string
	// AAAA is AAAAPass, AAAAFilter or AAAAVIP6.
	AAAA string
	// HTTPSRecords is HTTPSFilter or HTTPSHints.
	HTTPSRecords string
	// Timeout, Attempts and MaxInflight configure the Upstream.
	Timeout     time.Duration
	Attempts    int
	MaxInflight int

	// Mode is read on every query: answers are rewritten only in dns
	// mode. Nil means always dns (tests).
	Mode *mode.Switch
	// Guard says who is a subscriber; others get REFUSED. Required.
	Guard *guard.Policy
	// Logger gets errors and, at debug level, skipped answers. Nil
	// discards.
	Logger *slog.Logger
	// Registerer gets the pep_dns_* metrics. Nil registers nothing.
	Registerer prometheus.Registerer
}

// OptionsFrom returns the Options for pepd's configuration c (its DNS
// section and the top-level vip, vip6 and resolvers).
func OptionsFrom(c *config.Config) Options {
	d := c.DNS
	return Options{
		VIP: c.VIP, VIP6: c.VIP6, Resolvers: c.Resolvers,
		RewriteDomains: d.RewriteDomains, RewriteDomainsFile: d.RewriteDomainsFile,
		RewriteWWW: d.RewriteWWW, Exclude: d.Exclude,
		VIPTTL: d.VIPTTL, TTLPolicy: d.TTLPolicy, Origins: d.Origins, AAAA: d.AAAA, HTTPSRecords: d.HTTPSRecords,
		Timeout: d.Timeout, Attempts: d.Attempts, MaxInflight: d.MaxInflight,
	}
}

// validate checks what internal/config does not already guarantee for
// Options built in code.
func (o *Options) validate() error {
	switch {
	case !o.VIP.Is4():
		return fmt.Errorf("dnsproxy: vip %q is not an IPv4 address", o.VIP)
	case o.AAAA == AAAAVIP6 && !o.VIP6.Is6():
		return fmt.Errorf("dnsproxy: aaaa %q needs an IPv6 vip6, have %q", o.AAAA, o.VIP6)
	case o.VIPTTL < time.Second || o.VIPTTL%time.Second != 0 || o.VIPTTL > (1<<31-1)*time.Second:
		return fmt.Errorf("dnsproxy: vip_ttl %v is not a whole number of seconds in 1s..2^31s", o.VIPTTL)
	case o.TTLPolicy != TTLRRset && o.TTLPolicy != TTLOrigin && o.TTLPolicy != TTLMin:
		return fmt.Errorf("dnsproxy: ttl_policy %q is not one of rrset, origin, min", o.TTLPolicy)
	case o.AAAA != AAAAPass && o.AAAA != AAAAFilter && o.AAAA != AAAAVIP6:
		return fmt.Errorf("dnsproxy: aaaa %q is not one of pass, filter, vip6", o.AAAA)
	case o.HTTPSRecords != HTTPSFilter && o.HTTPSRecords != HTTPSHints:
		return fmt.Errorf("dnsproxy: https_records %q is not one of filter, hints", o.HTTPSRecords)
	case o.Guard == nil:
		return errors.New("dnsproxy: no guard policy")
	}
	return nil
}
