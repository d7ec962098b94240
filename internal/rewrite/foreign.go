package rewrite

import "bytes"

// Foreign content (HTML standard 13.2.6.5): inside an <svg> or <math>
// element the parser does not switch the tokenizer to raw text for <style>,
// <script>, <title>, <textarea>, <iframe>, <xmp>, <noembed>, <noframes>,
// <noscript> or <plaintext> (they are SVG or MathML elements there, their
// content is markup), and "<![CDATA[" opens a CDATA section, text up to the
// next "]]>" (or the end of the input), where in HTML content it opens a
// bogus comment that ends at the first '>' (13.2.5.42, markup declaration
// open state: "if there is an adjusted current node and it is not an element
// in the HTML namespace"). x/net/html's Tokenizer leaves both to its parser
// (NextIsNotRawText, AllowCDATA); the scanner asks foreignContent.
//
// foreignContent follows the part of the parser's stack of open elements
// that decides this: the SVG and MathML elements above the last HTML
// element. It takes the start and end tags in document order and applies
// the rules for parsing tokens in foreign content: a start tag opens an
// element (unless self-closing), a breakout tag (<div>, <img>, <p>, ...)
// closes foreign elements up to the nearest integration point, an end tag
// closes up to the nearest open element of its name. While it holds a
// foreign element, that element is the parser's current node (an HTML
// element opened above it makes the model give up, below), so the scanner's
// tokens are the parser's.
//
// Where the parser goes on by rules this model does not follow, the model
// gives up for the rest of the document (lost): an HTML element opened at an
// integration point (<foreignObject>, <desc>, <title>, <mi>, <mo>, <mn>,
// <ms>, <mtext>), whose children the HTML insertion modes govern; an end tag
// matching no open foreign element, which those modes handle; </p> and </br>,
// breakouts in the standard but not in x/net/html; <font> and
// <annotation-xml>, whose attributes decide; more than maxForeignDepth open
// elements. From there on every "<![CDATA[" counts as a CDATA section, which
// errs on the safe side (a section taken where the parser sees a bogus
// comment only leaves the tags up to its "]]>" unrewritten, it never
// rewrites text), and the raw text elements are raw text as in HTML content,
// which is right wherever the parser is back in HTML content; where it is
// still in foreign content and such an element's text holds markup, scanner
// and parser can part ways (the one case FuzzParsedSame leaves out). None of
// this happens on well-formed SVG or MathML without HTML inside.
type foreignContent struct {
	n    int                             // open foreign elements
	lost bool                            // the model gave up
	open [maxForeignDepth]foreignElement // open[:n], the current node last
}

// maxForeignDepth bounds the foreign elements followed; deeper nesting makes
// the model give up.
const maxForeignDepth = 32

// foreignElement is an open SVG or MathML element.
type foreignElement struct {
	name []byte // as written in the start tag
	ns   uint8  // nsSVG or nsMathML
	ip   uint8  // integration point kind
}

// Namespaces of foreign elements.
const (
	nsSVG = iota + 1
	nsMathML
)

// Integration points (HTML standard 13.2.6.5, "HTML integration point",
// "MathML text integration point"): start tags there are parsed as HTML.
const (
	ipNone     = iota
	ipHTML     // SVG foreignObject, desc, title
	ipMathText // MathML mi, mo, mn, ms, mtext
)

var (
	cdataOpen  = []byte("[CDATA[") // after "<!", case-sensitive (13.2.5.42)
	cdataClose = []byte("]]>")
)

// cdata reports whether "<![CDATA[" now opens a CDATA section.
func (f *foreignContent) cdata() bool { return f.n > 0 || f.lost }

// startTag takes the complete start tag b[start:end] whose name ends at
// b[nameEnd]. It reports whether the parser inserts it as a foreign element
// (by the rules for foreign content), which is never raw text.
func (f *foreignContent) startTag(b []byte, start, nameEnd, end int) (foreign bool) {
	if f.lost {
		return false
	}
	name := b[start+1 : nameEnd]
	if f.n == 0 {
		// HTML content: only <svg> and <math> open foreign content.
		switch {
		case lowerEqual(name, "svg"):
			f.push(b, name, nameEnd, end, nsSVG)
		case lowerEqual(name, "math"):
			f.push(b, name, nameEnd, end, nsMathML)
		}
		return false
	}
	top := &f.open[f.n-1]
	if top.ip == ipHTML || top.ip == ipMathText && !lowerEqual(name, "mglyph") && !lowerEqual(name, "malignmark") {
		// At an integration point the start tag is parsed as HTML.
		switch {
		case lowerEqual(name, "svg"):
			f.push(b, name, nameEnd, end, nsSVG)
		case lowerEqual(name, "math"):
			f.push(b, name, nameEnd, end, nsMathML)
		default:
			f.lost = true // an HTML element, whose children the model does not follow
		}
		return false
	}
	switch {
	case lowerEqual(name, "font"), lowerEqual(name, "annotation-xml"):
		// A breakout only with color, face or size; an HTML integration
		// point only with encoding text/html or application/xhtml+xml.
		f.lost = true
		return false
	case isBreakout(name):
		for f.n > 0 && f.open[f.n-1].ip == ipNone {
			f.n--
		}
		if f.n > 0 {
			f.lost = true // reprocessed as HTML at the integration point
		}
		return false
	}
	f.push(b, name, nameEnd, end, top.ns)
	return true
}

// push opens an element of namespace ns for the start tag b[:end] named name
// unless the tag is self-closing.
func (f *foreignContent) push(b, name []byte, nameEnd, end int, ns uint8) {
	gt, unquotedToGT := scanAttrs(b[:end], nameEnd, nil)
	if b[gt-1] == '/' && !unquotedToGT {
		return // self-closing: opened and closed at once
	}
	if f.n == maxForeignDepth {
		f.lost = true
		return
	}
	ip := uint8(ipNone)
	switch ns {
	case nsSVG:
		if lowerEqual(name, "foreignobject") || lowerEqual(name, "desc") || lowerEqual(name, "title") {
			ip = ipHTML
		}
	case nsMathML:
		if lowerEqual(name, "mi") || lowerEqual(name, "mo") || lowerEqual(name, "mn") || lowerEqual(name, "ms") || lowerEqual(name, "mtext") {
			ip = ipMathText
		}
	}
	f.open[f.n] = foreignElement{name: name, ns: ns, ip: ip}
	f.n++
}

// endTag takes an end tag named name.
func (f *foreignContent) endTag(name []byte) {
	if f.lost || f.n == 0 {
		return
	}
	for i := f.n - 1; i >= 0; i-- {
		if lowerEqualBytes(f.open[i].name, name) {
			f.n = i
			return
		}
	}
	// </p> and </br> are breakouts in the standard, not in x/net/html; any
	// other end tag goes to the HTML insertion mode.
	f.lost = true
}

// foreignStyleEnd returns the end of the text of an SVG or MathML <style>
// element starting at b[i], the index of its end tag or len(b), when the
// parser sees nothing but text and CDATA sections there and no character
// reference (its CSS is then the bytes as they are, CDATA markers aside, and
// can be rewritten like an HTML <style>'s). ok is false otherwise.
func foreignStyleEnd(b []byte, i int) (end int, ok bool) {
	for {
		k := bytes.IndexAny(b[i:], "<&")
		if k < 0 {
			return len(b), true
		}
		at := i + k
		if b[at] == '&' {
			return 0, false
		}
		rest := b[at+1:]
		switch {
		case len(rest) > 0 && rest[0] == '!' && bytes.HasPrefix(rest[1:], cdataOpen):
			c := bytes.Index(rest[1+len(cdataOpen):], cdataClose)
			if c < 0 {
				return len(b), true
			}
			i = at + 2 + len(cdataOpen) + c + len(cdataClose)
		case len(rest) >= 6 && rest[0] == '/' && lowerEqual(rest[1:6], "style"):
			if len(rest) == 6 {
				return at, true // "</style" cut short: a partial token
			}
			switch rest[6] {
			case ' ', '\n', '\r', '\t', '\f', '/', '>':
				return at, true
			}
			return 0, false
		case len(rest) > 0 && (isAlpha(rest[0]) || rest[0] == '/' || rest[0] == '!' || rest[0] == '?'):
			return 0, false // markup
		default:
			i = at + 1 // a '<' that is text
		}
	}
}

// isBreakout reports whether a start tag named name closes foreign content
// (HTML standard 13.2.6.5; font is decided by its attributes).
func isBreakout(name []byte) bool {
	if len(name) == 0 || len(name) > 10 {
		return false
	}
	for _, t := range breakoutTags {
		if lowerEqual(name, t) {
			return true
		}
	}
	return false
}

var breakoutTags = []string{
	"b", "big", "blockquote", "body", "br", "center", "code", "dd", "div",
	"dl", "dt", "em", "embed", "h1", "h2", "h3", "h4", "h5", "h6", "head",
	"hr", "i", "img", "li", "listing", "menu", "meta", "nobr", "ol", "p",
	"pre", "ruby", "s", "small", "span", "strong", "strike", "sub", "sup",
	"table", "tt", "u", "ul", "var",
}

// lowerEqual reports whether b, with ASCII upper case letters lowered (as the
// tokenizer does with tag names), equals the lower case s.
func lowerEqual(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// lowerEqualBytes reports whether a and b are equal with ASCII upper case
// letters lowered.
func lowerEqualBytes(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		c, d := a[i], b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}
