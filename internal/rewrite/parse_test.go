package rewrite

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"golang.org/x/net/html"
)

// The rewriter must change only what it means to: a URL in an attribute it
// rewrites or in the text of a style element. parsedSame checks that with an
// HTML parser standing in for a browser: x/net/html's parser builds the tree
// construction stage of the HTML standard (foreign content, CDATA sections,
// raw text elements with scripting enabled), so input and output must give
// the same tree, with the same text and comments byte for byte, and differ
// only in such URLs put into the VIP form.

// rewrittenAttrs are the attributes the rewriter may change.
var rewrittenAttrs = map[string]bool{"src": true, "srcset": true, "href": true, "data": true, "poster": true, "style": true}

// parsedSame rewrites in with absolute URLs only and compares the parse trees
// of in and the output (see above). It returns the output and the first
// difference found.
func parsedSame(r *Rewriter, in []byte) ([]byte, error) {
	var out bytes.Buffer
	if _, err := r.HTML(&out, bytes.NewReader(in), nil); err != nil {
		return nil, err
	}
	a, err := html.Parse(bytes.NewReader(in))
	if err != nil {
		return out.Bytes(), nil // the parser gives up (too deep): nothing to compare
	}
	b, err := html.Parse(bytes.NewReader(out.Bytes()))
	if err != nil {
		return out.Bytes(), fmt.Errorf("output does not parse: %v", err)
	}
	return out.Bytes(), sameTree(a, b, "", false)
}

// sameTree compares the trees a (of the input) and b (of the output). inStyle
// is set below a style element, whose text and comments may carry rewritten
// URLs.
func sameTree(a, b *html.Node, path string, inStyle bool) error {
	text := a.Type == html.TextNode || a.Type == html.CommentNode
	if a.Type != b.Type || !text && a.Data != b.Data || a.Namespace != b.Namespace || len(a.Attr) != len(b.Attr) {
		return fmt.Errorf("%s: node %q %.80q (%d attributes) became %q %.80q (%d attributes)", path, a.Namespace, a.Data, len(a.Attr), b.Namespace, b.Data, len(b.Attr))
	}
	switch {
	case text:
		if a.Data != b.Data && !(inStyle && sameUnrewritten(a.Data, b.Data)) {
			return fmt.Errorf("%s: text or comment changed %s", path, firstDiff([]byte(b.Data), []byte(a.Data)))
		}
	case a.Type == html.ElementNode:
		path += "/" + a.Data
		for i := range a.Attr {
			x, y := a.Attr[i], b.Attr[i]
			if x.Key != y.Key || x.Namespace != y.Namespace {
				return fmt.Errorf("%s: attribute %s became %s", path, x.Key, y.Key)
			}
			if x.Val != y.Val && !(rewrittenAttrs[x.Key] && sameUnrewritten(x.Val, y.Val)) {
				return fmt.Errorf("%s: attribute %s changed: %q became %q", path, x.Key, x.Val, y.Val)
			}
		}
		inStyle = inStyle || a.Data == "style"
	}
	ca, cb := a.FirstChild, b.FirstChild
	for ; ca != nil && cb != nil; ca, cb = ca.NextSibling, cb.NextSibling {
		if err := sameTree(ca, cb, path, inStyle); err != nil {
			return err
		}
	}
	if ca != nil || cb != nil {
		return fmt.Errorf("%s: children differ", path)
	}
	return nil
}

// lostInRawText reports whether b holds the one known case where the
// rewriter may change what the parser sees: the scanner's foreign content
// model gave up (foreignContent.lost), and then a raw text element holds a
// '<'. The scanner takes it for raw text as in HTML content, but the parser
// may be in foreign content and read markup there.
func lostInRawText(b []byte) bool {
	s := scanner{b: b}
	for {
		kind, start, end := s.next()
		switch kind {
		case tokEOF, tokPartial:
			return false
		case tokRawText:
			if s.fc.lost && bytes.IndexByte(b[start:end], '<') >= 0 {
				return true
			}
		}
	}
}

// sameUnrewritten reports whether out is in with URLs put into the VIP form.
func sameUnrewritten(in, out string) bool {
	return asciiFoldEqual(unrewrite([]byte(out)), unrewrite([]byte(in)))
}

// parseCases are documents where a rewriter that followed tags only, not the
// parser's view, would change text: raw text elements and CDATA sections.
var parseCases = []string{
	`<iframe><img src="http://a.test/x.png">`,
	`<iframe></iframe><img src="http://a.test/x.png">`,
	`<noembed><img src="http://a.test/x.png"></noembed><noframes><img src="http://a.test/y.png"></noframes><img src="http://a.test/z.png">`,
	`<xmp><img src="http://a.test/x.png"></xmp><noscript><img src="http://a.test/y.png"></noscript><plaintext><img src="http://a.test/z.png">`,
	`<svg><![CDATA[ a > <img src="http://a.test/x.png"> ]]></svg><img src="http://a.test/y.png">`,
	`<math><![CDATA[ a > <img src="http://a.test/x.png"> ]]></math><img src="http://a.test/y.png">`,
	`<div><![CDATA[ a > <img src="http://a.test/x.png"> ]]></div>`,
	`<svg></svg><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<svg/><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<svg><g a=b/><svg></g></svg><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<svg><svg></svg><![CDATA[ a > <img src="http://a.test/x.png"> ]]></svg>`,
	`<svg><foreignObject><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<svg><foreignObject><div><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<svg><foreignObject><div></div><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<svg><desc><svg></svg><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<svg><p><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<svg></p><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<svg><![cdata[ a > <img src="http://a.test/x.png"> ]]>`,
	`<math><mi><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<math><mi><mglyph><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<math><annotation-xml encoding="text/html"><div></div><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<math><svg></math><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<svg><style>a{}</style><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<svg><style><svg><svg></style></svg><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<svg><title><p>x</title></svg></p><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<svg><font color=red></font><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<svg><style><![CDATA[ a{background:url(http://a.test/b.png)} ]]></style></svg>`,
	`<svg><![CDATA[ <img src="http://a.test/x.png">`,
	`<table><svg><desc><td><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
	`<svg><title><img src="http://a.test/x.png"></title></svg>`,
	`<svg><script><![CDATA[ if (a<b) x("</script><img src='http://a.test/x.png'>") ]]></script></svg><img src="http://a.test/y.png">`,
	`<svg><style><!-- a{background:url(http://a.test/b.png)} --></style></svg>`,
	`<svg><textarea><div><noembed></textarea><img src="http://a.test/x.png">`,
}

// TestParsedSame runs parsedSame on the cases above and on every tp5n page.
func TestParsedSame(t *testing.T) {
	r := newTestRewriter(t, Config{})
	r.absOnly = true
	for _, c := range parseCases {
		if out, err := parsedSame(r, []byte(c)); err != nil {
			t.Errorf("%s\n-> %s\n%v", c, out, err)
		}
	}
	if testing.Short() {
		return
	}
	for _, p := range tp5n(t) {
		if _, err := parsedSame(r, p.body); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
	}
}

// parseWords are the pieces TestParsedSameRandom builds documents from: the
// tags that decide foreign content, raw text and the insertion modes.
var parseWords = []string{
	"<svg>", "</svg>", "<math>", "</math>", "<g>", "</g>", "<g/>", "<g a=b/>", "<svg/>", "<svg a=b/>", "<SVG>", "</SVG>", "<Math>",
	"<foreignObject>", "</foreignObject>", "<foreignobject>", "</FOREIGNOBJECT>", "<desc>", "</desc>", "<title>", "</title>",
	"<mi>", "</mi>", "<mo>", "</mo>", "<mtext>", "<mglyph>", "<malignmark>",
	"<annotation-xml>", `<annotation-xml encoding="text/html">`, "</annotation-xml>", "<path d=1 />", "</path>",
	"<div>", "</div>", "<p>", "</p>", "<br>", "</br>", "<font color=x>", "<font>", "</font>", "<span>", "</span>",
	"<b>", "</b>", "<a>", "</a>", "<i>", "</i>", "<h1>", "</h1>", "<ul>", "</ul>", "<li>", "<image>",
	"<style>", "</style>", "<script>", "</script>", "<iframe>", "</iframe>", "<textarea>", "</textarea>",
	"<noscript>", "</noscript>", "<xmp>", "</xmp>", "<noembed>", "</noembed>", "<plaintext>",
	"<table>", "</table>", "<td>", "<tr>", "<tbody>", "<caption>", "<col>", "<colgroup>", "<select>", "</select>", "<option>",
	"<template>", "</template>", "<frameset>", "<body>", "</body>", "</html>", "<head>", "</head>", "<form>", "</form>",
	"<object>", "</object>", "<applet>", "<marquee>", "</marquee>", "<button>", "</button>", "<!DOCTYPE html>",
	"<![CDATA[", "<![cdata[", "]]>", ">", "<", "x", "<!--", "-->",
	`<img src="http://a.test/x.png">`, `<img src="http://a.test/y.png">`,
}

// TestParsedSameRandom runs parsedSame on random documents of parseWords
// ending in a CDATA section holding an img (fixed seed).
func TestParsedSameRandom(t *testing.T) {
	r := newTestRewriter(t, Config{})
	r.absOnly = true
	rng := rand.New(rand.NewPCG(12, 2))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	left := 0
	for range n {
		var doc []byte
		for range 1 + rng.IntN(20) {
			doc = append(doc, parseWords[rng.IntN(len(parseWords))]...)
		}
		doc = append(doc, `<![CDATA[ a > <img src="http://a.test/z.png"> ]]>`...)
		if lostInRawText(doc) {
			left++
			continue
		}
		if out, err := parsedSame(r, doc); err != nil {
			t.Fatalf("%s\n-> %s\n%v", doc, out, err)
		}
	}
	t.Logf("%d documents, %d left out (lostInRawText)", n, left)
}

// FuzzParsedSame: for any input the rewriter changes nothing a parser sees
// but URLs in the attributes and style text it rewrites (lostInRawText
// aside).
func FuzzParsedSame(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	for _, s := range parseCases {
		f.Add([]byte(s))
	}
	r, err := New(testVIP, Config{MaxTokenBytes: 4096}, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	r.absOnly = true
	f.Fuzz(func(t *testing.T, in []byte) {
		if lostInRawText(in) {
			return
		}
		if out, err := parsedSame(r, in); err != nil {
			t.Fatalf("%q\n-> %q\n%v", in, out, err)
		}
	})
}
