package dnsproxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"pep/internal/config/field"
	"pep/internal/guard"
	"pep/internal/mode"
)

// Config is pepd's "dns" section: the DNS rewriter's settings (issue 3).
// DefaultConfig gives its defaults; Validate checks it. Options embeds
// it, so pepd hands the section over as it is.
type Config struct {
	// RewriteDomains are domain suffixes whose A answers get the VIP; "*"
	// means every name. With RewriteDomainsFile, RewriteWWW and Exclude
	// they make the rewrite Policy (see NewPolicy).
	RewriteDomains []string `yaml:"rewrite_domains"`
	// RewriteDomainsFile is a file of more suffixes, one a line (#
	// comments), read again by Reload (SIGHUP).
	RewriteDomainsFile string `yaml:"rewrite_domains_file"`
	// RewriteWWW also rewrites every name starting with "www." (paper
	// §3.2).
	RewriteWWW bool `yaml:"rewrite_www"`
	// Exclude are suffixes never rewritten, even when they match.
	Exclude []string `yaml:"exclude"`
	// VIPTTL is the TTL given to the VIP record, whole seconds,
	// 1s..2^31s. Default 24h (the paper's one day).
	VIPTTL time.Duration `yaml:"vip_ttl"`
	// TTLPolicy chooses the TTL of the rewritten RRset (RFC 2181 §5.2: one
	// RRset, one TTL): TTLRRset (all records at vip_ttl), TTLOrigin (all
	// at the origin's TTL), TTLMin (all at the lower of both). Default
	// "rrset".
	TTLPolicy string `yaml:"ttl_policy"`
	// Origins says what happens to the origin addresses of a rewritten A
	// (or AAAA) RRset: OriginsKeep puts them after the VIP, so that a phone
	// that roamed away from the VIP falls back to the origin (paper §3.2,
	// §5.3.2); OriginsDrop answers with the VIP alone. Keeping them costs,
	// at long RTTs, a second SYN per connection: browsers that race
	// addresses (Chromium's Happy Eyeballs, 250 ms) try the origin before
	// the VIP's SYN-ACK is back (testbed/README.md). Default "keep" (also
	// when empty).
	Origins string `yaml:"origins"`
	// AAAA for rewritten names: AAAAPass, AAAAFilter or AAAAVIP6 (VIP6
	// first; needs the top-level vip6). Default "filter".
	AAAA string `yaml:"aaaa"`
	// HTTPSRecords (type 65) for rewritten names: HTTPSFilter or
	// HTTPSHints. Default "filter".
	HTTPSRecords string `yaml:"https_records"`
	// Timeout for one upstream attempt. Default 2s.
	Timeout time.Duration `yaml:"timeout"`
	// Attempts per query over all resolvers. Default 3.
	Attempts int `yaml:"attempts"`
	// MaxInflight bounds upstream queries in flight. Default 1024.
	MaxInflight int `yaml:"max_inflight"`
}

// DefaultConfig returns the dns section's defaults.
func DefaultConfig() Config {
	return Config{VIPTTL: 24 * time.Hour, TTLPolicy: TTLRRset, Origins: OriginsKeep, AAAA: AAAAFilter,
		HTTPSRecords: HTTPSFilter, Timeout: 2 * time.Second, Attempts: 3, MaxInflight: 1024}
}

// Validate returns the first invalid field as a *field.Error whose path
// is relative to the section ("vip_ttl", "rewrite_domains.1"). Whether
// AAAAVIP6 has a vip6 to give is the caller's check (a top-level key).
func (c Config) Validate() error {
	for i, s := range c.RewriteDomains {
		if err := field.DomainSuffix(s, true); err != nil {
			return field.Errorf(fmt.Sprintf("rewrite_domains.%d", i), "%w", err)
		}
	}
	for i, s := range c.Exclude {
		if err := field.DomainSuffix(s, false); err != nil {
			return field.Errorf(fmt.Sprintf("exclude.%d", i), "%w", err)
		}
	}
	return field.First(
		field.Check(c.VIPTTL < time.Second || c.VIPTTL > 68*365*24*time.Hour, "vip_ttl", "%v is outside 1s..2^31s (RFC 2181 §8)", c.VIPTTL),
		field.Check(c.VIPTTL%time.Second != 0, "vip_ttl", "%v is not a whole number of seconds", c.VIPTTL),
		field.Check(!field.OneOf(c.TTLPolicy, TTLRRset, TTLOrigin, TTLMin), "ttl_policy", "%q is not one of rrset, origin, min", c.TTLPolicy),
		field.Check(!field.OneOf(c.Origins, OriginsKeep, OriginsDrop), "origins", "%q is not one of keep, drop", c.Origins),
		field.Check(!field.OneOf(c.AAAA, AAAAPass, AAAAFilter, AAAAVIP6), "aaaa", "%q is not one of pass, filter, vip6", c.AAAA),
		field.Check(!field.OneOf(c.HTTPSRecords, HTTPSFilter, HTTPSHints), "https_records", "%q is not one of filter, hints", c.HTTPSRecords),
		field.Positive("timeout", c.Timeout),
		field.AtLeast("attempts", c.Attempts, 1),
		field.AtLeast("max_inflight", c.MaxInflight, 1),
	)
}

// Options configure a Proxy: the dns section (Config) and what pepd wires
// in from elsewhere.
type Options struct {
	// Config is the dns section. RewriteDomains, RewriteDomainsFile,
	// RewriteWWW and Exclude are read again by Reload (the file) and
	// replaced by ReloadConfig.
	Config
	// VIP is put first in rewritten A answers (IPv4; top-level vip).
	VIP netip.Addr
	// VIP6 is put first in AAAA answers when AAAA is "vip6" (top-level
	// vip6).
	VIP6 netip.Addr
	// Resolvers are the carrier resolvers, host:port (top-level
	// resolvers).
	Resolvers []string

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

// validate checks what Config.Validate (run by pepd's loader) does not
// already guarantee for Options built in code.
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
