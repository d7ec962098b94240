package guard

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"
)

func testPolicy() *Policy {
	return New(Options{
		Subscribers: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")},
		Self:        []netip.Addr{netip.MustParseAddr("192.0.2.12"), netip.MustParseAddr("198.18.0.1")},
		Deny:        []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
	})
}

func TestClientAllowed(t *testing.T) {
	p := testPolicy()
	cases := []struct {
		src  string
		want bool
	}{
		{"198.18.0.2", true},
		{"::ffff:198.18.0.2", true},
		{"198.18.1.2", false},
		{"8.8.8.8", false},
	}
	for _, c := range cases {
		if got := p.ClientAllowed(netip.MustParseAddr(c.src)); got != c.want {
			t.Errorf("ClientAllowed(%s) = %v, want %v", c.src, got, c.want)
		}
	}
	if (&Policy{}).ClientAllowed(netip.MustParseAddr("198.18.0.2")) {
		t.Error("zero Policy served a client")
	}
}

func TestCheckTarget(t *testing.T) {
	p := testPolicy()
	cases := []struct {
		name, target string
		want         Reason // "" means allowed
	}{
		{"origin in testbed range", "198.19.0.5:80", ""},
		{"public", "93.184.216.34:80", ""},
		{"loopback", "127.0.0.1:80", ReasonLoopback},
		{"loopback v6", "[::1]:80", ReasonLoopback},
		{"mapped loopback", "[::ffff:127.0.0.1]:80", ReasonLoopback},
		{"link-local", "169.254.169.254:80", ReasonLinkLocal},
		{"rfc1918 10", "10.1.2.3:80", ReasonPrivate},
		{"rfc1918 172", "172.16.0.1:80", ReasonPrivate},
		{"rfc1918 192", "192.168.1.1:80", ReasonPrivate},
		{"ula", "[fd00::1]:80", ReasonPrivate},
		{"cgnat", "100.64.0.1:80", ReasonCGNAT},
		{"unspecified", "0.0.0.0:80", ReasonReserved},
		{"multicast", "224.0.0.1:80", ReasonReserved},
		{"broadcast", "255.255.255.255:80", ReasonReserved},
		{"vip", "192.0.2.12:80", ReasonSelf},
		{"own address", "198.18.0.1:80", ReasonSelf},
		{"denied prefix", "203.0.113.9:80", ReasonDenied},
		{"port 22", "198.19.0.5:22", ReasonPort},
		{"port 443 not allowed by default", "198.19.0.5:443", ReasonPort},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := p.CheckTarget(netip.MustParseAddrPort(c.target))
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			d, ok := IsDenied(err)
			if !ok || d.Reason != c.want {
				t.Fatalf("got %v, want reason %q", err, c.want)
			}
		})
	}
}

func TestAllowOverridesSpecialNotSelf(t *testing.T) {
	p := New(Options{
		Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Self:  []netip.Addr{netip.MustParseAddr("10.0.0.12")},
	})
	if err := p.CheckTarget(netip.MustParseAddrPort("10.9.9.9:80")); err != nil {
		t.Errorf("allowed prefix refused: %v", err)
	}
	if err := p.CheckTarget(netip.MustParseAddrPort("10.0.0.12:80")); err == nil {
		t.Error("self address inside an allowed prefix was accepted")
	}
}

func TestWithPorts(t *testing.T) {
	p := testPolicy().WithPorts(443)
	if err := p.CheckTarget(netip.MustParseAddrPort("198.19.0.5:443")); err != nil {
		t.Errorf("443 refused: %v", err)
	}
	if err := p.CheckTarget(netip.MustParseAddrPort("198.19.0.5:80")); err == nil {
		t.Error("80 accepted by a 443-only policy")
	}
}

// TestControlRefusesAtDialTime dials a real listener on loopback through a
// net.Dialer whose Control is the policy: the connection must never be made.
func TestControlRefusesAtDialTime(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	p := New(Options{AllowedPorts: []uint16{port}})
	d := net.Dialer{Control: p.Control, Timeout: 2 * time.Second}
	// "localhost" resolves to 127.0.0.1: the check must apply to the
	// resolved address, not the name.
	_, err = d.DialContext(context.Background(), "tcp", net.JoinHostPort("localhost", strconv.Itoa(int(port))))
	if den, ok := IsDenied(err); !ok || den.Reason != ReasonLoopback {
		t.Fatalf("dial error = %v, want a loopback refusal", err)
	}
	select {
	case <-accepted:
		t.Fatal("the listener accepted a connection the policy refused")
	case <-time.After(50 * time.Millisecond):
	}
}
