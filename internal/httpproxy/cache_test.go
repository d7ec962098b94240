package httpproxy

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"pep/internal/cachepolicy"
	"pep/internal/mode"
	pepsquid "pep/internal/squid"
	"pep/internal/testenv"
)

// cacheWorld is world (DNS, origin, a real Squid, pepd in url mode) with
// second-hit admission on or off on both sides: pepd's
// cachepolicy.Policy and Squid's rendered store_miss rule. It returns
// the policy and a Manager reading that Squid.
func cacheWorld(t *testing.T, admission, proxyProtocol bool) (*pepd, *squid, *origin, *cachepolicy.Policy, *pepsquid.Manager) {
	t.Helper()
	ns := startDNS(t, siteRecords)
	o := startOrigin(t, originIP, sitePages)
	port := o.Addr.Port()
	sc := siteSquidConf(t, ns, siteRecords, port)
	sc.ProxyProtocol = proxyProtocol
	sc.Admission = admission
	sq := startSquid(t, sc)
	var adm *cachepolicy.Admission
	if admission {
		var err error
		if adm, err = cachepolicy.NewAdmission(cachepolicy.AdmissionOptions{Window: time.Hour, Items: 10000}); err != nil {
			t.Fatal(err)
		}
	}
	pol := cachepolicy.NewPolicy(adm, admission)
	p := startPepd(t, pepdOpts{squid: sq.Addr, proxyProtocol: proxyProtocol, resolver: ns.Addr, mode: mode.URL,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80, port}, cache: pol})
	return p, sq, o, pol, &pepsquid.Manager{Addr: sq.Addr, ProxyProtocol: proxyProtocol, Timeout: 5 * time.Second}
}

// diskFiles returns the object files in Squid's cache_dir (its swap.state
// journal aside) and their contents.
func diskFiles(t *testing.T, s *squid) map[string]string {
	t.Helper()
	files := map[string]string{}
	filepath.WalkDir(filepath.Join(s.LogDir, "cache"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), "swap.state") {
			return nil
		}
		b, _ := os.ReadFile(p)
		files[p] = string(b)
		return nil
	})
	return files
}

// stats reads Squid's figures, failing t on an error.
func stats(t *testing.T, m *pepsquid.Manager) pepsquid.Stats {
	t.Helper()
	s, err := m.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitSwapOuts waits until Squid counts want disk writes (5 s at most,
// scaled by testenv): aufs writes in its own threads, after the response
// went out. It then keeps reading the count for swapSettle so that a
// write that should not happen (a first-seen object stored) is seen
// rather than read as 0 before aufs wrote anything.
func waitSwapOuts(t *testing.T, m *pepsquid.Manager, want int64) pepsquid.Stats {
	t.Helper()
	var s pepsquid.Stats
	deadline := time.Now().Add(testenv.Scale(5 * time.Second))
	for ; ; time.Sleep(20 * time.Millisecond) {
		s = stats(t, m)
		if s.SwapOuts >= want || time.Now().After(deadline) {
			break
		}
	}
	for settle := time.Now().Add(swapSettle); s.SwapOuts <= want && time.Now().Before(settle); time.Sleep(20 * time.Millisecond) {
		s = stats(t, m)
	}
	return s
}

// swapSettle is how long waitSwapOuts watches for a disk write beyond the
// expected ones: an unwanted aufs write of a small object comes within a
// few milliseconds on an idle machine (measured: 2-8 ms after the
// response); 300 ms, scaled.
var swapSettle = testenv.Scale(300 * time.Millisecond)

// TestSecondHitAdmission: CacheSifter's admission at the gateway (seed
// 001), through pepd and a real Squid, on the relay (a plain GET) and on
// the standard library path (a GET with headers the relay leaves to it).
// With admission on, the first request for an object is served from the
// origin and written nowhere (Squid's swap.outs stays 0, no file in its
// cache_dir, and the second request goes to the origin again: not kept
// in memory either, Squid 5 cannot do memory-only by ACL); the second
// request stores it (one disk write, the object's file holds the body);
// the third is a hit. Off: today's behaviour, the first request stores,
// the second is a hit, even when the subscriber sends a Pep-First of its
// own (pepd drops it). The origin never sees pepd's mark.
func TestSecondHitAdmission(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		admission             bool
		obj, body, extra      string
		origin, swaps, hits   [3]int64 // after requests 1, 2, 3
		firstSeen, subscriber int64
	}{
		{name: "second-hit relay", admission: true, obj: "img.cdn.test/logo.png", body: "PNG-logo",
			origin: [3]int64{1, 2, 2}, swaps: [3]int64{0, 1, 1}, hits: [3]int64{0, 0, 1}, firstSeen: 1},
		{name: "second-hit standard library path", admission: true, obj: "static.other.test/bg.png", body: "PNG-bg",
			extra:  "Expect: 100-continue\r\nContent-Length: 0\r\n",
			origin: [3]int64{1, 2, 2}, swaps: [3]int64{0, 1, 1}, hits: [3]int64{0, 0, 1}, firstSeen: 1},
		{name: "off", obj: "img.cdn.test/logo.png", body: "PNG-logo", extra: "Pep-First: 1\r\n",
			origin: [3]int64{1, 1, 1}, swaps: [3]int64{1, 1, 1}, hits: [3]int64{0, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, sq, o, pol, mgr := cacheWorld(t, tc.admission, true)
			host, path, _ := strings.Cut(tc.obj, "/")
			req := "GET /" + host + ":" + o.Port + "/" + path + " HTTP/1.1\r\nHost: 192.0.2.12\r\n" + tc.extra + "\r\n"
			before := stats(t, mgr)
			for i := range 3 {
				if resp, body := p.raw(t, "127.0.0.9", req); resp.StatusCode != 200 || body != tc.body {
					t.Fatalf("request %d: %d %q", i+1, resp.StatusCode, body)
				}
				if got := int64(o.hitCount(tc.obj)); got != tc.origin[i] {
					t.Errorf("after request %d: the origin saw %d requests, want %d", i+1, got, tc.origin[i])
				}
				s := waitSwapOuts(t, mgr, before.SwapOuts+tc.swaps[i])
				if got := s.SwapOuts - before.SwapOuts; got != tc.swaps[i] {
					t.Errorf("after request %d: %d disk writes (swap.outs), want %d", i+1, got, tc.swaps[i])
				}
				if got := s.Hits - before.Hits; got != tc.hits[i] {
					t.Errorf("after request %d: %d hits, want %d", i+1, got, tc.hits[i])
				}
				if got := s.Requests - before.Requests; got != int64(i+1) {
					t.Errorf("after request %d: Squid counted %d requests", i+1, got)
				}
				files := diskFiles(t, sq)
				if int64(len(files)) != tc.swaps[i] {
					t.Errorf("after request %d: %d files in the cache_dir, want %d: %v", i+1, len(files), tc.swaps[i], files)
				}
				for f, b := range files {
					if !strings.HasSuffix(b, tc.body) {
						t.Errorf("after request %d: %s does not hold the object: %q", i+1, f, b)
					}
				}
			}
			if got := pol.Counts().FirstSeen; got != tc.firstSeen {
				t.Errorf("pepd counted %d first-seen marks, want %d", got, tc.firstSeen)
			}
			if v := o.lastHeader(tc.obj).Get(cachepolicy.FirstHeader); v != "" {
				t.Errorf("the origin saw %s: %q", cachepolicy.FirstHeader, v)
			}
		})
	}
}

// TestAdmissionCollapsing: same-click collapsing (seed 000) with
// admission on. 20 identical requests at once for a new cacheable object:
// pepd marks one first-seen and holds the other 19 until its response
// head came from Squid (cachepolicy.Policy.Mark), then they go together
// and collapse on one fetch. The origin sees exactly two fetches, and the
// object is stored: a 21st request is a hit. Before the hold the count
// depended on which request reached Squid first: 1 when an unmarked one
// led, 20 when the marked one did (Squid forwards each follower again
// when the leader's reply may not be stored), and with the marked one
// kept out of collapsing its reply released the others' entry, so
// nothing was stored.
func TestAdmissionCollapsing(t *testing.T) {
	p, sq, o, pol, mgr := cacheWorld(t, true, true)
	url := "http://192.0.2.12/img.cdn.test:" + o.Port + "/click.png"
	// The origin answers the first fetch once pepd has decided all 20
	// requests (one first-seen, 19 admitted and held behind it), so that
	// they overlap however slowly a loaded machine starts them. The
	// origin is set up before any request reaches it.
	testenv.Log(t)
	pg := o.pages["img.cdn.test/click.png"]
	pg.delay, pg.wait = 0, func() {
		for deadline := time.Now().Add(testenv.Scale(5 * time.Second)); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if c := pol.Counts(); c.FirstSeen+c.Admitted >= 20 {
				return
			}
		}
	}
	pages := maps.Clone(o.pages)
	pages["img.cdn.test/click.png"] = pg
	o.pages = pages
	get := func(sub string) error {
		resp, err := p.client(sub).Get(url)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "PNG-click" {
			return fmt.Errorf("%s: %d %q", sub, resp.StatusCode, b)
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := get(fmt.Sprintf("127.0.1.%d", i+1)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c := pol.Counts()
	t.Logf("pepd: %+v", c)
	if c.FirstSeen != 1 {
		t.Errorf("pepd marked %d requests first-seen, want 1", c.FirstSeen)
	}
	if c.Held != 19 || c.HoldTimeouts != 0 {
		t.Errorf("pepd held %d requests, %d released by the bound: want 19, none", c.Held, c.HoldTimeouts)
	}
	got := o.hitCount("img.cdn.test/click.png")
	if got != 2 {
		t.Errorf("the origin saw %d requests for 20 at once, want 2 (the first-seen one, and one the other 19 collapse on)", got)
		for _, l := range sq.AccessLog(t) {
			t.Log(l)
		}
	}
	waitSwapOuts(t, mgr, 1)
	if err := get("127.0.1.21"); err != nil {
		t.Fatal(err)
	}
	if after := o.hitCount("img.cdn.test/click.png"); after != got {
		t.Errorf("the 21st request reached the origin (%d requests, %d before): the burst did not store the object", after, got)
		for _, l := range sq.AccessLog(t) {
			t.Log(l)
		}
	}
}

// TestCacheStatus: the status interface against a real Squid: the
// numbers pepd reports (cachepolicy.StatusSource, the pep_cache_* series
// of Policy.Register and Collector) move with a first-seen request, an
// admitted one, a hit and a private one; Squid's manager is reachable by
// pepd on loopback (PROXY protocol and X-Forwarded-For setups) and never
// by a subscriber through pepd.
func TestCacheStatus(t *testing.T) {
	for _, pp := range []bool{true, false} {
		t.Run(map[bool]string{true: "proxy protocol", false: "x-forwarded-for"}[pp], func(t *testing.T) {
			p, _, o, pol, mgr := cacheWorld(t, true, pp)
			src := &cachepolicy.StatusSource{Policy: pol, Window: time.Hour, Manager: mgr}
			before := src.Status(context.Background())
			if before.Squid == nil {
				t.Fatalf("no Squid figures: %s", before.SquidError)
			}
			reg := prometheus.NewRegistry()
			if err := pol.Register(reg); err != nil {
				t.Fatal(err)
			}
			reg.MustRegister(&cachepolicy.Collector{Manager: mgr})
			logo := "GET /img.cdn.test:" + o.Port + "/logo.png HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n"
			for range 3 { // first-seen, admitted (stored), hit
				p.raw(t, "127.0.0.9", logo)
			}
			p.raw(t, "127.0.0.9", "GET /www.site.test:"+o.Port+"/app.js HTTP/1.1\r\nHost: 192.0.2.12\r\nUser-Agent: App/1 CK-Private\r\n\r\n")
			waitSwapOuts(t, mgr, before.Squid.SwapOuts+1)
			st := src.Status(context.Background())
			if st.Squid == nil {
				t.Fatalf("no Squid figures: %s", st.SquidError)
			}
			q, b := st.Squid, before.Squid
			for _, c := range []struct {
				name      string
				got, want int64
			}{
				{"pepd first-seen", st.Pepd.FirstSeen, 1},
				{"pepd admitted", st.Pepd.Admitted, 2},
				{"pepd private", st.Pepd.Private, 1},
				{"requests", q.Requests - b.Requests, 4},
				{"hits", q.Hits - b.Hits, 1},
				{"origin requests", q.OriginRequests - b.OriginRequests, 3},
				{"disk writes", q.SwapOuts - b.SwapOuts, 1},
				{"disk objects", q.DiskObjects - b.DiskObjects, 1},
				{"memory objects", q.MemObjects - b.MemObjects, 1},
			} {
				if c.got != c.want {
					t.Errorf("%s: %d, want %d", c.name, c.got, c.want)
				}
			}
			if q.DiskBytes <= b.DiskBytes || q.SentBytes < b.SentBytes {
				t.Errorf("disk bytes %d -> %d, sent bytes %d -> %d", b.DiskBytes, q.DiskBytes, b.SentBytes, q.SentBytes)
			}
			if st.Admission != cachepolicy.AdmissionSecondHit || st.HitRatio <= 0 || st.Collapsed != nil {
				t.Errorf("status %+v", st)
			}
			var text strings.Builder
			st.WriteText(&text)
			for _, want := range []string{"admission: second-hit (window 1h0m0s)", "first-seen (admissions refused): 1", "private requests: 1", "disk writes (swap outs): "} {
				if !strings.Contains(text.String(), want) {
					t.Errorf("text status lacks %q:\n%s", want, text.String())
				}
			}
			for name, want := range map[string]float64{
				"pep_cache_squid_up": 1, "pep_cache_first_seen_total": 1, "pep_cache_private_total": 1,
				"pep_cache_admission_enabled": 1,
			} {
				if got := gatherValue(t, reg, name, ""); got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
			if got := gatherValue(t, reg, "pep_cache_swap_outs_total", ""); got < float64(q.SwapOuts) {
				t.Errorf("pep_cache_swap_outs_total = %v, want at least %d", got, q.SwapOuts)
			}
			if got := gatherValue(t, reg, "pep_cache_objects", "disk"); got < 1 {
				t.Errorf("pep_cache_objects{store=disk} = %v", got)
			}

			// The manager through pepd: routed by VIP path and by Host,
			// a subscriber gets Squid's refusal, never a manager page.
			for _, req := range []string{
				"GET /www.site.test:" + o.Port + "/squid-internal-mgr/counters HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n",
				"GET /squid-internal-mgr/info HTTP/1.1\r\nHost: www.site.test:" + o.Port + "\r\n\r\n",
			} {
				resp, body := p.raw(t, "127.0.0.9", req)
				if resp.StatusCode != http.StatusForbidden || strings.Contains(body, "client_http") || strings.Contains(body, "Storage Swap") {
					t.Errorf("%q through pepd: %d\n%.300s", req, resp.StatusCode, body)
				}
			}
			if n := o.hitCount("www.site.test/squid-internal-mgr/counters") + o.hitCount("www.site.test/squid-internal-mgr/info"); n != 0 {
				t.Errorf("manager URLs reached the origin %d times", n)
			}
		})
	}
}

// gatherValue returns the value of the series name (with label value lv
// when not "") from reg.
func gatherValue(t *testing.T, reg *prometheus.Registry, name, lv string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if lv != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != lv) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
	}
	t.Errorf("no series %s%s", name, lv)
	return -1
}

// TestFirstSeenMarkBothPaths: the request Squid receives carries
// Pep-First: 1 exactly when cachepolicy.Policy.Mark says first-seen, on
// the relay and on the standard library path alike; a subscriber's own
// Pep-First is dropped on both; private requests and requests with
// admission off are never marked.
func TestFirstSeenMarkBothPaths(t *testing.T) {
	adm, err := cachepolicy.NewAdmission(cachepolicy.AdmissionOptions{Window: time.Hour, Items: 1000})
	if err != nil {
		t.Fatal(err)
	}
	pol := cachepolicy.NewPolicy(adm, true)
	ns := startDNS(t, siteRecords)
	up := startScripted(t, func(*http.Request) scriptedAnswer {
		return scriptedAnswer{raw: "HTTP/1.1 204 No Content\r\n\r\n"}
	})
	p := startPepd(t, pepdOpts{squid: up.addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.Off,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80}, cache: pol})
	stdlib := "Expect: 100-continue\r\nContent-Length: 0\r\n" // the relay leaves such a GET to the standard library
	for _, tc := range []struct {
		name, path, extra, want string
	}{
		{"relay, first", "/img.cdn.test/r.png", "", "1"},
		{"relay, second", "/img.cdn.test/r.png", "", ""},
		{"relay, subscriber's own mark on a seen URL", "/img.cdn.test/r.png", "Pep-First: 1\r\n", ""},
		{"standard library, first", "/img.cdn.test/s.png", stdlib, "1"},
		{"standard library, second, subscriber's own mark", "/img.cdn.test/s.png", stdlib + "Pep-First: 1\r\n", ""},
		{"private, first", "/img.cdn.test/p.png", "User-Agent: App CK-Private\r\n", ""},
		{"HEAD", "/img.cdn.test/h.png", "", ""},
	} {
		method := "GET"
		if tc.name == "HEAD" {
			method = "HEAD"
		}
		resp, body := p.raw(t, "127.0.0.9", method+" "+tc.path+" HTTP/1.1\r\nHost: 192.0.2.12\r\n"+tc.extra+"\r\n")
		if resp.StatusCode != 204 {
			t.Fatalf("%s: %d %q", tc.name, resp.StatusCode, body)
		}
		r, _ := up.last()
		if got := strings.Join(r.Header.Values(cachepolicy.FirstHeader), ","); got != tc.want {
			t.Errorf("%s: Squid got %s %q, want %q", tc.name, cachepolicy.FirstHeader, got, tc.want)
		}
	}
	pol.SetAdmission(false)
	p.raw(t, "127.0.0.9", "GET /img.cdn.test/new.png HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n")
	if r, _ := up.last(); r.Header.Get(cachepolicy.FirstHeader) != "" {
		t.Error("marked with admission switched off")
	}
	if got, want := pol.Counts(), (cachepolicy.Counts{FirstSeen: 2, Admitted: 3, Private: 1}); got != want {
		t.Errorf("counts %+v, want %+v", got, want)
	}
}
