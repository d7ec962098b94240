package guard

import (
	"fmt"
	"net/netip"

	"pep/internal/config/field"
)

// Config is pepd's "guard" section: the not-an-open-proxy settings beyond
// the subscriber ranges (which are pepd's top-level subscribers).
// DefaultConfig gives its defaults; Validate checks it; Options turns it
// into New's Options.
type Config struct {
	// AllowedPorts are the destination ports pepd forwards to. Default
	// [80].
	AllowedPorts []uint16 `yaml:"allowed_ports"`
	// Allow exempts prefixes from the special-range checks.
	Allow []netip.Prefix `yaml:"allow"`
	// Deny refuses more prefixes.
	Deny []netip.Prefix `yaml:"deny"`
}

// DefaultConfig returns the guard section's defaults: port 80 only.
func DefaultConfig() Config { return Config{AllowedPorts: []uint16{80}} }

// Validate returns the first invalid field as a *field.Error whose path
// is relative to the section ("allowed_ports.0").
func (c Config) Validate() error {
	for i, p := range c.AllowedPorts {
		if p == 0 {
			return field.Errorf(fmt.Sprintf("allowed_ports.%d", i), "port 0 is not a port")
		}
	}
	return nil
}

// Options returns New's Options for c with the subscriber ranges and the
// proxy's own addresses (see Options.Self).
func (c Config) Options(subscribers []netip.Prefix, self []netip.Addr) Options {
	return Options{Subscribers: subscribers, AllowedPorts: c.AllowedPorts, Self: self, Allow: c.Allow, Deny: c.Deny}
}
