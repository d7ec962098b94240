// Package intercept accepts the HTTP connections that nftables steers to
// pepd and recovers each one's original destination (DESIGN.md "L4
// redirect").
//
//   - REDIRECT (nat hook, `redirect to :3129`) rewrites the destination to
//     pepd's own address; the original destination is read from conntrack
//     with getsockopt(SO_ORIGINAL_DST) on the accepted socket
//     (linux/netfilter_ipv4.h; IP6T_SO_ORIGINAL_DST for IPv6).
//   - TPROXY (`tproxy to :3130` with policy routing) delivers the
//     connection unchanged to a socket with IP_TRANSPARENT: the original
//     destination is the accepted socket's local address.
//
// Both listeners also accept connections made to pepd directly (for
// example to the VIP when the VIP is a local address); Conn.Intercepted
// tells the two apart.
package intercept

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Kind says how connections reach a listener.
type Kind int

const (
	// Redirect: nftables REDIRECT (NAT); original destination from
	// SO_ORIGINAL_DST.
	Redirect Kind = iota
	// TPROXY: nftables TPROXY; original destination = local address.
	TPROXY
)

// String returns "redirect" or "tproxy" (the metrics label).
func (k Kind) String() string {
	if k == TPROXY {
		return "tproxy"
	}
	return "redirect"
}

// Conn is an accepted connection with its original destination.
type Conn struct {
	net.Conn
	kind        Kind
	orig        netip.AddrPort
	intercepted bool
}

// NetConn returns the accepted connection itself (a *net.TCPConn), as
// crypto/tls.Conn.NetConn does, for callers that do their own I/O on it.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// OriginalDst returns the address and port the client connected to before
// nftables steered the connection, and whether the connection was steered
// at all (false: the client connected to pepd's listening address itself,
// and orig is that address).
func (c *Conn) OriginalDst() (orig netip.AddrPort, intercepted bool) {
	return c.orig, c.intercepted
}

// Kind returns the kind of listener that accepted c.
func (c *Conn) Kind() Kind { return c.kind }

// Listener accepts *Conn values. Build it with Listen.
type Listener struct {
	net.Listener
	kind Kind
}

// Listen opens a TCP listener of kind k on addr ("host:port"). TPROXY sets
// IP_TRANSPARENT (and IPV6_TRANSPARENT on IPv6 sockets), which needs
// CAP_NET_ADMIN. Errors carry the prefix "intercept:".
func Listen(ctx context.Context, k Kind, addr string) (*Listener, error) {
	lc := net.ListenConfig{}
	if k == TPROXY {
		lc.Control = transparent
	}
	l, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("intercept: listen %s %q: %w", k, addr, err)
	}
	return &Listener{Listener: l, kind: k}, nil
}

// transparent sets IP_TRANSPARENT (IPV6_TRANSPARENT) on the listening
// socket before bind(2), so that TPROXY can deliver connections for any
// destination address to it.
func transparent(network, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		if network == "tcp6" || network == "tcp" {
			// A dual-stack socket: IPV6_TRANSPARENT covers both; it fails on
			// an IPv4-only socket, where IP_TRANSPARENT is the one.
			if e := unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_TRANSPARENT, 1); e == nil {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1)
				return
			}
		}
		if e := unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1); e != nil {
			serr = fmt.Errorf("intercept: setsockopt IP_TRANSPARENT: %w", e)
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// Accept waits for the next connection and returns it as a *Conn. A
// REDIRECT connection whose conntrack entry is gone (or that was never
// NATed) is returned with its local address as original destination and
// Intercepted false.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	local, _ := netip.ParseAddrPort(c.LocalAddr().String())
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	ic := &Conn{Conn: c, kind: l.kind, orig: local}
	switch l.kind {
	case TPROXY:
		// Connections made to the listener's own port on a local address
		// are direct ones, or REDIRECTed to it (pepd's TLS listener takes
		// both: SO_ORIGINAL_DST tells); anything else was steered by TPROXY.
		ic.intercepted = local.Port() != listenPort(l.Listener)
		if tc, ok := c.(*net.TCPConn); ok && !ic.intercepted {
			if od, err := OriginalDst(tc); err == nil && od != local {
				ic.orig, ic.intercepted = od, true
			}
		}
	case Redirect:
		if tc, ok := c.(*net.TCPConn); ok {
			if od, err := OriginalDst(tc); err == nil && od != local {
				ic.orig, ic.intercepted = od, true
			}
		}
	}
	return ic, nil
}

func listenPort(l net.Listener) uint16 {
	ap, _ := netip.ParseAddrPort(l.Addr().String())
	return ap.Port()
}

// ErrNoOriginalDst is returned by OriginalDst when the kernel has no NAT
// record for the connection (it was not redirected, or nf_conntrack is not
// loaded).
var ErrNoOriginalDst = errors.New("intercept: no original destination (connection not redirected)")

// Linux constants from linux/netfilter_ipv4.h and
// linux/netfilter_ipv6/ip6_tables.h.
const (
	soOriginalDst    = 80 // SO_ORIGINAL_DST, level SOL_IP
	ip6tSoOriginalDs = 80 // IP6T_SO_ORIGINAL_DST, level SOL_IPV6
)

// OriginalDst returns the destination a REDIRECTed TCP connection had
// before NAT, read with getsockopt(SO_ORIGINAL_DST) (IPv4) or
// getsockopt(IP6T_SO_ORIGINAL_DST) (IPv6) on the accepted socket.
func OriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("intercept: %w", err)
	}
	local, _ := netip.ParseAddrPort(c.LocalAddr().String())
	var out netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		if local.Addr().Is4() || local.Addr().Is4In6() {
			var sa unix.RawSockaddrInet4
			n := uint32(unsafe.Sizeof(sa))
			if serr = getsockopt(fd, unix.SOL_IP, soOriginalDst, unsafe.Pointer(&sa), &n); serr == nil {
				out = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), ntohs(sa.Port))
			}
			return
		}
		var sa unix.RawSockaddrInet6
		n := uint32(unsafe.Sizeof(sa))
		if serr = getsockopt(fd, unix.SOL_IPV6, ip6tSoOriginalDs, unsafe.Pointer(&sa), &n); serr == nil {
			out = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), ntohs(sa.Port))
		}
	})
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("intercept: %w", err)
	}
	if serr != nil {
		if errors.Is(serr, unix.ENOENT) {
			return netip.AddrPort{}, ErrNoOriginalDst
		}
		return netip.AddrPort{}, fmt.Errorf("intercept: getsockopt SO_ORIGINAL_DST: %w", serr)
	}
	return out, nil
}

func getsockopt(fd uintptr, level, name int, p unsafe.Pointer, n *uint32) error {
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), uintptr(name), uintptr(p), uintptr(unsafe.Pointer(n)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// ntohs converts a port as stored in a sockaddr (network order) to host
// order.
func ntohs(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}
