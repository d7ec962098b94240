package dnsproxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"pep/internal/dnsproxy/dnsmasqtest"
	"pep/internal/guard"
	"pep/internal/mode"
	"pep/internal/splice"
)

// The namespace test's addresses (DESIGN.md's testbed plan): the client
// (phone) at 198.18.0.2, the gateway at 198.18.0.1 with pepd's DNS proxy
// on port 53, the VIP and one origin on the gateway's loopback.
const (
	nsClientAddr = "198.18.0.2"
	nsGWAddr     = "198.18.0.1"
	nsVIP        = "192.0.2.12"
	nsOrigin     = "198.19.0.10"
	nsName       = "www.foo.com"
)

// TestNetnsHelper is the gateway process of TestNetnsBrowser, started by it
// inside the gateway namespace (PEP_NETNS_HELPER=events file). It runs
// dnsmasq (carrier resolver), the DNS proxy on nsGWAddr:53, a stand-in for
// pepd's HTTP path on VIP:80, the SNI splice on VIP:443 and the origin on
// nsOrigin:80 and :443, logs every accepted connection to the events
// file, prints READY and serves until stdin closes.
func TestNetnsHelper(t *testing.T) {
	events := os.Getenv("PEP_NETNS_HELPER")
	if events == "" {
		t.Skip("helper process of TestNetnsBrowser")
	}
	ef, err := os.OpenFile(events, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	logEvent := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(ef, format+"\n", args...)
	}
	up := dnsmasqtest.Start(t, []string{"host-record=" + nsName + "," + nsOrigin, "local=/foo.com/"})
	pol := guard.New(guard.Options{Subscribers: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")},
		Self: []netip.Addr{netip.MustParseAddr(nsVIP), netip.MustParseAddr(nsGWAddr)}})
	o := defaultOptions(up)
	o.Guard, o.Mode = pol, mode.NewSwitch(mode.DNS)
	o.TTLPolicy = os.Getenv("PEP_NETNS_TTL_POLICY")
	p, err := New(Options(o))
	if err != nil {
		t.Fatal(err)
	}
	// The proxy behind a handler that logs each query's arrival, to time
	// the browser's fallback from the DNS answer to the origin connection.
	logged := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		if len(r.Question) == 1 {
			logEvent("dns %s %s %d", r.Question[0].Name, dns.TypeToString[r.Question[0].Qtype], time.Now().UnixMicro())
		}
		p.ServeDNS(w, r)
	})
	pc, err := net.ListenPacket("udp", nsGWAddr+":53")
	if err != nil {
		t.Fatal(err)
	}
	dnsLn, err := net.Listen("tcp", nsGWAddr+":53")
	if err != nil {
		t.Fatal(err)
	}
	dnsServers := []*dns.Server{{PacketConn: pc, Handler: logged}, {Listener: dnsLn, Handler: logged}}
	for _, s := range dnsServers {
		go s.ActivateAndServe()
	}
	sp, err := splice.New(splice.Options{Resolver: p.Upstream(), Guard: pol})
	if err != nil {
		t.Fatal(err)
	}
	listen := func(addr string) net.Listener {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	tlsLn := listen(nsVIP + ":443")
	go sp.Serve(tlsLn)
	page := func(who string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/" {
				http.NotFound(w, r)
				return
			}
			logEvent("%s %s %s %d", who, r.Host, r.RemoteAddr, time.Now().UnixMicro())
			fmt.Fprintf(w, "<html><head><title>%s</title></head><body>%s for %s</body></html>", who, who, r.RemoteAddr)
		})
	}
	servers := []*http.Server{
		{Handler: page("vip-http")},
		{Handler: page("origin-http")},
	}
	go servers[0].Serve(listen(nsVIP + ":80"))
	go servers[1].Serve(listen(nsOrigin + ":80"))
	ts := httptest.NewUnstartedServer(page("origin-https"))
	ts.Listener.Close()
	ts.Listener = listen(nsOrigin + ":443")
	ts.StartTLS()
	defer ts.Close()

	// The DNS proxy is up when it answers.
	for {
		c, err := net.DialTimeout("udp", nsGWAddr+":53", time.Second)
		if err == nil {
			c.Close()
			break
		}
	}
	fmt.Println("READY")
	io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range dnsServers {
		s.ShutdownContext(ctx)
	}
	sp.Shutdown(ctx)
	for _, s := range servers {
		s.Shutdown(ctx)
	}
}

// nsTopo is the test's own topology: two namespaces and a veth pair with
// run-unique names, removed by cleanup.
type nsTopo struct {
	client, gw string
}

func run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func newTopo(t *testing.T) *nsTopo {
	var b [4]byte
	rand.Read(b[:])
	sfx := hex.EncodeToString(b[:])
	tp := &nsTopo{client: "pepdc-" + sfx, gw: "pepdg-" + sfx}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", tp.client).Run()
		exec.Command("ip", "netns", "del", tp.gw).Run()
		os.RemoveAll(filepath.Join("/etc/netns", tp.client))
	})
	vc, vg := "vdc"+sfx, "vdg"+sfx
	for _, cmd := range [][]string{
		{"ip", "netns", "add", tp.client},
		{"ip", "netns", "add", tp.gw},
		{"ip", "link", "add", vc, "netns", tp.client, "type", "veth", "peer", vg, "netns", tp.gw},
		{"ip", "-n", tp.client, "link", "set", "lo", "up"},
		{"ip", "-n", tp.gw, "link", "set", "lo", "up"},
		{"ip", "-n", tp.client, "addr", "add", nsClientAddr + "/24", "dev", vc},
		{"ip", "-n", tp.gw, "addr", "add", nsGWAddr + "/24", "dev", vg},
		{"ip", "-n", tp.client, "link", "set", vc, "up"},
		{"ip", "-n", tp.gw, "link", "set", vg, "up"},
		{"ip", "-n", tp.gw, "addr", "add", nsVIP + "/32", "dev", "lo"},
		{"ip", "-n", tp.gw, "addr", "add", nsOrigin + "/32", "dev", "lo"},
		{"ip", "-n", tp.client, "route", "add", "default", "via", nsGWAddr},
	} {
		run(t, cmd...)
	}
	dir := filepath.Join("/etc/netns", tp.client)
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte("nameserver "+nsGWAddr+"\noptions timeout:2 attempts:2\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "hosts"), []byte("127.0.0.1 localhost\n"), 0o644)
	return tp
}

// startHelper runs TestNetnsHelper in the gateway namespace and waits for
// READY; it returns the events file.
func startHelper(t *testing.T, tp *nsTopo, ttlPolicy string) string {
	events := filepath.Join(t.TempDir(), "events")
	os.WriteFile(events, nil, 0o644)
	cmd := exec.Command("ip", "netns", "exec", tp.gw, os.Args[0], "-test.run=^TestNetnsHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "PEP_NETNS_HELPER="+events, "PEP_NETNS_TTL_POLICY="+ttlPolicy)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = tWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	sc := bufio.NewScanner(stdout)
	ready := make(chan bool, 1)
	go func() {
		for sc.Scan() {
			if strings.Contains(sc.Text(), "READY") {
				ready <- true
			}
			t.Log("helper: " + sc.Text())
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("helper exited before READY")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("helper not READY within 60s")
	}
	return events
}

// countEvents returns how many lines of the events file start with kind.
func countEvents(t testing.TB, events, kind string) int {
	b, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, kind+" ") {
			n++
		}
	}
	return n
}

// fallbackDelay returns the time from the last A query for nsName to the
// last origin-http connection in the events file.
func fallbackDelay(t testing.TB, events string) time.Duration {
	b, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	var query, origin int64
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		var ts int64
		fmt.Sscan(f[len(f)-1], &ts)
		switch {
		case f[0] == "dns" && f[1] == nsName+"." && f[2] == "A":
			query = ts
		case f[0] == "origin-http":
			origin = ts
		}
	}
	return time.Duration(origin-query) * time.Microsecond
}

// chromium loads url in a fresh headless Chromium in the client namespace
// and returns the DOM and the time the load took. asyncDNS picks
// Chromium's built-in resolver (true) or getaddrinfo (false).
func chromium(t *testing.T, tp *nsTopo, url string, asyncDNS bool) (string, time.Duration) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium not installed (apt-get install -y chromium)")
	}
	feat := "--disable-features=AsyncDns,HttpsUpgrades"
	if asyncDNS {
		feat = "--enable-features=AsyncDns"
	}
	args := []string{"netns", "exec", tp.client, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--ignore-certificate-errors", "--user-data-dir=" + t.TempDir(), feat, "--dump-dom", url}
	if asyncDNS {
		args = append(args[:len(args)-2], "--disable-features=HttpsUpgrades", "--dump-dom", url)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, "ip", args...).Output()
	d := time.Since(start)
	if err != nil {
		t.Fatalf("chromium %s: %v", url, err)
	}
	return string(out), d
}

// TestNetnsBrowser is the namespace acceptance test (root): glibc
// and headless Chromium, resolving through the DNS proxy, connect to the
// VIP; with the VIP unreachable Chromium loads the page from the origin
// (seed paper §5.3.2); https loads through the SNI splice.
//
//	sudo go test ./internal/dnsproxy -run TestNetnsBrowser -v
func TestNetnsBrowser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	if _, err := exec.LookPath("dnsmasq"); err != nil {
		t.Skip("dnsmasq not installed")
	}
	tp := newTopo(t)
	events := startHelper(t, tp, TTLRRset)
	inClient := func(args ...string) string {
		return run(t, append([]string{"ip", "netns", "exec", tp.client}, args...)...)
	}

	// glibc: getaddrinfo's order, then a real connection (curl uses it).
	got := strings.Fields(inClient("getent", "ahostsv4", nsName))
	if len(got) < 1 || got[0] != nsVIP {
		t.Errorf("getent ahostsv4 %s: first address %q, want the VIP %s (output %q)", nsName, got[:min(1, len(got))], nsVIP, got)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl not installed: the glibc connection check needs it (make deps installs it; apt-get install -y curl)")
	}
	body := inClient("curl", "-sS", "--max-time", "20", "http://"+nsName+"/")
	if !strings.Contains(body, "vip-http for "+nsClientAddr) {
		t.Errorf("curl (glibc) got %q, want the VIP's page", body)
	}

	// Chromium, with each resolver.
	for _, async := range []bool{false, true} {
		before := countEvents(t, events, "vip-http")
		dom, d := chromium(t, tp, "http://"+nsName+"/", async)
		if !strings.Contains(dom, "vip-http for "+nsClientAddr) {
			t.Errorf("chromium (AsyncDns=%v): page %q, want the VIP's", async, dom)
		}
		if n := countEvents(t, events, "vip-http") - before; n < 1 {
			t.Errorf("chromium (AsyncDns=%v): %d connections to the VIP, want at least 1", async, n)
		}
		t.Logf("chromium AsyncDns=%v: loaded from the VIP in %v", async, d.Round(time.Millisecond))
	}

	// https through the SNI splice: the origin sees the gateway, not the
	// client, and serves its own certificate (Chromium ignores its name).
	dom, d := chromium(t, tp, "https://"+nsName+"/", false)
	if !strings.Contains(dom, "origin-https for ") || strings.Contains(dom, "origin-https for "+nsClientAddr) {
		t.Errorf("https page %q, want the origin's page reached from the splice", dom)
	}
	t.Logf("chromium https through the splice in %v", d.Round(time.Millisecond))

	// Roaming (§5.3.2): the VIP is unreachable from the client.
	inClient("ip", "route", "add", "unreachable", nsVIP+"/32")
	for _, async := range []bool{false, true} {
		dom, d := chromium(t, tp, "http://"+nsName+"/", async)
		if !strings.Contains(dom, "origin-http for "+nsClientAddr) {
			t.Errorf("VIP unreachable, chromium (AsyncDns=%v): page %q, want the origin's", async, dom)
		}
		t.Logf("VIP unreachable (ICMP/route error), chromium AsyncDns=%v fell back to the origin: load took %v, A query to origin connection %v",
			async, d.Round(time.Millisecond), fallbackDelay(t, events).Round(time.Millisecond))
	}
	inClient("ip", "route", "del", "unreachable", nsVIP+"/32")

	// The VIP silently dropped (no ICMP): Chromium waits for its connect
	// attempt to time out. Minutes; opt-in measurement.
	if os.Getenv("PEP_MEASURE_DROP") == "" {
		return
	}
	// Dropped on the gateway's input: the client's SYNs leave and nothing
	// comes back (a drop in the client's own output chain would fail the
	// connect at once with EPERM).
	run(t, "ip", "netns", "exec", tp.gw, "nft", "add table ip pepdrop; add chain ip pepdrop in { type filter hook input priority 0; }; add rule ip pepdrop in ip daddr "+nsVIP+" tcp dport { 80, 443 } drop")
	for _, async := range []bool{false, true} {
		dom, d := chromium(t, tp, "http://"+nsName+"/", async)
		if !strings.Contains(dom, "origin-http for "+nsClientAddr) {
			t.Errorf("VIP dropped, chromium (AsyncDns=%v): page %q, want the origin's", async, dom)
		}
		t.Logf("VIP dropped silently, chromium AsyncDns=%v fell back to the origin: load took %v, A query to origin connection %v",
			async, d.Round(time.Millisecond), fallbackDelay(t, events).Round(time.Millisecond))
	}
}
