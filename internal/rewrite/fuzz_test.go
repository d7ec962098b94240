package rewrite

import (
	"bytes"
	"net/url"
	"testing"
)

var fuzzSeeds = []string{
	`<img src="http://i.cnn.net/images/plane.jpg">`,
	`<IMG SRC=HTTP://A.COM:8080/x?y#z srcset="http://b.com/1.png 1x,http://c.com/2.png 2x">`,
	`<link rel="stylesheet icon" href=http://a.com/s.css><script src='http://a.com/x.js'></script>`,
	`<div style="background:url(http://a.com/b.png)"><style>@import "http://a.com/i.css"; a{b:url( 'http://a.com/x' )}</style>`,
	`<base href="http://cdn.com/b/"><img src="a.png"><img src="../../x.png"><img src="//c.com/y">`,
	`<video src="http://a.com/v" poster=p.jpg><source src=s.webm><track src=t.vtt></video><object data=o.swf></object><embed src=e>`,
	`<input type=image src="http://a.com/go.gif"><a href="http://a.com/">x</a><iframe src="http://a.com/f"></iframe>`,
	`<img src="http://192.0.2.12/a.com/x"><img src="https://a.com/x"><img src="data:,x"><img src="httpdisabled://a.com/x">`,
	`<img src="http://a.com/x?a=1&amp;b=2"><img src="&#104;ttp://a.com/"><img src="http://a&#46;com/">`,
	"<img src=\"http://a.com/\x00\"><!-- <img src=http://a.com/c> --><textarea><img src=http://a.com/t>",
	`<img src="http://a.com/../x"><img src="http:\\a.com"><img src="http://u@a.com/">`,
}

// FuzzHTML: no input makes the rewriter panic or fail, and with absolute URLs
// only, taking the VIP prefix out of the output gives the input back.
//
// The property, exactly: with Rewriter.absOnly set, let strip(b) replace
// every "http://VIP/" in b with "http://". Then strip(out) and strip(in) are
// equal up to the case of ASCII letters (the rewriter lowercases the scheme
// and host of what it rewrites and changes no other byte), and out holds
// exactly Stats.URLs more "http://VIP/" than in. Relative URLs become
// absolute VIP-form URLs, which no prefix removal can turn back into the
// relative text; for them (the rewriter's full mode) the property is: no
// panic, no error, and at least Stats.URLs more "http://VIP/" in out than in.
func FuzzHTML(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	abs, err := New(testVIP, Config{MaxTokenBytes: 4096}, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	abs.absOnly = true
	full, err := New(testVIP, Config{MaxTokenBytes: 4096}, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	doc, _ := url.Parse("http://www.foo.com/dir/page.html")
	vipPrefix := []byte("http://" + testVIP + "/")
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		st, err := abs.HTML(&out, bytes.NewReader(in), doc)
		if err != nil {
			t.Fatal(err)
		}
		if !asciiFoldEqual(unrewrite(out.Bytes()), unrewrite(in)) {
			t.Fatalf("un-rewritten output differs from input %s", firstDiff(unrewrite(out.Bytes()), unrewrite(in)))
		}
		if got := bytes.Count(out.Bytes(), vipPrefix) - bytes.Count(in, vipPrefix); got != st.URLs {
			t.Fatalf("%d VIP-form URLs added, stats say %d", got, st.URLs)
		}
		out.Reset()
		st, err = full.HTML(&out, bytes.NewReader(in), doc)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Count(out.Bytes(), vipPrefix) - bytes.Count(in, vipPrefix); got < st.URLs {
			t.Fatalf("%d VIP-form URLs added, stats say %d", got, st.URLs)
		}
	})
}

// FuzzCSS: the same property for style sheets.
func FuzzCSS(f *testing.F) {
	for _, s := range []string{
		`a{b:url(http://a.com/x.png)} @import "http://a.com/i.css"; @import url('http://b.com/j.css');`,
		`/* url(http://a.com/c) */ a:after{content:"url(http://a.com/s)"} x{y:URL( "HTTP://A.com/" )}`,
		`a{b:url(x.png)} c{d:url(../y.png)} e{f:url(//g.com/h)}`,
	} {
		f.Add([]byte(s))
	}
	abs, err := New(testVIP, Config{}, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	abs.absOnly = true
	full, err := New(testVIP, Config{}, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	doc, _ := url.Parse("http://st.foo.com/css/main.css")
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		st, err := abs.CSS(&out, bytes.NewReader(in), doc)
		if err != nil {
			t.Fatal(err)
		}
		if !asciiFoldEqual(unrewrite(out.Bytes()), unrewrite(in)) {
			t.Fatalf("un-rewritten output differs from input %s", firstDiff(unrewrite(out.Bytes()), unrewrite(in)))
		}
		vipPrefix := []byte("http://" + testVIP + "/")
		if got := bytes.Count(out.Bytes(), vipPrefix) - bytes.Count(in, vipPrefix); got != st.URLs {
			t.Fatalf("%d VIP-form URLs added, stats say %d", got, st.URLs)
		}
		out.Reset()
		if _, err := full.CSS(&out, bytes.NewReader(in), doc); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzParseVIPPath: no panic, and an accepted path's origin URL goes back to
// the same VIP path (up to host case and port zeros) through VIPURL.
func FuzzParseVIPPath(f *testing.F) {
	for _, s := range []string{"/a.com/x?y", "/", "/%zz/", "/host:99999/", "/[::1]:8/x", "/a.com", "/u@h/"} {
		f.Add(s)
	}
	r, err := New(testVIP, Config{}, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, target string) {
		u, err := ParseVIPPath(target)
		if err != nil {
			return
		}
		v, ok := r.VIPURL(u)
		if !ok {
			if u.Hostname() == testVIP {
				return // the VIP itself: the proxy refuses it
			}
			t.Fatalf("VIPURL refuses %v from %q", u, target)
		}
		u2, err := ParseVIPPath(v[len("http://"+testVIP):])
		if err != nil || u2.String() != u.String() {
			t.Fatalf("%q -> %v -> %q -> %v, %v", target, u, v, u2, err)
		}
	})
}
