// Package nstest builds a two-namespace interception topology for tests
// (root only): a client namespace and a gateway namespace joined by a veth
// pair, with nftables REDIRECT and TPROXY rules in the gateway, as
// deploy/'s gateway ruleset does for subscriber interfaces.
//
//	client 198.18.0.2/24 (default via .1) == veth == 198.18.0.1/24 gateway
//	gateway: tcp dport 80 to 203.0.113.0/25   -> REDIRECT to :RedirectPort
//	         tcp dport 80 to 203.0.113.128/25 -> TPROXY to :TPROXYPort (fwmark 1, table 100)
//
// Every address is in a range no one routes: 198.18.0.0/15 (benchmarking,
// RFC 2544) and 203.0.113.0/24 (TEST-NET-3, RFC 5737).
//
// Names carry the process id and a random suffix, so parallel runs do not
// collide; Close removes everything the topology created.
package nstest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
)

// Addresses of the topology.
const (
	ClientAddr   = "198.18.0.2"
	GatewayAddr  = "198.18.0.1"
	RedirectNet  = "203.0.113.0/25"   // destinations steered by REDIRECT (TEST-NET-3, lower half)
	TPROXYNet    = "203.0.113.128/25" // destinations steered by TPROXY (TEST-NET-3, upper half)
	RedirectDest = "203.0.113.5"      // an address in RedirectNet
	TPROXYDest   = "203.0.113.200"    // an address in TPROXYNet
)

// Topology is the pair of namespaces. Build it with New.
type Topology struct {
	Client, Gateway          string // namespace names
	RedirectPort, TPROXYPort int    // set by Steer
	clientNS, gatewayNS      netns.NsHandle
	veth                     string // the gateway's end
}

// Available returns "" if the topology can be built here, or why not (for
// t.Skip).
func Available() string {
	if os.Geteuid() != 0 {
		return "needs root (network namespaces, nftables); run: sudo go test ./..."
	}
	for _, b := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(b); err != nil {
			return b + " not found (apt-get install -y iproute2 nftables)"
		}
	}
	return ""
}

// ForTest returns a new topology for t, removed when t ends; t is skipped
// where the topology cannot be built (Available) and fails if building it
// fails.
func ForTest(t testing.TB) *Topology {
	t.Helper()
	if why := Available(); why != "" {
		t.Skip(why)
	}
	topo, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(topo.Close)
	return topo
}

// New creates the namespaces, the veth pair, addresses and routes; Steer
// adds the nftables rules once the listeners' ports are known. On error it
// removes what it made.
func New() (*Topology, error) {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	sfx := fmt.Sprintf("%d%s", os.Getpid()%100000, hex.EncodeToString(b))
	t := &Topology{Client: "pepc" + sfx, Gateway: "pepg" + sfx, clientNS: netns.None(), gatewayNS: netns.None(), veth: "vg" + sfx}
	vc, vg := "vc"+sfx, t.veth
	steps := [][]string{
		{"ip", "netns", "add", t.Client},
		{"ip", "netns", "add", t.Gateway},
		{"ip", "link", "add", vc, "netns", t.Client, "type", "veth", "peer", "name", vg, "netns", t.Gateway},
		{"ip", "-n", t.Client, "link", "set", "lo", "up"},
		{"ip", "-n", t.Gateway, "link", "set", "lo", "up"},
		{"ip", "-n", t.Client, "addr", "add", ClientAddr + "/24", "dev", vc},
		{"ip", "-n", t.Gateway, "addr", "add", GatewayAddr + "/24", "dev", vg},
		{"ip", "-n", t.Client, "link", "set", vc, "up"},
		{"ip", "-n", t.Gateway, "link", "set", vg, "up"},
		{"ip", "-n", t.Client, "route", "add", "default", "via", GatewayAddr},
		{"ip", "-n", t.Gateway, "rule", "add", "fwmark", "1", "lookup", "100"},
		{"ip", "-n", t.Gateway, "route", "add", "local", "0.0.0.0/0", "dev", "lo", "table", "100"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			t.Close()
			return nil, fmt.Errorf("nstest: %s: %w: %s", strings.Join(s, " "), err, out)
		}
	}
	var err error
	if t.clientNS, err = netns.GetFromName(t.Client); err != nil {
		t.Close()
		return nil, fmt.Errorf("nstest: %w", err)
	}
	if t.gatewayNS, err = netns.GetFromName(t.Gateway); err != nil {
		t.Close()
		return nil, fmt.Errorf("nstest: %w", err)
	}
	return t, nil
}

// Steer loads the gateway's nftables rules: port 80 to RedirectNet is
// REDIRECTed to redirectPort, port 80 to TPROXYNet goes by TPROXY to
// tproxyPort, and port 443 to RedirectNet is REDIRECTed to tproxyPort (a
// transparent listener that takes REDIRECTed connections too, as pepd's
// TLS listener does).
func (t *Topology) Steer(redirectPort, tproxyPort int) error {
	nft := fmt.Sprintf(`table ip pep_nstest {
  chain pre_nat {
    type nat hook prerouting priority dstnat; policy accept;
    iifname "%[1]s" ip daddr %[2]s tcp dport 80 redirect to :%[3]d
    iifname "%[1]s" ip daddr %[2]s tcp dport 443 redirect to :%[5]d
  }
  chain pre_mangle {
    type filter hook prerouting priority mangle; policy accept;
    iifname "%[1]s" ip daddr %[4]s tcp dport 80 meta mark set 1 tproxy to :%[5]d accept
  }
}
`, t.veth, RedirectNet, redirectPort, TPROXYNet, tproxyPort)
	cmd := exec.Command("ip", "netns", "exec", t.Gateway, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(nft)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nstest: nft -f: %w: %s", err, out)
	}
	t.RedirectPort, t.TPROXYPort = redirectPort, tproxyPort
	return nil
}

// InClient runs f on an OS thread inside the client namespace. Sockets f
// creates stay in that namespace and may be used from any goroutine.
func (t *Topology) InClient(f func() error) error { return run(t.clientNS, f) }

// InGateway runs f inside the gateway namespace (see InClient).
func (t *Topology) InGateway(f func() error) error { return run(t.gatewayNS, f) }

func run(ns netns.NsHandle, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is never unlocked: if restoring the namespace failed,
		// the runtime must throw it away rather than reuse it.
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("nstest: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("nstest: setns: %w", err)
			return
		}
		ferr := f()
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("nstest: restoring namespace: %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Close deletes both namespaces (and with them the veth pair, the rules
// and the routes).
func (t *Topology) Close() {
	if t.clientNS.IsOpen() {
		t.clientNS.Close()
	}
	if t.gatewayNS.IsOpen() {
		t.gatewayNS.Close()
	}
	_ = exec.Command("ip", "netns", "del", t.Client).Run()
	_ = exec.Command("ip", "netns", "del", t.Gateway).Run()
}
