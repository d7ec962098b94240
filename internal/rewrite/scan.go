package rewrite

import (
	"bytes"
	"io"
	"strings"

	"golang.org/x/net/html"
)

// The HTML scanner finds the tokens the rewriter needs (start tags and the
// text of raw text elements) in a document held in memory, with the same
// boundaries as golang.org/x/net/html's Tokenizer, which stays the reference:
// TestScannerMatchesTokenizer and FuzzScanner compare the two token by token,
// and a script element whose text holds "<!--" (the script data escaped
// states) is measured by the Tokenizer itself. Text is skipped with
// bytes.IndexByte instead of byte by byte, and no token is built.
//
// Two things the Tokenizer leaves to its parser: inside foreign content (SVG
// and MathML) "<![CDATA[" opens a CDATA section, text up to "]]>", where
// elsewhere it opens a bogus comment that ends at the first '>', and the
// elements that are raw text in HTML content (<style>, <title>, ...) are not.
// The scanner follows the parser's stack of foreign elements
// (foreignContent, foreign.go) to tell them apart; the reference tests give
// the Tokenizer the same answers through AllowCDATA and NextIsNotRawText.

// Token kinds reported by scanner.next.
const (
	tokEOF      = iota
	tokStartTag // <name ...>, raw[start:end] ends with '>'
	tokEndTag   // </name ...>
	tokComment  // <!-- -->, <!DOCTYPE>, <!bogus>, <?bogus>, </bogus>, </>
	tokRawText  // the text of a raw text element, never empty
	tokPartial  // an unterminated token running to the end of the input
)

// Raw text elements (x/net/html readStartTag): after their start tag the
// tokenizer reads text up to the matching end tag.
var rawTextTags = []string{"iframe", "noembed", "noframes", "noscript", "plaintext", "script", "style", "textarea", "title", "xmp"}

// rawTextTag returns the lowercase name of the raw text element a start tag
// name opens, or "".
func rawTextTag(name []byte) string {
	if len(name) < 3 || len(name) > 9 {
		return ""
	}
	for _, t := range rawTextTags {
		if asciiEqualFold(name, t) {
			return t
		}
	}
	return ""
}

// scanner walks a document. After a start tag of a raw text element it
// reports that element's text next.
type scanner struct {
	b       []byte
	pos     int
	rawTag  string          // pending raw text element, "" for none
	nameEnd int             // for tokStartTag: the index after the tag name
	textOf  string          // for tokRawText: the element, e.g. "style"
	foreign bool            // for tokRawText: the text of an SVG or MathML <style>
	spans   *[numAttrs]span // if set, filled with a start tag's attributes
	maxTok  int             // SetMaxBuf for the Tokenizer measuring a script
	fc      foreignContent  // open SVG and MathML elements
}

// next returns the next non-text token as b[start:end]. Text between tokens
// is skipped. At the end of the input it returns tokEOF, or tokPartial for
// an unterminated token (which the Tokenizer reports as ErrorToken).
func (s *scanner) next() (kind, start, end int) {
	b := s.b
	if s.rawTag != "" {
		t := s.rawTag
		s.rawTag = ""
		start = s.pos
		ok := true
		if s.foreign {
			end, ok = foreignStyleEnd(b, start)
		} else {
			end = rawTextEnd(b, start, t, s.maxTok)
		}
		if ok {
			s.pos = end
			if end > start {
				s.textOf = t
				return tokRawText, start, end
			}
		}
	}
	for {
		j := bytes.IndexByte(b[s.pos:], '<')
		if j < 0 {
			s.pos = len(b)
			return tokEOF, len(b), len(b)
		}
		i := s.pos + j
		if i+1 >= len(b) {
			s.pos = len(b)
			return tokEOF, len(b), len(b)
		}
		c := b[i+1]
		switch {
		case isAlpha(c):
			nameEnd := tagNameEnd(b, i+1)
			if s.spans != nil {
				*s.spans = [numAttrs]span{}
			}
			end := tagEnd(b, nameEnd, s.spans)
			if end < 0 {
				s.pos = len(b)
				return tokPartial, i, len(b)
			}
			s.nameEnd = nameEnd
			s.rawTag = rawTextTag(b[i+1 : nameEnd])
			s.foreign = false
			s.pos = end
			if s.fc.n > 0 || maybeForeignRoot(b[i+1:nameEnd]) && !s.fc.lost {
				n := s.fc.n
				if s.fc.startTag(b, i, nameEnd, end) && s.rawTag != "" {
					// An SVG or MathML element: its content is markup.
					// The text of an open <style> is still CSS when it
					// is only text (foreignStyleEnd).
					s.foreign = true
					if s.rawTag != "style" || s.fc.n == n {
						s.rawTag = ""
					}
				}
			}
			return tokStartTag, i, end
		case c == '/':
			if i+2 >= len(b) {
				s.pos = len(b)
				return tokEOF, len(b), len(b)
			}
			c2 := b[i+2]
			var end int
			switch {
			case c2 == '>':
				end = i + 3
			case isAlpha(c2):
				nameEnd := tagNameEnd(b, i+2)
				end = tagEnd(b, nameEnd, nil)
				if end >= 0 {
					s.pos = end
					if s.fc.n > 0 {
						s.fc.endTag(b[i+2 : nameEnd])
					}
					return tokEndTag, i, end
				}
			default:
				end = closeAngle(b, i+2)
			}
			if end < 0 {
				s.pos = len(b)
				return tokPartial, i, len(b)
			}
			s.pos = end
			return tokComment, i, end
		case c == '!':
			if s.fc.cdata() && bytes.HasPrefix(b[i+2:], cdataOpen) {
				// A CDATA section is text: skip it like text.
				k := bytes.Index(b[i+len("<![CDATA["):], cdataClose)
				if k < 0 {
					s.pos = len(b)
					return tokEOF, len(b), len(b)
				}
				s.pos = i + len("<![CDATA[") + k + len(cdataClose)
				continue
			}
			end := markupEnd(b, i)
			if end < 0 {
				s.pos = len(b)
				return tokPartial, i, len(b)
			}
			s.pos = end
			return tokComment, i, end
		case c == '?':
			end := closeAngle(b, i+1)
			if end < 0 {
				s.pos = len(b)
				return tokPartial, i, len(b)
			}
			s.pos = end
			return tokComment, i, end
		default:
			s.pos = i + 1
		}
	}
}

// maybeForeignRoot is a quick test for the tag names "svg" and "math" (and a
// few others), which open foreign content.
func maybeForeignRoot(name []byte) bool {
	switch len(name) {
	case 3:
		return name[0]|0x20 == 's'
	case 4:
		return name[0]|0x20 == 'm'
	}
	return false
}

// tagNameEnd returns the index after a tag name starting at b[i]
// (x/net/html readTagName: the name ends at white space, '/' or '>').
func tagNameEnd(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\n', '\r', '\t', '\f', '/', '>':
			return i
		}
		i++
	}
	return i
}

// tagEnd returns the index after the '>' closing a tag whose name ends at
// b[i], or -1 when the input ends first, filling spans if not nil.
func tagEnd(b []byte, i int, spans *[numAttrs]span) int {
	gt, _ := scanAttrs(b, i, spans)
	if gt >= len(b) {
		return -1
	}
	return gt + 1
}

// closeAngle returns the index after the first '>' at or after b[i], or -1
// (x/net/html readUntilCloseAngle).
func closeAngle(b []byte, i int) int {
	if i > len(b) {
		return -1
	}
	k := bytes.IndexByte(b[i:], '>')
	if k < 0 {
		return -1
	}
	return i + k + 1
}

// markupEnd returns the index after a token starting with "<!" at b[i], or
// -1 (x/net/html readMarkupDeclaration and readComment with AllowCDATA off:
// outside foreign content "<![CDATA[" opens a bogus comment).
func markupEnd(b []byte, i int) int {
	if i+3 >= len(b) {
		return -1
	}
	if b[i+2] != '-' || b[i+3] != '-' {
		return closeAngle(b, i+2)
	}
	dashes := 0
	beginning := true
	for j := i + 4; j < len(b); j++ {
		switch b[j] {
		case '-':
			dashes++
			continue
		case '>':
			if dashes >= 2 || beginning {
				return j + 1
			}
		case '!':
			if dashes >= 2 {
				if j+1 >= len(b) {
					return -1
				}
				j++
				if b[j] == '>' {
					return j + 1
				}
				if b[j] == '-' {
					dashes = 1
					beginning = false
					continue
				}
			}
		}
		dashes = 0
		beginning = false
	}
	return -1
}

// rawTextEnd returns the end of the text of raw text element tag starting at
// b[start]: the index of its end tag, or len(b).
func rawTextEnd(b []byte, start int, tag string, maxTok int) int {
	if tag == "plaintext" {
		return len(b)
	}
	end := rawEndTag(b, start, tag)
	if tag == "script" && bytes.Contains(b[start:end], []byte("<!--")) {
		return start + scriptTextLen(b[start:], maxTok)
	}
	return end
}

// rawEndTag finds "</tag" followed by white space, '/' or '>' (any case) from
// b[i] on (x/net/html readRawEndTag), returning its index or len(b).
func rawEndTag(b []byte, i int, tag string) int {
	for {
		k := bytes.Index(b[i:], []byte("</"))
		if k < 0 {
			return len(b)
		}
		at := i + k
		j := at + 2
		if j+len(tag) < len(b) && asciiEqualFold(b[j:j+len(tag)], tag) {
			switch b[j+len(tag)] {
			case ' ', '\n', '\r', '\t', '\f', '/', '>':
				return at
			}
		}
		i = at + 2
	}
}

// scriptTextLen measures a script element's text with the Tokenizer, which
// follows the script data escaped states of the HTML standard (13.2.5.4 on).
// A text over maxTok bytes (0: no bound) counts as running to the end.
func scriptTextLen(b []byte, maxTok int) int {
	const open = "<script>"
	z := html.NewTokenizer(io.MultiReader(strings.NewReader(open), bytes.NewReader(b)))
	z.SetMaxBuf(maxTok)
	if z.Next() != html.StartTagToken {
		return len(b)
	}
	switch z.Next() {
	case html.TextToken:
		return len(z.Raw())
	case html.ErrorToken:
		return len(b)
	}
	return 0 // the end tag right away
}
