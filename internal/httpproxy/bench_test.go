package httpproxy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"pep/internal/mode"
)

// procCPU returns the user+system CPU time of process pid from
// /proc/<pid>/stat (fields 14 and 15, in clock ticks of 1/100 s).
func procCPU(t testing.TB, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 on
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

var wrkRequestsRE = regexp.MustCompile(`(\d+) requests in`)

// runWrk runs wrk with a Lua script setting path and Host, and returns the
// number of requests it completed.
func runWrk(b *testing.B, target, path, host string, d time.Duration, conns int) int {
	script := filepath.Join(b.TempDir(), "req.lua")
	lua := fmt.Sprintf("wrk.path = %q\n", path)
	if host != "" {
		lua += fmt.Sprintf("wrk.headers[\"Host\"] = %q\n", host)
	}
	os.WriteFile(script, []byte(lua), 0o644)
	out, err := exec.Command("wrk", "-t1", "-c"+strconv.Itoa(conns), "-d"+d.String(), "-s", script, "http://"+target+"/").CombinedOutput()
	if err != nil {
		b.Fatalf("wrk: %v\n%s", err, out)
	}
	m := wrkRequestsRE.FindStringSubmatch(string(out))
	if m == nil {
		b.Fatalf("wrk output: %s", out)
	}
	if strings.Contains(string(out), "Non-2xx") {
		b.Fatalf("wrk saw errors:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// BenchmarkCachedRequestCPU measures the CPU time per cached request of
// pepd+Squid against Squid alone, in the same run, with wrk as the load
// generator (apt-get install -y wrk). Squid gets a second, plain
// forward-proxy port for the "Squid alone" phase; pepd (in this process)
// sends to Squid's PROXY protocol port. The object is a 10 KB image held
// in Squid's memory cache. Run:
//
//	go test -run '^$' -bench CachedRequestCPU -benchtime 1x ./internal/httpproxy/
//
// PEP_BENCH_SECONDS sets each phase's length (default 5).
func BenchmarkCachedRequestCPU(b *testing.B) {
	if _, err := exec.LookPath("wrk"); err != nil {
		b.Skip("wrk not installed (apt-get install -y wrk)")
	}
	secs := 5
	if s, err := strconv.Atoi(os.Getenv("PEP_BENCH_SECONDS")); err == nil && s > 0 {
		secs = s
	}
	pages := map[string]page{"img.cdn.test/logo.png": {ctype: "image/png", body: strings.Repeat("x", 10<<10)}}
	ns := startDNS(b, siteRecords)
	o := startOrigin(b, originIP, pages)
	port := o.Addr.Port()
	for _, pp := range []bool{true, false} {
		name := map[bool]string{true: "proxy-protocol", false: "xff"}[pp]
		b.Run(name, func(b *testing.B) {
			sc := DefaultSquidConf(testVIP)
			sc.ProxyProtocol = pp
			sc.Subscribers, sc.AllowedPorts, sc.AllowDst, sc.Resolvers = []string{"127.0.0.0/8"}, []uint16{port}, []string{originIP + "/32"}, []string{ns.IP}
			if ns.Addr != ns.IP+":53" {
				sc.HostsFile = writeHosts(b, siteRecords)
			}
			plain := "127.0.0.1:" + freePort(b)
			sq := startSquidExtra(b, sc, "http_port "+plain+"\n")
			p := startPepd(b, pepdOpts{squid: sq.Addr, proxyProtocol: pp, resolver: ns.Addr, mode: mode.URL,
				subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{port},
				limits: Limits{}})
			abs := "http://img.cdn.test:" + o.Port + "/logo.png"
			vipPath := "/img.cdn.test:" + o.Port + "/logo.png"
			// Warm: fill the cache and pepd's resolver cache.
			runWrk(b, plain, abs, "", time.Second, 2)
			runWrk(b, p.Addr, vipPath, testVIP.String(), time.Second, 2)
			d := time.Duration(secs) * time.Second
			self := os.Getpid()
			squidPid := sq.cmd.Process.Pid
			// squid -N is one process (no master/kid), pinger disabled.
			b.ResetTimer()
			s0 := procCPU(b, squidPid)
			nAlone := runWrk(b, plain, abs, "", d, 8)
			s1 := procCPU(b, squidPid)
			p1 := procCPU(b, self)
			nPep := runWrk(b, p.Addr, vipPath, testVIP.String(), d, 8)
			s2 := procCPU(b, squidPid)
			p2 := procCPU(b, self)
			b.StopTimer()
			alone := float64(s1-s0) / float64(nAlone)
			squidBehind := float64(s2-s1) / float64(nPep)
			pep := float64(p2-p1) / float64(nPep)
			b.ReportMetric(alone/1e3, "squid-alone-µs/req")
			b.ReportMetric(squidBehind/1e3, "squid-behind-pepd-µs/req")
			b.ReportMetric(pep/1e3, "pepd-µs/req")
			b.ReportMetric((squidBehind+pep)/alone, "ratio")
			b.ReportMetric(float64(nAlone)/d.Seconds(), "squid-alone-req/s")
			b.ReportMetric(float64(nPep)/d.Seconds(), "pepd+squid-req/s")
			b.Logf("%s: squid alone %d req, %.1f µs CPU/req; pepd+squid %d req, squid %.1f + pepd %.1f µs CPU/req; ratio %.2f; upstream conns %v",
				name, nAlone, alone/1e3, nPep, squidBehind/1e3, pep/1e3, (squidBehind+pep)/alone, testutilValue(p.M.upstreamConns))
		})
	}
}
