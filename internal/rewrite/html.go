package rewrite

import (
	"bytes"
	"fmt"
	"io"
	"net/url"
	"strings"

	"golang.org/x/net/html"
)

// Stats counts what one document's rewrite did.
type Stats struct {
	// URLs is the number of URLs put into the VIP form.
	URLs int
	// Skipped is the number of http: or relative URLs in rewritable places
	// that were left as they were because their VIP form would not mean the
	// same to a browser: a backslash, tab or newline inside, userinfo, a
	// percent-encoded or non-ASCII host, a character reference inside the
	// scheme or host, a path whose ".." climbs above the root.
	Skipped int
	// KeptOwn is the number of URLs on the document's own host left as
	// they were (Config.OwnHostMax).
	KeptOwn int
	// PassedThrough is set when a single token was longer than
	// Config.MaxTokenBytes: the document from that token on was copied
	// unchanged.
	PassedThrough bool
	// Hosts are the distinct hosts (lowercase, without port) of the
	// absolute URLs put into the VIP form, the document's own host aside,
	// in the order first seen, at most MaxHosts of them: the names the
	// browser's next requests will make pepd look up, which pepd can look
	// up now (httpproxy, "DNS prefetch").
	Hosts []string
}

// MaxHosts bounds Stats.Hosts.
const MaxHosts = 16

// HTML copies the HTML document src to dst with the embedded URLs of the
// passive subresources, scripts and styles in their VIP form (the seed paper,
// section 3.1): img src and srcset, source src and srcset, script src, link
// href for rel stylesheet, icon, preload and modulepreload, input type=image
// src, video, audio and track src, video poster, object data, embed src,
// style attributes and <style> elements (url() and @import). Absolute http:
// URLs and relative ones, resolved against doc and the first <base href>, are
// rewritten; https:, data:, javascript: and every other scheme, a href, forms,
// iframes and frames are never touched. Elements carrying an integrity
// attribute keep their URLs (Subresource Integrity would fail on a rewritten
// stylesheet and needs CORS). A nil doc leaves relative URLs alone.
//
// Tokens are found with the boundaries of golang.org/x/net/html's Tokenizer
// (see scan.go); every byte outside a changed attribute value or <style>
// text is copied as it came, so a document with nothing to rewrite comes out
// identical. Rewriting works on bytes: any ASCII-compatible charset passes
// unchanged. HTML reads src to its end before writing (Response has the body
// in memory anyway; pepctl reads a file). The error is a read or write error;
// a token longer than Config.MaxTokenBytes is not an error
// (Stats.PassedThrough).
func (r *Rewriter) HTML(dst io.Writer, src io.Reader, doc *url.URL) (Stats, error) {
	return r.copyBody(dst, src, doc, "html")
}

// copyBody reads src, rewrites it as HTML or CSS (kind) and writes it to
// dst: HTML and CSS, which differ in the kind alone (a style sheet here
// is taken as fetched from the VIP: every URL in VIP form).
func (r *Rewriter) copyBody(dst io.Writer, src io.Reader, doc *url.URL, kind string) (Stats, error) {
	in, err := io.ReadAll(src)
	if err != nil {
		return Stats{}, fmt.Errorf("rewrite: reading %s: %w", kind, err)
	}
	css := kind == "css"
	out, st := r.body(make([]byte, 0, len(in)+len(in)/8), in, doc, css, !css)
	if _, err := dst.Write(out); err != nil {
		return st, fmt.Errorf("rewrite: writing %s: %w", kind, err)
	}
	return st, nil
}

// body appends the rewritten HTML document (css false) or style sheet b
// to out. With own and Config.OwnHostMax, the URLs on b's own host stay
// as they are: in a document that names at most OwnHostMax distinct ones
// (a second pass), in a style sheet always (it comes from its own host
// in url mode when its document kept it there, and its url()s name
// images the page may never use, so their number says little).
func (r *Rewriter) body(out, b []byte, docURL *url.URL, css, own bool) ([]byte, Stats) {
	pass := func(d *doc, out []byte) []byte {
		if !css {
			return d.rewriteHTML(out, b, int(r.cfg.MaxTokenBytes))
		}
		start := len(out)
		out, changed := d.u.appendCSS(out, b, inCSS)
		if !changed {
			out = append(out[:start], b...)
		}
		return out
	}
	d := r.newDoc(docURL)
	if own && r.cfg.OwnHostMax > 0 {
		d.u.ownLimit = r.cfg.OwnHostMax
		d.u.keepOwn = css
	}
	start := len(out)
	out = pass(d, out)
	if n := len(d.u.ownURLs); n > 0 && n <= r.cfg.OwnHostMax {
		d = r.newDoc(docURL)
		d.u.keepOwn = true
		out = pass(d, out[:start])
	}
	return out, d.u.stats
}

// CSS copies the style sheet src to dst with the URLs of url() and @import in
// their VIP form, resolved against doc (the style sheet's own URL). It reads
// the whole sheet into memory. The error is a read or write error.
func (r *Rewriter) CSS(dst io.Writer, src io.Reader, doc *url.URL) (Stats, error) {
	return r.copyBody(dst, src, doc, "css")
}

// doc is the state of one document's rewrite.
type doc struct {
	u urlRewriter
	// plainBlocking is Config.PlainBlocking.
	plainBlocking bool
	// plainImages is the number of <img> elements still to go under the
	// plain http://VIP (Config.FirstImagesPlain, with PlainBlocking).
	plainImages int
	docURL      *url.URL
	baseSeen    bool
	spans       [numAttrs]span
	buf         []byte
}

func (r *Rewriter) newDoc(u *url.URL) *doc {
	d := &doc{docURL: u, plainBlocking: r.cfg.PlainBlocking}
	if d.plainBlocking {
		d.plainImages = r.cfg.FirstImagesPlain
	}
	d.u = urlRewriter{vip: &r.origins, base: newBase(u), absOnly: r.absOnly, noURLs: r.noURLs}
	if d.u.base.ok {
		d.u.own = d.u.base.auth
	}
	return d
}

// rewriteHTML appends the rewritten document b to out. maxTok > 0 bounds a
// single token: from a longer one on, b is copied unchanged.
func (d *doc) rewriteHTML(out, b []byte, maxTok int) []byte {
	s := scanner{b: b, spans: &d.spans, maxTok: maxTok}
	last := 0 // b[:last] is in out
	for {
		kind, start, end := s.next()
		if kind == tokEOF || kind == tokPartial {
			return append(out, b[last:]...)
		}
		if maxTok > 0 && end-start > maxTok {
			d.u.stats.PassedThrough = true
			return append(out, b[last:]...)
		}
		var repl []byte
		switch kind {
		case tokStartTag:
			repl = d.tag(b, start, end, s.nameEnd)
		case tokRawText:
			if s.textOf == "style" {
				// A <style> element's @import rules are render-blocking
				// stylesheets as a stylesheet link is (CSS Cascading 4
				// §2; HTML §4.2.6: the element's sheet is pending until
				// its imports load).
				d.u.plainImports = d.plainBlocking
				css, changed := d.u.appendCSS(d.buf[:0], b[start:end], inCSS)
				d.u.plainImports = false
				if changed {
					d.buf = css
					repl = css
				}
			}
		}
		if repl != nil {
			out = append(out, b[last:start]...)
			out = append(out, repl...)
			last = end
		}
	}
}

// Elements whose attributes matter.
const (
	tagOther = iota
	tagImg
	tagSource
	tagScript
	tagLink
	tagInput
	tagVideo
	tagAudio
	tagTrack
	tagObject
	tagEmbed
	tagBase
	tagStyle
)

// Attributes that matter, by index into doc.tag's span table.
const (
	attrSrc = iota
	attrSrcset
	attrHref
	attrRel
	attrType
	attrData
	attrPoster
	attrStyle
	attrIntegrity
	attrAsync
	attrDefer
	numAttrs
)

type span struct {
	start, end int // value bytes raw[start:end]
	quoted     bool
	present    bool
}

// edit kinds
const (
	editURL = iota
	editSrcset
	editCSS
)

type edit struct {
	attr int
	kind int
}

func isHTMLSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f'
}

func tagID(name []byte) int {
	switch len(name) {
	case 3:
		if asciiEqualFold(name, "img") {
			return tagImg
		}
	case 4:
		switch {
		case asciiEqualFold(name, "link"):
			return tagLink
		case asciiEqualFold(name, "base"):
			return tagBase
		}
	case 5:
		switch {
		case asciiEqualFold(name, "input"):
			return tagInput
		case asciiEqualFold(name, "video"):
			return tagVideo
		case asciiEqualFold(name, "audio"):
			return tagAudio
		case asciiEqualFold(name, "track"):
			return tagTrack
		case asciiEqualFold(name, "embed"):
			return tagEmbed
		case asciiEqualFold(name, "style"):
			return tagStyle
		}
	case 6:
		switch {
		case asciiEqualFold(name, "source"):
			return tagSource
		case asciiEqualFold(name, "script"):
			return tagScript
		case asciiEqualFold(name, "object"):
			return tagObject
		}
	}
	return tagOther
}

func attrID(key []byte) int {
	switch len(key) {
	case 3:
		switch {
		case asciiEqualFold(key, "src"):
			return attrSrc
		case asciiEqualFold(key, "rel"):
			return attrRel
		}
	case 4:
		switch {
		case asciiEqualFold(key, "href"):
			return attrHref
		case asciiEqualFold(key, "type"):
			return attrType
		case asciiEqualFold(key, "data"):
			return attrData
		}
	case 5:
		switch {
		case asciiEqualFold(key, "style"):
			return attrStyle
		case asciiEqualFold(key, "async"):
			return attrAsync
		case asciiEqualFold(key, "defer"):
			return attrDefer
		}
	case 6:
		switch {
		case asciiEqualFold(key, "srcset"):
			return attrSrcset
		case asciiEqualFold(key, "poster"):
			return attrPoster
		}
	case 9:
		if asciiEqualFold(key, "integrity") {
			return attrIntegrity
		}
	}
	return -1
}

// scanAttrs fills spans with the first occurrence of each attribute that
// matters in the complete start tag raw, following the tokenizer's own rules
// (x/net/html readTag, readTagAttrKey, readTagAttrVal) so that both agree on
// where every value starts and ends and where the tag ends. i is the index
// after the tag name; spans may be nil. It returns the index of the '>'
// closing the tag, or len(raw) when the input ends first, and whether an
// unquoted attribute value runs up to that '>' (then a '/' before the '>' is
// part of the value, and the HTML standard does not count the tag as
// self-closing).
func scanAttrs(raw []byte, i int, spans *[numAttrs]span) (gt int, unquotedToGT bool) {
	n := len(raw)
	for {
		for i < n && isHTMLSpace(raw[i]) {
			i++
		}
		if i >= n || raw[i] == '>' {
			return i, unquotedToGT
		}
		ks := i
	key:
		for i < n {
			switch raw[i] {
			case '=':
				if i == ks {
					i++
					continue
				}
				break key
			case ' ', '\n', '\r', '\t', '\f', '/', '>':
				break key
			}
			i++
		}
		ke := i
		vs, ve, quoted := i, i, false
		for i < n && isHTMLSpace(raw[i]) {
			i++
		}
		if i < n {
			c := raw[i]
			i++
			switch {
			case c == '/':
			case c != '=':
				i--
			default:
				for i < n && isHTMLSpace(raw[i]) {
					i++
				}
				if i < n {
					q := raw[i]
					i++
					switch q {
					case '>':
						i--
						vs, ve = i, i
					case '"', '\'':
						vs = i
						if k := bytes.IndexByte(raw[i:], q); k >= 0 {
							i += k
						} else {
							i = n
						}
						ve = i
						quoted = true
						if i < n {
							i++
						}
					default:
						vs = i - 1
						for i < n && !isHTMLSpace(raw[i]) && raw[i] != '>' {
							i++
						}
						ve = i
						unquotedToGT = i < n && raw[i] == '>'
						if i < n && raw[i] != '>' {
							i++
						}
					}
				} else {
					vs, ve = i, i
				}
			}
		}
		if ke > ks && spans != nil {
			if a := attrID(raw[ks:ke]); a >= 0 && !spans[a].present {
				spans[a] = span{start: vs, end: ve, quoted: quoted, present: true}
			}
		}
	}
}

// relWanted reports whether a link's rel token list names a type whose href
// is rewritten.
func relWanted(v []byte) bool {
	return relHas(v, "stylesheet", "icon", "preload", "modulepreload")
}

// relHas reports whether the rel token list v names one of types
// (ASCII case-insensitive).
func relHas(v []byte, types ...string) bool {
	for i := 0; i < len(v); {
		for i < len(v) && isHTMLSpace(v[i]) {
			i++
		}
		j := i
		for j < len(v) && !isHTMLSpace(v[j]) {
			j++
		}
		for _, t := range types {
			if asciiEqualFold(v[i:j], t) {
				return true
			}
		}
		i = j
	}
	return false
}

func trimHTMLSpace(v []byte) []byte {
	for len(v) > 0 && isHTMLSpace(v[0]) {
		v = v[1:]
	}
	for len(v) > 0 && isHTMLSpace(v[len(v)-1]) {
		v = v[:len(v)-1]
	}
	return v
}

// renderBlocking reports whether the element id, its attributes in spans
// (positions in raw), holds the first paint back: a stylesheet link, or a
// parser-blocking script (src without async or defer, not a module;
// HTML Living Standard §4.12.1, "parser-blocking").
func renderBlocking(id int, raw []byte, spans *[numAttrs]span) bool {
	switch id {
	case tagLink:
		s := spans[attrRel]
		return s.present && relHas(raw[s.start:s.end], "stylesheet")
	case tagScript:
		if spans[attrAsync].present || spans[attrDefer].present {
			return false
		}
		if s := spans[attrType]; s.present && asciiEqualFold(trimHTMLSpace(raw[s.start:s.end]), "module") {
			return false
		}
		return spans[attrSrc].present
	}
	return false
}

// tag rewrites the start tag b[start:end] whose name ends at nameEnd and
// whose attributes are in d.spans (positions in b). It returns the new bytes,
// or nil when the tag stays as it is.
func (d *doc) tag(b []byte, start, end, nameEnd int) []byte {
	id := tagID(b[start+1 : nameEnd])
	spans, raw := &d.spans, b
	var edits [4]edit
	ne := 0
	add := func(a, kind int) {
		if spans[a].present {
			edits[ne] = edit{a, kind}
			ne++
		}
	}
	if !spans[attrIntegrity].present {
		switch id {
		case tagImg, tagSource:
			add(attrSrc, editURL)
			add(attrSrcset, editSrcset)
		case tagScript, tagAudio, tagTrack, tagEmbed:
			add(attrSrc, editURL)
		case tagVideo:
			add(attrSrc, editURL)
			add(attrPoster, editURL)
		case tagObject:
			add(attrData, editURL)
		case tagLink:
			if s := spans[attrRel]; s.present && relWanted(raw[s.start:s.end]) {
				add(attrHref, editURL)
			}
		case tagInput:
			if s := spans[attrType]; s.present && asciiEqualFold(trimHTMLSpace(raw[s.start:s.end]), "image") {
				add(attrSrc, editURL)
			}
		}
	}
	if id == tagBase && !d.baseSeen && spans[attrHref].present {
		d.baseSeen = true
		d.setBase(raw[spans[attrHref].start:spans[attrHref].end])
	}
	if s := spans[attrStyle]; s.present && s.end > s.start {
		add(attrStyle, editCSS)
	}
	if ne == 0 {
		return nil
	}
	d.u.plain = d.plainBlocking && renderBlocking(id, raw, spans)
	if id == tagImg && d.plainImages > 0 {
		d.plainImages--
		d.u.plain = true
	}
	defer func() { d.u.plain = false }()
	// Apply the edits in the order of their values in raw.
	for a := 1; a < ne; a++ {
		for k := a; k > 0 && spans[edits[k].attr].start < spans[edits[k-1].attr].start; k-- {
			edits[k], edits[k-1] = edits[k-1], edits[k]
		}
	}
	out := d.buf[:0]
	last := start
	changed := false
	for _, e := range edits[:ne] {
		s := spans[e.attr]
		v := raw[s.start:s.end]
		out = append(out, raw[last:s.start]...)
		at := len(out)
		ok := false
		switch e.kind {
		case editURL:
			out, ok = d.u.appendURL(out, v, inAttr)
		case editSrcset:
			out, ok = d.u.appendSrcset(out, v)
		case editCSS:
			if hasCharRef(v) {
				break // decoding and re-escaping would change untouched bytes
			}
			out, ok = d.u.appendCSS(out, v, inCSS)
		}
		if !ok {
			out = append(out[:at], v...)
		} else {
			changed = true
			if !s.quoted && needsQuotes(out[at:]) {
				val := append([]byte(nil), out[at:]...)
				out = append(out[:at], '"')
				out = appendAttrEscaped(out, val)
				out = append(out, '"')
			}
		}
		last = s.end
	}
	if !changed {
		d.buf = out
		return nil
	}
	out = append(out, raw[last:end]...)
	d.buf = out
	return out
}

// hasCharRef reports whether an attribute value holds a character reference
// that decoding would change.
func hasCharRef(v []byte) bool {
	i := 0
	for i < len(v) && v[i] != '&' {
		i++
	}
	return i < len(v) && html.UnescapeString(string(v)) != string(v)
}

// needsQuotes reports whether a new unquoted attribute value would end early.
func needsQuotes(v []byte) bool {
	if len(v) == 0 {
		return true
	}
	for _, c := range v {
		switch c {
		case ' ', '\t', '\n', '\r', '\f', '>':
			return true
		}
	}
	return false
}

// setBase applies the first <base href> (HTML, "frozen base URL"): it is
// resolved against the document URL; one that does not parse leaves the
// document URL in force.
func (d *doc) setBase(v []byte) {
	s := strings.TrimSpace(html.UnescapeString(string(v)))
	ref, err := url.Parse(s)
	if err != nil {
		return
	}
	if d.docURL != nil {
		ref = d.docURL.ResolveReference(ref)
	}
	d.u.base = newBase(ref)
}

// appendSrcset rewrites each image candidate's URL in a srcset value (HTML,
// "parse a srcset attribute"), keeping separators and descriptors.
func (u *urlRewriter) appendSrcset(dst, v []byte) ([]byte, bool) {
	start := len(dst)
	last := 0
	changed := false
	for i := 0; i < len(v); {
		for i < len(v) && (isHTMLSpace(v[i]) || v[i] == ',') {
			i++
		}
		if i >= len(v) {
			break
		}
		us := i
		for i < len(v) && !isHTMLSpace(v[i]) {
			i++
		}
		ue := i
		comma := false
		for ue > us && v[ue-1] == ',' {
			ue--
			comma = true
		}
		if ue > us {
			dst = append(dst, v[last:us]...)
			var ok bool
			if dst, ok = u.appendURL(dst, v[us:ue], inAttr); ok {
				changed = true
				last = ue
			} else {
				last = us
			}
		}
		if !comma {
			depth := 0
		desc:
			for i < len(v) {
				switch v[i] {
				case '(':
					depth++
				case ')':
					if depth > 0 {
						depth--
					}
				case ',':
					if depth == 0 {
						i++
						break desc
					}
				}
				i++
			}
		}
	}
	if !changed {
		return dst[:start], false
	}
	return append(dst, v[last:]...), true
}
