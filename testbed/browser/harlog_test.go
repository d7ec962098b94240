package browser

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pep/testbed/har"
	"pep/testbed/report"
)

// knownSite serves a page whose HAR is known: the document names a
// stylesheet (which names a background image), a script (which fetches
// one more object) and 12 images, each held 300 ms by the server, on the
// one host: more requests than the 6 connections Chromium opens per host,
// so that 6 of them must wait for a connection.
func knownSite(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	var imgs strings.Builder
	for i := range 12 {
		fmt.Fprintf(&imgs, `<img src="/img%d.png" width="10" height="10">`, i)
	}
	mux.HandleFunc("/page.html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><html><head><link rel="icon" href="data:,"><link rel="stylesheet" href="/s.css"></head>
<body><div class="bg">hello</div>%s<script src="/app.js"></script></body></html>`, imgs.String())
	})
	mux.HandleFunc("/s.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css")
		fmt.Fprint(w, `.bg { background: url(/bg.png); width: 10px; height: 10px }`)
	})
	mux.HandleFunc("/app.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, `fetch('/data.json').then(r => r.text()).then(t => { document.title = t; });`)
	})
	mux.HandleFunc("/data.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `"done"`)
	})
	png := func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/img") {
			select {
			case <-time.After(300 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "image/png")
		w.Write(make([]byte, 500))
	}
	mux.HandleFunc("/bg.png", png)
	for i := range 12 {
		mux.HandleFunc(fmt.Sprintf("/img%d.png", i), png)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// TestHARKnownPage loads knownSite's page in Chromium and checks its HAR:
// every request is there with the right initiator, the longest initiator
// chain is 3 (document -> stylesheet -> image, document -> script ->
// fetch), requests beyond the 6 connections were blocked in the browser,
// and the file reads back.
func TestHARKnownPage(t *testing.T) {
	needChromium(t)
	base := knownSite(t)
	ctx := context.Background()
	s, err := NewSession(ctx, Options{Log: testLogger(t), PageTimeout: 30 * time.Second, Settle: 300 * time.Millisecond, ProfileDir: t.TempDir(), HAR: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := s.Load(ctx, base+"/page.html")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Loaded || p.HAR == nil {
		t.Fatalf("not loaded (%q) or no HAR", p.Err)
	}
	path := filepath.Join(t.TempDir(), "page.har")
	if err := p.HAR.Write(path); err != nil {
		t.Fatal(err)
	}
	h, err := har.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	pg := h.Log.Pages[0]
	if pg.PageTimings.OnLoad <= 0 || pg.PageTimings.FCP <= 0 || pg.PageTimings.TTFB <= 0 {
		t.Errorf("page timings %+v: want onLoad, FCP and TTFB", pg.PageTimings)
	}
	byPath := map[string]har.Entry{}
	for _, e := range h.Log.Entries {
		path := strings.TrimPrefix(e.Request.URL, base)
		if _, dup := byPath[path]; dup {
			t.Errorf("%s requested twice", path)
		}
		byPath[path] = e
		if e.Response.Status != 200 || e.Error != "" {
			t.Errorf("%s: status %d, error %q", path, e.Response.Status, e.Error)
		}
		if e.Connection == "" || e.Protocol != "http/1.1" || e.Priority == "" || e.StartedDateTime == "" {
			t.Errorf("%s: connection %q protocol %q priority %q started %q", path, e.Connection, e.Protocol, e.Priority, e.StartedDateTime)
		}
		sum := 0.0
		for _, v := range []float64{e.Timings.Blocked, e.Timings.DNS, e.Timings.Connect, e.Timings.Send, e.Timings.Wait, e.Timings.Receive} {
			sum += max(v, 0)
		}
		if d := sum - e.Time; d > 0.01 || d < -0.01 {
			t.Errorf("%s: timings sum to %.3f ms, time %.3f ms", path, sum, e.Time)
		}
	}
	want := map[string]struct{ typ, parent string }{
		"/page.html": {"other", ""},
		"/s.css":     {"parser", "/page.html"},
		"/bg.png":    {"parser", "/s.css"},
		"/app.js":    {"parser", "/page.html"},
		"/data.json": {"script", "/app.js"},
	}
	for i := range 12 {
		want[fmt.Sprintf("/img%d.png", i)] = struct{ typ, parent string }{"parser", "/page.html"}
	}
	for path, w := range want {
		e, ok := byPath[path]
		if !ok {
			t.Errorf("%s: not in the HAR", path)
			continue
		}
		parent := ""
		if e.Initiator.URL != "" {
			parent = strings.TrimPrefix(e.Initiator.URL, base)
		}
		if e.Initiator.Type != w.typ || parent != w.parent {
			t.Errorf("%s: initiator %s %q, want %s %q", path, e.Initiator.Type, parent, w.typ, w.parent)
		}
	}
	if len(byPath) != len(want) || len(h.Log.Entries) != p.Requests {
		t.Errorf("HAR has %d requests (%d entries), want %d; the page counted %d", len(byPath), len(h.Log.Entries), len(want), p.Requests)
	}

	l := report.Analyze(h, 100)
	if l.Depth != 3 {
		t.Errorf("chain depth %d, want 3", l.Depth)
	}
	// 12 images held 300 ms each over at most 6 connections: at least 6
	// of them wait for a connection for most of a server's 300 ms.
	var blocked int
	for i := range 12 {
		if byPath[fmt.Sprintf("/img%d.png", i)].Timings.Blocked >= 200 {
			blocked++
		}
	}
	if blocked < 6 || l.Conns > 6 || l.QueuedRequests < 6 {
		t.Errorf("%d images blocked >= 200 ms, %d connections, %d requests queued > 1 RTT; want >= 6, <= 6, >= 6", blocked, l.Conns, l.QueuedRequests)
	}
	if l.MaxInFlight <= l.Conns {
		t.Errorf("at most %d requests in flight over %d connections: no queueing seen", l.MaxInFlight, l.Conns)
	}
	t.Logf("%d requests, %d connections, depth %d, %d blocked images, queued %.0f ms in all, max in flight %d", len(byPath), l.Conns, l.Depth, blocked, l.Queued, l.MaxInFlight)
}
