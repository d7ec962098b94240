package rewrite

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
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

// BenchmarkScanOnly is the floor: the same pages scanned (tokens and
// attributes found, everything copied) with no URL rewritten.
func BenchmarkScanOnly(b *testing.B) {
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

// BenchmarkRewriteCorpus measures the HTML rewriter over every tp5n HTML file.
func BenchmarkRewriteCorpus(b *testing.B) {
	pages := tp5n(b)
	r, err := New(testVIP, Config{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	total := 0
	docs := make([]*url.URL, len(pages))
	for i, p := range pages {
		total += len(p.body)
		docs[i] = mustURL(b, p.doc)
	}
	b.SetBytes(int64(total))
	b.ReportAllocs()
	for b.Loop() {
		for i, p := range pages {
			if _, err := r.HTML(io.Discard, bytes.NewReader(p.body), docs[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkResponseGzip measures Response on the link-dense pages served
// gzip-encoded: buffer, gunzip, rewrite, gzip again at the default level.
// MB/s counts the decoded HTML.
func BenchmarkResponseGzip(b *testing.B) {
	pages := linkDense(b, 10)
	r, err := New(testVIP, Config{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	total := 0
	enc := make([][]byte, len(pages))
	docs := make([]*url.URL, len(pages))
	for i, p := range pages {
		total += len(p.body)
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		w.Write(p.body)
		w.Close()
		enc[i] = buf.Bytes()
		docs[i] = mustURL(b, p.doc)
	}
	b.SetBytes(int64(total))
	b.ReportAllocs()
	for b.Loop() {
		for i := range pages {
			resp := &http.Response{StatusCode: 200, ContentLength: int64(len(enc[i])),
				Header: http.Header{"Content-Type": {"text/html"}, "Content-Encoding": {"gzip"}},
				Body:   io.NopCloser(bytes.NewReader(enc[i]))}
			if res := r.Response(resp, docs[i]); !res.Rewritten {
				b.Fatalf("not rewritten: %+v", res)
			}
		}
	}
}
