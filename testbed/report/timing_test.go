package report

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pep/testbed/har"
)

// testdata/golden.har is a load whose answer is worked out by hand (RTT
// 100 ms, onload at 850 ms):
//
//	0-350    document          dns 100, connect 100, wait 100, receive 50   conn 1
//	360-610  s.css  (document) blocked 10, connect 100, wait 100, receive 40 conn 2
//	365-500  j.js   (document) blocked 5, wait 100, receive 30             conn 1
//	510-820  data.json (j.js)  blocked 200, wait 100, receive 10           conn 1
//	620-800  bg.png (s.css)    wait 100, receive 80                        conn 2
//	860-965  favicon (after onload: left out)
//
// The longest chains are document -> s.css -> bg.png and document -> j.js
// -> data.json (3 levels); the latter ends later. The critical path is
// document -> j.js -> data.json (data.json ends last before onload).
func TestAnalyzeGolden(t *testing.T) {
	h, err := har.Read(filepath.Join("testdata", "golden.har"))
	if err != nil {
		t.Fatal(err)
	}
	l := Analyze(h, 100)
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("PLT", l.PLT, 850)
	if l.Requests != 5 || l.Network != 5 || l.Conns != 2 {
		t.Errorf("requests, network, conns = %d, %d, %d; want 5, 5, 2", l.Requests, l.Network, l.Conns)
	}
	near("RequestBound", l.RequestBound, 250) // 5 / 2 x 100 ms
	near("Queued", l.Queued, 215)
	if l.QueuedRequests != 1 {
		t.Errorf("QueuedRequests = %d, want 1 (data.json, 200 ms > 1 RTT)", l.QueuedRequests)
	}
	if l.MaxInFlight != 2 {
		t.Errorf("MaxInFlight = %d, want 2", l.MaxInFlight)
	}
	near("MeanInFlight", l.MeanInFlight, 1225.0/850)
	if l.Depth != 3 || !slices.Equal(l.Chain, []int{0, 2, 3}) {
		t.Errorf("depth %d chain %v, want 3 [0 2 3] (document, j.js, data.json)", l.Depth, l.Chain)
	}
	if l.ChainRTTs != 5 { // document: DNS, connect, request; j.js and data.json: a request each
		t.Errorf("ChainRTTs = %d, want 5", l.ChainRTTs)
	}
	if !slices.Equal(l.CriticalPath, []int{0, 2, 3}) {
		t.Errorf("critical path %v, want [0 2 3]", l.CriticalPath)
	}
	want := [NumPhases]float64{PhaseBrowser: 55, PhaseQueued: 205, PhaseHandshake: 200, PhaseWait: 300, PhaseTransfer: 90}
	var sum float64
	for p := range NumPhases {
		near("Critical["+PhaseNames[p]+"]", l.Critical[p], want[p])
		sum += l.Critical[p]
	}
	near("sum of the critical path", sum, l.PLT)
	if l.Bytes != 5000 {
		t.Errorf("Bytes = %d, want 5000", l.Bytes)
	}
}

// TestAnalyzeLCP: the LCP element's path splits LCP as the critical
// path splits PLT: the golden page's LCP (810 ms) is bg.png, named by
// s.css, named by the document.
func TestAnalyzeLCP(t *testing.T) {
	h, err := har.Read(filepath.Join("testdata", "golden.har"))
	if err != nil {
		t.Fatal(err)
	}
	if l := Analyze(h, 100); l.LCP != 0 || len(l.LCPPath) != 0 {
		t.Errorf("no LCP URL: LCP %v path %v, want none", l.LCP, l.LCPPath)
	}
	h.Log.Pages[0].PageTimings.LCPURL = "http://a.test/bg.png"
	l := Analyze(h, 100)
	if l.LCP != 810 || !slices.Equal(l.LCPPath, []int{0, 1, 4}) {
		t.Fatalf("LCP %v path %v, want 810 [0 1 4] (document, s.css, bg.png)", l.LCP, l.LCPPath)
	}
	// browser: 10 ms after each of the three ends (bg.png's decode and
	// paint the last); handshakes: the document's DNS and connect, the
	// stylesheet's connect; request+wait 100 ms each; transfer 50+40+80.
	want := [NumPhases]float64{PhaseBrowser: 30, PhaseQueued: 10, PhaseHandshake: 300, PhaseWait: 300, PhaseTransfer: 170}
	for p := range NumPhases {
		if math.Abs(l.LCPCritical[p]-want[p]) > 1e-6 {
			t.Errorf("LCPCritical[%s] = %v, want %v", PhaseNames[p], l.LCPCritical[p], want[p])
		}
	}
	h.Log.Pages[0].PageTimings.LCPURL = "http://a.test/elsewhere.png"
	if l := Analyze(h, 100); l.LCP != 0 {
		t.Errorf("an LCP URL not in the HAR: LCP %v, want 0 (unknown)", l.LCP)
	}
}

// TestAnalyzeHandshakeWait: over HTTP/2 one request opens the page's
// connection to an origin and the others wait for its handshake with
// blocked time only in their HAR timings; on the LCP element's path that
// wait is handshake time (Handshakes), and only what is left of the block
// after the handshake is queued. RTT 100 ms:
//
//	0-350    document    dns 100, connect 100, wait 100, receive 50      conn 1
//	360-680  a.png       connect 200 (TLS 100), wait 100, receive 20     conn 2
//	365-755  lcp.png     blocked 250 (handshake 360-560), wait 100, receive 40 conn 2
//
// LCP 770 (lcp.png), onload 800.
func TestAnalyzeHandshakeWait(t *testing.T) {
	doc := "http://a.test/"
	entry := func(url, typ, conn string, start float64, tm har.Timings) har.Entry {
		e := har.Entry{Start: start, Connection: conn, ResourceType: typ, Timings: tm, RequestID: url}
		e.Request.URL = url
		e.Response.Status = 200
		e.Time = max(tm.Blocked, 0) + max(tm.DNS, 0) + max(tm.Connect, 0) + max(tm.Send, 0) + tm.Wait + tm.Receive
		if url != doc {
			e.Initiator = har.Initiator{Type: "parser", URL: doc}
		}
		return e
	}
	h := &har.HAR{Log: har.Log{
		Pages: []har.Page{{ID: "page_1", PageTimings: har.PageTimings{OnLoad: 800, LCP: 770, LCPURL: "http://a.test/lcp.png"}}},
		Entries: []har.Entry{
			entry(doc, "Document", "1", 0, har.Timings{DNS: 100, Connect: 100, SSL: -1, Wait: 100, Receive: 50}),
			entry("http://a.test/a.png", "Image", "2", 360, har.Timings{DNS: -1, Connect: 200, SSL: 100, Wait: 100, Receive: 20}),
			entry("http://a.test/lcp.png", "Image", "2", 365, har.Timings{Blocked: 250, DNS: -1, Connect: -1, SSL: -1, Wait: 100, Receive: 40}),
		},
	}}
	if hs := Handshakes(h.Log.Entries); len(hs) != 2 || hs["2"] != (Span{360, 560}) {
		t.Fatalf("Handshakes = %v, want conn 1 0-200 and conn 2 360-560", hs)
	}
	l := Analyze(h, 100)
	if !slices.Equal(l.LCPPath, []int{0, 2}) {
		t.Fatalf("LCP path %v, want [0 2] (document, lcp.png)", l.LCPPath)
	}
	// browser: 15 ms from the document's end to lcp.png's start, 15 after
	// its end; queued: 560-615; handshakes: the document's 200 and
	// conn 2's 195 within lcp.png's block; request+wait 100 each;
	// transfer 50+40.
	want := [NumPhases]float64{PhaseBrowser: 30, PhaseQueued: 55, PhaseHandshake: 395, PhaseWait: 200, PhaseTransfer: 90}
	for p := range NumPhases {
		if math.Abs(l.LCPCritical[p]-want[p]) > 1e-6 {
			t.Errorf("LCPCritical[%s] = %v, want %v", PhaseNames[p], l.LCPCritical[p], want[p])
		}
	}
	if l.Queued != 250 {
		t.Errorf("Queued = %v, want 250 (HAR blocked, summed as the HAR has it)", l.Queued)
	}
}

func TestAnalyzeNotLoaded(t *testing.T) {
	h, err := har.Read(filepath.Join("testdata", "golden.har"))
	if err != nil {
		t.Fatal(err)
	}
	h.Log.Pages[0].PageTimings.OnLoad = -1
	l := Analyze(h, 100)
	near := math.Abs(l.PLT-965) < 1e-6
	if !near || l.Requests != 6 {
		t.Errorf("not loaded: PLT %v requests %d, want 965 (the last end) and 6 (all)", l.PLT, l.Requests)
	}
	var sum float64
	for _, c := range l.Critical {
		sum += c
	}
	if math.Abs(sum-l.PLT) > 1e-6 {
		t.Errorf("critical path sums to %v, want PLT %v", sum, l.PLT)
	}
}

func TestInFlightSteps(t *testing.T) {
	es := []har.Entry{{Start: 0, Time: 10}, {Start: 5, Time: 10, Timings: har.Timings{Blocked: 3}}, {Start: 10, Time: 1}}
	got := InFlight(es)
	want := []Step{{0, 1}, {5, 2}, {10, 2}, {11, 1}, {15, 0}}
	if !slices.Equal(got, want) {
		t.Errorf("InFlight = %v, want %v", got, want)
	}
	if got, want := Blocked(es), []Step{{0, 0}, {5, 1}, {8, 0}}; !slices.Equal(got, want) {
		t.Errorf("Blocked = %v, want %v", got, want)
	}
}

// TestGenerateWithHARs runs the report over results whose loads have
// HARs (the golden one for every load) and checks the section, the CSV
// and the plots.
func TestGenerateWithHARs(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join("testdata", "golden.har"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "golden.har"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := synthetic()
	for i := range r.Records {
		r.Records[i].HAR = "golden.har"
	}
	r.Records[0].HAR = "missing.har"
	md, err := Generate(r, dir)
	if err != nil {
		t.Fatal(err)
	}
	loaded := -1 // the record whose HAR is missing
	for _, rec := range r.Records {
		if rec.Loaded {
			loaded++
		}
	}
	for _, s := range []string{
		"### Where the time goes (a HAR per load)",
		"| url | 3 | 0.85 s |",
		"| url | 6 % | 24 % | 24 % | 35 % | 11 % |", // 55/850, 205/850, 200/850, 300/850, 90/850
		"HAR files that could not be read (1):",
		fmt.Sprintf("HAR files: %d loads, %.1f kB per load", loaded, float64(len(b))/1000),
	} {
		if !strings.Contains(string(md), s) {
			t.Errorf("report lacks %q", s)
		}
	}
	// The CSV: a row per loaded load with a HAR, every row as long as the
	// header; the golden load has no LCP URL (empty LCP cells) and all
	// its bytes over http (spliced 0).
	if f, err := os.Open(filepath.Join(dir, "paper-average-loads.csv")); err != nil {
		t.Error(err)
	} else {
		rows, err := csv.NewReader(f).ReadAll()
		f.Close()
		if err != nil || len(rows) != loaded+1 {
			t.Errorf("loads.csv: %d rows, %v; want the header and %d loads", len(rows), err, loaded)
		} else {
			col := map[string]int{}
			for i, h := range rows[0] {
				col[h] = i
			}
			for _, h := range []string{"vip_bytes", "spliced_bytes", "lcp_image_ms", "lcp_transfer_ms", "har"} {
				if _, ok := col[h]; !ok {
					t.Errorf("loads.csv has no column %s: %v", h, rows[0])
				}
			}
			if r := rows[1]; r[col["spliced_bytes"]] != "0" || r[col["lcp_image_ms"]] != "" || r[col["har"]] != "golden.har" {
				t.Errorf("loads.csv row %v: want spliced 0, no LCP image, har golden.har", r)
			}
		}
	}
	for _, f := range []string{"paper-average-loads.csv", "paper-average-critical.png", "paper-average-inflight.png", "paper-average-waterfall-direct.png", "paper-average-waterfall-url.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestModeOrder(t *testing.T) {
	got := modeOrder([]string{"url+opt+warm", "url+warm", "url+opt", "direct", "url", "off+opt", "off"})
	want := []string{"direct", "off", "url", "url+warm", "off+opt", "url+opt", "url+opt+warm"}
	if !slices.Equal(got, want) {
		t.Errorf("modeOrder = %v, want %v", got, want)
	}
}

// TestNavigationUpgrade: Chromium's HttpsUpgrades as seen in HARs of the
// testbed: an internal redirect to https, which succeeds (average cell) or
// is redirected back to http after 3 s (congested cell), or fails.
func TestNavigationUpgrade(t *testing.T) {
	doc := func(start, time float64, url, init string, status int64, errText string) har.Entry {
		in := har.Initiator{Type: "other", Line: -1}
		if init != "" {
			in = har.Initiator{Type: "redirect", URL: init, Line: -1}
		}
		return har.Entry{Start: start, Time: time, ResourceType: "Document", Request: har.Request{URL: url}, Initiator: in,
			Response: har.Response{Status: status}, Error: errText, Timings: har.Timings{Blocked: -1, DNS: -1, Connect: -1, SSL: -1, Receive: time}}
	}
	page := func(es ...har.Entry) *har.HAR {
		return &har.HAR{Log: har.Log{Pages: []har.Page{{PageTimings: har.PageTimings{OnLoad: 10000}}}, Entries: es}}
	}
	const h, s = "http://a.test/", "https://a.test/"
	ok := doc(45, 900, s, h, 200, "")
	ok.Timings.SSL = 400
	for _, tc := range []struct {
		name                      string
		h                         *har.HAR
		upgraded, https, fallback bool
		delay, tls                float64
	}{
		{"upgraded", page(doc(1, 3, h, "", 307, ""), ok), true, true, false, 44, 400},
		{"back to http after 3 s", page(doc(1, 43, h, "", 307, ""), doc(45, 3000, s, h, 307, ""), doc(3047, 900, h, s, 200, "")), true, false, true, 3046, 0},
		{"https failed", page(doc(1, 43, h, "", 307, ""), doc(45, 500, s, h, 0, "net::ERR_CONNECTION_REFUSED"), doc(600, 900, h, "", 200, "")), true, false, true, 599, 0},
		{"plain http", page(doc(1, 900, h, "", 200, "")), false, false, false, 0, 0},
	} {
		l := Analyze(tc.h, 100)
		if l.Upgraded != tc.upgraded || l.DocHTTPS != tc.https || l.Fallback != tc.fallback || l.DocDelay != tc.delay || l.DocTLS != tc.tls {
			t.Errorf("%s: upgraded %v https %v fallback %v delay %v tls %v; want %v %v %v %v %v", tc.name,
				l.Upgraded, l.DocHTTPS, l.Fallback, l.DocDelay, l.DocTLS, tc.upgraded, tc.https, tc.fallback, tc.delay, tc.tls)
		}
	}
}
