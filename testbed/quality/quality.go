// Package quality is the image quality report of pepd's optimizer (issue
// 11, `make optimize-quality`): every distinct JPEG, PNG and GIF of the
// given corpora is transcoded with exactly pepd's transform
// (optimize.Image) at each quality, and the SSIM between the original and
// what a phone would get is computed by scikit-image (ssim.py, one Python
// process). The report gives, per quality, the images transformed and
// skipped (by reason), the bytes, and the SSIM median, 5th percentile and
// minimum, overall and per format; the default quality is the lowest-byte
// one whose median SSIM is at least MinMedian and 5th percentile at least
// MinP5.
package quality

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"pep/internal/optimize"
	"pep/testbed/corpus"
)

//go:embed ssim.py
var ssimPy []byte

// The acceptance thresholds of the default quality (issue 11).
const (
	MinMedian = 0.95
	MinP5     = 0.90
)

// Options configure Run.
type Options struct {
	// Corpora are corpus.Open specs ("default", a tp5n .tar.gz, ...).
	Corpora []string
	// Files are more image files or folders (walked) to include.
	Files []string
	// Qualities are the WebP qualities to compare, 1-100.
	Qualities []int
	// Work is the folder for the image pairs and results.json.
	Work string
	// Procs is the number of SSIM worker processes (0: 2).
	Procs int
	// Progress receives one line per stage; nil discards.
	Progress io.Writer
}

// Stats summarizes one quality (or one format at one quality).
type Stats struct {
	Quality int `json:"quality"`
	// Images is the distinct images considered; Transformed those pepd
	// would serve as WebP (the others pass untouched: Skipped by reason).
	Images, Transformed int
	Skipped             map[string]int `json:"skipped"`
	// BytesIn and BytesOut are the transformed images' bytes before and
	// after; ServedIn and ServedOut all images' bytes before and as
	// served (originals for the skipped ones).
	BytesIn, BytesOut, ServedIn, ServedOut int64
	// SSIM over the transformed images with an SSIM (NoSSIM: too small
	// or unreadable by Pillow).
	Median, P5, Min float64
	NoSSIM          int
}

// Report is Run's result.
type Report struct {
	Corpora   []string           `json:"corpora"`
	Qualities []Stats            `json:"qualities"`
	ByFormat  map[string][]Stats `json:"by_format"`
	// Default is the chosen quality (0: none meets the thresholds).
	Default int           `json:"default"`
	Elapsed time.Duration `json:"elapsed_ns"`
}

type img struct {
	body   []byte
	format string
	name   string
}

// Python is the interpreter with Debian's python3-skimage and python3-pil:
// /usr/bin/python3 (a pyenv or virtualenv python3 first on PATH would not
// see them), else python3 from PATH.
func Python() string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

// Run builds the report. Errors: a corpus that does not open, a folder
// that cannot be written, python3 or scikit-image missing (the error
// says which), a malformed answer of ssim.py.
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Procs <= 0 {
		o.Procs = 2
	}
	imgs, err := collect(o)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Progress, "quality: %d distinct images from %s\n", len(imgs), strings.Join(append(slices.Clone(o.Corpora), o.Files...), ", "))
	if err := os.MkdirAll(o.Work, 0o755); err != nil {
		return nil, err
	}
	script := filepath.Join(o.Work, "ssim.py")
	if err := os.WriteFile(script, ssimPy, 0o644); err != nil {
		return nil, err
	}
	origDir := filepath.Join(o.Work, "orig")
	os.MkdirAll(origDir, 0o755)
	origPath := make([]string, len(imgs))
	for i, im := range imgs {
		origPath[i] = filepath.Join(origDir, fmt.Sprintf("%05d.%s", i, im.format))
		if err := os.WriteFile(origPath[i], im.body, 0o644); err != nil {
			return nil, err
		}
	}
	rep := &Report{Corpora: o.Corpora, ByFormat: map[string][]Stats{}}
	for _, q := range o.Qualities {
		st, byFmt, err := runQuality(ctx, o, script, imgs, origPath, q)
		if err != nil {
			return nil, err
		}
		rep.Qualities = append(rep.Qualities, st)
		for f, s := range byFmt {
			rep.ByFormat[f] = append(rep.ByFormat[f], s)
		}
		fmt.Fprintf(o.Progress, "quality: q%d: %d transformed, %s -> %s bytes, SSIM median %.4f p5 %.4f (%s)\n",
			q, st.Transformed, human(st.BytesIn), human(st.BytesOut), st.Median, st.P5, time.Since(start).Round(time.Second))
	}
	best := -1
	for i, s := range rep.Qualities {
		if s.Median >= MinMedian && s.P5 >= MinP5 && (best < 0 || s.ServedOut < rep.Qualities[best].ServedOut) {
			best = i
		}
	}
	if best >= 0 {
		rep.Default = rep.Qualities[best].Quality
	}
	rep.Elapsed = time.Since(start)
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(filepath.Join(o.Work, "results.json"), b, 0o644); err != nil {
		return nil, err
	}
	return rep, nil
}

// collect returns the distinct (by SHA-256) images of the corpora and
// files, the format told by the bytes (optimize.Sniff), not the name.
func collect(o Options) ([]img, error) {
	seen := map[[32]byte]bool{}
	var out []img
	add := func(name string, b []byte) {
		f := optimize.Sniff(b)
		if f == "" {
			return
		}
		h := sha256.Sum256(b)
		if seen[h] {
			return
		}
		seen[h] = true
		out = append(out, img{body: b, format: f, name: name})
	}
	for _, spec := range o.Corpora {
		c, err := corpus.Open(spec)
		if err != nil {
			return nil, err
		}
		for _, p := range c.Pages {
			for _, ob := range p.Objects {
				add(ob.Host+ob.Path, ob.Body)
			}
		}
	}
	for _, f := range o.Files {
		err := filepath.WalkDir(f, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			add(p, b)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// runQuality transcodes every image at q and has ssim.py compare the
// transformed ones.
func runQuality(ctx context.Context, o Options, script string, imgs []img, origPath []string, q int) (Stats, map[string]Stats, error) {
	opts := optimize.DefaultImageOptions()
	opts.Quality = q
	dir := filepath.Join(o.Work, fmt.Sprintf("q%d", q))
	os.MkdirAll(dir, 0o755)
	all := Stats{Quality: q, Skipped: map[string]int{}}
	byFmt := map[string]*Stats{}
	var list bytes.Buffer
	outBytes := make([]int, len(imgs))
	for i, im := range imgs {
		res := optimize.Image(im.body, opts)
		fs := byFmt[im.format]
		if fs == nil {
			fs = &Stats{Quality: q, Skipped: map[string]int{}}
			byFmt[im.format] = fs
		}
		for _, s := range []*Stats{&all, fs} {
			s.Images++
			s.ServedIn += int64(len(im.body))
			s.ServedOut += int64(len(res.Body))
			if res.Skip != "" {
				s.Skipped[res.Skip]++
				continue
			}
			s.Transformed++
			s.BytesIn += int64(len(im.body))
			s.BytesOut += int64(len(res.Body))
		}
		if res.Skip != "" {
			continue
		}
		outBytes[i] = len(res.Body)
		wp := filepath.Join(dir, fmt.Sprintf("%05d.webp", i))
		if err := os.WriteFile(wp, res.Body, 0o644); err != nil {
			return all, nil, err
		}
		fmt.Fprintf(&list, "%d\t%s\t%s\n", i, origPath[i], wp)
	}
	cmd := exec.CommandContext(ctx, Python(), script, strconv.Itoa(o.Procs))
	cmd.Stdin = &list
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return all, nil, fmt.Errorf("quality: ssim.py (python3-skimage and python3-pil needed: make deps): %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var vals []float64
	fvals := map[string][]float64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		i, err := strconv.Atoi(f[0])
		if err != nil || i < 0 || i >= len(imgs) || len(f) < 2 {
			return all, nil, fmt.Errorf("quality: ssim.py said %q", sc.Text())
		}
		format := imgs[i].format
		if f[1] == "skip" {
			all.NoSSIM++
			byFmt[format].NoSSIM++
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return all, nil, fmt.Errorf("quality: ssim.py said %q", sc.Text())
		}
		vals = append(vals, v)
		fvals[format] = append(fvals[format], v)
	}
	all.Median, all.P5, all.Min = dist(vals)
	res := map[string]Stats{}
	for f, s := range byFmt {
		s.Median, s.P5, s.Min = dist(fvals[f])
		res[f] = *s
	}
	return all, res, nil
}

// dist returns the median, 5th percentile (nearest rank) and minimum.
func dist(v []float64) (med, p5, lowest float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	sort.Float64s(v)
	rank := func(p float64) float64 {
		i := int(p*float64(len(v))+0.5) - 1
		return v[max(0, min(i, len(v)-1))]
	}
	return rank(0.5), rank(0.05), v[0]
}

func human(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// Markdown renders the report's tables.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Corpora: %s; %d distinct images; SSIM by scikit-image (RGB over white); took %s.\n\n",
		strings.Join(r.Corpora, ", "), r.Qualities[0].Images, r.Elapsed.Round(time.Second))
	b.WriteString("| quality | transformed | skipped | image bytes as served | transformed: in -> out | SSIM median | SSIM p5 | SSIM min |\n|---:|---:|---|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Qualities {
		mark := ""
		if s.Quality == r.Default {
			mark = " **(default)**"
		}
		fmt.Fprintf(&b, "| %d%s | %d of %d | %s | %s -> %s (%.0f %%) | %s -> %s (%.0f %%) | %.4f | %.4f | %.4f |\n",
			s.Quality, mark, s.Transformed, s.Images, skipList(s.Skipped), human(s.ServedIn), human(s.ServedOut),
			pct(s.ServedOut, s.ServedIn), human(s.BytesIn), human(s.BytesOut), pct(s.BytesOut, s.BytesIn), s.Median, s.P5, s.Min)
	}
	b.WriteString("\nBy format:\n\n| format | quality | transformed | bytes in -> out | SSIM median | p5 | min |\n|---|---:|---:|---:|---:|---:|---:|\n")
	fmts := make([]string, 0, len(r.ByFormat))
	for f := range r.ByFormat {
		fmts = append(fmts, f)
	}
	sort.Strings(fmts)
	for _, f := range fmts {
		for _, s := range r.ByFormat[f] {
			fmt.Fprintf(&b, "| %s | %d | %d of %d | %s -> %s (%.0f %%) | %.4f | %.4f | %.4f |\n", f, s.Quality, s.Transformed, s.Images,
				human(s.BytesIn), human(s.BytesOut), pct(s.BytesOut, s.BytesIn), s.Median, s.P5, s.Min)
		}
	}
	if r.Default > 0 {
		fmt.Fprintf(&b, "\nDefault: quality %d, the lowest-byte setting with median SSIM >= %.2f and 5th percentile >= %.2f.\n", r.Default, MinMedian, MinP5)
	} else {
		fmt.Fprintf(&b, "\nNo quality tried meets median SSIM >= %.2f and 5th percentile >= %.2f.\n", MinMedian, MinP5)
	}
	return b.String()
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func skipList(m map[string]int) string {
	var ks []string
	for k, v := range m {
		ks = append(ks, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}
