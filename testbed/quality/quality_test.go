package quality

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"pep/internal/optimize"
)

// TestQualityReport runs the report over the optimizer's real test images
// (internal/optimize/testdata, make.sh) at qualities 30 and 90 and checks
// what it measured: the photo's SSIM rises with the quality, every SSIM is
// in (0, 1], the corrupt and truncated files and the decompression bomb
// are counted as skipped with pepd's reasons, the animated GIF is
// measured frame by frame, the
// rotated JPEG is compared upright, and the outcome derived for pepd's
// minimum saving is optimize.Image's own with the default options.
func TestQualityReport(t *testing.T) {
	if err := CheckPython(); err != nil {
		t.Skip(err)
	}
	testdata := filepath.Join("..", "..", "internal", "optimize", "testdata")
	work := t.TempDir()
	var progress bytes.Buffer
	rep, err := Run(context.Background(), Options{Files: []string{testdata}, Qualities: []int{30, 90, Target}, Work: work, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + progress.String() + "\n" + rep.Markdown())

	byName := map[string]Image{}
	for _, im := range rep.Images {
		byName[filepath.Base(im.Name)] = im
	}
	// make.sh is no image; photo.jpg and corrupt.jpg differ in 2 KB.
	if _, ok := byName["make.sh"]; ok || rep.Distinct != 13 {
		t.Errorf("%d distinct images (make.sh counted: %v), want the 13 test images", rep.Distinct, ok)
	}

	photo := byName["photo.jpg"]
	lo, hi := photo.Outcomes[0], photo.Outcomes[1]
	// At q90 the WebP saves under 10 % of this q85 JPEG: pepd serves the
	// original, the minimum-saving-0 column still has it measured.
	if lo.Skip != "" || hi.SkipAny != "" || lo.NoSSIM != "" || hi.NoSSIM != "" {
		t.Fatalf("photo.jpg: %+v %+v: want q30 served, q90 transcoded, both measured", lo, hi)
	}
	if !(lo.SSIM < hi.SSIM) {
		t.Errorf("photo.jpg: SSIM q30 %.4f, q90 %.4f: want q30 < q90", lo.SSIM, hi.SSIM)
	}
	if !(lo.WebP < hi.WebP) {
		t.Errorf("photo.jpg: q30 %d bytes, q90 %d: want fewer at q30", lo.WebP, hi.WebP)
	}
	if hi.SSIM < 0.9 {
		t.Errorf("photo.jpg: SSIM q90 %.4f: want >= 0.9", hi.SSIM)
	}
	if r := byName["rotated.jpg"]; r.Size != "300x400" || r.Outcomes[1].SSIM < 0.9 {
		t.Errorf("rotated.jpg (EXIF orientation 6, stored 400x300): size %q, SSIM q90 %.4f: want 300x400 and >= 0.9", r.Size, r.Outcomes[1].SSIM)
	}
	if a := byName["animated.gif"]; !strings.HasSuffix(a.Mode, "+anim31") || a.Outcomes[2].Skip != "" || a.Outcomes[2].SSIM < optimize.DefaultTarget {
		t.Errorf("animated.gif (31 frames): mode %q, at the target skip %q SSIM %.4f: want measured frame by frame (+anim31), served, >= %.2f",
			a.Mode, a.Outcomes[2].Skip, a.Outcomes[2].SSIM, optimize.DefaultTarget)
	}
	if m := byName["cmyk.jpg"].Mode; m != "CMYK" {
		t.Errorf("cmyk.jpg: mode %q, want CMYK", m)
	}

	skips := map[string]string{
		"corrupt.jpg":   optimize.SkipUndecodable,
		"truncated.png": optimize.SkipUndecodable,
		"bomb.png":      optimize.SkipPixels,
		"small.gif":     optimize.SkipNotSmaller,
	}
	for j, s := range rep.Overall {
		for _, reason := range []string{optimize.SkipUndecodable, optimize.SkipPixels} {
			if s.Served.Skipped[reason] == 0 {
				t.Errorf("q%d: skipped %v: want %q counted", s.Quality, s.Served.Skipped, reason)
			}
		}
		if s.Served.Measured == 0 || !(s.Served.Min > 0 && s.Served.Min <= s.Served.P5 && s.Served.P5 <= s.Served.Median && s.Served.Median <= 1) {
			t.Errorf("q%d: %d measured, min %.4f p5 %.4f median %.4f: want 0 < min <= p5 <= median <= 1",
				s.Quality, s.Served.Measured, s.Served.Min, s.Served.P5, s.Served.Median)
		}
		if s.Any.Transformed < s.Served.Transformed || s.Served.ServedIn != s.Any.ServedIn {
			t.Errorf("q%d: min saving 0 transforms %d, pepd %d", s.Quality, s.Any.Transformed, s.Served.Transformed)
		}
		opts := optimize.DefaultImageOptions()
		if s.Quality != Target {
			opts.Target, opts.Quality = 0, s.Quality
		}
		var in, out int64
		for _, im := range rep.Images {
			oc := im.Outcomes[j]
			if oc.Skip == "" || oc.SkipAny == "" {
				if !(oc.SSIM > 0 && oc.SSIM <= 1) && oc.NoSSIM == "" {
					t.Errorf("%s q%d: SSIM %v not in (0, 1]", im.Name, oc.Quality, oc.SSIM)
				}
			}
			if want, ok := skips[filepath.Base(im.Name)]; ok && oc.Skip != want {
				t.Errorf("%s q%d: skip %q, want %q", im.Name, oc.Quality, oc.Skip, want)
			}
			body, err := os.ReadFile(im.Name)
			if err != nil {
				t.Fatal(err)
			}
			res := optimize.Image(body, opts)
			if res.Skip != oc.Skip || (res.Skip == "" && len(res.Body) != oc.WebP) {
				t.Errorf("%s q%d: report says skip %q (%d bytes), optimize.Image %q (%d bytes)", im.Name, oc.Quality, oc.Skip, oc.WebP, res.Skip, len(res.Body))
			}
			in += int64(len(body))
			out += int64(len(res.Body))
		}
		if s.Served.ServedIn != in || s.Served.ServedOut != out {
			t.Errorf("q%d: served %d -> %d bytes, optimize.Image %d -> %d", s.Quality, s.Served.ServedIn, s.Served.ServedOut, in, out)
		}
	}

	b, err := os.ReadFile(filepath.Join(work, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || len(back.Overall) != 3 || back.Distinct != rep.Distinct {
		t.Errorf("results.json: %v, %d qualities, %d images", err, len(back.Overall), back.Distinct)
	}
	tsv, err := os.ReadFile(filepath.Join(work, "images.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(tsv), "\n"); n != 1+3*rep.Distinct {
		t.Errorf("images.tsv: %d lines, want %d", n, 1+3*rep.Distinct)
	}

	// The SSIM target: every WebP served reaches it as scikit-image
	// measures it (within the 0.01 the two implementations may differ),
	// and the search's own figure agrees with scikit-image's (a CMYK JPEG
	// without a profile aside: Pillow converts it naively, libvips through
	// a CMYK profile: two references).
	tgt := rep.Overall[2]
	if tgt.Served.Transformed < 8 || tgt.Served.Decoded == 0 || tgt.Served.MsP99 <= 0 {
		t.Errorf("target: %d transformed, %d decoded, p99 %.1f ms", tgt.Served.Transformed, tgt.Served.Decoded, tgt.Served.MsP99)
	}
	for _, im := range rep.Images {
		oc := im.Outcomes[2]
		if oc.Skip != "" || oc.NoSSIM != "" || im.Mode == "CMYK" {
			continue
		}
		if oc.SSIM < optimize.DefaultTarget-0.01 || math.Abs(oc.SSIM-oc.Search) > 0.01 {
			t.Errorf("%s: search SSIM %.4f, scikit-image %.4f: want both >= %.2f and within 0.01", im.Name, oc.Search, oc.SSIM, optimize.DefaultTarget-0.01)
		}
	}
}

// TestDist pins the summary statistics: median of an even count is the
// mean of the middle two, the 5th percentile is the nearest rank.
func TestDist(t *testing.T) {
	v := make([]float64, 40)
	for i := range v {
		v[i] = float64(40-i) / 40 // 1/40 .. 1, reversed
	}
	med, p5, lo := dist(v)
	if math.Abs(med-20.5/40) > 1e-12 || p5 != 2.0/40 || lo != 1.0/40 {
		t.Errorf("dist: median %v p5 %v min %v, want %v %v %v", med, p5, lo, 20.5/40, 2.0/40, 1.0/40)
	}
	if m, p, l := dist(nil); m != 0 || p != 0 || l != 0 {
		t.Errorf("dist(nil) = %v %v %v, want zeros", m, p, l)
	}
}

// TestParseRule pins the -rules syntax: a quality, pepd's default, a
// target with the default floor, without a floor, with refining encodes,
// with AVIF; and refuses the rest.
func TestParseRule(t *testing.T) {
	for in, want := range map[string]Rule{
		"q75":              {Name: "fixed q75", Quality: 75},
		"75":               {Name: "fixed q75", Quality: 75},
		"0":                {Name: Rule{Target: optimize.DefaultTarget, TileFloor: optimize.DefaultTileFloor}.String(), Target: optimize.DefaultTarget, TileFloor: optimize.DefaultTileFloor},
		"t0.93":            {Name: Rule{Target: 0.93, TileFloor: optimize.DefaultTileFloor}.String(), Target: 0.93, TileFloor: optimize.DefaultTileFloor},
		"t0.93/f0.90":      {Name: "SSIM 0.93 floor 0.90", Target: 0.93, TileFloor: 0.90},
		"t0.90/f0":         {Name: "SSIM 0.90 no floor", Target: 0.90},
		"t0.95/f0.85/avif": {Name: "SSIM 0.95 floor 0.85 + AVIF", Target: 0.95, TileFloor: 0.85, AVIF: true},
		"t0.95/f0/r2":      {Name: "SSIM 0.95 no floor refine 2", Target: 0.95, Refine: ptr(2)},
		"t0.95/f0/r0/avif": {Name: "SSIM 0.95 no floor refine 0 + AVIF", Target: 0.95, Refine: ptr(0), AVIF: true},
	} {
		got, err := ParseRule(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "q0", "101", "t0", "t1.5", "t0.9/f2", "t0.9/x", "avif", "t0.9/f0.9/avif/q75", "f0.9", "t0.95/r9", "t0.95/r-1", "t0.95/rx"} {
		if r, err := ParseRule(in); err == nil {
			t.Errorf("ParseRule(%q) = %+v, want an error", in, r)
		}
	}
}

// TestSearchSSIM: with SearchSSIM the report's SSIM is the search's own
// (no scikit-image): every image served by an SSIM-target rule has it at
// or above the target, and a fixed rule's lossy WebPs are unmeasured
// ("search only"), its lossless ones 1 (the same pixels).
func TestSearchSSIM(t *testing.T) {
	testdata := filepath.Join("..", "..", "internal", "optimize", "testdata")
	r, err := ParseRule("t0.95/f0")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), Options{Files: []string{testdata}, Qualities: []int{75}, Rules: []Rule{r}, SearchSSIM: true, Work: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.SearchSSIM || len(rep.Overall) != 2 || rep.Overall[1].Rule != "SSIM 0.95 no floor" {
		t.Fatalf("report: search %v, %d rules", rep.SearchSSIM, len(rep.Overall))
	}
	fixed, tgt := rep.Overall[0].Served, rep.Overall[1].Served
	if fixed.Unmeasured["search only"] == 0 || fixed.Measured+fixed.Unmeasured["search only"] != fixed.Transformed {
		t.Errorf("fixed rule: %d measured, unmeasured %v of %d", fixed.Measured, fixed.Unmeasured, fixed.Transformed)
	}
	for _, im := range rep.Images {
		oc := im.Outcomes[0]
		if oc.Skip == "" && (oc.Lossless && oc.SSIM != 1 || !oc.Lossless && oc.NoSSIM != "search only") {
			t.Errorf("%s, fixed rule: lossless %v, SSIM %v, %q: want 1 for lossless (the same pixels), else unmeasured", im.Name, oc.Lossless, oc.SSIM, oc.NoSSIM)
		}
	}
	if tgt.Measured < 8 || tgt.Min < 0.95 {
		t.Errorf("target rule: %d measured, min %.4f: want >= 8 and >= 0.95", tgt.Measured, tgt.Min)
	}
	for _, im := range rep.Images {
		if oc := im.Outcomes[1]; oc.Skip == "" && oc.SSIM != oc.Search {
			t.Errorf("%s: SSIM %v, search %v: want the search's", im.Name, oc.SSIM, oc.Search)
		}
	}
}

func ptr(n int) *int { return &n }
