package optimize

import (
	"bytes"
	"compress/gzip"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
)

// benchFiles returns the default pages' real images (or text files) and
// the test images: what the optimizer meets on the paper's pages.
func benchFiles(b *testing.B, text bool) (names []string, bodies [][]byte) {
	roots := []string{"../../testbed/corpus/default/site"}
	if !text {
		roots = append(roots, "testdata")
	}
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			body, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			ext := strings.ToLower(filepath.Ext(p))
			isText := ext == ".html" || ext == ".css" || ext == ".js"
			if text != isText || !text && Sniff(body) == "" || strings.Contains(p, "bomb") {
				return nil
			}
			names = append(names, p)
			bodies = append(bodies, body)
			return nil
		})
	}
	if len(names) == 0 {
		b.Skip("no files")
	}
	return names, bodies
}

// BenchmarkTranscode is the image transform's throughput on one core
// (GOMAXPROCS 1, one libvips thread) over the default pages' images, and
// cwebp's (libwebp's command-line encoder, -q 75 -mt off, the same files
// from disk, a process per image as a batch job would run it) in the same
// run: input MB/s and images/s.
//
//	go test -run '^$' -bench Transcode -benchtime 5x ./internal/optimize/
func BenchmarkTranscode(b *testing.B) {
	names, bodies := benchFiles(b, false)
	var total int64
	for _, body := range bodies {
		total += int64(len(body))
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	o := DefaultImageOptions()
	b.Run("pepd", func(b *testing.B) {
		b.SetBytes(total)
		start := time.Now()
		for b.Loop() {
			for _, body := range bodies {
				Image(body, o)
			}
		}
		b.ReportMetric(float64(b.N*len(bodies))/time.Since(start).Seconds(), "images/s")
	})
	b.Run("cwebp", func(b *testing.B) {
		if _, err := exec.LookPath("cwebp"); err != nil {
			b.Skip("cwebp not installed (apt-get install -y webp)")
		}
		out := filepath.Join(b.TempDir(), "out.webp")
		// cwebp reads JPEG and PNG; GIFs are gif2webp's and left out of
		// both its bytes and its images.
		var files []string
		var bytes int64
		for i, n := range names {
			// cwebp cannot read CMYK JPEG nor the corrupt files: only
			// what it encodes counts for it.
			if Sniff(bodies[i]) != "gif" && exec.Command("cwebp", "-quiet", "-q", "75", n, "-o", out).Run() == nil {
				files = append(files, n)
				bytes += int64(len(bodies[i]))
			}
		}
		b.SetBytes(bytes)
		start := time.Now()
		for b.Loop() {
			for _, n := range files {
				if err := exec.Command("cwebp", "-quiet", "-q", "75", "-metadata", "none", n, "-o", out).Run(); err != nil {
					b.Fatalf("cwebp %s: %v", n, err)
				}
			}
		}
		b.ReportMetric(float64(b.N*len(files))/time.Since(start).Seconds(), "images/s")
	})
}

// BenchmarkText is the text transform's throughput on one core over the
// default pages' HTML, CSS and JavaScript, each gzipped at level 1 as a
// stock nginx sends it, then re-encoded (Text) as gzip at GzipLevel and as
// brotli at DefaultBrotliQuality: MB/s of decoded input, and ratio, the
// output against the level-1 gzip.
//
//	go test -run '^$' -bench Text -benchtime 5x ./internal/optimize/
func BenchmarkText(b *testing.B) {
	_, plain := benchFiles(b, true)
	var bodies [][]byte
	var total, sent int64
	for _, p := range plain {
		var buf bytes.Buffer
		w, _ := gzip.NewWriterLevel(&buf, 1)
		w.Write(p)
		w.Close()
		bodies = append(bodies, buf.Bytes())
		total += int64(len(p))
		sent += int64(buf.Len())
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, coding := range []string{CodingGzip, CodingBrotli} {
		b.Run(coding, func(b *testing.B) {
			b.SetBytes(total)
			var out int64
			for b.Loop() {
				out = 0
				for i, body := range bodies {
					t, skip := Text(body, CodingGzip, coding, DefaultBrotliQuality, 8<<20)
					if skip != "" {
						t = bodies[i]
					}
					out += int64(len(t))
				}
			}
			b.ReportMetric(float64(out)/float64(sent), "ratio")
		})
	}
}

// BenchmarkTranscodeLatency is the time of one image transform on one
// core over the default pages' images, as percentiles (p50-ms, p90-ms,
// p99-ms, max-ms): what optimize.deadline is chosen against (a transform
// slower than the deadline is finished behind the response).
//
//	go test -run '^$' -bench TranscodeLatency -benchtime 3x ./internal/optimize/
func BenchmarkTranscodeLatency(b *testing.B) {
	_, bodies := benchFiles(b, false)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	o := DefaultImageOptions()
	var ms []float64
	for range b.N {
		for _, body := range bodies {
			start := time.Now()
			Image(body, o)
			ms = append(ms, float64(time.Since(start).Microseconds())/1000)
		}
	}
	sort.Float64s(ms)
	at := func(q float64) float64 { return ms[int(q*float64(len(ms)-1))] }
	b.ReportMetric(at(0.5), "p50-ms")
	b.ReportMetric(at(0.9), "p90-ms")
	b.ReportMetric(at(0.99), "p99-ms")
	b.ReportMetric(ms[len(ms)-1], "max-ms")
}
