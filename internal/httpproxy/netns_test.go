package httpproxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"pep/internal/intercept"
	"pep/internal/intercept/nstest"
	"pep/internal/mode"
)

// TestInterceptedHostVerification runs pepd's Server on REDIRECT and
// TPROXY listeners in a gateway namespace; a client in another namespace
// connects to an origin address on port 80 that nftables steers to pepd.
// A Host that does not resolve to the original destination is refused
// (http.host_mismatch: refuse): the original destination was recovered
// from the kernel and compared. Needs root: sudo go test ./internal/httpproxy/
func TestInterceptedHostVerification(t *testing.T) {
	topo := nstest.ForTest(t)
	// The carrier resolver (in the root namespace, where pepd's own
	// outgoing connections start): www.site.test is the REDIRECT test
	// address, img.cdn.test the TPROXY one, other.test elsewhere.
	ns := startDNS(t, map[string]string{"www.site.test": nstest.RedirectDest, "img.cdn.test": nstest.TPROXYDest, "other.test": "198.51.100.7"})
	p := startPepd(t, pepdOpts{squid: "127.0.0.1:9", resolver: ns.Addr, mode: mode.URL,
		subscribers: []string{nstest.ClientAddr + "/32"}, hostMismatch: "refuse"})
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
	go p.Srv.Serve(rl)
	go p.Srv.Serve(tl)
	if err := topo.Steer(rl.Addr().(*net.TCPAddr).Port, tl.Addr().(*net.TCPAddr).Port); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, dial, host string
		wantCode         int
		wantBody         string
	}{
		// Host matches: pepd forwards to Squid (port 9 here: nothing
		// listens, so 502 proves the request passed verification).
		{"redirect, host matches", nstest.RedirectDest + ":80", "www.site.test", 502, "upstream failed"},
		{"redirect, host mismatch", nstest.RedirectDest + ":80", "other.test", 403, "host does not match destination"},
		{"redirect, host names the other address", nstest.RedirectDest + ":80", "img.cdn.test", 403, "host does not match destination"},
		{"tproxy, host matches", nstest.TPROXYDest + ":80", "img.cdn.test", 502, "upstream failed"},
		{"tproxy, host mismatch", nstest.TPROXYDest + ":80", "www.site.test", 403, "host does not match destination"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var conn net.Conn
			if err := topo.InClient(func() error {
				var err error
				conn, err = net.DialTimeout("tcp", c.dial, 5*time.Second)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(conn, "GET /x HTTP/1.1\r\nHost: "+c.host+"\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.wantCode || !strings.Contains(string(b), c.wantBody) {
				t.Errorf("got %d %q, want %d containing %q", resp.StatusCode, b, c.wantCode, c.wantBody)
			}
		})
	}
}
