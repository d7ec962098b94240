package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"pep/testbed/quality"
)

// cmdQuality runs the optimizer's image quality report (testbed/quality):
// it prints the Markdown tables and writes them to OUT/report.md beside
// OUT/results.json and OUT/images.tsv; make optimize-quality calls it.
func cmdQuality(args []string) error {
	fs := flag.NewFlagSet("testbed quality", flag.ExitOnError)
	corpora := fs.String("corpus", defaultQualityCorpora(), `corpora, comma-separated: "default", a tp5n .tar.gz or folder, a WARC, ... (by default tp5n too when ../shared/corpus/tp5n.tar.gz is beside the repository)`)
	files := fs.String("files", "", "more image files or folders, comma-separated")
	qs := fs.String("q", "0,75", "rules to compare, comma-separated: 0 is pepd's per-image SSIM target (optimize.ssim_target), 1-100 the fixed rule at that WebP quality (JPEG lossy, PNG and GIF lossless)")
	rules := fs.String("rules", "", `more rules after -q's, comma-separated: tTARGET[/fFLOOR][/rREFINE][/avif], e.g. "t0.93/f0,t0.95/f0.90/r2/avif" (the SSIM target 0.93 without a tile floor; 0.95 with floor 0.90, 2 refining encodes and AVIF served where smaller); the floor defaults to optimize.DefaultTileFloor, refine to optimize.DefaultRefine`)
	sample := fs.Int("sample", 0, "measure this many distinct images drawn at random (0: all)")
	seed := fs.Uint64("seed", 1, "the random sample's seed")
	searchSSIM := fs.Bool("search-ssim", false, "skip scikit-image: report the SSIM the search measured itself (fast; fixed rules unmeasured)")
	out := fs.String("out", "testbed-out/quality", "folder for the image pairs, results.json, images.tsv and report.md")
	procs := fs.Int("procs", 2, "transcoding goroutines and SSIM worker processes")
	fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("quality: unexpected arguments %q", fs.Args())
	}
	o := quality.Options{Corpora: splitList(*corpora), Files: splitList(*files), Work: *out, Procs: *procs, Progress: os.Stderr, Sample: *sample, Seed: *seed, SearchSSIM: *searchSSIM}
	for _, r := range splitList(*rules) {
		rule, err := quality.ParseRule(r)
		if err != nil {
			return err
		}
		o.Rules = append(o.Rules, rule)
	}
	for _, q := range splitList(*qs) {
		n, err := strconv.Atoi(q)
		if err != nil || n < 0 || n > 100 {
			return fmt.Errorf("quality: -q %q: want 0 (the SSIM target) or qualities 1-100", q)
		}
		o.Qualities = append(o.Qualities, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := quality.Run(ctx, o)
	if err != nil {
		return err
	}
	md := rep.Markdown()
	fmt.Print(md)
	return os.WriteFile(filepath.Join(*out, "report.md"), []byte(md), 0o644)
}

// defaultQualityCorpora is "default", plus the shared tp5n tarball when
// it is at ../shared/corpus/tp5n.tar.gz relative to the repository (found
// upward from the working directory, else as the parent of this program's
// folder, bin/).
func defaultQualityCorpora() string {
	c := []string{"default"}
	if root := repoRoot(); root != "" {
		p := filepath.Join(root, "..", "shared", "corpus", "tp5n.tar.gz")
		if _, err := os.Stat(p); err == nil {
			c = append(c, filepath.Clean(p))
		}
	}
	return strings.Join(c, ",")
}

// repoRoot returns the folder holding the go.mod of module pep, or "".
func repoRoot() string {
	isRoot := func(dir string) bool {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		return err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), "module pep\n")
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if isRoot(d) {
				return d
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			if d := filepath.Dir(filepath.Dir(exe)); isRoot(d) {
				return d
			}
		}
	}
	return ""
}
