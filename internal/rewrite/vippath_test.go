package rewrite

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestParseVIPPath(t *testing.T) {
	tests := []struct {
		target string
		want   string // origin URL, or "" for an error
		reason string
	}{
		{"/i.cnn.net/images/plane.jpg", "http://i.cnn.net/images/plane.jpg", ""},
		{"/I.CNN.Net/Images/A.jpg?x=1&y=%20", "http://i.cnn.net/Images/A.jpg?x=1&y=%20", ""},
		{"/a.com:8080/x", "http://a.com:8080/x", ""},
		{"/a.com:0080/x", "http://a.com:80/x", ""},
		{"/a.com", "http://a.com/", ""},
		{"/a.com?q", "http://a.com/?q", ""},
		{"/a.com/?", "http://a.com/?", ""},
		{"/a.com/p%2Fq/s@wd=mozilla.html", "http://a.com/p%2Fq/s@wd=mozilla.html", ""},
		{"/[2001:db8::1]:81/x", "http://[2001:db8::1]:81/x", ""},
		{"/", "", "no host"},
		{"", "", "not an origin-form path"},
		{"http://192.0.2.12/a.com/x", "", "not an origin-form path"},
		{"//a.com/x", "", "no host"},
		{"/%zz/", "", "invalid percent-encoding"},
		{"/a.com/%zz", "", "invalid percent-encoding"},
		{"/a.com/x?q=%z", "", "invalid percent-encoding in query"},
		{"/a%2Ecom/", "", "percent-encoded host"},
		{"/host:99999/", "", `port "99999" out of range`},
		{"/host:0/", "", `port "0" out of range`},
		{"/host:/", "", "empty port"},
		{"/host:http/", "", `invalid port "http"`},
		{"/user@host/", "", "userinfo in host"},
		{"/user:pw@host/x", "", "userinfo in host"},
		{"/a_b.c!d/", "", `invalid host "a_b.c!d"`},
		{"/[zz]/", "", `invalid host "[zz]"`},
		{"/[::1/", "", `invalid host "[::1"`},
		{"/a.com/x#f", "", "fragment in request-target"},
	}
	for _, tc := range tests {
		u, err := ParseVIPPath(tc.target)
		if tc.want != "" {
			if err != nil || u.String() != tc.want {
				t.Errorf("ParseVIPPath(%q) = %v, %v; want %s", tc.target, u, err, tc.want)
			}
			continue
		}
		var pe *PathError
		if !errors.As(err, &pe) || !errors.Is(err, ErrVIPPath) || pe.Reason != tc.reason {
			t.Errorf("ParseVIPPath(%q) = %v, %v; want PathError %q", tc.target, u, err, tc.reason)
		}
	}
}

func TestVIPURLAndLocation(t *testing.T) {
	r := newTestRewriter(t, Config{})
	origin := mustURL(t, "http://img.foo.com/a/b.png?x=1")
	tests := []struct {
		loc, want string
		ok        bool
	}{
		{"http://i.cnn.net/x.jpg", "http://192.0.2.12/i.cnn.net/x.jpg", true},
		{"HTTP://I.CNN.NET:8080/x.jpg?q#f", "http://192.0.2.12/i.cnn.net:8080/x.jpg?q#f", true},
		{"/moved.png", "http://192.0.2.12/img.foo.com/moved.png", true},
		{"c.png", "http://192.0.2.12/img.foo.com/a/c.png", true},
		{"//cdn.com/x", "http://192.0.2.12/cdn.com/x", true},
		{"https://secure.com/x", "https://secure.com/x", false},
		{"http://192.0.2.12/a.com/x", "http://192.0.2.12/a.com/x", false},
		{"http://u:p@a.com/x", "http://u:p@a.com/x", false},
		{"ftp://a.com/x", "ftp://a.com/x", false},
		{"http://a b/", "http://a b/", false},
	}
	for _, tc := range tests {
		got, ok := r.Location(tc.loc, origin)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Location(%q) = %q, %v; want %q, %v", tc.loc, got, ok, tc.want, tc.ok)
		}
	}
	// VIPURL and ParseVIPPath are inverse on what VIPURL accepts.
	for _, s := range []string{"http://a.com/", "http://a.com:8080/p%20q?x=%2F", "http://[2001:db8::1]/x"} {
		v, ok := r.VIPURL(mustURL(t, s))
		if !ok {
			t.Fatalf("VIPURL(%s) refused", s)
		}
		back, err := ParseVIPPath(v[len("http://"+testVIP):])
		if err != nil || back.String() != s {
			t.Errorf("ParseVIPPath(VIPURL(%s)) = %v, %v", s, back, err)
		}
	}
}

func TestSetCookie(t *testing.T) {
	tests := []struct {
		origin, in, want string
		ok               bool
	}{
		{"http://a.com/x/y.png", "sid=1; Path=/; Domain=.a.com; HttpOnly",
			"a.com|sid=1; HttpOnly; Path=/a.com/", true},
		{"http://a.com/x/y.png", "sid=1", "a.com|sid=1; Path=/a.com/x", true},
		{"http://a.com/y.png", "sid=1", "a.com|sid=1; Path=/a.com/", true},
		{"http://A.com:8080/shop/item", "cart=abc; path=/shop; Max-Age=60; SameSite=Lax",
			"a.com~8080|cart=abc; Max-Age=60; SameSite=Lax; Path=/a.com:8080/shop", true},
		{"http://a.com/x/y", "k=v; Path=relative", "a.com|k=v; Path=/a.com/x", true},
		{"http://a.com/", "k=; domain=a.com; Expires=Thu, 01 Jan 1970 00:00:00 GMT",
			"a.com|k=; Expires=Thu, 01 Jan 1970 00:00:00 GMT; Path=/a.com/", true},
		{"http://[2001:db8::1]/x", "k=v", "2001.db8..1|k=v; Path=/[2001:db8::1]/", true},
		{"http://a.com/", "novalue", "", false},
		{"http://a.com/", "=v", "", false},
	}
	for _, tc := range tests {
		got, ok := SetCookie(tc.in, mustURL(t, tc.origin))
		if got != tc.want || ok != tc.ok {
			t.Errorf("SetCookie(%q, %s) = %q, %v; want %q, %v", tc.in, tc.origin, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCookieHeader(t *testing.T) {
	// The browser holds cookies of three sites under the VIP, and one a
	// VIP-origin script set with Path=/ and no site prefix.
	const header = "a.com|sid=1; b.com|sid=2; a.com~8080|sid=3; a.com|lang=de; stray=x; a.com|=bad; a.co|m=4"
	tests := []struct {
		origin, want string
	}{
		{"http://a.com/x", "sid=1; lang=de"},
		{"http://A.COM:80/x", "sid=1; lang=de"},
		{"http://b.com/", "sid=2"},
		{"http://a.com:8080/", "sid=3"},
		{"http://c.com/", ""},
	}
	for _, tc := range tests {
		if got := CookieHeader(header, mustURL(t, tc.origin)); got != tc.want {
			t.Errorf("CookieHeader(%s) = %q, want %q", tc.origin, got, tc.want)
		}
	}
	// A cookie set through SetCookie comes back through CookieHeader.
	origin := mustURL(t, "http://shop.com/cart/view")
	set, _ := SetCookie("cart=42; Path=/", origin)
	pair := set[:len("shop.com|cart=42")]
	if got := CookieHeader(pair+"; other.com|cart=7", origin); got != "cart=42" {
		t.Errorf("round trip: %q", got)
	}
}

// TestOrigins: with Config.Origins each object host goes to the origin
// FNV-1a (32 bit) of its authority picks, modulo k (values below checked
// with an independent FNV-1a: a.com 0, img.cdn.test 2, www.foo.com 1,
// static.example.com:8080 0), in HTML, CSS, relative URLs, VIPURL and
// Location; URLs already on any VIP origin stay; FromVIPURL maps every
// VIP origin back, the plain http://VIP too.
func TestOrigins(t *testing.T) {
	origins := []string{"https://192.0.2.12", "https://192.0.2.12:8443", "https://vip.example.net:8444"}
	r, err := New("192.0.2.12", Config{Origins: origins}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := `<img src="http://a.com/x.png"><img src="http://IMG.cdn.test/y.png"><script src="/app.js"></script>` +
		`<link rel=stylesheet href="http://static.example.com:8080/s.css"><img src="https://b.example.net/z.png">` +
		`<img src="http://192.0.2.12/a.com/x.png"><img src="https://vip.example.net:8444/a.com/x.png"><a href="http://a.com/">a</a>` +
		`<style>body{background:url(http://img.cdn.test/bg.png)}</style>`
	want := `<img src="https://192.0.2.12/a.com/x.png"><img src="https://vip.example.net:8444/img.cdn.test/y.png"><script src="https://192.0.2.12:8443/www.foo.com/app.js"></script>` +
		`<link rel=stylesheet href="https://192.0.2.12/static.example.com:8080/s.css"><img src="https://b.example.net/z.png">` +
		`<img src="http://192.0.2.12/a.com/x.png"><img src="https://vip.example.net:8444/a.com/x.png"><a href="http://a.com/">a</a>` +
		`<style>body{background:url(https://vip.example.net:8444/img.cdn.test/bg.png)}</style>`
	var out strings.Builder
	if _, err := r.HTML(&out, strings.NewReader(in), mustURL(t, "http://www.foo.com/index.html")); err != nil {
		t.Fatal(err)
	}
	if out.String() != want {
		t.Errorf("HTML:\n got %s\nwant %s", out.String(), want)
	}
	if v, _ := r.VIPURL(mustURL(t, "http://www.foo.com/p?q")); v != "https://192.0.2.12:8443/www.foo.com/p?q" {
		t.Errorf("VIPURL = %q", v)
	}
	if v, _ := r.Location("/next", mustURL(t, "http://img.cdn.test/a")); v != "https://vip.example.net:8444/img.cdn.test/next" {
		t.Errorf("Location = %q", v)
	}
	for _, c := range []struct {
		in, want string
		isVIP    bool
	}{
		{"http://192.0.2.12/a.com/x?y", "http://a.com/x?y", true},
		{"https://192.0.2.12:8443/www.foo.com/", "http://www.foo.com/", true},
		{"https://vip.example.net:8444/img.cdn.test:81/z", "http://img.cdn.test:81/z", true},
		{"https://192.0.2.12:8445/a.com/x", "", false},
		{"http://a.com/x", "", false},
	} {
		u, isVIP, err := r.FromVIPURL(c.in)
		got := ""
		if u != nil {
			got = u.String()
		}
		if isVIP != c.isVIP || got != c.want || err != nil {
			t.Errorf("FromVIPURL(%q) = %q, %v, %v; want %q, %v", c.in, got, isVIP, err, c.want, c.isVIP)
		}
	}
	for _, bad := range []string{"ftp://192.0.2.12", "https://192.0.2.12/x", "https://VIP.example.net", "https://"} {
		if _, err := New("192.0.2.12", Config{Origins: []string{bad}}, nil, nil); err == nil {
			t.Errorf("origin %q accepted", bad)
		}
	}
}

// TestPlainBlocking: with Config.PlainBlocking the render-blocking
// elements, stylesheet links (any case, among other rel tokens) and
// parser-blocking scripts, go under the plain http://VIP, and everything
// else under its https shard as without it: async, defer and module
// scripts, images, preloads, inline styles, and the url() of a stylesheet
// served from the plain VIP (its fonts and images are not render-blocking);
// a <style> element's @import rules are render-blocking, its url()s not.
// Without PlainBlocking the same document goes wholly to the shards.
func TestPlainBlocking(t *testing.T) {
	origins := []string{"https://192.0.2.12", "https://192.0.2.12:8443", "https://vip.example.net:8444"}
	in := `<link rel="Alternate StyleSheet" href="http://a.com/s.css"><script src="http://a.com/s.js"></script>` +
		`<script async src="http://a.com/a.js"></script><script defer src="http://a.com/d.js"></script>` +
		`<script type=" module" src="http://a.com/m.js"></script><link rel=preload as=style href="http://a.com/p.css">` +
		`<img src="http://a.com/x.png" style="background:url(http://a.com/bg.png)">`
	plain := `<link rel="Alternate StyleSheet" href="http://192.0.2.12/a.com/s.css"><script src="http://192.0.2.12/a.com/s.js"></script>` +
		`<script async src="https://192.0.2.12/a.com/a.js"></script><script defer src="https://192.0.2.12/a.com/d.js"></script>` +
		`<script type=" module" src="https://192.0.2.12/a.com/m.js"></script><link rel=preload as=style href="https://192.0.2.12/a.com/p.css">` +
		`<img src="https://192.0.2.12/a.com/x.png" style="background:url(https://192.0.2.12/a.com/bg.png)">`
	for _, c := range []struct {
		plainBlocking bool
		want          string
	}{{true, plain}, {false, strings.ReplaceAll(plain, "http://192.0.2.12/", "https://192.0.2.12/")}} {
		r, err := New("192.0.2.12", Config{Origins: origins, PlainBlocking: c.plainBlocking}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if _, err := r.HTML(&out, strings.NewReader(in), mustURL(t, "http://www.foo.com/")); err != nil {
			t.Fatal(err)
		}
		if out.String() != c.want {
			t.Errorf("PlainBlocking %v:\n got %s\nwant %s", c.plainBlocking, out.String(), c.want)
		}
		// A <style> element's @import (string or url() form) is a
		// render-blocking stylesheet; its url() backgrounds are not.
		out.Reset()
		style := `<style>@import "http://a.com/i.css"; @import url(http://a.com/j.css) print; b{background:url(http://a.com/b.png)}</style>`
		if _, err := r.HTML(&out, strings.NewReader(style), mustURL(t, "http://www.foo.com/")); err != nil {
			t.Fatal(err)
		}
		wantStyle := `<style>@import "http://192.0.2.12/a.com/i.css"; @import url(http://192.0.2.12/a.com/j.css) print; b{background:url(https://192.0.2.12/a.com/b.png)}</style>`
		if !c.plainBlocking {
			wantStyle = strings.ReplaceAll(wantStyle, "http://192.0.2.12/", "https://192.0.2.12/")
		}
		if out.String() != wantStyle {
			t.Errorf("PlainBlocking %v: style\n got %s\nwant %s", c.plainBlocking, out.String(), wantStyle)
		}
		out.Reset()
		if _, err := r.CSS(&out, strings.NewReader(`@font-face{src:url(/f.woff2)}`), mustURL(t, "http://a.com/s.css")); err != nil {
			t.Fatal(err)
		}
		if want := `@font-face{src:url(https://192.0.2.12/a.com/f.woff2)}`; out.String() != want {
			t.Errorf("PlainBlocking %v: CSS %s, want %s", c.plainBlocking, out.String(), want)
		}
	}
}

// TestOwnHostMax: a document naming at most OwnHostMax distinct URLs on
// its own host (scheme, host and port; relative, network-path or
// absolute, repeats counted once) keeps them as they are; one more, or
// the rule off, and every URL is rewritten. URLs on other hosts, and
// relative URLs that a <base href> sends elsewhere, are rewritten either
// way; a document with nothing else passes byte for byte. A style sheet
// fetched from its own host keeps its own-host URLs; one fetched from the
// VIP does not.
func TestOwnHostMax(t *testing.T) {
	own := `<link rel=stylesheet href="/s.css"><img src="a.png"><img src="a.png"><img src="//WWW.site.test/b.png">` +
		`<div style="background:url(http://www.site.test/c.png)"></div>`
	other := `<img src="http://img.cdn.test/x.png"><img src="http://www.site.test:8080/p.png">`
	rewritten := `<link rel=stylesheet href="http://192.0.2.12/www.site.test/s.css"><img src="http://192.0.2.12/www.site.test/dir/a.png">` +
		`<img src="http://192.0.2.12/www.site.test/dir/a.png"><img src="http://192.0.2.12/www.site.test/b.png">` +
		`<div style="background:url(http://192.0.2.12/www.site.test/c.png)"></div>`
	otherRewritten := `<img src="http://192.0.2.12/img.cdn.test/x.png"><img src="http://192.0.2.12/www.site.test:8080/p.png">`
	based := `<base href="http://cdn.test/d/"><img src="e.png">`
	for _, c := range []struct {
		name    string
		max     int
		in      string
		want    string
		kept    int
		rewrote int
	}{
		{"4 own URLs, max 4", 4, own + other, own + otherRewritten, 5, 2},
		{"4 own URLs, max 3", 3, own + other, rewritten + otherRewritten, 0, 7},
		{"rule off", 0, own + other, rewritten + otherRewritten, 0, 7},
		{"own URLs only", 6, own, own, 5, 0},
		{"base elsewhere", 6, own + based, own + `<base href="http://cdn.test/d/"><img src="http://192.0.2.12/cdn.test/d/e.png">`, 5, 1},
	} {
		got, st := htmlWith(t, Config{OwnHostMax: c.max}, c.in, "http://www.site.test/dir/page.html")
		if got != c.want || st.KeptOwn != c.kept || st.URLs != c.rewrote {
			t.Errorf("%s:\n got %s (kept %d, rewritten %d)\nwant %s (kept %d, rewritten %d)", c.name, got, st.KeptOwn, st.URLs, c.want, c.kept, c.rewrote)
		}
		// Response takes the same decision; with nothing else to rewrite
		// the body passes as it came.
		r, err := New("192.0.2.12", Config{OwnHostMax: c.max}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/html"}}, Body: io.NopCloser(strings.NewReader(c.in))}
		res := r.Response(resp, mustURL(t, "http://www.site.test/dir/page.html"), false)
		b, _ := io.ReadAll(resp.Body)
		if string(b) != c.want || (c.rewrote == 0) != (res.Reason == ReasonUnchanged) {
			t.Errorf("%s: Response %q (reason %q), want %q", c.name, b, res.Reason, c.want)
		}
	}
	// A style sheet the document kept on its own host (an intercepted
	// request) keeps its own-host images there too, however many it
	// names; the same sheet fetched from the VIP has every URL in VIP
	// form.
	r, err := New("192.0.2.12", Config{OwnHostMax: 1}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	css := `a{background:url(i/a.png)}b{background:url(http://www.site.test/b.png)}c{background:url(http://img.cdn.test/c.png)}`
	for _, c := range []struct {
		viaVIP bool
		want   string
	}{
		{false, `a{background:url(i/a.png)}b{background:url(http://www.site.test/b.png)}c{background:url(http://192.0.2.12/img.cdn.test/c.png)}`},
		{true, `a{background:url(http://192.0.2.12/www.site.test/s/i/a.png)}b{background:url(http://192.0.2.12/www.site.test/b.png)}c{background:url(http://192.0.2.12/img.cdn.test/c.png)}`},
	} {
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/css"}}, Body: io.NopCloser(strings.NewReader(css))}
		r.Response(resp, mustURL(t, "http://www.site.test/s/style.css"), c.viaVIP)
		if b, _ := io.ReadAll(resp.Body); string(b) != c.want {
			t.Errorf("style sheet, viaVIP %v:\n got %s\nwant %s", c.viaVIP, b, c.want)
		}
	}
}

// TestFirstImagesPlain: with PlainBlocking, the first FirstImagesPlain
// <img> elements (src and srcset) go under the plain http://VIP; later
// images, other elements' URLs and every image without PlainBlocking go
// to the https origins.
func TestFirstImagesPlain(t *testing.T) {
	origins := []string{"https://192.0.2.12"}
	in := `<img src="http://a.com/1.png" srcset="http://a.com/1x2.png 2x"><video poster="http://a.com/v.png"></video>` +
		`<img src="http://a.com/2.png"><img src="http://a.com/3.png">`
	for _, c := range []struct {
		plainBlocking bool
		n             int
		want          string
	}{
		{true, 2, `<img src="http://192.0.2.12/a.com/1.png" srcset="http://192.0.2.12/a.com/1x2.png 2x"><video poster="https://192.0.2.12/a.com/v.png"></video>` +
			`<img src="http://192.0.2.12/a.com/2.png"><img src="https://192.0.2.12/a.com/3.png">`},
		{true, 0, `<img src="https://192.0.2.12/a.com/1.png" srcset="https://192.0.2.12/a.com/1x2.png 2x"><video poster="https://192.0.2.12/a.com/v.png"></video>` +
			`<img src="https://192.0.2.12/a.com/2.png"><img src="https://192.0.2.12/a.com/3.png">`},
		{false, 2, `<img src="https://192.0.2.12/a.com/1.png" srcset="https://192.0.2.12/a.com/1x2.png 2x"><video poster="https://192.0.2.12/a.com/v.png"></video>` +
			`<img src="https://192.0.2.12/a.com/2.png"><img src="https://192.0.2.12/a.com/3.png">`},
	} {
		got, _ := htmlWith(t, Config{Origins: origins, PlainBlocking: c.plainBlocking, FirstImagesPlain: c.n}, in, "http://www.foo.com/")
		if got != c.want {
			t.Errorf("PlainBlocking %v, FirstImagesPlain %d:\n got %s\nwant %s", c.plainBlocking, c.n, got, c.want)
		}
	}
}

// htmlWith rewrites the HTML document in, at the URL doc, with a Rewriter
// of cfg for the VIP 192.0.2.12, and returns the output and its Stats.
func htmlWith(t *testing.T, cfg Config, in, doc string) (string, Stats) {
	t.Helper()
	r, err := New("192.0.2.12", cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	st, err := r.HTML(&out, strings.NewReader(in), mustURL(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), st
}
