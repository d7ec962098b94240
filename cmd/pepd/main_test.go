package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"pep/internal/dnsproxy/dnsmasqtest"
)

// freeUDPPort returns a 127.0.0.1 port free for both UDP and TCP.
func freeUDPPort(t *testing.T) string {
	return fmt.Sprintf("127.0.0.1:%d", dnsmasqtest.FreePort(t))
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestProcess runs the pepd binary: it starts from a config file, answers
// /healthz, switches mode through the admin API (and its DNS listener,
// wired to a real dnsmasq, starts rewriting: VIP first), reloads the
// file's mode on SIGHUP, and exits 0 on SIGTERM.
func TestProcess(t *testing.T) {
	resolver := dnsmasqtest.Start(t, []string{"address=/www.foo.com/198.19.0.5"})
	dnsAddr := freeUDPPort(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "pepd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	admin, httpAddr := freePort(t), freePort(t)
	cfgFile := filepath.Join(dir, "pepd.yaml")
	writeCfg := func(mode string) {
		cfg := "mode: " + mode + "\nsubscribers: [198.18.0.0/24, 127.0.0.0/8]\nresolvers: [" + resolver + "]\nsquid: 127.0.0.1:3128\n" +
			"listen:\n  http: " + httpAddr + "\n  dns: " + dnsAddr + "\n  admin: " + admin + "\n" +
			"dns:\n  rewrite_domains: [foo.com]\ncache:\n  admission: second-hit\n  status_timeout: 500ms\n"
		if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg("off")
	cmd := exec.Command(bin, "-config", cfgFile)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// Readiness: pepd logs "pepd started" once its listeners are up.
	logs := make(chan string, 100)
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := stderr.Read(b)
			if n > 0 {
				logs <- string(b[:n])
			}
			if err != nil {
				close(logs)
				return
			}
		}
	}()
	var all strings.Builder
	for !strings.Contains(all.String(), "pepd started") {
		select {
		case l, ok := <-logs:
			if !ok {
				t.Fatalf("pepd exited:\n%s", all.String())
			}
			all.WriteString(l)
		case <-time.After(20 * time.Second):
			t.Fatalf("pepd did not start:\n%s", all.String())
		}
	}
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
	writeCfg("url")
	cmd.Process.Signal(syscall.SIGHUP)
	for !strings.Contains(all.String(), "config reloaded") {
		l, ok := <-logs
		if !ok {
			t.Fatalf("pepd exited:\n%s", all.String())
		}
		all.WriteString(l)
	}
	if got := get("/mode"); got != "url\n" {
		t.Errorf("after SIGHUP: mode %q, want url", got)
	}
	if got := get("/metrics"); !strings.Contains(got, `pep_admin_mode{mode="url"} 1`) || !strings.Contains(got, "pep_http_open_connections") {
		t.Errorf("/metrics lacks pep_admin_mode or pep_http_* series")
	}
	// The cache status: admission as configured, Squid's figures missing
	// (no Squid behind this pepd) and said so, never an error page.
	if got := get("/cache"); !strings.Contains(got, "admission: second-hit (window 1h0m0s)\n") || !strings.Contains(got, "squid: cachepolicy: squid manager") {
		t.Errorf("/cache = %q", got)
	}
	if got := get("/metrics"); !strings.Contains(got, "pep_cache_squid_up 0") || !strings.Contains(got, "pep_cache_admission_enabled 1") {
		t.Errorf("/metrics lacks pep_cache_squid_up 0 or pep_cache_admission_enabled 1")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	for range logs {
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
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
