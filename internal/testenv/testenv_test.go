package testenv

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestScale runs this test binary again with PEP_TEST_SLOWNESS set, so
// that the factor is read fresh (it is read once per process).
func TestScale(t *testing.T) {
	if v := os.Getenv("PEP_TESTENV_CHILD"); v != "" {
		if got := Scale(2 * time.Second).String(); got != v {
			t.Fatalf("Scale(2s) = %s, want %s", got, v)
		}
		return
	}
	for _, c := range []struct{ env, want string }{{"", "2s"}, {"1", "2s"}, {"2.5", "5s"}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestScale$", "-test.count=1")
		cmd.Env = append(os.Environ(), Env+"="+c.env, "PEP_TESTENV_CHILD="+c.want)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s=%q: %v\n%s", Env, c.env, err, out)
		}
	}
	for _, v := range []string{"0.5", "fast", "1000"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestScale$", "-test.count=1")
		cmd.Env = append(os.Environ(), Env+"="+v, "PEP_TESTENV_CHILD=any")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "want a decimal factor from 1 to 100") {
			t.Errorf("%s=%q accepted: %v\n%s", Env, v, err, out)
		}
	}
}

// TestListen: ListenDNS on port 0 gives UDP and TCP the same port, a taken
// fixed port is an error, and FreeAddr's address is one of 127.200.0.0/13
// that a server can then bind for both.
func TestListen(t *testing.T) {
	pc, ln, err := ListenDNS("127.0.0.1", "0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	defer ln.Close()
	if u, tc := pc.LocalAddr().(*net.UDPAddr).Port, ln.Addr().(*net.TCPAddr).Port; u != tc {
		t.Errorf("UDP port %d, TCP port %d: want one", u, tc)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if _, _, err := ListenDNS("127.0.0.1", port); err == nil {
		t.Errorf("ListenDNS on the taken port %s: no error", port)
	}
	addr := FreeAddr(t)
	ap := netip.MustParseAddrPort(addr)
	if !netip.MustParsePrefix("127.200.0.0/13").Contains(ap.Addr()) || ap.Port() == 0 {
		t.Errorf("FreeAddr = %s, want a port of 127.200.0.0/13", addr)
	}
	host, port, _ := net.SplitHostPort(addr)
	pc2, ln2, err := ListenDNS(host, port)
	if err != nil {
		t.Fatalf("binding FreeAddr's %s: %v", addr, err)
	}
	pc2.Close()
	ln2.Close()
}
