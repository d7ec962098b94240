// Package dnsmasqtest runs a real dnsmasq on loopback for tests: the
// carrier resolver of DESIGN.md, in the tests of the DNS proxy and the SNI
// splice.
package dnsmasqtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"pep/internal/testenv"
)

// FreePort returns a port that was free on 127.0.0.1 for both UDP and TCP
// at the time of the call.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 50 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		pc.Close()
		if err == nil {
			ln.Close()
			return port
		}
	}
	t.Fatal("dnsmasqtest: no free port")
	return 0
}

// Start runs dnsmasq on a free port of 127.0.0.1 with the config lines given, plus the ones that keep it
// local (no upstream, no /etc/hosts) and in the foreground, and returns
// its "host:port" once it answers a query. dnsmasq is killed when the test
// ends. The test is skipped if dnsmasq is not installed.
func Start(t testing.TB, lines []string) string {
	t.Helper()
	return StartServer(t, lines).Addr
}

// Server is a running dnsmasq.
type Server struct {
	Addr string    // "127.0.0.1:port", UDP and TCP
	Cmd  *exec.Cmd // the process, for its CPU time
	out  *testenv.Buffer
}

// Output returns what dnsmasq wrote so far (its log: with the config line
// "log-queries", one "query[TYPE] NAME from ADDR" line per query).
func (s *Server) Output() string { return s.out.String() }

// StartServer is Start returning the process too.
func StartServer(t testing.TB, lines []string) *Server {
	t.Helper()
	bin, err := exec.LookPath("dnsmasq")
	if err != nil {
		t.Skip("dnsmasq not installed (apt-get install -y dnsmasq)")
	}
	// FreePort's port may be taken by another test process's server before
	// dnsmasq binds it; then dnsmasq exits, and a readiness query could even
	// be answered by that other server. So the readiness name is one only
	// this dnsmasq answers, and a lost port is retried with a new one.
	for attempt := 1; ; attempt++ {
		s, out, err := start(t, bin, lines)
		if err == nil {
			return s
		}
		if attempt == 5 {
			t.Fatalf("dnsmasqtest: %v\n%s", err, out)
		}
	}
}

// start runs one dnsmasq on a free port and waits until it answers its
// own readiness name.
func start(t testing.TB, bin string, lines []string) (*Server, string, error) {
	port := FreePort(t)
	ready := fmt.Sprintf("ready-%d-%d.invalid.", os.Getpid(), port)
	conf := []string{
		fmt.Sprintf("port=%d", port), "listen-address=127.0.0.1", "bind-interfaces",
		"no-resolv", "no-hosts", "no-daemon", "pid-file=", "local-ttl=10", "log-facility=-",
		"address=/" + strings.TrimSuffix(ready, ".") + "/127.0.0.53",
	}
	if os.Geteuid() == 0 {
		conf = append(conf, "user=root")
	}
	conf = append(conf, lines...)
	path := filepath.Join(t.TempDir(), "dnsmasq.conf")
	if err := os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--conf-file="+path)
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	c := &dns.Client{Timeout: 100 * time.Millisecond}
	m := new(dns.Msg)
	m.SetQuestion(ready, dns.TypeA)
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			return nil, out.String(), fmt.Errorf("dnsmasq on %s exited before answering", addr)
		default:
		}
		if r, _, err := c.Exchange(m, addr); err == nil && len(r.Answer) == 1 {
			return &Server{Addr: addr, Cmd: cmd, out: out}, "", nil
		}
		if time.Now().After(deadline) {
			return nil, out.String(), fmt.Errorf("dnsmasq on %s did not answer", addr)
		}
	}
}
