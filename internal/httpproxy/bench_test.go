package httpproxy

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pep/internal/cputime"
	"pep/internal/mode"
	"pep/internal/viptls/viptlstest"
)

// procCPU returns process pid's CPU time so far (cputime.Of), failing
// the benchmark if it cannot be read.
func procCPU(t testing.TB, pid int) time.Duration {
	d, err := cputime.Of(pid)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// procSplit is cputime.Split for a benchmark: pid's user and system CPU
// time so far.
func procSplit(t testing.TB, pid int) (user, system time.Duration) {
	u, s, err := cputime.Split(pid)
	if err != nil {
		t.Fatal(err)
	}
	return u, s
}

// startForwarder starts a byte forwarder to upstream on a loopback port:
// per connection, two goroutines copying with read(2)/write(2) through a
// 64 KiB buffer, no parsing. It is the floor of any user-space proxy in
// front of Squid (the same system calls as the relay, nothing else).
//
// With raw, both connections do their reads and writes through rawConn
// (raw system calls, the netpoller only to wait), as pepd's relay does.
func startForwarder(b *testing.B, upstream string, raw bool) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	pump := func(dst, src net.Conn) {
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			if raw {
				c, u = newRawConn(c), newRawConn(u)
			}
			go pump(u, c)
			go pump(c, u)
		}
	}()
	return l.Addr().String()
}

// haproxy is an HAProxy process with an HTTP and a TCP frontend, both in
// front of one upstream.
type haproxy struct {
	HTTP, TCP string // listen addresses (host:port)
	Threads   int    // nbthread
	pid       int
}

// startHAProxy runs haproxy (apt-get install -y haproxy) in the foreground
// (-db) in front of upstream with nbthread threads, until the benchmark
// ends, or returns nil if haproxy is not installed. The HTTP frontend is
// `mode http` with keep-alive on both sides and `http-reuse never`: each
// client connection gets its own upstream connection, kept for its
// requests (as pepd's relay, whose Squid connection is taken from the
// pool per request, in effect with one client per address);
// the request line, absolute URI included, is passed on as received. The
// TCP frontend is `mode tcp`, a byte relay in C without splicing (the
// floor for a C proxy, as startForwarder is for Go).
func startHAProxy(b *testing.B, upstream string, nbthread int) *haproxy {
	bin := haproxyBin()
	if bin == "" {
		return nil
	}
	h := &haproxy{HTTP: "127.0.0.1:" + freePort(b), TCP: "127.0.0.1:" + freePort(b), Threads: nbthread}
	conf := fmt.Sprintf(`global
	nbthread %d
	maxconn 1000
defaults
	timeout connect 5s
	timeout client 60s
	timeout server 60s
frontend fe_http
	mode http
	bind %s
	option http-keep-alive
	default_backend be_http
backend be_http
	mode http
	option http-keep-alive
	http-reuse never
	server squid %s
frontend fe_tcp
	mode tcp
	bind %s
	default_backend be_tcp
backend be_tcp
	mode tcp
	server squid %s
`, nbthread, h.HTTP, upstream, h.TCP, upstream)
	h.pid = runHAProxy(b, bin, conf, h.TCP)
	return h
}

// haproxyBin is the haproxy binary's path, or "" when it is not installed.
func haproxyBin() string {
	for _, name := range []string{"haproxy", "/usr/sbin/haproxy"} {
		if bin, err := exec.LookPath(name); err == nil {
			return bin
		}
	}
	return ""
}

// runHAProxy runs bin in the foreground (-db) with the configuration conf
// until the benchmark ends and returns its pid, once it accepts on addr
// (haproxy binds every frontend before it accepts on any).
func runHAProxy(b *testing.B, bin, conf, addr string) int {
	path := filepath.Join(b.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-db", "-f", path)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	startDaemon(b, "haproxy", cmd, addr, out.String)
	return cmd.Process.Pid
}

// haproxyVIP is HAProxy standing where pepd's VIP stands in
// BenchmarkH2CPU: one process, `mode http`, with a plain HTTP/1.1 frontend
// (Plain) and a TLS frontend offering ALPN h2 and http/1.1 (TLS), both in
// front of the benchmark's Squid.
type haproxyVIP struct {
	Plain, TLS string // listen addresses (host:port)
	pid        int
}

// startHAProxyVIP runs haproxy (apt-get install -y haproxy) with one thread
// (nbthread 1, as pepd's GOMAXPROCS 1 in the benchmark) in front of squid
// until the benchmark ends, or returns nil if haproxy is not installed.
// Both frontends do per request what pepd does for a VIP path: the
// request's path becomes the absolute URI authority+path and Host the
// authority (RFC 9112 section 3.2.2), and the request goes to Squid with
// a PROXY protocol header when proxyProtocol is set (send-proxy), over
// kept-alive upstream connections (http-reuse safe, HAProxy's default).
// The TLS frontend's certificate is a new one from ca for the VIP's names;
// TLS 1.2 at least, as pepd's.
func startHAProxyVIP(b *testing.B, squid string, proxyProtocol bool, ca *viptlstest.CA, authority string) *haproxyVIP {
	bin := haproxyBin()
	if bin == "" {
		return nil
	}
	now := time.Now()
	cert, key, err := ca.Issue([]string{"vip.test", testVIP.String()}, now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	pemFile := filepath.Join(b.TempDir(), "vip.pem")
	if err := os.WriteFile(pemFile, append(cert, key...), 0o600); err != nil {
		b.Fatal(err)
	}
	h := &haproxyVIP{Plain: "127.0.0.1:" + freePort(b), TLS: "127.0.0.1:" + freePort(b)}
	send := ""
	if proxyProtocol {
		send = " send-proxy"
	}
	conf := fmt.Sprintf(`global
	nbthread 1
	maxconn 1000
	ssl-default-bind-options ssl-min-ver TLSv1.2
defaults
	mode http
	timeout connect 5s
	timeout client 60s
	timeout server 60s
	option http-keep-alive
frontend fe_plain
	bind %s
	default_backend be_squid
frontend fe_tls
	bind %s ssl crt %s alpn h2,http/1.1
	default_backend be_squid
backend be_squid
	http-request set-uri http://%s%%[path]
	http-request set-header Host %s
	server squid %s%s
`, h.Plain, h.TLS, pemFile, authority, authority, squid, send)
	h.pid = runHAProxy(b, bin, conf, h.TLS)
	return h
}

var wrkRequestsRE = regexp.MustCompile(`(\d+) requests in`)

var h2loadRE = regexp.MustCompile(`requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored`)

// runH2load runs h2load (Debian nghttp2-client) with conns connections
// and streams concurrent streams on each for d against url (https: HTTP/2
// over TLS, ALPN h2) and returns the requests that succeeded; any failed
// one fails b.
func runH2load(b *testing.B, url string, d time.Duration, conns, streams int) int {
	out, err := exec.Command("h2load", "-c"+strconv.Itoa(conns), "-m"+strconv.Itoa(streams), "-D", strconv.Itoa(int(d.Seconds())), url).CombinedOutput()
	if err != nil {
		b.Fatalf("h2load: %v\n%s", err, out)
	}
	m := h2loadRE.FindStringSubmatch(string(out))
	if m == nil {
		b.Fatalf("h2load output: %s", out)
	}
	if m[3] != "0" || m[4] != "0" {
		b.Fatalf("h2load saw failures:\n%s", out)
	}
	n, _ := strconv.Atoi(m[2])
	return n
}

// runWrk runs wrk with a Lua script setting path and Host (and the
// header name/value pairs of hdr), and returns the number of requests it
// completed.
func runWrk(b *testing.B, target, path, host string, d time.Duration, conns int, hdr ...string) int {
	script := filepath.Join(b.TempDir(), "req.lua")
	lua := fmt.Sprintf("wrk.path = %q\n", path)
	if host != "" {
		lua += fmt.Sprintf("wrk.headers[\"Host\"] = %q\n", host)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		lua += fmt.Sprintf("wrk.headers[%q] = %q\n", hdr[i], hdr[i+1])
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
// forward-proxy port for the "Squid alone" phases; pepd (in this process)
// sends to Squid's PROXY protocol port. The object is a 10 KB image held
// in Squid's memory cache, with a Content-Length. Each round runs Squid
// alone, then for each CPU count n these phases: pepd's relay with
// GOMAXPROCS n (label suffix -pn), a plain byte forwarder in front of
// Squid's plain port (startForwarder: the floor of a Go proxy using the
// net package) and the same forwarder on raw system calls (rawConn, as the
// relay), pepd on the standard library only (the path the relay hands
// unusual requests to), and haproxy with nbthread n (startHAProxy,
// skipped with a logged message when haproxy is not installed): its `mode
// http` and `mode tcp` frontends (-tn), counting haproxy's CPU instead of
// this process's (a mature C proxy doing the relay's job, and a byte
// relay in C). A round's ratio is (Squid + proxy CPU per request in a
// proxy phase) / (Squid's CPU per request alone in the same round). The
// median round is reported, with the spread in the log. Run:
//
//	go test -run '^$' -bench CachedRequestCPU -benchtime 1x ./internal/httpproxy/
//
// PEP_BENCH_SECONDS sets each phase's length (default 3), PEP_BENCH_ROUNDS
// the rounds (default 5); PEP_BENCH_STDLIB=0 skips the standard library
// phases (for a -cpuprofile of the relay), PEP_BENCH_CPUS the CPU counts,
// comma-separated (default 1: one processor for pepd's Go code, one
// haproxy thread, as pepd's procs setting gives on an appliance where
// Squid has a core of its own).
func BenchmarkCachedRequestCPU(b *testing.B) {
	if _, err := exec.LookPath("wrk"); err != nil {
		b.Skip("wrk not installed (apt-get install -y wrk)")
	}
	secs, rounds := envPositive("PEP_BENCH_SECONDS", 3), envPositive("PEP_BENCH_ROUNDS", 5)
	withStd := os.Getenv("PEP_BENCH_STDLIB") != "0"
	cpus := []int{1}
	if v := os.Getenv("PEP_BENCH_CPUS"); v != "" {
		cpus = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("PEP_BENCH_CPUS %q: want a comma-separated list of CPU counts", v)
			}
			cpus = append(cpus, n)
		}
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	// Content-Length, as an image from an origin or CDN has: without it
	// Squid stores and serves the object chunked.
	pages := map[string]page{"img.cdn.test/logo.png": {ctype: "image/png", body: strings.Repeat("x", 10<<10),
		header: map[string]string{"Content-Length": strconv.Itoa(10 << 10)}}}
	ns := startDNS(b, siteRecords)
	o := startOrigin(b, originIP, pages)
	port := o.Addr.Port()
	for _, pp := range []bool{true, false} {
		name := map[bool]string{true: "proxy-protocol", false: "xff"}[pp]
		b.Run(name, func(b *testing.B) {
			sq, plain := startSquidPlainPort(b, ns, port, pp)
			opts := pepdOpts{squid: sq.Addr, proxyProtocol: pp, resolver: ns.Addr, mode: mode.URL,
				subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{port}}
			relay := startPepd(b, opts)
			fwd := startForwarder(b, plain, false)
			fwdRaw := startForwarder(b, plain, true)
			var haps []*haproxy
			for _, n := range cpus {
				h := startHAProxy(b, plain, n)
				if h == nil {
					b.Logf("%s: haproxy not installed (apt-get install -y haproxy): no haproxy rows", name)
					break
				}
				haps = append(haps, h)
			}
			// The VIP's HTTPS origin on the relay's pepd (ServeTLS), for
			// h2load: HTTP/2 over TLS through the standard library path.
			var front *tlsFront
			_, errH2 := exec.LookPath("h2load")
			if errH2 == nil {
				front = startTLSFront(b, relay)
			} else {
				b.Logf("%s: h2load not installed (apt-get install -y nghttp2-client): no h2 rows", name)
			}
			opts.stdlib = true
			std := startPepd(b, opts)
			abs := "http://img.cdn.test:" + o.Port + "/logo.png"
			// HAProxy refuses an absolute URI whose authority differs from
			// Host (RFC 9112 section 3.2.2), so its phases send the
			// authority as Host, as a browser talking to a proxy does.
			absHost := "img.cdn.test:" + o.Port
			vipPath := "/img.cdn.test:" + o.Port + "/logo.png"
			// Warm: fill the cache and pepd's resolver cache.
			runWrk(b, plain, abs, "", time.Second, 2)
			runWrk(b, relay.Addr, vipPath, testVIP.String(), time.Second, 2)
			for _, h := range haps {
				runWrk(b, h.HTTP, abs, absHost, time.Second, 2)
			}
			if withStd {
				runWrk(b, std.Addr, vipPath, testVIP.String(), time.Second, 2)
			}
			h2URL := ""
			if front != nil {
				// The front's address is the VIP for pepd (a connection's
				// local address counts as the VIP, decide.isVIPHost).
				h2URL = "https://" + front.Addr + vipPath
				runH2load(b, h2URL, time.Second, 2, 1)
			}
			d := time.Duration(secs) * time.Second
			self := os.Getpid()
			squidPid := sq.Cmd.Process.Pid // squid -N is one process (no master/kid), pinger disabled
			type phase struct {
				n          int
				squid, pep time.Duration
			}
			// run counts the CPU of Squid and of the proxy process pid (this
			// process for pepd and the Go forwarder, haproxy for its rows).
			run := func(pid int, addr, path, host string) phase {
				s0, p0 := procCPU(b, squidPid), procCPU(b, pid)
				n := runWrk(b, addr, path, host, d, 8)
				return phase{n, procCPU(b, squidPid) - s0, procCPU(b, pid) - p0}
			}
			runH2 := func(streams int) phase {
				s0, p0 := procCPU(b, squidPid), procCPU(b, self)
				n := runH2load(b, h2URL, d, 8, streams)
				return phase{n, procCPU(b, squidPid) - s0, procCPU(b, self) - p0}
			}
			us := func(t time.Duration, n int) float64 { return float64(t) / float64(n) / 1e3 }
			type result struct{ alone, squid, pep, ratio, rate float64 }
			// Results by label, in the order of first appearance.
			res := map[string][]result{}
			var labels []string
			add := func(label string, r result) {
				if _, ok := res[label]; !ok {
					labels = append(labels, label)
				}
				res[label] = append(res[label], r)
			}
			measure := func(alone phase, ph phase) result {
				a := us(alone.squid, alone.n)
				sqd, pep := us(ph.squid, ph.n), us(ph.pep, ph.n)
				return result{a, sqd, pep, (sqd + pep) / a, float64(ph.n) / d.Seconds()}
			}
			b.ResetTimer()
			for range rounds {
				alone := run(self, plain, abs, "")
				for i, n := range cpus {
					runtime.GOMAXPROCS(n)
					p := fmt.Sprintf("-p%d", n)
					add("relay"+p, measure(alone, run(self, relay.Addr, vipPath, testVIP.String())))
					add("forwarder"+p, measure(alone, run(self, fwd, abs, "")))
					add("forwarder-raw"+p, measure(alone, run(self, fwdRaw, abs, "")))
					if withStd {
						add("stdlib"+p, measure(alone, run(self, std.Addr, vipPath, testVIP.String())))
					}
					if h2URL != "" {
						// 8 connections, 1 stream each (wrk's load), and 8
						// with 10 streams each (a browser's multiplexing).
						add("h2-tls-m1"+p, measure(alone, runH2(1)))
						add("h2-tls-m10"+p, measure(alone, runH2(10)))
					}
					if i < len(haps) {
						t := fmt.Sprintf("-t%d", n)
						add("haproxy-http"+t, measure(alone, run(haps[i].pid, haps[i].HTTP, abs, absHost)))
						add("haproxy-tcp"+t, measure(alone, run(haps[i].pid, haps[i].TCP, abs, "")))
					}
				}
			}
			b.StopTimer()
			report := func(label string, rs []result) {
				if len(rs) == 0 {
					return
				}
				slices.SortFunc(rs, func(x, y result) int { return cmp.Compare(x.ratio, y.ratio) })
				m := rs[len(rs)/2]
				b.ReportMetric(m.ratio, label+"-ratio")
				b.ReportMetric(m.pep, label+"-proxy-µs/req")
				b.ReportMetric(m.squid, label+"-squid-µs/req")
				b.ReportMetric(m.alone, label+"-squid-alone-µs/req")
				b.Logf("%s %s: median ratio %.2f (min %.2f, max %.2f over %d rounds); median round: squid alone %.1f µs/req; squid %.1f + proxy %.1f µs/req at %.0f req/s",
					name, label, m.ratio, rs[0].ratio, rs[len(rs)-1].ratio, len(rs), m.alone, m.squid, m.pep, m.rate)
			}
			for _, l := range labels {
				report(l, res[l])
			}
			b.Logf("%s upstream connections the relay opened: %v (8 per wrk run)", name, testutilValue(relay.M.upstreamConns))
		})
	}
}

// h2loadRun is what one h2load run measured.
type h2loadRun struct {
	n   int           // requests that succeeded
	p99 time.Duration // 99th percentile of the request times (--log-file)
}

// runH2loadP99 runs h2load with conns connections and streams
// concurrent requests on each (HTTP/2 streams, or with h1 HTTP/1.1
// requests, -m1 only) for d against url, reading each request's time from
// its --log-file; any failed request fails b.
func runH2loadP99(b *testing.B, url string, d time.Duration, conns, streams int, h1 bool) h2loadRun {
	log := filepath.Join(b.TempDir(), "h2load.log")
	args := []string{"-c" + strconv.Itoa(conns), "-m" + strconv.Itoa(streams), "-D", strconv.Itoa(int(d.Seconds())), "--log-file=" + log}
	if h1 {
		args = append(args, "--h1")
	}
	out, err := exec.Command("h2load", append(args, url)...).CombinedOutput()
	if err != nil {
		b.Fatalf("h2load %v: %v\n%s", args, err, out)
	}
	m := h2loadRE.FindStringSubmatch(string(out))
	if m == nil {
		b.Fatalf("h2load output: %s", out)
	}
	if m[3] != "0" || m[4] != "0" || m[2] == "0" {
		b.Fatalf("h2load saw failures:\n%s", out)
	}
	n, _ := strconv.Atoi(m[2])
	raw, err := os.ReadFile(log)
	if err != nil {
		b.Fatal(err)
	}
	var times []time.Duration
	for line := range strings.SplitSeq(strings.TrimSpace(string(raw)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 3 {
			continue
		}
		if f[1] != "200" {
			b.Fatalf("h2load: status %s in %q", f[1], line)
		}
		us, err := strconv.Atoi(f[2])
		if err != nil {
			b.Fatalf("h2load log line %q", line)
		}
		times = append(times, time.Duration(us)*time.Microsecond)
	}
	if len(times) == 0 {
		b.Fatalf("h2load log %s is empty", log)
	}
	slices.Sort(times)
	return h2loadRun{n: n, p99: times[len(times)*99/100]}
}

// perfEvents are the system calls PEP_BENCH_PERF counts.
const perfEvents = "syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_futex"

// perfPerRequest formats perf stat's CSV output (-x,) as counts per
// request, n requests.
func perfPerRequest(out string, n int) string {
	var parts []string
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 || !strings.HasPrefix(f[2], "syscalls:sys_enter_") {
			continue
		}
		c, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", strings.TrimPrefix(f[2], "syscalls:sys_enter_"), c/float64(n)))
	}
	if parts == nil {
		return "perf gave no counts: " + out
	}
	return strings.Join(parts, ", ")
}

// BenchmarkH2CPU measures pepd's CPU time per cached request over HTTP/2
// with TLS to the VIP's HTTPS origin (Server.ServeTLS, Go's TLS and HTTP/2
// servers, Proxy.ServeHTTP) against the HTTP/1.1 relay (issue 25's
// acceptance: at most 1.5 times the relay's), on the same Squid hits (a
// 10 KB image in Squid's memory cache, PROXY protocol), in one run with
// one load generator, h2load (Debian nghttp2-client), for every phase.
// Each phase has 8 requests in flight, on connections kept for the whole
// phase (one TLS handshake per connection per phase):
//
//   - relay-h1: HTTP/1.1 to pepd's plain listener (the relay), 8
//     connections (h2load --h1 -c8 -m1);
//   - tls-h1: HTTP/1.1 over TLS to the VIP (--h1, 8 connections);
//   - h2-c8m1: HTTP/2 over TLS, 8 connections with 1 stream each;
//   - h2-c1m8: HTTP/2 over TLS, 1 connection with 8 streams (a browser's
//     shape: one connection per origin, its requests multiplexed);
//   - h2-c1m8-unbatched: the same with the TLS connections' writes not
//     batched (Server.unbatched; batchConn's peer in the same run);
//   - haproxy-h1, haproxy-tls-h1, haproxy-h2-c1m8: the C peer,
//     HAProxy in pepd's place (startHAProxyVIP; left out when haproxy is
//     not installed), plain HTTP/1.1, HTTP/1.1 over TLS and HTTP/2 over
//     TLS in the shapes above, haproxy's CPU counted; each is also given
//     against haproxy-h1, and h2-c1m8 against haproxy-h2-c1m8 round by
//     round (metric h2-c1m8-vs-haproxy).
//
// pepd runs in this process with GOMAXPROCS 1 (pepd's procs setting on an
// appliance where Squid has the other core); the CPU counted is this
// process's (cputime, /proc) over the phase, divided by the requests
// h2load completed. A round runs each phase once; the median round is
// reported per phase, as µs/req (and apart as user and system time: the
// kernel's share, system calls and the TCP stack, against user space's,
// parsing, TLS and the Go runtime), the ratio to relay-h1 in the same
// round, and h2load's 99th percentile request time. Run (make bench-h2):
//
//	go test -run '^$' -bench H2CPU -benchtime 1x ./internal/httpproxy/
//
// PEP_BENCH_SECONDS sets each phase's length (default 3), PEP_BENCH_ROUNDS
// the rounds (default 5), PEP_BENCH_PHASES the phases after relay-h1
// (comma-separated labels; default all). -cpuprofile profiles every phase
// together. PEP_BENCH_PERF=1 counts the proxy's system calls per request
// (read, write, recvfrom, sendto, epoll_wait, epoll_ctl, futex; perf stat
// on the phase's process for each
// phase's length, root): where the difference in CPU goes.
func BenchmarkH2CPU(b *testing.B) {
	if _, err := exec.LookPath("h2load"); err != nil {
		b.Skip("h2load not installed (apt-get install -y nghttp2-client)")
	}
	secs, rounds := envPositive("PEP_BENCH_SECONDS", 3), envPositive("PEP_BENCH_ROUNDS", 5)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	pages := map[string]page{"img.cdn.test/logo.png": {ctype: "image/png", body: strings.Repeat("x", 10<<10),
		header: map[string]string{"Content-Length": strconv.Itoa(10 << 10)}}}
	ns := startDNS(b, siteRecords)
	o := startOrigin(b, originIP, pages)
	port := o.Addr.Port()
	// PROXY protocol for pepd, the plain port for HAProxy.
	sq, plain := startSquidPlainPort(b, ns, port, true)
	// pepd logs errors only: debug lines per request would be measured,
	// and the warnings of requests h2load cancels when a phase ends
	// ("context canceled") would take the lines a benchmark may print.
	log := slog.New(slog.NewTextHandler(tWriter{b}, &slog.HandlerOptions{Level: slog.LevelError}))
	p := startPepd(b, pepdOpts{squid: sq.Addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.URL, log: log,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{port}})
	front := startTLSFront(b, p)
	vipPath := "/img.cdn.test:" + o.Port + "/logo.png"
	// The listeners' own addresses are the VIP for pepd (decide.isVIPHost).
	relayURL, tlsURL := "http://"+p.Addr+vipPath, "https://"+front.Addr+vipPath
	type phaseDef struct {
		label          string
		url            string
		conns, streams int
		h1             bool
		unbatched      bool // TLS connections without batchConn (the peer of the batched writes)
		pid            int  // the process whose CPU is counted: 0 for this one (pepd)
	}
	phases := []phaseDef{
		{"relay-h1", relayURL, 8, 1, true, false, 0},
		{"tls-h1", tlsURL, 8, 1, true, false, 0},
		{"h2-c8m1", tlsURL, 8, 1, false, false, 0},
		{"h2-c1m8", tlsURL, 1, 8, false, false, 0},
		{"h2-c1m8-unbatched", tlsURL, 1, 8, false, true, 0},
	}
	// The C peer: HAProxy in pepd's place, the same three shapes against
	// its own plain HTTP/1.1 frontend (the ratio's second base).
	if hv := startHAProxyVIP(b, plain, false, front.CA, "img.cdn.test:"+o.Port); hv != nil {
		plainURL, hTLSURL := "http://"+hv.Plain+"/logo.png", "https://"+hv.TLS+"/logo.png"
		phases = append(phases,
			phaseDef{"haproxy-h1", plainURL, 8, 1, true, false, hv.pid},
			phaseDef{"haproxy-tls-h1", hTLSURL, 8, 1, true, false, hv.pid},
			phaseDef{"haproxy-h2-c1m8", hTLSURL, 1, 8, false, false, hv.pid})
	} else {
		b.Log("haproxy not installed (apt-get install -y haproxy): no haproxy phases")
	}
	if v := os.Getenv("PEP_BENCH_PHASES"); v != "" {
		want := strings.Split(v, ",")
		keep := phases[:1]
		for _, ph := range phases[1:] {
			// A haproxy phase brings its base, haproxy-h1.
			peer := ph.label == "haproxy-h1" && slices.ContainsFunc(want, func(l string) bool { return strings.HasPrefix(l, "haproxy-") })
			if peer || slices.Contains(want, ph.label) {
				keep = append(keep, ph)
			}
		}
		phases = keep
	}
	// Warm: Squid's cache, pepd's resolver cache, the upstream pool.
	for _, ph := range phases {
		p.Srv.unbatched.Store(ph.unbatched)
		runH2loadP99(b, ph.url, time.Second, ph.conns, ph.streams, ph.h1)
	}
	d := time.Duration(secs) * time.Second
	self, squidPid := os.Getpid(), sq.Cmd.Process.Pid
	type result struct {
		cpu, user, sys, squid, ratio, peerRatio, rate float64
		p99                                           time.Duration
	}
	res := map[string][]result{}
	syscalls := map[string]string{}
	b.ResetTimer()
	for range rounds {
		var relay, peerBase float64
		for _, ph := range phases {
			pid := self
			if ph.pid != 0 {
				pid = ph.pid
			}
			var perf *exec.Cmd
			var perfOut strings.Builder
			if os.Getenv("PEP_BENCH_PERF") == "1" {
				perf = exec.Command("perf", "stat", "-x,", "-e", perfEvents, "-p", strconv.Itoa(pid), "--", "sleep", strconv.Itoa(secs))
				perf.Stderr = &perfOut
				if err := perf.Start(); err != nil {
					b.Fatalf("perf: %v", err)
				}
			}
			p.Srv.unbatched.Store(ph.unbatched)
			s0 := procCPU(b, squidPid)
			u0, k0 := procSplit(b, pid)
			r := runH2loadP99(b, ph.url, d, ph.conns, ph.streams, ph.h1)
			s1 := procCPU(b, squidPid)
			u1, k1 := procSplit(b, pid)
			p0, p1 := u0+k0, u1+k1
			if perf != nil {
				perf.Wait()
				syscalls[ph.label] = perfPerRequest(perfOut.String(), r.n) // the last round's
			}
			cpu := float64(p1-p0) / float64(r.n) / 1e3 // pepd's, or haproxy's in its phases
			switch ph.label {
			case "relay-h1":
				relay = cpu
			case "haproxy-h1":
				peerBase = cpu
			}
			peerRatio := 0.0
			if ph.pid != 0 {
				peerRatio = cpu / peerBase
			}
			perReq := func(t time.Duration) float64 { return float64(t) / float64(r.n) / 1e3 }
			res[ph.label] = append(res[ph.label], result{cpu, perReq(u1 - u0), perReq(k1 - k0), perReq(s1 - s0), cpu / relay, peerRatio, float64(r.n) / d.Seconds(), r.p99})
		}
	}
	b.StopTimer()
	// pepd's HTTP/2 against HAProxy's on the same hits, round by round
	// (before the rounds are sorted), in h2-c1m8's line.
	vsPeer := ""
	if ps, hs := res["h2-c1m8"], res["haproxy-h2-c1m8"]; len(hs) > 0 && len(ps) == len(hs) {
		rr := make([]float64, len(ps))
		for i := range ps {
			rr[i] = ps[i].cpu / hs[i].cpu
		}
		med, lo, hi := medianSpread(rr)
		b.ReportMetric(med, "h2-c1m8-vs-haproxy")
		vsPeer = fmt.Sprintf("; x%.2f haproxy-h2-c1m8, min x%.2f, max x%.2f", med, lo, hi)
	}
	for _, ph := range phases {
		rs := res[ph.label]
		slices.SortFunc(rs, func(x, y result) int { return cmp.Compare(x.ratio, y.ratio) })
		m := rs[len(rs)/2]
		b.ReportMetric(m.cpu, ph.label+"-cpu-µs/req")
		b.ReportMetric(m.ratio, ph.label+"-ratio")
		b.ReportMetric(float64(m.p99.Microseconds()), ph.label+"-p99-µs")
		who, peer := "pepd", ""
		if ph.pid != 0 {
			// The peer against its own plain HTTP/1.1, median of the rounds.
			who = "haproxy"
			prs := make([]float64, len(rs))
			for i, r := range rs {
				prs[i] = r.peerRatio
			}
			med, lo, hi := medianSpread(prs)
			b.ReportMetric(med, ph.label+"-peer-ratio")
			peer = fmt.Sprintf("; x%.2f haproxy-h1, min x%.2f, max x%.2f", med, lo, hi)
		}
		if ph.label == "h2-c1m8" {
			peer = vsPeer
		}
		sc := ""
		if v := syscalls[ph.label]; v != "" {
			sc = "; system calls per request (last round): " + v
		}
		// One line per phase: a benchmark's log keeps 10 lines.
		b.Logf("%-17s %-7s %6.1f µs/req (x%.2f relay-h1; min x%.2f, max x%.2f over %d rounds%s; user %.1f, system %.1f), squid %5.1f µs/req, %6.0f req/s, p99 %v%s",
			ph.label, who, m.cpu, m.ratio, rs[0].ratio, rs[len(rs)-1].ratio, len(rs), peer, m.user, m.sys, m.squid, m.rate, m.p99, sc)
	}
	b.Logf("upstream connections to squid opened: %v", testutilValue(p.M.upstreamConns))
}

// medianSpread sorts xs (one value per round, at least one) and returns
// its median (the upper one of an even count, as the rounds' reports
// take), minimum and maximum.
func medianSpread(xs []float64) (med, lo, hi float64) {
	slices.Sort(xs)
	return xs[len(xs)/2], xs[0], xs[len(xs)-1]
}

// startSquidPlainPort starts siteStack's Squid for the origin on port
// (PROXY protocol on its main port when pp) with a second, plain port,
// and returns it and that port's address: the peers in the benchmarks
// (HAProxy, the byte forwarders, Squid alone) use the plain port; HAProxy
// makes connections that carry a PROXY header private and opened one to
// Squid per request (27,470 for 27,477 requests in a 2 s phase), which
// doubled Squid's cost and HAProxy's own.
func startSquidPlainPort(b *testing.B, ns *dnsServer, port uint16, pp bool) (*squid, string) {
	sc := siteSquidConf(b, ns, siteRecords, port)
	sc.ProxyProtocol = pp
	plain := "127.0.0.1:" + freePort(b)
	return startSquidExtra(b, sc, "http_port "+plain+"\n"), plain
}

// envPositive is the environment variable name as a positive integer, def
// when it is unset or not one (the benchmarks' PEP_BENCH_* settings).
func envPositive(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
