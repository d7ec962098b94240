package httpproxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pep/internal/cachepolicy"
	"pep/internal/mode"
	pepsquid "pep/internal/squid"
	"pep/testbed/corpus"
)

// The cache trace (make cache-trace): browsing sessions over the tp5n
// pages replayed through pepd and a real Squid, with admission off (admit
// all), with second-hit admission, and with second-hit admission and a
// memory tier (a memory-only Squid as the disk Squid's parent,
// squid.Conf.MemoryTier), from a cold cache each.
//
// The trace model (fixed seed, so both runs replay the same requests):
//   - every tp5n page is a site with traceArticles articles; an article
//     view loads the page's objects. The page's HTML document and its
//     JPEG images are the article's own (their URLs get an /~aN prefix,
//     one per article: text and photos differ between articles); every
//     other object (CSS, JavaScript, PNG/GIF sprites and logos, fonts) is
//     the site's, the same URL for every article;
//   - page popularity is Zipf: sites by Zipf(traceAlpha) over a seeded
//     random order of the 100 sites, articles by Zipf(traceAlpha) within
//     a site (Breslau et al., INFOCOM 1999, measured alpha 0.64-0.83 at
//     proxies);
//   - a session is one subscriber on one site: 1 + a geometric number of
//     article views (mean traceSessionViews), with the phone's own cache:
//     an object is asked for once per session;
//   - every object is cacheable for a day (Cache-Control: max-age=86400):
//     the trace measures admission, not the origins' headers.
const (
	traceArticles     = 1000
	traceAlpha        = 0.8
	traceSessionViews = 3.0
	traceSeed         = 20260101
)

// traceRequest is one request of the trace: host and escaped target.
type traceRequest struct{ host, target string }

// traceSession is one subscriber's requests, in order.
type traceSession []traceRequest

// zipf draws ranks 0..n-1 with P(k) proportional to 1/(k+1)^alpha.
type zipf struct{ cdf []float64 }

func newZipf(n int, alpha float64) *zipf {
	z := &zipf{cdf: make([]float64, n)}
	sum := 0.0
	for k := range n {
		sum += 1 / math.Pow(float64(k+1), alpha)
		z.cdf[k] = sum
	}
	for k := range z.cdf {
		z.cdf[k] /= sum
	}
	return z
}

func (z *zipf) draw(r *rand.Rand) int {
	u := r.Float64()
	lo, hi := 0, len(z.cdf)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if z.cdf[mid] < u {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// buildTrace makes sessions with views page views in all (see the trace
// model above).
func buildTrace(c *corpus.Corpus, views int) []traceSession {
	r := rand.New(rand.NewPCG(traceSeed, traceSeed))
	sites := r.Perm(len(c.Pages)) // popularity rank -> page
	siteZ := newZipf(len(c.Pages), traceAlpha)
	artZ := newZipf(traceArticles, traceAlpha)
	var trace []traceSession
	for n := 0; n < views; {
		p := c.Pages[sites[siteZ.draw(r)]]
		k := 1
		for r.Float64() > 1/traceSessionViews && k < 20 {
			k++
		}
		var s traceSession
		seen := map[traceRequest]bool{}
		for range k {
			if n == views {
				break
			}
			n++
			art := artZ.draw(r)
			for i, o := range p.Objects {
				path := o.Path
				if i == 0 && strings.HasPrefix(o.ContentType, "text/html") || o.ContentType == "image/jpeg" {
					path = "/~a" + strconv.Itoa(art) + path
				}
				req := traceRequest{o.Host, (&url.URL{Path: path}).EscapedPath()}
				if !seen[req] {
					seen[req] = true
					s = append(s, req)
				}
			}
		}
		trace = append(trace, s)
	}
	return trace
}

// traceIdeal counts what an unbounded cache would do with the trace:
// bytes asked for, bytes written (admit all: every distinct object once;
// second hit: objects asked for twice or more, once) and bytes served
// from the cache.
func traceIdeal(c *corpus.Corpus, trace []traceSession) (requests, bytes, writeAll, writeSecond, hitAll, hitSecond int64) {
	size := func(q traceRequest) int64 {
		p, _ := url.PathUnescape(q.target)
		p = stripArticle(p)
		if o, ok := c.Get(q.host, p); ok {
			return int64(len(o.Body))
		}
		return 0
	}
	count := map[traceRequest]int64{}
	for _, s := range trace {
		for _, q := range s {
			count[q]++
			requests++
			bytes += size(q)
		}
	}
	for q, n := range count {
		b := size(q)
		writeAll += b
		hitAll += (n - 1) * b
		if n >= 2 {
			writeSecond += b
			hitSecond += (n - 2) * b
		}
	}
	return
}

// stripArticle removes the /~aN article prefix of a trace path.
func stripArticle(p string) string {
	if !strings.HasPrefix(p, "/~a") {
		return p
	}
	if i := strings.IndexByte(p[1:], '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// traceOrigin serves the corpus objects by Host and path (article prefix
// stripped), each cacheable for a day, and counts requests and body bytes.
type traceOrigin struct {
	c              *corpus.Corpus
	requests, sent atomic.Int64
	notFound       atomic.Int64
}

func (o *traceOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.requests.Add(1)
	host, _, _ := net.SplitHostPort(r.Host)
	obj, ok := o.c.Get(host, stripArticle(r.URL.Path))
	if !ok {
		o.notFound.Add(1)
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", obj.ContentType)
	w.Header().Set("Cache-Control", "max-age=86400")
	w.Header().Set("Content-Length", strconv.Itoa(len(obj.Body)))
	n, _ := w.Write(obj.Body)
	o.sent.Add(int64(n))
}

// procWriteBytes reads write_bytes of /proc/PID/io: the bytes the
// process (all its threads: aufs writes in threads) caused to be sent to
// the block layer; -1 when it cannot be read.
func procWriteBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "write_bytes: "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return -1
}

// traceVariant is one replay's cache setup: admission off or second-hit,
// with or without a memory tier of tierMB megabytes (squid.Conf.MemoryTier).
type traceVariant struct {
	name      string
	admission bool
	tierMB    int
}

// traceResult is one replay's figures.
type traceResult struct {
	admission                  string
	tier                       pepsquid.Stats // the memory tier's, when there is one
	tierWriteBytes             int64
	requests, errors           int64
	clientBytes                int64 // body bytes the subscribers received
	originRequests, originSent int64 // at the origin
	squid                      pepsquid.Stats
	writeBytes                 int64 // Squid's /proc/PID/io write_bytes, delta
	firstSeen                  int64
	elapsed                    time.Duration
}

// replayTrace runs the trace through a fresh pepd and Squid with
// admission on or off.
func replayTrace(t *testing.T, c *corpus.Corpus, trace []traceSession, v traceVariant, workers int) traceResult {
	admission := v.admission
	res := traceResult{admission: v.name}
	records := map[string]string{}
	for _, h := range c.Hosts() {
		records[h] = originIP
	}
	ns := startDNS(t, records)
	l, err := net.Listen("tcp", originIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	org := &traceOrigin{c: c}
	osrv := &http.Server{Handler: org}
	go osrv.Serve(l)
	t.Cleanup(func() { osrv.Close() })
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	sc := siteSquidConf(t, ns, records, port)
	sc.Admission = admission
	var tier *squid
	var tierMgr *pepsquid.Manager
	if v.tierMB > 0 {
		tc := sc
		tc.Admission, tc.MemoryOnly, tc.ProxyProtocol = false, true, false
		tc.Pepd, tc.Subscribers = []string{"127.0.0.1/32"}, []string{"127.0.0.1/32"}
		tier = startSquidSized(t, tc, "", 100, v.tierMB)
		tierMgr = &pepsquid.Manager{Addr: tier.Addr, Timeout: 10 * time.Second}
		sc.MemoryTier = tier.Addr
	}
	// The gateway's memory cache; a disk cache large enough that nothing
	// is evicted (the trace measures admission, not replacement).
	sq := startSquidSized(t, sc, "", 40000, 256)
	var adm *cachepolicy.Admission
	if admission {
		if adm, err = cachepolicy.NewAdmission(cachepolicy.AdmissionOptions{Window: time.Hour, Items: 1_000_000}); err != nil {
			t.Fatal(err)
		}
	}
	pol := cachepolicy.NewPolicy(adm, admission)
	p := startPepd(t, pepdOpts{squid: sq.Addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.Off,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80, port}, cache: pol,
		upTimeout: 60 * time.Second})
	mgr := &pepsquid.Manager{Addr: sq.Addr, ProxyProtocol: true, Timeout: 10 * time.Second}
	before, err := mgr.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wb0 := procWriteBytes(sq.Cmd.Process.Pid)
	var tierBefore pepsquid.Stats
	var twb0 int64
	if tier != nil {
		if tierBefore, err = tierMgr.Fetch(context.Background()); err != nil {
			t.Fatal(err)
		}
		twb0 = procWriteBytes(tier.Cmd.Process.Pid)
	}
	sessions := make(chan traceSession)
	var wg sync.WaitGroup
	var requests, errs, bytes atomic.Int64
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One kept-alive connection per worker, as a phone's
			// connection to the VIP in dns mode: origin-form requests
			// routed by Host (the relay's path).
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 2, byte(w+1))}}
			var conn net.Conn
			var br *bufio.Reader
			var err error
			for s := range sessions {
				for _, q := range s {
					requests.Add(1)
					if conn == nil {
						if conn, err = d.Dial("tcp", p.Addr); err != nil {
							errs.Add(1)
							conn = nil
							continue
						}
						br = bufio.NewReaderSize(conn, 64<<10)
					}
					conn.SetDeadline(time.Now().Add(60 * time.Second))
					_, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: pep-cache-trace\r\n\r\n", q.target, q.host, port)
					var resp *http.Response
					if err == nil {
						resp, err = http.ReadResponse(br, nil)
					}
					if err != nil {
						errs.Add(1)
						conn.Close()
						conn = nil
						continue
					}
					n, err := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					bytes.Add(n)
					if err != nil || resp.StatusCode != 200 || resp.Close {
						if resp.StatusCode != 200 || err != nil {
							errs.Add(1)
						}
						conn.Close()
						conn = nil
					}
				}
			}
			if conn != nil {
				conn.Close()
			}
		}()
	}
	for _, s := range trace {
		sessions <- s
	}
	close(sessions)
	wg.Wait()
	res.elapsed = time.Since(start)
	// aufs finishes its writes in its own threads: wait until the disk
	// writes stop moving.
	var after pepsquid.Stats
	for last := int64(-1); ; time.Sleep(500 * time.Millisecond) {
		if after, err = mgr.Fetch(context.Background()); err != nil {
			t.Fatal(err)
		}
		if after.SwapOuts == last {
			break
		}
		last = after.SwapOuts
	}
	wb1 := procWriteBytes(sq.Cmd.Process.Pid)
	res.requests, res.errors, res.clientBytes = requests.Load(), errs.Load(), bytes.Load()
	res.originRequests, res.originSent = org.requests.Load(), org.sent.Load()
	res.writeBytes = wb1 - wb0
	res.firstSeen = pol.Counts().FirstSeen
	res.squid = pepsquid.Stats{
		Requests: after.Requests - before.Requests, Hits: after.Hits - before.Hits,
		SentBytes: after.SentBytes - before.SentBytes, HitSentBytes: after.HitSentBytes - before.HitSentBytes,
		OriginRequests: after.OriginRequests - before.OriginRequests, OriginBytes: after.OriginBytes - before.OriginBytes,
		SwapOuts: after.SwapOuts - before.SwapOuts, SwapIns: after.SwapIns - before.SwapIns,
		MemObjects: after.MemObjects, MemBytes: after.MemBytes, DiskObjects: after.DiskObjects, DiskBytes: after.DiskBytes,
	}
	if tier != nil {
		ta, err := tierMgr.Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		res.tier = pepsquid.Stats{Requests: ta.Requests - tierBefore.Requests, Hits: ta.Hits - tierBefore.Hits,
			SentBytes: ta.SentBytes - tierBefore.SentBytes, HitSentBytes: ta.HitSentBytes - tierBefore.HitSentBytes,
			SwapOuts: ta.SwapOuts - tierBefore.SwapOuts, MemObjects: ta.MemObjects, MemBytes: ta.MemBytes}
		res.tierWriteBytes = procWriteBytes(tier.Cmd.Process.Pid) - twb0
	}
	if n := org.notFound.Load(); n > 0 {
		t.Errorf("%s: the origin answered 404 %d times (a trace URL without its object)", res.admission, n)
	}
	return res
}

// TestCacheTrace is make cache-trace: PEP_CACHE_TRACE names the corpus
// (the tp5n .tar.gz); PEP_CACHE_TRACE_VIEWS the page views (default
// 20000); PEP_CACHE_TRACE_TIER_MB the memory tier's cache_mem in MB,
// one run per size, comma-separated (default 1024). It prints the figures
// of each run (admit all, second-hit, second-hit with each tier) and
// reports the target
// for each admission run against admit-all: at most half the bytes
// written to disk, for a gateway byte hit ratio (1 - origin bytes / bytes
// served: the disk Squid and the tier together) within 2 points.
func TestCacheTrace(t *testing.T) {
	spec := os.Getenv("PEP_CACHE_TRACE")
	if spec == "" {
		t.Skip("PEP_CACHE_TRACE=path/to/tp5n.tar.gz runs the cache trace (make cache-trace)")
	}
	views := 20000
	if v := os.Getenv("PEP_CACHE_TRACE_VIEWS"); v != "" {
		var err error
		if views, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	c, err := corpus.Open(spec)
	if err != nil {
		t.Fatal(err)
	}
	trace := buildTrace(c, views)
	reqs, bytes, writeAll, writeSecond, hitAll, hitSecond := traceIdeal(c, trace)
	t.Logf("trace: %d pages (sites) x %d articles, Zipf alpha %.2f, %d page views in %d sessions, seed %d: %d requests, %.1f MB",
		len(c.Pages), traceArticles, traceAlpha, views, len(trace), traceSeed, reqs, mb(bytes))
	t.Logf("unbounded cache, by counting: admit all writes %.1f MB, byte hit ratio %.1f %%; second-hit writes %.1f MB (%.2fx), byte hit ratio %.1f %%",
		mb(writeAll), pct(hitAll, bytes), mb(writeSecond), float64(writeSecond)/float64(writeAll), pct(hitSecond, bytes))
	if os.Getenv("PEP_CACHE_TRACE_COUNT_ONLY") != "" {
		return // the trace's figures by counting only, no replay
	}
	variants := []traceVariant{{name: "off (admit all)"}, {name: "second-hit", admission: true}}
	tiers := "1024"
	if v := os.Getenv("PEP_CACHE_TRACE_TIER_MB"); v != "" {
		tiers = v
	}
	for _, f := range strings.Split(tiers, ",") {
		tierMB, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || tierMB <= 0 {
			t.Fatalf("PEP_CACHE_TRACE_TIER_MB=%q: want memory tier sizes in MB, comma-separated", tiers)
		}
		variants = append(variants, traceVariant{name: fmt.Sprintf("second-hit + memory tier %d MB", tierMB), admission: true, tierMB: tierMB})
	}
	var res []traceResult
	for _, v := range variants {
		r := replayTrace(t, c, trace, v, 8)
		res = append(res, r)
		q := r.squid
		t.Logf("admission %s: %d requests (%d errors) in %s; gateway byte hit ratio (1 - origin bytes / bytes served) %.1f %%; disk Squid: hit ratio %.1f %%, byte hit ratio %.1f %%; origin %d requests, %.1f MB; "+
			"disk writes %d objects (swap.outs), disk cache %.1f MB in %d objects; Squid wrote %.1f MB to the block layer (/proc/PID/io write_bytes: cache files, swap.state, logs); memory %d objects, %.1f MB; first-seen marks %d",
			r.admission, r.requests, r.errors, r.elapsed.Round(time.Second), r.gatewayByteHitRatio(), 100*q.HitRatio(), 100*q.ByteHitRatio(), r.originRequests, mb(r.originSent),
			q.SwapOuts, mb(q.DiskBytes), q.DiskObjects, mb(r.writeBytes), q.MemObjects, mb(q.MemBytes), r.firstSeen)
		if v.tierMB > 0 {
			t.Logf("  memory tier: %d requests, %d hits (%.1f %%), %.1f MB of %.1f MB from memory; %d objects, %.1f MB at the end; disk writes %d objects, %.1f MB to the block layer (logs)",
				r.tier.Requests, r.tier.Hits, 100*r.tier.HitRatio(), mb(r.tier.HitSentBytes), mb(r.tier.SentBytes), r.tier.MemObjects, mb(r.tier.MemBytes), r.tier.SwapOuts, mb(r.tierWriteBytes))
		}
	}
	off := res[0]
	verdict := func(ok bool) string { return map[bool]string{true: "met", false: "MISSED"}[ok] }
	for _, on := range res[1:] {
		diskRatio := float64(on.squid.DiskBytes) / float64(off.squid.DiskBytes)
		writeRatio := float64(on.writeBytes+on.tierWriteBytes) / float64(off.writeBytes)
		bhrOff, bhrOn := off.gatewayByteHitRatio(), on.gatewayByteHitRatio()
		t.Logf("%s against admit all: disk cache bytes %.2fx, swap.outs %.2fx, block-layer writes (both Squids) %.2fx; gateway byte hit ratio %.1f %% against %.1f %% (%+.1f points); origin requests %.2fx, origin bytes %.2fx",
			on.admission, diskRatio, float64(on.squid.SwapOuts)/float64(off.squid.SwapOuts), writeRatio, bhrOn, bhrOff, bhrOn-bhrOff,
			float64(on.originRequests)/float64(off.originRequests), float64(on.originSent)/float64(off.originSent))
		// The target, reported (a benchmark, not a pass/fail test).
		t.Logf("%s: target disk writes <= 0.5x admit all: %s (%.2fx); target byte hit ratio within 2 points: %s (%+.1f points)",
			on.admission, verdict(diskRatio <= 0.5), diskRatio, verdict(bhrOff-bhrOn <= 2), bhrOn-bhrOff)
		if on.errors > 0 {
			t.Errorf("%s: %d failed requests", on.admission, on.errors)
		}
	}
	if off.errors > 0 {
		t.Errorf("%s: %d failed requests", off.admission, off.errors)
	}
}

// gatewayByteHitRatio is the share of the body bytes served to the
// subscribers that did not come from the origin, in percent: the hit
// ratio of the gateway as a whole (the disk Squid and the memory tier).
func (r traceResult) gatewayByteHitRatio() float64 {
	return 100 * (1 - float64(r.originSent)/float64(r.clientBytes))
}

func mb(n int64) float64 { return float64(n) / 1e6 }

func pct(a, b int64) float64 { return 100 * float64(a) / float64(b) }
