package deploy

import (
	"bytes"
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

	"pep/internal/cputime"
	"pep/internal/squid"
	"pep/internal/testenv"
)

// The scale-out tests (issue 14, docs/operations.md §6) build a gateway
// array in namespaces:
//
//	[sub j] eth0 198.18.0.(10+j) ─┐
//	                              ├ sub0 (bridge) 198.18.0.1 [dir] g_i 198.18.(20+i).1 ══ sub0 198.18.(20+i).2 [gw i] up0 198.18.(10+i).2 ══ c_i 198.18.(10+i).1 [core]
//
// The director (pep-gateway director: nftables jhash of the subscriber's
// address, policy routes, health checks on pepd's /healthz) keeps each
// subscriber on one gateway; every gateway runs the shipped ruleset
// (TPROXY), pepd and Squid, the Squids forming a CARP array over their
// array ports 198.18.(10+i).2:3127, which they reach through core. core
// holds the origin (198.19.0.10:80, counting requests per path) and the
// resolver (198.19.0.53).

const scaleSubscribers = 12

type array struct {
	core, dir *netNS
	gws       []*netNS
	subs      []*netNS
	squidLogs []string
	pepd      []*exec.Cmd
	squids    []string // Squid service names
	admins    []string // pepd admin addresses, reachable from dir
	bin       string   // folder of pepd, pepctl, pep-gateway
	origin    *countingOrigin
	director  *exec.Cmd
}

// countingOrigin serves /obj/... cacheable (8 KB, an hour fresh) and
// /whoami/... uncacheable, and counts requests per path.
type countingOrigin struct {
	mu   sync.Mutex
	hits map[string]int
}

func (o *countingOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.hits[r.URL.Path]++
	o.mu.Unlock()
	if strings.HasPrefix(r.URL.Path, "/whoami/") {
		w.Header().Set("Cache-Control", "no-store")
		io.WriteString(w, "whoami")
		return
	}
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Set("Content-Type", "image/png")
	w.Write(bytes.Repeat([]byte(r.URL.Path[len(r.URL.Path)-1:]), 8192))
}

func (o *countingOrigin) count(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hits[path]
}

func needSquid(t *testing.T) {
	t.Helper()
	needRoot(t)
	if _, err := exec.LookPath("squid"); err != nil {
		t.Skip("needs squid (apt-get install -y squid; make deps)")
	}
}

// newArray builds the array with n gateways and starts everything but the
// director.
func newArray(t *testing.T, n int) *array {
	t.Helper()
	sfx := runSuffix()
	a := &array{core: newNetNS(t, "pepscc-"+sfx), dir: newNetNS(t, "pepscd-"+sfx), origin: &countingOrigin{hits: map[string]int{}}}
	a.bin = t.TempDir()
	for _, pkg := range []string{"./cmd/pepd", "./cmd/pepctl", "./deploy/cmd/pep-gateway"} {
		buildBinary(t, a.bin, pkg)
	}
	a.dir.ip(t, "link", "add", "sub0", "type", "bridge")
	a.dir.ip(t, "addr", "add", "198.18.0.1/24", "dev", "sub0")
	a.dir.ip(t, "link", "set", "sub0", "up")
	a.dir.exec(t, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0")
	for j := range scaleSubscribers {
		s := newNetNS(t, fmt.Sprintf("pepscs%d-%s", j, sfx))
		a.dir.ip(t, "link", "add", fmt.Sprintf("s%d", j), "type", "veth", "peer", "name", "eth0", "netns", s.name)
		a.dir.ip(t, "link", "set", fmt.Sprintf("s%d", j), "master", "sub0", "up")
		s.ip(t, "addr", "add", fmt.Sprintf("198.18.0.%d/24", 10+j), "dev", "eth0")
		s.ip(t, "link", "set", "eth0", "up")
		s.ip(t, "route", "add", "default", "via", "198.18.0.1")
		a.subs = append(a.subs, s)
	}
	a.core.ip(t, "addr", "add", originHTTP+"/32", "dev", "lo")
	a.core.ip(t, "addr", "add", originDNS+"/32", "dev", "lo")
	a.core.exec(t, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
	var peers []string
	for i := 1; i <= n; i++ {
		peers = append(peers, fmt.Sprintf("198.18.%d.2:3127", 10+i))
	}
	for i := 1; i <= n; i++ {
		gw := newNetNS(t, fmt.Sprintf("pepscg%d-%s", i, sfx))
		a.gws = append(a.gws, gw)
		a.dir.ip(t, "link", "add", fmt.Sprintf("g%d", i), "type", "veth", "peer", "name", "sub0", "netns", gw.name)
		a.dir.ip(t, "addr", "add", fmt.Sprintf("198.18.%d.1/24", 20+i), "dev", fmt.Sprintf("g%d", i))
		a.dir.ip(t, "link", "set", fmt.Sprintf("g%d", i), "up")
		gw.ip(t, "addr", "add", fmt.Sprintf("198.18.%d.2/24", 20+i), "dev", "sub0")
		gw.ip(t, "link", "set", "sub0", "up")
		gw.ip(t, "route", "add", "198.18.0.0/24", "via", fmt.Sprintf("198.18.%d.1", 20+i))
		gw.ip(t, "link", "add", "up0", "type", "veth", "peer", "name", fmt.Sprintf("c%d", i), "netns", a.core.name)
		gw.ip(t, "addr", "add", fmt.Sprintf("198.18.%d.2/24", 10+i), "dev", "up0")
		gw.ip(t, "link", "set", "up0", "up")
		gw.ip(t, "route", "add", "default", "via", fmt.Sprintf("198.18.%d.1", 10+i))
		a.core.ip(t, "addr", "add", fmt.Sprintf("198.18.%d.1/24", 10+i), "dev", fmt.Sprintf("c%d", i))
		a.core.ip(t, "link", "set", fmt.Sprintf("c%d", i), "up")
		gw.exec(t, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=1", "net.ipv4.conf.sub0.rp_filter=1")
		for k, c := range RoutingPlan(Default()) {
			args := append([]string{"-n", gw.name}, c[1:]...)
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil && k > 0 {
				t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		f := filepath.Join(t.TempDir(), "gw.nft")
		os.WriteFile(f, Ruleset, 0o644)
		gw.exec(t, "nft", "-f", f)
		service := fmt.Sprintf("pepscale%dx%d", i, os.Getpid())
		a.squids = append(a.squids, service)
		logDir := startSquidWith(t, gw, service, func(c *squid.Conf) {
			c.Peers, c.PeerListen = peers, peers[i-1]
		})
		a.squidLogs = append(a.squidLogs, logDir)
		t.Cleanup(func() {
			if t.Failed() {
				for _, f := range []string{"access.log", "cache.log"} {
					b, _ := os.ReadFile(filepath.Join(logDir, f))
					t.Logf("gateway %d Squid %s:\n%s", i, f, b)
				}
			}
		})
		admin := fmt.Sprintf("198.18.%d.2:9090", 20+i)
		a.admins = append(a.admins, admin)
		cfg := filepath.Join(t.TempDir(), "pepd.yaml")
		writePepdConfigAdmin(t, cfg, admin)
		cmd := gw.command(context.Background(), filepath.Join(a.bin, "pepd"), "-config", cfg)
		cmd.Stdout, cmd.Stderr = tlogWriter{t, fmt.Sprintf("pepd%d", i)}, tlogWriter{t, fmt.Sprintf("pepd%d", i)}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		a.pepd = append(a.pepd, cmd)
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	// Squid probes its peers when it starts, before its own array port
	// listens and while later members are not up yet, and marks the ones
	// that did not answer dead until a later probe: members would disagree
	// on owners. Once every member listens, a reconfigure starts every
	// member with every peer up (docs/operations.md §6: start the array,
	// then squid -k reconfigure on each member).
	// Squid has no readiness signal: cache.log says "Accepting ..." once
	// per port when it (re)opens them, so a member has reconfigured when
	// the count has doubled.
	accepting := func(i int) int {
		b, _ := os.ReadFile(filepath.Join(a.squidLogs[i], "cache.log"))
		return bytes.Count(b, []byte("Accepting "))
	}
	opened := make([]int, len(a.gws))
	for i, gw := range a.gws {
		opened[i] = accepting(i)
		conf := filepath.Join(filepath.Dir(a.squidLogs[i]), "squid.conf")
		gw.exec(t, "squid", "-n", a.squids[i], "-k", "reconfigure", "-f", conf)
	}
	for i := range a.gws {
		for deadline := time.Now().Add(testenv.Scale(30 * time.Second)); accepting(i) < 2*opened[i]; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("gateway %d: Squid did not reopen its %d ports after reconfigure", i+1, opened[i])
			}
		}
	}
	// Then each member has its peers again, each with its address (Squid
	// configures them asynchronously) and up: mgr:server_list.
	for i, gw := range a.gws {
		m := &squid.Manager{Addr: "127.0.0.1:3128", ProxyProtocol: true}
		var page string
		for deadline := time.Now().Add(testenv.Scale(30 * time.Second)); ; time.Sleep(20 * time.Millisecond) {
			var err error
			gw.do(func() error {
				ctx, cancel := context.WithTimeout(context.Background(), testenv.Scale(2*time.Second))
				defer cancel()
				page, err = m.Page(ctx, "server_list")
				return nil
			})
			peers, addrs, up := 0, 0, 0
			for _, l := range strings.Split(page, "\n") {
				name, v, _ := strings.Cut(l, ":")
				switch name, v = strings.TrimSpace(name), strings.TrimSpace(v); {
				case name == "Host":
					peers++
				case name == "Address[0]" && v != "":
					addrs++
				case name == "Status" && v == "Up":
					up++
				}
			}
			if err == nil && peers > 0 && addrs == peers && up == peers {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("gateway %d: Squid's peers not all up with an address after reconfigure (%v):\n%s", i+1, err, page)
			}
		}
	}
	l := a.core.listen(t, originHTTP+":80", false)
	srv := &http.Server{Handler: a.origin}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	serveDNS(t, a.core, "udp", originDNS+":53", originHTTP)
	for i := range a.admins {
		if err := a.waitHealthy(i, testenv.Scale(30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// dirClient is an HTTP client whose connections start in the director
// namespace (the gateways' admin addresses are reachable there).
func (a *array) dirClient() *http.Client {
	return nsClient(a.dir, testenv.Scale(2*time.Second))
}

func nsClient(n *netNS, timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: timeout}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = n.do(func() (err error) { c, err = d.DialContext(ctx, network, addr); return err })
			return c, err
		}}}
}

func (a *array) waitHealthy(i int, within time.Duration) error {
	c := a.dirClient()
	deadline := time.Now().Add(within)
	for {
		resp, err := c.Get("http://" + a.admins[i] + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gateway %d: pepd /healthz not 200 after %s: %v", i+1, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startDirector runs pep-gateway director in the director namespace.
func (a *array) startDirector(t *testing.T) {
	t.Helper()
	args := []string{filepath.Join(a.bin, "pep-gateway"), "director", "-sub-if", "sub0", "-sub-net", "198.18.0.0/24"}
	for i := range a.gws {
		args = append(args, "-gateway", fmt.Sprintf("gw%d=198.18.%d.2,http://%s/healthz", i+1, 21+i, a.admins[i]))
	}
	cmd := a.dir.command(context.Background(), args...)
	cmd.Stdout, cmd.Stderr = tlogWriter{t, "director"}, tlogWriter{t, "director"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.director = cmd
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	// Ready when the bucket map is filled.
	deadline := time.Now().Add(testenv.Scale(10 * time.Second))
	for {
		// JSON: nft 1.0.6 prints a typeof-jhash map cut short in text.
		out, _ := a.dir.command(context.Background(), "nft", "-j", "list", "map", "ip", "pep_director", "buckets").CombinedOutput()
		if bytes.Contains(out, []byte("[63, ")) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("director: bucket map not filled after %s: %s", testenv.Scale(10*time.Second), out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gatewayOf finds the gateway subscriber j is kept on: it asks for an
// uncacheable /whoami/j and looks for the subscriber's address in the
// gateways' Squid access logs (the front Squid logs the subscriber's
// address, from pepd's PROXY header).
func (a *array) gatewayOf(t *testing.T, j int) int {
	t.Helper()
	path := fmt.Sprintf("/whoami/%d-%d", j, time.Now().UnixNano())
	var err error
	for try := 0; try < 100; try++ {
		if _, err = get(nsClient(a.subs[j], testenv.Scale(5*time.Second)), "http://"+originHTTP+path); err == nil {
			if try > 0 {
				t.Logf("subscriber %d: ok after %d tries", j, try)
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("subscriber %d: %v", j, err)
	}
	addr := fmt.Sprintf("198.18.0.%d ", 10+j)
	for try := 0; try < 40; try++ {
		for i, d := range a.squidLogs {
			b, _ := os.ReadFile(filepath.Join(d, "access.log"))
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, path) && strings.Contains(l, addr) {
					return i
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("subscriber %d: %s in no gateway's access.log", j, path)
	return -1
}

// pick returns one subscriber kept on each gateway.
func (a *array) pick(t *testing.T) []int {
	t.Helper()
	on := make([]int, len(a.gws))
	for i := range on {
		on[i] = -1
	}
	for j := range a.subs {
		if g := a.gatewayOf(t, j); on[g] < 0 {
			on[g] = j
		}
		if !slices.Contains(on, -1) {
			return on
		}
	}
	t.Fatalf("%d subscribers all hashed onto a subset of the gateways: %v", len(a.subs), on)
	return nil
}

// TestScaleArray: a two-gateway array behind the director. Every gateway
// switches mode from one pepctl call; an object first fetched through one
// gateway is a hit for a subscriber on the other, and the origin sees one
// request for it, in both directions.
func TestScaleArray(t *testing.T) {
	needSquid(t)
	a := newArray(t, 2)
	a.startDirector(t)
	on := a.pick(t)
	t.Logf("subscribers 198.18.0.%d on gw1, 198.18.0.%d on gw2", 10+on[0], 10+on[1])

	// One pepctl call switches every gateway (run where the admin
	// addresses are reachable: the director's namespace).
	admins := strings.Join(a.admins, ",")
	out := a.dir.exec(t, filepath.Join(a.bin, "pepctl"), "-admin", admins, "mode", "url")
	for i, ad := range a.admins {
		if !strings.Contains(out, ad+": url (was off)") {
			t.Errorf("gateway %d: pepctl output %q", i+1, out)
		}
	}
	out = a.dir.exec(t, filepath.Join(a.bin, "pepctl"), "-admin", admins, "mode")
	if strings.Count(out, ": url\n") != 2 {
		t.Errorf("modes after the switch: %q, want url on both", out)
	}
	a.dir.exec(t, filepath.Join(a.bin, "pepctl"), "-admin", admins, "mode", "off")

	for _, dir := range []struct {
		name        string
		first, then int
	}{{"gw1 then gw2", on[0], on[1]}, {"gw2 then gw1", on[1], on[0]}} {
		for k := range 6 {
			path := fmt.Sprintf("/obj/%s/%d", strings.ReplaceAll(dir.name, " ", "-"), k)
			b1, err1 := get(nsClient(a.subs[dir.first], testenv.Scale(5*time.Second)), "http://"+originHTTP+path)
			b2, err2 := get(nsClient(a.subs[dir.then], testenv.Scale(5*time.Second)), "http://"+originHTTP+path)
			if err1 != nil || err2 != nil || b1 != b2 || len(b1) != 8192 {
				t.Fatalf("%s %s: %v, %v, %d and %d bytes", dir.name, path, err1, err2, len(b1), len(b2))
			}
			if n := a.origin.count(path); n != 1 {
				t.Errorf("%s %s: the origin saw %d requests, want 1 (CARP: one fetch for the array)", dir.name, path, n)
			}
		}
	}
}

// TestScaleFailover: while a subscriber on each gateway loads pages in a
// loop, gateway 2 dies (its pepd and Squid killed, its links down). Its
// subscribers' new page loads must succeed through gateway 1 once the
// director withdraws it (bound measured and logged), and the subscriber on
// gateway 1 must see no failed load.
func TestScaleFailover(t *testing.T) {
	needSquid(t)
	a := newArray(t, 2)
	a.startDirector(t)
	on := a.pick(t)
	// Warm the array: page objects spread over both owners.
	paths := make([]string, 8)
	for k := range paths {
		paths[k] = fmt.Sprintf("/obj/page/%d", k)
		if _, err := get(nsClient(a.subs[on[0]], testenv.Scale(5*time.Second)), "http://"+originHTTP+paths[k]); err != nil {
			t.Fatal(err)
		}
	}
	type load struct {
		start, end time.Time
		err        error
	}
	var mu sync.Mutex
	loads := map[int][]load{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, j := range on {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// 5 s per object: an object whose owner just died waits for
			// Squid's connect-timeout (2 s) to that member before CARP
			// moves on; a browser waits far longer.
			c := nsClient(a.subs[j], testenv.Scale(5*time.Second))
			for {
				select {
				case <-stop:
					return
				default:
				}
				l := load{start: time.Now()}
				for _, p := range paths {
					if _, err := get(c, "http://"+originHTTP+p); err != nil {
						l.err = err
						break
					}
				}
				l.end = time.Now()
				mu.Lock()
				loads[j] = append(loads[j], l)
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	// Both subscribers are loading: a good load each before the fault.
	okSince := func(j int, t0 time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, l := range loads[j] {
			if l.err == nil && !l.start.Before(t0) {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(testenv.Scale(10 * time.Second)); okSince(on[0], time.Time{}) < 1 || okSince(on[1], time.Time{}) < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			close(stop)
			wg.Wait()
			t.Fatalf("no good load of each subscriber before the fault: %v", loads)
		}
	}
	// Gateway 2 dies: processes killed, then its links down. The kernel
	// closes the dead Squid's connections before the links go (we wait
	// for its exit): gateway 1's Squid sees its persistent connections to
	// the member close and retries elsewhere. A member that loses power
	// sends no FIN, and a request already written on such a connection
	// waits for Squid's read_timeout (Squid 5 has no per-peer timeout);
	// the test used to race the exit against the link, and failed when
	// the link won (CI, stop 21). Noted in deploy/README.md.
	t0 := time.Now()
	a.pepd[1].Process.Kill()
	a.gws[1].command(context.Background(), "pkill", "-9", "-f", "squid -n "+a.squids[1]).Run()
	for deadline := time.Now().Add(testenv.Scale(5 * time.Second)); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if a.gws[1].command(context.Background(), "pgrep", "-f", "squid -n "+a.squids[1]).Run() != nil {
			break // no process left
		}
	}
	// A load already under way while the member died may lose the
	// response being relayed from it (gateway 1's Squid cannot retry a
	// response it has begun to pass on: the subscriber sees it cut
	// short, CI stop 21); a load that starts once the member is dead
	// must not fail.
	tDead := time.Now()
	a.gws[1].ip(t, "link", "set", "sub0", "down")
	a.gws[1].ip(t, "link", "set", "up0", "down")
	// Observe until gateway 2's subscriber had good loads through
	// gateway 1 and gateway 1's subscriber finished 5 loads started after
	// the death (or the bound, scaled, ran out: judged below).
	bound := testenv.Scale(5 * time.Second)
	for deadline := time.Now().Add(2*bound + testenv.Scale(5*time.Second)); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if okSince(on[1], tDead) >= 3 && okSince(on[0], tDead) >= 5 {
			break
		}
	}
	close(stop)
	wg.Wait()

	var firstOK time.Duration
	failedB := 0
	for _, l := range loads[on[1]] {
		if l.start.Before(t0) {
			continue
		}
		if l.err != nil {
			failedB++
			continue
		}
		if firstOK == 0 {
			firstOK = l.end.Sub(t0)
		}
	}
	var failedA, inFlightA []string
	var slowA time.Duration
	for _, l := range loads[on[0]] {
		if l.err != nil {
			f := fmt.Sprintf("%s after the fault: %v", l.start.Sub(t0).Round(time.Millisecond), l.err)
			if l.start.Before(tDead) && l.end.After(t0) {
				inFlightA = append(inFlightA, f)
			} else {
				failedA = append(failedA, f)
			}
		}
		if !l.start.Before(t0) {
			slowA = max(slowA, l.end.Sub(l.start))
		}
	}
	t.Logf("gateway 2 down: its subscriber's first good page load %s after the fault (%d loads failed before); gateway 1's subscriber: %d loads, %d failed, slowest after the fault %s",
		firstOK.Round(time.Millisecond), failedB, len(loads[on[0]]), len(failedA), slowA.Round(time.Millisecond))
	if firstOK == 0 || firstOK > bound {
		t.Errorf("gateway 2's subscriber: first good load after %s, want within %s", firstOK, bound)
	}
	if len(inFlightA) > 0 {
		t.Logf("gateway 1's subscriber: loads under way while gateway 2 died (%s), failed: %v", tDead.Sub(t0).Round(time.Millisecond), inFlightA)
	}
	if len(failedA) > 0 {
		t.Errorf("gateway 1's subscriber saw failures of loads started after gateway 2 was dead: %v", failedA)
	}
}

// TestScaleThroughput (make scale-test; PEP_SCALE_THROUGHPUT=1): wrk
// through the director on a cached object, first from one subscriber (one
// gateway busy), then from one subscriber on each gateway at once, in the
// same run; prints requests/s and the CPU use of each gateway's pepd and
// Squid.
func TestScaleThroughput(t *testing.T) {
	if os.Getenv("PEP_SCALE_THROUGHPUT") == "" {
		t.Skip("PEP_SCALE_THROUGHPUT not set: make scale-test runs it")
	}
	needSquid(t)
	if _, err := exec.LookPath("wrk"); err != nil {
		t.Skip("needs wrk (apt-get install -y wrk; make deps)")
	}
	a := newArray(t, 2)
	a.startDirector(t)
	on := a.pick(t)
	url := "http://" + originHTTP + "/obj/bench/1"
	for _, j := range on { // cached (owner and both fronts' paths warm)
		if _, err := get(nsClient(a.subs[j], testenv.Scale(5*time.Second)), url); err != nil {
			t.Fatal(err)
		}
	}
	dur := "10s"
	if s := os.Getenv("PEP_SCALE_DURATION"); s != "" {
		dur = s
	}
	wrk := func(j int) (float64, string) {
		out, err := a.subs[j].command(context.Background(), "wrk", "-t1", "-c50", "-d"+dur, url).CombinedOutput()
		if err != nil {
			t.Fatalf("wrk: %v\n%s", err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "Requests/sec:" {
				v, _ := strconv.ParseFloat(f[1], 64)
				return v, string(out)
			}
		}
		t.Fatalf("wrk output without Requests/sec:\n%s", out)
		return 0, ""
	}
	// CPU time of the gateways' processes (pepd, every Squid process),
	// read around each phase: what one cached request costs the array.
	gwCPU := func() time.Duration {
		var sum time.Duration
		var pids []int
		for _, p := range a.pepd {
			pids = append(pids, p.Process.Pid)
		}
		for _, svc := range a.squids {
			out, _ := exec.Command("pgrep", "-f", "squid -n "+svc).Output()
			for _, f := range strings.Fields(string(out)) {
				if n, err := strconv.Atoi(f); err == nil {
					pids = append(pids, n)
				}
			}
		}
		for _, pid := range pids {
			if d, err := cputime.Of(pid); err == nil {
				sum += d
			}
		}
		return sum
	}
	c0 := gwCPU()
	t0 := time.Now()
	one, _ := wrk(on[0])
	c1, t1 := gwCPU(), time.Now()
	var two [2]float64
	var wg sync.WaitGroup
	for k, j := range on {
		wg.Add(1)
		go func() { defer wg.Done(); two[k], _ = wrk(j) }()
	}
	wg.Wait()
	c2, t2 := gwCPU(), time.Now()
	perReq := func(cpu time.Duration, rps float64, wall time.Duration) float64 {
		return float64(cpu.Microseconds()) / (rps * wall.Seconds())
	}
	u1, u2 := perReq(c1-c0, one, t1.Sub(t0)), perReq(c2-c1, two[0]+two[1], t2.Sub(t1))
	t.Logf("cached 8 KB object through the director, wrk -t1 -c50 -d%s per subscriber (load average before: %s):\n"+
		"| gateways loaded | requests/s | gateway CPU (pepd + Squid) per request | gateway CPU used |\n|---|---:|---:|---:|\n"+
		"| 1 | %.0f | %.0f µs | %.2f cores |\n| 2 | %.0f (%.0f + %.0f) | %.0f µs | %.2f cores |\n"+
		"(2 cores shared by the subscribers' wrk, the director's forwarding, both pepd and both Squid)",
		dur, loadavg(), one, u1, (c1-c0).Seconds()/t1.Sub(t0).Seconds(), two[0]+two[1], two[0], two[1], u2, (c2-c1).Seconds()/t2.Sub(t1).Seconds())
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
