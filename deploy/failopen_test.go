package deploy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pep/internal/squid"
	"pep/internal/testenv"
)

// The fail-open test (issue 6 acceptance): pages load in a loop from the
// client namespace through the gateway (the shipped ruleset, the real pepd
// under an emulated systemd unit with the shipped watchdog settings scaled
// down, a real Squid) to the origin. Then:
//
//   - kill -9 pepd: page loads that start after the kill succeed within 2 s
//     (TPROXY finds no listener and forwards them to the origin), and once
//     the unit has restarted pepd they go through it again;
//   - SIGSTOP pepd: loads hang until the watchdog kills it; they succeed
//     again within the watchdog interval (plus one load's duration).
//
// A page load is the page and its objects over fresh connections (a new
// page load's first requests are new connections too), each request with a
// 1 s timeout so that the loop goes on past a hung pepd. The origin says
// whom it saw, so a load is known to have gone direct (the subscriber's
// address) or through pepd and Squid (the gateway's upstream address).
//
// Recovery times are logged as a table; PEP_FAILOPEN_ROUNDS sets how many
// kills of each kind (default 3).

const (
	failopenWatchdog = 2 * time.Second // WatchdogSec, scaled down from 5 s for test time
	loadTimeout      = time.Second     // per request
	pageObjects      = 4
	gwUpstream       = "198.18.1.1" // what the origin sees for loads through Squid
)

func TestFailOpen(t *testing.T) {
	needRoot(t)
	for _, b := range []string{"squid"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("needs %s (apt-get install -y squid; make deps)", b)
		}
	}
	rounds := 3
	if s := os.Getenv("PEP_FAILOPEN_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	standin := os.Getenv("PEP_FAILOPEN_STANDIN") != ""
	if _, err := os.Stat("../cmd/pepd"); err != nil && !standin {
		t.Fatalf("cmd/pepd not found (%v); PEP_FAILOPEN_STANDIN=1 checks the harness alone with a stand-in proxy", err)
	}

	tp := newTopo(t)
	tp.serveOrigin(t, pageHandler())
	serveDNS(t, tp.origin, "udp", originDNS+":53", originHTTP)
	tp.loadRuleset(t, Ruleset)
	startSquid(t, tp.gw)

	dir := t.TempDir()
	cfg := filepath.Join(dir, "pepd.yaml")
	writePepdConfig(t, cfg)
	argv := []string{"ip", "netns", "exec", tp.gw.name}
	var env []string
	if standin {
		self, _ := os.Executable()
		argv, env = append(argv, self), []string{"PEP6_HELPER=standin"}
	} else {
		argv = append(argv, buildBinary(t, t.TempDir(), "./cmd/pepd"), "-config", cfg)
	}
	testenv.Log(t)
	lp := startLoader(tp)
	defer lp.stop()

	type result struct {
		fault               string
		firstOK, throughPep time.Duration
		failed              int
	}
	var results []result
	for _, fault := range []string{"kill -9", "SIGSTOP"} {
		// The watchdog fault (SIGSTOP) needs a short WatchdogSec; a kill
		// does not, and under a short one a loaded machine's late health
		// check would kill a healthy pepd in the middle of the kill
		// rounds' bounds. So each fault gets a unit of its own.
		watchdog := failopenWatchdog
		if fault == "kill -9" {
			watchdog = testenv.Scale(30 * time.Second)
		}
		u := newUnit(t, watchdog, 3*time.Second, 200*time.Millisecond, env, argv...)
		u.run()
		start := time.Now()
		if _, err := u.waitReady(testenv.Scale(30 * time.Second)); err != nil {
			u.stop()
			t.Fatal(err)
		}
		if err := lp.waitViaAfter("pep", start, testenv.Scale(10*time.Second)); err != nil {
			u.stop()
			t.Fatalf("%s: before any fault: %v (pepd does not take the TPROXY-steered loads)", fault, err)
		}
		for r := 0; r < rounds; r++ {
			pid := u.mainPID()
			t0 := time.Now()
			sig := syscall.SIGKILL
			if fault == "SIGSTOP" {
				sig = syscall.SIGSTOP
			}
			if err := syscall.Kill(pid, sig); err != nil {
				u.stop()
				t.Fatal(err)
			}
			if _, err := u.waitReady(testenv.Scale(30 * time.Second)); err != nil {
				u.stop()
				t.Fatalf("%s: %v", fault, err)
			}
			if err := lp.waitViaAfter("pep", t0, testenv.Scale(10*time.Second)); err != nil {
				u.stop()
				t.Fatalf("%s: loads do not go through the restarted pepd: %v", fault, err)
			}
			res := result{fault: fault}
			loads := lp.since(t0)
			for _, l := range lp.endedAfter(t0) {
				if !l.ok {
					res.failed++ // in flight at the fault, or started after it
				}
			}
			for _, l := range loads {
				if l.ok && res.firstOK == 0 {
					res.firstOK = l.end.Sub(t0)
				}
				if l.ok && l.via == "pep" && res.throughPep == 0 {
					res.throughPep = l.end.Sub(t0)
				}
			}
			// The bounds: a kill is failed open at once (TPROXY finds no
			// listener), a stop within WatchdogSec plus one load; the
			// load's part is scaled for a loaded machine, WatchdogSec is
			// the behaviour under test and is not.
			limit := testenv.Scale(2 * time.Second)
			if fault == "SIGSTOP" {
				limit = failopenWatchdog + testenv.Scale(loadTimeout)
			}
			if res.firstOK == 0 || res.firstOK > limit {
				t.Errorf("%s round %d: first good load %s after the fault, want within %s; loads %v", fault, r, res.firstOK, limit, loads)
			}
			// Once recovered, loads keep succeeding.
			for _, l := range loads {
				if !l.ok && l.start.After(t0.Add(limit)) {
					t.Errorf("%s round %d: a load started %s after the fault failed: %s", fault, r, l.start.Sub(t0), l.err)
				}
			}
			results = append(results, res)
			t.Logf("%s round %d: first good load after %s, through pepd again after %s, %d loads failed",
				fault, r, res.firstOK.Round(time.Millisecond), res.throughPep.Round(time.Millisecond), res.failed)
		}
		// Between the units loads go direct: pepd is stopped (SIGTERM).
		u.stop()
	}

	var tab strings.Builder
	fmt.Fprintf(&tab, "\n| fault | rounds | first good page load after the fault (median, min-max) | through pepd again (median) | loads failed (median) |\n|---|---|---|---|---|\n")
	for _, fault := range []string{"kill -9", "SIGSTOP"} {
		var ok, pep []time.Duration
		var failed []int
		for _, r := range results {
			if r.fault == fault {
				ok, pep, failed = append(ok, r.firstOK), append(pep, r.throughPep), append(failed, r.failed)
			}
		}
		slices.Sort(ok)
		slices.Sort(pep)
		slices.Sort(failed)
		fmt.Fprintf(&tab, "| %s | %d | %s (%s-%s) | %s | %d |\n", fault, len(ok),
			ms(ok[len(ok)/2]), ms(ok[0]), ms(ok[len(ok)-1]), ms(pep[len(pep)/2]), failed[len(failed)/2])
	}
	t.Logf("recovery (WatchdogSec=%s for SIGSTOP, %s for kill -9, RestartSec=200ms, %d objects per page, %s request timeout):%s",
		failopenWatchdog, testenv.Scale(30*time.Second), pageObjects, loadTimeout, tab.String())
}

func ms(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }

// pageHandler serves "/" (a page naming its objects) and "/o1".."/oN", each
// answer uncacheable and saying whom the origin saw.
func pageHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, originSuffix+host)
	})
}

// load is one page load.
type load struct {
	start, end time.Time
	ok         bool
	via        string // "pep", "direct" or "" (failed)
	err        string
}

func (l load) String() string {
	if l.ok {
		return fmt.Sprintf("{%s ok %s}", l.start.Format("05.000"), l.via)
	}
	return fmt.Sprintf("{%s failed %s}", l.start.Format("05.000"), l.err)
}

type loader struct {
	tp    *topo
	mu    sync.Mutex
	loads []load
	cond  *sync.Cond
	quit  chan struct{}
	done  chan struct{}
}

func startLoader(tp *topo) *loader {
	lp := &loader{tp: tp, quit: make(chan struct{}), done: make(chan struct{})}
	lp.cond = sync.NewCond(&lp.mu)
	go func() {
		defer close(lp.done)
		for {
			select {
			case <-lp.quit:
				return
			default:
			}
			l := lp.pageLoad()
			lp.mu.Lock()
			lp.loads = append(lp.loads, l)
			lp.cond.Broadcast()
			lp.mu.Unlock()
		}
	}()
	return lp
}

func (lp *loader) stop() { close(lp.quit); <-lp.done }

// pageLoad fetches the page, then its objects two at a time (as a browser
// does on a handful of connections), each over a new connection.
func (lp *loader) pageLoad() load {
	l := load{start: time.Now()}
	c := lp.tp.clientHTTP(loadTimeout)
	base := "http://" + originHTTP
	urls := []string{base + "/"}
	for i := 1; i <= pageObjects; i++ {
		urls = append(urls, fmt.Sprintf("%s/o%d", base, i))
	}
	seen := map[string]bool{}
	var mu sync.Mutex
	var firstErr error
	fetch := func(u string) {
		body, err := get(c, u)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		seen[strings.TrimPrefix(body, originSuffix)] = true
	}
	fetch(urls[0])
	if firstErr == nil {
		var wg sync.WaitGroup
		for _, group := range [][]string{urls[1:3], urls[3:]} {
			for _, u := range group {
				wg.Add(1)
				go func() { defer wg.Done(); fetch(u) }()
			}
			wg.Wait()
		}
	}
	l.end = time.Now()
	if firstErr != nil {
		l.err = firstErr.Error()
		return l
	}
	l.ok = true
	switch {
	case (seen[gwUpstream] || seen[gwSubAddr]) && !seen[clientAddr]:
		l.via = "pep"
	case seen[clientAddr] && !seen[gwUpstream]:
		l.via = "direct"
	default:
		l.via = "mixed"
	}
	return l
}

// since returns the loads that started at or after t0 and have ended.
func (lp *loader) since(t0 time.Time) []load {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	var out []load
	for _, l := range lp.loads {
		if !l.start.Before(t0) {
			out = append(out, l)
		}
	}
	return out
}

// endedAfter returns the loads that ended after t0.
func (lp *loader) endedAfter(t0 time.Time) []load {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	var out []load
	for _, l := range lp.loads {
		if l.end.After(t0) {
			out = append(out, l)
		}
	}
	return out
}

// waitViaAfter waits for a load that started after t0 and went via via.
func (lp *loader) waitViaAfter(via string, t0 time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() { lp.mu.Lock(); lp.cond.Broadcast(); lp.mu.Unlock() })
	defer timer.Stop()
	lp.mu.Lock()
	defer lp.mu.Unlock()
	for {
		for _, l := range lp.loads {
			if !l.start.Before(t0) && l.ok && l.via == via {
				return nil
			}
		}
		if time.Now().After(deadline) {
			var tail []load
			for _, l := range lp.loads {
				if !l.start.Before(t0) {
					tail = append(tail, l)
				}
			}
			return fmt.Errorf("no load via %s in %s; loads %v", via, timeout, tail)
		}
		lp.cond.Wait()
	}
}

// startSquid runs a real Squid in the gateway namespace with
// configs/squid.conf rendered for the test (small cache in a temporary
// folder) and waits until its port accepts.
func startSquid(t *testing.T, gw *netNS) {
	t.Helper()
	startSquidWith(t, gw, fmt.Sprintf("pepfailopen%d", os.Getpid()), nil)
}

// startSquidWith is startSquid with a Squid service name of the caller's
// (unique per Squid: /dev/shm is shared by every namespace) and mod, when
// not nil, applied to the configuration before rendering. It returns the
// log folder (access.log, cache.log).
func startSquidWith(t *testing.T, gw *netNS, service string, mod func(*squid.Conf)) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pep6squid")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	tmpl, _, err := squid.ReadTemplate()
	if err != nil {
		t.Fatal(err)
	}
	c := squid.DefaultConf(mustAddr(testVIP))
	c.Resolvers = []string{originDNS}
	c.CacheDir, c.CacheDirMB, c.CacheMemMB = filepath.Join(dir, "cache"), 16, 8
	c.LogDir, c.PidFile = filepath.Join(dir, "log"), filepath.Join(dir, "squid.pid")
	c.ShutdownSeconds = 0
	if mod != nil {
		mod(&c)
	}
	conf := filepath.Join(dir, "squid.conf")
	if err := squid.WriteConf(conf, tmpl, c, ""); err != nil {
		t.Fatal(err)
	}
	if err := squid.MakeDirs(c, false); err != nil {
		t.Fatal(err)
	}
	// A service name of its own: Squid names its shared memory segments
	// (/dev/shm, shared by every namespace) after it.
	gw.exec(t, append([]string{"squid"}, squid.InitArgs(service, conf)...)...)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := gw.command(ctx, append([]string{"squid"}, squid.RunArgs(service, conf)...)...)
	cmd.Stdout, cmd.Stderr = tlogWriter{t, "squid"}, tlogWriter{t, "squid"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cancel()
			<-done
		}
		cancel()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		var conn net.Conn
		err := gw.do(func() (err error) { conn, err = net.DialTimeout("tcp", c.Listen, time.Second); return err })
		if err == nil {
			conn.Close()
			return c.LogDir
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(c.LogDir, "cache.log"))
			t.Fatalf("squid does not accept on %s: %v\n%s", c.Listen, err, b)
		}
		time.Sleep(50 * time.Millisecond) // Squid has no readiness signal
	}
}

// writePepdConfig writes pepd's configuration for the fail-open test: the
// shipped ports (configs/pepd.yaml), mode off, the test's resolver.
func writePepdConfig(t *testing.T, path string) {
	t.Helper()
	writePepdConfigAdmin(t, path, "127.0.0.1:9090")
}

// writePepdConfigAdmin is writePepdConfig with the admin API on admin.
func writePepdConfigAdmin(t *testing.T, path, admin string) {
	t.Helper()
	y := fmt.Sprintf(`mode: off
vip: %s
subscribers: [198.18.0.0/24]
resolvers: ["%s:53"]
squid: 127.0.0.1:3128
squid_proxy_protocol: true
listen:
  http: ":3129"
  tproxy: ":%d"
  dns: ":%d"
  admin: "%s"
`, testVIP, originDNS, tproxyPort, dnsPort, admin)
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
}
