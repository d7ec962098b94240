package rewrite

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"

	"pep/internal/coding"
)

// Reason says why Response left a body as it came. The values are the
// "reason" label of pep_rewrite_responses_total.
type Reason string

// Reasons for passing a response through unchanged.
const (
	ReasonType        Reason = "content-type" // not an HTML or CSS media type (Config.HTMLTypes, CSSTypes)
	ReasonStatus      Reason = "status"       // HEAD, 1xx, 204, 206, 304 or a Content-Range: no full body
	ReasonNoTransform Reason = "no-transform" // Cache-Control: no-transform (RFC 9111 section 5.2.2.6)
	ReasonEncoding    Reason = "encoding"     // a content coding other than gzip, deflate, br, or several
	ReasonCharset     Reason = "charset"      // UTF-16/32 by charset parameter, BOM or NUL bytes
	ReasonTooLarge    Reason = "too-large"    // body or decoded body over Config.MaxBodyBytes
	ReasonCorrupt     Reason = "corrupt"      // the body does not decode (truncated gzip, bad brotli)
	ReasonReadError   Reason = "read-error"   // reading the upstream body failed (Result.Err)
	ReasonUnchanged   Reason = "unchanged"    // nothing in the body to rewrite
)

// Result reports what Response did with one response.
type Result struct {
	// Rewritten is set when the body was replaced by its rewritten form.
	Rewritten bool
	// Recoded is set when a body with nothing to rewrite (ReasonUnchanged)
	// was still replaced: its content coding applied again at the
	// rewriter's level, at least MinRecodeSaving smaller than it came.
	Recoded bool
	// Reason is why the body was not rewritten (and, unless Recoded,
	// passed byte for byte); empty when Rewritten.
	Reason Reason
	// Kind is "html", "css" or "" (not a rewritable type).
	Kind string
	// Stats counts the URLs rewritten and skipped in the decoded body.
	Stats Stats
	// InBytes and OutBytes are the body's length before and after, as sent
	// (encoded); both are -1 when the body was not buffered.
	InBytes, OutBytes int64
	// Err is the upstream read error behind ReasonReadError. The body still
	// yields the bytes read before it and then the same error.
	Err error
}

// ResponseHeaders are the response header fields Response reads
// (Content-Type, Content-Range, Content-Encoding, Cache-Control for
// no-transform) or changes (Content-Length, ETag, Content-MD5,
// Accept-Ranges), in canonical form (http.CanonicalHeaderKey). A caller
// that hands Response a header map of selected fields (httpproxy's relay)
// must include these; TestResponse runs every case with just these.
var ResponseHeaders = []string{"Content-Type", "Content-Range", "Content-Encoding", "Cache-Control",
	"Content-Length", "Etag", "Content-Md5", "Accept-Ranges"}

// Response rewrites resp's body in place when it is HTML or CSS (by
// Content-Type), leaving it byte for byte as it came otherwise. doc is the
// URL relative references resolve against: the request URL for an
// intercepted request, the origin URL (ParseVIPPath) for a VIP-path request;
// nil leaves relative references alone. viaVIP says which: with
// Config.OwnHostMax, a document fetched from its own host (not viaVIP)
// keeps the URLs on that host when it names at most OwnHostMax of them,
// and a style sheet fetched from its own host (its document kept it
// there) keeps them always; a body fetched from the VIP has every URL in
// VIP form.
//
// A rewritable body is buffered up to Config.MaxBodyBytes (encoded and
// decoded), decoded from gzip, deflate (zlib, or raw deflate as some servers
// send) or br, rewritten, and encoded again with the same coding. On success
// resp.Body, resp.ContentLength and the Content-Length header carry the new
// body, Transfer-Encoding is dropped, a strong ETag is made weak (RFC 9110
// section 8.8.1), and Content-MD5 and Accept-Ranges are removed. On anything
// the rewriter cannot handle (Result.Reason) resp.Body yields the original
// bytes, including those not yet read. Response never closes a body it
// still hands on; it closes resp.Body after replacing it. If the Rewriter
// has Metrics the Result is counted.
func (r *Rewriter) Response(resp *http.Response, doc *url.URL, viaVIP bool) Result {
	start := time.Now()
	res := r.response(resp, doc, viaVIP)
	if r.metrics != nil {
		r.metrics.observe(res, time.Since(start))
	}
	return res
}

func (r *Rewriter) response(resp *http.Response, doc *url.URL, viaVIP bool) Result {
	res := Result{InBytes: -1, OutBytes: -1}
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case err != nil:
		res.Reason = ReasonType
		return res
	case r.htmlTyp[mt]:
		res.Kind = "html"
	case r.cssTyp[mt]:
		res.Kind = "css"
	default:
		res.Reason = ReasonType
		return res
	}
	if resp.Request != nil && resp.Request.Method == http.MethodHead ||
		resp.StatusCode < 200 || resp.StatusCode == http.StatusNoContent ||
		resp.StatusCode == http.StatusPartialContent || resp.StatusCode == http.StatusNotModified ||
		resp.Header.Get("Content-Range") != "" || resp.Body == nil || resp.Body == http.NoBody {
		res.Reason = ReasonStatus
		return res
	}
	if noTransform(resp.Header) {
		res.Reason = ReasonNoTransform
		return res
	}
	if !asciiCompatible(params["charset"]) {
		res.Reason = ReasonCharset
		return res
	}
	ce, several := coding.Of(resp.Header)
	if several {
		res.Reason = ReasonEncoding
		return res
	}
	switch ce {
	case "", "identity", "gzip", "x-gzip", "deflate", "br":
	default:
		res.Reason = ReasonEncoding
		return res
	}
	max := int64(r.cfg.MaxBodyBytes)
	if resp.ContentLength > max {
		res.Reason = ReasonTooLarge
		return res
	}

	orig, rerr := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if rerr != nil {
		res.Reason, res.Err = ReasonReadError, rerr
		resp.Body = &passBody{Reader: io.MultiReader(bytes.NewReader(orig), errReader{rerr}), body: resp.Body}
		return res
	}
	if int64(len(orig)) > max {
		res.Reason = ReasonTooLarge
		resp.Body = &passBody{Reader: io.MultiReader(bytes.NewReader(orig), resp.Body), body: resp.Body}
		return res
	}
	resp.Body.Close()
	res.InBytes = int64(len(orig))
	passOrig := func(reason Reason) Result {
		resp.Body = io.NopCloser(bytes.NewReader(orig))
		res.Reason = reason
		res.OutBytes = res.InBytes
		return res
	}

	plain, rawDeflate, err := coding.Decode(ce, orig, max)
	if err != nil {
		if errors.Is(err, coding.ErrTooLarge) {
			return passOrig(ReasonTooLarge)
		}
		r.log.Debug("body does not decode", "coding", ce, "url", doc, "err", err)
		return passOrig(ReasonCorrupt)
	}
	if !asciiCompatibleBody(plain) {
		return passOrig(ReasonCharset)
	}

	var out []byte
	out, res.Stats = r.body(make([]byte, 0, len(plain)+len(plain)/8), plain, doc, res.Kind == "css", !viaVIP)
	if res.Stats.URLs == 0 {
		// Nothing to rewrite, but the body is decoded already: its coding
		// at the rewriter's level when that is clearly smaller. In url mode
		// the optimizer leaves HTML and CSS to the rewriter
		// (optimize.Options.Rewritten), so an origin's level-1 gzip would
		// otherwise reach the phone as it came.
		if ce == "" || ce == "identity" {
			return passOrig(ReasonUnchanged)
		}
		enc, err := r.encode(ce, rawDeflate, plain)
		if err != nil || float64(len(enc)) > float64(len(orig))*(1-MinRecodeSaving) {
			return passOrig(ReasonUnchanged)
		}
		res.Reason, res.Recoded = ReasonUnchanged, true
		return replaceBody(resp, res, enc)
	}
	enc, err := r.encode(ce, rawDeflate, out)
	if err != nil {
		return passOrig(ReasonCorrupt)
	}
	res.Rewritten = true
	return replaceBody(resp, res, enc)
}

// MinRecodeSaving is the fraction of an unchanged body that encoding it
// again must save for Response to send the new encoding (Result.Recoded),
// as the optimizer's text transform asks (optimize.MinTextSaving).
const MinRecodeSaving = 0.03

// replaceBody makes enc resp's body: Content-Length set, Transfer-Encoding
// dropped, a strong ETag made weak (RFC 9110 §8.8.1), Content-MD5 and
// Accept-Ranges removed. It returns res with OutBytes.
func replaceBody(resp *http.Response, res Result, enc []byte) Result {
	resp.Body = io.NopCloser(bytes.NewReader(enc))
	resp.ContentLength = int64(len(enc))
	resp.TransferEncoding = nil
	resp.Header.Set("Content-Length", strconv.Itoa(len(enc)))
	if et := resp.Header.Get("ETag"); et != "" && !strings.HasPrefix(et, "W/") {
		resp.Header.Set("ETag", "W/"+et)
	}
	resp.Header.Del("Content-MD5")
	resp.Header.Del("Accept-Ranges")
	res.OutBytes = int64(len(enc))
	return res
}

// noTransform reports a Cache-Control no-transform directive.
func noTransform(h http.Header) bool {
	for _, v := range h.Values("Cache-Control") {
		for _, d := range strings.Split(v, ",") {
			d = strings.TrimSpace(d)
			if i := strings.IndexByte(d, '='); i >= 0 {
				d = d[:i]
			}
			if strings.EqualFold(d, "no-transform") {
				return true
			}
		}
	}
	return false
}

// asciiCompatible reports whether a charset label keeps ASCII bytes as ASCII
// (everything the rewriter meets except the UTF-16/32 family and EBCDIC).
func asciiCompatible(charset string) bool {
	cs := strings.ToLower(strings.TrimSpace(charset))
	for _, p := range []string{"utf-16", "utf16", "utf-32", "utf32", "ucs-2", "ucs2", "ucs-4", "unicode", "csunicode", "iso-10646-ucs", "ibm037", "cp037", "ebcdic"} {
		if strings.HasPrefix(cs, p) {
			return false
		}
	}
	return true
}

// asciiCompatibleBody rejects a body with a UTF-16 or UTF-32 byte order mark
// or NUL bytes in its first KiB (UTF-16 without a BOM).
func asciiCompatibleBody(b []byte) bool {
	if len(b) >= 2 && (b[0] == 0xfe && b[1] == 0xff || b[0] == 0xff && b[1] == 0xfe) {
		return false
	}
	if len(b) > 1024 {
		b = b[:1024]
	}
	return bytes.IndexByte(b, 0) < 0
}

// encode applies the content coding again.
func (r *Rewriter) encode(coding string, rawDeflate bool, b []byte) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(b)/3 + 512)
	var w io.WriteCloser
	switch coding {
	case "", "identity":
		return b, nil
	case "gzip", "x-gzip":
		gw, _ := r.gzipPool.Get().(*gzip.Writer)
		if gw == nil {
			gw, _ = gzip.NewWriterLevel(&buf, r.cfg.GzipLevel)
		} else {
			gw.Reset(&buf)
		}
		defer r.gzipPool.Put(gw)
		w = gw
	case "deflate":
		if rawDeflate {
			w, _ = flate.NewWriter(&buf, r.cfg.GzipLevel)
		} else {
			w, _ = zlib.NewWriterLevel(&buf, r.cfg.GzipLevel)
		}
	case "br":
		w = brotli.NewWriterLevel(&buf, r.cfg.BrotliQuality)
	default:
		return nil, fmt.Errorf("rewrite: content coding %q", coding)
	}
	if _, err := w.Write(b); err != nil {
		return nil, fmt.Errorf("rewrite: encoding %s: %w", coding, err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("rewrite: encoding %s: %w", coding, err)
	}
	return buf.Bytes(), nil
}

// passBody hands on the buffered start of a body and then the rest of the
// original, closing the original.
type passBody struct {
	io.Reader
	body io.Closer
}

func (p *passBody) Close() error { return p.body.Close() }

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
