package httpproxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"pep/internal/mode"
	"pep/internal/testenv"
)

// The test world: three sites on one origin at 127.0.0.2 (names resolved
// by a real DNS server), a real Squid, pepd in url mode. The guard allows
// exactly the origin's address (127.0.0.2/32) and port; every other
// loopback address stays forbidden.
const originIP = "127.0.0.2"

var sitePages = map[string]page{
	"www.site.test/": {ctype: "text/html; charset=utf-8", body: `<!doctype html><html><head>
<link rel="stylesheet" href="http://static.other.test:PORT/style.css">
<script src="/app.js"></script>
</head><body>
<img src="http://img.cdn.test:PORT/logo.png" alt="">
<a href="http://www.site.test:PORT/next.html">next</a>
<img src="https://img.cdn.test/secure.png">
</body></html>`},
	"www.site.test/app.js":        {ctype: "application/javascript", body: "console.log(1)"},
	"static.other.test/style.css": {ctype: "text/css", body: "body{background:url(/bg.png)}"},
	"static.other.test/bg.png":    {ctype: "image/png", body: "PNG-bg"},
	"img.cdn.test/logo.png":       {ctype: "image/png", body: "PNG-logo"},
	// Slow objects for the same-click test: requests overlap at the origin.
	"img.cdn.test/click.png":   {ctype: "image/png", body: "PNG-click", delay: 300 * time.Millisecond},
	"img.cdn.test/private.png": {ctype: "image/png", body: "PNG-private", delay: 300 * time.Millisecond, header: map[string]string{"Cache-Control": "private, no-store"}},
	"www.site.test/redirect":   {ctype: "text/plain", body: "moved", header: map[string]string{"Location": "/app.js", "Set-Cookie": "sid=1; Path=/; Domain=site.test"}},
}

var siteRecords = map[string]string{
	"www.site.test": originIP, "img.cdn.test": originIP, "static.other.test": originIP,
	"private.test": "10.1.2.3", "linklocal.test": "169.254.1.1", "cgnat.test": "100.64.1.1",
	"loopback.test": "127.0.0.1", "vip.test": "192.0.2.12", "reserved.test": "240.0.0.1",
	"elsewhere.test": "127.0.0.3",
}

// world starts DNS, origin, Squid and pepd for one test.
func world(t *testing.T, md mode.Mode, proxyProtocol bool) (*pepd, *squid, *origin) {
	p, sq, o, _ := worldDNS(t, md, proxyProtocol)
	return p, sq, o
}

// worldDNS is world that also returns its DNS server.
func worldDNS(t *testing.T, md mode.Mode, proxyProtocol bool) (*pepd, *squid, *origin, *dnsServer) {
	ns := startDNS(t, siteRecords)
	o := startOrigin(t, originIP, sitePages)
	port := o.Addr.Port()
	sc := siteSquidConf(t, ns, siteRecords, port)
	sc.ProxyProtocol = proxyProtocol
	sq := startSquid(t, sc)
	p := startPepd(t, pepdOpts{squid: sq.Addr, proxyProtocol: proxyProtocol, resolver: ns.Addr, mode: md,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80, port}})
	return p, sq, o, ns
}

var vipURLRE = regexp.MustCompile(`http://192\.0\.2\.12/[^"')]+`)

// TestURLModeThroughSquid loads a page whose objects live on three hosts
// through pepd in url mode, fetches every VIP-form object through pepd,
// and loads it all a second time: the second load is served from Squid's
// cache (origin hit counts stay at one, access.log says HIT).
func TestURLModeThroughSquid(t *testing.T) {
	for _, pp := range []bool{true, false} {
		name := map[bool]string{true: "proxy protocol", false: "x-forwarded-for"}[pp]
		t.Run(name, func(t *testing.T) {
			p, sq, o := world(t, mode.URL, pp)
			c := p.client("127.0.0.9")
			pageURL := "http://www.site.test:" + o.Port + "/"
			for load := 1; load <= 2; load++ {
				html := get(t, c, pageURL, 200)
				got := vipURLRE.FindAllString(html, -1)
				want := []string{
					"http://192.0.2.12/static.other.test:" + o.Port + "/style.css",
					"http://192.0.2.12/www.site.test:" + o.Port + "/app.js",
					"http://192.0.2.12/img.cdn.test:" + o.Port + "/logo.png",
				}
				if !slices.Equal(got, want) {
					t.Fatalf("load %d: VIP-form URLs %q, want %q\n%s", load, got, want, html)
				}
				for _, keep := range []string{`<a href="http://www.site.test:` + o.Port + `/next.html">`, `src="https://img.cdn.test/secure.png"`} {
					if !strings.Contains(html, keep) {
						t.Errorf("load %d: %q was rewritten:\n%s", load, keep, html)
					}
				}
				if b := get(t, c, want[2], 200); b != "PNG-logo" {
					t.Errorf("logo = %q", b)
				}
				if b := get(t, c, want[1], 200); b != "console.log(1)" {
					t.Errorf("app.js = %q", b)
				}
				css := get(t, c, want[0], 200)
				if wantCSS := "body{background:url(http://192.0.2.12/static.other.test:" + o.Port + "/bg.png)}"; css != wantCSS {
					t.Errorf("css = %q, want %q", css, wantCSS)
				}
				if b := get(t, c, "http://192.0.2.12/static.other.test:"+o.Port+"/bg.png", 200); b != "PNG-bg" {
					t.Errorf("bg = %q", b)
				}
			}
			for _, k := range []string{"www.site.test/", "www.site.test/app.js", "static.other.test/style.css", "static.other.test/bg.png", "img.cdn.test/logo.png"} {
				if n := o.hitCount(k); n != 1 {
					t.Errorf("origin saw %s %d times, want 1 (second load from Squid's cache)", k, n)
				}
			}
			// Squid logs a transaction after it has answered: wait for the
			// last line.
			var lines []string
			hits := 0
			for try := 0; try < 100 && hits < 5; try++ {
				if try > 0 {
					time.Sleep(20 * time.Millisecond)
				}
				lines, hits = sq.AccessLog(t), 0
				for _, l := range lines {
					if f := strings.Fields(l); len(f) >= 7 && strings.Contains(f[3], "HIT") {
						hits++
					}
				}
			}
			if hits != 5 {
				t.Errorf("access.log has %d HITs, want 5:\n%s", hits, strings.Join(lines, "\n"))
			}
			for _, l := range lines {
				f := strings.Fields(l)
				if len(f) < 7 || f[6] == "error:transaction-end-before-headers" { // the readiness probe
					continue
				}
				if f[2] != "127.0.0.9" {
					t.Errorf("access.log client %q, want the subscriber 127.0.0.9: %s", f[2], l)
				}
			}
		})
	}
}

// TestVIPPathMappings: Location and Set-Cookie of a VIP-path response are
// mapped to the VIP form; only the site's own cookies go to it.
func TestVIPPathMappings(t *testing.T) {
	p, _, o := world(t, mode.URL, true)
	req, _ := http.NewRequest("GET", "http://192.0.2.12/www.site.test:"+o.Port+"/redirect", nil)
	req.Header.Set("Cookie", "www.site.test~"+o.Port+"|a=1; other.test|b=2")
	resp, err := p.client("127.0.0.9").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.Header.Get("Location"), "http://192.0.2.12/www.site.test:"+o.Port+"/app.js"; got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}
	if got, want := resp.Header.Get("Set-Cookie"), "www.site.test~"+o.Port+"|sid=1; Path=/www.site.test:"+o.Port+"/"; got != want {
		t.Errorf("Set-Cookie = %q, want %q", got, want)
	}
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "*" {
		t.Errorf("Access-Control-Allow-Origin = %q, want *", got)
	}
}

func get(t *testing.T, c *http.Client, url string, wantCode int) string {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != wantCode {
		t.Fatalf("GET %s: %s, want %d: %s", url, resp.Status, wantCode, b)
	}
	return string(b)
}

// TestPrivateOptOut: CacheKeeper's per-transaction opt-out (seed 000 §4)
// and a no-store request, through pepd and a real Squid, on the relay
// (plain GET) and on the standard library path (a GET with a body header
// the relay leaves to it): fetched from the origin every time and never
// served from the cache; the CK-Private token and pepd's Pep-Private mark
// never reach the origin; an ordinary request is cached (the control).
func TestPrivateOptOut(t *testing.T) {
	p, _, o := world(t, mode.URL, true)
	for _, tc := range []struct {
		name, obj, extra string
		cached           bool
	}{
		{"ordinary (control)", "img.cdn.test/logo.png", "User-Agent: MyApp/2.1\r\n", true},
		{"CK-Private", "static.other.test/bg.png", "User-Agent: MyApp/2.1 CK-Private\r\n", false},
		{"CK-Private, standard library path", "static.other.test/style.css", "User-Agent: MyApp/2.1 CK-Private\r\nExpect: 100-continue\r\nContent-Length: 0\r\n", false},
		{"no-store", "www.site.test/app.js", "User-Agent: MyApp/2.1\r\nCache-Control: no-store\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, path, _ := strings.Cut(tc.obj, "/")
			req := "GET /" + host + ":" + o.Port + "/" + path + " HTTP/1.1\r\nHost: 192.0.2.12\r\n" + tc.extra + "\r\n"
			for i := range 3 {
				if resp, body := p.raw(t, "127.0.0.9", req); resp.StatusCode != 200 {
					t.Fatalf("request %d: %d %q", i+1, resp.StatusCode, body)
				}
			}
			want := 3
			if tc.cached {
				want = 1
			}
			if got := o.hitCount(tc.obj); got != want {
				t.Errorf("origin saw %d requests, want %d", got, want)
			}
			h := o.lastHeader(tc.obj)
			if ua := h.Get("User-Agent"); ua != "MyApp/2.1" {
				t.Errorf("origin saw User-Agent %q, want %q", ua, "MyApp/2.1")
			}
			if v := h.Get("Pep-Private"); v != "" {
				t.Errorf("origin saw Pep-Private %q", v)
			}
		})
	}
}

// TestSameClickCollapsing: CacheKeeper's "same-click redundancy" (seed
// 000): 20 identical requests for a cacheable object arriving together
// (within a few ms, far inside the 200 ms window) reach the origin once
// through pepd and Squid (collapsed_forwarding on), each subscriber
// connection getting the whole object. Uncacheable duplicates (a no-store
// response) are not collapsed: Squid cannot share a response it may not
// store, so each reaches the origin.
func TestSameClickCollapsing(t *testing.T) {
	p, _, o := world(t, mode.URL, true)
	for _, tc := range []struct {
		obj, body string
		want      int
	}{{"img.cdn.test/click.png", "PNG-click", 1}, {"img.cdn.test/private.png", "PNG-private", 20}} {
		host, path, _ := strings.Cut(tc.obj, "/")
		url := "http://192.0.2.12/" + host + ":" + o.Port + "/" + path
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		start := time.Now()
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := p.client(fmt.Sprintf("127.0.1.%d", i+1)) // 20 subscribers
				resp, err := c.Get(url)
				if err != nil {
					errs <- err
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != tc.body {
					errs <- fmt.Errorf("%d %q", resp.StatusCode, b)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("%s: %v", tc.obj, err)
		}
		if got := o.hitCount(tc.obj); got != tc.want {
			t.Errorf("%s: the origin saw %d requests for 20 at once (in %s), want %d", tc.obj, got, time.Since(start).Round(time.Millisecond), tc.want)
		}
	}
}

// TestDNSPrefetch: when pepd rewrites a page in url mode it looks up the
// page's other hosts at once (dnsPrefetch), before the browser asks for
// any of their objects. Only the page is fetched; then the carrier
// resolver is stopped, and pepd's resolver still knows both hosts.
func TestDNSPrefetch(t *testing.T) {
	p, _, o, ns := worldDNS(t, mode.URL, true)
	get(t, p.client("127.0.0.9"), "http://www.site.test:"+o.Port+"/", 200)
	started := p.M.prefetch.WithLabelValues("started")
	deadline := time.Now().Add(testenv.Scale(5 * time.Second))
	for testutil.ToFloat64(started) < 2 || len(p.Proxy.dnsAhead) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("prefetch: %v started, %d running; want the page's 2 other hosts done", testutil.ToFloat64(started), len(p.Proxy.dnsAhead))
		}
		time.Sleep(5 * time.Millisecond)
	}
	ns.udp.Shutdown()
	ns.tcp.Shutdown()
	res := p.Proxy.settings.Load().Resolver
	for _, h := range []string{"static.other.test", "img.cdn.test"} {
		addrs, err := res.Lookup(context.Background(), h)
		if err != nil || len(addrs) != 1 || addrs[0].String() != originIP {
			t.Errorf("%s after the page alone, resolver stopped: %v %v, want %s from the cache", h, addrs, err, originIP)
		}
	}
	if o.hitCount("static.other.test/style.css") != 0 || o.hitCount("img.cdn.test/logo.png") != 0 {
		t.Errorf("objects fetched: the prefetch looks names up, it fetches nothing")
	}
}
