package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"pep/testbed/quality"
)

// cmdQuality runs the optimizer's image quality report (testbed/quality)
// and prints its Markdown tables; make optimize-quality calls it.
func cmdQuality(args []string) error {
	fs := flag.NewFlagSet("quality", flag.ExitOnError)
	corpora := fs.String("corpus", defaultQualityCorpora(), "corpora, comma-separated (default, a tp5n .tar.gz, WARC, ...)")
	qs := fs.String("q", "50,60,70,75,85", "WebP qualities to compare, comma-separated")
	out := fs.String("out", "testbed-out/quality", "folder for the image pairs, results.json and report.md")
	procs := fs.Int("procs", 2, "SSIM worker processes")
	fs.Parse(args)
	o := quality.Options{Corpora: splitList(*corpora), Work: *out, Procs: *procs, Progress: os.Stderr}
	for _, q := range splitList(*qs) {
		n, err := strconv.Atoi(q)
		if err != nil || n < 1 || n > 100 {
			return fmt.Errorf("quality: -q %q: want qualities 1-100", q)
		}
		o.Qualities = append(o.Qualities, n)
	}
	rep, err := quality.Run(context.Background(), o)
	if err != nil {
		return err
	}
	md := rep.Markdown()
	fmt.Print(md)
	return os.WriteFile(filepath.Join(*out, "report.md"), []byte(md), 0o644)
}

// defaultQualityCorpora is the default pages, and tp5n when the shared
// corpus is beside the repository.
func defaultQualityCorpora() string {
	c := []string{"default"}
	for _, p := range []string{"../shared/corpus/tp5n.tar.gz", "../../shared/corpus/tp5n.tar.gz"} {
		if _, err := os.Stat(p); err == nil {
			c = append(c, p)
			break
		}
	}
	return strings.Join(c, ",")
}
