// Package origin is the testbed's replay origin: one HTTP server that
// serves a page corpus (pep/testbed/corpus) for every origin hostname at
// once, by virtual hosting on the Host header, over HTTP/1.1 on port 80 and
// TLS (HTTP/1.1 and h2) on port 443 with a test CA generated at start. It
// stands in for the seed paper's Apache web server with virtual hosts (§4.1).
package origin

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"pep/testbed/corpus"
)

// StatsPath answers GET with the Stats as JSON; POST to ResetPath zeroes
// them; GET PagesPath lists the corpus pages (corpus.Summary) as JSON. They
// are served on every Host.
const (
	StatsPath = "/__replay/stats"
	ResetPath = "/__replay/reset"
	PagesPath = "/__replay/pages"
)

// DefaultLastModified is the Last-Modified of objects without recorded
// headers: the day the tp5n set was mirrored, April 2011.
var DefaultLastModified = time.Date(2011, time.April, 8, 0, 0, 0, 0, time.UTC)

// DefaultMaxAge is the freshness lifetime given to objects without recorded
// headers.
const DefaultMaxAge = 24 * time.Hour

// Config configures an Origin.
type Config struct {
	// Corpus is served; required.
	Corpus *corpus.Corpus
	// Plan maps a connection's local address back to a hostname when a
	// request has an IP address (or nothing) as Host; nil disables that.
	Plan *corpus.Plan
	// LastModified is the Last-Modified of unrecorded objects; zero means
	// DefaultLastModified.
	LastModified time.Time
	// MaxAge is the max-age of unrecorded objects (whole seconds); zero
	// means DefaultMaxAge, negative sends "Cache-Control: no-store".
	MaxAge time.Duration
	// Logger receives one line per miss and server errors; nil discards.
	Logger *slog.Logger
	// Compress is what the origin compresses (CompressAuto when empty).
	Compress Compress
}

// Compress selects the origin's content coding of responses.
type Compress string

const (
	// CompressAuto gzips text types (html, css, js, json, svg, xml, plain;
	// TextType) when the request accepts gzip, as a stock nginx with
	// `gzip on; gzip_vary on;` does: level 1 (nginx's gzip_comp_level
	// default), bodies of at least 20 bytes (gzip_min_length), a weak ETag,
	// Vary: Accept-Encoding on every text response, no ranges of the
	// compressed body. A body with a recorded Content-Encoding is served as
	// recorded.
	CompressAuto Compress = "auto"
	// CompressNone compresses nothing (the behaviour before this option);
	// recorded encodings are served as recorded.
	CompressNone Compress = "none"
	// CompressRecorded replays WARC records with the encoding they were
	// recorded with (a text body recorded uncompressed stays so); objects
	// without recorded headers (tp5n, the default pages) get CompressAuto.
	CompressRecorded Compress = "recorded"
)

// ParseCompress parses "auto", "none" or "recorded" ("" is auto).
func ParseCompress(s string) (Compress, error) {
	switch c := Compress(s); c {
	case "":
		return CompressAuto, nil
	case CompressAuto, CompressNone, CompressRecorded:
		return c, nil
	}
	return "", fmt.Errorf("origin: compress %q is not auto, none or recorded", s)
}

// TextType reports whether a Content-Type is one CompressAuto gzips: HTML,
// CSS, JavaScript, JSON, SVG, XML and plain text (nginx's gzip_types as
// most configurations set them).
func TextType(ct string) bool {
	ct = strings.ToLower(strings.TrimSpace(ct))
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = strings.TrimSpace(ct[:i])
	}
	switch ct {
	case "text/html", "text/css", "text/plain", "text/xml", "text/javascript", "application/javascript",
		"application/x-javascript", "application/ecmascript", "application/json", "application/xml",
		"image/svg+xml", "application/xhtml+xml", "application/rss+xml", "application/atom+xml":
		return true
	}
	return strings.HasSuffix(ct, "+json") || strings.HasSuffix(ct, "+xml")
}

// gzipMinLength is nginx's gzip_min_length default, in bytes.
const gzipMinLength = 20

// Origin serves a corpus. Its methods are safe for concurrent use.
type Origin struct {
	c       *corpus.Corpus
	plan    *corpus.Plan
	lastMod time.Time
	cc      string
	log     *slog.Logger
	ca      *CA
	stats   *stats
	// hostPages maps a hostname to the pages that use it; topPages maps a
	// page's top-level hostname to the page.
	hostPages map[string][]string
	topPages  map[string]string
	etags     map[*corpus.Object]string
	compress  Compress
	gzipped   sync.Map // *corpus.Object -> []byte, made once per object
}

// New builds an origin for cfg and generates its CA. A nil corpus is an
// error.
func New(cfg Config) (*Origin, error) {
	if cfg.Corpus == nil {
		return nil, errors.New("origin: no corpus")
	}
	ca, err := NewCA()
	if err != nil {
		return nil, err
	}
	o := &Origin{c: cfg.Corpus, plan: cfg.Plan, lastMod: cfg.LastModified, log: cfg.Logger, ca: ca,
		stats: newStats(), hostPages: map[string][]string{}, topPages: map[string]string{}, etags: map[*corpus.Object]string{}}
	var err2 error
	if o.compress, err2 = ParseCompress(string(cfg.Compress)); err2 != nil {
		return nil, err2
	}
	if o.lastMod.IsZero() {
		o.lastMod = DefaultLastModified
	}
	switch {
	case cfg.MaxAge < 0:
		o.cc = "no-store"
	case cfg.MaxAge == 0:
		o.cc = "public, max-age=" + strconv.Itoa(int(DefaultMaxAge/time.Second))
	default:
		o.cc = "public, max-age=" + strconv.Itoa(int(cfg.MaxAge/time.Second))
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	for _, p := range o.c.Pages {
		for _, h := range p.Hosts() {
			o.hostPages[h] = append(o.hostPages[h], p.Name)
		}
		if _, dup := o.topPages[p.Host]; !dup {
			o.topPages[p.Host] = p.Name
		}
		for _, obj := range p.Objects {
			sum := sha256.Sum256(obj.Body)
			o.etags[obj] = `"` + hex.EncodeToString(sum[:8]) + `"`
		}
	}
	return o, nil
}

// CA returns the origin's test CA.
func (o *Origin) CA() *CA { return o.ca }

// TLSConfig returns a server TLS configuration that issues a leaf for every
// SNI name (all names, not only HSTS-preloaded ones) and offers h2 and
// http/1.1.
func (o *Origin) TLSConfig() *tls.Config {
	return &tls.Config{GetCertificate: o.ca.GetCertificate, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}
}

// Stats returns a snapshot of the counters.
func (o *Origin) Stats() Stats { return o.stats.snapshot() }

// ResetStats zeroes the counters (e.g. between page loads).
func (o *Origin) ResetStats() { o.stats.reset() }

// Serve answers HTTP on plain and HTTPS on secure (either may be nil) until
// ctx is done, then shuts down gracefully (5 s at most) and returns nil. A
// listener failing ends both with its error. Keep-alive is on; the idle
// timeout is 5 minutes.
func (o *Origin) Serve(ctx context.Context, plain, secure net.Listener) error {
	var srvs []*http.Server
	errc := make(chan error, 2)
	mk := func() *http.Server {
		s := &http.Server{Handler: o, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 5 * time.Minute,
			ErrorLog: slog.NewLogLogger(o.log.Handler(), slog.LevelDebug)}
		srvs = append(srvs, s)
		return s
	}
	if plain != nil {
		s := mk()
		go func() { errc <- s.Serve(plain) }()
	}
	if secure != nil {
		s := mk()
		s.TLSConfig = o.TLSConfig()
		go func() { errc <- s.ServeTLS(secure, "", "") }()
	}
	if len(srvs) == 0 {
		return errors.New("origin: no listener")
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		err = fmt.Errorf("origin: serve: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range srvs {
		s.Shutdown(sctx) //nolint:errcheck // the serve error, if any, is what matters
	}
	return err
}

// ServeHTTP answers one request: the replay endpoints, else the corpus
// object for (Host, target) as corpus.LookupPage finds it for the page the
// request is attributed to (its own recording first), else 404. GET, HEAD
// and POST are served alike; other methods get 405.
func (o *Origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case StatsPath:
		writeJSON(w, o.Stats())
		return
	case ResetPath:
		if r.Method != http.MethodPost {
			http.Error(w, "replay: reset needs POST", http.StatusMethodNotAllowed)
			return
		}
		o.ResetStats()
		w.WriteHeader(http.StatusNoContent)
		return
	case PagesPath:
		var out []corpus.Summary
		for _, p := range o.c.Pages {
			out = append(out, p.Summary())
		}
		writeJSON(w, out)
		return
	}
	host := o.host(r)
	target := r.RequestURI
	if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") {
		if u, err := url.Parse(target); err == nil {
			target = u.RequestURI()
		}
	}
	page := o.page(r, host)
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "replay: method "+strconv.Quote(r.Method)+" not allowed", http.StatusMethodNotAllowed)
		o.stats.add(host, page, target, false, 0)
		return
	}
	obj, ok := o.c.LookupPage(page, host, target)
	if !ok {
		o.log.Info("miss", "host", host, "target", target, "page", page, "referer", r.Referer())
		w.Header().Set("Cache-Control", "no-store")
		msg := "replay: no object for " + host + target + "\n"
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(msg)))
		w.WriteHeader(http.StatusNotFound)
		if r.Method != http.MethodHead {
			w.Write([]byte(msg)) //nolint:errcheck // the client went away
		}
		o.stats.add(host, page, target, true, 0)
		return
	}
	cw := &countingWriter{ResponseWriter: w}
	o.serveObject(cw, r, obj)
	o.stats.add(host, page, target, false, cw.n)
}

// serveObject writes obj: recorded headers and status where the corpus has
// them (Date dropped, Expires shifted by the age of the recording),
// otherwise the derived Content-Type, Cache-Control "public,
// max-age=86400", Last-Modified and a strong ETag (a hash of the body).
// Status 200 goes through http.ServeContent, so conditional and range
// requests work (RFC 9110 §13, §14).
func (o *Origin) serveObject(w http.ResponseWriter, r *http.Request, obj *corpus.Object) {
	h := w.Header()
	modTime := o.lastMod
	if obj.Header != nil {
		for k, vs := range obj.Header {
			h[k] = append([]string(nil), vs...)
		}
		h.Del("Date")
		if d, err := http.ParseTime(obj.Header.Get("Date")); err == nil {
			if e, err := http.ParseTime(obj.Header.Get("Expires")); err == nil {
				h.Set("Expires", time.Now().Add(e.Sub(d)).UTC().Format(http.TimeFormat))
			}
		}
		modTime = time.Time{}
		if t, err := http.ParseTime(obj.Header.Get("Last-Modified")); err == nil {
			modTime = t
		}
	} else {
		h.Set("Cache-Control", o.cc)
		h.Set("ETag", o.etags[obj])
	}
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", obj.ContentType)
	}
	if obj.Status != 0 && obj.Status != http.StatusOK {
		if bodyAllowed(obj.Status) {
			h.Set("Content-Length", strconv.Itoa(len(obj.Body)))
		}
		w.WriteHeader(obj.Status)
		if bodyAllowed(obj.Status) && r.Method != http.MethodHead {
			w.Write(obj.Body) //nolint:errcheck // the client went away
		}
		return
	}
	body := obj.Body
	if o.shouldGzip(h, obj) {
		h.Add("Vary", "Accept-Encoding")
		if acceptsGzip(r) && len(body) >= gzipMinLength {
			body = o.gzipBody(obj)
			h.Set("Content-Encoding", "gzip")
			if et := h.Get("ETag"); et != "" && !strings.HasPrefix(et, "W/") {
				h.Set("ETag", "W/"+et) // as nginx: the strong validator is the identity body's
			}
			// nginx serves no ranges of a compressed body: the whole
			// response, 200.
			r = r.Clone(r.Context())
			r.Header.Del("Range")
		}
	}
	http.ServeContent(w, r, "", modTime, bytes.NewReader(body))
}

// shouldGzip reports whether obj's 200 response is one the origin
// compresses under its Compress setting (before looking at the request).
func (o *Origin) shouldGzip(h http.Header, obj *corpus.Object) bool {
	switch {
	case o.compress == CompressNone, o.compress == CompressRecorded && obj.Header != nil:
		return false
	case h.Get("Content-Encoding") != "":
		return false
	}
	return TextType(h.Get("Content-Type"))
}

// gzipBody returns obj's body gzipped at level 1, made once per object.
func (o *Origin) gzipBody(obj *corpus.Object) []byte {
	if b, ok := o.gzipped.Load(obj); ok {
		return b.([]byte)
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	zw.Write(obj.Body) //nolint:errcheck // bytes.Buffer
	zw.Close()
	b, _ := o.gzipped.LoadOrStore(obj, buf.Bytes())
	return b.([]byte)
}

// acceptsGzip reports whether the request's Accept-Encoding allows gzip
// (RFC 9110 §12.5.3): "gzip" or "*" with a q-value above 0.
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, part := range strings.Split(v, ",") {
			coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			coding = strings.ToLower(strings.TrimSpace(coding))
			if coding != "gzip" && coding != "x-gzip" && coding != "*" {
				continue
			}
			q := 1.0
			for _, p := range strings.Split(params, ";") {
				if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.EqualFold(k, "q") {
					if f, err := strconv.ParseFloat(v, 64); err == nil {
						q = f
					}
				}
			}
			return q > 0
		}
	}
	return false
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// host returns the request's hostname: the Host header unless it is an IP
// address or empty, then the TLS server name, then the plan's hostname for
// the connection's local address.
func (o *Origin) host(r *http.Request) string {
	h := r.Host
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if _, err := netip.ParseAddr(h); err != nil && h != "" {
		return h
	}
	if r.TLS != nil && r.TLS.ServerName != "" {
		return strings.ToLower(r.TLS.ServerName)
	}
	if o.plan != nil {
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			if ap, err := netip.ParseAddrPort(a.String()); err == nil {
				if name, ok := o.plan.Host(ap.Addr()); ok {
					return name
				}
			}
		}
	}
	return h
}

// page attributes a request to a page (see Stats.Pages).
func (o *Origin) page(r *http.Request, host string) string {
	if ref, err := url.Parse(r.Referer()); err == nil && ref.Host != "" {
		rh := strings.ToLower(ref.Hostname())
		if p, ok := o.topPages[rh]; ok {
			return p
		}
		if ps := o.hostPages[rh]; len(ps) == 1 {
			return ps[0]
		}
	}
	if p, ok := o.topPages[host]; ok && r.Referer() == "" {
		return p
	}
	if ps := o.hostPages[host]; len(ps) == 1 {
		return ps[0]
	}
	return ""
}

type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v) //nolint:errcheck // the client went away
}
