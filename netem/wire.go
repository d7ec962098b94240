package netem

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
)

// WireEnd is one side of the link to create: the veth end that appears in an
// existing namespace, with an optional address.
type WireEnd struct {
	Namespace string       // existing namespace (name, path or "" for the caller's)
	Interface string       // name of the new interface there, e.g. "radio0"
	Addr      netip.Prefix // assigned if valid, e.g. 198.18.0.2/24
}

// WireSpec asks Wire for a link namespace between two namespaces.
type WireSpec struct {
	Namespace string  // link namespace to create (a name under /var/run/netns); must not exist
	A, B      WireEnd // A is the mobile side, B the network side
}

// Link-side interface names that Wire creates in the link namespace.
const (
	WireIfA = "ra"
	WireIfB = "rb"
)

// Wire creates namespace spec.Namespace and two veth pairs: WireIfA there
// with peer spec.A.Interface in spec.A.Namespace, and WireIfB with peer
// spec.B.Interface in spec.B.Namespace. It brings all four up, sets the
// addresses and returns the LinkSpec to pass to NewLink, and an undo that
// deletes the link namespace (and with it both veth pairs). On error it
// leaves nothing behind.
func Wire(spec WireSpec) (LinkSpec, func() error, error) {
	if err := CreateNamespace(spec.Namespace); err != nil {
		return LinkSpec{}, nil, err
	}
	undo := func() error { return DeleteNamespace(spec.Namespace) }
	fail := func(err error) (LinkSpec, func() error, error) {
		return LinkSpec{}, nil, errors.Join(err, undo())
	}
	lh, err := openNS(spec.Namespace)
	if err != nil {
		return fail(err)
	}
	defer lh.Close()
	lnl, err := netlink.NewHandleAt(lh)
	if err != nil {
		return fail(fmt.Errorf("netem: netlink in %q: %w", spec.Namespace, err))
	}
	defer lnl.Close()
	for _, w := range []struct {
		local string
		end   WireEnd
	}{{WireIfA, spec.A}, {WireIfB, spec.B}} {
		ph, err := openNS(w.end.Namespace)
		if err != nil {
			return fail(err)
		}
		veth := &netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: w.local},
			PeerName:      w.end.Interface,
			PeerNamespace: netlink.NsFd(ph),
		}
		err = lnl.LinkAdd(veth)
		if err == nil {
			err = setUp(spec.Namespace, w.local)
		}
		if err == nil {
			err = configureEnd(w.end)
		}
		ph.Close()
		if err != nil {
			return fail(fmt.Errorf("netem: wire %s:%s to %s:%s: %w", spec.Namespace, w.local, w.end.Namespace, w.end.Interface, err))
		}
	}
	peerA := Endpoint{Namespace: spec.A.Namespace, Interface: spec.A.Interface}
	peerB := Endpoint{Namespace: spec.B.Namespace, Interface: spec.B.Interface}
	return LinkSpec{Namespace: spec.Namespace, IfA: WireIfA, IfB: WireIfB, PeerA: &peerA, PeerB: &peerB}, undo, nil
}

func configureEnd(end WireEnd) error {
	if err := setUp(end.Namespace, end.Interface); err != nil {
		return err
	}
	if !end.Addr.IsValid() {
		return nil
	}
	h, err := openNS(end.Namespace)
	if err != nil {
		return err
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return err
	}
	defer nl.Close()
	l, err := nl.LinkByName(end.Interface)
	if err != nil {
		return err
	}
	ipnet := netlink.NewIPNet(end.Addr.Addr().AsSlice())
	ipnet.Mask = netmask(end.Addr)
	// nodad: the address is usable at once, no duplicate address detection wait.
	return nl.AddrAdd(l, &netlink.Addr{IPNet: ipnet, Flags: 0x02})
}

func netmask(p netip.Prefix) []byte {
	bits := p.Addr().BitLen()
	m := make([]byte, bits/8)
	for i := range p.Bits() {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

// UniqueName returns prefix joined with this process's PID and a random
// suffix, short enough for an interface name (15 bytes) when prefix is at
// most 4 bytes: names tests and the calibrator create never collide with
// another run's.
func UniqueName(prefix string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s%d%x", prefix, os.Getpid()%100000, b)
}
