package optimize

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/davidbyttow/govips/v2/vips"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decoded loads a transcoder output with libvips (strictly) and returns
// its width, height, bands, alpha and ICC presence.
func decoded(t *testing.T, b []byte) (w, h, bands int, alpha, icc bool) {
	t.Helper()
	p := vips.NewImportParams()
	p.FailOnError.Set(true)
	img, err := vips.LoadImageFromBuffer(b, p)
	if err != nil {
		t.Fatalf("output does not decode: %v", err)
	}
	defer img.Close()
	if img.Format() != vips.ImageTypeWEBP {
		t.Fatalf("output format %v, want webp", img.Format())
	}
	if _, err := img.ToBytes(); err != nil { // decode every pixel
		t.Fatalf("output pixels: %v", err)
	}
	return img.Width(), img.Height(), img.Bands(), img.HasAlpha(), img.HasICCProfile()
}

// TestImage transcodes each kind of real file the web serves and checks
// what a browser would show: dimensions (after EXIF rotation), alpha,
// colour (CMYK converted, an sRGB profile kept), the size rule, and the
// SSIM target: a lossy WebP reached it (and the tile floor), a lossless
// one is VP8L.
func TestImage(t *testing.T) {
	o := DefaultImageOptions()
	for _, tc := range []struct {
		file       string
		format     string
		w, h       int
		alpha, icc bool
		skip       string
	}{
		{file: "photo.jpg", format: "jpeg", w: 451, h: 300},
		{file: "progressive.jpg", format: "jpeg", w: 400, h: 267},
		{file: "cmyk.jpg", format: "jpeg", w: 451, h: 300, icc: true},
		{file: "rotated.jpg", format: "jpeg", w: 300, h: 400}, // EXIF orientation 6 applied
		{file: "alpha.png", format: "png", w: 300, h: 200, alpha: true},
		{file: "palette.png", format: "png", w: 300, h: 200},
		{file: "static.gif", format: "gif", w: 200, h: 164},
		{file: "small.gif", format: "gif", skip: SkipNotSmaller},
		{file: "bomb.png", format: "png", skip: SkipPixels},
		{file: "corrupt.jpg", format: "jpeg", skip: SkipUndecodable},
		{file: "truncated.png", format: "png", skip: SkipUndecodable},
		{file: "make.sh", skip: SkipFormat},
	} {
		t.Run(tc.file, func(t *testing.T) {
			in := readTestdata(t, tc.file)
			res := Image(in, o)
			if res.Format != tc.format {
				t.Errorf("format %q, want %q", res.Format, tc.format)
			}
			if res.Skip != tc.skip {
				t.Fatalf("skip %q, want %q", res.Skip, tc.skip)
			}
			if tc.skip != "" {
				if !bytes.Equal(res.Body, in) || res.ContentType != "" {
					t.Fatalf("skipped body is not the input byte for byte")
				}
				return
			}
			if res.ContentType != TypeWebP {
				t.Fatalf("content type %q", res.ContentType)
			}
			if float64(len(res.Body)) > 0.9*float64(len(in)) {
				t.Fatalf("%d bytes from %d: less than 10 %% saved but not skipped", len(res.Body), len(in))
			}
			w, h, _, alpha, icc := decoded(t, res.Body)
			// Lossless is VP8L, lossy VP8, inside the RIFF container.
			if isVP8L := bytes.Contains(res.Body[:min(len(res.Body), 64)], []byte("VP8L")); isVP8L != res.Lossless {
				t.Errorf("%s: VP8L %v, result says lossless %v", tc.format, isVP8L, res.Lossless)
			}
			if !res.Lossless && (res.SSIM < o.Target || res.WorstTile < o.TileFloor || res.Quality == 0) {
				t.Errorf("lossy q%d: SSIM %.4f (target %.2f), worst tile %.4f (floor %.2f)", res.Quality, res.SSIM, o.Target, res.WorstTile, o.TileFloor)
			}
			if w != tc.w || h != tc.h {
				t.Errorf("%dx%d, want %dx%d", w, h, tc.w, tc.h)
			}
			if alpha != tc.alpha {
				t.Errorf("alpha %v, want %v", alpha, tc.alpha)
			}
			if icc != tc.icc {
				t.Errorf("ICC profile %v, want %v", icc, tc.icc)
			}
			t.Logf("%s: %d -> %d bytes (%.0f %%), lossless %v, q%d, SSIM %.4f, worst tile %.4f, %d encodes", tc.file, len(in), len(res.Body),
				100*float64(len(res.Body))/float64(len(in)), res.Lossless, res.Quality, res.SSIM, res.WorstTile, res.Encodes)
		})
	}
}

// TestImageNoEXIF checks that the rotated photo's EXIF block (camera
// data, GPS on a phone's photo) does not survive into the WebP.
func TestImageNoEXIF(t *testing.T) {
	res := Image(readTestdata(t, "rotated.jpg"), DefaultImageOptions())
	if res.Skip != "" {
		t.Fatal(res.Skip)
	}
	if bytes.Contains(res.Body, []byte("EXIF")) || bytes.Contains(res.Body, []byte("Exif")) {
		t.Fatal("EXIF chunk in the output")
	}
}

// FuzzImage feeds mutated images to the transcoder: it must never panic,
// and its output either decodes as WebP or is the input byte for byte.
func FuzzImage(f *testing.F) {
	for _, n := range []string{"photo.jpg", "static.gif", "palette.png", "small.gif"} {
		f.Add(readTestdata(f, n))
	}
	o := DefaultImageOptions()
	o.MaxPixels = 1 << 20
	f.Fuzz(func(t *testing.T, in []byte) {
		res := Image(in, o)
		if res.Skip != "" {
			if !bytes.Equal(res.Body, in) {
				t.Fatal("skipped but changed")
			}
			return
		}
		p := vips.NewImportParams()
		p.FailOnError.Set(true)
		img, err := vips.LoadImageFromBuffer(res.Body, p)
		if err != nil {
			t.Fatalf("output does not decode: %v", err)
		}
		img.Close()
	})
}
