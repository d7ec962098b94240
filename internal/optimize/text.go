package optimize

import (
	"bytes"
	"mime"
	"strings"
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"

	"pep/internal/coding"
)

// The content codings of the text transform (RFC 9110 §8.4.1; brotli is
// RFC 7932), also the transform's name in metrics and variant ETags.
const (
	CodingGzip   = "gzip"
	CodingBrotli = "br"
)

// DefaultBrotliQuality is the brotli quality of the text transform
// (andybalholm/brotli, 0-11). On tp5n's text, against the level-1 gzip a
// stock nginx sends, quality 5 keeps 0.81 of JavaScript, 0.74 of CSS and
// 0.75 of HTML at 24-35 MB/s per core; quality 11 keeps 0.74, 0.66 and
// 0.66 at 0.6 MB/s, which costs a cold miss more time than its bytes
// save on 3G (README "Text").
const DefaultBrotliQuality = 5

// TextTypes are the media types the text transform re-encodes (issue 11:
// html, css, js, json, svg, xml): the types nginx's gzip_types usually
// names.
var TextTypes = map[string]bool{
	"text/html": true, "text/css": true, "text/javascript": true, "application/javascript": true,
	"application/x-javascript": true, "application/json": true, "image/svg+xml": true,
	"text/xml": true, "application/xml": true, "application/xhtml+xml": true,
	"application/rss+xml": true, "application/atom+xml": true, "text/plain": true,
}

// IsText reports whether the Content-Type value ct (parameters allowed)
// is one of TextTypes or another +json/+xml type.
func IsText(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return TextTypes[mt] || strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+xml")
}

// MinTextBytes is the smallest body the text transform compresses (the
// gzip header and trailer alone are 18 bytes; nginx's gzip_min_length
// defaults to 20, most sites set 256 or more).
const MinTextBytes = 256

// GzipLevel is the compression level: the library's best (9). Over
// tp5n's text, against the level-1 gzip a stock nginx sends, level 9
// keeps 0.85 of JavaScript, 0.77 of CSS and 0.84 of HTML, level 6 0.88,
// 0.81 and 0.87, at 27 MB/s per core against 93 (README "Text"); a
// transform runs once per object.
var GzipLevel = gzip.BestCompression

var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, GzipLevel)
	return w
}}

// encodeGzip compresses a text body with klauspost/compress's gzip (RFC
// 1952) at GzipLevel. Safe for concurrent use.
func encodeGzip(in []byte) []byte {
	var buf bytes.Buffer
	buf.Grow(len(in) / 3)
	w := gzipWriters.Get().(*gzip.Writer)
	w.Reset(&buf)
	w.Write(in) // a bytes.Buffer does not fail
	w.Close()
	gzipWriters.Put(w)
	return buf.Bytes()
}

// MinTextSaving is the fraction of a text body as sent that Text must
// save to be served. Lower than an image's MinSaving: re-encoding text
// loses nothing, and a better coding saves 5-15 % of a minified script
// that an origin gzipped at level 1 (underscore-min.js: 8,054 bytes, 7,174
// as brotli at quality 5); an origin's level-9 gzip passes as sent.
const MinTextSaving = 0.03

// brotliWriters keep brotli encoders by quality for reuse: a new one
// allocates its window and hash tables, which on a page's small scripts
// costs as much as the encoding.
var brotliWriters [brotli.BestCompression + 1]sync.Pool

// Text is the text transform: it re-encodes body, whose content coding
// is enc ("" or "gzip"), in the coding to (CodingGzip at GzipLevel, or
// CodingBrotli at quality 0-11), for a response that must come out at
// least MinTextSaving smaller than body as sent: an origin's level-1 gzip
// becomes level 9, or brotli. A gzip body is decoded first, to at most
// maxBytes. It returns the new body, or a skip reason and nil: SkipSmall
// under MinTextBytes decoded, SkipNotSmaller, SkipUndecodable (a gzip
// body that does not decode or decodes to over maxBytes: it passes as
// sent). Safe for
// concurrent use.
func Text(body []byte, enc, to string, quality int, maxBytes int64) (out []byte, skip string) {
	plain := body
	if enc != "" {
		var err error
		if plain, _, err = coding.Decode(enc, body, maxBytes); err != nil {
			return nil, SkipUndecodable
		}
	}
	if len(plain) < MinTextBytes {
		return nil, SkipSmall
	}
	if to == CodingGzip {
		out = encodeGzip(plain)
	} else {
		quality = min(max(quality, brotli.BestSpeed), brotli.BestCompression)
		var buf bytes.Buffer
		buf.Grow(len(body))
		w, _ := brotliWriters[quality].Get().(*brotli.Writer)
		if w == nil {
			w = brotli.NewWriterLevel(&buf, quality)
		} else {
			w.Reset(&buf)
		}
		w.Write(plain) // a bytes.Buffer does not fail
		w.Close()
		brotliWriters[quality].Put(w)
		out = buf.Bytes()
	}
	if float64(len(out)) > float64(len(body))*(1-MinTextSaving) {
		return nil, SkipNotSmaller
	}
	return out, ""
}
