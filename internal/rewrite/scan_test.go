package rewrite

import (
	"bytes"
	"fmt"
	"testing"

	"golang.org/x/net/html"
)

// tok is one token as both tokenizers see it: its kind and byte span.
type tok struct {
	kind       string
	start, end int
}

func (t tok) String() string { return fmt.Sprintf("%s[%d:%d]", t.kind, t.start, t.end) }

// referenceTokens lists the tokens golang.org/x/net/html's Tokenizer finds in
// b, leaving out text except the text of raw text elements. A token the input
// cut short (the Tokenizer's ErrorToken with bytes, or a token running to the
// end of the input followed by an error) is "partial". Like x/net/html's
// parser, it tells the Tokenizer where CDATA sections are allowed and which
// start tags are no raw text (foreign content), asking its own
// foreignContent fed with the Tokenizer's tokens.
func referenceTokens(b []byte) []tok {
	z := html.NewTokenizer(bytes.NewReader(b))
	var fc foreignContent
	var toks []tok
	pos := 0
	rawNext := false
	for {
		z.AllowCDATA(fc.cdata())
		tt := z.Next()
		n := len(z.Raw())
		start, end := pos, pos+n
		pos = end
		wasRaw := rawNext
		rawNext = false
		switch tt {
		case html.ErrorToken:
			if n > 0 {
				toks = append(toks, tok{"partial", start, len(b)})
			}
			return toks
		case html.StartTagToken, html.SelfClosingTagToken:
			nameEnd := tagNameEnd(b, start+1)
			rawNext = rawTextTag(b[start+1:nameEnd]) != ""
			if fc.startTag(b, start, nameEnd, end) {
				z.NextIsNotRawText()
				rawNext = false
			}
			toks = append(toks, tok{"start", start, end})
		case html.EndTagToken:
			if fc.n > 0 {
				fc.endTag(b[start+2 : tagNameEnd(b, start+2)])
			}
			toks = append(toks, tok{"end", start, end})
		case html.CommentToken, html.DoctypeToken:
			toks = append(toks, tok{"comment", start, end})
		case html.TextToken:
			if wasRaw {
				toks = append(toks, tok{"raw", start, end})
			}
		}
	}
}

// scannerTokens lists the tokens of scan.go's scanner, leaving out the text
// of SVG and MathML <style> elements (text for the Tokenizer, rewritten as
// CSS by the scanner's caller).
func scannerTokens(b []byte) []tok {
	s := scanner{b: b}
	var toks []tok
	for {
		kind, start, end := s.next()
		switch kind {
		case tokEOF:
			return toks
		case tokPartial:
			return append(toks, tok{"partial", start, end})
		case tokStartTag:
			toks = append(toks, tok{"start", start, end})
		case tokEndTag:
			toks = append(toks, tok{"end", start, end})
		case tokComment:
			toks = append(toks, tok{"comment", start, end})
		case tokRawText:
			if !s.foreign {
				toks = append(toks, tok{"raw", start, end})
			}
		}
	}
}

// sameTokens compares the two lists. A token the reference reports whole but
// that runs to the end of the input (a comment or doctype without its '>')
// counts as the scanner's "partial" at the same start.
func sameTokens(ref, got []tok, n int) error {
	if len(ref) > 0 && len(got) > 0 {
		r, g := ref[len(ref)-1], got[len(got)-1]
		if g.kind == "partial" && r.end == n && r.start == g.start {
			ref = append(ref[:len(ref)-1:len(ref)-1], g)
			if len(ref) >= 2 && ref[len(ref)-2].kind == "partial" {
				ref = append(ref[:len(ref)-2:len(ref)-2], g)
			}
		}
	}
	for i := 0; i < len(ref) || i < len(got); i++ {
		var r, g tok
		if i < len(ref) {
			r = ref[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if r != g {
			return fmt.Errorf("token %d: tokenizer %v, scanner %v", i, r, g)
		}
	}
	return nil
}

// TestScannerMatchesTokenizer checks the scanner against x/net/html's
// Tokenizer on hand-picked edge cases and on every tp5n HTML file.
func TestScannerMatchesTokenizer(t *testing.T) {
	cases := []string{
		`<p>text</p>`,
		`<img src="a>b" alt='c>d' title=e>f`,
		`<a href=x/>y</a >`,
		`</>x</ y>z</3>`,
		`<!-- c --><!----><!--><!--->x<!-- a --!> b -->`,
		`<!DOCTYPE html><!doctype x><!bogus><!>x<?xml version="1.0"?>`,
		`<![CDATA[ x ]]>`,
		`<script>if (a<b) document.write("</scr"+"ipt>")</script><p>`,
		`<script><!-- document.write("<script></script>") --></script><img src=x>`,
		`<script><!--<script>x</script>y--></script>z`,
		`<SCRIPT>x</Script >y`,
		`<style>a{}</style/><title><b></title><textarea></textareax></textarea>`,
		`<style></style><script></script>`,
		`<xmp><a></xmp><iframe><a></iframe><noscript><img src=x></noscript><noembed>1</noembed><noframes>2</noframes>`,
		`<plaintext></plaintext><b>`,
		`<scriptx>a</scriptx>`,
		`<style>unterminated`,
		`<a b="unterminated`,
		`<!-- unterminated`,
		`<!DOCTYPE unterminated`,
		`</a unterminated`,
		`<?pi unterminated`,
		`a<`, `a</`, `a<!`, `a<!-`, `<!-x>`,
		"<a\x00b c\x00=\x00d>",
		`<a =b =c=d e = "f" g= 'h' i=j/>`,
		// Foreign content: CDATA sections, no raw text.
		`<svg><![CDATA[ a > <b> ]]></svg><![CDATA[ c > <d> ]]>`,
		`<math><mi><![CDATA[>]]></mi><mglyph><![CDATA[>]]></math><![CDATA[>]]>`,
		`<svg><style><![CDATA[ x ]]></style><style>a</style><style><!--x--></style><script>a<b</script></svg>`,
		`<svg><title><i>x</i></title><desc><svg><![CDATA[>]]></svg></desc></svg><style>y</style>`,
		`<svg><foreignObject><div><![CDATA[ x > y ]]><style>z</style></div></foreignObject></svg>`,
		`<svg><g a=b/><g/><textarea><p><![CDATA[ > ]]><xmp>x</xmp>`,
		`<svg><![CDATA[ unterminated`, `<svg><![CDATA`, `<svg><style></style`,
	}
	for _, c := range cases {
		if err := sameTokens(referenceTokens([]byte(c)), scannerTokens([]byte(c)), len(c)); err != nil {
			t.Errorf("%q: %v", c, err)
		}
	}
	pages := tp5n(t)
	for _, p := range pages {
		if err := sameTokens(referenceTokens(p.body), scannerTokens(p.body), len(p.body)); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
	}
}

// FuzzScanner: for any input the scanner finds the Tokenizer's tokens.
func FuzzScanner(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`<script><!--<script>x</script>y--></script>z<!-- a --!> b -->`))
	f.Add([]byte(`<style>a</style ><title>x</TITLE>`))
	f.Add([]byte(`<svg><![CDATA[a>b]]><style><![CDATA[c]]></style><foreignObject><p><![CDATA[d>e]]></svg><![CDATA[f>g]]>`))
	f.Add([]byte(`<math><mi><svg><title>x</title></svg></mi><annotation-xml><![CDATA[>]]></math><xmp></xmp>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := sameTokens(referenceTokens(b), scannerTokens(b), len(b)); err != nil {
			t.Fatal(err)
		}
	})
}
