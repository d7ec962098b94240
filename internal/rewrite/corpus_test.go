package rewrite

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// corpusPage is one HTML file of the tp5n page set.
type corpusPage struct {
	name string // path in the archive
	doc  string // the URL the page had: http://<host>/<path>
	body []byte
}

var (
	corpusOnce  sync.Once
	corpusPages []corpusPage
	corpusErr   error
	corpusPath  string
)

// tp5n returns every .html/.htm file of ../shared/corpus/tp5n.tar.gz (seen
// from the module root), read straight from the archive, or skips the test
// when the archive is absent.
func tp5n(tb testing.TB) []corpusPage {
	tb.Helper()
	corpusOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			corpusErr = err
			return
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				break
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				corpusErr = os.ErrNotExist
				return
			}
			dir = parent
		}
		corpusPath = filepath.Join(dir, "..", "shared", "corpus", "tp5n.tar.gz")
		f, err := os.Open(corpusPath)
		if err != nil {
			corpusErr = err
			return
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			corpusErr = err
			return
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				corpusErr = err
				return
			}
			lower := strings.ToLower(h.Name)
			if h.Typeflag != tar.TypeReg || !(strings.HasSuffix(lower, ".html") || strings.HasSuffix(lower, ".htm")) {
				continue
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				corpusErr = err
				return
			}
			// tp5n/<site>/<host>/<path>
			parts := strings.SplitN(h.Name, "/", 4)
			doc := ""
			if len(parts) == 4 {
				doc = "http://" + parts[2] + "/" + parts[3]
			}
			corpusPages = append(corpusPages, corpusPage{name: h.Name, doc: doc, body: b})
		}
	})
	if os.IsNotExist(corpusErr) {
		tb.Skipf("tp5n corpus not found (want ../shared/corpus/tp5n.tar.gz next to the repository): %v", corpusErr)
	}
	if corpusErr != nil {
		tb.Fatalf("reading %s: %v", corpusPath, corpusErr)
	}
	if len(corpusPages) == 0 {
		tb.Fatalf("%s holds no HTML files", corpusPath)
	}
	return corpusPages
}

// unrewrite takes the VIP prefix out of every VIP-form URL: "http://VIP/" becomes "http://".
func unrewrite(b []byte) []byte {
	return bytes.ReplaceAll(b, []byte("http://"+testVIP+"/"), []byte("http://"))
}

// asciiFoldEqual reports whether a and b are equal up to the case of ASCII letters.
func asciiFoldEqual(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x != y && !(isAlpha(x) && x|0x20 == y|0x20) {
			return false
		}
	}
	return true
}

// firstDiff shows where two documents part, for failure messages.
func firstDiff(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	lo := max(0, i-60)
	return fmt.Sprintf("at byte %d:\n got: %q\nwant: %q", i, a[lo:min(len(a), i+60)], b[lo:min(len(b), i+60)])
}

// TestCorpusIdentity: with no URL to rewrite, every tp5n HTML file comes out
// byte for byte as it went in (the tokenizer, the attribute scanner and the
// copy path lose nothing).
func TestCorpusIdentity(t *testing.T) {
	pages := tp5n(t)
	r := newTestRewriter(t, Config{})
	r.noURLs = true
	for _, p := range pages {
		var out bytes.Buffer
		st, err := r.HTML(&out, bytes.NewReader(p.body), mustURL(t, p.doc))
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		if !bytes.Equal(out.Bytes(), p.body) {
			t.Errorf("%s: output differs from input %s", p.name, firstDiff(out.Bytes(), p.body))
		}
		if st.URLs != 0 || st.PassedThrough {
			t.Errorf("%s: stats %+v, want none", p.name, st)
		}
	}
	t.Logf("%d HTML files from %s identical", len(pages), corpusPath)
}

// TestCorpusRewrite runs the real rewriter over every tp5n HTML file: it never
// errors; with absolute URLs only, taking the VIP prefix out gives the input
// back (up to the case of the scheme and host); with relative URLs too, every
// rewritten URL carries a host the proxy accepts.
func TestCorpusRewrite(t *testing.T) {
	pages := tp5n(t)
	abs := newTestRewriter(t, Config{})
	abs.absOnly = true
	full := newTestRewriter(t, Config{})
	vipPrefix := []byte("http://" + testVIP + "/")
	var totalAbs, totalFull, bytesIn int
	for _, p := range pages {
		doc := mustURL(t, p.doc)
		var out bytes.Buffer
		st, err := abs.HTML(&out, bytes.NewReader(p.body), doc)
		if err != nil {
			t.Fatalf("%s: absolute only: %v", p.name, err)
		}
		if !asciiFoldEqual(unrewrite(out.Bytes()), unrewrite(p.body)) {
			t.Errorf("%s: un-rewritten output differs from input %s", p.name, firstDiff(unrewrite(out.Bytes()), unrewrite(p.body)))
		}
		if got := bytes.Count(out.Bytes(), vipPrefix) - bytes.Count(p.body, vipPrefix); got != st.URLs {
			t.Errorf("%s: %d VIP-form URLs added, stats say %d", p.name, got, st.URLs)
		}
		totalAbs += st.URLs

		out.Reset()
		st, err = full.HTML(&out, bytes.NewReader(p.body), doc)
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		totalFull += st.URLs
		bytesIn += len(p.body)
		// Every VIP-form URL maps back to an origin URL.
		o := out.Bytes()
		for i := bytes.Index(o, vipPrefix); i >= 0; {
			rest := o[i+len(vipPrefix)-1:]
			end := bytes.IndexAny(rest, "\"' >)\n,")
			if end < 0 {
				end = len(rest)
			}
			target := string(rest[:end])
			if j := strings.IndexByte(target, '#'); j >= 0 {
				target = target[:j]
			}
			if _, err := ParseVIPPath(target); err != nil && !bytes.Contains(p.body, rest[:end]) {
				t.Errorf("%s: rewritten URL does not map back: %v", p.name, err)
			}
			o = o[i+len(vipPrefix):]
			i = bytes.Index(o, vipPrefix)
		}
	}
	t.Logf("%d files, %d bytes: %d absolute URLs, %d URLs in all rewritten", len(pages), bytesIn, totalAbs, totalFull)
}

// linkDense returns the n tp5n pages with the most rewritten URLs per KB.
func linkDense(tb testing.TB, n int) []corpusPage {
	pages := tp5n(tb)
	r, err := New(testVIP, Config{}, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	type scored struct {
		p       corpusPage
		density float64
	}
	var s []scored
	for _, p := range pages {
		if len(p.body) < 4<<10 {
			continue // tiny ad frames say little about throughput
		}
		st, err := r.HTML(io.Discard, bytes.NewReader(p.body), mustURL(tb, p.doc))
		if err != nil {
			tb.Fatal(err)
		}
		s = append(s, scored{p, float64(st.URLs) / (float64(len(p.body)) / 1024)})
	}
	sort.Slice(s, func(i, j int) bool { return s[i].density > s[j].density })
	var out []corpusPage
	for _, x := range s[:min(n, len(s))] {
		out = append(out, x.p)
	}
	return out
}
