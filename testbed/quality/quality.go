// Package quality is the image quality report of pepd's optimizer (issue
// 11, `make optimize-quality`): every distinct JPEG, PNG and GIF of the
// given corpora is transcoded with exactly pepd's transform
// (optimize.Image) at each quality, and the SSIM between the original and
// the WebP a phone would get is computed by scikit-image (ssim.py, one
// Python process for the whole run). The report gives, per quality, the
// images transformed and skipped (by reason), the bytes, and the SSIM
// median, 5th percentile and minimum, overall and per format, both for
// what pepd serves (its default minimum saving) and for every WebP that
// is not larger than its original (minimum saving 0). The default quality
// is the lowest-byte one whose median SSIM is at least MinMedian and 5th
// percentile at least MinP5.
package quality

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"mime"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"pep/internal/optimize"
	"pep/testbed/corpus"
)

//go:embed ssim.py
var ssimPy []byte

// The acceptance thresholds of the default quality (issue 11): median
// SSIM at least MinMedian and 5th percentile at least MinP5, over the
// images pepd transforms.
const (
	MinMedian = 0.95
	MinP5     = 0.90
)

// Options configure Run.
type Options struct {
	// Corpora are corpus.Open specs ("default", a tp5n .tar.gz or folder,
	// a WARC, ...). Every object with status 200 (or none recorded) whose
	// bytes are a JPEG, PNG or GIF (optimize.Sniff) is an image, whatever
	// its URL or Content-Type.
	Corpora []string
	// Files are more image files, or folders walked for them (files whose
	// bytes are no JPEG, PNG or GIF are ignored).
	Files []string
	// Qualities are the rules to compare, at least one: a WebP quality
	// 1-100 is the fixed rule at it (JPEG lossy at that quality, PNG and
	// GIF lossless: optimize.ImageOptions with Target 0), and Target (0)
	// is pepd's default, the per-image SSIM target
	// (optimize.DefaultImageOptions).
	Qualities []int
	// Rules are more rules to compare after Qualities' (ParseRule: an SSIM
	// target, a tile floor, AVIF for requests that accept it); at least
	// one of Qualities and Rules.
	Rules []Rule
	// Sample, when above 0 and below the number of distinct images, keeps
	// that many of them, drawn at random with Seed (the same seed and
	// corpora give the same images); 0 keeps all.
	Sample int
	Seed   uint64
	// SearchSSIM skips scikit-image: the SSIM reported is the search's own
	// (optimize.SSIM, within 0.00035 of scikit-image's on the test and
	// default pages' images), for a fast run of SSIM-target rules; a
	// fixed rule's lossy WebPs are then unmeasured ("search only"), its
	// lossless ones 1 (the same pixels).
	SearchSSIM bool
	// Work is the folder for the image pairs (orig/, q<N>/), the pair list,
	// ssim.py, results.json and images.tsv. It is created if missing;
	// files of an earlier run are overwritten.
	Work string
	// Procs is the number of transcoding goroutines and of SSIM worker
	// processes (0: 2).
	Procs int
	// Progress receives progress lines (counts and elapsed time); nil
	// discards them.
	Progress io.Writer
}

// Rule is one way of transforming every image: the fixed rule at a WebP
// quality, or the per-image SSIM search at a target and tile floor, with
// or without AVIF (optimize.AVIF: served instead of the WebP when it is
// smaller, as pepd does for a request whose Accept names image/avif).
type Rule struct {
	// Name is how the tables name it (Rule.String).
	Name string `json:"name"`
	// Quality, when above 0, is the fixed rule at that WebP quality
	// (Target, TileFloor and AVIF unused).
	Quality int `json:"quality,omitempty"`
	// Target and TileFloor are optimize.ImageOptions'.
	Target    float64 `json:"ssim_target,omitempty"`
	TileFloor float64 `json:"ssim_tile_floor,omitempty"`
	// AVIF: the AVIF search too, its result served when smaller.
	AVIF bool `json:"avif,omitempty"`
	// Refine is optimize.ImageOptions.Refine; nil keeps pepd's default
	// (optimize.DefaultRefine).
	Refine *int `json:"refine,omitempty"`
}

// String names the rule: "fixed q75", "SSIM 0.95 floor 0.90",
// "SSIM 0.93 no floor + AVIF".
func (r Rule) String() string {
	if r.Quality > 0 {
		return fmt.Sprintf("fixed q%d", r.Quality)
	}
	s := fmt.Sprintf("SSIM %.2f", r.Target)
	if r.TileFloor > 0 {
		s += fmt.Sprintf(" floor %.2f", r.TileFloor)
	} else {
		s += " no floor"
	}
	if r.Refine != nil {
		s += fmt.Sprintf(" refine %d", *r.Refine)
	}
	if r.AVIF {
		s += " + AVIF"
	}
	return s
}

// options are the image options the rule transforms with (pepd's
// defaults otherwise).
func (r Rule) options() optimize.ImageOptions {
	o := optimize.DefaultImageOptions()
	if r.Quality > 0 {
		o.Target, o.Quality, o.MinSaving = 0, r.Quality, 0
	} else {
		o.Target, o.TileFloor = r.Target, r.TileFloor
		if r.Refine != nil {
			o.Refine = *r.Refine
		}
	}
	return o
}

// ParseRule reads a rule: "q75" (or "75") is the fixed rule at WebP
// quality 75; "0" is pepd's default (optimize.DefaultTarget,
// DefaultTileFloor); "t0.93" the SSIM target 0.93 with the default tile
// floor, "t0.93/f0" the same without a floor, "t0.93/f0.85" with floor
// 0.85; "/r2" sets the search's refining encodes (ImageOptions.Refine,
// default optimize.DefaultRefine); "/avif" appended adds AVIF
// ("t0.95/f0.90/r1/avif"). Errors: anything else, a quality outside 1-100,
// a target or floor outside 0-1, a refine outside 0-8 (a target of 0 is
// the fixed rule: write q75).
func ParseRule(s string) (Rule, error) {
	bad := func() (Rule, error) {
		return Rule{}, fmt.Errorf("quality: rule %q: want q1-q100, 0 (pepd's default), or tTARGET[/fFLOOR][/rREFINE][/avif], e.g. t0.93/f0/r1/avif", s)
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(s, "q")); err == nil {
		switch {
		case n == 0 && s == "0":
			r := Rule{Target: optimize.DefaultTarget, TileFloor: optimize.DefaultTileFloor}
			r.Name = r.String()
			return r, nil
		case n >= 1 && n <= 100:
			r := Rule{Quality: n}
			r.Name = r.String()
			return r, nil
		}
		return bad()
	}
	r := Rule{TileFloor: optimize.DefaultTileFloor}
	for i, part := range strings.Split(s, "/") {
		var err error
		switch {
		case i == 0 && strings.HasPrefix(part, "t"):
			r.Target, err = strconv.ParseFloat(part[1:], 64)
			if err != nil || !(r.Target > 0 && r.Target <= 1) {
				return bad()
			}
		case i > 0 && strings.HasPrefix(part, "f"):
			r.TileFloor, err = strconv.ParseFloat(part[1:], 64)
			if err != nil || r.TileFloor < 0 || r.TileFloor > 1 {
				return bad()
			}
		case i > 0 && strings.HasPrefix(part, "r"):
			n, err := strconv.Atoi(part[1:])
			if err != nil || n < 0 || n > 8 {
				return bad()
			}
			r.Refine = &n
		case i > 0 && part == "avif":
			r.AVIF = true
		default:
			return bad()
		}
	}
	r.Name = r.String()
	return r, nil
}

// Target in Options.Qualities names pepd's default rule, the per-image
// SSIM search (optimize.DefaultImageOptions), rather than a fixed quality.
const Target = 0

// Column is one way of counting the images at one quality: as pepd
// serves them (Stats.Served) or with a minimum saving of 0 (Stats.Any).
type Column struct {
	// MinSaving is the fraction of the original a WebP must save to be
	// served (optimize.ImageOptions.MinSaving).
	MinSaving float64 `json:"min_saving"`
	// Transformed is the number of images served as WebP; Skipped counts
	// the others (served as they are) by reason (optimize.Skip*).
	Transformed int            `json:"transformed"`
	Skipped     map[string]int `json:"skipped"`
	// BytesIn and BytesOut are the transformed images' bytes before and
	// after the transform.
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// ServedIn is all images' bytes; ServedOut all images' bytes as
	// served (the WebP for a transformed image, the original otherwise).
	ServedIn  int64 `json:"served_in"`
	ServedOut int64 `json:"served_out"`
	// Measured is the number of transformed images with an SSIM;
	// Unmeasured counts the others by ssim.py's reason ("smaller than
	// 7x7", "decode original: ...", "shape ...").
	Measured   int            `json:"measured"`
	Unmeasured map[string]int `json:"unmeasured,omitempty"`
	// Median, P5 and Min are the SSIM's median, 5th percentile (nearest
	// rank) and minimum over the Measured images; 0 when none.
	Median float64 `json:"ssim_median"`
	P5     float64 `json:"ssim_p5"`
	Min    float64 `json:"ssim_min"`
	// CPUMsPerImage is the optimizer process's CPU time (user + system,
	// every thread: libvips's and libaom's too) while the rule ran over
	// all images, in milliseconds per image Decoded: the rules run one
	// after another, so this is each rule's own CPU, whatever else the
	// machine runs.
	CPUMsPerImage float64 `json:"cpu_ms_per_image"`
	// AVIF is the number of images served as AVIF (rules with AVIF).
	AVIF int `json:"avif,omitempty"`
	// Decoded is the number of images the transform decoded and encoded
	// at least once (optimize.ImageResult.Encodes > 0); MsMean, MsMedian
	// and MsP99 are the transform's wall time per such image in
	// milliseconds (one goroutine per image, Options.Procs at once: CPU
	// time where the machine has a free core), Encodes their WebP encodes.
	Decoded  int     `json:"decoded"`
	MsMean   float64 `json:"ms_mean"`
	MsMedian float64 `json:"ms_median"`
	MsP99    float64 `json:"ms_p99"`
	Encodes  int     `json:"encodes"`
}

// Stats summarizes one quality, over all images (Format "") or one
// format ("jpeg", "png", "gif").
type Stats struct {
	Quality int    `json:"quality"`
	Rule    string `json:"rule"`
	Format  string `json:"format,omitempty"`
	// Images is the number of distinct images counted.
	Images int `json:"images"`
	// Served is what pepd serves (optimize.DefaultImageOptions's
	// MinSaving); Any counts every WebP not larger than its original
	// (MinSaving 0).
	Served Column `json:"served"`
	Any    Column `json:"min_saving_0"`
}

// Outcome is one image at one quality.
type Outcome struct {
	// Quality is the WebP quality (Target: the per-image SSIM search).
	Quality int `json:"quality"`
	// AVIF: the image is served as AVIF (a rule with AVIF, and the AVIF
	// was smaller than the WebP); WebP is then the AVIF's size.
	AVIF bool `json:"avif,omitempty"`
	// Lossless and Chosen are the WebP's kind (Chosen: its lossy quality);
	// Search is the SSIM the search measured itself (0 for a fixed rule).
	Lossless bool    `json:"lossless,omitempty"`
	Chosen   int     `json:"chosen,omitempty"`
	Search   float64 `json:"search_ssim,omitempty"`
	// Ms is the transform's wall time in milliseconds, Encodes its WebP
	// encodes.
	Ms      float64 `json:"ms"`
	Encodes int     `json:"encodes"`
	// WebP is the transform's size in bytes, 0 when there is none (Skip
	// other than optimize.SkipNotSmaller).
	WebP int `json:"webp"`
	// Skip is pepd's reason to serve the original ("" when it serves the
	// WebP); SkipAny the reason at MinSaving 0.
	Skip    string `json:"skip,omitempty"`
	SkipAny string `json:"skip_any,omitempty"`
	// SSIM is the WebP's SSIM against the original, in [-1, 1]; 0 when
	// not measured: SkipAny set (no WebP), or ssim.py's reason in NoSSIM.
	SSIM   float64 `json:"ssim"`
	NoSSIM string  `json:"no_ssim,omitempty"`
}

// Image is one distinct image and its outcome at each quality.
type Image struct {
	// Name is where it was first seen: "host/path" for a corpus object,
	// the file path for Options.Files.
	Name string `json:"name"`
	// Format is optimize.Sniff's answer: "jpeg", "png" or "gif".
	Format string `json:"format"`
	// Bytes is the original's size.
	Bytes int `json:"bytes"`
	// Size is "WxH" as ssim.py saw it (after EXIF orientation) and Mode
	// the original's Pillow mode ("RGB", "CMYK", "P", "RGBA", ...; "+icc"
	// when its ICC profile was applied, "+icc-failed" when littlecms
	// refused it); both "" when never measured.
	Size string `json:"size,omitempty"`
	Mode string `json:"mode,omitempty"`
	// Outcomes follow Report.Rules' order.
	Outcomes []Outcome `json:"outcomes"`
}

// Report is Run's result; results.json in Options.Work holds it (without
// Images, which images.tsv lists).
type Report struct {
	// Corpora and Files are Options'.
	Corpora []string `json:"corpora"`
	Files   []string `json:"files,omitempty"`
	// Qualities are Options.Qualities in order; Overall[i] and
	// ByFormat[f][i] are Qualities[i]'s figures.
	Qualities []int  `json:"qualities"`
	Rules     []Rule `json:"rules"`
	Sample    int    `json:"sample,omitempty"`
	// SearchSSIM: the SSIM figures are the search's own (Options).
	SearchSSIM bool               `json:"search_ssim,omitempty"`
	Seed       uint64             `json:"seed,omitempty"`
	Overall    []Stats            `json:"overall"`
	ByFormat   map[string][]Stats `json:"by_format"`
	// Distinct is the number of distinct images (by SHA-256 of the
	// bytes); Duplicates the image objects dropped as copies of one.
	Distinct   int `json:"distinct"`
	Duplicates int `json:"duplicates"`
	// TypeMismatch counts distinct images whose Content-Type is not
	// image/jpeg, image/png or image/gif: pepd, which goes by the
	// Content-Type, would not transform them; they are counted anyway.
	// NotImage counts distinct objects typed as one of those whose bytes
	// are none of them (pepd: optimize.SkipFormat); they are not counted.
	TypeMismatch int `json:"type_mismatch"`
	NotImage     int `json:"not_image"`
	// Modes counts the measured images (an SSIM at some quality) by
	// Image.Mode.
	Modes map[string]int `json:"modes"`
	// Default is the best rule's Quality (0 for an SSIM target rule; see
	// DefaultRule): the one with the fewest image
	// bytes as served (Served.ServedOut) among those whose Served median
	// SSIM >= MinMedian and 5th percentile >= MinP5 (Target is one); -1
	// when none qualifies.
	Default int `json:"default"`
	// DefaultRule is the best rule's name ("" when none qualifies).
	DefaultRule string `json:"default_rule"`
	// Elapsed is the run's wall time in seconds.
	Elapsed float64 `json:"elapsed_s"`
	// Images are the distinct images, in the order first seen.
	Images []Image `json:"-"`
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

// CheckPython returns nil when Python() can import scikit-image's metrics,
// Pillow and its ImageCms, else an error naming the Debian packages.
func CheckPython() error {
	out, err := exec.Command(Python(), "-c", "import skimage.metrics, numpy; from PIL import Image, ImageCms, ImageOps").CombinedOutput()
	if err != nil {
		return fmt.Errorf("quality: %s lacks scikit-image or Pillow (apt-get install python3-skimage python3-pil, or make deps): %v: %s",
			Python(), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Run builds the report: it collects the images, transcodes each at each
// quality (Options.Procs at once), writes every original that has a WebP
// at some quality and its WebPs into Options.Work, runs ssim.py once over
// the list of pairs, and writes results.json and images.tsv. Errors: no
// qualities or one outside 1-100, a corpus or file that does not open, a
// folder that cannot be written, python3 or its packages missing
// (CheckPython), ssim.py failing or answering out of shape, ctx done.
func Run(ctx context.Context, o Options) (Report, error) {
	start := time.Now()
	if len(o.Qualities) == 0 && len(o.Rules) == 0 {
		return Report{}, errors.New("quality: no qualities")
	}
	var rules []Rule
	for _, q := range o.Qualities {
		if q != Target && (q < 1 || q > 100) {
			return Report{}, fmt.Errorf("quality: quality %d not in 1-100 (or 0: the SSIM target)", q)
		}
		r, _ := ParseRule(strconv.Itoa(q))
		rules = append(rules, r)
	}
	for _, r := range o.Rules {
		if r.Quality == 0 && !(r.Target > 0 && r.Target <= 1 && r.TileFloor >= 0 && r.TileFloor <= 1) || r.Quality < 0 || r.Quality > 100 {
			return Report{}, fmt.Errorf("quality: rule %+v: a quality 1-100, or a target in (0, 1] and a floor in [0, 1]", r)
		}
		if r.Name == "" {
			r.Name = r.String()
		}
		rules = append(rules, r)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Procs <= 0 {
		o.Procs = 2
	}
	if err := CheckPython(); err != nil {
		return Report{}, err
	}
	rep := Report{Corpora: o.Corpora, Files: o.Files, Rules: rules, ByFormat: map[string][]Stats{}, Sample: o.Sample, Seed: o.Seed}
	for _, r := range rules {
		rep.Qualities = append(rep.Qualities, r.Quality)
	}
	imgs, err := collect(o, &rep, start)
	if err != nil {
		return Report{}, err
	}
	rep.Distinct = len(imgs)
	if o.Sample > 0 && o.Sample < len(imgs) {
		rng := rand.New(rand.NewPCG(o.Seed, 27))
		keep := rng.Perm(len(imgs))[:o.Sample]
		slices.Sort(keep)
		sample := make([]img, len(keep))
		for i, k := range keep {
			sample[i] = imgs[k]
		}
		imgs = sample
		fmt.Fprintf(o.Progress, "quality: a sample of %d of the %d distinct images (seed %d)\n", len(imgs), rep.Distinct, o.Seed)
	}
	if err := os.MkdirAll(o.Work, 0o755); err != nil {
		return Report{}, err
	}

	minSaving := optimize.DefaultImageOptions().MinSaving
	rep.Images = make([]Image, len(imgs))
	for i, im := range imgs {
		rep.Images[i] = Image{Name: im.name, Format: im.format, Bytes: len(im.body), Outcomes: make([]Outcome, len(rules))}
	}
	cpu, list, pairs, err := transcodeAll(ctx, o, rules, imgs, rep.Images, minSaving, start)
	if err != nil {
		return Report{}, err
	}
	if o.SearchSSIM {
		for i := range rep.Images {
			for j := range rep.Images[i].Outcomes {
				oc := &rep.Images[i].Outcomes[j]
				if oc.SkipAny != "" {
					continue
				}
				if oc.Search > 0 {
					oc.SSIM = oc.Search
				} else {
					oc.NoSSIM = "search only"
				}
			}
		}
		rep.SearchSSIM = true
	} else if err := measure(ctx, o, list, pairs, rep.Images, start); err != nil {
		return Report{}, err
	}
	rep.summarize(minSaving, cpu)
	rep.Elapsed = time.Since(start).Seconds()
	if err := rep.write(o.Work); err != nil {
		return Report{}, err
	}
	return rep, nil
}

// collect returns the distinct (by SHA-256) images of the corpora and
// files, the format told by the bytes (optimize.Sniff), not the name.
func collect(o Options, rep *Report, start time.Time) ([]img, error) {
	seen := map[[32]byte]bool{}
	notImage := map[[32]byte]bool{}
	var out []img
	add := func(name, ctype string, b []byte) {
		f := optimize.Sniff(b)
		mt, _, _ := mime.ParseMediaType(ctype)
		typed := mt == optimize.TypeJPEG || mt == optimize.TypePNG || mt == optimize.TypeGIF
		h := sha256.Sum256(b)
		if f == "" {
			if typed && !notImage[h] {
				notImage[h] = true
				rep.NotImage++
			}
			return
		}
		if seen[h] {
			rep.Duplicates++
			return
		}
		seen[h] = true
		if ctype != "" && !typed {
			rep.TypeMismatch++
		}
		out = append(out, img{body: b, format: f, name: name})
	}
	for _, spec := range o.Corpora {
		c, err := corpus.Open(spec)
		if err != nil {
			return nil, err
		}
		n := len(out)
		for _, p := range c.Pages {
			for _, ob := range p.Objects {
				if ob.Status != 0 && ob.Status != 200 {
					continue
				}
				add(ob.Host+ob.Path, ob.ContentType, ob.Body)
			}
		}
		fmt.Fprintf(o.Progress, "quality: %s: %d pages, %d new distinct images (%s)\n", spec, len(c.Pages), len(out)-n, since(start))
	}
	for _, f := range o.Files {
		n := len(out)
		err := filepath.WalkDir(f, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			add(p, "", b)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("quality: %w", err)
		}
		fmt.Fprintf(o.Progress, "quality: %s: %d new distinct images\n", f, len(out)-n)
	}
	return out, nil
}

// transcodeAll runs every rule over every image, one rule after another
// (Options.Procs images at once), with MinSaving 0 for the fixed rules
// and derives pepd's outcome at minSaving from the same WebP (Image's
// rule: served when len(webp) <= len(original)*(1-MinSaving)); it writes
// the originals and the served files (the WebP, or a PNG of an AVIF's
// pixels as libvips decodes them) and the pair list, and returns each
// rule's process CPU time in seconds, the list's path and its number of
// pairs.
func transcodeAll(ctx context.Context, o Options, rules []Rule, imgs []img, rows []Image, minSaving float64, start time.Time) ([]float64, string, int, error) {
	origDir := filepath.Join(o.Work, "orig")
	dirs := make([]string, len(rules))
	for j := range rules {
		dirs[j] = filepath.Join(o.Work, fmt.Sprintf("rule%d", j))
	}
	for _, d := range append([]string{origDir}, dirs...) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, "", 0, err
		}
	}
	total := len(imgs) * len(rules)
	fmt.Fprintf(o.Progress, "quality: transcoding %d images by %d rules, one rule after another (%d transforms, %d at once)\n", len(imgs), len(rules), total, o.Procs)
	var (
		mu       sync.Mutex
		done     int
		firstErr error
		lastLog  = time.Now()
	)
	cpu := make([]float64, len(rules))
	for j := range rules {
		before := cpuSeconds()
		work := make(chan int)
		var wg sync.WaitGroup
		for range o.Procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					err := transcodeOne(rules[j], imgs[i], &rows[i], i, j, origDir, dirs[j], minSaving)
					mu.Lock()
					done++
					if err != nil && firstErr == nil {
						firstErr = err
					}
					if time.Since(lastLog) >= 15*time.Second {
						lastLog = time.Now()
						fmt.Fprintf(o.Progress, "quality: transcoded %d/%d (%s, rule %s)\n", done, total, since(start), rules[j].Name)
					}
					mu.Unlock()
				}
			}()
		}
	feed:
		for i := range imgs {
			select {
			case work <- i:
			case <-ctx.Done():
				break feed
			}
		}
		close(work)
		wg.Wait()
		cpu[j] = cpuSeconds() - before
		if err := ctx.Err(); err != nil {
			return nil, "", 0, err
		}
		if firstErr != nil {
			return nil, "", 0, firstErr
		}
	}
	fmt.Fprintf(o.Progress, "quality: transcoded %d/%d (%s)\n", done, total, since(start))

	var list bytes.Buffer
	pairs := 0
	for i := range rows {
		for j := range rules {
			oc := rows[i].Outcomes[j]
			if oc.SkipAny != "" {
				continue
			}
			fmt.Fprintf(&list, "%d:%d\t%s\t%s\n", i, j, origPath(origDir, i, imgs[i].format), servedPath(dirs[j], i, oc.AVIF))
			pairs++
		}
	}
	path := filepath.Join(o.Work, "pairs.tsv")
	return cpu, path, pairs, os.WriteFile(path, list.Bytes(), 0o644)
}

// cpuSeconds is this process's CPU time so far (user + system, all
// threads), in seconds.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func origPath(dir string, i int, format string) string {
	return filepath.Join(dir, fmt.Sprintf("%06d.%s", i, format))
}

func webpPath(dir string, i int) string { return filepath.Join(dir, fmt.Sprintf("%06d.webp", i)) }

// servedPath is the file ssim.py compares: the WebP, or for an AVIF a PNG
// of its pixels (Debian's Pillow reads no AVIF).
func servedPath(dir string, i int, avif bool) string {
	if avif {
		return filepath.Join(dir, fmt.Sprintf("%06d.avif.png", i))
	}
	return webpPath(dir, i)
}

// transcodeOne fills row's outcome j (rule r) for image i and writes its
// files.
func transcodeOne(r Rule, im img, row *Image, i, j int, origDir, dir string, minSaving float64) error {
	opts := r.options()
	start := time.Now()
	res := optimize.Image(im.body, opts)
	avif := false
	if r.AVIF {
		a := optimize.AVIF(im.body, opts, res)
		if a.Skip == "" {
			res.Body, res.Lossless, res.Quality, res.SSIM, avif = a.Body, false, a.Quality, a.SSIM, true
			res.Skip = ""
		}
		res.Encodes += a.Encodes
	}
	oc := Outcome{Quality: r.Quality, AVIF: avif, Skip: res.Skip, SkipAny: res.Skip, Lossless: res.Lossless, Chosen: res.Quality, Search: res.SSIM,
		Ms: float64(time.Since(start).Microseconds()) / 1000, Encodes: res.Encodes}
	// The search runs with pepd's minimum saving (it bounds the
	// candidates): both columns are pepd's outcome.
	if res.Skip == "" {
		oc.WebP = len(res.Body)
		if float64(len(res.Body)) > float64(len(im.body))*(1-minSaving) {
			oc.Skip = optimize.SkipNotSmaller
		}
		body := res.Body
		if avif {
			png, err := optimize.ToPNG(res.Body)
			if err != nil {
				return fmt.Errorf("quality: %s: AVIF: %w", im.name, err)
			}
			body = png
		}
		if err := os.WriteFile(servedPath(dir, i, avif), body, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(origPath(origDir, i, im.format), im.body, 0o644); err != nil {
			return err
		}
	}
	row.Outcomes[j] = oc
	return nil
}

// measure runs ssim.py over the pair list and stores its answers in rows.
func measure(ctx context.Context, o Options, list string, pairs int, rows []Image, start time.Time) error {
	script := filepath.Join(o.Work, "ssim.py")
	if err := os.WriteFile(script, ssimPy, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(o.Progress, "quality: SSIM of %d pairs, %d worker processes (%s)\n", pairs, o.Procs, since(start))
	cmd := exec.CommandContext(ctx, Python(), script, list, strconv.Itoa(o.Procs))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("quality: %s: %w", Python(), err)
	}
	got := 0
	lastLog := time.Now()
	var parseErr error
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if parseErr == nil {
			parseErr = record(sc.Text(), rows)
		}
		got++
		if time.Since(lastLog) >= 15*time.Second {
			lastLog = time.Now()
			fmt.Fprintf(o.Progress, "quality: SSIM %d/%d (%s)\n", got, pairs, since(start))
		}
	}
	werr := cmd.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("quality: ssim.py: %w: %s", werr, strings.TrimSpace(stderr.String()))
	}
	if parseErr != nil {
		return parseErr
	}
	if got != pairs {
		return fmt.Errorf("quality: ssim.py answered %d of %d pairs", got, pairs)
	}
	fmt.Fprintf(o.Progress, "quality: SSIM %d/%d (%s)\n", got, pairs, since(start))
	return nil
}

// record parses one ssim.py line: "i:j<TAB>ssim<TAB>WxH<TAB>mode" or
// "i:j<TAB>skip<TAB>reason".
func record(line string, rows []Image) error {
	f := strings.SplitN(line, "\t", 4)
	bad := fmt.Errorf("quality: ssim.py said %q", line)
	if len(f) < 3 || (f[1] != "skip" && len(f) != 4) {
		return bad
	}
	a, b, ok := strings.Cut(f[0], ":")
	i, err1 := strconv.Atoi(a)
	j, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || i < 0 || i >= len(rows) || j < 0 || j >= len(rows[i].Outcomes) {
		return bad
	}
	oc := &rows[i].Outcomes[j]
	if f[1] == "skip" {
		oc.NoSSIM = f[2]
		return nil
	}
	v, err := strconv.ParseFloat(f[1], 64)
	if err != nil || v < -1 || v > 1 {
		return bad
	}
	oc.SSIM = v
	rows[i].Size, rows[i].Mode = f[2], f[3]
	return nil
}

// summarize computes Overall, ByFormat and Default from Images.
func (r *Report) summarize(minSaving float64, cpu []float64) {
	fmts := map[string]bool{}
	for _, im := range r.Images {
		fmts[im.Format] = true
	}
	r.Overall = nil
	r.ByFormat = map[string][]Stats{}
	for j, q := range r.Qualities {
		s := r.stats(j, q, "", minSaving)
		if j < len(cpu) && s.Served.Decoded > 0 {
			s.Served.CPUMsPerImage = 1000 * cpu[j] / float64(s.Served.Decoded)
			s.Any.CPUMsPerImage = s.Served.CPUMsPerImage
		}
		r.Overall = append(r.Overall, s)
		for f := range fmts {
			r.ByFormat[f] = append(r.ByFormat[f], r.stats(j, q, f, minSaving))
		}
	}
	r.Modes = map[string]int{}
	for _, im := range r.Images {
		if im.Mode != "" {
			r.Modes[im.Mode]++
		}
	}
	r.Default, r.DefaultRule = -1, ""
	best := -1
	for i, s := range r.Overall {
		c := s.Served
		if c.Measured > 0 && c.Median >= MinMedian && c.P5 >= MinP5 && (best < 0 || c.ServedOut < r.Overall[best].Served.ServedOut) {
			best = i
		}
	}
	if best >= 0 {
		r.Default, r.DefaultRule = r.Qualities[best], r.Rules[best].Name
	}
}

// stats is quality index j's figures over the images of format (all for "").
func (r *Report) stats(j, q int, format string, minSaving float64) Stats {
	s := Stats{Quality: q, Rule: r.Rules[j].Name, Format: format}
	s.Served = Column{MinSaving: minSaving, Skipped: map[string]int{}, Unmeasured: map[string]int{}}
	s.Any = Column{MinSaving: 0, Skipped: map[string]int{}, Unmeasured: map[string]int{}}
	var served, anyv, ms []float64
	for _, im := range r.Images {
		if format != "" && im.Format != format {
			continue
		}
		s.Images++
		oc := im.Outcomes[j]
		if oc.Encodes > 0 {
			ms = append(ms, oc.Ms)
			s.Served.Encodes += oc.Encodes
		}
		add := func(c *Column, skip string, vals *[]float64) {
			c.ServedIn += int64(im.Bytes)
			if skip != "" {
				c.Skipped[skip]++
				c.ServedOut += int64(im.Bytes)
				return
			}
			c.Transformed++
			if oc.AVIF {
				c.AVIF++
			}
			c.BytesIn += int64(im.Bytes)
			c.BytesOut += int64(oc.WebP)
			c.ServedOut += int64(oc.WebP)
			if oc.NoSSIM != "" {
				c.Unmeasured[oc.NoSSIM]++
				return
			}
			c.Measured++
			*vals = append(*vals, oc.SSIM)
		}
		add(&s.Served, oc.Skip, &served)
		add(&s.Any, oc.SkipAny, &anyv)
	}
	s.Served.Median, s.Served.P5, s.Served.Min = dist(served)
	s.Any.Median, s.Any.P5, s.Any.Min = dist(anyv)
	s.Served.Decoded = len(ms)
	if len(ms) > 0 {
		var sum float64
		for _, v := range ms {
			sum += v
		}
		s.Served.MsMean = sum / float64(len(ms))
		s.Served.MsMedian, _, _ = dist(ms) // sorts ms
		s.Served.MsP99 = ms[max(0, int(math.Ceil(0.99*float64(len(ms))))-1)]
	}
	s.Any.Decoded, s.Any.MsMean, s.Any.MsMedian, s.Any.MsP99, s.Any.Encodes = s.Served.Decoded, s.Served.MsMean, s.Served.MsMedian, s.Served.MsP99, s.Served.Encodes
	return s
}

// dist returns the median, 5th percentile (nearest rank) and minimum of v
// (sorted in place); zeros when v is empty.
func dist(v []float64) (med, p5, lowest float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	sort.Float64s(v)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(v)))) - 1 // rank ceil(p*n), 1-based
		return v[max(0, min(i, len(v)-1))]
	}
	med = v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return med, rank(0.05), v[0]
}

// write stores results.json (the report without Images) and images.tsv
// (one line per image and rule: the Outcome, with chosen the lossy quality
// the search chose or "lossless", ms its wall time, encodes its encodes)
// in dir.
func (r Report) write(dir string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var t bytes.Buffer
	t.WriteString("image\tname\tformat\tsize\tmode\tbytes\tquality\twebp_bytes\tskip\tskip_min_saving_0\tssim\tno_ssim\trule\tavif\tchosen\tms\tencodes\n")
	for i, im := range r.Images {
		for j, oc := range im.Outcomes {
			ssim := ""
			if oc.SkipAny == "" && oc.NoSSIM == "" {
				ssim = strconv.FormatFloat(oc.SSIM, 'f', 6, 64)
			}
			chosen := ""
			switch {
			case oc.Lossless:
				chosen = "lossless"
			case oc.Chosen > 0:
				chosen = strconv.Itoa(oc.Chosen)
			}
			fmt.Fprintf(&t, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%v\t%s\t%.1f\t%d\n", i, tsv(im.Name), im.Format, im.Size, im.Mode, im.Bytes,
				oc.Quality, oc.WebP, oc.Skip, oc.SkipAny, ssim, oc.NoSSIM, r.Rules[j].Name, oc.AVIF, chosen, oc.Ms, oc.Encodes)
		}
	}
	return os.WriteFile(filepath.Join(dir, "images.tsv"), t.Bytes(), 0o644)
}

func tsv(s string) string { return strings.NewReplacer("\t", " ", "\n", " ").Replace(s) }

func since(t time.Time) string { return time.Since(t).Round(time.Second).String() }

func mb(n int64) string { return fmt.Sprintf("%.2f MB", float64(n)/1e6) }

func pct(a, b int64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f %%", 100*float64(a)/float64(b))
}

func ssimCell(c Column, v float64) string {
	if c.Measured == 0 {
		return "-"
	}
	return fmt.Sprintf("%.4f", v)
}

func countList(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// Markdown renders the report: a header line, the table of what pepd
// serves per quality, the same with a minimum saving of 0, the table per
// format, and the chosen default (or that none qualifies).
func (r Report) Markdown() string {
	var b strings.Builder
	src := strings.Join(append(slices.Clone(r.Corpora), r.Files...), ", ")
	fmt.Fprintf(&b, "Images of %s: %d distinct JPEG/PNG/GIF (by content; %d duplicate objects dropped",
		src, r.Distinct, r.Duplicates)
	if r.Sample > 0 && r.Sample < r.Distinct {
		fmt.Fprintf(&b, "; a sample of %d drawn at random with seed %d is measured", len(r.Images), r.Seed)
	}
	if r.TypeMismatch > 0 {
		fmt.Fprintf(&b, "; %d with a Content-Type pepd would not transform, counted anyway", r.TypeMismatch)
	}
	if r.NotImage > 0 {
		fmt.Fprintf(&b, "; %d objects typed JPEG/PNG/GIF whose bytes are none, not counted", r.NotImage)
	}
	how := "scikit-image, RGB over white, the original as Pillow shows it (EXIF orientation, ICC to sRGB). Originals measured by mode: " + countList(r.Modes)
	if r.SearchSSIM {
		how = "the search's own (optimize.SSIM, within 0.00035 of scikit-image's)"
	}
	fmt.Fprintf(&b, "). Transform: optimize.Image, exactly pepd's. SSIM: %s. Took %s.\n\n",
		how, (time.Duration(r.Elapsed * float64(time.Second))).Round(time.Second))
	if len(r.Overall) == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, "As pepd serves them (minimum saving %.0f %%; skipped images are served as they are and not in the SSIM):\n\n", 100*r.Overall[0].Served.MinSaving)
	b.WriteString("| rule | transformed (AVIF) | skipped | all image bytes as served | transformed: in -> out | SSIM median | SSIM p5 | SSIM min | no SSIM | CPU ms per image | wall ms per image: mean, median, p99 (encodes) |\n")
	b.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---|---:|---|\n")
	for _, s := range r.Overall {
		c := s.Served
		mark := ""
		if s.Rule == r.DefaultRule {
			mark = " **best**"
		}
		fmt.Fprintf(&b, "| %s%s | %d of %d (%d) | %s | %s -> %s (%s) | %s -> %s (%s) | %s | %s | %s | %s | %.1f | %.1f, %.1f, %.1f (%d over %d images) |\n",
			s.Rule, mark, c.Transformed, s.Images, c.AVIF, countList(c.Skipped),
			mb(c.ServedIn), mb(c.ServedOut), pct(c.ServedOut, c.ServedIn),
			mb(c.BytesIn), mb(c.BytesOut), pct(c.BytesOut, c.BytesIn),
			ssimCell(c, c.Median), ssimCell(c, c.P5), ssimCell(c, c.Min), countList(c.Unmeasured),
			c.CPUMsPerImage, c.MsMean, c.MsMedian, c.MsP99, c.Encodes, c.Decoded)
	}
	for j, rule := range r.Rules {
		if rule.Quality > 0 {
			continue
		}
		chosen := map[string]int{}
		for _, im := range r.Images {
			oc := im.Outcomes[j]
			switch {
			case oc.Skip != "":
			case oc.AVIF:
				chosen[fmt.Sprintf("avif q%03d", oc.Chosen)]++
			case oc.Lossless:
				chosen["lossless"]++
			default:
				chosen[fmt.Sprintf("q%03d", oc.Chosen)]++
			}
		}
		fmt.Fprintf(&b, "\nChosen by %s for the images it transformed: %s.\n", rule.Name, countList(chosen))
	}
	b.WriteString("\nWith a minimum saving of 0 (every WebP not larger than its original):\n\n")
	b.WriteString("| quality | transformed | all image bytes as served | transformed: in -> out | SSIM median | SSIM p5 | SSIM min |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Overall {
		c := s.Any
		fmt.Fprintf(&b, "| %s | %d of %d | %s -> %s (%s) | %s -> %s (%s) | %s | %s | %s |\n",
			s.Rule, c.Transformed, s.Images, mb(c.ServedIn), mb(c.ServedOut), pct(c.ServedOut, c.ServedIn),
			mb(c.BytesIn), mb(c.BytesOut), pct(c.BytesOut, c.BytesIn), ssimCell(c, c.Median), ssimCell(c, c.P5), ssimCell(c, c.Min))
	}
	b.WriteString("\nBy format, as pepd serves them:\n\n")
	b.WriteString("| format | quality | transformed | skipped | all bytes as served | transformed: in -> out | SSIM median | SSIM p5 | SSIM min |\n")
	b.WriteString("|---|---:|---:|---|---:|---:|---:|---:|---:|\n")
	fmts := make([]string, 0, len(r.ByFormat))
	for f := range r.ByFormat {
		fmts = append(fmts, f)
	}
	sort.Strings(fmts)
	for _, f := range fmts {
		for _, s := range r.ByFormat[f] {
			c := s.Served
			fmt.Fprintf(&b, "| %s | %s | %d of %d | %s | %s -> %s (%s) | %s -> %s (%s) | %s | %s | %s |\n",
				f, s.Rule, c.Transformed, s.Images, countList(c.Skipped),
				mb(c.ServedIn), mb(c.ServedOut), pct(c.ServedOut, c.ServedIn),
				mb(c.BytesIn), mb(c.BytesOut), pct(c.BytesOut, c.BytesIn),
				ssimCell(c, c.Median), ssimCell(c, c.P5), ssimCell(c, c.Min))
		}
	}
	if r.Default >= 0 {
		fmt.Fprintf(&b, "\nBest: %s, the setting with the fewest image bytes as served whose median SSIM >= %.2f and 5th percentile >= %.2f.\n",
			r.DefaultRule, MinMedian, MinP5)
	} else {
		fmt.Fprintf(&b, "\nNo quality tried has median SSIM >= %.2f and 5th percentile >= %.2f: no default chosen.\n", MinMedian, MinP5)
	}
	return b.String()
}
