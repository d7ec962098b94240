package optimize

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/singleflight"

	"pep/internal/coding"
)

// MarkHeader is the request header pepd adds when a request may be
// optimized (the switch is on, the site is not excluded, the request is a
// GET or HEAD without Range or no-transform: Wanted). The optimizer
// transforms only marked requests, names the header in Vary with Accept
// or Accept-Encoding, and removes it before the origin: Squid keeps the
// transformed and the original variant apart (RFC 9111 §4.1), so
// switching the optimizer off serves originals at once.
const MarkHeader = "Pep-Optimize"

// LinkRateHeader carries, on a request pepd marked (MarkHeader), the
// subscriber's downlink rate as pepd estimates it from its connections'
// TCP delivery rates, in decimal bytes per second, then a space and an
// opaque token that names the subscriber (the same for all its requests,
// not its address): "200000 9f86d081884c7d65". With Options.LinkDeadline
// set, a response waits for its transform as long as the link needs to
// carry it and the subscriber's other responses waiting before it
// (Server.wait). It is not in Vary: it changes how long a response may
// wait, never which variant it is. The optimizer removes it before the
// origin; pepd drops a subscriber's own.
const LinkRateHeader = "Pep-Link-Rate"

// TransformHeader names the transform a response went through ("webp",
// "avif", "jpeg", "gzip", "br"); the optimizer sets it and Squid stores
// it with the variant, so that pepd can count cache hits on transformed
// variants. pepd removes it before the radio link (header diet).
const TransformHeader = "Pep-Transform"

// DefaultQueuePerWorker is Options.Queue's default per worker. It covers
// a page's image misses arriving at once over one HTTP/2 connection
// (https.max_streams, 100): with the old 4 per worker, a multiplexed load
// overloaded the queue and most of its images ran no transform at all,
// not even for the next miss (testbed/README.md, "The optimizer over
// HTTP/2").
const DefaultQueuePerWorker = 64

// DefaultQueueBytes is Options.QueueBytes's default.
const DefaultQueueBytes = 64 << 20

// DefaultDeadline is Options.Deadline's default: the longest a response
// waits for its transform (config optimize.deadline).
const DefaultDeadline = 100 * time.Millisecond

// DefaultResultsDirBytes is Options.ResultsDirBytes's default (config
// optimize.results_dir_bytes): 1 GiB, about twenty times what every
// transform of tp5n's 100 pages takes (WebP, AVIF and text: 52 MB in
// 8,974 files, session 35).
const DefaultResultsDirBytes = 1 << 30

// DefaultResultBytes is Options.ResultBytes's default (config
// optimize.result_bytes): 64 MiB of finished transforms, about 2,500 WebP
// variants of tp5n's median image.
const DefaultResultBytes = 64 << 20

// DeferredHeader marks a response served untransformed because its
// transform did not finish within Options.Deadline (its value names the
// transform). The transform goes on; its result is kept for the next miss
// of the object. Squid must not store such a response (configs/squid.conf:
// store_miss deny pep_deferred), else its hits would never get the
// variant; pepd removes the header before the radio link.
const DeferredHeader = "Pep-Deferred"

// etagSuffix marks a transformed variant's validator: W/"<origin
// opaque-tag>.pep-<transform>" (RFC 9110 §8.8.3: a new representation,
// weak since its bytes follow the encoder's version).
const etagSuffix = ".pep-"

// Options configure a Server.
type Options struct {
	// Image are the image transform's settings.
	Image ImageOptions
	// Rewritten reports whether responses of a media type (lowercase,
	// without parameters) are now decoded, rewritten and encoded again by
	// pepd's URL rewriter on their way to the phone (url mode's HTML and
	// CSS; httpproxy.Proxy.Rewrites). Their text transform would be
	// undone there and only hold the response back (a cold document's or
	// stylesheet's 10-20 ms in the testbed's packet captures), so they pass
	// at once, streamed (SkipRewritten). Nil: none.
	Rewritten func(mediaType string) bool
	// BrotliQuality, 1-11, turns brotli on: text goes to a request whose
	// Accept-Encoding names br as brotli at this quality, text the origin
	// gzipped included (decoded first; Text). Zero: gzip only (GzipLevel,
	// of text the origin sent plain or gzipped).
	BrotliQuality int
	// MaxBodyBytes bounds a body the optimizer buffers to transform;
	// larger bodies stream through untouched (SkipTooLarge). Zero: 8 MiB.
	MaxBodyBytes int64
	// Workers is how many transforms run at once (zero: GOMAXPROCS).
	Workers int
	// Queue bounds the transforms waiting for a worker (zero:
	// DefaultQueuePerWorker*Workers); beyond it, or beyond QueueBytes, a
	// body passes untouched and no transform runs (SkipOverload).
	Queue int
	// QueueBytes bounds the origin bodies held by transforms waiting or
	// running, in bytes (zero: DefaultQueueBytes): a deferred transform
	// keeps its body after the response went.
	QueueBytes int64
	// Deadline bounds how long a response waits for its transform, for a
	// worker and the transform together (zero: DefaultDeadline). Past it
	// the response goes untransformed and unstored (SkipDeferred,
	// DeferredHeader) and the transform finishes behind it: a transform
	// never delays a response by more than Deadline (on a slow link, with
	// LinkDeadline, more than the wait Server.wait gives it).
	Deadline time.Duration
	// LinkDeadline, when above Deadline, sizes a response's wait by its
	// subscriber's link (LinkRateHeader, set by pepd): the time that link
	// needs for the original bodies of the subscriber's responses waiting
	// for a transform, this one's included (the link would carry them
	// before this one in any case), at least Deadline and at most
	// LinkDeadline (Server.wait). A page's images reach the optimizer at
	// once over HTTP/2: on 3G (about 200 kB/s) the first of 50 images of
	// 10 kB waits Deadline and the last 2.5 s (LinkDeadline 2 s); on LTE
	// (1.5 MB/s) the last waits a third of a second. Waiting pays where the
	// link is slower than the transforms (testbed/README.md, "The deadline
	// on 3G and on LTE"). Zero, or no rate on the request: Deadline.
	LinkDeadline time.Duration
	// LinkFloor, when above zero and below Deadline, lets a response on a
	// fast link wait less than Deadline: with its subscriber's rate known,
	// it waits the time that link needs for the subscriber's waiting bodies
	// and its own (as LinkDeadline), at least LinkFloor (Server.wait).
	// Holding a response past the time its link would take to carry it
	// whole delays the page by more than the transform can save: on LTE
	// (1.5 MB/s) a 20 kB image is 13 ms of link, on 3G (200 kB/s) 100 ms.
	// Zero, or no rate on the request: Deadline is the least wait.
	LinkFloor time.Duration
	// DeferLate turns the backlog's prediction off: every response waits
	// up to Deadline for its transform, as before session 14. By default
	// (false) a response whose transform the backlog predicts to finish
	// after Deadline (the work queued ahead shared by the workers, plus its
	// own, from the wall time per pixel of the format's recent transforms)
	// is served untransformed at once (SkipBacklog), and its transform is
	// queued for the next miss as a deferred one is.
	DeferLate bool
	// QuickQuality, 1-100, serves a quick WebP to an image response the
	// backlog turns away (SkipBacklog): one lossy encode at this quality
	// (Quick) in a pool of its own (Workers running, Queue waiting), never
	// behind the searches for the next miss, served if it reaches the SSIM
	// target and finishes within the response's wait (its cost predicted
	// by that pool's backlog from earlier quick encodes). It is marked
	// DeferredHeader, so Squid does not store it: the next miss gets the
	// search's smaller result. Zero: the original, as before session 24.
	// Needs Image.Target above 0. Counted by
	// pep_optimize_quick_total{outcome}.
	QuickQuality int
	// ByArrival starts waiting transforms in the order they arrived
	// (config optimize.order: arrival, pepd's default). False starts the
	// most urgent first: the request's RFC 9218 Priority urgency (Urgency;
	// Chromium sends it over HTTP/2), then arrival.
	ByArrival bool
	// ResultBytes bounds the finished transforms kept for the next miss of
	// their object, in bytes (zero: DefaultResultBytes).
	ResultBytes int64
	// ResultsDir, when set, keeps the finished transforms on disk too, in
	// a subfolder named after the settings that decide their output, and
	// a miss looks there after memory (results): a restart, or another
	// Server sharing the folder, does not repeat them (keptDir); bounded
	// by ResultsDirBytes; ResetResults leaves it. "" (the default):
	// memory only.
	ResultsDir string
	// ResultsDirBytes bounds ResultsDir, every subfolder included: past
	// it the files least recently stored or read go first (zero:
	// DefaultResultsDirBytes).
	ResultsDirBytes int64
	// AVIF serves AVIF to requests whose Accept names image/avif (config
	// optimize.avif, optimize.avif_workers, optimize.avif_queue).
	AVIF AVIFOptions
	// Lookup resolves an origin's host name (the carrier resolvers, never
	// pepd's rewriter). Required.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// Control is applied to every origin socket before connect (pepd's
	// guard: not an open proxy, no internal destinations). Nil: none.
	Control func(network, address string, c syscall.RawConn) error
	// UpstreamTimeout bounds an origin's response head (zero: 60s).
	UpstreamTimeout time.Duration
	// Metrics records what the optimizer does; nil records nothing.
	Metrics *Metrics
	// Log; nil discards.
	Log *slog.Logger
}

// AVIFOptions configure AVIF serving (issue 27). A request whose Accept
// names image/avif (q > 0) and image/webp gets the AVIF at the SSIM
// target (optimize.AVIF) when it is smaller than the WebP. An AVIF search
// costs several times the WebP's CPU (README "AVIF"), so it runs behind
// the response: the WebP (or the original) is served within Deadline,
// marked DeferredHeader "avif" so that Squid does not store it while the
// AVIF is encoded, and the next miss of the object gets the AVIF (or, when
// the AVIF is not smaller, the WebP, stored) from the kept results. Squid
// keeps the variants apart by Vary: Accept: a request whose Accept does
// not name image/avif carries another Accept value and never gets a
// stored AVIF.
type AVIFOptions struct {
	// Enabled turns AVIF on; it needs ImageOptions.Target above 0 (AVIF is
	// chosen by the SSIM target only).
	Enabled bool
	// Workers is how many AVIF searches run at once, beside the WebP
	// transforms' Workers (zero: 1).
	Workers int
	// Queue bounds the AVIF searches waiting for a worker (zero:
	// DefaultAVIFQueue); beyond it the WebP is served and stored, and the
	// object gets no AVIF until Squid asks again
	// (pep_optimize_avif_total{outcome="overload"}).
	Queue int
}

// skipAVIFOverload is the AVIF search's answer when AVIFOptions.Queue is
// full (not kept: it is not a property of the body); counted as
// pep_optimize_avif_total{outcome="overload"}.
const skipAVIFOverload = "avif overload"

// DefaultAVIFQueue is AVIFOptions.Queue's default: each waiting search
// holds its origin body (at most Options.MaxBodyBytes).
const DefaultAVIFQueue = 32

// Server is the optimizer: an HTTP forward proxy that Squid uses as its
// parent (configs/squid.conf cache_peer pep_optimizer), so that what it
// returns, transformed or not, is what Squid stores; a transform runs once
// per object and variant, and later requests are Squid hits. It serves
// absolute-form requests only (from Squid).
type Server struct {
	o  Options
	rp *httputil.ReverseProxy
	// links are the body bytes, per subscriber (LinkRateHeader's token),
	// of the responses waiting for a transform (Server.wait).
	linksMu sync.Mutex
	links   map[string]int64
	// webp bounds the WebP transforms and text the gzip ones, each to
	// Options.Workers running and Queue waiting: a stylesheet's gzip (about
	// a millisecond) never waits behind a page's image transcodes.
	webp, text *workPool
	// quickPool bounds the quick WebPs (Options.QuickQuality) apart from the
	// searches, Workers running and Queue waiting: a quick encode never
	// waits for a worker behind a search for the next miss, which can
	// take half a second; the kernel shares the cores between them.
	quickPool *workPool
	// queuedBytes are the body bytes of the transforms waiting or running
	// (Options.QueueBytes).
	queuedBytes atomic.Int64
	flight      singleflight.Group
	// avif bounds the AVIF searches: AVIFOptions.Workers and Queue.
	avif *workPool
	// results are finished transforms for the next miss of their object.
	results *results
}

// New returns a Server for o.
func New(o Options) (*Server, error) {
	if o.Lookup == nil {
		return nil, errors.New("optimize: Options.Lookup is required")
	}
	if o.Image.Quality < 1 || o.Image.Quality > 100 {
		return nil, fmt.Errorf("optimize: quality %d outside 1-100", o.Image.Quality)
	}
	if o.Image.Target < 0 || o.Image.Target > 1 || o.Image.TileFloor < 0 || o.Image.TileFloor > 1 {
		return nil, fmt.Errorf("optimize: ssim target %v or tile floor %v outside 0-1", o.Image.Target, o.Image.TileFloor)
	}
	if o.Image.Refine < 0 || o.Image.Refine > MaxRefine {
		return nil, fmt.Errorf("optimize: refine %d outside 0-%d", o.Image.Refine, MaxRefine)
	}
	if o.AVIF.Enabled && o.Image.Target <= 0 {
		return nil, errors.New("optimize: avif needs an ssim target above 0 (AVIF is chosen by the SSIM target)")
	}
	if o.AVIF.Workers <= 0 {
		o.AVIF.Workers = 1
	}
	if o.AVIF.Queue <= 0 {
		o.AVIF.Queue = DefaultAVIFQueue
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = int64(DefaultConfig().MaxBodyBytes)
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueuePerWorker * o.Workers
	}
	if o.QueueBytes <= 0 {
		o.QueueBytes = DefaultQueueBytes
	}
	if o.Deadline <= 0 {
		o.Deadline = DefaultDeadline
	}
	if o.ResultBytes <= 0 {
		o.ResultBytes = DefaultResultBytes
	}
	if o.UpstreamTimeout <= 0 {
		o.UpstreamTimeout = 60 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	res := newResults(o.ResultBytes)
	if o.ResultsDir != "" {
		if o.ResultsDirBytes <= 0 {
			o.ResultsDirBytes = DefaultResultsDirBytes
		}
		var err error
		if res.disk, err = openKeptDir(o.ResultsDir, o, o.ResultsDirBytes, o.Log); err != nil {
			return nil, err
		}
	}
	s := &Server{o: o, results: res, links: map[string]int64{},
		webp:      newWorkPool(o.Workers, o.Queue, o.ByArrival, o.Metrics.queueDepth, o.Metrics.running, newBacklog(o.Workers, o.Metrics.backlogSeconds("webp"))),
		text:      newWorkPool(o.Workers, o.Queue, o.ByArrival, o.Metrics.queueDepth, o.Metrics.running, newBacklog(o.Workers, o.Metrics.backlogSeconds("gzip"))),
		quickPool: newWorkPool(o.Workers, o.Queue, o.ByArrival, o.Metrics.queueDepth, o.Metrics.running, newBacklog(o.Workers, o.Metrics.backlogSeconds("quick"))),
		avif:      newWorkPool(o.AVIF.Workers, o.AVIF.Queue, o.ByArrival, o.Metrics.avifQueueDepth, o.Metrics.running, newBacklog(o.AVIF.Workers, o.Metrics.backlogSeconds("avif")))}
	tr := &http.Transport{
		DialContext:           s.dial,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       60 * time.Second,
		ResponseHeaderTimeout: o.UpstreamTimeout,
		DisableCompression:    true, // the origin's encoding passes as it is
	}
	s.rp = &httputil.ReverseProxy{
		Rewrite:        s.rewrite,
		Transport:      tr,
		ModifyResponse: s.modify,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			o.Log.Debug("optimize: origin failed", "url", r.URL.String(), "err", err)
			http.Error(w, "origin failed", http.StatusBadGateway)
		},
		ErrorLog: slog.NewLogLogger(o.Log.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// dial connects to an origin: the host resolved by Options.Lookup, each
// address tried in turn with Options.Control applied.
func (s *Server) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	addrs, err := s.o.Lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: 10 * time.Second, Control: s.o.Control}
	var first error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = fmt.Errorf("optimize: %s has no address", host)
	}
	return nil, first
}

type ctxKey struct{}

// reqState is what rewrite learns of a request for modify.
type reqState struct {
	marked   bool   // MarkHeader was set: transforms allowed
	linkRate uint64 // LinkRateHeader, bytes/s; 0: not given
	linkSub  string // LinkRateHeader's subscriber token
	// revalidated is the transform named by If-None-Match's tags (they
	// were ours, mapped back to the origin's): a 304 maps its ETag again.
	revalidated string
}

// ServeHTTP serves one absolute-form request from Squid.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !r.URL.IsAbs() || r.URL.Scheme != "http" {
		http.Error(w, "optimize: absolute http:// request-target required", http.StatusBadRequest)
		return
	}
	st := &reqState{marked: r.Header.Get(MarkHeader) != ""}
	if st.marked {
		rate, token, _ := strings.Cut(r.Header.Get(LinkRateHeader), " ")
		st.linkRate, _ = strconv.ParseUint(rate, 10, 64) // 0 when absent or malformed: Deadline
		st.linkSub = token
	}
	r.Header.Del(MarkHeader)
	r.Header.Del(LinkRateHeader)
	if inm := r.Header.Get("If-None-Match"); strings.Contains(inm, etagSuffix) {
		r.Header.Set("If-None-Match", originTags(inm, &st.revalidated))
	}
	s.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, st)))
}

// rewrite sends the request to the origin it names, as a cache would.
// Expect is dropped: this server has already answered the expectation
// (net/http sends 100 Continue when the body is read), and the origin's own
// 100, which ReverseProxy relays, would reach the phone as a second one
// (RFC 9110 §10.1.1: a proxy may forward or answer an expectation, not
// both).
func (s *Server) rewrite(pr *httputil.ProxyRequest) {
	pr.Out.URL = pr.In.URL
	pr.Out.Host = pr.In.Host
	pr.Out.Header.Del("Expect")
}

// originTags maps If-None-Match's transformed tags back to the origin's
// (W/"abc.pep-webp" to W/"abc": If-None-Match compares weakly, RFC 9110
// §13.1.2) and reports the transform in *transform.
func originTags(inm string, transform *string) string {
	parts := strings.Split(inm, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if j := strings.LastIndex(p, etagSuffix); j > 0 && strings.HasSuffix(p, `"`) {
			*transform = p[j+len(etagSuffix) : len(p)-1]
			p = p[:j] + `"`
			if !strings.HasPrefix(p, "W/") {
				p = "W/" + p
			}
		}
		parts[i] = p
	}
	return strings.Join(parts, ", ")
}

// variantETag is the ETag of the transform t of a response whose ETag
// is etag ("" when it has none).
func variantETag(etag, t string) string {
	if etag == "" || !strings.HasSuffix(etag, `"`) {
		return ""
	}
	etag = strings.TrimPrefix(etag, "W/")
	return "W/" + etag[:len(etag)-1] + etagSuffix + t + `"`
}

// contentCoding returns a response's content coding (coding.Of): ""
// for none or identity, "x-gzip" as "gzip" (RFC 9110 §8.4.1.3), "several"
// for more than one Content-Encoding field.
func contentCoding(h http.Header) string {
	ce, several := coding.Of(h)
	switch {
	case several:
		return "several"
	case ce == "identity":
		return ""
	case ce == "x-gzip":
		return CodingGzip
	}
	return ce
}

// kindOf returns "image" or "text" for a response the optimizer could
// transform for some request, "" for the others: 200, no Content-Range,
// no no-transform, a JPEG/PNG/GIF without content coding, or a text type
// without content coding or gzipped (brotli may re-encode it).
func kindOf(resp *http.Response) (kind, reason string) {
	if resp.StatusCode != http.StatusOK {
		return "", ""
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case mt == TypeJPEG || mt == TypePNG || mt == TypeGIF:
		kind = "image"
	case IsText(mt):
		kind = "text"
	default:
		return "", ""
	}
	if hasToken(resp.Header.Values("Cache-Control"), "no-transform") {
		return "", SkipNoTransform
	}
	if resp.Header.Get("Content-Range") != "" {
		return "", SkipRange
	}
	if ce := contentCoding(resp.Header); ce != "" && !(kind == "text" && ce == CodingGzip) {
		return "", SkipEncoded
	}
	return kind, ""
}

// modify transforms a marked request's response where it can (Image,
// Gzip) and marks every response whose bytes depend on the request in
// Vary; anything it cannot handle passes byte for byte.
func (s *Server) modify(resp *http.Response) error {
	st, _ := resp.Request.Context().Value(ctxKey{}).(*reqState)
	if st == nil {
		return nil
	}
	if resp.StatusCode == http.StatusNotModified && (st.marked || st.revalidated != "") {
		// A 304 updates the headers Squid stored (RFC 9111 §4.3.4), and
		// the stored response may be a variant: the origin's ETag,
		// Content-Type, Content-Encoding or Vary must not overwrite the
		// variant's. With If-None-Match naming a variant tag the ETag is
		// mapped to it; otherwise (Squid revalidates with If-Modified-Since)
		// the stored ETag stays.
		et := resp.Header.Get("ETag")
		for _, h := range []string{"ETag", "Content-Type", "Content-Encoding", "Content-Length", "Vary", "Content-MD5", "Digest"} {
			resp.Header.Del(h)
		}
		if et != "" && st.revalidated != "" {
			resp.Header.Set("ETag", variantETag(et, st.revalidated))
		}
		return nil
	}
	kind, reason := kindOf(resp)
	if kind == "" {
		if reason != "" && st.marked {
			s.o.Metrics.skip(reason)
		}
		return nil
	}
	req := resp.Request
	if kind == "image" {
		addVary(resp.Header, "Accept", MarkHeader)
	} else {
		addVary(resp.Header, "Accept-Encoding", MarkHeader)
	}
	if !st.marked || req.Method != http.MethodGet {
		return nil
	}
	if req.Header.Get("Range") != "" {
		s.o.Metrics.skip(SkipRange)
		return nil
	}
	if hasToken(req.Header.Values("Cache-Control"), "no-transform") {
		s.o.Metrics.skip(SkipNoTransform)
		return nil
	}
	t, enc := "webp", contentCoding(resp.Header)
	if kind == "text" {
		switch ae := req.Header.Values("Accept-Encoding"); {
		case s.o.BrotliQuality > 0 && accepts(ae, CodingBrotli):
			t = CodingBrotli
		case accepts(ae, CodingGzip):
			t = CodingGzip
		default:
			t = ""
		}
	}
	if t == "" || kind == "image" && !accepts(req.Header.Values("Accept"), TypeWebP) {
		s.o.Metrics.skip(SkipNoAccept)
		return nil
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if kind == "text" && s.o.Rewritten != nil && s.o.Rewritten(mt) {
		s.o.Metrics.skip(SkipRewritten)
		return nil
	}
	body, whole, err := readUpTo(resp.Body, s.o.MaxBodyBytes)
	if err != nil {
		// The origin failed mid-body: pass on what came and the failure.
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), errReader{err}), resp.Body}
		return nil
	}
	if !whole {
		s.o.Metrics.skip(SkipTooLarge)
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
		return nil
	}
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	avif := kind == "image" && s.o.AVIF.Enabled && accepts(req.Header.Values("Accept"), TypeAVIF)
	wait, leave := s.wait(st.linkRate, st.linkSub, len(body))
	out, ctype, t, skip, unstored := s.transform(t, body, enc, avif, Urgency(req.Header.Values("Priority")), wait)
	leave()
	if unstored != "" {
		// The AVIF is being encoded, or the search behind a quick WebP
		// runs: Squid must not store what is served now, or later
		// requests with this Accept would never get the better variant.
		resp.Header.Set(DeferredHeader, unstored)
	}
	if skip != "" {
		s.o.Metrics.skip(skip)
		if skip == SkipDeferred || skip == SkipBacklog {
			resp.Header.Set(DeferredHeader, t)
		}
		return nil
	}
	s.o.Metrics.transformed(t, mt, len(body), len(out))
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	if ctype != "" {
		resp.Header.Set("Content-Type", ctype)
	}
	if kind == "text" {
		resp.Header.Set("Content-Encoding", t)
	}
	if et := variantETag(resp.Header.Get("ETag"), t); et != "" {
		resp.Header.Set("ETag", et)
	} else {
		resp.Header.Del("ETag")
	}
	resp.Header.Del("Content-MD5")
	resp.Header.Del("Digest")
	resp.Header.Set(TransformHeader, t)
	return nil
}

// ResetResults drops the finished transforms kept for the next miss of
// their object (Options.ResultBytes), so that the next miss of every
// object transforms again: a cold start without a restart (pepd's
// DELETE /optimize/results; the testbed's cold cache). Transforms running
// now still keep their results when they finish. The files in
// Options.ResultsDir stay.
func (s *Server) ResetResults() { s.results.reset() }

// transformResult is what one (shared) transform returns.
type transformResult struct {
	out   []byte
	ctype string
	skip  string
}

// wait is how long a response whose origin body is n bytes may wait for
// its transform: Options.Deadline, or with the subscriber's downlink rate
// known (rate, bytes/s; sub its token) and Options.LinkDeadline above
// Deadline or Options.LinkFloor below it, the time the link needs for the
// bodies of the subscriber's responses already waiting and this one,
// within [LinkFloor or Deadline, LinkDeadline or Deadline]. The response
// counts as waiting until leave is called.
func (s *Server) wait(rate uint64, sub string, n int) (_ time.Duration, leave func()) {
	d := s.o.Deadline
	lo, hi := d, max(d, s.o.LinkDeadline)
	if f := s.o.LinkFloor; f > 0 && f < d {
		lo = f
	}
	if rate == 0 || lo == hi {
		return d, func() {}
	}
	s.linksMu.Lock()
	queued := s.links[sub] + int64(n)
	s.links[sub] = queued
	s.linksMu.Unlock()
	leave = func() {
		s.linksMu.Lock()
		if s.links[sub] -= int64(n); s.links[sub] <= 0 {
			delete(s.links, sub)
		}
		s.linksMu.Unlock()
	}
	t := time.Duration(float64(queued) / float64(rate) * float64(time.Second))
	w := min(max(t, lo), hi)
	switch {
	case w > d:
		s.o.Metrics.linkWait()
	case w < d:
		s.o.Metrics.linkShortWait()
	}
	return w, leave
}

// transform runs the transform t on body, whose content coding is enc
// ("webp" on an image in the webp pool; "gzip" or "br" on text, Text, in
// the text pool; urgency orders it there, Urgency), or
// takes its result from an earlier run (results). It waits at most wait (Server.wait), for a
// worker and the transform together; past it, it returns SkipDeferred
// and the transform goes on behind the response, its result kept for the
// next miss of the same bytes. When the backlog predicts that the
// transform would finish after the deadline (Options.DeferLate unset),
// it returns SkipBacklog at once and the transform is queued all the
// same, for the next miss: behind every transform a response waits for
// (nextMiss), its work not counted ahead of theirs, and giving its queue
// place up to one of them when the queue is full; an image then gets the
// quick WebP instead when one is ready in time (Options.QuickQuality,
// quick), unstored is "webp". Identical concurrent bodies are
// transformed once (singleflight on their SHA-256). A full queue returns
// SkipOverload at once, and nothing runs.
//
// With avif (an image whose request accepts AVIF, AVIFOptions.Enabled)
// and the WebP's outcome known within the deadline, the AVIF search
// starts too (avifFor) and is waited for until the same deadline: t is
// "avif" when the AVIF is smaller; unstored is "avif" when it has not
// finished (the WebP or the original is returned, not to be stored).
func (s *Server) transform(t string, body []byte, enc string, avif bool, urgency int, wait time.Duration) (out []byte, ctype, _, skip, unstored string) {
	quick := false // the quick WebP (Options.QuickQuality): served, not stored
	deadline := time.Now().Add(wait)
	kind, pool := "text", s.text
	if t == "webp" {
		kind, pool = "image", s.webp
	}
	sum := sha256.Sum256(body)
	key := t + string(sum[:])
	r, ok := s.results.get(key)
	if ok {
		s.o.Metrics.reused(t)
	} else {
		// A body without a readable size has format "" and no units: no
		// estimate, and nothing learned from it.
		format, units, _ := size(kind, body)
		if kind == "text" {
			format = t + "/" + enc // gzip of plain text, brotli of plain or gzipped text
		}
		work, known := pool.backlog.estimate(format, units)
		rank := pool.rank(urgency)
		late := !s.o.DeferLate && known && pool.backlog.finish(rank, work) > wait
		ownUrgency, ownRank := urgency, rank
		if late {
			// No response waits for it: behind every transform one does.
			urgency, rank = nextMiss, nextMiss
		}
		ch := s.flight.DoChan(key, func() (any, error) {
			return s.queue(pool, len(body), urgency, rank, work, func() transformResult {
				start := time.Now()
				var r transformResult
				done := units
				if kind == "image" {
					res := Image(body, s.o.Image)
					r = transformResult{out: res.Body, ctype: res.ContentType, skip: res.Skip}
					done = frameUnits(units, res)
				} else {
					r.out, r.skip = Text(body, enc, t, s.o.BrotliQuality, s.o.MaxBodyBytes)
				}
				took := time.Since(start)
				s.o.Metrics.done(t, took)
				pool.backlog.learn(format, done, took)
				s.results.put(key, r)
				if avif && r.skip != SkipOverload {
					s.avifFor(sum, body, r) // for the next miss, if this one cannot wait
				}
				return r
			}), nil
		})
		switch {
		case late && kind == "image" && s.o.QuickQuality > 0:
			// The search goes on for the next miss; this response may
			// still get the quick WebP in time.
			r = s.quick(sum, body, format, units, ownUrgency, ownRank, deadline)
			quick = r.skip == ""
		case late:
			// Waiting would end at the deadline with nothing: serve now,
			// the transform goes on for the next miss.
			r = transformResult{skip: SkipBacklog}
		default:
			r = await(ch, deadline)
		}
	}
	if avif && !quick && (r.skip == "" || r.skip == SkipNotSmaller) {
		a, done, late := s.avifResult(sum, body, r, deadline)
		switch {
		case late:
			s.o.Metrics.avif(AVIFLate)
			unstored = "avif"
		case !done:
			s.o.Metrics.avif(AVIFPending)
			unstored = "avif"
		case a.skip == "":
			s.o.Metrics.avif(AVIFServed)
			return a.out, a.ctype, "avif", "", ""
		case a.skip == skipAVIFOverload:
			s.o.Metrics.avif(AVIFOverload)
		default:
			s.o.Metrics.avif(AVIFLarger)
		}
	}
	if r.skip != "" {
		return nil, "", t, r.skip, unstored
	}
	if r.ctype == TypeJPEG {
		t = "jpeg" // Image's JPEG fallback, made by the webp pool
	}
	if quick {
		unstored = t
	}
	return r.out, r.ctype, t, "", unstored
}

// queue runs fn on one of pool's workers for a body of n bytes, at
// urgency (rank: pool.rank's, or nextMiss for a transform no response
// waits for), with work its predicted cost, accounted in the pool's
// backlog while it waits and runs. Past Options.QueueBytes of bodies, or
// with the pool's queue full, fn does not run: SkipOverload.
func (s *Server) queue(pool *workPool, n, urgency, rank int, work time.Duration, fn func() transformResult) transformResult {
	if s.queuedBytes.Add(int64(n)) > s.o.QueueBytes {
		s.queuedBytes.Add(-int64(n))
		return transformResult{skip: SkipOverload}
	}
	defer s.queuedBytes.Add(-int64(n))
	pool.backlog.add(rank, work)
	defer pool.backlog.add(rank, -work)
	release, ok := pool.acquire(urgency)
	if !ok {
		return transformResult{skip: SkipOverload}
	}
	defer release()
	if rank == nextMiss {
		pool.backlog.running(work)
		defer pool.backlog.running(-work)
	}
	return fn()
}

// await returns ch's result, or SkipDeferred once deadline has passed.
func await(ch <-chan singleflight.Result, deadline time.Time) transformResult {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case res := <-ch:
		return res.Val.(transformResult)
	case <-timer.C:
		return transformResult{skip: SkipDeferred}
	}
}

// Outcomes of the quick WebP (Options.QuickQuality): the values of the
// outcome label of pep_optimize_quick_total.
const (
	QuickServed   = "served"   // the quick WebP reached the target in time: served, not stored
	QuickMissed   = "missed"   // it did not reach the target or was not smaller: the original served
	QuickLate     = "late"     // predicted or found past the response's wait: the original served
	QuickOverload = "overload" // the queue was full: the original served
)

// quick returns the quick WebP of an image body whose search the backlog
// sent to the next miss (Options.QuickQuality), or a result with skip
// SkipBacklog when there is none by deadline: predicted too late from the
// quick pool's backlog ahead at rank (format's cost line, learnt from
// earlier quick encodes), not finished in time, below the target or not
// smaller.
// The quick encode runs in its own pool (Server.quickPool), at urgency,
// never behind the searches for the next miss; concurrent requests for
// one body share it. Its result is not kept.
func (s *Server) quick(sum [32]byte, body []byte, format string, units int64, urgency, rank int, deadline time.Time) transformResult {
	pool := s.quickPool
	work, known := pool.backlog.estimate(format, units)
	if known && pool.backlog.finish(rank, work) > time.Until(deadline) {
		s.o.Metrics.quick(QuickLate)
		return transformResult{skip: SkipBacklog}
	}
	ch := s.flight.DoChan("quick"+string(sum[:]), func() (any, error) {
		return s.queue(pool, len(body), urgency, rank, work, func() transformResult {
			start := time.Now()
			res := Quick(body, s.o.Image, s.o.QuickQuality)
			took := time.Since(start)
			s.o.Metrics.done("quick", took)
			pool.backlog.learn(format, frameUnits(units, res), took)
			return transformResult{out: res.Body, ctype: res.ContentType, skip: res.Skip}
		}), nil
	})
	r := await(ch, deadline)
	switch r.skip {
	case "":
		s.o.Metrics.quick(QuickServed)
		return r
	case SkipDeferred:
		s.o.Metrics.quick(QuickLate)
	case SkipOverload:
		s.o.Metrics.quick(QuickOverload)
	default:
		s.o.Metrics.quick(QuickMissed)
	}
	return transformResult{skip: SkipBacklog}
}

// Outcomes of a request for AVIF: the values of the outcome label of
// pep_optimize_avif_total.
const (
	AVIFServed   = "served"   // the AVIF was smaller than the WebP and served
	AVIFLarger   = "larger"   // no AVIF at the target was smaller: the WebP (or the original) served
	AVIFPending  = "pending"  // the AVIF was not ready within the deadline: the WebP served, not stored
	AVIFOverload = "overload" // the AVIF queue was full: the WebP served and stored
	AVIFLate     = "late"     // the AVIF backlog predicted the search past the deadline: the WebP served at once, not stored; the search goes on for the next miss
)

// avifResult returns the AVIF outcome for body (webp is its WebP
// transform's result): kept from an earlier search, or from the search
// avifFor starts, waited for until deadline; done is false past it. late
// is true (and done false) when the AVIF pool's backlog predicts the
// search to end after deadline (Options.DeferLate unset, the format's
// cost known): the response is not held for it, and the search goes on
// for the next miss, as SkipBacklog does for a WebP. A search already
// under way (started when the WebP finished) counts in the backlog ahead
// of itself too, so the prediction errs late, by at most its own work
// over the workers: towards serving the WebP at once. A search predicted
// late while the AVIF queue is full (workPool.full) is not started: the
// outcome is skipAVIFOverload, as the search itself would answer.
func (s *Server) avifResult(sum [32]byte, body []byte, webp transformResult, deadline time.Time) (r transformResult, done, late bool) {
	if r, ok := s.results.get("avif" + string(sum[:])); ok {
		s.o.Metrics.reused("avif")
		return r, true, false
	}
	format, units, _ := size("image", body)
	work, known := s.avif.backlog.estimate(format, units)
	if !s.o.DeferLate && known && s.avif.backlog.finish(DefaultUrgency, work) > time.Until(deadline) {
		if s.avif.full() {
			// As a full queue answers a search that would wait for
			// it: the WebP served and stored, not held back unstored
			// miss after miss while the queue stays full.
			return transformResult{skip: skipAVIFOverload}, true, false
		}
		s.avifFor(sum, body, webp)
		return transformResult{}, false, true
	}
	ch := s.avifFor(sum, body, webp)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case res := <-ch:
		return res.Val.(transformResult), true, false
	case <-timer.C:
		return transformResult{}, false, false
	}
}

// avifFor starts the AVIF search for body unless it is running or done
// (singleflight on its SHA-256, then the kept results) and returns its
// channel. The search waits for one of AVIFOptions.Workers; a full
// AVIFOptions.Queue answers skipAVIFOverload at once (not kept). Its
// result, an AVIF smaller than webp's body or SkipNotSmaller, is kept in
// results for the next miss. The search counts in the AVIF pool's
// backlog at that pool's estimate for body's size while it waits and
// runs (nothing while the format's cost is not known), and its wall time
// teaches the pool the format's cost.
func (s *Server) avifFor(sum [32]byte, body []byte, webp transformResult) <-chan singleflight.Result {
	key := "avif" + string(sum[:])
	return s.flight.DoChan(key, func() (any, error) {
		if r, ok := s.results.get(key); ok {
			return r, nil
		}
		format, units, _ := size("image", body)
		work, _ := s.avif.backlog.estimate(format, units)
		s.avif.backlog.add(DefaultUrgency, work)
		defer s.avif.backlog.add(DefaultUrgency, -work)
		release, ok := s.avif.acquire(DefaultUrgency)
		if !ok {
			return transformResult{skip: skipAVIFOverload}, nil
		}
		defer release()
		start := time.Now()
		res := AVIF(body, s.o.Image, ImageResult{Body: webp.out, ContentType: webp.ctype, Skip: webp.skip})
		took := time.Since(start)
		s.o.Metrics.done("avif", took)
		s.avif.backlog.learn(format, frameUnits(units, res), took)
		r := transformResult{out: res.Body, ctype: res.ContentType, skip: res.Skip}
		if r.skip != "" {
			r.out = nil // nothing to serve: the WebP's result decides
		}
		s.results.put(key, r)
		return r, nil
	})
}

// readUpTo reads r to its end if that is at most max bytes (whole); else
// it returns the max+1 bytes read so far.
func readUpTo(r io.Reader, max int64) (b []byte, whole bool, err error) {
	b, err = io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return b, false, err
	}
	return b, int64(len(b)) <= max, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// addVary adds names to h's Vary unless it names them (or "*") already.
func addVary(h http.Header, names ...string) {
	vs := h.Values("Vary")
	for _, n := range names {
		if !hasToken(vs, n) && !hasToken(vs, "*") {
			vs = append(vs, n)
		}
	}
	if len(vs) > 0 {
		h["Vary"] = []string{strings.Join(vs, ", ")}
	}
}

// hasToken reports whether a comma-separated list header's values name
// token (case-insensitive; parameters after '=' or ';' ignored).
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			t = strings.TrimSpace(t)
			if i := strings.IndexAny(t, "=;"); i >= 0 {
				t = strings.TrimSpace(t[:i])
			}
			if strings.EqualFold(t, token) {
				return true
			}
		}
	}
	return false
}

// accepts reports whether an Accept or Accept-Encoding field's values
// accept v with a q-value above 0 (RFC 9110 §12.5.1, §12.5.3); "*/*" and
// "image/*" do not count for image/webp (browsers that decode WebP name
// it), "*" does not count for gzip.
func accepts(values []string, v string) bool {
	for _, f := range values {
		for _, e := range strings.Split(f, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(e), ";")
			if !strings.EqualFold(strings.TrimSpace(name), v) {
				continue
			}
			q := 1.0
			for _, p := range strings.Split(params, ";") {
				if k, val, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.EqualFold(k, "q") {
					if f, err := strconv.ParseFloat(val, 64); err == nil {
						q = f
					}
				}
			}
			return q > 0
		}
	}
	return false
}
