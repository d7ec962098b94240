package rewrite

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"testing"
)

const testVIP = "192.0.2.12"

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func newTestRewriter(t testing.TB, cfg Config) *Rewriter {
	t.Helper()
	var log *slog.Logger
	if tt, ok := t.(*testing.T); ok {
		log = testLogger(tt)
	}
	r, err := New(testVIP, cfg, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestHTMLGolden covers every URL form and every "never" case of issue 2's
// URL mode with the expected output written out.
func TestHTMLGolden(t *testing.T) {
	const doc = "http://www.foo.com/dir/page.html"
	tests := []struct {
		name, in, want string
		urls           int
	}{
		// The seed paper's Fig. 2.
		{"paper fig 2", `<img src = http://i.cnn.net/images/plane.jpg>`,
			`<img src = http://192.0.2.12/i.cnn.net/images/plane.jpg>`, 1},
		{"img src absolute", `<img src="http://i.cnn.net/images/plane.jpg">`,
			`<img src="http://192.0.2.12/i.cnn.net/images/plane.jpg">`, 1},
		{"scheme and host lowercased, path kept", `<IMG SRC="HTTP://I.CNN.Net/Images/A.JPG">`,
			`<IMG SRC="http://192.0.2.12/i.cnn.net/Images/A.JPG">`, 1},
		{"port kept", `<img src='http://a.com:8080/x.png'>`,
			`<img src='http://192.0.2.12/a.com:8080/x.png'>`, 1},
		{"query and fragment kept", `<img src="http://a.com/s.svg?v=2#icon">`,
			`<img src="http://192.0.2.12/a.com/s.svg?v=2#icon">`, 1},
		{"host without path", `<img src="http://a.com">`,
			`<img src="http://192.0.2.12/a.com">`, 1},
		{"IPv6 host", `<img src="http://[2001:DB8::1]:81/x">`,
			`<img src="http://192.0.2.12/[2001:db8::1]:81/x">`, 1},
		{"white space around kept", `<img src=" http://a.com/x ">`,
			`<img src=" http://192.0.2.12/a.com/x ">`, 1},
		{"character reference in query kept", `<img src="http://a.com/x?a=1&amp;b=2">`,
			`<img src="http://192.0.2.12/a.com/x?a=1&amp;b=2">`, 1},
		{"relative", `<img src="x.png">`,
			`<img src="http://192.0.2.12/www.foo.com/dir/x.png">`, 1},
		{"relative unquoted", `<img src=x.png alt=y>`,
			`<img src=http://192.0.2.12/www.foo.com/dir/x.png alt=y>`, 1},
		{"root relative", `<img src="/i/x.png">`,
			`<img src="http://192.0.2.12/www.foo.com/i/x.png">`, 1},
		{"dot segments", `<img src="./a/../../b/./x.png">`,
			`<img src="http://192.0.2.12/www.foo.com/b/x.png">`, 1},
		{"dot segments above root", `<img src="../../../x.png">`,
			`<img src="http://192.0.2.12/www.foo.com/x.png">`, 1},
		{"percent-encoded dot segment", `<img src="%2E%2e/x.png">`,
			`<img src="http://192.0.2.12/www.foo.com/x.png">`, 1},
		{"network-path", `<script src="//cdn.com/a.js"></script>`,
			`<script src="http://192.0.2.12/cdn.com/a.js"></script>`, 1},
		{"query only", `<img src="?v=1">`,
			`<img src="http://192.0.2.12/www.foo.com/dir/page.html?v=1">`, 1},
		{"relative with character reference", `<img src="/ad?a=1&amp;b=2">`,
			`<img src="http://192.0.2.12/www.foo.com/ad?a=1&amp;b=2">`, 1},
		{"relative character reference decoding to a space is quoted", `<img src=a&#32;b.png>`,
			`<img src="http://192.0.2.12/www.foo.com/dir/a b.png">`, 1},
		{"img srcset", `<img srcset="a.png 1x, http://b.com/b.png 2x,https://c.com/c.png 3x">`,
			`<img srcset="http://192.0.2.12/www.foo.com/dir/a.png 1x, http://192.0.2.12/b.com/b.png 2x,https://c.com/c.png 3x">`, 2},
		{"srcset with commas in URL and no descriptor", `<img srcset="http://a.com/x,y.png, http://a.com/z.png">`,
			`<img srcset="http://192.0.2.12/a.com/x,y.png, http://192.0.2.12/a.com/z.png">`, 2},
		{"picture source srcset", `<picture><source srcset="http://a.com/w.webp" type="image/webp"><img src="http://a.com/w.jpg"></picture>`,
			`<picture><source srcset="http://192.0.2.12/a.com/w.webp" type="image/webp"><img src="http://192.0.2.12/a.com/w.jpg"></picture>`, 2},
		{"script src", `<script type="text/javascript" src="http://a.com/x.js"></script>`,
			`<script type="text/javascript" src="http://192.0.2.12/a.com/x.js"></script>`, 1},
		{"link stylesheet", `<link rel="stylesheet" href="http://a.com/s.css">`,
			`<link rel="stylesheet" href="http://192.0.2.12/a.com/s.css">`, 1},
		{"link href before rel", `<link href="s.css" REL=StyleSheet>`,
			`<link href="http://192.0.2.12/www.foo.com/dir/s.css" REL=StyleSheet>`, 1},
		{"link shortcut icon", `<link rel="shortcut icon" href="/favicon.ico">`,
			`<link rel="shortcut icon" href="http://192.0.2.12/www.foo.com/favicon.ico">`, 1},
		{"link preload", `<link rel=preload as=image href="http://a.com/p.png">`,
			`<link rel=preload as=image href="http://192.0.2.12/a.com/p.png">`, 1},
		{"link modulepreload", `<link rel="modulepreload" href="/m.js"/>`,
			`<link rel="modulepreload" href="http://192.0.2.12/www.foo.com/m.js"/>`, 1},
		{"input type=image", `<input type="IMAGE" src="http://a.com/go.gif">`,
			`<input type="IMAGE" src="http://192.0.2.12/a.com/go.gif">`, 1},
		{"video src and poster", `<video src="http://a.com/v.mp4" poster="p.jpg"></video>`,
			`<video src="http://192.0.2.12/a.com/v.mp4" poster="http://192.0.2.12/www.foo.com/dir/p.jpg"></video>`, 2},
		{"audio src", `<audio src="http://a.com/a.ogg"></audio>`,
			`<audio src="http://192.0.2.12/a.com/a.ogg"></audio>`, 1},
		{"video source and track", `<video><source src="http://a.com/v.webm"><track src="c.vtt"></video>`,
			`<video><source src="http://192.0.2.12/a.com/v.webm"><track src="http://192.0.2.12/www.foo.com/dir/c.vtt"></video>`, 2},
		{"object data", `<object data="http://a.com/f.swf"></object>`,
			`<object data="http://192.0.2.12/a.com/f.swf"></object>`, 1},
		{"embed src", `<embed src="http://a.com/f.swf">`,
			`<embed src="http://192.0.2.12/a.com/f.swf">`, 1},
		{"style attribute", `<div style="background:url(http://a.com/b.png) no-repeat">`,
			`<div style="background:url(http://192.0.2.12/a.com/b.png) no-repeat">`, 1},
		{"style attribute quoted url", `<td style='background-image: url("/bg.gif")'>`,
			`<td style='background-image: url("http://192.0.2.12/www.foo.com/bg.gif")'>`, 1},
		{"style element url and import", `<style>@import "http://a.com/i.css"; @import url(i2.css); p{background:URL( '//b.com/p.png' )}</style>`,
			`<style>@import "http://192.0.2.12/a.com/i.css"; @import url(http://192.0.2.12/www.foo.com/dir/i2.css); p{background:URL( 'http://192.0.2.12/b.com/p.png' )}</style>`, 3},
		{"base href", `<base href="http://cdn.com/b/"><img src="a.png"><img src="/r.png">`,
			`<base href="http://cdn.com/b/"><img src="http://192.0.2.12/cdn.com/b/a.png"><img src="http://192.0.2.12/cdn.com/r.png">`, 2},
		{"relative base href", `<base href="/other/"><img src="a.png">`,
			`<base href="/other/"><img src="http://192.0.2.12/www.foo.com/other/a.png">`, 1},
		{"only the first base counts", `<base href="http://one.com/"><base href="http://two.com/"><img src="a.png">`,
			`<base href="http://one.com/"><base href="http://two.com/"><img src="http://192.0.2.12/one.com/a.png">`, 1},
		{"https base leaves relative alone", `<base href="https://s.com/"><img src="a.png"><img src="http://a.com/x">`,
			`<base href="https://s.com/"><img src="a.png"><img src="http://192.0.2.12/a.com/x">`, 1},
		{"first attribute of a name wins", `<img src="http://a.com/1" SRC="http://a.com/2">`,
			`<img src="http://192.0.2.12/a.com/1" SRC="http://a.com/2">`, 1},
		{"self-closing", `<img src="http://a.com/x"/>`,
			`<img src="http://192.0.2.12/a.com/x"/>`, 1},
		{"unquoted before self-closing slash", `<img src=http://a.com/x />`,
			`<img src=http://192.0.2.12/a.com/x />`, 1},

		// Never rewritten.
		{"never https", `<img src="https://a.com/x.png"><script src="HTTPS://a.com/x.js"></script>`,
			`<img src="https://a.com/x.png"><script src="HTTPS://a.com/x.js"></script>`, 0},
		{"never a href", `<a href="http://a.com/">a</a><a href="rel.html">b</a>`,
			`<a href="http://a.com/">a</a><a href="rel.html">b</a>`, 0},
		{"never forms", `<form action="http://a.com/f"><input type="submit" formaction="http://a.com/g"><button formaction="/h">`,
			`<form action="http://a.com/f"><input type="submit" formaction="http://a.com/g"><button formaction="/h">`, 0},
		{"never iframes and frames", `<iframe src="http://a.com/f.html"></iframe><frameset><frame src="http://a.com/g.html"></frameset>`,
			`<iframe src="http://a.com/f.html"></iframe><frameset><frame src="http://a.com/g.html"></frameset>`, 0},
		{"never data", `<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw="><div style="background:url(data:image/png;base64,iVBO)">`,
			`<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw="><div style="background:url(data:image/png;base64,iVBO)">`, 0},
		{"never javascript", `<img src="javascript:void(0)"><embed src="JavaScript:x()">`,
			`<img src="javascript:void(0)"><embed src="JavaScript:x()">`, 0},
		{"never httpdisabled (tp5n)", `<img src="httpdisabled://a.com/x.png"><link rel=stylesheet href="httpdisabled://b.com/s.css">`,
			`<img src="httpdisabled://a.com/x.png"><link rel=stylesheet href="httpdisabled://b.com/s.css">`, 0},
		{"never twice: VIP form", `<img src="http://192.0.2.12/a.com/x.png"><img src="http://192.0.2.12:80/a.com/y.png">`,
			`<img src="http://192.0.2.12/a.com/x.png"><img src="http://192.0.2.12:80/a.com/y.png">`, 0},
		{"never link rel canonical or alternate", `<link rel="canonical" href="http://a.com/"><link rel="alternate" href="/feed">`,
			`<link rel="canonical" href="http://a.com/"><link rel="alternate" href="/feed">`, 0},
		{"never input text src", `<input type="text" src="http://a.com/x">`,
			`<input type="text" src="http://a.com/x">`, 0},
		{"never with integrity", `<script src="http://a.com/x.js" integrity="sha384-abc" crossorigin></script>`,
			`<script src="http://a.com/x.js" integrity="sha384-abc" crossorigin></script>`, 0},
		{"never in comments", `<!-- <img src="http://a.com/x"> -->`,
			`<!-- <img src="http://a.com/x"> -->`, 0},
		{"never in script text", `<script>document.write('<img src="http://a.com/x">')</script>`,
			`<script>document.write('<img src="http://a.com/x">')</script>`, 0},
		{"never in textarea or title", `<title><img src="http://a.com/t"></title><textarea><img src="http://a.com/x"></textarea>`,
			`<title><img src="http://a.com/t"></title><textarea><img src="http://a.com/x"></textarea>`, 0},
		// Raw text elements (HTML standard 13.2.6.4.7, "generic raw text
		// element parsing algorithm"): their content is text up to their end
		// tag, or to the end of the document when it is missing; noscript is
		// raw text as in a browser with scripting enabled; everything after
		// plaintext is text.
		{"never in an unclosed iframe", `<iframe><img src="http://a.test/x.png">`,
			`<iframe><img src="http://a.test/x.png">`, 0},
		{"closed iframe: rewritten after its end tag", `<iframe><img src="http://a.test/x.png"></iframe><img src="http://a.test/x.png">`,
			`<iframe><img src="http://a.test/x.png"></iframe><img src="http://192.0.2.12/a.test/x.png">`, 1},
		{"iframe end tag inside a comment-like text", `<iframe><!--</iframe>--><img src="http://a.test/x.png">`,
			`<iframe><!--</iframe>--><img src="http://192.0.2.12/a.test/x.png">`, 1},
		{"never in noembed", `<noembed><img src="http://a.test/x.png"></noembed><img src="http://a.test/x.png">`,
			`<noembed><img src="http://a.test/x.png"></noembed><img src="http://192.0.2.12/a.test/x.png">`, 1},
		{"never in noframes", `<noframes><img src="http://a.test/x.png"></noframes><img src="http://a.test/x.png">`,
			`<noframes><img src="http://a.test/x.png"></noframes><img src="http://192.0.2.12/a.test/x.png">`, 1},
		{"never in xmp", `<XMP><img src="http://a.test/x.png"></xmp ><img src="http://a.test/x.png">`,
			`<XMP><img src="http://a.test/x.png"></xmp ><img src="http://192.0.2.12/a.test/x.png">`, 1},
		{"never in noscript", `<noscript><img src="http://a.test/x.png"></noscript><img src="http://a.test/x.png">`,
			`<noscript><img src="http://a.test/x.png"></noscript><img src="http://192.0.2.12/a.test/x.png">`, 1},
		{"never after plaintext", `<plaintext><img src="http://a.test/x.png"></plaintext><img src="http://a.test/x.png">`,
			`<plaintext><img src="http://a.test/x.png"></plaintext><img src="http://a.test/x.png">`, 0},
		// Foreign content (HTML standard 13.2.5.42, 13.2.6.5): in svg and
		// math "<![CDATA[" opens a CDATA section, text up to "]]>"; in HTML
		// content it opens a bogus comment ending at the first '>', and what
		// follows is markup again (html5lib-tests tests21.dat, tests10.dat).
		{"never in svg CDATA, rewritten after </svg>", `<svg><![CDATA[ a > <img src="http://a.test/x.png"> ]]></svg><img src="http://a.test/x.png">`,
			`<svg><![CDATA[ a > <img src="http://a.test/x.png"> ]]></svg><img src="http://192.0.2.12/a.test/x.png">`, 1},
		{"never in math CDATA, rewritten after </math>", `<math><![CDATA[<img src="http://a.test/x.png">]]><mi>x</mi></math><img src="http://a.test/x.png">`,
			`<math><![CDATA[<img src="http://a.test/x.png">]]><mi>x</mi></math><img src="http://192.0.2.12/a.test/x.png">`, 1},
		{"never in unterminated svg CDATA", `<svg><![CDATA[ > <img src="http://a.test/x.png">`,
			`<svg><![CDATA[ > <img src="http://a.test/x.png">`, 0},
		{"never in CDATA of a nested svg element", `<svg><g><text><![CDATA[ > <img src="http://a.test/x.png"> ]]></text></g></svg>`,
			`<svg><g><text><![CDATA[ > <img src="http://a.test/x.png"> ]]></text></g></svg>`, 0},
		{"never in CDATA in foreignObject (an svg element)", `<svg><foreignObject><![CDATA[ > <img src="http://a.test/x.png"> ]]></foreignObject></svg>`,
			`<svg><foreignObject><![CDATA[ > <img src="http://a.test/x.png"> ]]></foreignObject></svg>`, 0},
		{"CDATA in HTML content is a bogus comment up to the first >", `<div><![CDATA[ a > <img src="http://a.test/x.png"> ]]></div>`,
			`<div><![CDATA[ a > <img src="http://192.0.2.12/a.test/x.png"> ]]></div>`, 1},
		{"CDATA in HTML content: the tag's > ends the bogus comment", `<![CDATA[<img src="http://a.test/x.png">]]><img src="http://a.test/x.png">`,
			`<![CDATA[<img src="http://a.test/x.png">]]><img src="http://192.0.2.12/a.test/x.png">`, 1},
		{"CDATA after a closed svg is a bogus comment", `<svg></svg><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
			`<svg></svg><![CDATA[ a > <img src="http://192.0.2.12/a.test/x.png"> ]]>`, 1},
		{"CDATA after a self-closing svg is a bogus comment", `<svg/><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
			`<svg/><![CDATA[ a > <img src="http://192.0.2.12/a.test/x.png"> ]]>`, 1},
		{"CDATA after a breakout tag is a bogus comment", `<svg><p><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
			`<svg><p><![CDATA[ a > <img src="http://192.0.2.12/a.test/x.png"> ]]>`, 1},
		{"lowercase cdata in svg is a bogus comment", `<svg><![cdata[ a > <img src="http://a.test/x.png"> ]]>`,
			`<svg><![cdata[ a > <img src="http://192.0.2.12/a.test/x.png"> ]]>`, 1},
		{"never in CDATA after HTML inside foreignObject (conservative)", `<svg><foreignObject><div><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`,
			`<svg><foreignObject><div><![CDATA[ a > <img src="http://a.test/x.png"> ]]>`, 0},
		{"svg title is markup: a breakout img is an HTML img", `<svg><title><img src="http://a.test/x.png"></title></svg>`,
			`<svg><title><img src="http://192.0.2.12/a.test/x.png"></title></svg>`, 1},
		{"svg script is markup: never in its CDATA", `<svg><script><![CDATA[ if (a<b) x("</script><img src='http://a.test/x.png'>") ]]></script></svg><img src="http://a.test/x.png">`,
			`<svg><script><![CDATA[ if (a<b) x("</script><img src='http://a.test/x.png'>") ]]></script></svg><img src="http://192.0.2.12/a.test/x.png">`, 1},
		{"svg style text is CSS, CDATA too", `<svg><style><![CDATA[ a{background:url(http://a.test/b.png)} ]]></style><style>b{background:url(http://a.test/c.png)}</style></svg>`,
			`<svg><style><![CDATA[ a{background:url(http://192.0.2.12/a.test/b.png)} ]]></style><style>b{background:url(http://192.0.2.12/a.test/c.png)}</style></svg>`, 2},
		{"never svg style text holding markup", `<svg><style><!-- a{background:url(http://a.test/b.png)} --></style></svg>`,
			`<svg><style><!-- a{background:url(http://a.test/b.png)} --></style></svg>`, 0},
		{"never empty or fragment-only", `<img src=""><img src="#top"><img src>`,
			`<img src=""><img src="#top"><img src>`, 0},
		{"never userinfo", `<img src="http://user:pw@a.com/x">`,
			`<img src="http://user:pw@a.com/x">`, 0},
		{"never backslash", `<img src="http:\\a.com\x"><img src="..\x.png">`,
			`<img src="http:\\a.com\x"><img src="..\x.png">`, 0},
		{"never newline inside", "<img src=\"http://a.com/\nx\">",
			"<img src=\"http://a.com/\nx\">", 0},
		{"never dot segments above an absolute root", `<img src="http://a.com/../x">`,
			`<img src="http://a.com/../x">`, 0},
		{"never character reference in host", `<img src="http://a&#46;com/x">`,
			`<img src="http://a&#46;com/x">`, 0},
		{"never bad port", `<img src="http://a.com:99999/x"><img src="http://a.com:/x">`,
			`<img src="http://a.com:99999/x"><img src="http://a.com:/x">`, 0},
		{"never scheme-relative http: without slashes", `<img src="http:x.png">`,
			`<img src="http:x.png">`, 0},
		{"never style attribute with character references", `<div style="background:url(&quot;http://a.com/x&quot;)">`,
			`<div style="background:url(&quot;http://a.com/x&quot;)">`, 0},
		{"never style strings or comments", `<style>/* url(http://a.com/c) */ p:after{content:"url(http://a.com/s)"} p{x:myurl(http://a.com/m)}</style>`,
			`<style>/* url(http://a.com/c) */ p:after{content:"url(http://a.com/s)"} p{x:myurl(http://a.com/m)}</style>`, 0},

		// Bad input: malformed HTML passes, what can be rewritten is.
		{"malformed: unterminated tag", `<img src="http://a.com/x"`,
			`<img src="http://a.com/x"`, 0},
		{"malformed: unterminated comment", `<img src="http://a.com/x"><!-- <img src="http://a.com/y">`,
			`<img src="http://192.0.2.12/a.com/x"><!-- <img src="http://a.com/y">`, 1},
		{"malformed: unclosed quote runs to the next quote", `<img src="http://a.com/x><p class="y">`,
			`<img src="http://192.0.2.12/a.com/x><p class="y">`, 1},
		{"malformed: stray bytes, NUL in the tag name", "\x00<\xff<img\x00 src=http://a.com/x>\xfe</",
			"\x00<\xff<img\x00 src=http://a.com/x>\xfe</", 0},
		{"malformed: NUL after the tag name", "<img src\x00=http://a.com/x><img src=http://a.com/y\x00>",
			"<img src\x00=http://a.com/x><img src=http://192.0.2.12/a.com/y\x00>", 1},
		{"malformed: equals before name", `<img =src="http://a.com/x" src="http://a.com/y">`,
			`<img =src="http://a.com/x" src="http://192.0.2.12/a.com/y">`, 1},
		{"malformed: unclosed style", `<style>p{background:url(http://a.com/x)}`,
			`<style>p{background:url(http://192.0.2.12/a.com/x)}`, 1},
	}
	r := newTestRewriter(t, Config{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			st, err := r.HTML(&out, strings.NewReader(tc.in), mustURL(t, doc))
			if err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
			if st.URLs != tc.urls {
				t.Errorf("URLs = %d, want %d", st.URLs, tc.urls)
			}
		})
	}
}

// TestCSSGolden covers text/css bodies.
func TestCSSGolden(t *testing.T) {
	const doc = "http://st.foo.com:8080/css/main.css"
	tests := []struct {
		name, in, want string
	}{
		{"url unquoted", `a{background:url(img/a.png)}`, `a{background:url(http://192.0.2.12/st.foo.com:8080/css/img/a.png)}`},
		{"url double quoted", `a{background:url("../i/a.png")}`, `a{background:url("http://192.0.2.12/st.foo.com:8080/i/a.png")}`},
		{"url single quoted with spaces", `a{background:url( 'http://a.com/x.png' )}`, `a{background:url( 'http://192.0.2.12/a.com/x.png' )}`},
		{"upper case URL", `a{b:URL(/x.png)}`, `a{b:URL(http://192.0.2.12/st.foo.com:8080/x.png)}`},
		{"import string", `@import "reset.css";`, `@import "http://192.0.2.12/st.foo.com:8080/css/reset.css";`},
		{"import single quote", `@IMPORT 'http://a.com/r.css' screen;`, `@IMPORT 'http://192.0.2.12/a.com/r.css' screen;`},
		{"import url", `@import url(http://a.com/r.css);`, `@import url(http://192.0.2.12/a.com/r.css);`},
		{"font-face", `@font-face{src:url(f.woff2) format("woff2"),url(f.woff) format("woff")}`,
			`@font-face{src:url(http://192.0.2.12/st.foo.com:8080/css/f.woff2) format("woff2"),url(http://192.0.2.12/st.foo.com:8080/css/f.woff) format("woff")}`},
		{"never https", `a{b:url(https://a.com/x.png)}`, `a{b:url(https://a.com/x.png)}`},
		{"never data", `a{b:url(data:image/png;base64,AAAA)}`, `a{b:url(data:image/png;base64,AAAA)}`},
		{"never in comment", `/* url(http://a.com/x) @import "y.css"; */`, `/* url(http://a.com/x) @import "y.css"; */`},
		{"never other strings", `a:after{content:"url(x.png)"}`, `a:after{content:"url(x.png)"}`},
		{"never escaped url", `a{b:url(http\:\/\/a.com/x)}`, `a{b:url(http\:\/\/a.com/x)}`},
		{"never bad url token", `a{b:url(x y.png)}`, `a{b:url(x y.png)}`},
		{"never unterminated", `a{b:url(http://a.com/x`, `a{b:url(http://a.com/x`},
		{"never twice", `a{b:url(http://192.0.2.12/a.com/x)}`, `a{b:url(http://192.0.2.12/a.com/x)}`},
	}
	r := newTestRewriter(t, Config{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if _, err := r.CSS(&out, strings.NewReader(tc.in), mustURL(t, doc)); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestMaxTokenBytes checks that a token over the bound makes the rest of the
// document pass through unchanged.
func TestMaxTokenBytes(t *testing.T) {
	r := newTestRewriter(t, Config{MaxTokenBytes: 64})
	in := `<img src="http://a.com/1"><p title="` + strings.Repeat("x", 100) + `"><img src="http://a.com/2">`
	want := `<img src="http://192.0.2.12/a.com/1"><p title="` + strings.Repeat("x", 100) + `"><img src="http://a.com/2">`
	var out bytes.Buffer
	st, err := r.HTML(&out, strings.NewReader(in), nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != want || !st.PassedThrough || st.URLs != 1 {
		t.Errorf("got %q %+v, want %q with PassedThrough and 1 URL", out.String(), st, want)
	}
}

// TestStatsHosts: a rewritten document names the other hosts of its
// rewritten absolute URLs once each, in order, without its own host or
// the hosts of URLs left alone (https), at most MaxHosts of them.
func TestStatsHosts(t *testing.T) {
	r := newTestRewriter(t, Config{})
	doc, _ := url.Parse("http://www.own.com/index.html")
	in := `<link rel=stylesheet href="http://CDN.a.com/s.css"><img src="http://b.com:8080/1.png"><img src="http://cdn.a.com/2.png">` +
		`<img src="/local.png"><img src="http://www.own.com/x.png"><img src="https://c.com/3.png"><style>p{background:url(http://d.com/bg.png)}</style>`
	st, err := r.HTML(io.Discard, strings.NewReader(in), doc)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"cdn.a.com", "b.com", "d.com"}; !slices.Equal(st.Hosts, want) {
		t.Errorf("Hosts %q, want %q", st.Hosts, want)
	}
	var many strings.Builder
	for i := range MaxHosts + 5 {
		fmt.Fprintf(&many, `<img src="http://h%d.com/x.png">`, i)
	}
	if st, _ := r.HTML(io.Discard, strings.NewReader(many.String()), doc); len(st.Hosts) != MaxHosts || st.URLs != MaxHosts+5 {
		t.Errorf("%d hosts of %d URLs, want %d of %d", len(st.Hosts), st.URLs, MaxHosts, MaxHosts+5)
	}
}

func TestNewVIP(t *testing.T) {
	tests := []struct {
		vip, want, err string
	}{
		{"192.0.2.12", "192.0.2.12", ""},
		{"192.0.2.12:80", "192.0.2.12", ""},
		{"192.0.2.12:8080", "192.0.2.12:8080", ""},
		{"2001:db8::1", "[2001:db8::1]", ""},
		{"[2001:db8::1]:8080", "[2001:db8::1]:8080", ""},
		{"example.com", "", `rewrite: vip "example.com" is not an IP address or IP:port`},
		{"192.0.2.12:0", "", `rewrite: vip "192.0.2.12:0": port 0`},
		{"", "", `rewrite: vip "" is not an IP address or IP:port`},
	}
	for _, tc := range tests {
		r, err := New(tc.vip, Config{}, nil, nil)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("New(%q) error = %v, want %s", tc.vip, err, tc.err)
			}
			continue
		}
		if err != nil || r.VIP() != tc.want {
			t.Errorf("New(%q) = %v, %v; want %s", tc.vip, r.VIP(), err, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		err  string
	}{
		{"zero", Config{}, ""},
		{"negative body", Config{MaxBodyBytes: -1}, "max_body_bytes: -1 is negative"},
		{"small body", Config{MaxBodyBytes: 16}, "max_body_bytes: 16 is below 1KiB"},
		{"negative token", Config{MaxTokenBytes: -5}, "max_token_bytes: -5 is negative"},
		{"bad type", Config{HTMLTypes: []string{"text/HTML"}}, `html_types.0: "text/HTML" is not a lowercase media type without parameters`},
		{"type with parameter", Config{CSSTypes: []string{"text/css", "text/css; charset=utf-8"}}, `css_types.1: "text/css; charset=utf-8" is not a lowercase media type without parameters`},
		{"gzip level", Config{GzipLevel: 10}, "gzip_level: 10 is outside 1..9"},
		{"brotli quality", Config{BrotliQuality: 12}, "brotli_quality: 12 is outside 0..11"},
	}
	for _, tc := range tests {
		err := tc.cfg.Validate()
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || err.Error() != tc.err) {
			t.Errorf("%s: Validate() = %v, want %q", tc.name, err, tc.err)
		}
	}
}
