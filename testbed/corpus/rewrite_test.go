package corpus

import (
	"bytes"
	"testing"
)

func testBase(dir ...string) *refBase {
	return &refBase{host: "www.a.com", dir: dir, hosts: map[string]bool{"www.a.com": true, "i.b.net": true, "c.org": true}}
}

func TestAbsolute(t *testing.T) {
	for _, tc := range []struct {
		name string
		dir  []string
		ref  string
		want string // "" means unchanged
	}{
		{name: "cross host from root", ref: "../i.b.net/x/a.png", want: "http://i.b.net/x/a.png"},
		{name: "cross host from depth 2", dir: []string{"d", "e"}, ref: "../../../i.b.net/a.png@v=1", want: "http://i.b.net/a.png@v=1"},
		{name: "query and fragment kept raw", ref: "../c.org/p?a=1&amp;b=2#top", want: "http://c.org/p?a=1&amp;b=2#top"},
		{name: "same host re-entered", ref: "../www.a.com/x.html", want: "http://www.a.com/x.html"},
		{name: "dot segments", ref: "./../i.b.net/./x/../y.gif", want: "http://i.b.net/y.gif"},
		{name: "host root with slash", ref: "../c.org/", want: "http://c.org/"},
		{name: "host root without slash", ref: "../c.org", want: "http://c.org/"},
		{name: "stays in host", dir: []string{"d"}, ref: "../x.png"},
		{name: "plain relative", ref: "img/x.png"},
		{name: "unknown folder", ref: "../nosuch.example/x.png"},
		{name: "above the site", ref: "../../i.b.net/x.png"},
		{name: "absolute URL", ref: "http://i.b.net/x.png"},
		{name: "httpdisabled", ref: "httpdisabled://i.b.net/x.png"},
		{name: "javascript", ref: "javascript:void('../i.b.net/x')"},
		{name: "path absolute", ref: "/i.b.net/x.png"},
		{name: "fragment", ref: "#../i.b.net"},
		{name: "empty", ref: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := testBase(tc.dir...).absolute([]byte(tc.ref))
			if tc.want == "" {
				if ok {
					t.Errorf("absolute(%q) = %q, want unchanged", tc.ref, got)
				}
				return
			}
			if !ok || got != tc.want {
				t.Errorf("absolute(%q) = %q, %v, want %q", tc.ref, got, ok, tc.want)
			}
		})
	}
}

func TestRewriteHTML(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		n              int
	}{
		{"double quoted", `<img src="../i.b.net/a.png" alt="x">`, `<img src="http://i.b.net/a.png" alt="x">`, 1},
		{"single quoted upper case", `<IMG SRC='../i.b.net/a.png'>`, `<IMG SRC='http://i.b.net/a.png'>`, 1},
		{"unquoted self-closing", `<img src=../i.b.net/a.png />`, `<img src=http://i.b.net/a.png />`, 1},
		{"spaces around value", `<a href=" ../c.org/ ">`, `<a href=" http://c.org/ ">`, 1},
		{"two attributes", `<td background="../c.org/bg.gif"><img data-src='../i.b.net/l.gif' src="../i.b.net/a.gif">`,
			`<td background="http://c.org/bg.gif"><img data-src='http://i.b.net/l.gif' src="http://i.b.net/a.gif">`, 3},
		{"event handler left alone", `<img onload="this.src='../i.b.net/a.png'" src="x.png">`, `<img onload="this.src='../i.b.net/a.png'" src="x.png">`, 0},
		{"style attribute", `<div style="background:url(../c.org/a.gif)">`, `<div style="background:url(http://c.org/a.gif)">`, 1},
		{"meta refresh", `<meta http-equiv="refresh" content="5; URL=../c.org/next.html">`, `<meta http-equiv="refresh" content="5; URL=http://c.org/next.html">`, 1},
		{"style element", "<style>@import '../c.org/a.css';\nb{background:URL( \"../i.b.net/b.png\" )}</style>",
			"<style>@import 'http://c.org/a.css';\nb{background:URL( \"http://i.b.net/b.png\" )}</style>", 2},
		{"inline script strings", `<script>var i=new Image();i.src="../i.b.net/p.gif";document.write('<img src="../c.org/q.gif">')</script>`,
			`<script>var i=new Image();i.src="http://i.b.net/p.gif";document.write('<img src="http://c.org/q.gif">')</script>`, 2},
		{"noscript markup", `<noscript><img src="../i.b.net/n.gif"></noscript>`, `<noscript><img src="http://i.b.net/n.gif"></noscript>`, 1},
		{"comment untouched", `<!-- <img src="../i.b.net/a.png"> -->`, `<!-- <img src="../i.b.net/a.png"> -->`, 0},
		{"text untouched", `<p>see ../i.b.net/a.png</p>`, `<p>see ../i.b.net/a.png</p>`, 0},
		{"GBK bytes keep offsets", "<style>\xcd\xf8\xd2\xd7{background:url(../c.org/a.gif)}</style>", "<style>\xcd\xf8\xd2\xd7{background:url(http://c.org/a.gif)}</style>", 1},
		{"unterminated tag passes", `<img src="../i.b.net/a.png`, `<img src="../i.b.net/a.png`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, n := testBase().rewriteHTML([]byte(tc.in))
			if string(got) != tc.want || n != tc.n {
				t.Errorf("got %q (%d)\nwant %q (%d)", got, n, tc.want, tc.n)
			}
		})
	}
}

func TestRewriteCSS(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		n              int
	}{
		{"unquoted", `a{background:url(../../../i.b.net/x.png) no-repeat}`, `a{background:url(http://i.b.net/x.png) no-repeat}`, 1},
		{"import url", `@import url("../../../c.org/a.css");`, `@import url("http://c.org/a.css");`, 1},
		{"import string", `@import "../../../c.org/a.css";`, `@import "http://c.org/a.css";`, 1},
		{"same host", `a{background:url(../b.png)}`, `a{background:url(../b.png)}`, 0},
		{"unterminated quote", `a{background:url("../../../c.org/x.png}`, `a{background:url("../../../c.org/x.png}`, 0},
		{"data URL", `a{background:url(data:image/gif;base64,R0lG)}`, `a{background:url(data:image/gif;base64,R0lG)}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, n := testBase("s", "css").rewriteCSS([]byte(tc.in))
			if string(got) != tc.want || n != tc.n {
				t.Errorf("got %q (%d)\nwant %q (%d)", got, n, tc.want, tc.n)
			}
		})
	}
}

// TestRewritePassthroughTP5N: with no host folder to point to, every HTML
// and CSS file of tp5n comes out byte for byte as it went in.
func TestRewritePassthroughTP5N(t *testing.T) {
	c := loadTP5N(t)
	b := &refBase{host: "x", hosts: map[string]bool{}}
	n := 0
	for _, p := range c.Pages {
		for _, o := range p.Objects {
			var out []byte
			switch {
			case isHTML(o.ContentType):
				out, _ = b.rewriteHTML(o.Body)
			case isCSS(o.ContentType):
				out, _ = b.rewriteCSS(o.Body)
			default:
				continue
			}
			n++
			if !bytes.Equal(out, o.Body) {
				t.Fatalf("%s%s changed without a rule to apply", o.Host, o.Path)
			}
		}
	}
	if n != 697 {
		t.Errorf("checked %d HTML and CSS files, want 697", n)
	}
}

func FuzzRewriteHTML(f *testing.F) {
	for _, s := range []string{`<img src="../i.b.net/a.png">`, `<style>a{b:url(../c.org/x)}</style>`,
		`<script>x="../c.org/y"</script>`, `<a href='../www.a.com/'>`, `<meta content="0;url=../c.org/">`, "<\x00 src=\"../c.org/\">"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		none := &refBase{host: "www.a.com", hosts: map[string]bool{}}
		if out, n := none.rewriteHTML(in); n != 0 || !bytes.Equal(out, in) {
			t.Fatalf("no rule, yet %q became %q", in, out)
		}
		out, n := testBase().rewriteHTML(in)
		if n == 0 && !bytes.Equal(out, in) {
			t.Fatalf("nothing rewritten, yet %q became %q", in, out)
		}
		if added := bytes.Count(out, []byte("http://")) - bytes.Count(in, []byte("http://")); added < n {
			t.Fatalf("%d rewrites added %d absolute URLs to %q", n, added, in)
		}
	})
}

func FuzzRewriteCSS(f *testing.F) {
	for _, s := range []string{`a{b:url(../../c.org/x)}`, `@import "../../i.b.net/a.css";`, `url(`, `@import`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		none := &refBase{host: "www.a.com", dir: []string{"s"}, hosts: map[string]bool{}}
		if out, n := none.rewriteCSS(in); n != 0 || !bytes.Equal(out, in) {
			t.Fatalf("no rule, yet %q became %q", in, out)
		}
		testBase("s").rewriteCSS(in)
	})
}

func FuzzCandidates(f *testing.F) {
	for _, s := range []string{"/a%20b.png?x=1", "/", "/s?wd=%E4", "http://h/x?y", "*", "/%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		seen := map[string]bool{}
		for _, c := range Candidates(target) {
			if seen[c] || len(c) == 0 || c[0] != '/' {
				t.Fatalf("Candidates(%q) gave %q twice or without a leading slash", target, c)
			}
			seen[c] = true
		}
	})
}

func BenchmarkRewriteHTMLCNN(b *testing.B) {
	c := loadTP5N(b)
	p, _ := c.Page("cnn.com")
	// Undo nothing: rewrite the served page again with the site's hosts, a
	// worst case of every reference being inspected.
	base := &refBase{host: p.Host, hosts: map[string]bool{}}
	for _, h := range p.Hosts() {
		base.hosts[h] = true
	}
	body := p.Objects[0].Body
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		base.rewriteHTML(body)
	}
}
