package origin

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"pep/testbed/corpus"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// recorded is a page with recorded WARC-style headers beside the default
// corpus.
func recordedPage() *corpus.Page {
	return &corpus.Page{Name: "rec", URL: "http://rec.example/", Host: "rec.example", Objects: []*corpus.Object{
		{Host: "rec.example", Path: "/", Body: []byte("<p>rec</p>"), Status: 200, ContentType: "text/html; charset=utf-8",
			Header: http.Header{"Content-Type": {"text/html; charset=utf-8"}, "Cache-Control": {"private"},
				"Date": {"Mon, 11 Apr 2011 10:00:00 GMT"}, "Expires": {"Mon, 11 Apr 2011 11:00:00 GMT"}, "X-Recorded": {"yes"}}},
		{Host: "rec.example", Path: "/old", Status: 301, ContentType: "text/html",
			Header: http.Header{"Location": {"http://rec.example/"}}, Body: []byte("moved")},
	}}
}

// startOrigin serves c on loopback HTTP and HTTPS listeners (ephemeral
// ports) until the test ends.
func startOrigin(t *testing.T, c *corpus.Corpus, plan *corpus.Plan) (*Origin, string, string) {
	t.Helper()
	return startOriginWith(t, Config{Corpus: c, Plan: plan})
}

func startOriginWith(t *testing.T, cfg Config) (*Origin, string, string) {
	t.Helper()
	cfg.Logger = testLogger(t)
	o, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	secure, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Serve(ctx, plain, secure) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return o, plain.Addr().String(), secure.Addr().String()
}

func testCorpus() *corpus.Corpus {
	d := corpus.Default()
	return corpus.New("test", append(append([]*corpus.Page(nil), d.Pages...), recordedPage()), corpus.ImportStats{})
}

func get(t *testing.T, client *http.Client, url, host string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestServeByHost(t *testing.T) {
	c := testCorpus()
	o, addr, _ := startOrigin(t, c, nil)
	// No Accept-Encoding (Go's transport would add gzip): identity bodies;
	// TestGzip covers the compressed ones.
	client := &http.Client{Transport: &http.Transport{DisableCompression: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	yahoo, _ := c.Lookup("www.yahoo.com", "/index.html")
	css := c.Pages[0].Objects[1]
	etag := ""
	for _, tc := range []struct {
		name, host, target string
		hdr                map[string]string
		status             int
		want               map[string]string // headers; "*" means present
		body               string
	}{
		{name: "page by Host", host: "www.yahoo.com", target: "/index.html", status: 200, body: string(yahoo.Body),
			want: map[string]string{"Content-Type": "text/html", "Cache-Control": "public, max-age=86400",
				"Last-Modified": "Fri, 08 Apr 2011 00:00:00 GMT", "ETag": "*", "Content-Length": fmt.Sprint(len(yahoo.Body))}},
		{name: "Host with port and upper case", host: "WWW.YAHOO.COM:80", target: "/index.html", status: 200, body: string(yahoo.Body)},
		{name: "style sheet on another host", host: css.Host, target: css.Path, status: 200, body: string(css.Body),
			want: map[string]string{"Content-Type": "text/css"}},
		{name: "page path on the wrong host", host: "l.yimg.com", target: "/index.html", status: 404,
			want: map[string]string{"Cache-Control": "no-store"}, body: "replay: no object for l.yimg.com/index.html\n"},
		{name: "unknown host", host: "www.example.org", target: "/", status: 404, body: "replay: no object for www.example.org/\n"},
		{name: "recorded headers", host: "rec.example", target: "/", status: 200, body: "<p>rec</p>",
			want: map[string]string{"Content-Type": "text/html; charset=utf-8", "Cache-Control": "private", "X-Recorded": "yes", "ETag": "", "Last-Modified": ""}},
		{name: "recorded redirect", host: "rec.example", target: "/old", status: 301, body: "moved",
			want: map[string]string{"Location": "http://rec.example/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, client, "http://"+addr+tc.target, tc.host, tc.hdr)
			if resp.StatusCode != tc.status || body != tc.body {
				t.Errorf("got %d %.60q, want %d %.60q", resp.StatusCode, body, tc.status, tc.body)
			}
			for k, v := range tc.want {
				got := resp.Header.Get(k)
				if (v == "*" && got == "") || (v != "*" && got != v) {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if tc.name == "page by Host" {
				etag = resp.Header.Get("ETag")
			}
		})
	}
	// Expires keeps the recorded lifetime (1 h) from now.
	resp, _ := get(t, client, "http://"+addr+"/", "rec.example", nil)
	exp, err := http.ParseTime(resp.Header.Get("Expires"))
	if d := time.Until(exp); err != nil || d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("Expires %q is %v from now, want 1h", resp.Header.Get("Expires"), d)
	}
	// Conditional requests revalidate.
	resp, body := get(t, client, "http://"+addr+"/index.html", "www.yahoo.com", map[string]string{"If-None-Match": etag})
	if resp.StatusCode != http.StatusNotModified || body != "" {
		t.Errorf("If-None-Match: %d %q, want 304", resp.StatusCode, body)
	}
	resp, _ = get(t, client, "http://"+addr+"/index.html", "www.yahoo.com", map[string]string{"If-Modified-Since": "Sat, 09 Apr 2011 00:00:00 GMT"})
	if resp.StatusCode != http.StatusNotModified {
		t.Errorf("If-Modified-Since: %d, want 304", resp.StatusCode)
	}

	st := o.Stats()
	if st.Requests != 10 || st.Misses != 2 || st.Hosts["www.example.org"].Misses != 1 || st.Hosts["l.yimg.com"].Misses != 1 {
		t.Errorf("stats = %+v", st.Counts)
	}
	if st.Bytes != int64(2*len(yahoo.Body)+len(css.Body)+len("<p>rec</p>")*2+len("moved")) {
		t.Errorf("bytes = %d", st.Bytes)
	}
}

func TestMissCountingAndEndpoint(t *testing.T) {
	c := testCorpus()
	o, addr, _ := startOrigin(t, c, nil)
	client := &http.Client{}
	for _, r := range []struct{ host, target, referer string }{
		{"www.cnn.com", "/favicon.ico", ""},                                // top-level host: cnn
		{"i.cnn.net", "/js/built-by-script.js?r=1", "http://www.cnn.com/"}, // referer: cnn
		{"i.cnn.net", "/js/built-by-script.js?r=1", "http://www.cnn.com/"}, // same miss again
		{"media-1.britannica.com", "/x.gif", "http://css.eb.com/a.css"},    // referer host of one page
		{"www.example.org", "/beacon", ""},                                 // unknown
		{"www.yahoo.com", "/index.html", ""},                               // a hit
	} {
		get(t, client, "http://"+addr+r.target, r.host, map[string]string{"Referer": r.referer})
	}
	resp, body := get(t, client, "http://"+addr+StatsPath, "anything", nil)
	var st Stats
	if err := json.Unmarshal([]byte(body), &st); err != nil || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("stats endpoint: %v %q", err, body)
	}
	want := map[string]Counts{
		"cnn":        {Requests: 3, Misses: 3},
		"britannica": {Requests: 1, Misses: 1},
		"":           {Requests: 1, Misses: 1},
		"yahoo":      {Requests: 1, Bytes: st.Pages["yahoo"].Bytes},
	}
	for page, w := range want {
		if st.Pages[page] != w {
			t.Errorf("page %q = %+v, want %+v", page, st.Pages[page], w)
		}
	}
	if st.Pages["yahoo"].Bytes == 0 || st.Misses != 5 {
		t.Errorf("total = %+v", st.Counts)
	}
	if len(st.MissList) != 4 || st.MissList[0] != (Miss{Host: "i.cnn.net", Target: "/js/built-by-script.js?r=1", Page: "cnn", Count: 2}) {
		t.Errorf("miss list = %+v", st.MissList)
	}
	if got := o.Stats(); got.Misses != 5 {
		t.Errorf("Stats().Misses = %d, want 5", got.Misses)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+ResetPath, nil)
	if resp, err := client.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("reset: %v %v", resp, err)
	}
	if got := o.Stats(); got.Requests != 0 || len(got.MissList) != 0 {
		t.Errorf("after reset: %+v", got)
	}
	resp, body = get(t, client, "http://"+addr+PagesPath, "x", nil)
	var pages []corpus.Summary
	if err := json.Unmarshal([]byte(body), &pages); err != nil || len(pages) != 4 || pages[0] != c.Pages[0].Summary() {
		t.Errorf("pages endpoint: %v %s", err, body)
	}
}

func TestTLS(t *testing.T) {
	c := testCorpus()
	o, _, saddr := startOrigin(t, c, nil)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := o.CA().WriteFile(caFile); err != nil {
		t.Fatal(err)
	}
	pemBytes, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatal("CA file holds no certificate")
	}
	for _, proto := range []string{"HTTP/2.0", "HTTP/1.1"} {
		t.Run(proto, func(t *testing.T) {
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "www.britannica.com"}, ForceAttemptHTTP2: proto == "HTTP/2.0"}
			if proto == "HTTP/1.1" {
				tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
			}
			defer tr.CloseIdleConnections()
			resp, body := get(t, &http.Client{Transport: tr}, "https://"+saddr+"/index.html", "www.britannica.com", nil)
			want, _ := c.Lookup("www.britannica.com", "/index.html")
			if resp.StatusCode != 200 || body != string(want.Body) || resp.Proto != proto {
				t.Fatalf("got %d %s, %d bytes", resp.StatusCode, resp.Proto, len(body))
			}
			leaf := resp.TLS.PeerCertificates[0]
			if err := leaf.VerifyHostname("www.britannica.com"); err != nil {
				t.Error(err)
			}
			sum := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
			if got := base64.StdEncoding.EncodeToString(sum[:]); got != o.CA().SPKIHash() {
				t.Errorf("leaf SPKI %s, SPKIHash %s", got, o.CA().SPKIHash())
			}
		})
	}
	// A client that does not trust the CA fails.
	conn, err := tls.Dial("tcp", saddr, &tls.Config{ServerName: "www.yahoo.com"})
	if err == nil {
		conn.Close()
		t.Error("handshake succeeded without the test CA")
	}
}

// TestHostFromLocalAddress: a request whose Host is an IP address is
// served for the hostname planned at the connection's local address.
func TestHostFromLocalAddress(t *testing.T) {
	c := testCorpus()
	plan, err := corpus.NewPlan([]string{"www.yahoo.com"}, netip.MustParsePrefix("127.0.0.0/30"), 1)
	if err != nil {
		t.Fatal(err)
	}
	_, addr, _ := startOrigin(t, c, plan) // listens on 127.0.0.1 = www.yahoo.com
	resp, _ := get(t, &http.Client{}, "http://"+addr+"/index.html", "127.0.0.1", nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html" {
		t.Errorf("got %d %s, want the yahoo page", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// TestAnyIPRoute shows the testbed requirement: with a local route for the
// origin prefix ("ip route add local 198.19.0.0/16 dev lo"), one listener
// on 0.0.0.0:80 answers every origin address. Runs as root in a fresh
// network namespace.
func TestAnyIPRoute(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace and a local route")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("iproute2 not installed")
	}
	c := testCorpus()
	plan, err := corpus.PlanFor(c, corpus.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New() // unnamed: gone with its last reference
	if err != nil {
		t.Fatal(err)
	}
	defer func() { netns.Set(orig); ns.Close() }() //nolint:errcheck // best effort back to the test's namespace
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"route", "add", "local", "198.19.0.0/16", "dev", "lo"}} {
		// exec runs the child on this locked thread, so in the new namespace.
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	l, err := net.Listen("tcp", "0.0.0.0:80")
	if err != nil {
		t.Fatal(err)
	}
	o, err := New(Config{Corpus: c, Plan: plan, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Serve(ctx, l, nil) }()
	defer func() { cancel(); <-done }()
	for _, host := range []string{"www.cnn.com", "i.cdn.turner.com", "www.merriam-webster.com"} {
		a, _ := plan.Addr(host)
		conn, err := net.Dial("tcp", netip.AddrPortFrom(a, 80).String()) // socket made on this thread
		if err != nil {
			t.Fatalf("%s at %s: %v", host, a, err)
		}
		// Host is the bare address: the origin maps it back through the plan.
		fmt.Fprintf(conn, "GET /index.html HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", a)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		conn.Close()
		want := 404
		if host == "www.cnn.com" {
			want = 200
		}
		if resp.StatusCode != want {
			t.Errorf("%s (%s): %d, want %d", host, a, resp.StatusCode, want)
		}
	}
	// A served object is counted after its body is written, which may be
	// after the client, which closed without reading it, has moved on.
	st := o.Stats()
	for deadline := time.Now().Add(2 * time.Second); st.Hosts["www.cnn.com"].Requests == 0 && time.Now().Before(deadline); st = o.Stats() {
		time.Sleep(10 * time.Millisecond)
	}
	if st.Hosts["i.cdn.turner.com"].Misses != 1 || st.Hosts["www.cnn.com"].Requests != 1 {
		t.Errorf("stats per host = %+v", st.Hosts)
	}
}

// BenchmarkServeHTTP measures the handler alone (lookup, headers,
// ServeContent) for the 18 KB yahoo page of the default corpus.
func BenchmarkServeHTTP(b *testing.B) {
	c := testCorpus()
	o, err := New(Config{Corpus: c})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "http://www.yahoo.com/index.html", nil)
	obj, _ := c.Lookup("www.yahoo.com", "/index.html")
	b.SetBytes(int64(len(obj.Body)))
	for b.Loop() {
		w := httptest.NewRecorder()
		o.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatal(w.Code)
		}
	}
}

// TestGzip: the origin's content coding under each -origin-compress
// setting, on the default pages' real text and images and on an object
// with recorded headers (a WARC record recorded uncompressed).
func TestGzip(t *testing.T) {
	c := testCorpus()
	yahoo, _ := c.Lookup("www.yahoo.com", "/index.html")
	css := c.Pages[0].Objects[1]
	var img *corpus.Object
	for _, o := range c.Pages[0].Objects {
		if strings.HasPrefix(o.ContentType, "image/jpeg") {
			img = o
			break
		}
	}
	raw := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	gz := map[string]string{"Accept-Encoding": "gzip, deflate"}
	for _, tc := range []struct {
		mode               Compress
		host, target, body string
		hdr                map[string]string
		wantGzip, wantVary bool
	}{
		{CompressAuto, "www.yahoo.com", "/index.html", string(yahoo.Body), gz, true, true},
		{CompressAuto, css.Host, css.Path, string(css.Body), gz, true, true},
		{CompressAuto, "www.yahoo.com", "/index.html", string(yahoo.Body), nil, false, true},
		{CompressAuto, "www.yahoo.com", "/index.html", string(yahoo.Body), map[string]string{"Accept-Encoding": "gzip;q=0, br"}, false, true},
		{CompressAuto, img.Host, img.Path, string(img.Body), gz, false, false},
		{CompressAuto, "rec.example", "/", "<p>rec</p>", gz, false, true}, // under 20 bytes
		{CompressNone, "www.yahoo.com", "/index.html", string(yahoo.Body), gz, false, false},
		{CompressRecorded, "www.yahoo.com", "/index.html", string(yahoo.Body), gz, true, true},
		{CompressRecorded, "rec.example", "/", "<p>rec</p>", gz, false, false},
	} {
		t.Run(fmt.Sprintf("%s %s%s %v", tc.mode, tc.host, tc.target, tc.hdr), func(t *testing.T) {
			_, addr, _ := startOriginWith(t, Config{Corpus: c, Compress: tc.mode})
			resp, body := get(t, raw, "http://"+addr+tc.target, tc.host, tc.hdr)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			isGzip := resp.Header.Get("Content-Encoding") == "gzip"
			if isGzip != tc.wantGzip || (resp.Header.Get("Vary") == "Accept-Encoding") != tc.wantVary {
				t.Errorf("Content-Encoding %q Vary %q; want gzip %v, vary %v", resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"), tc.wantGzip, tc.wantVary)
			}
			if isGzip {
				zr, err := gzip.NewReader(strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				plain, _ := io.ReadAll(zr)
				if string(plain) != tc.body || len(body) >= len(tc.body) {
					t.Errorf("gzip body: %d bytes inflating to %d, want fewer than %d inflating to the object", len(body), len(plain), len(tc.body))
				}
				if cl := resp.Header.Get("Content-Length"); cl != fmt.Sprint(len(body)) {
					t.Errorf("Content-Length %q for %d bytes", cl, len(body))
				}
				if !strings.HasPrefix(resp.Header.Get("ETag"), "W/") {
					t.Errorf("ETag %q of a gzipped body is not weak", resp.Header.Get("ETag"))
				}
			} else if body != tc.body {
				t.Errorf("identity body differs (%d bytes, want %d)", len(body), len(tc.body))
			}
		})
	}
	if _, err := ParseCompress("brotli"); err == nil || err.Error() != `origin: compress "brotli" is not auto, none or recorded` {
		t.Errorf("ParseCompress: %v", err)
	}
	// Range on a gzipped response: the whole body, as nginx serves it.
	_, addr, _ := startOriginWith(t, Config{Corpus: c})
	resp, body := get(t, raw, "http://"+addr+"/index.html", "www.yahoo.com", map[string]string{"Accept-Encoding": "gzip", "Range": "bytes=0-9"})
	if resp.StatusCode != 200 || len(body) <= 10 {
		t.Errorf("Range on gzip: %d, %d bytes; want 200 and the whole body", resp.StatusCode, len(body))
	}
}

// TestOwnRecordingFirst: in a combined import where two pages recorded the
// same URLs with different bodies (Taobao's recording also captured Tmall's
// HTML and a shared script), Tmall's document comes from Tmall's own
// recording even though Taobao's page comes first, and a subresource
// requested from a page (Referer) comes from that page's recording.
func TestOwnRecordingFirst(t *testing.T) {
	obj := func(host, path, body, ct string) *corpus.Object {
		return &corpus.Object{Host: host, Path: path, Body: []byte(body), ContentType: ct}
	}
	taobao := &corpus.Page{Name: "www.taobao.com", URL: "http://www.taobao.com/", Host: "www.taobao.com", Objects: []*corpus.Object{
		obj("www.taobao.com", "/", "<p>taobao</p>", "text/html"),
		obj("www.tmall.com", "/", "<p>tmall as taobao recorded it</p>", "text/html"),
		obj("g.alicdn.com", "/s.js", "var who='taobao';", "text/javascript"),
	}}
	tmall := &corpus.Page{Name: "www.tmall.com", URL: "http://www.tmall.com/", Host: "www.tmall.com", Objects: []*corpus.Object{
		obj("www.tmall.com", "/", "<p>tmall</p>", "text/html"),
		obj("g.alicdn.com", "/s.js", "var who='tmall';", "text/javascript"),
	}}
	c := corpus.New("combined", []*corpus.Page{taobao, tmall}, corpus.ImportStats{})
	if c.Stats.Conflicts != 2 {
		t.Errorf("Conflicts = %d, want 2 (the document and the script differ)", c.Stats.Conflicts)
	}
	_, addr, _ := startOrigin(t, c, nil)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	for _, tc := range []struct{ name, host, target, referer, body string }{
		{"tmall's document, no referer", "www.tmall.com", "/", "", "<p>tmall</p>"},
		{"taobao's document", "www.taobao.com", "/", "", "<p>taobao</p>"},
		{"script for tmall", "g.alicdn.com", "/s.js", "http://www.tmall.com/", "var who='tmall';"},
		{"script for taobao", "g.alicdn.com", "/s.js", "http://www.taobao.com/", "var who='taobao';"},
	} {
		hdr := map[string]string{}
		if tc.referer != "" {
			hdr["Referer"] = tc.referer
		}
		resp, body := get(t, client, "http://"+addr+tc.target, tc.host, hdr)
		if resp.StatusCode != 200 || body != tc.body {
			t.Errorf("%s: %d %q, want 200 %q", tc.name, resp.StatusCode, body, tc.body)
		}
	}
}
