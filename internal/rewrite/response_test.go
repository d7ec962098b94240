package rewrite

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const (
	pageIn  = `<html><img src="http://i.cnn.net/a.png"><img src="b.png"></html>`
	pageOut = `<html><img src="http://192.0.2.12/i.cnn.net/a.png"><img src="http://192.0.2.12/www.foo.com/b.png"></html>`
)

func gz(t *testing.T, s string) []byte { return gzLevel(t, s, gzip.DefaultCompression) }

func gzLevel(t *testing.T, s string, level int) []byte {
	var b bytes.Buffer
	w, _ := gzip.NewWriterLevel(&b, level)
	w.Write([]byte(s))
	w.Close()
	return b.Bytes()
}

func zl(t *testing.T, s string) []byte {
	var b bytes.Buffer
	w := zlib.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.Bytes()
}

func rawDeflate(t *testing.T, s string) []byte {
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, 5)
	w.Write([]byte(s))
	w.Close()
	return b.Bytes()
}

func br(t *testing.T, s string) []byte {
	var b bytes.Buffer
	w := brotli.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.Bytes()
}

func undo(t *testing.T, coding string, b []byte) string {
	t.Helper()
	var r io.Reader
	var err error
	switch coding {
	case "":
		return string(b)
	case "gzip":
		r, err = gzip.NewReader(bytes.NewReader(b))
	case "deflate":
		r, err = zlib.NewReader(bytes.NewReader(b))
	case "deflate-raw":
		r = flate.NewReader(bytes.NewReader(b))
	case "br":
		r = brotli.NewReader(bytes.NewReader(b))
	}
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decoding %s: %v", coding, err)
	}
	return string(out)
}

// serve runs a real HTTP server on loopback that answers with the given
// headers and body, and returns the response as a client receives it.
func serve(t *testing.T, method string, h http.Header, status int, body []byte) *http.Response {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range h {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(method, srv.URL+"/index.html", nil)
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestResponse(t *testing.T) {
	utf16 := []byte{0xff, 0xfe, '<', 0, 'i', 0}
	big := pageIn + strings.Repeat(" ", 2000)
	tests := []responseCase{
		{name: "html identity", header: map[string]string{"Content-Type": "text/html; charset=iso-8859-1", "ETag": `"abc"`},
			body: []byte(pageIn), want: pageOut, weakETag: `W/"abc"`},
		{name: "xhtml", header: map[string]string{"Content-Type": "application/xhtml+xml"},
			body: []byte(pageIn), want: pageOut},
		{name: "gzip", header: map[string]string{"Content-Type": "text/html", "Content-Encoding": "gzip", "ETag": `W/"x"`},
			body: gz(t, pageIn), coding: "gzip", want: pageOut, weakETag: `W/"x"`},
		{name: "deflate zlib", header: map[string]string{"Content-Type": "text/html", "Content-Encoding": "deflate"},
			body: zl(t, pageIn), coding: "deflate", want: pageOut},
		{name: "deflate raw", header: map[string]string{"Content-Type": "text/html", "Content-Encoding": "deflate"},
			body: rawDeflate(t, pageIn), coding: "deflate-raw", want: pageOut},
		{name: "br", header: map[string]string{"Content-Type": "text/html", "Content-Encoding": "br"},
			body: br(t, pageIn), coding: "br", want: pageOut},
		{name: "css", header: map[string]string{"Content-Type": "text/css"},
			body: []byte(`a{b:url(/x.png)}`), want: `a{b:url(http://192.0.2.12/www.foo.com/x.png)}`},
		{name: "shift_jis bytes pass", header: map[string]string{"Content-Type": "text/html; charset=Shift_JIS"},
			body: []byte("<p>\x83\x65\x83\x58\x83\x67</p><img src=\"http://a.com/\x83\x65.png\">"),
			want: "<p>\x83\x65\x83\x58\x83\x67</p><img src=\"http://192.0.2.12/a.com/\x83\x65.png\">"},

		{name: "not html", header: map[string]string{"Content-Type": "image/png"}, body: []byte(pageIn), reason: ReasonType},
		{name: "no content type", header: map[string]string{"Content-Type": ""}, body: []byte(pageIn), reason: ReasonType},
		{name: "no-transform", header: map[string]string{"Content-Type": "text/html", "Cache-Control": "max-age=60, No-Transform"},
			body: []byte(pageIn), reason: ReasonNoTransform},
		{name: "utf-16 by charset", header: map[string]string{"Content-Type": "text/html; charset=UTF-16LE"}, body: utf16, reason: ReasonCharset},
		{name: "utf-16 by BOM", header: map[string]string{"Content-Type": "text/html"}, body: utf16, reason: ReasonCharset},
		{name: "truncated gzip", header: map[string]string{"Content-Type": "text/html", "Content-Encoding": "gzip"},
			body: gz(t, pageIn)[:30], reason: ReasonCorrupt},
		{name: "gzip with bad checksum", header: map[string]string{"Content-Type": "text/html", "Content-Encoding": "gzip"},
			body: func() []byte { b := gz(t, pageIn); b[len(b)-6] ^= 1; return b }(), reason: ReasonCorrupt},
		{name: "truncated br", header: map[string]string{"Content-Type": "text/html", "Content-Encoding": "br"},
			body: br(t, pageIn)[:10], reason: ReasonCorrupt},
		{name: "unknown coding", header: map[string]string{"Content-Type": "text/html", "Content-Encoding": "zstd"},
			body: []byte("(zstd bytes)"), reason: ReasonEncoding},
		{name: "stacked codings", header: map[string]string{"Content-Type": "text/html", "Content-Encoding": "gzip, br"},
			body: []byte("(bytes)"), reason: ReasonEncoding},
		{name: "too large by length", header: map[string]string{"Content-Type": "text/html"}, body: []byte(big), reason: ReasonTooLarge},
		{name: "too large when decoded", header: map[string]string{"Content-Type": "text/html", "Content-Encoding": "gzip"},
			body: gz(t, big), reason: ReasonTooLarge},
		{name: "partial content", status: 206, header: map[string]string{"Content-Type": "text/html", "Content-Range": "bytes 0-10/100"},
			body: []byte(pageIn), reason: ReasonStatus},
		{name: "HEAD", method: "HEAD", header: map[string]string{"Content-Type": "text/html"}, reason: ReasonStatus},
		{name: "nothing to rewrite", header: map[string]string{"Content-Type": "text/html", "Content-Encoding": "gzip", "ETag": `"e"`},
			body: gz(t, `<a href="http://a.com/">x</a>`), reason: ReasonUnchanged},
	}
	// Every case runs twice: with the headers as served, and with the
	// response's header map cut down to ResponseHeaders, as httpproxy's
	// relay hands it to the rewriter. The results must be the same, so the
	// list follows what Response reads.
	for _, only := range []bool{false, true} {
		t.Run(map[bool]string{false: "all headers", true: "ResponseHeaders only"}[only], func(t *testing.T) {
			testResponse(t, tests, only)
		})
	}
}

// TestResponseRecoded: nothing to rewrite in a body its origin gzipped at
// level 1 (as nginx does by default): the rewriter's level replaces it,
// smaller, with the header a changed body needs (Recoded); the same body
// at level 9 passes byte for byte.
func TestResponseRecoded(t *testing.T) {
	r := newTestRewriter(t, Config{})
	text := strings.Repeat("<p>Nothing here names an http URL; https://a.com/ stays as it is.</p>\n", 50) +
		strings.Repeat("<li>item, and some more words that repeat less often than the paragraph above</li>\n", 50)
	for _, tc := range []struct {
		name    string
		level   int
		recoded bool
	}{{"level 1", gzip.BestSpeed, true}, {"level 9", gzip.BestCompression, false}} {
		t.Run(tc.name, func(t *testing.T) {
			in := gzLevel(t, text, tc.level)
			h := http.Header{"Content-Type": {"text/html"}, "Content-Encoding": {"gzip"}, "Etag": {`"e"`}}
			resp := serve(t, "GET", h, 200, in)
			res := r.Response(resp, mustURL(t, "http://www.foo.com/"), false)
			got, _ := io.ReadAll(resp.Body)
			if res.Rewritten || res.Reason != ReasonUnchanged || res.Recoded != tc.recoded {
				t.Fatalf("result %+v, want unchanged, recoded %v", res, tc.recoded)
			}
			if !tc.recoded {
				if !bytes.Equal(got, in) || resp.Header.Get("ETag") != `"e"` {
					t.Errorf("passed body changed (%d bytes, ETag %q)", len(got), resp.Header.Get("ETag"))
				}
				return
			}
			if undo(t, "gzip", got) != text || float64(len(got)) > float64(len(in))*(1-MinRecodeSaving) {
				t.Errorf("recoded body: %d bytes from %d, or not the text", len(got), len(in))
			}
			if resp.Header.Get("Content-Length") != strconv.Itoa(len(got)) || resp.Header.Get("ETag") != `W/"e"` {
				t.Errorf("Content-Length %q for %d bytes, ETag %q (want weak)", resp.Header.Get("Content-Length"), len(got), resp.Header.Get("ETag"))
			}
			t.Logf("level %d: %d bytes, sent %d", tc.level, len(in), len(got))
		})
	}
}

// responseCase is one case of TestResponse.
type responseCase struct {
	name     string
	method   string
	status   int
	header   map[string]string
	body     []byte
	coding   string // how to decode the output for comparison
	want     string // decoded output; "" means: original bytes unchanged
	reason   Reason
	weakETag string
}

func testResponse(t *testing.T, tests []responseCase, only bool) {
	keep := map[string]bool{}
	for _, h := range ResponseHeaders {
		keep[h] = true
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(testVIP, Config{MaxBodyBytes: 1024}, testLogger(t), m)
	if err != nil {
		t.Fatal(err)
	}
	rewritten := 0
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			method, status := tc.method, tc.status
			if method == "" {
				method = "GET"
			}
			if status == 0 {
				status = 200
			}
			resp := serve(t, method, h, status, tc.body)
			if only {
				for k := range resp.Header {
					if !keep[k] {
						delete(resp.Header, k)
					}
				}
			}
			res := r.Response(resp, mustURL(t, "http://www.foo.com/index.html"), false)
			got, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if res.Rewritten || res.Reason != tc.reason {
					t.Errorf("result %+v, want skipped for %q", res, tc.reason)
				}
				if !bytes.Equal(got, tc.body) {
					t.Errorf("body changed:\n got %q\nwant %q", got, tc.body)
				}
				if et := tc.header["ETag"]; et != "" && resp.Header.Get("ETag") != et {
					t.Errorf("ETag = %q, want %q", resp.Header.Get("ETag"), et)
				}
				return
			}
			rewritten++
			if !res.Rewritten || res.Reason != "" {
				t.Errorf("result %+v, want rewritten", res)
			}
			if s := undo(t, tc.coding, got); s != tc.want {
				t.Errorf("body:\n got %q\nwant %q", s, tc.want)
			}
			if cl := resp.Header.Get("Content-Length"); cl != strconv.Itoa(len(got)) || resp.ContentLength != int64(len(got)) {
				t.Errorf("Content-Length %q / %d, body %d bytes", cl, resp.ContentLength, len(got))
			}
			if ce := resp.Header.Get("Content-Encoding"); ce != tc.header["Content-Encoding"] {
				t.Errorf("Content-Encoding %q, want %q", ce, tc.header["Content-Encoding"])
			}
			if tc.weakETag != "" && resp.Header.Get("ETag") != tc.weakETag {
				t.Errorf("ETag = %q, want %q", resp.Header.Get("ETag"), tc.weakETag)
			}
		})
	}
	if got := testutil.ToFloat64(m.responses.WithLabelValues("rewritten", "", "html")); got != float64(rewritten-1) {
		t.Errorf("pep_rewrite_responses_total{result=rewritten,kind=html} = %v, want %d", got, rewritten-1)
	}
	if got := testutil.ToFloat64(m.responses.WithLabelValues("skipped", "corrupt", "html")); got != 3 {
		t.Errorf("pep_rewrite_responses_total{reason=corrupt} = %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.urls); got != 14 {
		t.Errorf("pep_rewrite_urls_total = %v, want 14", got)
	}
}

// TestResponseTooLargeStreams checks that a body over the bound passes
// through whole, including the part not buffered.
func TestResponseTooLargeStreams(t *testing.T) {
	r := newTestRewriter(t, Config{MaxBodyBytes: 1024})
	body := []byte(strings.Repeat(pageIn, 200))
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/html"}},
		ContentLength: -1, Body: io.NopCloser(bytes.NewReader(body))}
	res := r.Response(resp, nil, false)
	got, _ := io.ReadAll(resp.Body)
	if res.Reason != ReasonTooLarge || !bytes.Equal(got, body) {
		t.Errorf("result %+v, body equal %v; want too-large and the body unchanged", res, bytes.Equal(got, body))
	}
}

// TestResponseReadError checks that an upstream read error passes the bytes
// read so far and then the same error.
func TestResponseReadError(t *testing.T) {
	r := newTestRewriter(t, Config{})
	boom := errors.New("connection reset")
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/html"}}, ContentLength: -1,
		Body: io.NopCloser(io.MultiReader(strings.NewReader(pageIn), errReader{boom}))}
	res := r.Response(resp, nil, false)
	got, err := io.ReadAll(resp.Body)
	if res.Reason != ReasonReadError || !errors.Is(res.Err, boom) || string(got) != pageIn || !errors.Is(err, boom) {
		t.Errorf("result %+v, body %q, err %v", res, got, err)
	}
}
