package intercept_test

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"pep/internal/intercept"
	"pep/internal/intercept/nstest"
)

// TestOriginalDst steers connections from a client namespace through a
// gateway namespace's nftables REDIRECT and TPROXY rules and checks that
// the accepted connections report the address the client dialed. Needs
// root: sudo go test ./internal/intercept/
func TestOriginalDst(t *testing.T) {
	topo := nstest.ForTest(t)

	var rl, tl *intercept.Listener
	if err := topo.InGateway(func() error {
		var err error
		if rl, err = intercept.Listen(context.Background(), intercept.Redirect, "0.0.0.0:0"); err != nil {
			return err
		}
		tl, err = intercept.Listen(context.Background(), intercept.TPROXY, "0.0.0.0:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	defer tl.Close()
	rport := rl.Addr().(*net.TCPAddr).Port
	tport := tl.Addr().(*net.TCPAddr).Port
	if err := topo.Steer(rport, tport); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name            string
		l               *intercept.Listener
		dial            string
		wantOrig        string
		wantIntercepted bool
	}{
		{"redirect", rl, nstest.RedirectDest + ":80", nstest.RedirectDest + ":80", true},
		{"redirect other address", rl, "203.0.113.77:80", "203.0.113.77:80", true},
		{"tproxy", tl, nstest.TPROXYDest + ":80", nstest.TPROXYDest + ":80", true},
		{"redirect to tproxy listener", tl, nstest.RedirectDest + ":443", nstest.RedirectDest + ":443", true},
		{"direct to redirect listener", rl, net.JoinHostPort(nstest.GatewayAddr, itoa(rport)), net.JoinHostPort(nstest.GatewayAddr, itoa(rport)), false},
		{"direct to tproxy listener", tl, net.JoinHostPort(nstest.GatewayAddr, itoa(tport)), net.JoinHostPort(nstest.GatewayAddr, itoa(tport)), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var cc net.Conn
			if err := topo.InClient(func() error {
				var err error
				cc, err = net.DialTimeout("tcp", c.dial, 5*time.Second)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ac, err := c.l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer ac.Close()
			ic := ac.(*intercept.Conn)
			orig, intercepted := ic.OriginalDst()
			if orig != netip.MustParseAddrPort(c.wantOrig) || intercepted != c.wantIntercepted {
				t.Errorf("OriginalDst() = %v, %v; want %v, %v", orig, intercepted, c.wantOrig, c.wantIntercepted)
			}
			if got := ac.RemoteAddr().(*net.TCPAddr).IP.String(); got != nstest.ClientAddr {
				t.Errorf("client address %s, want %s", got, nstest.ClientAddr)
			}
		})
	}
}

// TestNotRedirected: a plain loopback connection has no NAT record.
func TestNotRedirected(t *testing.T) {
	l, err := intercept.Listen(context.Background(), intercept.Redirect, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ac, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	orig, intercepted := ac.(*intercept.Conn).OriginalDst()
	if intercepted || orig.String() != l.Addr().String() {
		t.Errorf("OriginalDst() = %v, %v; want %v, false", orig, intercepted, l.Addr())
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
