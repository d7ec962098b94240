package rewrite

import (
	"bytes"
	"hash/fnv"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/net/html"
)

// base is a document's base URL in the shape the resolver needs: usable only
// when the document (or its <base href>) is an http: URL with a host pepd can
// put into the VIP form.
type base struct {
	ok   bool
	auth string // lowercase "host[:port]" as it goes into the VIP path
	host string // auth's host
	path string // escaped path, only URL-safe bytes (see safePath)
	dir  []byte // path up to and including its last '/'
}

// newBase turns a document URL into a base; a nil, non-http, host-less or
// userinfo-bearing URL gives a base that resolves nothing (relative references
// then stay as they are).
func newBase(u *url.URL) base {
	if u == nil || !strings.EqualFold(u.Scheme, "http") || u.User != nil || u.Opaque != "" {
		return base{}
	}
	auth := strings.ToLower(u.Host)
	if !validAuthority(auth) {
		return base{}
	}
	p := u.EscapedPath()
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	p = safePath(p)
	host, _, _ := splitAuthority(auth)
	return base{ok: true, auth: auth, host: host, path: p, dir: []byte(p[:strings.LastIndexByte(p, '/')+1])}
}

// safePath percent-encodes the bytes of an escaped path that would need quoting
// in an HTML attribute or a CSS url(): quotes, parentheses, '&', '<', '>',
// backslash, white space, controls and non-ASCII.
func safePath(p string) string {
	i := 0
	for i < len(p) && !unsafePathByte(p[i]) {
		i++
	}
	if i == len(p) {
		return p
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.WriteString(p[:i])
	for ; i < len(p); i++ {
		c := p[i]
		if unsafePathByte(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func unsafePathByte(c byte) bool {
	switch c {
	case '"', '\'', '(', ')', '&', '<', '>', '\\', '`', '{', '}', '|', '^':
		return true
	}
	return c <= ' ' || c >= 0x7f
}

// validAuthority reports whether a lowercase "host[:port]" can go into a VIP
// path unchanged: a host of [a-z0-9._-] or a bracketed IPv6 literal, then an
// optional port of 1 to 5 digits in 1..65535.
func validAuthority[T string | []byte](a T) bool {
	host, port, ok := splitAuthority(a)
	return ok && validHost(host) && (len(port) == 0 || validPort(port))
}

// splitAuthority splits "host[:port]" ("[v6]:port" for IPv6); ok is false
// for "host:" (empty port) and a malformed IPv6 literal.
func splitAuthority[T string | []byte](a T) (host, port T, ok bool) {
	if len(a) > 0 && a[0] == '[' {
		end := indexByte(a, ']')
		if end < 0 {
			return host, port, false
		}
		host, rest := a[:end+1], a[end+1:]
		if len(rest) == 0 {
			return host, port, true
		}
		if rest[0] != ':' || len(rest) == 1 {
			return host, port, false
		}
		return host, rest[1:], true
	}
	if i := indexByte(a, ':'); i >= 0 {
		if i == len(a)-1 {
			return host, port, false
		}
		return a[:i], a[i+1:], true
	}
	return a, port, true
}

func indexByte[T string | []byte](s T, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func validHost[T string | []byte](h T) bool {
	if len(h) == 0 {
		return false
	}
	if h[0] == '[' {
		if len(h) < 4 || h[len(h)-1] != ']' {
			return false
		}
		for i := 1; i < len(h)-1; i++ {
			c := h[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == ':' || c == '.') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func validPort[T string | []byte](p T) bool {
	if len(p) == 0 || len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
		n = n*10 + int(p[i]-'0')
	}
	return n >= 1 && n <= 65535
}

// context says where a URL sits, which decides how its bytes are escaped.
type context uint8

const (
	inAttr context = iota // HTML attribute value: character references apply
	inCSS                 // CSS text (a <style> element or a text/css body)
)

// skip reasons for single URLs, counted in Stats.Skipped.
const (
	urlOK = iota
	urlNotApplicable
	urlUnsafe
)

// urlRewriter holds the per-document state used while rewriting URLs.
type urlRewriter struct {
	vip     *vipOrigins
	base    base
	absOnly bool // rewrite absolute http: URLs only (the fuzz property's mode)
	noURLs  bool // rewrite no URL at all (the identity test's mode)
	// plain writes the URL being rewritten under the plain http://VIP
	// origin whatever the Origins (a render-blocking element's, with
	// Config.PlainBlocking).
	plain bool
	// plainImports puts the @import URLs of the CSS being rewritten under
	// the plain http://VIP (an HTML <style> element's, with
	// Config.PlainBlocking: they are render-blocking stylesheets).
	plainImports bool
	// own is the document's own authority ("host[:port]" in lowercase,
	// as in base.auth; "" without one). keepOwn leaves the URLs on it as
	// they are (Config.OwnHostMax). ownLimit > 0 collects the distinct
	// ones rewritten, as FNV-1a hashes of their VIP path, in ownURLs,
	// up to ownLimit+1 of them.
	own      string
	keepOwn  bool
	ownLimit int
	ownURLs  []uint64
	stats    Stats
	scratch  []byte
	pathBuf  []byte
}

// ownURL notes that the URL whose VIP path (authority, path and query,
// without the VIP origin) is p is on the document's own host: it
// reports true when that URL is to be left as it is (keepOwn), and
// otherwise collects it (ownLimit).
func (u *urlRewriter) ownURL(p ...[]byte) bool {
	if u.keepOwn {
		u.stats.KeptOwn++
		return true
	}
	if u.ownLimit == 0 || len(u.ownURLs) > u.ownLimit {
		return false
	}
	h := fnv.New64a()
	for _, b := range p {
		h.Write(b)
	}
	if sum := h.Sum64(); !slices.Contains(u.ownURLs, sum) {
		u.ownURLs = append(u.ownURLs, sum)
	}
	return false
}

// noteHost adds host to Stats.Hosts unless it is there already, it is
// the base's (the document's own host, which pepd has looked up), or
// MaxHosts are there. A page names few hosts, mostly one after the
// other: the last one is checked first.
func (u *urlRewriter) noteHost(host []byte) {
	h := u.stats.Hosts
	if n := len(h); n > 0 && h[n-1] == string(host) || n >= MaxHosts || u.base.host == string(host) {
		return
	}
	for _, s := range h {
		if s == string(host) {
			return
		}
	}
	u.stats.Hosts = append(h, string(host))
}

// origin is the VIP origin a URL goes under: picked, the host's shard
// of Config.Origins, or the plain http://VIP for a render-blocking
// element (plain).
func (u *urlRewriter) origin(picked string) string {
	if u.plain {
		return u.vip.plain
	}
	return picked
}

// appendURL appends the VIP form of the URL in raw to dst. raw is the whole
// attribute value or CSS URL, possibly with white space around it. It returns
// dst unchanged and false when raw is left as it is.
func (u *urlRewriter) appendURL(dst, raw []byte, ctx context) ([]byte, bool) {
	res, out := u.url(dst, raw, ctx)
	switch res {
	case urlOK:
		u.stats.URLs++
		return out, true
	case urlUnsafe:
		u.stats.Skipped++
	}
	return dst, false
}

// isSpace reports the bytes a URL parser strips around a URL (WHATWG URL:
// C0 controls and space), except NUL, which HTML and CSS turn into U+FFFD
// before the URL parser sees it.
func isSpace(c byte) bool { return c <= ' ' && c != 0 }

func (u *urlRewriter) url(dst, raw []byte, ctx context) (int, []byte) {
	if u.noURLs {
		return urlNotApplicable, dst
	}
	lo, hi := 0, len(raw)
	for lo < hi && isSpace(raw[lo]) {
		lo++
	}
	for hi > lo && isSpace(raw[hi-1]) {
		hi--
	}
	s := raw[lo:hi]
	if len(s) == 0 {
		return urlNotApplicable, dst
	}
	// Browsers drop tabs and newlines inside URLs and treat '\' as '/' in
	// http: URLs; such URLs are left alone rather than second-guessed.
	for _, c := range s {
		if c == '\t' || c == '\n' || c == '\r' || c == '\\' {
			return urlUnsafe, dst
		}
	}
	dec := s
	if ctx == inAttr && bytes.IndexByte(s, '&') >= 0 {
		if d := html.UnescapeString(string(s)); d != string(s) {
			dec = []byte(d)
		}
	}
	n := schemeLen(dec)
	if n > 0 {
		if n != 4 || !asciiEqualFold(dec[:4], "http") {
			return urlNotApplicable, dst // https:, data:, javascript:, httpdisabled:, ...
		}
		if len(dec) < 7 || dec[5] != '/' || dec[6] != '/' {
			return urlUnsafe, dst // "http:foo" is relative in browsers
		}
		end := 7
		for end < len(dec) && dec[end] != '/' && dec[end] != '?' && dec[end] != '#' {
			end++
		}
		if &dec[0] != &s[0] && !bytes.Equal(dec[:end], s[:end]) {
			return urlUnsafe, dst // character reference inside scheme or host
		}
		return u.absolute(dst, raw[:lo], s, end, raw[hi:])
	}
	if u.absOnly || !u.base.ok {
		return urlNotApplicable, dst
	}
	if dec[0] == '#' {
		return urlNotApplicable, dst // the document itself
	}
	if len(dec) >= 2 && dec[0] == '/' && dec[1] == '/' {
		// Network-path reference: the base's scheme (http) applies.
		end := 2
		for end < len(dec) && dec[end] != '/' && dec[end] != '?' && dec[end] != '#' {
			end++
		}
		t := append(u.scratch[:0], "http:"...)
		t = append(t, dec...)
		u.scratch = t
		if &dec[0] != &s[0] {
			return u.relativeDecoded(dst, raw[:lo], t, raw[hi:])
		}
		return u.absolute(dst, raw[:lo], t, end+5, raw[hi:])
	}
	// Resolve against the base (RFC 3986 section 5.2.2, dot segments as the
	// WHATWG URL standard: "%2e" counts as ".").
	own := u.own != "" && u.base.auth == u.own
	if own && u.keepOwn {
		u.ownURL()
		return urlNotApplicable, dst
	}
	t := append(u.scratch[:0], u.origin(u.vip.pick(u.base.auth))...)
	t = append(t, '/')
	vipPath := len(t)
	t = append(t, u.base.auth...)
	pathEnd := 0
	for pathEnd < len(dec) && dec[pathEnd] != '?' && dec[pathEnd] != '#' {
		pathEnd++
	}
	prefix := len(t)
	switch {
	case dec[0] == '/':
		t = u.appendPath(t, nil, dec[:pathEnd])
	case dec[0] == '?':
		// Keep the base path; the base's query is replaced.
		t = u.appendPath(t, nil, []byte(u.base.path))
	default:
		t = u.appendPath(t, u.base.dir, dec[:pathEnd])
	}
	if len(t) == prefix {
		t = append(t, '/')
	}
	t = append(t, dec[pathEnd:]...)
	u.scratch = t
	if own && u.ownLimit > 0 {
		u.ownURL(t[vipPath:])
	}
	dst = append(dst, raw[:lo]...)
	if ctx == inAttr && &dec[0] != &s[0] {
		dst = appendAttrEscaped(dst, t)
	} else {
		dst = append(dst, t...)
	}
	return urlOK, append(dst, raw[hi:]...)
}

// relativeDecoded handles a network-path reference that came with character
// references: it is written back escaped.
func (u *urlRewriter) relativeDecoded(dst, lead, abs, trail []byte) (int, []byte) {
	var tmp []byte
	end := 7
	for end < len(abs) && abs[end] != '/' && abs[end] != '?' && abs[end] != '#' {
		end++
	}
	res, tmp := u.absolute(tmp, nil, abs, end, nil)
	if res != urlOK {
		return res, dst
	}
	dst = append(dst, lead...)
	dst = appendAttrEscaped(dst, tmp)
	return urlOK, append(dst, trail...)
}

// absolute rewrites s = "http://authority/rest" where s[:end] is scheme and
// authority, keeping rest byte for byte.
func (u *urlRewriter) absolute(dst, lead, s []byte, end int, trail []byte) (int, []byte) {
	auth := s[7:end]
	if len(auth) == 0 || bytes.IndexByte(auth, '@') >= 0 || bytes.IndexByte(auth, '%') >= 0 {
		return urlUnsafe, dst
	}
	var lower [256]byte
	if len(auth) > len(lower) {
		return urlUnsafe, dst
	}
	la := lower[:len(auth)]
	for i, c := range auth {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		la[i] = c
	}
	host, _, ok := splitAuthority(la)
	if !ok || !validAuthority(la) {
		return urlUnsafe, dst
	}
	if u.vip.isVIP(host) {
		return urlNotApplicable, dst // already in VIP form (or the VIP itself)
	}
	rest := s[end:]
	pathEnd := 0
	for pathEnd < len(rest) && rest[pathEnd] != '?' && rest[pathEnd] != '#' {
		pathEnd++
	}
	if escapesRoot(rest[:pathEnd]) {
		// "http://h/../x" is "http://h/x" to a browser, but
		// "http://VIP/h/../x" would be "http://VIP/x".
		return urlUnsafe, dst
	}
	if u.own != "" && string(la) == u.own && u.ownURL(la, rest) {
		return urlNotApplicable, dst
	}
	u.noteHost(host)
	dst = append(dst, lead...)
	dst = append(dst, u.origin(u.vip.pickBytes(la))...)
	dst = append(dst, '/')
	dst = append(dst, la...)
	dst = append(dst, rest...)
	return urlOK, append(dst, trail...)
}

// dotSegment classifies a path segment: 1 for ".", 2 for "..", 0 otherwise,
// with "%2e" (any case) counting as '.' as in the WHATWG URL standard.
func dotSegment(seg []byte) int {
	n := 0
	for i := 0; i < len(seg); {
		switch {
		case seg[i] == '.':
			i++
		case i+2 < len(seg) && seg[i] == '%' && seg[i+1] == '2' && (seg[i+2] == 'e' || seg[i+2] == 'E'):
			i += 3
		default:
			return 0
		}
		n++
		if n > 2 {
			return 0
		}
	}
	return n
}

// escapesRoot reports whether removing the dot segments of an absolute path
// would climb above its root.
func escapesRoot(p []byte) bool {
	if len(p) == 0 {
		return false
	}
	depth := 0
	for rest := p[1:]; ; {
		seg := rest
		i := bytes.IndexByte(rest, '/')
		if i >= 0 {
			seg, rest = rest[:i], rest[i+1:]
		}
		switch dotSegment(seg) {
		case 1:
		case 2:
			if depth == 0 {
				return true
			}
			depth--
		default:
			depth++
		}
		if i < 0 {
			return false
		}
	}
}

// hasDotSegment reports whether p has a "." or ".." segment (any spelling).
func hasDotSegment(p []byte) bool {
	for i := 0; i < len(p); i++ {
		if (p[i] == '.' || p[i] == '%') && (i == 0 || p[i-1] == '/') {
			j := i
			for j < len(p) && p[j] != '/' {
				j++
			}
			if dotSegment(p[i:j]) != 0 {
				return true
			}
			i = j
		}
	}
	return false
}

// appendPath appends dir+ref with dot segments removed (RFC 3986 section
// 5.2.4). dir is empty or an absolute path ending in '/'; ref is a path
// (absolute when dir is empty). The result starts with '/'.
func (u *urlRewriter) appendPath(dst, dir, ref []byte) []byte {
	if !hasDotSegment(dir) && !hasDotSegment(ref) {
		dst = append(dst, dir...)
		return append(dst, ref...)
	}
	p := append(u.pathBuf[:0], dir...)
	p = append(p, ref...)
	u.pathBuf = p
	start := len(dst)
	// Walk the segments of p, keeping the output as a stack in dst.
	for rest := p[1:]; ; {
		seg := rest
		k := bytes.IndexByte(rest, '/')
		if k >= 0 {
			seg, rest = rest[:k], rest[k+1:]
		}
		last := k < 0
		switch dotSegment(seg) {
		case 1:
			if last {
				dst = append(dst, '/')
			}
		case 2:
			if j := bytes.LastIndexByte(dst[start:], '/'); j >= 0 {
				dst = dst[:start+j]
			}
			if last {
				dst = append(dst, '/')
			}
		default:
			dst = append(dst, '/')
			dst = append(dst, seg...)
		}
		if last {
			break
		}
	}
	if len(dst) == start {
		dst = append(dst, '/')
	}
	return dst
}

// schemeLen returns the length of the scheme before ':' (RFC 3986 section
// 3.1), or 0 when s has no scheme.
func schemeLen(s []byte) int {
	if len(s) == 0 || !isAlpha(s[0]) {
		return 0
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case isAlpha(c) || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.':
		case c == ':':
			return i
		default:
			return 0
		}
	}
	return 0
}

func isAlpha(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		if b[i]|0x20 != s[i]|0x20 {
			return false
		}
	}
	return true
}

// appendAttrEscaped appends s escaped for any HTML attribute value context.
func appendAttrEscaped(dst, s []byte) []byte {
	for _, c := range s {
		switch c {
		case '&':
			dst = append(dst, "&amp;"...)
		case '"':
			dst = append(dst, "&#34;"...)
		case '\'':
			dst = append(dst, "&#39;"...)
		case '<':
			dst = append(dst, "&lt;"...)
		case '>':
			dst = append(dst, "&gt;"...)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}
