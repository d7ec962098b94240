package rewrite

import (
	"bytes"
	"io"
	"net/url"
	"testing"
)

// BenchmarkRewriteLinkDense measures the HTML rewriter on the 10 tp5n pages
// with the most rewritten URLs per KB; MB/s is per core (b.SetBytes, one
// goroutine). Target (issue 2): at least 80 MB/s.
func BenchmarkRewriteLinkDense(b *testing.B) {
	pages := linkDense(b, 10)
	r, err := New(testVIP, Config{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	total := 0
	for _, p := range pages {
		total += len(p.body)
		b.Logf("%s\t%s\t%d bytes", p.name, p.doc, len(p.body))
	}
	docs := make([]*url.URL, len(pages))
	for i, p := range pages {
		docs[i] = mustURL(b, p.doc)
	}
	var out bytes.Buffer
	b.SetBytes(int64(total))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i, p := range pages {
			out.Reset()
			if _, err := r.HTML(&out, bytes.NewReader(p.body), docs[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkTokenizeOnly is the floor: x/net/html's tokenizer copying Raw()
// with no rewriting at all, on the same pages.
func BenchmarkTokenizeOnly(b *testing.B) {
	pages := linkDense(b, 10)
	r, err := New(testVIP, Config{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	r.noURLs = true
	total := 0
	for _, p := range pages {
		total += len(p.body)
	}
	b.SetBytes(int64(total))
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range pages {
			if _, err := r.HTML(io.Discard, bytes.NewReader(p.body), nil); err != nil {
				b.Fatal(err)
			}
		}
	}
}
