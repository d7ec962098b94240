package optimize

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSSIMValues checks SSIM against scikit-image 0.19's
// structural_similarity(a, b, data_range=255[, channel_axis=2]) on small
// images; the expected values were printed by scikit-image (the script is
// in the comment of each case), not by this code.
func TestSSIMValues(t *testing.T) {
	// a[y][x] = (29x+13y) % 256, b[y][x] = (31x+7y+(xy % 5)) % 256, 9x8.
	const w, h = 9, 8
	a := make([]byte, w*h)
	b := make([]byte, w*h)
	for y := range h {
		for x := range w {
			a[y*w+x] = byte((x*29 + y*13) % 256)
			b[y*w+x] = byte((x*31 + y*7 + (x*y)%5) % 256)
		}
	}
	rgbA := make([]byte, 0, 3*w*h)
	rgbB := make([]byte, 0, 3*w*h)
	for i := range a {
		rgbA = append(rgbA, a[i], b[i], 255-a[i])
		rgbB = append(rgbB, b[i], a[i], 255-b[i])
	}
	flat := func(v byte) []byte {
		p := make([]byte, 49)
		for i := range p {
			p[i] = v
		}
		return p
	}
	for _, tc := range []struct {
		name        string
		a, b        []byte
		w, h, bands int
		want        float64
	}{
		{"grey 9x8", a, b, w, h, 1, 0.7924655396420311},                        // ssim(a, b, data_range=255)
		{"rgb 9x8", rgbA, rgbB, w, h, 3, 0.7924333923613723},                   // stack([a,b,255-a]) vs stack([b,a,255-b]), channel_axis=2
		{"flat 100 vs 110", flat(100), flat(110), 7, 7, 1, 0.9954764440915066}, // (2*100*110+C1)/(100²+110²+C1)
		{"identical", a, a, w, h, 1, 1},
	} {
		got, err := SSIM(tc.a, tc.b, tc.w, tc.h, tc.bands)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: SSIM %.12f, scikit-image %.12f", tc.name, got, tc.want)
		}
	}
	if _, err := SSIM(a[:36], b[:36], 6, 6, 1); err != errSSIMSize {
		t.Errorf("6x6: err %v, want %v", err, errSSIMSize)
	}
	if _, err := SSIM(a, b[:10], w, h, 1); err == nil {
		t.Error("mismatched lengths: no error")
	}
}

// TestSSIMAgainstSkimage transcodes real images with the SSIM search
// (the test images and the default pages' images) and checks the SSIM the
// search reports for each served lossy WebP against testbed/quality's
// ssim.py (scikit-image, the originals decoded by Pillow): they must agree
// within 0.01, the figure make optimize-quality reports (a CMYK JPEG
// without a profile is left out: see the loop). Needs python3
// with scikit-image and Pillow (make deps).
func TestSSIMAgainstSkimage(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import skimage.metrics, PIL").Run(); err != nil {
		t.Fatalf("%s lacks scikit-image or Pillow (make deps installs python3-skimage python3-pil): %v", py, err)
	}
	var files []string
	for _, root := range []string{"testdata", "../../testbed/corpus/default/site"} {
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".jpg") || strings.HasSuffix(p, ".png") || strings.HasSuffix(p, ".gif")) {
				files = append(files, p)
			}
			return nil
		})
	}
	dir := t.TempDir()
	var list strings.Builder
	ours := map[string]float64{}
	o := DefaultImageOptions()
	o.MinSaving = 0
	for i, f := range files {
		in, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(f) == "cmyk.jpg" {
			// A CMYK JPEG without a profile: libvips converts it to sRGB
			// through a CMYK profile, Pillow (ssim.py) naively (255-C-K):
			// two different references (SSIM 0.953 here, 0.906 there).
			continue
		}
		res := Image(in, o)
		if res.Skip != "" || res.Lossless {
			continue
		}
		key := strconv.Itoa(i)
		orig := filepath.Join(dir, key+filepath.Ext(f))
		webp := filepath.Join(dir, key+".webp")
		if err := os.WriteFile(orig, in, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(webp, res.Body, 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&list, "%s\t%s\t%s\n", key, orig, webp)
		ours[key] = res.SSIM
	}
	if len(ours) < 10 {
		t.Fatalf("only %d lossy WebPs to compare", len(ours))
	}
	pairs := filepath.Join(dir, "pairs.tsv")
	if err := os.WriteFile(pairs, []byte(list.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, "../../testbed/quality/ssim.py", pairs, "1").Output()
	if err != nil {
		t.Fatalf("ssim.py: %v", err)
	}
	var n int
	var worst float64
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) < 2 || f[1] == "skip" {
			continue
		}
		sk, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			t.Fatalf("ssim.py line %q", sc.Text())
		}
		d := math.Abs(sk - ours[f[0]])
		worst = max(worst, d)
		n++
		if d > 0.01 {
			t.Errorf("%s: SSIM %.4f here, %.4f by scikit-image", files[atoi(f[0])], ours[f[0]], sk)
		}
	}
	if n < len(ours)*9/10 {
		t.Fatalf("scikit-image measured %d of %d", n, len(ours))
	}
	t.Logf("%d lossy WebPs: largest difference from scikit-image %.5f", n, worst)
}

func atoi(s string) int { i, _ := strconv.Atoi(s); return i }
