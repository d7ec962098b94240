package httpproxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"pep/internal/cputime"
	"pep/internal/hints"
	"pep/internal/mode"
	"pep/internal/testenv"
)

// hintPages are a page whose stylesheet names a font and an image, an
// uncacheable image, a page with a per-load query, and a page whose image
// goes stale in two seconds (fetch ahead).
var hintPages = map[string]page{
	"www.site.test/hint.html": {ctype: "text/html; charset=utf-8", body: `<!doctype html><html><head>
<link rel="stylesheet" href="http://static.other.test:PORT/hint.css"></head><body>
<img src="http://img.cdn.test:PORT/nostore.png"></body></html>`},
	"static.other.test/hint.css":   {ctype: "text/css", body: "@font-face{font-family:f;src:url(/font.woff2)}body{background:url(http://img.cdn.test:PORT/hint-bg.png)}"},
	"static.other.test/font.woff2": {ctype: "font/woff2", body: "wOF2-font"},
	"img.cdn.test/hint-bg.png":     {ctype: "image/png", body: "PNG-hint-bg"},
	"img.cdn.test/nostore.png":     {ctype: "image/png", body: "PNG-nostore", header: map[string]string{"Cache-Control": "no-store"}},
	"www.site.test/volatile.html":  {ctype: "text/html", body: "<html><script src=/app.js></script></html>"},
	"www.site.test/app.js":         {ctype: "application/javascript", body: "console.log(1)"},
	"img.cdn.test/px.gif?r=1":      {ctype: "image/gif", body: "GIF1"},
	"img.cdn.test/px.gif?r=2":      {ctype: "image/gif", body: "GIF2"},
	"img.cdn.test/px.gif?r=3":      {ctype: "image/gif", body: "GIF3"},
	"www.site.test/ahead.html":     {ctype: "text/html", body: "<html><img src=/ahead.png></html>"},
	"img.cdn.test/ahead.png":       {ctype: "image/png", body: "PNG-ahead", header: map[string]string{"Cache-Control": "max-age=2"}},
	"www.site.test/many.html":      {ctype: "text/html", body: "<html>six images</html>"},
}

func init() {
	for i := range 6 {
		hintPages[fmt.Sprintf("img.cdn.test/many-%d.png", i)] = page{ctype: "image/png", body: fmt.Sprintf("PNG-many-%d", i),
			header: map[string]string{"Cache-Control": "max-age=60"}}
	}
}

// hintsWorld is DNS, origin, a real Squid (PROXY protocol) and pepd in
// mode md with hints on (load window 1 s, fetch ahead bounded at 4 per
// subscriber; preloadAs as hints.Options.PreloadAs, nil: all), on the
// relay or the standard library path.
func hintsWorld(t *testing.T, md mode.Mode, stdlib bool, preloadAs ...string) (*pepd, *squid, *origin, *Hints) {
	t.Helper()
	ns, o, sq := siteStack(t, hintPages)
	port := o.Addr.Port()
	l := hints.New(hints.Options{LoadWindow: time.Second, PreloadAs: preloadAs})
	sw := hints.NewSwitch(true)
	m, err := hints.Register(prometheus.NewRegistry(), l, sw)
	if err != nil {
		t.Fatal(err)
	}
	h := &Hints{Learner: l, Switch: sw, Metrics: m, PrefetchPerSubscriber: 4, PrefetchMax: 16}
	p := startPepd(t, pepdOpts{squid: sq.Addr, proxyProtocol: true, resolver: ns.Addr, mode: md, stdlib: stdlib,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80, port}, hints: h})
	return p, sq, o, h
}

const navAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"

// fetch sends one browser-like request through c and returns the
// response's Link values; it fails t on a status other than 200.
func fetch(t *testing.T, c *http.Client, u, accept, referer, ua string) []string {
	t.Helper()
	r, _ := http.NewRequest("GET", u, nil)
	r.Header.Set("Accept", accept)
	r.Header.Set("User-Agent", ua)
	if referer != "" {
		r.Header.Set("Referer", referer)
	}
	return getOK(t, c, r).Header.Values("Link")
}

// getOK sends r through c, reads the whole body and returns the response
// (its body read and closed); it fails t on an error or a status other
// than 200.
func getOK(t *testing.T, c *http.Client, r *http.Request) *http.Response {
	t.Helper()
	resp, err := c.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", r.URL, resp.Status)
	}
	return resp
}

// waitLoads polls until the learner has folded n loads in (their window
// passed), at most 5 s scaled.
func waitLoads(t *testing.T, l *hints.Learner, n int64) {
	t.Helper()
	deadline := time.Now().Add(testenv.Scale(5 * time.Second))
	for {
		l.Flush(time.Now())
		if c := l.Counts(); c.Loads >= n {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("learner has %d loads after 5 s, want %d", c.Loads, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHintsThroughSquid: on both paths (the relay in url mode, where the
// browser asks for VIP-form URLs; the standard library path in off mode,
// origin-form URLs) a page whose stylesheet names a font and an image
// gets, on its second load by another subscriber, the stylesheet, the
// font (crossorigin) and the image hinted as Link fields on the document,
// not the no-store image; a CK-Private subscriber gets no hints; a
// subresource whose query changes on every load is not hinted from the
// third load on, a stable one is.
func TestHintsThroughSquid(t *testing.T) {
	for _, c := range []struct {
		name   string
		md     mode.Mode
		stdlib bool
	}{{"relay url mode", mode.URL, false}, {"stdlib off mode", mode.Off, true}} {
		t.Run(c.name, func(t *testing.T) {
			p, _, o, h := hintsWorld(t, c.md, c.stdlib)
			origin := func(host, path string) string { return "http://" + host + ":" + o.Port + path }
			asBrowser := origin
			if c.md == mode.URL {
				asBrowser = func(host, path string) string { return "http://192.0.2.12/" + host + ":" + o.Port + path }
			}
			doc, css := origin("www.site.test", "/hint.html"), asBrowser("static.other.test", "/hint.css")
			font, bg := asBrowser("static.other.test", "/font.woff2"), asBrowser("img.cdn.test", "/hint-bg.png")
			load := func(src, ua string) []string {
				c := p.client(src)
				links := fetch(t, c, doc, navAccept, "", ua)
				fetch(t, c, css, "text/css,*/*;q=0.1", doc, ua)
				fetch(t, c, font, "*/*", css, ua)
				fetch(t, c, bg, "image/avif,image/webp,*/*;q=0.8", css, ua)
				fetch(t, c, asBrowser("img.cdn.test", "/nostore.png"), "image/*", doc, ua)
				return links
			}
			if links := load("127.0.0.9", "Mozilla/5.0"); links != nil {
				t.Fatalf("first load got Link %q", links)
			}
			waitLoads(t, h.Learner, 1)
			want := []string{"<" + css + ">; rel=preload; as=style", "<" + font + ">; rel=preload; as=font; crossorigin",
				"<" + bg + ">; rel=preload; as=image"}
			if links := load("127.0.0.10", "Mozilla/5.0"); !slices.Equal(links, want) {
				t.Fatalf("second load's Link fields:\n%s\nwant:\n%s", strings.Join(links, "\n"), strings.Join(want, "\n"))
			}
			if links := load("127.0.0.11", "Mozilla/5.0 CK-Private"); links != nil {
				t.Errorf("CK-Private subscriber got Link %q", links)
			}
			// Volatile query: one subscriber, each navigation ends its
			// previous load.
			vdoc, app := origin("www.site.test", "/volatile.html"), asBrowser("www.site.test", "/app.js")
			var links []string
			for i := 1; i <= 3; i++ {
				cl := p.client("127.0.0.12")
				links = fetch(t, cl, vdoc, navAccept, "", "Mozilla/5.0")
				fetch(t, cl, app, "*/*", vdoc, "Mozilla/5.0")
				fetch(t, cl, asBrowser("img.cdn.test", "/px.gif?r="+string(rune('0'+i))), "image/*", vdoc, "Mozilla/5.0")
			}
			if want := []string{"<" + app + ">; rel=preload; as=script"}; !slices.Equal(links, want) {
				t.Errorf("third load of the volatile page: Link %q, want %q", links, want)
			}
			h.Learner.Flush(time.Now().Add(time.Minute))
			if c := h.Learner.Counts(); c.Used < 3 || c.Hinted < 4 {
				t.Errorf("counts %+v: want the 3 hints of the second load used", c)
			}
		})
	}
}

// TestHintsFetchAhead: when a document with hints arrives, pepd asks
// Squid for the hinted URLs as that subscriber (PROXY protocol: Squid logs
// the subscriber), so that the browser's own request is a cache hit: the
// image (max-age 2 s) went stale after the teaching load; the fetch ahead
// refreshes it from the origin; the browser's request then reaches Squid
// only (origin count unchanged, TCP_HIT or TCP_MEM_HIT in access.log).
// With hints.preload_as not naming images ("fetch only") the image gets
// no Link field and is fetched ahead all the same.
func TestHintsFetchAhead(t *testing.T) {
	for _, c := range []struct {
		name      string
		preloadAs []string
		links     int
	}{{"preloaded", nil, 1}, {"fetch only", []string{"style", "font"}, 0}} {
		t.Run(c.name, func(t *testing.T) {
			testFetchAhead(t, c.preloadAs, c.links)
		})
	}
}

func testFetchAhead(t *testing.T, preloadAs []string, wantLinks int) {
	p, sq, o, h := hintsWorld(t, mode.Off, false, preloadAs...)
	doc := "http://www.site.test:" + o.Port + "/ahead.html"
	img := "http://img.cdn.test:" + o.Port + "/ahead.png"
	c := p.client("127.0.0.13")
	fetch(t, c, doc, navAccept, "", "Mozilla/5.0")
	fetch(t, c, img, "image/*", doc, "Mozilla/5.0")
	waitLoads(t, h.Learner, 1)
	// Squid's freshness has a resolution of a second: 3.1 s makes the
	// object stale whatever the rounding, and max-age 2 (not 1) keeps the
	// refreshed copy fresh for the browser's request just after, even
	// when a second boundary falls between them (CI once saw max-age 1
	// refreshed twice, 11 ms apart).
	time.Sleep(3100 * time.Millisecond)
	c = p.client("127.0.0.14")
	if links := fetch(t, c, doc, navAccept, "", "Mozilla/5.0"); len(links) != wantLinks {
		t.Fatalf("second load's Link %q, want %d (the image)", links, wantLinks)
	}
	pf := h.Metrics.Prefetches
	deadline := time.Now().Add(testenv.Scale(5 * time.Second))
	for testutil.ToFloat64(pf.WithLabelValues("miss"))+testutil.ToFloat64(pf.WithLabelValues("hit")) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no fetch ahead finished after 5 s (error %v, busy %v)", testutil.ToFloat64(pf.WithLabelValues("error")),
				testutil.ToFloat64(pf.WithLabelValues("busy")))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := o.hitCount("img.cdn.test/ahead.png"); n != 2 {
		t.Fatalf("origin saw ahead.png %d times after the fetch ahead, want 2", n)
	}
	fetch(t, c, img, "image/*", doc, "Mozilla/5.0")
	if n := o.hitCount("img.cdn.test/ahead.png"); n != 2 {
		t.Errorf("origin saw ahead.png %d times after the browser's request, want 2 (a Squid hit)", n)
	}
	lines := accessLogWith(t, sq, 1, "127.0.0.14", "ahead.png", "HIT")
	var mine []string
	for _, l := range sq.AccessLog(t) {
		if strings.Contains(l, "ahead.png") && strings.Contains(l, " 127.0.0.14 ") {
			mine = append(mine, l)
		}
	}
	if len(mine) != 2 || !strings.Contains(strings.Fields(mine[1])[3], "HIT") {
		t.Errorf("access.log lines of 127.0.0.14 for ahead.png: want the fetch ahead then a HIT:\n%s\n(%d with HIT)", strings.Join(mine, "\n"), len(lines))
	}
}

// TestHintsFetchAheadBeyondBound: a page with six learned images, fetch
// ahead bounded at 4 in flight per subscriber: the document's workers
// fetch all six, none is dropped as busy.
func TestHintsFetchAheadBeyondBound(t *testing.T) {
	p, _, o, h := hintsWorld(t, mode.Off, false)
	doc := "http://www.site.test:" + o.Port + "/many.html"
	c := p.client("127.0.0.15")
	fetch(t, c, doc, navAccept, "", "Mozilla/5.0")
	for i := range 6 {
		fetch(t, c, fmt.Sprintf("http://img.cdn.test:%s/many-%d.png", o.Port, i), "image/*", doc, "Mozilla/5.0")
	}
	waitLoads(t, h.Learner, 1)
	if links := fetch(t, p.client("127.0.0.16"), doc, navAccept, "", "Mozilla/5.0"); len(links) != 6 {
		t.Fatalf("second load's Link %q, want the six images", links)
	}
	pf := h.Metrics.Prefetches
	done := func() float64 {
		return testutil.ToFloat64(pf.WithLabelValues("miss")) + testutil.ToFloat64(pf.WithLabelValues("hit"))
	}
	deadline := time.Now().Add(testenv.Scale(5 * time.Second))
	for done() < 6 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n, busy, errs := done(), testutil.ToFloat64(pf.WithLabelValues("busy")), testutil.ToFloat64(pf.WithLabelValues("error")); n != 6 || busy != 0 || errs != 0 {
		t.Errorf("fetches ahead: %v answered, %v busy, %v errors; want 6, 0, 0", n, busy, errs)
	}
}

// BenchmarkHintsCPU measures pepd's CPU (this process: client and pepd;
// Squid apart) per page load through the relay in off mode, with hints off
// and on (fetch ahead off, so that only the learner and the Link fields
// are counted): a load is the document (navigation Accept) and its
// stylesheet, font and image, all Squid hits; with hints on the document
// gets three Link fields and the learner records each response. Reported
// as cpu-µs/load beside ns/op; run with -benchtime=300x.
func BenchmarkHintsCPU(b *testing.B) {
	ns, o, sq := siteStack(b, hintPages)
	port := o.Addr.Port()
	l := hints.New(hints.Options{})
	sw := hints.NewSwitch(false)
	h := &Hints{Learner: l, Switch: sw}
	p := startPepd(b, pepdOpts{squid: sq.Addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.Off,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80, port}, hints: h,
		log: slog.New(slog.DiscardHandler)})
	c := p.client("127.0.0.20")
	doc := "http://www.site.test:" + o.Port + "/hint.html"
	css := "http://static.other.test:" + o.Port + "/hint.css"
	reqs := []struct{ u, accept, ref string }{{doc, navAccept, ""}, {css, "text/css,*/*;q=0.1", doc},
		{"http://static.other.test:" + o.Port + "/font.woff2", "*/*", css},
		{"http://img.cdn.test:" + o.Port + "/hint-bg.png", "image/*", css}}
	loadOnce := func() int {
		links := 0
		for i, r := range reqs {
			req, _ := http.NewRequest("GET", r.u, nil)
			req.Header.Set("Accept", r.accept)
			req.Header.Set("User-Agent", "Mozilla/5.0")
			if r.ref != "" {
				req.Header.Set("Referer", r.ref)
			}
			resp, err := c.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if i == 0 {
				links = len(resp.Header.Values("Link"))
			}
		}
		return links
	}
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			sw.Set(on)
			for range 5 { // fill Squid; teach the learner
				loadOnce()
			}
			if got := loadOnce(); on && got != 3 || !on && got != 0 {
				b.Fatalf("hints %v: %d Link fields on the document, want %d", on, got, map[bool]int{true: 3}[on])
			}
			cpu0, err := cputime.Of(os.Getpid())
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				loadOnce()
			}
			b.StopTimer()
			cpu1, _ := cputime.Of(os.Getpid())
			b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-µs/load")
		})
	}
}

// TestEarlyHintsHTTP2: a navigation to a VIP-path https URL (the one
// document request that reaches pepd over HTTP/2: the VIP's own TLS
// origin) whose page has hints gets them as a 103 Early Hints response
// before the final response, while the origin still holds the document
// (so before Squid's round trip ends), and as Link fields on the final
// response too; one 103 only. Over HTTP/1.1 on TLS there is no 103 (the
// Link fields come on the final response); a CK-Private subscriber gets
// neither.
func TestEarlyHintsHTTP2(t *testing.T) {
	var hold atomic.Pointer[chan struct{}]
	pages := maps.Clone(hintPages)
	pages["www.site.test/early.html"] = page{ctype: "text/html", header: map[string]string{"Cache-Control": "no-store"},
		body: `<html><link rel="stylesheet" href="http://static.other.test:PORT/hint.css"></html>`,
		wait: func() {
			if c := hold.Load(); c != nil {
				<-*c
			}
		}}
	ns, o, sq := siteStack(t, pages)
	port := o.Addr.Port()
	vipOrigin := "https://" + testVIP.String()
	l := hints.New(hints.Options{LoadWindow: time.Second, Origins: []string{vipOrigin}})
	sw := hints.NewSwitch(true)
	m, err := hints.Register(prometheus.NewRegistry(), l, sw)
	if err != nil {
		t.Fatal(err)
	}
	h := &Hints{Learner: l, Switch: sw, Metrics: m}
	p := startPepd(t, pepdOpts{squid: sq.Addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.URL,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80, port},
		origins: []string{vipOrigin}, vipNames: []string{"vip.test"}, hints: h})
	f := startTLSFront(t, p)
	vip := func(host, path string) string { return vipOrigin + "/" + host + ":" + o.Port + path }
	doc, css := vip("www.site.test", "/early.html"), vip("static.other.test", "/hint.css")
	font, bg := vip("static.other.test", "/font.woff2"), vip("img.cdn.test", "/hint-bg.png")
	want := []string{"<" + css + ">; rel=preload; as=style", "<" + font + ">; rel=preload; as=font; crossorigin",
		"<" + bg + ">; rel=preload; as=image"}

	// Teaching load over HTTP/2.
	c := f.client("127.0.0.9", "h2")
	fetch(t, c, doc, navAccept, "", "Mozilla/5.0")
	fetch(t, c, css, "text/css,*/*;q=0.1", doc, "Mozilla/5.0")
	fetch(t, c, font, "*/*", css, "Mozilla/5.0")
	fetch(t, c, bg, "image/avif,image/webp,*/*;q=0.8", css, "Mozilla/5.0")
	waitLoads(t, l, 1)

	// navigate requests doc with the client c, the origin holding the
	// document until the first 1xx arrived (or holdFor), and returns the 1xx codes with their Link fields and the final
	// response's proto and Link fields.
	type info struct {
		code  int
		links []string
	}
	navigate := func(c *http.Client, ua string, holdFor time.Duration) (early []info, proto string, final []string) {
		t.Helper()
		gate := make(chan struct{})
		hold.Store(&gate)
		defer hold.Store(nil)
		got := make(chan struct{}, 1)
		var mu sync.Mutex
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, hdr textproto.MIMEHeader) error {
			mu.Lock()
			early = append(early, info{code, hdr.Values("Link")})
			mu.Unlock()
			select {
			case got <- struct{}{}:
			default:
			}
			return nil
		}}
		go func() {
			select {
			case <-got:
			case <-time.After(holdFor):
			}
			close(gate)
		}()
		r, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", doc, nil)
		r.Header.Set("Accept", navAccept)
		r.Header.Set("User-Agent", ua)
		resp := getOK(t, c, r)
		mu.Lock()
		defer mu.Unlock()
		return early, resp.Proto, resp.Header.Values("Link")
	}
	early, proto, final := navigate(f.client("127.0.0.10", "h2"), "Mozilla/5.0", testenv.Scale(5*time.Second))
	if proto != "HTTP/2.0" {
		t.Fatalf("proto %s, want HTTP/2.0", proto)
	}
	if len(early) != 1 || early[0].code != http.StatusEarlyHints || !slices.Equal(early[0].links, want) {
		t.Fatalf("1xx responses before the document: %+v, want one 103 with\n%s", early, strings.Join(want, "\n"))
	}
	if !slices.Equal(final, want) {
		t.Errorf("final response's Link fields:\n%s\nwant:\n%s", strings.Join(final, "\n"), strings.Join(want, "\n"))
	}
	if n := testutil.ToFloat64(m.EarlyHints); n != 1 {
		t.Errorf("pep_hints_early_total %v, want 1", n)
	}

	early, proto, final = navigate(f.client("127.0.0.11", "http/1.1"), "Mozilla/5.0", 300*time.Millisecond)
	if proto != "HTTP/1.1" || len(early) != 0 || !slices.Equal(final, want) {
		t.Errorf("HTTP/1.1 over TLS: proto %s, 1xx %+v, final Link %q; want HTTP/1.1, no 1xx, the 3 Link fields", proto, early, final)
	}
	early, _, final = navigate(f.client("127.0.0.12", "h2"), "Mozilla/5.0 CK-Private", 300*time.Millisecond)
	if len(early) != 0 || final != nil {
		t.Errorf("CK-Private over HTTP/2: 1xx %+v, final Link %q; want none", early, final)
	}
	if n := testutil.ToFloat64(m.EarlyHints); n != 1 {
		t.Errorf("pep_hints_early_total %v after HTTP/1.1 and CK-Private, want 1", n)
	}
}

// BenchmarkHTMLHints measures the CPU (this process: client and pepd;
// Squid apart) per HTML response through the relay in url mode, with
// hints off and on: the same document (32 KiB, a Squid hit that pepd
// rewrites) requested as a navigation; with hints on the learner knows
// the page (20 subresources, so the document gets MaxHints = 20 Link
// fields) and the navigation starts a load, ends the previous one and
// writes the Link fields. The fetch ahead is off (it is one upstream
// request per hint, priced with the subresources it stands in for).
// After each document with hints, outside the measurement, the load's 20
// subresources are recorded in the learner directly so that the page
// keeps its hints. Off and on alternate document by document. CPU is
// getrusage's (user + system, microsecond resolution) summed over the
// documents only; reported per document with hints off and on
// (cpu-µs/html-off, cpu-µs/html-on) and their difference in per cent of
// off; ns/op is a pair of documents. PEP_BENCH_HINTS=off or on runs one
// arm only (for a -cpuprofile of each, compared with pprof -diff_base).
// Run:
//
//	go test -p 1 -run '^$' -bench HTMLHints -benchtime 3000x -count 5 ./internal/httpproxy/
func BenchmarkHTMLHints(b *testing.B) {
	var body strings.Builder
	body.WriteString("<!doctype html><html><head><title>bench</title>\n")
	for i := range 5 {
		fmt.Fprintf(&body, `<link rel="stylesheet" href="http://static.other.test:PORT/s%d.css">`+"\n", i)
	}
	body.WriteString(`<script src="http://static.other.test:PORT/app.js"></script></head><body>` + "\n")
	for i := 0; body.Len() < 32<<10; i++ {
		fmt.Fprintf(&body, `<div class="item"><a href="/article/%d.html">Article %d</a><img src="http://img.cdn.test:PORT/t/%d.jpg" alt="thumbnail %d">`+
			`<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.</p></div>`+"\n", i, i, i, i)
	}
	body.WriteString("</body></html>\n")
	pages := map[string]page{"www.site.test/bench.html": {ctype: "text/html; charset=utf-8", body: body.String(),
		header: map[string]string{"Cache-Control": "max-age=3600"}}}
	ns, o, sq := siteStack(b, pages)
	port := o.Addr.Port()
	l := hints.New(hints.Options{})
	sw := hints.NewSwitch(false)
	p := startPepd(b, pepdOpts{squid: sq.Addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.URL,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80, port},
		hints: &Hints{Learner: l, Switch: sw}, log: slog.New(slog.DiscardHandler)})
	const src = "127.0.0.21"
	sub := netip.MustParseAddr(src)
	c := p.client(src)
	doc := "http://www.site.test:" + o.Port + "/bench.html"
	var deps []string
	for i := range 20 {
		deps = append(deps, fmt.Sprintf("http://%s/img.cdn.test:%s/t/%d.jpg", testVIP, o.Port, i))
	}
	record := func() { // the load's subresources, as the browser would request them
		now := time.Now()
		for _, u := range deps {
			l.Subresource(sub, u, doc, "image/jpeg", 20000, true, now)
		}
	}
	rusage := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	get := func() (links, n int) {
		req, _ := http.NewRequest("GET", doc, nil)
		req.Header.Set("Accept", navAccept)
		req.Header.Set("User-Agent", "Mozilla/5.0")
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		m, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("GET %s: %s", doc, resp.Status)
		}
		return len(resp.Header.Values("Link")), int(m)
	}
	for range 3 { // Squid holds the document; the learner knows the page
		sw.Set(true)
		get()
		record()
	}
	sw.Set(false)
	if links, _ := get(); links != 0 {
		b.Fatalf("hints off: %d Link fields on the document", links)
	}
	sw.Set(true)
	links, n := get()
	record()
	if links != 20 || n < 32<<10 {
		b.Fatalf("hints on: %d Link fields on a document of %d bytes, want 20 on the 32 KiB page", links, n)
	}
	// The measured documents go over one kept-alive connection with a
	// minimal client (no header parsing beyond the framing), so that the
	// client's share of the CPU is small and does not grow with the Link
	// fields.
	conn, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).Dial("tcp", p.Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReaderSize(conn, 64<<10)
	u, _ := url.Parse(doc)
	reqBytes := []byte("GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\nAccept: " + navAccept +
		"\r\nUser-Agent: Mozilla/5.0\r\nAccept-Encoding: identity\r\n\r\n")
	buf := make([]byte, 64<<10)
	rawGet := func() (links int) {
		if _, err := conn.Write(reqBytes); err != nil {
			b.Fatal(err)
		}
		cl := -1
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				b.Fatal(err)
			}
			if len(line) <= 2 {
				break
			}
			if len(line) > 16 && strings.EqualFold(string(line[:15]), "content-length:") {
				cl, _ = strconv.Atoi(strings.TrimSpace(string(line[15:])))
			}
			if len(line) > 5 && strings.EqualFold(string(line[:5]), "link:") {
				links++
			}
		}
		if cl < 32<<10 {
			b.Fatalf("response without the document's Content-Length (%d)", cl)
		}
		if _, err := io.ReadFull(br, buf[:cl]); err != nil {
			b.Fatal(err)
		}
		return links
	}
	// Off and on alternate, document by document, so that the shared
	// machine's load drifts over both alike.
	var cpu [2]time.Duration
	b.ResetTimer()
	for range b.N {
		arms := []bool{false, true}
		switch os.Getenv("PEP_BENCH_HINTS") {
		case "off":
			arms = []bool{false}
		case "on":
			arms = []bool{true}
		}
		for _, on := range arms {
			i := map[bool]int{false: 0, true: 1}[on]
			sw.Set(on)
			c0 := rusage()
			links := rawGet()
			cpu[i] += rusage() - c0
			b.StopTimer()
			if want := map[bool]int{true: 20}[on]; links != want {
				b.Fatalf("hints %v: %d Link fields, want %d", on, links, want)
			}
			if on {
				record()
			}
			b.StartTimer()
		}
	}
	b.StopTimer()
	off, on := float64(cpu[0].Microseconds())/float64(b.N), float64(cpu[1].Microseconds())/float64(b.N)
	if off > 0 {
		b.ReportMetric(off, "cpu-µs/html-off")
	}
	if on > 0 {
		b.ReportMetric(on, "cpu-µs/html-on")
	}
	if off > 0 && on > 0 {
		b.ReportMetric(100*(on-off)/off, "%on-vs-off")
	}
}
