package optimize

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"pep/internal/dnsproxy"
	"pep/internal/dnsproxy/dnsmasqtest"
	"pep/internal/guard"
	"pep/internal/testenv"
)

// serverWorld is the optimizer as Squid's parent in front of a real
// origin (127.0.0.1, named img.opt.test by a real dnsmasq): requests go
// to it in absolute form, as Squid sends them.
type serverWorld struct {
	s      *Server
	m      *Metrics
	origin *httptest.Server
	conns  atomic.Int64 // connections the origin accepted
	client *http.Client
	base   string // http://img.opt.test:PORT
}

// startServerWorld starts dnsmasq, the origin with handlers, and a
// Server built by New(o) with Lookup through dnsmasq and, unless
// o.Control is set, pepd's guard allowing the origin's address and port.
func startServerWorld(t *testing.T, o Options, handlers map[string]http.HandlerFunc) *serverWorld {
	t.Helper()
	testenv.Log(t)
	w := &serverWorld{}
	mux := http.NewServeMux()
	for p, h := range handlers {
		mux.HandleFunc(p, h)
	}
	w.origin = httptest.NewUnstartedServer(mux)
	w.origin.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			w.conns.Add(1)
		}
	}
	w.origin.Start()
	t.Cleanup(w.origin.Close)
	port := w.origin.Listener.Addr().(*net.TCPAddr).Port
	up, err := dnsproxy.NewUpstream(dnsproxy.UpstreamOptions{Resolvers: []string{
		dnsmasqtest.Start(t, []string{"host-record=img.opt.test,127.0.0.1", "local=/opt.test/"})}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.m, err = NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	o.Image, o.Lookup, o.Metrics = DefaultImageOptions(), up.LookupA, w.m
	if o.Control == nil {
		g := guard.New(guard.Options{AllowedPorts: []uint16{uint16(port)}, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
		o.Control = g.Control
	}
	w.s, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	opt := httptest.NewServer(w.s)
	t.Cleanup(opt.Close)
	proxy, _ := url.Parse(opt.URL)
	w.client = &http.Client{Timeout: testenv.Scale(20 * time.Second), Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DisableCompression: true}}
	w.base = "http://img.opt.test:" + strconv.Itoa(port)
	return w
}

// get sends a marked GET for path as Squid does for a request pepd
// marked, with a browser's Accept and Accept-Encoding over http.
func (w *serverWorld) get(t *testing.T, path string) (*http.Response, []byte, error) {
	return w.getEncoded(t, path, "gzip, deflate")
}

// getEncoded is get with the Accept-Encoding ae.
func (w *serverWorld) getEncoded(t *testing.T, path, ae string) (*http.Response, []byte, error) {
	t.Helper()
	req, _ := http.NewRequest("GET", w.base+path, nil)
	req.Header.Set(MarkHeader, "1")
	req.Header.Set("Accept", "image/avif,image/webp,image/apng,image/*,*/*;q=0.8")
	req.Header.Set("Accept-Encoding", ae)
	resp, err := w.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func (w *serverWorld) skipped(reason string) float64 {
	return testutil.ToFloat64(w.m.skipped.WithLabelValues(reason))
}

func serveBytes(ctype string, b []byte, header ...string) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", ctype)
		for i := 0; i+1 < len(header); i += 2 {
			rw.Header().Set(header[i], header[i+1])
		}
		rw.Write(b)
	}
}

// TestServerSkips: the optimizer's paths that leave a body as the origin
// sent it, each through the real Server and a real origin: a body over
// MaxBodyBytes (streamed through), a full transform queue (overload), a
// body the origin encoded itself in a coding other than gzip, an origin that fails mid-body (the
// failure reaches Squid, never a short body that looks whole), and the
// dial guard (an origin address the guard refuses is never connected).
// The transformed path is the control: the same image becomes WebP.
func TestServerSkips(t *testing.T) {
	photo := readTestdata(t, "photo.jpg")
	css := bytes.Repeat([]byte("body { margin: 0; padding: 0; font-family: sans-serif; }\n"), 200)
	var br bytes.Buffer
	bw := brotli.NewWriterLevel(&br, 11)
	bw.Write(css)
	bw.Close()
	handlers := map[string]http.HandlerFunc{
		"/photo.jpg":   serveBytes(TypeJPEG, photo, "Cache-Control", "max-age=3600"),
		"/again.jpg":   serveBytes(TypeJPEG, photo, "Cache-Control", "max-age=3600"),
		"/encoded.css": serveBytes("text/css", br.Bytes(), "Content-Encoding", "br"),
		"/cut.css": func(rw http.ResponseWriter, r *http.Request) {
			rw.Header().Set("Content-Type", "text/css")
			rw.Header().Set("Content-Length", strconv.Itoa(len(css)))
			rw.WriteHeader(200)
			rw.Write(css[:len(css)/4])
			rw.(http.Flusher).Flush()
			c, _, err := http.NewResponseController(rw).Hijack()
			if err == nil {
				c.Close() // the origin dies a quarter into the body
			}
		},
	}

	t.Run("transformed (control)", func(t *testing.T) {
		w := startServerWorld(t, Options{Deadline: testenv.Scale(time.Minute)}, handlers)
		resp, b, err := w.get(t, "/photo.jpg")
		if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != TypeWebP || len(b) >= len(photo) {
			t.Fatalf("%v %v: %q, %d bytes", resp, err, resp.Header.Get("Content-Type"), len(b))
		}
	})

	t.Run("too large", func(t *testing.T) {
		w := startServerWorld(t, Options{MaxBodyBytes: int64(len(photo) / 2), Deadline: testenv.Scale(time.Minute)}, handlers)
		resp, b, err := w.get(t, "/photo.jpg")
		if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != TypeJPEG || !bytes.Equal(b, photo) {
			t.Fatalf("%v %v: %q, %d bytes, want the origin's JPEG byte for byte", resp, err, resp.Header.Get("Content-Type"), len(b))
		}
		if got := w.skipped(SkipTooLarge); got != 1 {
			t.Errorf("skipped{%q} = %v, want 1", SkipTooLarge, got)
		}
	})

	t.Run("overload", func(t *testing.T) {
		w := startServerWorld(t, Options{Workers: 1, Queue: 1, Deadline: testenv.Scale(time.Minute)}, handlers)
		// The one worker is busy and the one queue place taken.
		free := w.s.webp.occupy(1, 1)
		resp, b, err := w.get(t, "/photo.jpg")
		free()
		if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != TypeJPEG || !bytes.Equal(b, photo) {
			t.Fatalf("%v %v: %q, %d bytes, want the origin's JPEG byte for byte", resp, err, resp.Header.Get("Content-Type"), len(b))
		}
		if got := w.skipped(SkipOverload); got != 1 {
			t.Errorf("skipped{%q} = %v, want 1", SkipOverload, got)
		}
		// Free again: the next image is transformed.
		if resp, _, err := w.get(t, "/again.jpg"); err != nil || resp.Header.Get("Content-Type") != TypeWebP {
			t.Errorf("after the overload: %v %v, want WebP", resp, err)
		}
	})

	t.Run("queue bytes", func(t *testing.T) {
		// Room for no body of this size: nothing queues, nothing runs.
		w := startServerWorld(t, Options{QueueBytes: int64(len(photo) - 1), Deadline: testenv.Scale(time.Minute)}, handlers)
		resp, b, err := w.get(t, "/photo.jpg")
		if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != TypeJPEG || !bytes.Equal(b, photo) {
			t.Fatalf("%v %v: %q, %d bytes, want the origin's JPEG byte for byte", resp, err, resp.Header.Get("Content-Type"), len(b))
		}
		if got := w.skipped(SkipOverload); got != 1 {
			t.Errorf("skipped{%q} = %v, want 1", SkipOverload, got)
		}
		if n := w.s.queuedBytes.Load(); n != 0 {
			t.Errorf("%d queued bytes left after the overload", n)
		}
	})

	t.Run("already encoded", func(t *testing.T) {
		w := startServerWorld(t, Options{Deadline: testenv.Scale(time.Minute)}, handlers)
		resp, b, err := w.get(t, "/encoded.css")
		if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "br" || !bytes.Equal(b, br.Bytes()) {
			t.Fatalf("%v %v: Content-Encoding %q, %d bytes, want the origin's brotli body byte for byte", resp, err, resp.Header.Get("Content-Encoding"), len(b))
		}
		if got := w.skipped(SkipEncoded); got != 1 {
			t.Errorf("skipped{%q} = %v, want 1", SkipEncoded, got)
		}
	})

	t.Run("origin fails mid-body", func(t *testing.T) {
		w := startServerWorld(t, Options{Deadline: testenv.Scale(time.Minute)}, handlers)
		resp, b, err := w.get(t, "/cut.css")
		if err == nil {
			t.Fatalf("%v: %d bytes read without an error, want the origin's failure passed on", resp, len(b))
		}
		if resp.Header.Get("Content-Encoding") != "" || !bytes.HasPrefix(css, b) {
			t.Errorf("Content-Encoding %q, %d bytes: want what came, as it came", resp.Header.Get("Content-Encoding"), len(b))
		}
		t.Logf("%d of %d bytes, then %v", len(b), len(css), err)
		w.s.results.mu.Lock()
		n := w.s.results.ll.Len()
		w.s.results.mu.Unlock()
		if n != 0 {
			t.Errorf("%d results kept after a failed body", n)
		}
	})

	t.Run("dial guard", func(t *testing.T) {
		// pepd's guard as configured in the field: loopback is not an
		// origin.
		refuse := guard.New(guard.Options{AllowedPorts: []uint16{80}})
		w := startServerWorld(t, Options{Deadline: testenv.Scale(time.Minute), Control: refuse.Control}, handlers)
		resp, b, err := w.get(t, "/photo.jpg")
		if err != nil || resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("%v %v %.200q, want 502 from the optimizer", resp, err, b)
		}
		if n := w.conns.Load(); n != 0 {
			t.Errorf("the origin accepted %d connections through a guard that refuses it", n)
		}
		if !strings.Contains(string(b), "origin failed") {
			t.Errorf("body %q", b)
		}
	})
}

// TestServerBurst: a page's image misses arriving at once, as over one
// HTTP/2 connection (https.max_streams 100), with the default queue: every
// one is transformed, none overloaded (with the old 4 per worker, 2
// workers, 90 of them ran no transform at all), and the queue's byte
// count returns to zero. The deadline is long: this is about the queue
// bound, not the time.
func TestServerBurst(t *testing.T) {
	photo := readTestdata(t, "photo.jpg")
	src, err := jpeg.Decode(bytes.NewReader(photo))
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	handlers := map[string]http.HandlerFunc{}
	for i := range n {
		// Distinct bodies (the optimizer transforms identical ones once):
		// the photo with a 16x16 square of its own colour at its own place
		// (a single pixel can vanish in the JPEG's quantisation).
		img := image.NewRGBA(src.Bounds())
		draw.Draw(img, img.Bounds(), src, src.Bounds().Min, draw.Src)
		x, y := (i*16)%(img.Bounds().Dx()-16), (i*16)/(img.Bounds().Dx()-16)*16
		draw.Draw(img, image.Rect(x, y, x+16, y+16), &image.Uniform{color.RGBA{uint8(2 * i), 255 - uint8(2*i), 128, 255}}, image.Point{}, draw.Src)
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
			t.Fatal(err)
		}
		handlers[fmt.Sprintf("/burst/%d.jpg", i)] = serveBytes(TypeJPEG, buf.Bytes(), "Cache-Control", "max-age=3600")
	}
	// 100 transforms on 2 workers take 15-25 s on this 2-core machine
	// (each a search of several WebP encodes, SSIM refined): the deadline
	// and the client's timeout leave them minutes, so the test fails on
	// the queue's bound, never on the machine's speed.
	w := startServerWorld(t, Options{Workers: 2, Deadline: testenv.Scale(4 * time.Minute)}, handlers)
	w.client.Timeout = testenv.Scale(5 * time.Minute)
	var wg sync.WaitGroup
	types := make([]string, n)
	for i := range n {
		wg.Go(func() {
			resp, _, err := w.get(t, fmt.Sprintf("/burst/%d.jpg", i))
			if err != nil {
				types[i] = err.Error()
				return
			}
			types[i] = resp.Header.Get("Content-Type")
		})
	}
	wg.Wait()
	webp := 0
	for i, ct := range types {
		if ct == TypeWebP {
			webp++
		} else if i-webp < 3 {
			t.Logf("image %d: %s", i, ct) // the first few others
		}
	}
	if webp != n || w.skipped(SkipOverload) != 0 {
		t.Errorf("%d of %d images served as WebP, %v overloaded; want all, none", webp, n, w.skipped(SkipOverload))
	}
	if b := w.s.queuedBytes.Load(); b != 0 {
		t.Errorf("%d queued bytes left after the burst", b)
	}
	// ResetResults (DELETE /optimize/results): the kept transforms go,
	// and the next miss of an image transforms it again.
	if k, _ := w.s.results.size(); k < n {
		t.Errorf("%d results kept after %d transforms", k, n)
	}
	w.s.ResetResults()
	if k, b := w.s.results.size(); k != 0 || b != 0 {
		t.Errorf("after ResetResults: %d results, %d bytes", k, b)
	}
	reused := testutil.ToFloat64(w.m.reuse.WithLabelValues("webp"))
	if resp, _, err := w.get(t, "/burst/0.jpg"); err != nil || resp.Header.Get("Content-Type") != TypeWebP {
		t.Fatalf("after ResetResults: %v %v, want WebP", resp, err)
	}
	if got := testutil.ToFloat64(w.m.reuse.WithLabelValues("webp")); got != reused {
		t.Errorf("after ResetResults a kept result was reused (%v -> %v)", reused, got)
	}
}

// TestServerAVIFOverload (issue 27): with the AVIF workers busy and the
// AVIF queue full, a request that accepts AVIF gets the WebP at once,
// marked for storing (no Pep-Deferred: an AVIF that never started is not
// pending), counted as outcome "overload"; the overload is not kept, so
// once the AVIF worker is free the next miss of the same image runs the
// search and gets the AVIF (photo.jpg's is smaller than its WebP).
func TestServerAVIFOverload(t *testing.T) {
	photo := readTestdata(t, "photo.jpg")
	handlers := map[string]http.HandlerFunc{"/photo.jpg": serveBytes(TypeJPEG, photo, "Cache-Control", "max-age=3600")}
	w := startServerWorld(t, Options{Deadline: testenv.Scale(time.Minute), AVIF: AVIFOptions{Enabled: true, Workers: 1, Queue: 1}}, handlers)
	outcome := func(o string) float64 { return testutil.ToFloat64(w.m.avifs.WithLabelValues(o)) }
	free := w.s.avif.occupy(1, 1)
	resp, b, err := w.get(t, "/photo.jpg")
	free()
	if err != nil || resp.Header.Get("Content-Type") != TypeWebP || len(b) >= len(photo) {
		t.Fatalf("AVIF queue full: %v %v: %q, %d bytes, want the WebP", resp, err, resp.Header.Get("Content-Type"), len(b))
	}
	if d := resp.Header.Get(DeferredHeader); d != "" {
		t.Errorf("AVIF queue full: %s %q, want none (the WebP is to be stored)", DeferredHeader, d)
	}
	if got := outcome(AVIFOverload); got != 1 {
		t.Errorf("avif_total{outcome=%q} = %v, want 1", AVIFOverload, got)
	}
	resp, a, err := w.get(t, "/photo.jpg")
	if err != nil || resp.Header.Get("Content-Type") != TypeAVIF || len(a) >= len(b) {
		t.Fatalf("AVIF worker free: %v %v: %q, %d bytes (WebP %d), want the AVIF", resp, err, resp.Header.Get("Content-Type"), len(a), len(b))
	}
	if got := outcome(AVIFServed); got != 1 {
		t.Errorf("avif_total{outcome=%q} = %v, want 1", AVIFServed, got)
	}
}

// TestServerAVIFLate (issue 27, session 33): once the AVIF pool's backlog
// has learned a cost that puts the search past the deadline, a request
// that accepts AVIF gets the WebP at once instead of after the whole
// deadline, marked Pep-Deferred avif (not to be stored), counted as
// outcome "late"; the search goes on, its wall time teaches the cost line
// one sample more, and the next miss gets the AVIF from the kept result.
// Without a learned cost (the first searches) the response waits as
// before: TestServerAVIFOverload's second request. Predicted late while
// the AVIF queue is full, the search is not started and the WebP is
// served to be stored (outcome overload), as a full queue answers: not
// held back unstored on every miss while the queue stays full.
func TestServerAVIFLate(t *testing.T) {
	photo := readTestdata(t, "photo.jpg")
	handlers := map[string]http.HandlerFunc{"/photo.jpg": serveBytes(TypeJPEG, photo, "Cache-Control", "max-age=3600")}
	deadline := testenv.Scale(10 * time.Second)
	w := startServerWorld(t, Options{Deadline: deadline, AVIF: AVIFOptions{Enabled: true, Workers: 1, Queue: 1}}, handlers)
	outcome := func(o string) float64 { return testutil.ToFloat64(w.m.avifs.WithLabelValues(o)) }
	samples := func() int {
		w.s.avif.backlog.mu.Lock()
		defer w.s.avif.backlog.mu.Unlock()
		if c := w.s.avif.backlog.costs["jpeg"]; c != nil {
			return c.samples
		}
		return 0
	}
	for i := range minSamples { // 1 s per pixel: far past any deadline
		w.s.avif.backlog.learn("jpeg", int64(1+i%2), time.Duration(1+i%2)*time.Second)
	}
	free := w.s.avif.occupy(1, 1) // the AVIF worker busy, its one waiting place taken
	resp, b, err := w.get(t, "/photo.jpg")
	free()
	if err != nil || resp.Header.Get("Content-Type") != TypeWebP {
		t.Fatalf("AVIF late, queue full: %v %v, want the WebP", resp, err)
	}
	if d := resp.Header.Get(DeferredHeader); d != "" {
		t.Errorf("AVIF late, queue full: %s %q, want none (the WebP is to be stored)", DeferredHeader, d)
	}
	if over, late := outcome(AVIFOverload), outcome(AVIFLate); over != 1 || late != 0 {
		t.Errorf("queue full: avif_total{outcome=overload} = %v, {late} = %v; want 1, 0", over, late)
	}
	if got := samples(); got != minSamples {
		t.Errorf("queue full: %d AVIF cost samples, want %d (no search started)", got, minSamples)
	}
	start := time.Now()
	resp, b, err = w.get(t, "/photo.jpg")
	took := time.Since(start)
	if err != nil || resp.Header.Get("Content-Type") != TypeWebP || len(b) >= len(photo) {
		t.Fatalf("AVIF predicted late: %v %v: %q, %d bytes, want the WebP", resp, err, resp.Header.Get("Content-Type"), len(b))
	}
	if d := resp.Header.Get(DeferredHeader); d != "avif" {
		t.Errorf("AVIF predicted late: %s %q, want avif (the WebP not to be stored)", DeferredHeader, d)
	}
	if took >= deadline {
		t.Errorf("served after %v, want at once (deadline %v)", took, deadline)
	}
	if late, pending := outcome(AVIFLate), outcome(AVIFPending); late != 1 || pending != 0 {
		t.Errorf("avif_total{outcome=late} = %v, {pending} = %v; want 1, 0", late, pending)
	}
	waitResult(t, w, "avif", photo)
	if got := samples(); got != minSamples+1 {
		t.Errorf("the AVIF cost line has %d samples after the search, want %d", got, minSamples+1)
	}
	resp, a, err := w.get(t, "/photo.jpg")
	if err != nil || resp.Header.Get("Content-Type") != TypeAVIF || len(a) >= len(b) {
		t.Fatalf("next miss: %v %v: %q, %d bytes (WebP %d), want the AVIF", resp, err, resp.Header.Get("Content-Type"), len(a), len(b))
	}
	if q := testutil.ToFloat64(w.m.backlog.WithLabelValues("avif")); q > 1e-6 || q < -1e-6 {
		t.Errorf("backlog_seconds{transform=avif} = %v after the search ended, want 0", q)
	}
}

// TestServerText: the text transform through the real Server and a real
// origin, on a real minified script (underscore-min.js from the default
// pages). A request whose Accept-Encoding names br gets brotli, also of
// the level-1 gzip a stock nginx sends (decoded, then encoded again), and
// the brotli decodes to the script byte for byte; one that names only
// gzip gets gzip at GzipLevel, of the plain script and of the origin's
// level 1, and an origin's level 9 as it came; a gzip body that does not
// decode passes as it came; with brotli off (quality 0) br in
// Accept-Encoding gets gzip.
// TestServerJPEGFallback: through the real Server and a real origin, a
// JPEG that no WebP serves at the target (bannerJPEG) is answered as a
// smaller JPEG, marked and tagged as its own variant ("jpeg"), Vary
// Accept as every image variant, and counted as a jpeg transform.
func TestServerJPEGFallback(t *testing.T) {
	in := bannerJPEG(t)
	w := startServerWorld(t, Options{Deadline: testenv.Scale(time.Minute)}, map[string]http.HandlerFunc{
		"/banner.jpg": serveBytes(TypeJPEG, in, "ETag", `"b1"`),
	})
	resp, b, err := w.get(t, "/banner.jpg")
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != TypeJPEG || Sniff(b) != "jpeg" || len(b) >= len(in) {
		t.Fatalf("Content-Type %q, %d bytes of %d: want a smaller JPEG", ct, len(b), len(in))
	}
	if tr, et := resp.Header.Get(TransformHeader), resp.Header.Get("ETag"); tr != "jpeg" || et != `W/"b1.pep-jpeg"` {
		t.Errorf("%s %q, ETag %q: want jpeg, W/\"b1.pep-jpeg\"", TransformHeader, tr, et)
	}
	if v := resp.Header.Get("Vary"); !strings.Contains(v, "Accept") {
		t.Errorf("Vary %q: want Accept", v)
	}
	if n := testutil.ToFloat64(w.m.transforms.WithLabelValues("jpeg", TypeJPEG)); n != 1 {
		t.Errorf("pep_optimize_transforms_total{transform=jpeg} %v, want 1", n)
	}
	t.Logf("%d -> %d bytes", len(in), len(b))
}

func TestServerText(t *testing.T) {
	js, err := os.ReadFile("../../testbed/corpus/default/site/britannica/js.eb.com/eb/js/underscore-min.js")
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, 1) // nginx's gzip_comp_level default
	zw.Write(js)
	zw.Close()
	var best bytes.Buffer
	zw, _ = gzip.NewWriterLevel(&best, gzip.BestCompression)
	zw.Write(js)
	zw.Close()
	corrupt := append([]byte(nil), gz.Bytes()[:gz.Len()/2]...)
	handlers := map[string]http.HandlerFunc{
		"/plain.js":   serveBytes("application/javascript", js, "ETag", `"u1"`),
		"/gzip.js":    serveBytes("application/javascript", gz.Bytes(), "Content-Encoding", "gzip", "ETag", `W/"u1"`),
		"/best.js":    serveBytes("application/javascript", best.Bytes(), "Content-Encoding", "gzip"),
		"/corrupt.js": serveBytes("application/javascript", corrupt, "Content-Encoding", "gzip"),
	}
	const chromeHTTPS, chromeHTTP = "gzip, deflate, br, zstd", "gzip, deflate"
	get := func(t *testing.T, w *serverWorld, path, ae string) (*http.Response, []byte) {
		t.Helper()
		resp, b, err := w.getEncoded(t, path, ae)
		if err != nil {
			t.Fatal(err)
		}
		if v := resp.Header.Get("Vary"); !strings.Contains(v, "Accept-Encoding") {
			t.Errorf("%s: Vary %q, want Accept-Encoding (the variants kept apart in Squid)", path, v)
		}
		return resp, b
	}
	// decoded is a body in its coding, decoded; a body that does not
	// decode fails the test.
	decoded := func(t *testing.T, coding string, b []byte) []byte {
		t.Helper()
		var r io.Reader = brotli.NewReader(bytes.NewReader(b))
		if coding == CodingGzip {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("gzip body does not decode: %v", err)
			}
			r = zr
		}
		plain, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("%s body does not decode: %v", coding, err)
		}
		return plain
	}
	w := startServerWorld(t, Options{BrotliQuality: DefaultBrotliQuality, Deadline: testenv.Scale(time.Minute)}, handlers)

	for _, tc := range []struct {
		name, path, etag string
		sent             int
	}{
		{"plain to brotli", "/plain.js", `W/"u1.pep-br"`, len(js)},
		{"origin's gzip to brotli", "/gzip.js", `W/"u1.pep-br"`, gz.Len()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := get(t, w, tc.path, chromeHTTPS)
			if ce := resp.Header.Get("Content-Encoding"); ce != CodingBrotli {
				t.Fatalf("Content-Encoding %q, want br", ce)
			}
			if !bytes.Equal(decoded(t, CodingBrotli, b), js) {
				t.Fatal("the brotli body is not the script")
			}
			if float64(len(b)) > float64(tc.sent)*(1-MinTextSaving) {
				t.Errorf("%d bytes of brotli against %d sent: served though under MinTextSaving", len(b), tc.sent)
			}
			if et := resp.Header.Get("ETag"); et != tc.etag {
				t.Errorf("ETag %q, want the variant's weak tag %s", et, tc.etag)
			}
			t.Logf("%d bytes sent, %d brotli quality %d", tc.sent, len(b), DefaultBrotliQuality)
		})
	}

	t.Run("gzip only", func(t *testing.T) {
		resp, b := get(t, w, "/plain.js", chromeHTTP)
		if resp.Header.Get("Content-Encoding") != CodingGzip || !bytes.Equal(decoded(t, CodingGzip, b), js) {
			t.Fatalf("plain script: Content-Encoding %q, want gzip of the script", resp.Header.Get("Content-Encoding"))
		}
		resp, b = get(t, w, "/gzip.js", chromeHTTP)
		if resp.Header.Get("Content-Encoding") != CodingGzip || !bytes.Equal(decoded(t, CodingGzip, b), js) {
			t.Fatalf("origin's gzip: Content-Encoding %q, want gzip of the script", resp.Header.Get("Content-Encoding"))
		}
		if float64(len(b)) > float64(gz.Len())*(1-MinTextSaving) {
			t.Errorf("%d bytes of gzip level %d against %d of level 1: served though under MinTextSaving", len(b), GzipLevel, gz.Len())
		}
		t.Logf("%d bytes gzip level 1, %d level %d", gz.Len(), len(b), GzipLevel)
		// An origin that gzips as well as the optimizer: as it came.
		before := w.skipped(SkipNotSmaller)
		resp, b = get(t, w, "/best.js", chromeHTTP)
		if resp.Header.Get("Content-Encoding") != CodingGzip || !bytes.Equal(b, best.Bytes()) {
			t.Fatalf("origin's level-9 gzip: Content-Encoding %q, %d bytes, want the origin's body byte for byte", resp.Header.Get("Content-Encoding"), len(b))
		}
		if got := w.skipped(SkipNotSmaller) - before; got != 1 {
			t.Errorf("skipped{%q} +%v, want +1", SkipNotSmaller, got)
		}
	})

	t.Run("gzip that does not decode", func(t *testing.T) {
		before := w.skipped(SkipUndecodable)
		resp, b := get(t, w, "/corrupt.js", chromeHTTPS)
		if resp.Header.Get("Content-Encoding") != CodingGzip || !bytes.Equal(b, corrupt) {
			t.Fatalf("Content-Encoding %q, %d bytes, want the origin's body byte for byte", resp.Header.Get("Content-Encoding"), len(b))
		}
		if got := w.skipped(SkipUndecodable) - before; got != 1 {
			t.Errorf("skipped{%q} +%v, want +1", SkipUndecodable, got)
		}
	})

	t.Run("rewritten by pepd", func(t *testing.T) {
		// url mode's HTML and CSS are decoded and encoded again by pepd's
		// rewriter: they pass as the origin sent them, the script still
		// gets its transform.
		h := maps.Clone(handlers)
		h["/gzip.css"] = serveBytes("text/css; charset=utf-8", gz.Bytes(), "Content-Encoding", "gzip")
		w := startServerWorld(t, Options{BrotliQuality: DefaultBrotliQuality, Deadline: testenv.Scale(time.Minute),
			Rewritten: func(mt string) bool { return mt == "text/css" }}, h)
		resp, b := get(t, w, "/gzip.css", chromeHTTPS)
		if resp.Header.Get("Content-Encoding") != CodingGzip || !bytes.Equal(b, gz.Bytes()) {
			t.Errorf("style sheet pepd rewrites: Content-Encoding %q, %d bytes, want the origin's body byte for byte", resp.Header.Get("Content-Encoding"), len(b))
		}
		if got := w.skipped(SkipRewritten); got != 1 {
			t.Errorf("skipped{%q} %v, want 1", SkipRewritten, got)
		}
		if resp, _ := get(t, w, "/gzip.js", chromeHTTPS); resp.Header.Get("Content-Encoding") != CodingBrotli {
			t.Errorf("script: Content-Encoding %q, want br", resp.Header.Get("Content-Encoding"))
		}
	})

	t.Run("brotli off", func(t *testing.T) {
		w := startServerWorld(t, Options{Deadline: testenv.Scale(time.Minute)}, handlers)
		resp, b := get(t, w, "/plain.js", chromeHTTPS)
		if resp.Header.Get("Content-Encoding") != CodingGzip || !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
			t.Fatalf("plain script: Content-Encoding %q, want gzip", resp.Header.Get("Content-Encoding"))
		}
		resp, b = get(t, w, "/gzip.js", chromeHTTPS)
		if resp.Header.Get("Content-Encoding") != CodingGzip || !bytes.Equal(decoded(t, CodingGzip, b), js) {
			t.Fatalf("origin's gzip: Content-Encoding %q, want gzip of the script", resp.Header.Get("Content-Encoding"))
		}
	})
}

// TestServerResultsDir: with Options.ResultsDir, a second Server sharing
// the folder (pepd restarted) answers its first miss of a real photo
// (photo.jpg, a request that accepts AVIF) with the first Server's AVIF,
// byte for byte, from the folder: the WebP and the AVIF counted reused,
// none searched. A Server whose settings change the output (Brotli's
// quality here) uses a subfolder of its own and searches again; a kept
// file that does not decode is a miss (the search runs, its result
// replaces the file), never an error to the client.
func TestServerResultsDir(t *testing.T) {
	photo := readTestdata(t, "photo.jpg")
	handlers := map[string]http.HandlerFunc{"/photo.jpg": serveBytes(TypeJPEG, photo, "Cache-Control", "max-age=3600")}
	dir := t.TempDir()
	o := Options{ResultsDir: dir, Deadline: testenv.Scale(time.Minute), AVIF: AVIFOptions{Enabled: true}}
	reused := func(w *serverWorld, tr string) float64 { return testutil.ToFloat64(w.m.reuse.WithLabelValues(tr)) }
	serve := func(w *serverWorld, what string) []byte {
		t.Helper()
		resp, b, err := w.get(t, "/photo.jpg")
		if err != nil || resp.Header.Get("Content-Type") != TypeAVIF || len(b) >= len(photo) {
			t.Fatalf("%s: %v %v, want the AVIF", what, resp, err)
		}
		return b
	}
	first := serve(startServerWorld(t, o, handlers), "first Server")
	subs, err := os.ReadDir(dir)
	if err != nil || len(subs) != 1 {
		t.Fatalf("results_dir holds %v (%v), want one settings subfolder", subs, err)
	}
	sub := filepath.Join(dir, subs[0].Name())
	files, _ := os.ReadDir(sub)
	if len(files) != 2 {
		t.Fatalf("%d kept files, want 2 (the WebP and the AVIF)", len(files))
	}

	w := startServerWorld(t, o, handlers)
	if got := serve(w, "restarted Server"); !bytes.Equal(got, first) {
		t.Errorf("restarted Server: %d bytes differ from the first Server's %d", len(got), len(first))
	}
	if rw, ra := reused(w, "webp"), reused(w, "avif"); rw != 1 || ra != 1 {
		t.Errorf("restarted Server reused webp %v, avif %v; want 1, 1 (nothing searched)", rw, ra)
	}

	other := o
	other.BrotliQuality = DefaultBrotliQuality - 1
	w = startServerWorld(t, other, handlers)
	serve(w, "other settings")
	if rw, ra := reused(w, "webp"), reused(w, "avif"); rw != 0 || ra != 0 {
		t.Errorf("other settings reused webp %v, avif %v; want 0, 0", rw, ra)
	}
	if subs, _ := os.ReadDir(dir); len(subs) != 2 {
		t.Errorf("results_dir holds %d subfolders after other settings, want 2", len(subs))
	}

	for _, f := range files {
		if err := os.WriteFile(filepath.Join(sub, f.Name()), []byte("not gob"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w = startServerWorld(t, o, handlers)
	if got := serve(w, "corrupt files"); !bytes.Equal(got, first) {
		t.Errorf("corrupt files: the search's %d bytes differ from the first's %d", len(got), len(first))
	}
	if rw, ra := reused(w, "webp"), reused(w, "avif"); rw != 0 || ra != 0 {
		t.Errorf("corrupt files reused webp %v, avif %v; want 0, 0", rw, ra)
	}
	w = startServerWorld(t, o, handlers)
	serve(w, "after the files were replaced")
	if rw, ra := reused(w, "webp"), reused(w, "avif"); rw != 1 || ra != 1 {
		t.Errorf("after the files were replaced: reused webp %v, avif %v; want 1, 1", rw, ra)
	}
}
