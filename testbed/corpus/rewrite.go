package corpus

import (
	"bytes"
	"strings"

	"golang.org/x/net/html"
)

// refBase is where a tp5n file lies inside its site folder: wget made
// cross-host references relative between such files
// ("../i.cdn.turner.com/cnn/a.png" from www.cnn.com/index.html).
type refBase struct {
	host  string          // the file's host folder, e.g. "www.cnn.com"
	dir   []string        // directory segments below the host folder
	hosts map[string]bool // host folders of the site
}

// absolute returns the absolute http:// URL for a raw relative reference
// whose resolution leaves the file's host folder and enters a host folder of
// the site, keeping the raw bytes of the remaining segments, query and
// fragment. Anything else (absolute URLs, "httpdisabled://", "/path",
// "#frag", references that stay in the host folder or climb above the site)
// yields ok false.
func (b *refBase) absolute(ref []byte) (string, bool) {
	if len(ref) == 0 || ref[0] == '/' || ref[0] == '#' || ref[0] == '?' {
		return "", false
	}
	end := len(ref)
	if i := bytes.IndexAny(ref, "?#"); i >= 0 {
		end = i
	}
	if i := bytes.IndexByte(ref[:end], ':'); i >= 0 {
		return "", false // a scheme ("http:", "javascript:", "httpdisabled:")
	}
	p, rest := string(ref[:end]), string(ref[end:])
	stack := append([]string{b.host}, b.dir...)
	left := false // the walk popped the host folder
	segs := strings.Split(p, "/")
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case "..":
			if len(stack) == 0 {
				return "", false // above the site folder
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				left = true
			}
			if last {
				stack = append(stack, "")
			}
		case ".":
			if last {
				stack = append(stack, "")
			}
		default:
			stack = append(stack, s)
		}
	}
	if !left || len(stack) == 0 || !b.hosts[stack[0]] {
		return "", false
	}
	return "http://" + stack[0] + "/" + strings.Join(stack[1:], "/") + rest, true
}

// rewriteHTML turns relative cross-host references in HTML back into
// absolute URLs: every attribute value of a start tag except event handlers
// (on*), the URL of a meta refresh, url() and @import in style attributes
// and style elements, string literals starting with "../" in inline
// scripts (their base is the document, so they resolve as attributes do),
// and the markup inside noscript, noembed and noframes. It works on the tokenizer's raw bytes and splices only
// the changed values, so the output equals the input byte for byte outside
// them; it returns the number of references rewritten.
func (b *refBase) rewriteHTML(in []byte) ([]byte, int) {
	z := html.NewTokenizer(bytes.NewReader(in))
	out := make([]byte, 0, len(in)+len(in)/16)
	n, consumed := 0, 0
	rawText := "" // the raw text element the tokenizer is in
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			break
		}
		raw := z.Raw()
		consumed += len(raw)
		switch tt {
		case html.StartTagToken, html.SelfClosingTagToken:
			name, _ := z.TagName()
			r, k := b.rewriteTag(raw)
			out, n = append(out, r...), n+k
			rawText = ""
			if tt == html.StartTagToken {
				rawText = string(name)
			}
			continue
		case html.TextToken:
			var r []byte
			k := 0
			switch rawText {
			case "style":
				r, k = b.rewriteCSS(raw)
			case "script":
				r, k = b.rewriteScript(raw)
			case "noscript", "noembed", "noframes":
				r, k = b.rewriteHTML(raw)
			}
			if k > 0 {
				out, n = append(out, r...), n+k
				continue
			}
		case html.EndTagToken:
			rawText = ""
		}
		out = append(out, raw...)
	}
	if consumed != len(in) {
		// The tokenizer stopped early: keep the rest as it is.
		out = append(out, in[min(consumed, len(in)):]...)
	}
	return out, n
}

// attrSpan is one attribute of a raw start tag: its lower-cased name and
// the byte range of its value (without quotes).
type attrSpan struct {
	name       string
	start, end int
}

// tagAttrs scans a raw start tag ("<img src=x alt='y'>") the way the HTML
// tokenizer does (WHATWG HTML §13.2.5.32-39) and returns the attribute value
// spans.
func tagAttrs(raw []byte) []attrSpan {
	i := 1
	for i < len(raw) && !isSpace(raw[i]) && raw[i] != '/' && raw[i] != '>' {
		i++
	}
	var out []attrSpan
	for i < len(raw) {
		for i < len(raw) && (isSpace(raw[i]) || raw[i] == '/') {
			i++
		}
		if i >= len(raw) || raw[i] == '>' {
			break
		}
		ns := i
		i++ // a name may start with '='
		for i < len(raw) && !isSpace(raw[i]) && raw[i] != '/' && raw[i] != '>' && raw[i] != '=' {
			i++
		}
		name := strings.ToLower(string(raw[ns:i]))
		j := i
		for j < len(raw) && isSpace(raw[j]) {
			j++
		}
		if j >= len(raw) || raw[j] != '=' {
			continue
		}
		i = j + 1
		for i < len(raw) && isSpace(raw[i]) {
			i++
		}
		if i >= len(raw) {
			break
		}
		if q := raw[i]; q == '"' || q == '\'' {
			k := bytes.IndexByte(raw[i+1:], q)
			if k < 0 {
				break
			}
			out = append(out, attrSpan{name, i + 1, i + 1 + k})
			i += k + 2
			continue
		}
		vs := i
		for i < len(raw) && !isSpace(raw[i]) && raw[i] != '>' {
			i++
		}
		out = append(out, attrSpan{name, vs, i})
	}
	return out
}

func (b *refBase) rewriteTag(raw []byte) ([]byte, int) {
	var out []byte
	n, last := 0, 0
	for _, a := range tagAttrs(raw) {
		val := raw[a.start:a.end]
		var repl []byte
		switch {
		case strings.HasPrefix(a.name, "on"):
			continue
		case a.name == "style":
			r, k := b.rewriteCSS(val)
			if k == 0 {
				continue
			}
			repl, n = r, n+k
		case a.name == "content":
			i := bytes.Index(asciiLower(val), []byte("url="))
			if i < 0 {
				continue
			}
			r, ok := b.absoluteTrimmed(val[i+4:])
			if !ok {
				continue
			}
			repl, n = append(append([]byte(nil), val[:i+4]...), r...), n+1
		default:
			r, ok := b.absoluteTrimmed(val)
			if !ok {
				continue
			}
			repl, n = r, n+1
		}
		out = append(out, raw[last:a.start]...)
		out = append(out, repl...)
		last = a.end
	}
	if last == 0 {
		return raw, 0
	}
	return append(out, raw[last:]...), n
}

// absoluteTrimmed applies absolute to v without its surrounding ASCII
// whitespace and puts the whitespace back.
func (b *refBase) absoluteTrimmed(v []byte) ([]byte, bool) {
	s, e := 0, len(v)
	for s < e && isSpace(v[s]) {
		s++
	}
	for e > s && isSpace(v[e-1]) {
		e--
	}
	abs, ok := b.absolute(v[s:e])
	if !ok {
		return nil, false
	}
	out := append([]byte(nil), v[:s]...)
	out = append(out, abs...)
	return append(out, v[e:]...), true
}

// rewriteCSS rewrites the references of url(...) tokens and of @import
// strings (CSS Syntax Level 3 §4.3.6, CSS Cascade §2) and returns the
// number rewritten; everything else is copied byte for byte.
func (b *refBase) rewriteCSS(in []byte) ([]byte, int) {
	var out []byte
	n, last := 0, 0
	lower := asciiLower(in)
	for i := 0; i < len(in); {
		var s, e int
		switch {
		case bytes.HasPrefix(lower[i:], []byte("url(")):
			s = i + 4
			for s < len(in) && isSpace(in[s]) {
				s++
			}
			if s < len(in) && (in[s] == '"' || in[s] == '\'') {
				k := bytes.IndexByte(in[s+1:], in[s])
				if k < 0 {
					return finishCSS(out, in, last), n
				}
				s, e = s+1, s+1+k
			} else {
				e = s
				for e < len(in) && in[e] != ')' && !isSpace(in[e]) {
					e++
				}
			}
		case bytes.HasPrefix(lower[i:], []byte("@import")):
			s = i + 7
			for s < len(in) && isSpace(in[s]) {
				s++
			}
			if s >= len(in) || (in[s] != '"' && in[s] != '\'') {
				i = s
				continue // "@import url(...)" is handled as url(
			}
			k := bytes.IndexByte(in[s+1:], in[s])
			if k < 0 {
				return finishCSS(out, in, last), n
			}
			s, e = s+1, s+1+k
		default:
			i++
			continue
		}
		if abs, ok := b.absolute(in[s:e]); ok {
			out = append(out, in[last:s]...)
			out = append(out, abs...)
			last, n = e, n+1
		}
		i = e
		if i == s {
			i++
		}
	}
	return finishCSS(out, in, last), n
}

func finishCSS(out, in []byte, last int) []byte {
	if last == 0 {
		return in
	}
	return append(out, in[last:]...)
}

// rewriteScript rewrites quoted string literals of an inline script that
// start with "../" ('../host/a.gif', "../host/a.gif", also inside markup
// strings such as '<img src="../host/a.gif">'). A literal ends at its quote,
// a backslash, whitespace or '<'/'>'.
func (b *refBase) rewriteScript(in []byte) ([]byte, int) {
	var out []byte
	n, last := 0, 0
	for i := 0; i+4 < len(in); i++ {
		q := in[i]
		if (q != '"' && q != '\'') || !bytes.HasPrefix(in[i+1:], []byte("../")) {
			continue
		}
		s, e := i+1, i+1
		for e < len(in) && in[e] != q && in[e] != '\\' && in[e] != '<' && in[e] != '>' && !isSpace(in[e]) {
			e++
		}
		if abs, ok := b.absolute(in[s:e]); ok {
			out = append(out, in[last:s]...)
			out = append(out, abs...)
			last, n = e, n+1
		}
		i = e - 1
	}
	return finishCSS(out, in, last), n
}

// asciiLower lower-cases ASCII letters only, keeping every offset (bytes.ToLower
// would replace invalid UTF-8, such as GBK text, and shift them).
func asciiLower(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return out
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
}
