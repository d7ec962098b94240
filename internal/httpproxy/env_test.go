package httpproxy

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"pep/internal/cachepolicy"
	"pep/internal/guard"
	"pep/internal/mode"
	"pep/internal/optimize"
	"pep/internal/rewrite"
	pepsquid "pep/internal/squid"
	"pep/internal/squid/squidtest"
	"pep/internal/testenv"
)

// testLogger returns a logger writing to t.

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// dnsServer is a real DNS server (miekg/dns) answering A queries from a
// fixed table; everything else gets an empty NOERROR answer, unknown names
// NXDOMAIN.
type dnsServer struct {
	Addr string // host:port
	IP   string
	udp  *dns.Server
	tcp  *dns.Server
}

// startDNS starts a DNS server for records (name -> IPv4). As root it
// listens on port 53 of a random 127/8 address (Squid's dns_nameservers
// takes no port); otherwise on an ephemeral port of 127.0.0.1.
func startDNS(t testing.TB, records map[string]string) *dnsServer {
	t.Helper()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		name := strings.ToLower(strings.TrimSuffix(q.Question[0].Name, "."))
		ip, ok := records[name]
		if !ok {
			m.Rcode = dns.RcodeNameError
		} else if q.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.ParseIP(ip).To4()})
		}
		w.WriteMsg(m)
	})
	ip, port := "127.0.0.1", "0"
	if os.Geteuid() == 0 {
		b := make([]byte, 2)
		rand.Read(b)
		ip, port = fmt.Sprintf("127.%d.%d.53", 100+b[0]%100, b[1]), "53"
	}
	pc, l, err := testenv.ListenDNS(ip, port)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ = net.SplitHostPort(pc.LocalAddr().String())
	s := &dnsServer{Addr: net.JoinHostPort(ip, port), IP: ip}
	started := make(chan struct{}, 2)
	s.udp = &dns.Server{PacketConn: pc, Handler: h, NotifyStartedFunc: func() { started <- struct{}{} }}
	s.tcp = &dns.Server{Listener: l, Handler: h, NotifyStartedFunc: func() { started <- struct{}{} }}
	go s.udp.ActivateAndServe()
	go s.tcp.ActivateAndServe()
	<-started
	<-started
	t.Cleanup(func() { s.udp.Shutdown(); s.tcp.Shutdown() })
	return s
}

// origin is a Go web server with virtual hosts; it counts requests per
// Host+path.
type origin struct {
	Addr  netip.AddrPort
	Port  string
	mu    sync.Mutex
	hits  map[string]int
	last  map[string]http.Header // the request headers of the last request per key
	pages map[string]page        // Host without port + path -> page
}

type page struct {
	ctype, body string
	header      map[string]string
	delay       time.Duration // before the response head (requests overlap)
	wait        func()        // if set, called before the response head (after delay)
}

func startOrigin(t testing.TB, ip string, pages map[string]page) *origin {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	o := &origin{hits: map[string]int{}, last: map[string]http.Header{}, pages: pages}
	o.Addr = netip.MustParseAddrPort(l.Addr().String())
	o.Port = strconv.Itoa(int(o.Addr.Port()))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.Host)
		if host == "" {
			host = r.Host
		}
		key := host + r.URL.RequestURI()
		o.mu.Lock()
		o.hits[key]++
		o.last[key] = r.Header.Clone()
		o.mu.Unlock()
		p, ok := o.pages[key]
		if !ok {
			http.NotFound(w, r)
			return
		}
		time.Sleep(p.delay)
		if p.wait != nil {
			p.wait()
		}
		w.Header().Set("Content-Type", p.ctype)
		w.Header().Set("Cache-Control", "max-age=3600")
		for k, v := range p.header {
			w.Header().Set(k, v)
		}
		io.WriteString(w, strings.ReplaceAll(p.body, "PORT", o.Port))
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return o
}

func (o *origin) lastHeader(key string) http.Header {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last[key]
}

func (o *origin) hitCount(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hits[key]
}

// squid is a real Squid started from configs/squid.conf (squidtest.Start).
type squid = squidtest.Squid

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

// startSquid renders configs/squid.conf with c (Listen, CacheDir, LogDir,
// PidFile are filled in) and runs Squid in the foreground until the test
// ends. It skips the test if squid is not installed.
func startSquid(t testing.TB, c pepsquid.Conf) *squid {
	t.Helper()
	return startSquidExtra(t, c, "")
}

// startSquidExtra is startSquid with extra lines appended to the config.
func startSquidExtra(t testing.TB, c pepsquid.Conf, extra string) *squid {
	t.Helper()
	return startSquidSized(t, c, extra, 100, 32)
}

// startSquidSized is startSquidExtra with a cache_dir of dirMB and a
// cache_mem of memMB megabytes.
func startSquidSized(t testing.TB, c pepsquid.Conf, extra string, dirMB, memMB int) *squid {
	t.Helper()
	return squidtest.Start(t, c, extra, dirMB, memMB)
}

// startDaemon waits until cmd, already started, accepts on addr (30 s at
// most; failing t with logs() if it exits first) and stops it when t ends:
// SIGINT, then SIGKILL after 10 s.
func startDaemon(t testing.TB, name string, cmd *exec.Cmd, addr string, logs func() string) {
	t.Helper()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(testenv.Scale(30 * time.Second))
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		select {
		case err := <-exited:
			t.Fatalf("%s exited: %v\n%s", name, err, logs())
		default:
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not start listening on %s within 30s", name, addr)
		}
		time.Sleep(delay)
	}
}

// accessLogWith waits up to 5 s for want lines of Squid's access log that
// contain every one of subs and returns the lines that do (fewer than
// want after 5 s). Squid writes a transaction's line through stdio after
// the response's last byte, which the client may have read first: on a
// loaded machine the line comes later.
func accessLogWith(t testing.TB, s *squid, want int, subs ...string) []string {
	for deadline := time.Now().Add(testenv.Scale(5 * time.Second)); ; time.Sleep(20 * time.Millisecond) {
		var got []string
	lines:
		for _, l := range s.AccessLog(t) {
			for _, sub := range subs {
				if !strings.Contains(l, sub) {
					continue lines
				}
			}
			got = append(got, l)
		}
		if len(got) >= want || time.Now().After(deadline) {
			return got
		}
	}
}

// pepd is a Proxy and its Server on a loopback listener.
type pepd struct {
	Addr  string
	Proxy *Proxy
	Srv   *Server
	Mode  *mode.Switch
	M     *Metrics
}

type pepdOpts struct {
	squid         string
	proxyProtocol bool
	resolver      string
	mode          mode.Mode
	subscribers   []string
	allow         []string
	ports         []uint16
	hostMismatch  string
	limits        Limits
	listener      func(net.Listener) net.Listener // wraps the loopback listener (fake interception)
	stdlib        bool                            // serve with net/http only, no relay
	upTimeout     time.Duration                   // Options.UpstreamTimeout; zero: 10s, scaled (testenv)
	upIdle        time.Duration                   // Options.UpstreamIdle; zero: its default
	optimize      *optimize.Policy                // Options.Optimize
	cache         *cachepolicy.Policy             // Options.Cache
	hints         *Hints                          // Options.Hints
	log           *slog.Logger                    // nil: every line to t.Log (testLogger)
	origins       []string                        // rewrite.Config.Origins (https VIP origins)
	vipNames      []string                        // Options.VIPNames
	maxUpstream   int                             // Options.MaxUpstreamConns
}

var testVIP = netip.MustParseAddr("192.0.2.12")

func startPepd(t testing.TB, o pepdOpts) *pepd {
	t.Helper()
	var subs, allow []netip.Prefix
	for _, s := range o.subscribers {
		subs = append(subs, netip.MustParsePrefix(s))
	}
	for _, s := range o.allow {
		allow = append(allow, netip.MustParsePrefix(s))
	}
	if o.hostMismatch == "" {
		o.hostMismatch = "direct"
	}
	log := o.log
	if log == nil {
		log = testLogger(t)
	}
	rw, err := rewrite.New(testVIP.String(), rewrite.Config{Origins: o.origins}, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	sw := mode.NewSwitch(o.mode)
	p, err := New(Options{
		VIP: testVIP, VIPNames: o.vipNames, Squid: o.squid, SquidProxyProtocol: o.proxyProtocol, Mode: sw, Log: log, Metrics: m,
		UpstreamTimeout: cmp.Or(o.upTimeout, testenv.Scale(10*time.Second)), UpstreamIdle: o.upIdle, MaxUpstreamConns: o.maxUpstream, Optimize: o.optimize, Cache: o.cache, Hints: o.hints,
		Settings: Settings{
			Policy:       guard.New(guard.Options{Subscribers: subs, AllowedPorts: o.ports, Allow: allow, Self: []netip.Addr{testVIP}}),
			Resolver:     &Resolver{Servers: []string{o.resolver}, Timeout: time.Second},
			Rewriter:     rw,
			HostMismatch: o.hostMismatch,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if o.listener != nil {
		l = o.listener(l)
	}
	srv := NewServer(p, o.limits, log, m)
	srv.relayOff = o.stdlib
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
		p.Close()
	})
	return &pepd{Addr: addr, Proxy: p, Srv: srv, Mode: sw, M: m}
}

// client returns an HTTP client that sends every request to pepd (as a
// browser would after a VIP DNS answer or a VIP-form URL), from source
// address src.
func (p *pepd) client(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return &http.Client{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, p.Addr)
			},
			DisableCompression: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// raw sends a raw request on a new connection from src and returns the
// response (body read).
func (p *pepd) raw(t testing.TB, src, req string) (*http.Response, string) {
	t.Helper()
	c := p.dial(t, src)
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading response to %q: %v", req, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// dial connects to pepd from the address src, the connection's deadline
// 10 s away (scaled).
func (p *pepd) dial(t testing.TB, src string) net.Conn {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(testenv.Scale(10 * time.Second)))
	return c
}

// siteSquidConf is the Squid config most tests run: subscribers on
// 127.0.0.0/8, the origin's address and ports 80 and port allowed, the
// test DNS server as resolver (or, when it is not on port 53, where Squid

// siteStack starts the stack most pepd tests put pepd in front of: DNS
// with siteRecords, an origin at originIP with pages, and the site Squid
// (siteSquidConf) speaking the PROXY protocol to pepd.
func siteStack(t testing.TB, pages map[string]page) (*dnsServer, *origin, *squid) {
	t.Helper()
	ns := startDNS(t, siteRecords)
	o := startOrigin(t, originIP, pages)
	sc := siteSquidConf(t, ns, siteRecords, o.Addr.Port())
	sc.ProxyProtocol = true
	return ns, o, startSquid(t, sc)
}

// cannot reach it, a hosts file of records).
func siteSquidConf(t testing.TB, ns *dnsServer, records map[string]string, port uint16) pepsquid.Conf {
	t.Helper()
	sc := pepsquid.DefaultConf(testVIP)
	sc.Subscribers = []string{"127.0.0.0/8"}
	sc.AllowedPorts = []uint16{80, port}
	sc.AllowDst = []string{originIP + "/32"}
	sc.Resolvers = []string{ns.IP}
	if ns.Addr != ns.IP+":53" {
		sc.HostsFile = writeHosts(t, records)
	}
	return sc
}

// writeHosts writes an /etc/hosts style file for Squid's hosts_file.
func writeHosts(t testing.TB, records map[string]string) string {
	var sb strings.Builder
	for name, ip := range records {
		fmt.Fprintf(&sb, "%s %s\n", ip, name)
	}
	f := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(f, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(f), 0o755)
	return f
}

// testutilValue reads a counter's value.
func testutilValue(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }
