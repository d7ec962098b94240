package corpus

import (
	"net/http"
	"path"
	"strings"
)

// extTypes maps file extensions to media types. It is fixed here rather
// than read from /etc/mime.types so that an import gives the same result on
// every machine.
var extTypes = map[string]string{
	".html":  "text/html",
	".htm":   "text/html",
	".shtml": "text/html",
	".xhtml": "application/xhtml+xml",
	".css":   "text/css",
	".js":    "application/javascript",
	".json":  "application/json",
	".xml":   "text/xml",
	".rss":   "application/rss+xml",
	".txt":   "text/plain",
	".png":   "image/png",
	".gif":   "image/gif",
	".jpg":   "image/jpeg",
	".jpeg":  "image/jpeg",
	".ico":   "image/x-icon",
	".svg":   "image/svg+xml",
	".webp":  "image/webp",
	".bmp":   "image/bmp",
	".swf":   "application/x-shockwave-flash",
	".woff":  "font/woff",
	".woff2": "font/woff2",
	".ttf":   "font/ttf",
	".otf":   "font/otf",
	".eot":   "application/vnd.ms-fontobject",
	".mp3":   "audio/mpeg",
	".mp4":   "video/mp4",
	".flv":   "video/x-flv",
	".pdf":   "application/pdf",
}

// ContentType derives a media type for a stored file: from the extension of
// the last path segment (as wget wrote it, so "main.css@20110211.css" is
// CSS), then from the extension before a wget query marker "@"
// ("cvp.js@id=1" is JavaScript), then by sniffing body with
// http.DetectContentType (WHATWG MIME Sniffing §7). A sniffed text type
// loses its "charset=utf-8" parameter: pages in GBK or Shift_JIS declare
// their charset in a meta element, which a header charset would override.
func ContentType(name string, body []byte) string {
	base := path.Base(name)
	if t, ok := extTypes[strings.ToLower(path.Ext(base))]; ok {
		return t
	}
	if i := strings.IndexByte(base, '@'); i > 0 {
		if t, ok := extTypes[strings.ToLower(path.Ext(base[:i]))]; ok {
			return t
		}
	}
	t := http.DetectContentType(body)
	if strings.HasPrefix(t, "text/") {
		t, _, _ = strings.Cut(t, ";")
	}
	return t
}

// isHTML and isCSS tell which bodies the tp5n import rewrites.
func isHTML(ct string) bool {
	return ct == "text/html" || ct == "application/xhtml+xml"
}

func isCSS(ct string) bool { return ct == "text/css" }
