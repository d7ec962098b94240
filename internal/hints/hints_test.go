package hints

import (
	"fmt"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"
)

var (
	sub1 = netip.MustParseAddr("198.18.0.2")
	sub2 = netip.MustParseAddr("198.18.0.3")
	t0   = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
)

// loadPage runs one load of doc by sub at now: the document, then each
// subresource (url, content type) with the document as Referer; it returns
// the hints the document got.
func loadPage(l *Learner, sub netip.Addr, doc string, now time.Time, subs ...[2]string) []Hint {
	hs := l.Document(sub, doc, false, now)
	for i, s := range subs {
		l.Subresource(sub, s[0], doc, s[1], int64(1000*(i+1)), true, now.Add(time.Duration(i+1)*100*time.Millisecond))
	}
	return hs
}

func urls(hs []Hint) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Link())
	}
	return out
}

// TestSecondLoadHintsCSSDependencies: a page whose stylesheet names a font
// and an image: the first load teaches, the second gets the stylesheet,
// the font (with crossorigin) and the image hinted, styles and fonts first.
func TestSecondLoadHintsCSSDependencies(t *testing.T) {
	l := New(Options{})
	doc := "http://www.site.test/index.html"
	deps := [][2]string{
		{"http://cdn.site.test/site.css", "text/css"},
		{"http://cdn.site.test/font.woff2", "font/woff2"},
		{"http://cdn.site.test/bg.png", "image/png"},
	}
	if hs := loadPage(l, sub1, doc, t0, deps...); hs != nil {
		t.Fatalf("first load got hints %v", urls(hs))
	}
	hs := loadPage(l, sub2, doc, t0.Add(time.Minute), deps...)
	got := strings.Join(urls(hs), "\n")
	want := strings.Join([]string{
		"<http://cdn.site.test/site.css>; rel=preload; as=style",
		"<http://cdn.site.test/font.woff2>; rel=preload; as=font; crossorigin",
		"<http://cdn.site.test/bg.png>; rel=preload; as=image",
	}, "\n")
	if got != want {
		t.Fatalf("second load's hints:\n%s\nwant:\n%s", got, want)
	}
	l.Flush(t0.Add(time.Hour))
	c := l.Counts()
	if c.Hinted != 3 || c.Used != 3 || c.Unused != 0 || c.Loads != 2 {
		t.Errorf("counts %+v: want 3 hinted, 3 used, 0 unused, 2 loads", c)
	}
}

// TestVolatileQueryNotHinted: a URL whose query changes on every load
// (here a cache-buster parameter, r) is never hinted, not even on the
// second load; a document whose cache-buster changes is one page.
func TestVolatileQueryNotHinted(t *testing.T) {
	l := New(Options{})
	var hs []Hint
	for i := 0; i < 6; i++ {
		doc := fmt.Sprintf("http://www.site.test/?_=%d", 1764072000000+i)
		hs = loadPage(l, sub1, doc, t0.Add(time.Duration(i)*time.Minute),
			[2]string{"http://cdn.site.test/app.js", "text/javascript"},
			[2]string{fmt.Sprintf("http://ads.site.test/px.gif?r=%d", 7919*i), "image/gif"})
		if i > 0 && (len(hs) != 1 || hs[0].URL != "http://cdn.site.test/app.js") {
			t.Fatalf("load %d: hints %v, want the script alone", i+1, urls(hs))
		}
	}
	if k := PageKey("http://WWW.site.test/a?b=2&_=1&a=1&ts=9&id=17640720001234#x"); k != "http://www.site.test/a?a=1&b=2" {
		t.Errorf("PageKey = %q", k)
	}
}

// TestPrivateGetsNoHints: a CK-Private document gets no hints and teaches
// nothing; https, HTML and uncacheable responses are never learned.
func TestPrivateGetsNoHints(t *testing.T) {
	l := New(Options{})
	doc := "http://www.site.test/"
	for i := 0; i < 3; i++ {
		now := t0.Add(time.Duration(i) * time.Minute)
		l.Document(sub1, doc, false, now)
		l.Subresource(sub1, "http://cdn.site.test/a.css", doc, "text/css", 10, true, now)
		l.Subresource(sub1, "https://cdn.site.test/b.css", doc, "text/css", 10, true, now)
		l.Subresource(sub1, "http://cdn.site.test/frame.html", doc, "text/html", 10, true, now)
		l.Subresource(sub1, "http://cdn.site.test/nostore.js", doc, "text/javascript", 10, false, now)
	}
	if hs := l.Document(sub2, doc, true, t0.Add(time.Hour)); hs != nil {
		t.Fatalf("private load got hints %v", urls(hs))
	}
	l.Subresource(sub2, "http://cdn.site.test/private.css", doc, "text/css", 10, true, t0.Add(time.Hour))
	hs := l.Document(sub1, doc, false, t0.Add(2*time.Hour))
	if len(hs) != 1 || hs[0].URL != "http://cdn.site.test/a.css" {
		t.Fatalf("hints %v, want a.css alone", urls(hs))
	}
}

// TestEntriesAgeOut: a URL the page stops requesting stops being hinted
// once it is under Share of the recent loads, and is forgotten after
// Window loads without it.
func TestEntriesAgeOut(t *testing.T) {
	l := New(Options{Window: 4})
	doc := "http://www.site.test/"
	old := [2]string{"http://cdn.site.test/old.css", "text/css"}
	cur := [2]string{"http://cdn.site.test/new.css", "text/css"}
	for i := 0; i < 4; i++ {
		loadPage(l, sub1, doc, t0.Add(time.Duration(i)*time.Minute), old)
	}
	n := 4
	hinted := func() map[string]bool {
		m := map[string]bool{}
		for _, h := range l.Document(sub1, doc, false, t0.Add(time.Duration(n)*time.Minute)) {
			m[h.URL] = true
		}
		l.Subresource(sub1, cur[0], doc, cur[1], 1, true, t0.Add(time.Duration(n)*time.Minute))
		n++
		return m
	}
	if h := hinted(); !h[old[0]] {
		t.Fatal("old.css not hinted after 4 loads")
	}
	hinted()
	if h := hinted(); !h[old[0]] || !h[cur[0]] {
		t.Fatalf("after 2 loads without old.css (2 of 4 with it): %v, want both", h)
	}
	if h := hinted(); h[old[0]] {
		t.Fatal("old.css still hinted when 1 of the last 4 loads requested it")
	}
	hinted()
	l.Flush(t0.Add(time.Hour))
	if c := l.Counts(); c.URLs != 1 {
		t.Fatalf("%d entries after 4 loads without old.css, want 1 (new.css)", c.URLs)
	}
}

// TestBounds: MaxPages evicts the least recently loaded page, MaxURLs keeps
// the most often seen entries, LoadWindow ends a load, a foreign Referer is
// not attributed.
func TestBounds(t *testing.T) {
	l := New(Options{MaxPages: 2, MaxURLs: 2})
	for i, p := range []string{"a", "b", "c"} {
		loadPage(l, sub1, "http://"+p+".test/", t0.Add(time.Duration(i)*time.Minute), [2]string{"http://cdn.test/" + p + ".js", "text/javascript"})
	}
	l.Flush(t0.Add(time.Hour))
	if c := l.Counts(); c.Pages != 2 || c.Evicted != 1 {
		t.Fatalf("counts %+v: want 2 pages, 1 evicted", c)
	}
	doc := "http://d.test/"
	loadPage(l, sub1, doc, t0, [2]string{"http://cdn.test/1.js", "text/javascript"}, [2]string{"http://cdn.test/2.js", "text/javascript"})
	loadPage(l, sub1, doc, t0.Add(time.Minute), [2]string{"http://cdn.test/1.js", "text/javascript"}, [2]string{"http://cdn.test/3.js", "text/javascript"})
	// 1.js seen twice stays; of 2.js and 3.js (once each) the older goes.
	hs := l.Document(sub1, doc, false, t0.Add(2*time.Minute))
	if got := strings.Join(urls(hs), " "); !strings.Contains(got, "1.js") || strings.Contains(got, "2.js") {
		t.Fatalf("hints %q: want 1.js kept and 2.js evicted", got)
	}
	// Past LoadWindow, and with a foreign Referer, nothing is attributed.
	l.Subresource(sub1, "http://cdn.test/late.js", doc, "text/javascript", 1, true, t0.Add(2*time.Minute+31*time.Second))
	l.Document(sub1, doc, false, t0.Add(3*time.Minute))
	l.Subresource(sub1, "http://cdn.test/other.js", "http://elsewhere.test/", "text/javascript", 1, true, t0.Add(3*time.Minute))
	l.Flush(t0.Add(time.Hour))
	hs = l.Document(sub1, doc, false, t0.Add(4*time.Minute))
	for _, h := range hs {
		if strings.Contains(h.URL, "late.js") || strings.Contains(h.URL, "other.js") {
			t.Fatalf("hinted %s", h.URL)
		}
	}
}

// TestMaxHintBytes: the hints stop before their sizes pass MaxHintBytes.
func TestMaxHintBytes(t *testing.T) {
	l := New(Options{MaxHintBytes: 2500})
	doc := "http://www.site.test/"
	deps := [][2]string{{"http://c.test/1.css", "text/css"}, {"http://c.test/2.png", "image/png"}, {"http://c.test/3.png", "image/png"}}
	loadPage(l, sub1, doc, t0, deps...)
	loadPage(l, sub1, doc, t0.Add(time.Minute), deps...)
	hs := l.Document(sub1, doc, false, t0.Add(2*time.Minute))
	var sum int64
	for _, h := range hs {
		sum += h.Bytes
	}
	if len(hs) != 1 || sum > 2500 {
		t.Fatalf("hints %v (%d bytes), want 1.css alone (1000 bytes; 1.css+2.png = 3000)", urls(hs), sum)
	}
}

// BenchmarkLearnerMemory reports the learner's heap per 10,000 pages of 30
// subresources each, learned over 3 loads (run with -benchtime 1x).
func BenchmarkLearnerMemory(b *testing.B) {
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		l := New(Options{})
		now := t0
		for load := 0; load < 3; load++ {
			for p := 0; p < 10000; p++ {
				doc := fmt.Sprintf("http://www.site%d.test/", p)
				l.Document(sub1, doc, false, now)
				for s := 0; s < 30; s++ {
					l.Subresource(sub1, fmt.Sprintf("http://cdn%d.test/static/asset-%d.js", p%50, s), doc, "text/javascript", 5000, true, now)
				}
				now = now.Add(time.Millisecond)
			}
		}
		l.Flush(now.Add(time.Hour))
		runtime.GC()
		runtime.ReadMemStats(&after)
		c := l.Counts()
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB/10k-pages")
		b.ReportMetric(float64(c.URLs), "entries")
		runtime.KeepAlive(l)
	}
}

// BenchmarkDocument is the CPU cost of one document's hints (a page with
// 30 learned subresources) and of recording its 30 subresources.
func BenchmarkDocument(b *testing.B) {
	l := New(Options{})
	doc := "http://www.site.test/"
	var subs []string
	for s := 0; s < 30; s++ {
		subs = append(subs, fmt.Sprintf("http://cdn.test/static/asset-%d.js", s))
	}
	now := t0
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		l.Document(sub1, doc, false, now)
		for _, s := range subs {
			l.Subresource(sub1, s, doc, "text/javascript", 5000, true, now)
		}
		now = now.Add(time.Second)
	}
}

// TestVolatileQueryAtMostOnce: a subresource whose query changes on every
// load is hinted on the second load at most (one teaching load cannot tell
// it apart), never from the third on, while a stable one is.
func TestVolatileQueryAtMostOnce(t *testing.T) {
	l := New(Options{})
	doc := "http://www.site.test/"
	for i := 0; i < 5; i++ {
		hs := loadPage(l, sub1, doc, t0.Add(time.Duration(i)*time.Minute),
			[2]string{"http://cdn.site.test/app.js", "text/javascript"},
			[2]string{fmt.Sprintf("http://ads.site.test/px.gif?r=%d", 7919*i), "image/gif"})
		if i >= 2 && (len(hs) != 1 || hs[0].URL != "http://cdn.site.test/app.js") {
			t.Fatalf("load %d: hints %v, want the script alone", i+1, urls(hs))
		}
	}
	// A query change the learner cannot recognise (a short random
	// token) is hinted on the second load at most; a recognised one
	// (cache-buster name, ten or more digits) never.
	l = New(Options{})
	for i := 0; i < 4; i++ {
		hs := loadPage(l, sub1, doc, t0.Add(time.Duration(i)*time.Minute),
			[2]string{"http://cdn.site.test/app.js", "text/javascript"},
			[2]string{fmt.Sprintf("http://ads.site.test/px.gif?tok=%x", 7919*i), "image/gif"},
			[2]string{fmt.Sprintf("http://ads.site.test/b.gif?cb=%d", i), "image/gif"},
			[2]string{fmt.Sprintf("http://ads.site.test/c.gif?id=%d", 1764072000000+i), "image/gif"})
		want := []string{"<http://cdn.site.test/app.js>; rel=preload; as=script"}
		if i == 1 {
			want = append(want, "<http://ads.site.test/px.gif?tok=0>; rel=preload; as=image")
		}
		if i > 0 && strings.Join(urls(hs), "\n") != strings.Join(want, "\n") {
			t.Errorf("load %d: hints %v, want %v", i+1, urls(hs), want)
		}
	}
}

// TestOwnHTTPSOrigin: https URLs of Options.Origins (pepd's own VIP
// origin) are learned and hinted; other https URLs and look-alike hosts
// are not.
func TestOwnHTTPSOrigin(t *testing.T) {
	l := New(Options{Origins: []string{"https://192.0.2.12"}})
	doc := "http://www.site.test/"
	deps := [][2]string{
		{"https://192.0.2.12/cdn.site.test/a.css", "text/css"},
		{"https://192.0.2.123/cdn.site.test/b.css", "text/css"},
		{"https://cdn.site.test/c.css", "text/css"},
	}
	loadPage(l, sub1, doc, t0, deps...)
	hs := loadPage(l, sub1, doc, t0.Add(time.Minute), deps...)
	if len(hs) != 1 || hs[0].URL != deps[0][0] {
		t.Fatalf("hints %v, want the VIP's https URL alone", urls(hs))
	}
}

// TestInLoad: a document requested during a load with a Referer of the
// load (a frame) is in it; one without a Referer, from another host, or
// after LoadWindow is not.
func TestInLoad(t *testing.T) {
	l := New(Options{LoadWindow: 10 * time.Second})
	doc := "http://www.site.test/"
	l.Document(sub1, doc, false, t0)
	l.Subresource(sub1, "http://cdn.site.test/a.js", doc, "text/javascript", 1, true, t0.Add(time.Second))
	for _, c := range []struct {
		sub     netip.Addr
		referer string
		at      time.Duration
		want    bool
	}{
		{sub1, doc, time.Second, true},
		{sub1, "http://cdn.site.test/a.js", time.Second, true},
		{sub1, "", time.Second, false},
		{sub1, "http://elsewhere.test/", time.Second, false},
		{sub2, doc, time.Second, false},
		{sub1, doc, 11 * time.Second, false},
	} {
		if got := l.InLoad(c.sub, c.referer, t0.Add(c.at)); got != c.want {
			t.Errorf("InLoad(%v, %q, +%v) = %v, want %v", c.sub, c.referer, c.at, got, c.want)
		}
	}
}

// TestOwnHTTPSDocument: a document on one of Options.Origins (a VIP-path
// https URL, the one document pepd serves over HTTP/2) is a page of its
// own and gets hints; an https document elsewhere is never learned.
func TestOwnHTTPSDocument(t *testing.T) {
	l := New(Options{Origins: []string{"https://192.0.2.12"}})
	dep := [2]string{"https://192.0.2.12/cdn.site.test/a.css", "text/css"}
	for _, c := range []struct {
		doc  string
		want int
	}{{"https://192.0.2.12/www.site.test/", 1}, {"https://www.site.test/", 0}} {
		loadPage(l, sub1, c.doc, t0, dep)
		if hs := loadPage(l, sub2, c.doc, t0.Add(time.Minute), dep); len(hs) != c.want {
			t.Errorf("%s: second load's hints %v, want %d", c.doc, urls(hs), c.want)
		}
	}
}

// TestResetEndsLoads: Reset counts the hints of the loads in progress as
// used or unused (the testbed's DELETE /hints after a session counts its
// last load) and then forgets every page.
func TestResetEndsLoads(t *testing.T) {
	l := New(Options{})
	doc := "http://www.site.test/"
	deps := [][2]string{{"http://cdn.site.test/a.css", "text/css"}, {"http://cdn.site.test/b.png", "image/png"}}
	loadPage(l, sub1, doc, t0, deps...)
	if hs := loadPage(l, sub2, doc, t0.Add(time.Minute), deps[0]); len(hs) != 2 {
		t.Fatalf("second load's hints %v, want 2", urls(hs))
	}
	l.Reset()
	c := l.Counts()
	if c.Used != 1 || c.Unused != 1 || c.UnusedBytes != 2000 || c.Pages != 0 {
		t.Errorf("after Reset: %+v, want used 1, unused 1 of 2000 bytes, no page", c)
	}
	if hs := loadPage(l, sub1, doc, t0.Add(2*time.Minute), deps...); hs != nil {
		t.Errorf("hints after Reset: %v", urls(hs))
	}
}

// BenchmarkDocumentOnly measures Document alone for a page with 20
// hints (the HTML response's share of the learner's cost); the load's
// subresources are recorded outside the timer.
func BenchmarkDocumentOnly(b *testing.B) {
	l := New(Options{})
	doc := "http://www.site.test:8080/index.html"
	var subs []string
	for s := 0; s < 20; s++ {
		subs = append(subs, fmt.Sprintf("http://192.0.2.12/img.cdn.test:8080/t/%d.jpg", s))
	}
	now := t0
	record := func() {
		for _, s := range subs {
			l.Subresource(sub1, s, doc, "image/jpeg", 20000, true, now)
		}
	}
	l.Document(sub1, doc, false, now)
	record()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Second)
		if hs := l.Document(sub1, doc, false, now); len(hs) != 20 {
			b.Fatalf("%d hints, want 20", len(hs))
		}
		b.StopTimer()
		record()
		b.StartTimer()
	}
}

// TestHostOf: hostOf agrees with url.Parse's Hostname, lower-cased.
func TestHostOf(t *testing.T) {
	for _, raw := range []string{"http://www.site.test/", "http://WWW.Site.TEST:8080/a?b#c", "https://192.0.2.12/cdn.test:81/x",
		"http://user:pw@host.test:80/x", "http://[2001:db8::1]:8080/x", "http://[2001:DB8::1]/", "http://host.test", "http://host.test?q",
		"http://host.test#f"} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := hostOf(raw), strings.ToLower(u.Hostname()); got != want {
			t.Errorf("hostOf(%q) = %q, want %q", raw, got, want)
		}
	}
	for _, raw := range []string{"", "www.site.test/x", "/path", "://x"} {
		if got := hostOf(raw); got != "" {
			t.Errorf("hostOf(%q) = %q, want \"\"", raw, got)
		}
	}
}

// TestHintOrder: the hints come by kind (styles, fonts, scripts, images)
// and, within a kind, in the order recent loads received them, not by
// name; the caps keep the URLs the most loads requested, whatever their
// place.
func TestHintOrder(t *testing.T) {
	doc := "http://www.site.test/"
	first := [][2]string{
		{"http://cdn.site.test/z-hero.jpg", "image/jpeg"},
		{"http://cdn.site.test/m-logo.png", "image/png"},
		{"http://cdn.site.test/app.js", "text/javascript"},
		{"http://cdn.site.test/a-footer.gif", "image/gif"},
		{"http://cdn.site.test/site.css", "text/css"},
	}
	// Later loads get the two first images the other way round: a place is
	// the mean over the loads, the newest weighing half.
	later := [][2]string{first[1], first[0], first[2], first[3], first[4]}
	l := New(Options{})
	loadPage(l, sub1, doc, t0, first...)
	hs := loadPage(l, sub1, doc, t0.Add(time.Minute), first...)
	want := []string{"site.css", "app.js", "z-hero.jpg", "m-logo.png", "a-footer.gif"}
	check := func(what string, hs []Hint, want []string) {
		t.Helper()
		var got []string
		for _, h := range hs {
			got = append(got, strings.TrimPrefix(h.URL, "http://cdn.site.test/"))
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: hints %v, want %v", what, got, want)
		}
	}
	check("second load", hs, want)
	for i := 2; i < 4; i++ {
		loadPage(l, sub1, doc, t0.Add(time.Duration(i)*time.Minute), later...)
	}
	// z-hero's place is now (0+0)/2 = 0, then (0+1)/2, then (0.5+1)/2 =
	// 0.75; m-logo's 1, 0.5, 0.25.
	hs = loadPage(l, sub1, doc, t0.Add(4*time.Minute), later...)
	check("after two loads in the other order", hs, []string{"site.css", "app.js", "m-logo.png", "z-hero.jpg", "a-footer.gif"})

	// Caps: the hero image, first among the images but requested in fewer
	// loads, gives way to the ones every load requested.
	l = New(Options{MaxHints: 3})
	for i := 0; i < 4; i++ {
		deps := first[1:]
		if i%2 == 0 {
			deps = first
		}
		hs = loadPage(l, sub1, doc, t0.Add(time.Duration(i)*time.Minute), deps...)
	}
	check("capped at 3", hs, []string{"site.css", "app.js", "m-logo.png"})
}

// TestPreloadAsFetchOnly: with PreloadAs style and font, a page whose
// stylesheet names a font and an image gets the stylesheet and the font as
// preloads on its second load and the image as fetch-only (Preload false,
// in the browser's order after them); only the preloads count as hints,
// and the image, requested by the load, counts neither used nor unused.
func TestPreloadAsFetchOnly(t *testing.T) {
	l := New(Options{PreloadAs: []string{"style", "font"}})
	doc := "http://www.site.test/index.html"
	deps := [][2]string{
		{"http://cdn.site.test/bg.png", "image/png"},
		{"http://cdn.site.test/site.css", "text/css"},
		{"http://cdn.site.test/font.woff2", "font/woff2"},
	}
	loadPage(l, sub1, doc, t0, deps...)
	hs := loadPage(l, sub2, doc, t0.Add(time.Minute), deps...)
	var got []string
	for _, h := range hs {
		got = append(got, fmt.Sprintf("%s %s %v", h.URL, h.As, h.Preload))
	}
	want := []string{"http://cdn.site.test/site.css style true", "http://cdn.site.test/font.woff2 font true",
		"http://cdn.site.test/bg.png image false"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("second load's hints:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	l.Flush(t0.Add(time.Hour))
	if c := l.Counts(); c.Hinted != 2 || c.HintedLoads != 1 || c.Used != 2 || c.Unused != 0 {
		t.Errorf("counts %+v: want 2 hinted (the preloads), 2 used, 1 hinted load", c)
	}
	// A page with only images learned gets them fetched ahead, no preload.
	img := "http://www.site.test/gallery.html"
	loadPage(l, sub1, img, t0.Add(2*time.Hour), deps[0])
	hs = loadPage(l, sub2, img, t0.Add(3*time.Hour), deps[0])
	if len(hs) != 1 || hs[0].Preload {
		t.Errorf("images-only page's hints %+v: want the image, fetch only", hs)
	}
	if c := l.Counts(); c.HintedLoads != 1 {
		t.Errorf("hinted loads %d after a page with no preload, want 1", c.HintedLoads)
	}
}
