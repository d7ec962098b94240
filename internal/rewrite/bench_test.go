package rewrite

import (
	"bytes"
	"compress/gzip"
	"golang.org/x/net/html"
	"io"
	"net/http"
	"net/url"
	"syscall"
	"testing"
	"time"
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
	cpu0 := cpuTime(b)
	for b.Loop() {
		for i, p := range pages {
			out.Reset()
			if _, err := r.HTML(&out, bytes.NewReader(p.body), docs[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	reportCPU(b, cpu0, total)
}

// cpuTime is the CPU time (user and system) the process has used so far,
// all threads, so garbage collection on other cores counts too.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds the metric "MB/cpu-s": input megabytes per CPU second, the
// throughput per core that a loaded machine's wall clock does not distort.
func reportCPU(b *testing.B, cpu0 time.Duration, perOp int) {
	cpu := cpuTime(b) - cpu0
	if cpu > 0 {
		b.ReportMetric(float64(perOp)*float64(b.N)/1e6/cpu.Seconds(), "MB/cpu-s")
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
	cpu0 := cpuTime(b)
	for b.Loop() {
		for _, p := range pages {
			if _, err := r.HTML(io.Discard, bytes.NewReader(p.body), nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	reportCPU(b, cpu0, total)
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
	cpu0 := cpuTime(b)
	for b.Loop() {
		for i := range pages {
			resp := &http.Response{StatusCode: 200, ContentLength: int64(len(enc[i])),
				Header: http.Header{"Content-Type": {"text/html"}, "Content-Encoding": {"gzip"}},
				Body:   io.NopCloser(bytes.NewReader(enc[i]))}
			if res := r.Response(resp, docs[i], false); !res.Rewritten {
				b.Fatalf("not rewritten: %+v", res)
			}
		}
	}
	reportCPU(b, cpu0, total)
}

// BenchmarkTokenizerCopy is the naive baseline on the same pages:
// golang.org/x/net/html's Tokenizer copying every token's Raw() and changing
// nothing. A rewriter built on it can only be slower.
func BenchmarkTokenizerCopy(b *testing.B) {
	pages := linkDense(b, 10)
	total := 0
	for _, p := range pages {
		total += len(p.body)
	}
	var out bytes.Buffer
	b.SetBytes(int64(total))
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	for b.Loop() {
		for _, p := range pages {
			out.Reset()
			z := html.NewTokenizer(bytes.NewReader(p.body))
			for z.Next() != html.ErrorToken {
				out.Write(z.Raw())
			}
		}
	}
	reportCPU(b, cpu0, total)
}
