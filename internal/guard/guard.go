// Package guard keeps pepd from being an open proxy or an open resolver
// (DESIGN.md "pepd": "refuses to be an open proxy").
//
// A Policy answers two questions:
//
//   - ClientAllowed: is this source address a subscriber? Only subscriber
//     ranges are served; everybody else is refused (HTTP 403, DNS REFUSED,
//     TLS reset).
//   - CheckTarget: may pepd (or Squid on its behalf) connect to this
//     resolved address and port? Loopback, link-local, private (RFC 1918,
//     RFC 4193), CGNAT (RFC 6598), unspecified, multicast, broadcast and
//     reserved ranges, the VIP and pepd's own addresses are refused, and so
//     is any port outside the allowed list. The check runs on the resolved
//     address at dial time (see Control), so a name that resolves to a
//     forbidden address is refused whatever it is called.
//
// Operators who really host origins in one of the forbidden ranges (the
// testbed does not: it uses 198.19.0.0/16) list those prefixes in Allow.
package guard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"syscall"
)

// Reason names why a target was refused; it is the label of the
// pep_*_refused_total metrics and the short text of a 403 answer.
type Reason string

// Reasons a target or client is refused.
const (
	ReasonNotSubscriber Reason = "not a subscriber"
	ReasonLoopback      Reason = "loopback address"
	ReasonLinkLocal     Reason = "link-local address"
	ReasonPrivate       Reason = "private address"
	ReasonCGNAT         Reason = "shared address space (CGNAT)"
	ReasonReserved      Reason = "reserved or special-purpose address"
	ReasonSelf          Reason = "the proxy's own address"
	ReasonPort          Reason = "port not allowed"
	ReasonDenied        Reason = "denied by configuration"
)

// DeniedError is returned by CheckTarget and Control when a target is
// refused. Use errors.As to get it from a wrapped dial error.
type DeniedError struct {
	Target netip.AddrPort // the resolved address and port that was refused
	Reason Reason
}

// Error implements error: "guard: 10.0.0.1:80 refused: private address".
func (e *DeniedError) Error() string {
	return fmt.Sprintf("guard: %s refused: %s", e.Target, e.Reason)
}

// Policy is the not-an-open-proxy policy. Build it with New; the zero value
// refuses every client.
type Policy struct {
	subscribers []netip.Prefix
	ports       []uint16
	self        []netip.Addr
	allow       []netip.Prefix
	deny        []netip.Prefix
}

// Options configure a Policy.
type Options struct {
	// Subscribers are the source ranges served. Empty: nobody is served.
	Subscribers []netip.Prefix
	// AllowedPorts are the destination ports pepd forwards to. Empty means
	// the default, port 80 only (443 is added by the SNI splice for its own
	// checks).
	AllowedPorts []uint16
	// Self are addresses that are the proxy itself: the VIP and pepd's own
	// interface addresses (see LocalAddrs). Always refused as targets.
	Self []netip.Addr
	// Allow are prefixes exempt from the built-in special-range checks
	// (never from Self or Deny).
	Allow []netip.Prefix
	// Deny are extra prefixes refused as targets (ReasonDenied).
	Deny []netip.Prefix
}

// New returns a Policy for opts. Addresses are unmapped (::ffff:a.b.c.d is
// treated as a.b.c.d).
func New(opts Options) *Policy {
	p := &Policy{
		subscribers: slices.Clone(opts.Subscribers),
		ports:       slices.Clone(opts.AllowedPorts),
		allow:       slices.Clone(opts.Allow),
		deny:        slices.Clone(opts.Deny),
	}
	if len(p.ports) == 0 {
		p.ports = DefaultConfig().AllowedPorts
	}
	for _, a := range opts.Self {
		p.self = append(p.self, a.Unmap())
	}
	return p
}

// WithPorts returns a copy of p that allows exactly ports (for the SNI
// splice, which dials 443).
func (p *Policy) WithPorts(ports ...uint16) *Policy {
	q := *p
	q.ports = slices.Clone(ports)
	return &q
}

// ClientAllowed reports whether src is inside a subscriber range.
func (p *Policy) ClientAllowed(src netip.Addr) bool {
	src = src.Unmap()
	for _, pfx := range p.subscribers {
		if pfx.Contains(src) {
			return true
		}
	}
	return false
}

// CheckTarget returns nil if pepd may connect to dst, or a *DeniedError
// saying why not.
func (p *Policy) CheckTarget(dst netip.AddrPort) error {
	a := dst.Addr().Unmap()
	deny := func(r Reason) error { return &DeniedError{Target: netip.AddrPortFrom(a, dst.Port()), Reason: r} }
	if !slices.Contains(p.ports, dst.Port()) {
		return deny(ReasonPort)
	}
	if slices.Contains(p.self, a) {
		return deny(ReasonSelf)
	}
	for _, pfx := range p.deny {
		if pfx.Contains(a) {
			return deny(ReasonDenied)
		}
	}
	for _, pfx := range p.allow {
		if pfx.Contains(a) {
			return nil
		}
	}
	if r, bad := Special(a); bad {
		return deny(r)
	}
	return nil
}

// CheckHostPort is CheckTarget for a "host:port" string holding a literal
// address (as net.Dialer passes to Control). A host that is not an IP
// literal is refused with ReasonReserved: the check runs after resolution.
func (p *Policy) CheckHostPort(hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("guard: bad target %q: %w", hostport, err)
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return &DeniedError{Reason: ReasonReserved}
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return fmt.Errorf("guard: bad port in %q: %w", hostport, err)
	}
	return p.CheckTarget(netip.AddrPortFrom(a, uint16(n)))
}

// Control is a net.Dialer.Control function: it refuses the connection
// before connect(2) if the resolved address is not allowed. The error it
// returns wraps a *DeniedError.
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	return p.CheckHostPort(address)
}

// IsDenied reports whether err (or an error it wraps) is a *DeniedError,
// and returns it.
func IsDenied(err error) (*DeniedError, bool) {
	var d *DeniedError
	ok := errors.As(err, &d)
	return d, ok
}

// special lists the IANA special-purpose ranges refused as targets
// (RFC 6890 and the registries it set up), most specific reason first.
var special = []struct {
	pfx    netip.Prefix
	reason Reason
}{
	{netip.MustParsePrefix("127.0.0.0/8"), ReasonLoopback},
	{netip.MustParsePrefix("::1/128"), ReasonLoopback},
	{netip.MustParsePrefix("169.254.0.0/16"), ReasonLinkLocal},
	{netip.MustParsePrefix("fe80::/10"), ReasonLinkLocal},
	{netip.MustParsePrefix("10.0.0.0/8"), ReasonPrivate},
	{netip.MustParsePrefix("172.16.0.0/12"), ReasonPrivate},
	{netip.MustParsePrefix("192.168.0.0/16"), ReasonPrivate},
	{netip.MustParsePrefix("fc00::/7"), ReasonPrivate},
	{netip.MustParsePrefix("100.64.0.0/10"), ReasonCGNAT},
	{netip.MustParsePrefix("0.0.0.0/8"), ReasonReserved},
	{netip.MustParsePrefix("192.0.0.0/24"), ReasonReserved},
	{netip.MustParsePrefix("224.0.0.0/4"), ReasonReserved},
	{netip.MustParsePrefix("240.0.0.0/4"), ReasonReserved},
	{netip.MustParsePrefix("::/128"), ReasonReserved},
	{netip.MustParsePrefix("ff00::/8"), ReasonReserved},
	{netip.MustParsePrefix("64:ff9b:1::/48"), ReasonReserved},
}

// Special reports whether a is in a special-purpose range refused as a
// target, and which. Public ranges, documentation and benchmarking ranges
// (192.0.2.0/24, 198.18.0.0/15: the testbed's) are not special here; the
// VIP is refused through Options.Self.
func Special(a netip.Addr) (Reason, bool) {
	a = a.Unmap()
	for _, s := range special {
		if s.pfx.Contains(a) {
			return s.reason, true
		}
	}
	return "", false
}

// LocalAddrs returns the addresses of this host's interfaces (in the
// current network namespace), for Options.Self.
func LocalAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("guard: listing interface addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}
