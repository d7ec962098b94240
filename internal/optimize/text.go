package optimize

import (
	"bytes"
	"mime"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
)

// TextTypes are the media types the text transform gzips when the origin
// sent them uncompressed (issue 11: html, css, js, json, svg, xml): the
// types nginx's gzip_types usually names.
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

// GzipLevel is the compression level: the library's default (6), where
// the ratio is within 1 % of level 9 on tp5n's text and the speed twice
// (README "Optimizer": gzip MB/s per core).
var GzipLevel = gzip.DefaultCompression

var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, GzipLevel)
	return w
}}

// Gzip compresses a text body with klauspost/compress's gzip (RFC 1952).
// It returns the input and a skip reason when the body is under
// MinTextBytes or the result would not be at least minSaving smaller.
// Safe for concurrent use.
func Gzip(in []byte, minSaving float64) (out []byte, skip string) {
	if len(in) < MinTextBytes {
		return in, SkipSmall
	}
	var buf bytes.Buffer
	buf.Grow(len(in) / 3)
	w := gzipWriters.Get().(*gzip.Writer)
	w.Reset(&buf)
	w.Write(in) // a bytes.Buffer does not fail
	w.Close()
	gzipWriters.Put(w)
	if float64(buf.Len()) > float64(len(in))*(1-minSaving) {
		return in, SkipNotSmaller
	}
	return buf.Bytes(), ""
}
