package dnsproxy

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"pep/internal/dnsproxy/dnsmasqtest"
)

// procCPU returns the user+system CPU time used so far by process pid
// (/proc/pid/stat fields 14 and 15).
func procCPU(tb testing.TB, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / hz
}

// selfCPU returns this process's user+system CPU time (the proxy's, as it
// is the only thing running in it during a benchmark run).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var (
	completedRE = regexp.MustCompile(`Queries completed:\s+(\d+)`)
	qpsRE       = regexp.MustCompile(`Queries per second:\s+([0-9.]+)`)
)

// dnsperf runs dnsperf against addr for d with the query file and a rate
// limit (0: as fast as it goes) and returns queries completed and q/s.
func dnsperf(tb testing.TB, addr, file string, d time.Duration, rate int) (int, float64) {
	host, port, _ := net.SplitHostPort(addr)
	args := []string{"-s", host, "-p", port, "-d", file, "-l", strconv.Itoa(int(d / time.Second)), "-c", "4", "-q", "200"}
	if rate > 0 {
		args = append(args, "-Q", strconv.Itoa(rate))
	}
	out, err := exec.Command("dnsperf", args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("dnsperf %v: %v\n%s", args, err, out)
	}
	m, q := completedRE.FindSubmatch(out), qpsRE.FindSubmatch(out)
	if m == nil || q == nil {
		tb.Fatalf("dnsperf output not understood:\n%s", out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	qps, _ := strconv.ParseFloat(string(q[1]), 64)
	return n, qps
}

// BenchmarkDNSPerf measures, in one run, queries/s and CPU time per query
// of dnsmasq alone and of the proxy in front of the same dnsmasq, driven
// by dnsperf (issue 3 "Benchmark"; target: the proxy's CPU per query at
// most 1.5x dnsmasq's). Run it once:
//
//	go test ./internal/dnsproxy -run XXX -bench DNSPerf -benchtime 1x
//
// The query mix: half A for rewritten names, a quarter AAAA for rewritten
// names (filtered), a quarter A for names outside the policy.
func BenchmarkDNSPerf(b *testing.B) {
	if _, err := exec.LookPath("dnsperf"); err != nil {
		b.Skip("dnsperf not installed (apt-get install -y dnsperf)")
	}
	var zone, queries []string
	for i := range 100 {
		zone = append(zone, fmt.Sprintf("host-record=www%d.foo.com,198.19.%d.%d,2001:db8::%x", i, i/250, i%250+1, i+1),
			fmt.Sprintf("host-record=www%d.other.net,198.19.9.%d", i, i+1))
		switch i % 4 {
		case 0, 1:
			queries = append(queries, fmt.Sprintf("www%d.foo.com A", i))
		case 2:
			queries = append(queries, fmt.Sprintf("www%d.foo.com AAAA", i))
		case 3:
			queries = append(queries, fmt.Sprintf("www%d.other.net A", i))
		}
	}
	zone = append(zone, "local=/foo.com/", "local=/other.net/", "cache-size=0")
	dm := dnsmasqtest.StartServer(b, zone)
	file := filepath.Join(b.TempDir(), "queries")
	os.WriteFile(file, []byte(strings.Join(queries, "\n")+"\n"), 0o644)
	o := defaultOptions(dm.Addr)
	o.Logger = nil
	o.MaxInflight = 4096
	_, addr, _ := startProxy(b, o)
	pid := dm.Cmd.Process.Pid

	const d = 8 * time.Second
	for _, rate := range []int{0, 10000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			c0 := procCPU(b, pid)
			n0, qps0 := dnsperf(b, dm.Addr, file, d, rate)
			dmAlone := procCPU(b, pid) - c0

			c0, s0 := procCPU(b, pid), selfCPU()
			n1, qps1 := dnsperf(b, addr, file, d, rate)
			dmBehind, proxy := procCPU(b, pid)-c0, selfCPU()-s0

			perAlone := float64(dmAlone.Microseconds()) / float64(n0)
			perProxy := float64(proxy.Microseconds()) / float64(n1)
			b.ReportMetric(qps0, "dnsmasq-q/s")
			b.ReportMetric(qps1, "proxy-q/s")
			b.ReportMetric(perAlone, "dnsmasq-µs/q")
			b.ReportMetric(perProxy, "proxy-µs/q")
			b.ReportMetric(float64(dmBehind.Microseconds())/float64(n1), "dnsmasq-behind-µs/q")
			b.ReportMetric(perProxy/perAlone, "ratio")
			b.Logf("dnsmasq alone: %d queries, %.0f q/s, %v CPU, %.1f µs/q", n0, qps0, dmAlone, perAlone)
			b.Logf("proxy+dnsmasq: %d queries, %.0f q/s, proxy %v CPU (%.1f µs/q), dnsmasq %v CPU; proxy/dnsmasq-alone = %.2fx",
				n1, qps1, proxy, perProxy, dmBehind, perProxy/perAlone)
		})
	}
}
