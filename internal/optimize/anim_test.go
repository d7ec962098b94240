package optimize

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"image/gif"
	"image/jpeg"
	"testing"

	"github.com/davidbyttow/govips/v2/vips"
)

// panGIF builds an animated GIF from testdata/photo.jpg: a 320x240 window
// panning over the photograph in three steps, the third frame shown twice
// (an identical frame, which WebP's animation encoder merges into the one
// before it), delays 10, 10, 10 and 50 hundredths of a second, looping
// forever (image/gif, in 256 greys: a photograph a GIF holds exactly).
func panGIF(t *testing.T) []byte {
	t.Helper()
	photo, err := jpeg.Decode(bytes.NewReader(readTestdata(t, "photo.jpg")))
	if err != nil {
		t.Fatal(err)
	}
	grey := make(color.Palette, 256)
	for i := range grey {
		grey[i] = color.Gray{Y: uint8(i)}
	}
	g := &gif.GIF{LoopCount: 0}
	for i, x := range []int{0, 60, 120, 120} {
		f := image.NewPaletted(image.Rect(0, 0, 320, 240), grey)
		draw.Draw(f, f.Bounds(), photo, image.Pt(x, 30), draw.Src)
		g.Image = append(g.Image, f)
		g.Delay = append(g.Delay, []int{10, 10, 10, 50}[i])
		g.Disposal = append(g.Disposal, gif.DisposalNone)
	}
	var b bytes.Buffer
	if err := gif.EncodeAll(&b, g); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// frames decodes every frame of an image with libvips: its pixels as
// flatPixels gives them, one slice per frame, and each frame's duration
// in ms as a browser shows it (Chromium, as Firefox, shows a frame of 10
// ms or less for 100 ms), and the loop count.
func frames(t *testing.T, b []byte) (px [][]byte, durations []int, loop int) {
	t.Helper()
	p := vips.NewImportParams()
	p.FailOnError.Set(true)
	p.NumPages.Set(-1)
	img, err := vips.LoadImageFromBuffer(b, p)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	defer img.Close()
	all, err := flatPixels(img)
	if err != nil {
		t.Fatal(err)
	}
	n := img.Height() / img.PageHeight()
	delays, _ := img.PageDelay()
	size := len(all) / n
	for i := range n {
		px = append(px, all[i*size:(i+1)*size])
		d := 100
		if i < len(delays) && delays[i] > 10 {
			d = delays[i]
		}
		durations = append(durations, d)
	}
	return px, durations, img.GetInt("loop")
}

// checkAnimation checks an animated WebP against the GIF it came from as
// a viewer sees it: at the start of each of the GIF's frames, the WebP's
// frame then on screen reaches the SSIM target (is the same pixels when
// lossless), the whole sequence lasts as long, and it loops as often.
func checkAnimation(t *testing.T, in []byte, res ImageResult, target float64) {
	t.Helper()
	if res.Skip != "" || res.ContentType != TypeWebP {
		t.Fatalf("skip %q, content type %q: want an animated WebP", res.Skip, res.ContentType)
	}
	if len(res.Body) >= len(in) {
		t.Fatalf("%d bytes from %d", len(res.Body), len(in))
	}
	if !bytes.Contains(res.Body[:min(len(res.Body), 64)], []byte("ANIM")) {
		t.Errorf("no ANIM chunk: not an animated WebP")
	}
	gf, gd, gl := frames(t, in)
	wf, wd, wl := frames(t, res.Body)
	if gl != wl {
		t.Errorf("loop count %d, the GIF's %d", wl, gl)
	}
	sum := func(d []int) (s int) {
		for _, v := range d {
			s += v
		}
		return s
	}
	if sum(gd) != sum(wd) {
		t.Errorf("durations %v (%d ms), the GIF's %v (%d ms)", wd, sum(wd), gd, sum(gd))
	}
	p := vips.NewImportParams()
	p.NumPages.Set(-1)
	img, err := vips.LoadImageFromBuffer(in, p)
	if err != nil {
		t.Fatal(err)
	}
	w, h := img.Width(), img.PageHeight()
	img.Close()
	start, j, jEnd := 0, 0, wd[0]
	worst := 1.0
	for i := range gf {
		for start >= jEnd && j+1 < len(wf) {
			j++
			jEnd += wd[j]
		}
		s, err := SSIM(gf[i], wf[j], w, h, 3)
		if err != nil {
			t.Fatal(err)
		}
		worst = min(worst, s)
		start += gd[i]
	}
	if res.Lossless && worst != 1 || worst < target {
		t.Errorf("worst frame SSIM %.4f (lossless %v, target %.2f)", worst, res.Lossless, target)
	}
	t.Logf("%d -> %d bytes, %d frames -> %d, lossless %v q%d, SSIM (worst frame) %.4f, result says %.4f, %d encodes",
		len(in), len(res.Body), len(gf), len(wf), res.Lossless, res.Quality, worst, res.SSIM, res.Encodes)
}

// TestAnimatedGIF: an animated GIF becomes an animated WebP that shows
// the same frames for as long, each frame at the SSIM target; a panning
// photograph (lossy, its repeated frame merged) and the default corpus's
// spinner (a graphic). AVIF is not tried for it (libvips writes no AVIF
// sequence), and an animation whose frames together exceed max_pixels
// passes as it is.
func TestAnimatedGIF(t *testing.T) {
	o := DefaultImageOptions()
	pan := panGIF(t)
	for name, in := range map[string][]byte{"pan": pan, "animated.gif": readTestdata(t, "animated.gif")} {
		t.Run(name, func(t *testing.T) {
			res := Image(in, o)
			checkAnimation(t, in, res, o.Target)
			if want := map[string]int{"pan": 4, "animated.gif": 31}[name]; res.Frames != want {
				t.Errorf("Frames %d, want %d", res.Frames, want)
			}
			if name == "pan" && res.Lossless {
				t.Errorf("the photograph served lossless: its lossy encodes, one frame fewer, were not measured")
			}
			if a := AVIF(in, o, res); a.Skip != SkipAnimated || !bytes.Equal(a.Body, in) {
				t.Errorf("AVIF of an animation: skip %q, %d bytes: want %q and the GIF", a.Skip, len(a.Body), SkipAnimated)
			}
		})
	}
	t.Run("over max_pixels", func(t *testing.T) {
		o := o
		o.MaxPixels = 320 * 240 * 3 // 3 frames' worth of the 4
		res := Image(pan, o)
		if res.Skip != SkipAnimated || !bytes.Equal(res.Body, pan) {
			t.Errorf("skip %q, %d bytes: want %q and the GIF byte for byte", res.Skip, len(res.Body), SkipAnimated)
		}
	})
}
