package deploy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// The namespace tests build DESIGN.md's chain client - gw - origin:
//
//	[client] eth0 198.18.0.2 == sub0 198.18.0.1 [gw] up0 198.18.1.1 == eth0 198.18.1.2 [origin]
//
// with origin addresses 198.19.0.10 (HTTP) and 198.19.0.53 (resolver) on the
// origin's lo, the VIP 192.0.2.12 on the gw's lo, and the gw routing
// 198.19.0.0/16 to the origin. Namespace names carry a run-unique suffix;
// interface names live inside the namespaces, so they need none.
const (
	clientAddr   = "198.18.0.2"
	gwSubAddr    = "198.18.0.1"
	originHTTP   = "198.19.0.10"
	originDNS    = "198.19.0.53"
	testVIP      = "192.0.2.12"
	tproxyPort   = 3130
	dnsPort      = 5353
	tlsPort      = 3443
	originSuffix = "origin saw "
)

// needRoot skips a test that needs root, ip(8) and nft(8), saying why.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, nftables): run as root, e.g. sudo go test ./deploy")
	}
	for _, b := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("needs %s(8): apt-get install -y iproute2 nftables (make deps)", b)
		}
	}
}

// netNS is one named network namespace (ip netns).
type netNS struct {
	name string
	h    netns.NsHandle
}

func newNetNS(t *testing.T, name string) *netNS {
	t.Helper()
	mustRun(t, "ip", "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatalf("netns %s: %v", name, err)
	}
	t.Cleanup(func() { h.Close() })
	n := &netNS{name: name, h: h}
	n.ip(t, "link", "set", "lo", "up")
	return n
}

// ip runs ip(8) in the namespace and fails the test on error.
func (n *netNS) ip(t *testing.T, args ...string) {
	t.Helper()
	mustRun(t, "ip", append([]string{"-n", n.name}, args...)...)
}

// exec runs a command in the namespace and fails the test on error.
func (n *netNS) exec(t *testing.T, args ...string) string {
	t.Helper()
	return mustRun(t, "ip", append([]string{"netns", "exec", n.name}, args...)...)
}

// command returns an exec.Cmd that runs in the namespace.
func (n *netNS) command(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.name}, args...)...)
}

// do runs fn on an OS thread switched into the namespace: sockets fn
// creates belong to it and stay there afterwards (vishvananda/netns doc.go).
func (n *netNS) do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	if err := netns.Set(n.h); err != nil {
		return err
	}
	defer netns.Set(orig)
	return fn()
}

// listen opens a TCP listener in the namespace, with IP_TRANSPARENT if
// transparent.
func (n *netNS) listen(t *testing.T, addr string, transparent bool) net.Listener {
	t.Helper()
	var l net.Listener
	err := n.do(func() (err error) {
		lc := net.ListenConfig{}
		if transparent {
			lc.Control = setTransparent
		}
		l, err = lc.Listen(context.Background(), "tcp4", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen %s in %s: %v", addr, n.name, err)
	}
	return l
}

func setTransparent(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_IP, syscall.IP_TRANSPARENT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func runSuffix() string {
	b := make([]byte, 3)
	rand.Read(b)
	return fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(b))
}

// topo is the client - gw - origin chain.
type topo struct {
	client, gw, origin *netNS
}

// newTopo builds the chain and its routes; the gateway gets ip_forward, the
// policy routing of RoutingPlan(Default()) and rp_filter=1 (strict) on its
// subscriber interface, as deploy/sysctl/90-pep.conf leaves it. No ruleset
// is loaded.
func newTopo(t *testing.T) *topo {
	t.Helper()
	sfx := runSuffix()
	tp := &topo{
		client: newNetNS(t, "pep6c-"+sfx),
		gw:     newNetNS(t, "pep6g-"+sfx),
		origin: newNetNS(t, "pep6o-"+sfx),
	}
	tp.gw.ip(t, "link", "add", "sub0", "type", "veth", "peer", "name", "eth0", "netns", tp.client.name)
	tp.gw.ip(t, "link", "add", "up0", "type", "veth", "peer", "name", "eth0", "netns", tp.origin.name)
	tp.client.ip(t, "addr", "add", clientAddr+"/24", "dev", "eth0")
	tp.client.ip(t, "link", "set", "eth0", "up")
	tp.client.ip(t, "route", "add", "default", "via", gwSubAddr)
	tp.gw.ip(t, "addr", "add", gwSubAddr+"/24", "dev", "sub0")
	tp.gw.ip(t, "addr", "add", "198.18.1.1/24", "dev", "up0")
	tp.gw.ip(t, "link", "set", "sub0", "up")
	tp.gw.ip(t, "link", "set", "up0", "up")
	tp.gw.ip(t, "route", "add", "198.19.0.0/16", "via", "198.18.1.2")
	tp.origin.ip(t, "addr", "add", "198.18.1.2/24", "dev", "eth0")
	tp.origin.ip(t, "link", "set", "eth0", "up")
	tp.origin.ip(t, "route", "add", "default", "via", "198.18.1.1")
	tp.origin.ip(t, "addr", "add", originHTTP+"/32", "dev", "lo")
	tp.origin.ip(t, "addr", "add", originDNS+"/32", "dev", "lo")
	tp.gw.exec(t, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1",
		"net.ipv4.conf.all.rp_filter=1", "net.ipv4.conf.sub0.rp_filter=1")
	for i, c := range RoutingPlan(Default()) {
		args := append([]string{"-n", tp.gw.name}, c[1:]...)
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil && i > 0 {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return tp
}

// loadRuleset loads an nftables ruleset into the gateway.
func (tp *topo) loadRuleset(t *testing.T, rules []byte) {
	t.Helper()
	f := t.TempDir() + "/gw.nft"
	if err := os.WriteFile(f, rules, 0o644); err != nil {
		t.Fatal(err)
	}
	tp.gw.exec(t, "nft", "-f", f)
}

// serveOrigin answers HTTP on 198.19.0.10:80 in the origin namespace with
// "origin saw <client address>", so a test can tell a direct load (the
// subscriber's address) from one through the gateway's proxy.
func (tp *topo) serveOrigin(t *testing.T, page http.Handler) {
	t.Helper()
	l := tp.origin.listen(t, originHTTP+":80", false)
	if page == nil {
		page = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			io.WriteString(w, originSuffix+host)
		})
	}
	srv := &http.Server{Handler: page}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

// clientHTTP returns an HTTP client whose connections start in the client
// namespace; no keep-alive, so each request is a new TCP connection, as a
// new page load's first request is.
func (tp *topo) clientHTTP(timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: timeout}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			Proxy:             nil,
			DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
				err = tp.client.do(func() (err error) {
					c, err = d.DialContext(ctx, network, addr)
					return err
				})
				return c, err
			},
		},
	}
}

// get fetches url from the client namespace and returns the body.
func get(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(b), nil
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
