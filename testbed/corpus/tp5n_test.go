package corpus

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// tp5nPath finds shared/corpus/tp5n.tar.gz beside the repository (CI puts
// shared/ next to the clone: ../shared from its root) or at $PEP_TP5N.
func tp5nPath(t testing.TB) string {
	t.Helper()
	for _, p := range []string{os.Getenv("PEP_TP5N"), "../../../shared/corpus/tp5n.tar.gz"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("tp5n.tar.gz not found (set PEP_TP5N or put shared/ beside the repository)")
	return ""
}

var (
	tp5nOnce sync.Once
	tp5nC    *Corpus
	tp5nErr  error
)

func loadTP5N(t testing.TB) *Corpus {
	t.Helper()
	p := tp5nPath(t)
	tp5nOnce.Do(func() { tp5nC, tp5nErr = Open(p) })
	if tp5nErr != nil {
		t.Fatal(tp5nErr)
	}
	return tp5nC
}

func TestTP5NTarballCounts(t *testing.T) {
	c := loadTP5N(t)
	if got := len(c.Pages); got != 100 {
		t.Errorf("pages = %d, want 100", got)
	}
	if got := len(c.Hosts()); got != 723 {
		t.Errorf("hosts = %d, want 723", got)
	}
	// 11,808 tar members = manifest + 2 .DS_Store + 11,805 files, of which 8
	// site-level files collide with a name on the page's host.
	if c.Stats.Files != 11797 || c.Stats.Skipped != 10 {
		t.Errorf("files, skipped = %d, %d, want 11797, 10", c.Stats.Files, c.Stats.Skipped)
	}
	if c.Stats.Rewritten < 11000 {
		t.Errorf("rewritten references = %d, want at least 11000", c.Stats.Rewritten)
	}
	var objs []int
	for _, p := range c.Pages {
		objs = append(objs, len(p.Objects))
	}
	sort.Ints(objs)
	if med := objs[len(objs)/2]; med < 95 || med > 115 {
		t.Errorf("median objects per page = %d, README says about 105", med)
	}
}

func TestTP5NPages(t *testing.T) {
	c := loadTP5N(t)
	for _, tc := range []struct {
		name string
		want Summary
	}{
		{"cnn.com", Summary{Name: "cnn.com", URL: "http://www.cnn.com/index.html", Objects: 185, Hosts: 9, Bytes: 1701684}},
		{"baidu.com", Summary{Name: "baidu.com", URL: "http://www.baidu.com/s@wd=mozilla.html", Objects: 9, Hosts: 3, Bytes: 65242}},
		{"linkedin.com", Summary{Name: "linkedin.com", URL: "http://www.linkedin.com/in/christopherblizzard@goback=.nppvan_%252Flemuelf.html"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := c.Page(tc.name)
			if !ok {
				t.Fatalf("no page %q", tc.name)
			}
			got := p.Summary()
			if tc.want.Objects == 0 { // only the URL is pinned
				got = Summary{Name: got.Name, URL: got.URL}
			}
			if got != tc.want {
				t.Errorf("summary = %+v, want %+v", got, tc.want)
			}
			if p.Objects[0].Host != p.Host {
				t.Errorf("first object on %q, want the top-level host %q", p.Objects[0].Host, p.Host)
			}
		})
	}
}

func TestTP5NQuirks(t *testing.T) {
	c := loadTP5N(t)
	for _, tc := range []struct {
		name, host, target string
		wantPath           string // "" means 404
		wantType           string
		contains, absent   string
	}{
		{name: "@ path served literally", host: "www.baidu.com", target: "/s@wd=mozilla.html",
			wantPath: "/s@wd=mozilla.html", wantType: "text/html"},
		{name: "real query maps to @ file", host: "www.baidu.com", target: "/s?wd=mozilla",
			wantPath: "/s@wd=mozilla.html", wantType: "text/html"},
		{name: "wget-appended .css", host: "i.cdn.turner.com", target: "/cnn/.element/css/3.0/main.css?20110211",
			wantPath: "/cnn/.element/css/3.0/main.css@20110211.css", wantType: "text/css"},
		{name: "type from name before @", host: "i.cdn.turner.com", target: "/cnn/.element/js/3.0/video/cvp_suppl.js@id=20100816",
			wantPath: "/cnn/.element/js/3.0/video/cvp_suppl.js@id=20100816", wantType: "application/javascript"},
		{name: "percent in file name", host: "www.linkedin.com", target: "/in/christopherblizzard@goback=.nppvan_%252Flemuelf.html",
			wantPath: "/in/christopherblizzard@goback=.nppvan_%2Flemuelf.html", wantType: "text/html"},
		{name: "relative cross-host reference made absolute in HTML", host: "www.cnn.com", target: "/index.html",
			wantPath: "/index.html", wantType: "text/html",
			contains: `href="http://i.cdn.turner.com/cnn/.element/css/3.0/common.css"`,
			absent:   `"../i.cdn.turner.com/`},
		{name: "httpdisabled left alone", host: "www.cnn.com", target: "/index.html",
			wantPath: "/index.html", wantType: "text/html",
			contains: `href="httpdisabled://i.cdn.turner.com/cnn/.element/img/3.0/global/misc/apple-touch-icon.png"`},
		{name: "reference in an inline script string", host: "www.cnn.com", target: "/index.html",
			wantPath: "/index.html", wantType: "text/html",
			contains: `<img src="http://i.cdn.turner.com/cnn/.element/img/3.0/main/CNN_iPad_banner_980x50_120910.png"`},
		{name: "@import in a style element", host: "www.cnet.com", target: "/index.html",
			wantPath: "/index.html", wantType: "text/html",
			contains: `@import "http://i.i.com.com/cnwk.1d/Ads/common/css/DynamicShowcase/dynamicShowcase.css";`},
		{name: "url() in a style sheet", host: "static.cheezburger.com", target: "/style/shared.css?v=2011.04.06.1",
			wantPath: "/style/shared.css@v=2011.04.06.1.css", wantType: "text/css",
			contains: `url(http://i.chzbgr.com/Images/success-tacocat.png`},
		{name: "site-level file served on the page host", host: "icanhascheezburger.com", target: "/bSOHtKbCGYI.png",
			wantPath: "/bSOHtKbCGYI.png", wantType: "image/png"},
		{name: "missing favicon is 404", host: "www.cnn.com", target: "/favicon.ico"},
		{name: "unknown host is 404", host: "www.example.org", target: "/index.html"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, ok := c.Lookup(tc.host, tc.target)
			if tc.wantPath == "" {
				if ok {
					t.Fatalf("Lookup(%q, %q) found %q, want a miss", tc.host, tc.target, o.Path)
				}
				return
			}
			if !ok {
				t.Fatalf("Lookup(%q, %q) missed", tc.host, tc.target)
			}
			if o.Path != tc.wantPath || o.ContentType != tc.wantType {
				t.Errorf("got %q %q, want %q %q", o.Path, o.ContentType, tc.wantPath, tc.wantType)
			}
			if tc.contains != "" && !bytes.Contains(o.Body, []byte(tc.contains)) {
				t.Errorf("body lacks %q", tc.contains)
			}
			if tc.absent != "" && bytes.Contains(o.Body, []byte(tc.absent)) {
				t.Errorf("body still has %q", tc.absent)
			}
		})
	}
}

func TestTP5NSelect(t *testing.T) {
	c := loadTP5N(t)
	for _, tc := range []struct {
		spec  string
		names []string
		err   string
	}{
		{spec: "2", names: []string{"thesartorialist.blogspot.com", "cakewrecks.blogspot.com"}},
		{spec: "cnn.com, baidu.com", names: []string{"cnn.com", "baidu.com"}},
		{spec: "http://www.cnn.com/index.html", names: []string{"cnn.com"}},
		{spec: "0", err: `corpus: page count "0" must be positive`},
		{spec: "nosuch.example", err: `corpus: no page "nosuch.example" in `},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			s, err := c.SelectSpec(tc.spec)
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
					t.Fatalf("err = %v, want prefix %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range s.Pages {
				names = append(names, p.Name)
			}
			if strings.Join(names, ",") != strings.Join(tc.names, ",") {
				t.Errorf("pages = %v, want %v", names, tc.names)
			}
		})
	}
	s, _ := c.SelectSpec("cnn.com")
	if got := len(s.Hosts()); got != 9 {
		t.Errorf("cnn.com alone has %d hosts, want 9", got)
	}
	if _, ok := s.Lookup("www.baidu.com", "/s@wd=mozilla.html"); ok {
		t.Error("a selection serves objects of unselected pages")
	}
}

// TestTP5NDirectory imports a small extracted tp5n layout with every quirk.
func TestTP5NDirectory(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"tp5n/tp5n.manifest": "# comment\n" + TP5NManifestPrefix + "news.example/www.news.example/index.html\n" +
			TP5NManifestPrefix + "search.example/www.search.example/s@q=a%2520b.html\n",
		"tp5n/news.example/www.news.example/index.html": `<html><head><link rel="stylesheet" href="../cdn.news.example/s/site.css@v=2.css">` +
			`<a href="httpdisabled://www.news.example/more">more</a></head>` +
			`<body><img src="../img.news.example/a.png"><img src="logo.gif"><img src='../../outside.png'></body></html>`,
		"tp5n/news.example/cdn.news.example/s/site.css@v=2.css": `body{background:url("../../img.news.example/bg.gif")}` +
			`.x{background:url(../k.png)}`,
		"tp5n/news.example/img.news.example/a.png":              "\x89PNG\r\n\x1a\n....",
		"tp5n/news.example/img.news.example/bg.gif":             "GIF89a....",
		"tp5n/news.example/www.news.example/logo.gif":           "GIF89a....",
		"tp5n/news.example/.DS_Store":                           "junk",
		"tp5n/search.example/www.search.example/s@q=a%20b.html": "<p>results</p>",
		"tp5n/unlisted.example/www.unlisted.example/x.html":     "<p>x</p>",
	}
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pages) != 2 || c.Pages[0].URL != "http://www.news.example/index.html" || c.Pages[1].URL != "http://www.search.example/s@q=a%2520b.html" {
		t.Fatalf("pages = %v %v", c.Pages[0].URL, c.Pages[1].URL)
	}
	if got := strings.Join(c.Pages[0].Hosts(), " "); got != "cdn.news.example img.news.example www.news.example" {
		t.Errorf("hosts = %q", got)
	}
	if c.Stats.Rewritten != 3 || c.Stats.Skipped != 2 {
		t.Errorf("stats = %+v, want 3 rewritten, 2 skipped", c.Stats)
	}
	page, _ := c.Lookup("www.news.example", "/")
	wantHTML := `<html><head><link rel="stylesheet" href="http://cdn.news.example/s/site.css@v=2.css">` +
		`<a href="httpdisabled://www.news.example/more">more</a></head>` +
		`<body><img src="http://img.news.example/a.png"><img src="logo.gif"><img src='../../outside.png'></body></html>`
	if page == nil || string(page.Body) != wantHTML {
		t.Errorf("page body =\n%s\nwant\n%s", page.Body, wantHTML)
	}
	css, _ := c.Lookup("cdn.news.example", "/s/site.css?v=2")
	wantCSS := `body{background:url("http://img.news.example/bg.gif")}.x{background:url(../k.png)}`
	if css == nil || string(css.Body) != wantCSS || css.ContentType != "text/css" {
		t.Errorf("css = %+v, want body %s", css, wantCSS)
	}
	if o, ok := c.Lookup("www.search.example", "/s@q=a%2520b.html"); !ok || string(o.Body) != "<p>results</p>" {
		t.Errorf("escaped @ page not found")
	}
	if _, err := LoadTP5NDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no tp5n.manifest") {
		t.Errorf("empty dir err = %v", err)
	}
}

func TestBuildTP5NErrors(t *testing.T) {
	files := map[string][]byte{"a.example/www.a.example/index.html": []byte("<p>")}
	for _, tc := range []struct{ name, manifest, err string }{
		{"not a tp5n URL", "http://www.a.example/index.html\n",
			`corpus: src: tp5n.manifest:1: "http://www.a.example/index.html" is not http://localhost/page_load_test/tp5n/<site>/<host>/<path>`},
		{"missing page file", "\n" + TP5NManifestPrefix + "a.example/www.a.example/other.html\n",
			`corpus: src: tp5n.manifest:2: page file "a.example/www.a.example/other.html" is missing`},
		{"site twice", TP5NManifestPrefix + "a.example/www.a.example/index.html\n" + TP5NManifestPrefix + "a.example/www.a.example/index.html\n",
			`corpus: src: tp5n.manifest:2: site "a.example" listed twice`},
		{"empty", "# nothing\n", `corpus: src: tp5n.manifest lists no pages`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := BuildTP5N("src", []byte(tc.manifest), files)
			if err == nil || err.Error() != tc.err {
				t.Errorf("err = %v\nwant %s", err, tc.err)
			}
		})
	}
}

func BenchmarkTP5NTarball(b *testing.B) {
	p := tp5nPath(b)
	for b.Loop() {
		if _, err := LoadTP5NTarball(p); err != nil {
			b.Fatal(err)
		}
	}
}
