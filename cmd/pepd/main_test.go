package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"pep/internal/dnsproxy/dnsmasqtest"
	"pep/internal/testenv"
	"pep/internal/viptls/viptlstest"
)

// freeUDPPort returns an address free for both UDP and TCP, for pepd's
// DNS listener.
func freeUDPPort(t *testing.T) string { return testenv.FreeAddr(t) }

// freePort returns an address free for TCP (and UDP), for pepd to bind.
func freePort(t *testing.T) string { return testenv.FreeAddr(t) }

// freeVIPPort returns a free TCP port of 127.0.0.1, the VIP of the tests'
// configs: pepd's TLS listener serves only connections to the VIP itself
// (others are spliced to their original destination).
func freeVIPPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// noOptimizer keeps a test's pepd off the optimizer's default port
// (127.0.0.1:3131), which another pepd on the machine may hold.
const noOptimizer = "optimize:\n  listen: \"\"\n"

// pepdBinDir is the folder pepdBin built into; TestMain removes it.
var pepdBinDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if pepdBinDir != "" {
		os.RemoveAll(pepdBinDir)
	}
	os.Exit(code)
}

// pepdBin builds the pepd binary once per test process.
var pepdBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "pepd-bin-")
	if err != nil {
		return "", err
	}
	pepdBinDir = dir
	bin := filepath.Join(dir, "pepd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// proc is a running pepd binary with its log.
type proc struct {
	cmd  *exec.Cmd
	cfg  string // the config file's path
	mu   sync.Mutex
	log  strings.Builder
	done chan struct{} // closed when stderr ends
}

// startProc writes cfg to a file, runs pepd -config on it with env added
// to the environment, and waits (20 s at most, scaled) for "pepd
// started". The process is killed when t ends.
func startProc(t *testing.T, cfg string, env ...string) *proc {
	t.Helper()
	testenv.Log(t)
	bin, err := pepdBin()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cfg: filepath.Join(t.TempDir(), "pepd.yaml"), done: make(chan struct{})}
	p.write(t, cfg)
	p.cmd = exec.Command(bin, "-config", p.cfg)
	p.cmd.Env = append(os.Environ(), env...)
	stderr, _ := p.cmd.StderrPipe()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		p.cmd.Wait()
	})
	go func() {
		defer close(p.done)
		b := make([]byte, 4096)
		for {
			n, err := stderr.Read(b)
			p.mu.Lock()
			p.log.Write(b[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	p.waitLog(t, "pepd started", 1, 20*time.Second)
	return p
}

// write replaces the config file.
func (p *proc) write(t *testing.T, cfg string) {
	t.Helper()
	if err := os.WriteFile(p.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// logs returns the log so far.
func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// waitLog waits until the log holds sub n times (within d, scaled),
// failing t with the log if it does not or pepd exits first.
func (p *proc) waitLog(t *testing.T, sub string, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(testenv.Scale(d))
	for strings.Count(p.logs(), sub) < n {
		select {
		case <-p.done:
			t.Fatalf("pepd exited (%v) before logging %q %d times:\n%s", p.cmd.Wait(), sub, n, p.logs())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("pepd did not log %q %d times within %s:\n%s", sub, n, testenv.Scale(d), p.logs())
		}
	}
}

// reload sends SIGHUP and waits for its outcome: the n-th "config
// reloaded" or "reload failed" line.
func (p *proc) reload(t *testing.T, outcome string, n int) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, outcome, n, 10*time.Second)
}

// TestProcess runs the pepd binary: it starts from a config file, answers
// /healthz, switches mode through the admin API (and its DNS listener,
// wired to a real dnsmasq, starts rewriting: VIP first), reloads the
// file's mode on SIGHUP, and exits 0 on SIGTERM.
func TestProcess(t *testing.T) {
	resolver := dnsmasqtest.Start(t, []string{"address=/www.foo.com/198.19.0.5"})
	dnsAddr := freeUDPPort(t)
	admin, httpAddr := freePort(t), freePort(t)
	cfg := func(mode string) string {
		return "mode: " + mode + "\nsubscribers: [198.18.0.0/24, 127.0.0.0/8]\nresolvers: [" + resolver + "]\nsquid: 127.0.0.1:3128\n" +
			"listen:\n  http: " + httpAddr + "\n  dns: " + dnsAddr + "\n  admin: " + admin + "\n" +
			"dns:\n  rewrite_domains: [foo.com]\ncache:\n  admission: second-hit\n  status_timeout: 500ms\n" + noOptimizer
	}
	p := startProc(t, cfg("off"))
	get := func(path string) string {
		resp, err := http.Get("http://" + admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := get("/healthz"); got != "ok\n" {
		t.Errorf("/healthz = %q", got)
	}
	req, _ := http.NewRequest("PUT", "http://"+admin+"/mode", strings.NewReader("dns"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT /mode: %v %v", resp, err)
	}
	if got := get("/mode"); got != "dns\n" {
		t.Errorf("after PUT: mode %q, want dns", got)
	}
	q := new(dns.Msg)
	q.SetQuestion("www.foo.com.", dns.TypeA)
	in, err := dns.Exchange(q, dnsAddr)
	if err != nil {
		t.Fatalf("DNS query to pepd: %v", err)
	}
	var got []string
	for _, rr := range in.Answer {
		if a, ok := rr.(*dns.A); ok {
			got = append(got, a.A.String())
		}
	}
	if strings.Join(got, ",") != "192.0.2.12,198.19.0.5" {
		t.Errorf("dns mode answer for www.foo.com = %v, want [192.0.2.12 198.19.0.5] (VIP first, origin kept)", got)
	}
	// The hints' switch: off as configured, on by the admin API, off
	// again by SIGHUP (hints.enabled); its series exist from the start.
	if got := get("/hints"); got != "off\n" {
		t.Errorf("/hints = %q, want off", got)
	}
	req, _ = http.NewRequest("PUT", "http://"+admin+"/hints", strings.NewReader("on"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT /hints: %v %v", resp, err)
	}
	if got := get("/metrics"); !strings.Contains(got, "pep_hints_enabled 1") || !strings.Contains(got, "pep_hints_sent_total 0") ||
		!strings.Contains(got, `pep_hints_prefetches_total{outcome="hit"} 0`) || !strings.Contains(got, "pep_hints_pages 0") ||
		!strings.Contains(got, "pep_hints_early_total 0") {
		t.Errorf("/metrics after PUT /hints on lacks pep_hints_enabled 1 or a pep_hints_* series at 0")
	}
	p.write(t, cfg("url"))
	p.reload(t, "config reloaded", 1)
	if got := get("/mode"); got != "url\n" {
		t.Errorf("after SIGHUP: mode %q, want url", got)
	}
	if got := get("/hints"); got != "off\n" {
		t.Errorf("after SIGHUP: /hints = %q, want off (hints.enabled false)", got)
	}
	if got := get("/metrics"); !strings.Contains(got, `pep_admin_mode{mode="url"} 1`) || !strings.Contains(got, "pep_http_open_connections") {
		t.Errorf("/metrics lacks pep_admin_mode or pep_http_* series")
	}
	// The cache status: admission as configured, Squid's figures missing
	// (no Squid behind this pepd) and said so, never an error page.
	if got := get("/cache"); !strings.Contains(got, "admission: second-hit (window 1h0m0s)\n") || !strings.Contains(got, "squid: squid: cache manager") {
		t.Errorf("/cache = %q", got)
	}
	if got := get("/metrics"); !strings.Contains(got, "pep_cache_squid_up 0") || !strings.Contains(got, "pep_cache_admission_enabled 1") {
		t.Errorf("/metrics lacks pep_cache_squid_up 0 or pep_cache_admission_enabled 1")
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(testenv.Scale(15 * time.Second)):
		t.Fatalf("pepd still running 15 s after SIGTERM:\n%s", p.logs())
	}
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

// rawGet sends one request head to addr from 127.0.0.1 and returns the
// status line and body of the answer.
func rawGet(t *testing.T, addr, head string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, testenv.Scale(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(testenv.Scale(10 * time.Second)))
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", head, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestReloadHTTPSettings: SIGHUP applies the HTTP path's settings to the
// running pepd binary (subscribers, guard.allow), and a file that does
// not parse keeps them. The requests come from 127.0.0.1 to pepd's HTTP
// listener; with no Squid behind it (its port is closed) a request pepd
// lets through ends in 502 "upstream failed", one it refuses in 403 with
// the reason. (http.host_mismatch needs an intercepted connection:
// TestReloadHostMismatch in internal/httpproxy, the same reloader.)
func TestReloadHTTPSettings(t *testing.T) {
	admin, httpAddr, squid := freePort(t), freePort(t), freePort(t) // squid: nothing listens
	cfg := func(subscribers, allow string) string {
		return "mode: off\nsubscribers: [" + subscribers + "]\nresolvers: [127.0.0.1:9]\nsquid: " + squid + "\n" +
			"listen:\n  http: " + httpAddr + "\n  dns: \"\"\n  admin: " + admin + "\n" +
			"guard:\n  allow: [" + allow + "]\n" + noOptimizer
	}
	// A VIP-path request for a private address: the guard refuses it
	// unless guard.allow names it.
	private := "GET /10.1.2.3/x HTTP/1.1\r\nHost: 192.0.2.12\r\nConnection: close\r\n\r\n"
	check := func(step string, want int, wantBody string) {
		t.Helper()
		if code, body := rawGet(t, httpAddr, private); code != want || !strings.Contains(body, wantBody) {
			t.Errorf("%s: %d %q, want %d %q", step, code, body, want, wantBody)
		}
	}
	p := startProc(t, cfg("127.0.0.0/8", ""))
	check("start", 403, "private address")

	p.write(t, cfg("127.0.0.0/8", "10.1.2.3/32"))
	p.reload(t, "config reloaded", 1)
	check("after guard.allow", 502, "upstream failed")

	p.write(t, cfg("198.18.0.0/24", "10.1.2.3/32"))
	p.reload(t, "config reloaded", 2)
	check("after subscribers without 127.0.0.0/8", 403, "not a subscriber")

	// A file that does not parse: logged with the field, the running
	// settings stay.
	p.write(t, cfg("127.0.0.0/8", "")+"vip: 10.0.0\n")
	p.reload(t, "reload failed; keeping the running config", 1)
	if !strings.Contains(p.logs(), "vip") {
		t.Errorf("the failed reload does not name the field:\n%s", p.logs())
	}
	check("after an invalid file", 403, "not a subscriber")
	if n := strings.Count(p.logs(), "config reloaded"); n != 2 {
		t.Errorf("%d \"config reloaded\" lines after the invalid file, want 2", n)
	}
}

// TestWatchdogWithheld: pepd under systemd's watchdog (NOTIFY_SOCKET,
// WATCHDOG_USEC: a unixgram socket of the test's own) pings WATCHDOG=1
// while its HTTP path answers, withholds the pings while the path is
// wedged (http.max_conns connections held open: the health check's
// connection waits at accept), stays up meanwhile (its admin API
// answers), and pings again once the path is free. Fail-open
// (deploy/failopen_test.go) depends on the withheld pings: systemd
// restarts a pepd that stops pinging.
func TestWatchdogWithheld(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify")
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var pings atomic.Int64
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := nc.Read(b)
			if err != nil {
				return
			}
			if strings.Contains(string(b[:n]), "WATCHDOG=1") {
				pings.Add(1)
			}
		}
	}()
	const watchdog = 600 * time.Millisecond // pepd pings every 200 ms
	admin, httpAddr := freePort(t), freePort(t)
	cfg := "mode: off\nsubscribers: [127.0.0.0/8]\nresolvers: [127.0.0.1:9]\nsquid: 127.0.0.1:9\n" +
		"listen:\n  http: " + httpAddr + "\n  dns: \"\"\n  admin: " + admin + "\n" +
		"http:\n  max_conns: 2\n" + noOptimizer
	p := startProc(t, cfg, "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC="+strconv.FormatInt(watchdog.Microseconds(), 10))
	waitPings := func(step string, n int64) {
		t.Helper()
		from := pings.Load()
		deadline := time.Now().Add(testenv.Scale(10 * watchdog))
		for pings.Load() < from+n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d watchdog pings in %s, want %d:\n%s", step, pings.Load()-from, testenv.Scale(10*watchdog), n, p.logs())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitPings("healthy", 3)

	// Wedge the HTTP path: max_conns connections that send nothing.
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	failed := strings.Count(p.logs(), "withholding the watchdog ping")
	p.waitLog(t, "withholding the watchdog ping", failed+1, 10*watchdog)
	// From the first failed check on, no ping for two whole WatchdogSec
	// (systemd would have restarted pepd after one).
	p.waitLog(t, "withholding the watchdog ping", failed+2, 10*watchdog)
	before := pings.Load()
	p.waitLog(t, "withholding the watchdog ping", failed+5, 10*watchdog)
	if got := pings.Load() - before; got != 0 {
		t.Errorf("%d watchdog pings while the HTTP path was wedged, want 0", got)
	}
	select {
	case <-p.done:
		t.Fatalf("pepd exited while wedged:\n%s", p.logs())
	default:
	}
	resp, err := http.Get("http://" + admin + "/mode")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("admin API while wedged: %v %v", resp, err)
	}
	resp.Body.Close()

	for _, c := range held {
		c.Close()
	}
	waitPings("after the path is free again", 2)
}

// TestHelpAndCheck: pepd -h describes the program and exits 0; -check
// validates a configuration and exits 0, or prints the file:line: field
// error and exits 2 (as nginx -t and squid -k parse do).
func TestHelpAndCheck(t *testing.T) {
	var errb strings.Builder
	if st := run([]string{"-h"}, &errb); st != 0 || !strings.Contains(errb.String(), "performance enhancing") || !strings.Contains(errb.String(), "-check") {
		t.Errorf("-h: status %d, output %q", st, errb.String())
	}
	errb.Reset()
	if st := run([]string{"-check", "-config", "../../configs/pepd.yaml"}, &errb); st != 0 || !strings.Contains(errb.String(), "is valid") {
		t.Errorf("-check on configs/pepd.yaml: status %d, %q", st, errb.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("mode: url\nvip: 10.0.0\n"), 0o644)
	errb.Reset()
	if st := run([]string{"-check", "-config", bad}, &errb); st != 2 || !strings.Contains(errb.String(), "bad.yaml:2: vip: ") {
		t.Errorf("-check on a bad config: status %d, %q", st, errb.String())
	}
}

// TestVIPCertificate runs the pepd binary with the VIP as an HTTPS origin
// (https.cert_file): a missing key file stops the start with an error
// naming it; a ClientHello without SNI to the VIP address (here the
// listener's own, 127.0.0.1) is terminated and served over HTTP/2; SIGHUP
// with a key that does not match keeps the old certificate (error logged),
// SIGHUP with a good pair serves the new one, and a connection opened
// before both still works.
func TestVIPCertificate(t *testing.T) {
	resolver := dnsmasqtest.Start(t, []string{"address=/www.foo.com/198.19.0.5"})
	dir := t.TempDir()
	bin, err := pepdBin()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := viptlstest.NewCA("pep test CA")
	if err != nil {
		t.Fatal(err)
	}
	cf, kf, err := ca.WriteFiles(dir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	admin, httpAddr, tlsAddr := freePort(t), freePort(t), freeVIPPort(t)
	cfgFile := filepath.Join(dir, "pepd.yaml")
	writeCfg := func(key string) {
		cfg := "mode: url\nvip: 127.0.0.1\nsubscribers: [127.0.0.0/8]\nresolvers: [" + resolver + "]\nsquid: 127.0.0.1:3128\n" +
			"listen:\n  http: " + httpAddr + "\n  tls: " + tlsAddr + "\n  dns: \"\"\n  admin: " + admin + "\n" +
			noOptimizer + "https:\n  cert_file: " + cf + "\n  key_file: " + key + "\n  urls: true\n"
		if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg(filepath.Join(dir, "missing.key"))
	out, err := exec.Command(bin, "-config", cfgFile).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "missing.key") {
		t.Fatalf("start with a missing key: %v\n%s", err, out)
	}
	writeCfg(kf)
	cmd := exec.Command(bin, "-config", cfgFile)
	var logs testenv.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitLog := func(s string) {
		t.Helper()
		for deadline := time.Now().Add(testenv.Scale(20 * time.Second)); !strings.Contains(logs.String(), s); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in pepd's log:\n%s", s, logs.String())
			}
		}
	}
	waitLog("pepd started")
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, tlsAddr)
		}}
	old := &http.Client{Transport: tr}
	serial := func(c *http.Client) string {
		t.Helper()
		resp, err := c.Get("https://127.0.0.1/.pep/healthz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok\n" || resp.ProtoMajor != 2 {
			t.Fatalf("health over TLS: %s %s %q", resp.Proto, resp.Status, b)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.String()
	}
	fresh := func() *http.Client { return &http.Client{Transport: tr.Clone()} }
	first := serial(old)
	// A key of another certificate: the reload fails, the old one stays.
	_, otherKey, err := ca.Issue([]string{"127.0.0.1"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(kf, otherKey, 0o600)
	cmd.Process.Signal(syscall.SIGHUP)
	waitLog("reload failed")
	if !strings.Contains(logs.String(), "private key does not match") {
		t.Errorf("reload error does not say why:\n%s", logs.String())
	}
	if got := serial(fresh()); got != first {
		t.Errorf("after a failed reload serial %s, want the old %s", got, first)
	}
	// A good pair.
	if _, _, err := ca.WriteFiles(dir, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	waitLog("VIP certificate reloaded")
	if got := serial(fresh()); got == first {
		t.Errorf("after a good reload still the old serial %s", got)
	}
	if got := serial(old); got != first {
		t.Errorf("the connection opened before the reloads now has serial %s, want %s (kept)", got, first)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, logs.String())
	}
}

// TestOneResolverCache: the HTTP path resolves a request's host before
// Squid (the guard's check) and the optimizer, Squid's parent, resolves it
// again to connect; pepd gives both one cache, so a miss asks the carrier
// resolver once, not twice (each ask is a round trip on the wired side).
// A real dnsmasq logs the queries; the optimizer stands where Squid would
// (pepd sends it its forward-proxy request) and fetches from a local
// origin that the guard allows.
func TestOneResolverCache(t *testing.T) {
	dm, port := fooOrigin(t)
	resolver := dm.Addr
	admin, httpAddr, opt := freePort(t), freePort(t), freePort(t)
	startProc(t, "mode: off\nsubscribers: [127.0.0.0/8]\nresolvers: ["+resolver+"]\nsquid: "+opt+"\nsquid_proxy_protocol: false\n"+
		"listen:\n  http: "+httpAddr+"\n  dns: \"\"\n  admin: "+admin+"\nguard:\n  allow: [127.0.0.0/8]\n  allowed_ports: [80, "+port+"]\n"+
		"optimize:\n  listen: "+opt+"\n")
	code, body := rawGet(t, httpAddr, "GET /www.foo.com:"+port+"/x HTTP/1.1\r\nHost: 192.0.2.12\r\nConnection: close\r\n\r\n")
	if code != 200 || body != "from the origin" {
		t.Fatalf("VIP-path request through pepd and its optimizer: %d %q, want 200 from the origin", code, body)
	}
	if log := dm.Output(); strings.Count(log, "query[A] www.foo.com from") != 1 {
		t.Errorf("the carrier resolver was not asked for www.foo.com's A record exactly once (one cache for pepd):\n%s", log)
	}
}

// TestSquidDNS: with listen.squid_dns, pepd answers Squid's lookups from
// the cache its HTTP path filled: after a request for www.foo.com through
// pepd, Squid's A question for the name is answered with the address pepd
// checked, and the carrier resolver (a real dnsmasq, logging queries) has
// been asked once in all. Port 53 on a loopback address of its own needs
// root.
func TestSquidDNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("listen.squid_dns binds port 53: needs root")
	}
	dm, port := fooOrigin(t)
	admin, httpAddr, opt := freePort(t), freePort(t), freePort(t)
	squidDNS := fmt.Sprintf("127.53.%d.%d:53", os.Getpid()%250+1, time.Now().UnixNano()%250+1)
	startProc(t, "mode: off\nsubscribers: [127.0.0.0/8]\nresolvers: ["+dm.Addr+"]\nsquid: "+opt+"\nsquid_proxy_protocol: false\n"+
		"listen:\n  http: "+httpAddr+"\n  dns: \"\"\n  admin: "+admin+"\n  squid_dns: \""+squidDNS+"\"\n"+
		"guard:\n  allow: [127.0.0.0/8]\n  allowed_ports: [80, "+port+"]\noptimize:\n  listen: "+opt+"\n")
	if code, body := rawGet(t, httpAddr, "GET /www.foo.com:"+port+"/x HTTP/1.1\r\nHost: 192.0.2.12\r\nConnection: close\r\n\r\n"); code != 200 || body != "from the origin" {
		t.Fatalf("request through pepd: %d %q", code, body)
	}
	m := new(dns.Msg)
	m.SetQuestion("www.foo.com.", dns.TypeA)
	in, _, err := (&dns.Client{Timeout: 3 * time.Second}).Exchange(m, squidDNS)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Answer) != 1 || !in.Answer[0].(*dns.A).A.Equal(net.ParseIP("127.0.0.2")) {
		t.Errorf("Squid's question: %v, want www.foo.com A 127.0.0.2", in)
	}
	if log := dm.Output(); strings.Count(log, "query[A] www.foo.com from") != 1 {
		t.Errorf("the carrier resolver was not asked for www.foo.com's A record exactly once:\n%s", log)
	}
}

// fooOrigin starts an origin on 127.0.0.2 answering "from the origin" and
// a real dnsmasq (logging its queries) that resolves www.foo.com to it;
// it returns dnsmasq and the origin's port.
func fooOrigin(t *testing.T) (*dnsmasqtest.Server, string) {
	t.Helper()
	origin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "from the origin")
	})}
	ol, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	go origin.Serve(ol)
	t.Cleanup(func() { origin.Close() })
	_, port, _ := net.SplitHostPort(ol.Addr().String())
	return dnsmasqtest.StartServer(t, []string{"address=/www.foo.com/127.0.0.2", "log-queries"}), port
}
