package optimize

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	_ "image/gif"  // header parser for DecodeConfig (dimensions only)
	_ "image/jpeg" // header parser for DecodeConfig (dimensions only)
	_ "image/png"  // header parser for DecodeConfig (dimensions only)
	"io"
	"math"
	"sync"

	"github.com/davidbyttow/govips/v2/vips"
	"golang.org/x/image/riff"
)

// Image formats the optimizer transcodes, as the Content-Type it serves
// them with (lower case, no parameters).
const (
	TypeJPEG = "image/jpeg"
	TypePNG  = "image/png"
	TypeGIF  = "image/gif"
	TypeWebP = "image/webp"
	TypeAVIF = "image/avif"
)

// ImageOptions are the image transform's settings (config optimize.*).
type ImageOptions struct {
	// Target is the SSIM every served WebP must reach against the decoded
	// original (SSIM: Wang et al. 2004 as scikit-image computes it, RGB
	// over white), in (0, 1]: for each image the transform serves the
	// smallest of lossless WebP and the lowest lossy quality on
	// LossyQualities that reaches it (a bounded search: at most 4 lossy
	// encodes, Refine more between the grid's qualities, and 1
	// lossless), or the original when none is at least
	// MinSaving smaller (SkipNotSmaller). Zero: the fixed rule (JPEG lossy
	// at Quality, PNG and GIF lossless), no SSIM measured. Default
	// DefaultTarget (issue 27).
	Target float64
	// TileFloor is the SSIM every 32x32 tile of a served lossy WebP must
	// reach (the mean over a whole image hides damage confined to a small
	// part of it: text on a flat graphic, a subject on a plain
	// background), with Target; 0: no local floor. Default
	// DefaultTileFloor.
	TileFloor float64
	// Quality is the fixed rule's libwebp lossy quality for JPEG photos,
	// 1-100 (cwebp -q), used when Target is 0; the default
	// (DefaultQuality) is the lowest-byte setting whose median SSIM over
	// tp5n's and the default pages' JPEGs is at least 0.95 and 5th
	// percentile at least 0.90 (make optimize-quality, issue 11).
	Quality int
	// MaxPixels bounds width*height of an image the optimizer decodes
	// (a decompression bomb is a few KB of PNG that decodes to gigabytes);
	// larger images pass untouched (SkipPixels).
	MaxPixels int64
	// MinSaving is the fraction of the original the WebP must save to be
	// served (0.10: at most 90 % of the original's bytes); else the
	// original is served (SkipNotSmaller).
	MinSaving float64
	// Refine is how many lossy encodes more the search may spend between
	// the lowest quality on LossyQualities (AVIFQualities) that reaches
	// Target and the next lower one, which does not: each bisects the
	// qualities left between them (40 and 50: 45, then 42 or 47), so the
	// image is served at the lowest quality that reaches Target rather
	// than at the grid's. 0: the grid's quality. Default DefaultRefine.
	Refine int
}

// DefaultQuality is the fixed rule's WebP quality (optimize.quality, used
// with optimize.ssim_target 0), chosen by the quality report (README
// "Quality").
const DefaultQuality = 75

// DefaultTarget is optimize.ssim_target's default: every served image at
// least 0.95 SSIM against its original (issue 27).
const DefaultTarget = 0.95

// DefaultTileFloor is optimize.ssim_tile_floor's default: 0, no floor
// per 32x32 tile. A floor of 0.90 (issue 27's floor for a whole image,
// applied to each part of it) keeps soft edges out of small parts of an
// image, but over all 9,885 images of tp5n and the default pages it kept
// 0.48 of the image bytes against 0.37 without it, both with every image
// at least 0.95 (README "The trade-off curve"): the acceptance
// (every image >= 0.90, median >= 0.95, bytes <= 0.40) is met without
// the floor only.
const DefaultTileFloor = 0

// LossyQualities are the lossy WebP qualities the SSIM search chooses
// from, ascending: 15 of them, so that a binary search settles in at most
// 4 encodes. Denser at the top, where the hard images (fine detail on a
// dark field, small text) reach 0.95.
var LossyQualities = []int{10, 20, 30, 40, 50, 60, 65, 70, 75, 80, 85, 90, 94, 97, 100}

// DefaultMaxPixels is optimize.max_pixels's default: 40 megapixels, more
// than any photograph a page embeds, well below a bomb.
const DefaultMaxPixels = 40_000_000

// DefaultImageOptions returns the defaults: DefaultTarget, DefaultQuality
// (for the fixed rule), DefaultMaxPixels, 10 % minimum saving (issue 11).
func DefaultImageOptions() ImageOptions {
	return ImageOptions{Target: DefaultTarget, TileFloor: DefaultTileFloor, Quality: DefaultQuality, MaxPixels: DefaultMaxPixels, MinSaving: 0.10, Refine: DefaultRefine}
}

// DefaultRefine is optimize.ssim_refine's default: the refining encodes
// the search spends between two qualities of its grid
// (ImageOptions.Refine). Over tp5n's and the default pages' 9,885
// distinct images (README "Between the grid's qualities"), 1 serves 2.3 %
// fewer image bytes than 0 for 13 % more CPU per image, 2 3.2 % for 23 %.
const DefaultRefine = 1

// MaxRefine bounds ImageOptions.Refine (and optimize.ssim_refine). The
// grids' widest gap (LossyQualities, AVIFQualities: 10 apart) settles to
// one quality in 4 bisections, so a Refine above 4 costs nothing more.
const MaxRefine = 8

// Skip reasons: why a body was served as the origin sent it. They are the
// values of the reason label of pep_optimize_skipped_total.
const (
	SkipNotSmaller  = "not smaller"      // the result saved less than MinSaving
	SkipPixels      = "over pixel limit" // width*height > MaxPixels
	SkipUndecodable = "undecodable"      // corrupt, truncated, or a variant the decoder refuses
	SkipFormat      = "unknown format"   // the bytes are not the JPEG, PNG or GIF the type names
	SkipAnimated    = "animated"         // an animated image other than a GIF, or over the pixel limit, or asked of AVIF (passes as it is)
	SkipTooLarge    = "body too large"   // over optimize.max_body_bytes: not buffered
	SkipOverload    = "overload"         // the transform queue was full
	SkipDeferred    = "deferred"         // not finished within optimize.deadline: served untransformed, finished for the next miss
	SkipBacklog     = "backlog"          // predicted to finish after optimize.deadline (the work queued ahead): served untransformed at once, queued for the next miss
	SkipNoTransform = "no-transform"     // Cache-Control: no-transform (request or response)
	SkipRange       = "range"            // a Range request or a Content-Range response
	SkipEncoded     = "encoded"          // the origin's own Content-Encoding (left alone)
	SkipExcluded    = "excluded site"    // the host is in optimize.exclude
	SkipNoAccept    = "not accepted"     // Accept has no image/webp, Accept-Encoding no gzip
	SkipSmall       = "too small"        // below the text transform's minimum size
	SkipNoTarget    = "no ssim target"   // AVIF asked with optimize.ssim_target 0 (the fixed rule makes WebP only)
	SkipRewritten   = "rewritten"        // text pepd's URL rewriter encodes again itself (Options.Rewritten): passed at once
)

// skipReasons lists every Skip reason, for the metric's series at 0 (a
// reason added above belongs here too).
var skipReasons = []string{SkipNotSmaller, SkipPixels, SkipUndecodable, SkipFormat, SkipAnimated,
	SkipTooLarge, SkipOverload, SkipDeferred, SkipBacklog, SkipNoTransform, SkipRange, SkipEncoded,
	SkipExcluded, SkipNoAccept, SkipSmall, SkipNoTarget, SkipRewritten}

// ImageResult is the outcome of Image: Body and ContentType are what to
// serve; Skip is empty when Body is the transcoded image (TypeWebP,
// TypeJPEG for Image's JPEG fallback, TypeAVIF from AVIF), else the
// reason the original (Body = the input, ContentType = "") is served.
type ImageResult struct {
	Body        []byte
	ContentType string
	Skip        string
	// Format is the input's format ("jpeg", "png", "gif"; "" if unknown).
	Format string
	// Lossless is true when the WebP served is lossless; Quality is the
	// lossy quality when it is lossy (0 otherwise).
	Lossless bool
	Quality  int
	// SSIM is the served WebP's SSIM against the decoded original (1 for
	// lossless: the same pixels); 0 when not measured (the fixed rule, an
	// image under 7x7, or nothing served). With SkipNotSmaller after a
	// search it is the SSIM of the smallest candidate that reached the
	// target, if any.
	SSIM float64
	// WorstTile is the lowest SSIM over one 32x32 tile of the image
	// (ImageOptions.TileFloor), measured with SSIM.
	WorstTile float64
	// Encodes is the number of encodes run (the search's cost: WebP,
	// then JPEG for the fallback; AVIF's own).
	Encodes int
	// Frames is the number of frames of an animated GIF that was decoded
	// (each encode wrote them all; SSIM and WorstTile are then the worst
	// frame's); 0 for a still image.
	Frames int
}

var vipsOnce sync.Once

// startVips starts libvips once per process: no operation cache (every
// body is new: caching them is Squid's job), one libvips worker thread
// per operation (the transcode queue bounds the concurrency), errors only
// in the log.
func startVips() {
	vipsOnce.Do(func() {
		vips.LoggingSettings(func(string, vips.LogLevel, string) {}, vips.LogLevelError)
		vips.Startup(&vips.Config{ConcurrencyLevel: 1, MaxCacheFiles: 0, MaxCacheMem: 0, MaxCacheSize: 0})
	})
}

// Sniff returns the image format of b by its magic bytes: "jpeg" (FF D8
// FF), "png" (89 50 4E 47 0D 0A 1A 0A), "gif" ("GIF87a"/"GIF89a"), or "".
func Sniff(b []byte) string {
	switch {
	case len(b) >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF:
		return "jpeg"
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "png"
	case bytes.HasPrefix(b, []byte("GIF87a")), bytes.HasPrefix(b, []byte("GIF89a")):
		return "gif"
	}
	return ""
}

// errSkip carries a skip reason out of the pipeline.
type errSkip string

func (e errSkip) Error() string { return string(e) }

// Image transcodes a JPEG, PNG or GIF to WebP with libvips (libwebp's
// encoder, libjpeg-turbo/libspng/libnsgif decoders); an animated GIF
// becomes an animated WebP with the same frames, delays and loop count,
// chosen by its worst frame's SSIM (newEncoder, encoder.ssim). EXIF
// orientation applied (the pixels rotated, the tag dropped), colour in an
// embedded ICC profile or in CMYK converted to sRGB and a 0.5 KB sRGB
// profile kept, alpha kept, other metadata (EXIF, XMP) dropped.
//
// With o.Target set (the default) the WebP is chosen per image by its SSIM
// against the decoded original (search): lossless WebP (tried for PNG
// and GIF, not for JPEG) or the
// lowest lossy quality on LossyQualities that reaches o.Target, whichever
// is smaller; an image under 7x7 pixels, where SSIM has no window, is
// only tried lossless. A JPEG that no WebP serves (none reaches o.Target
// within the size limit) is searched again as a JPEG with 4:4:4 chroma
// (jpegCodec), served as TypeJPEG when one qualifies. With o.Target 0,
// the fixed rule: JPEG lossy at o.Quality, PNG and GIF lossless.
//
// Only the header is parsed before the pixel limit is checked. It never
// returns an error: a body it cannot or should not transcode, or whose
// WebP saves less than o.MinSaving, comes back unchanged with the reason
// in Skip. Safe for concurrent use.
func Image(in []byte, o ImageOptions) ImageResult {
	res, e := open(in, o)
	if e == nil {
		return res
	}
	defer e.close()
	limit := int(float64(len(in)) * (1 - o.MinSaving))
	var c candidate
	var err error
	if o.Target > 0 {
		c, err = e.search(webpCodec, o.Target, o.TileFloor, o.Refine, limit, res.Format != "jpeg", -1)
	} else {
		c, err = e.fixed(o.Quality, res.Format != "jpeg")
	}
	if err == nil && o.Target > 0 && res.Format == "jpeg" && (c.out == nil || len(c.out) > limit) {
		// No WebP reaches the target within limit: a JPEG whose colour
		// detail WebP's 4:2:0 chroma cannot keep (README "JPEG as JPEG").
		j, err := e.search(jpegCodec, o.Target, o.TileFloor, o.Refine, limit, false, -1)
		if err == nil && j.out != nil {
			return res.chosen(e, j, nil, limit, TypeJPEG)
		}
	}
	return res.chosen(e, c, err, limit, TypeWebP)
}

// DefaultQuickQuality is optimize.quick_quality's default: the one lossy
// WebP quality Quick tries. Over 457 images of tp5n (every 19th of the
// 8,578 the search transforms, each encoded at all 15 LossyQualities;
// README "The quick WebP under a backlog"), one encode at 80 reached the
// 0.95 target within the size limit for 335 of them, and the 457 took
// 0.43 of their original bytes (the rest served as they are), against
// 0.31 for the search's 4.3 encodes and 0.48-0.66 at 60-75 or 85-90.
const DefaultQuickQuality = 80

// Quick is Image's one-encode form for a response that cannot wait for
// the search (pepd's backlog, Server.transform): one lossy WebP at quality
// (1-100), served when its SSIM against the decoded original reaches
// o.Target and its lowest 32x32 tile o.TileFloor, and it is at least
// o.MinSaving smaller; never lossless, never AVIF or the JPEG fallback.
// Else Body is in and Skip the reason: SkipNotSmaller (below the target,
// or not smaller), SkipNoTarget when o.Target is 0 (Quick is only chosen
// by the SSIM target), or Image's reasons (undecodable, animated, over the
// pixel limit, ...). An image under 7x7 pixels (no SSIM window) gets
// nothing. Quick never returns an error; safe for concurrent use. It costs
// one encode and one SSIM, about a quarter of the search.
func Quick(in []byte, o ImageOptions, quality int) ImageResult {
	return targetSearch(in, o, codec{qualities: []int{quality}, encode: (*encoder).webp}, -1, -1, TypeWebP)
}

// targetSearch is AVIF's and Quick's one course: nothing without a target
// (SkipNoTarget), open's checks, then cd's search for the smallest lossy
// candidate at o.Target and o.TileFloor of at most len(in)*(1-o.MinSaving)
// bytes and, when maxBytes is not negative, at most maxBytes, served as
// contentType (chosen). start is the search's first probe, an index on
// cd.qualities, or -1 for none (search).
func targetSearch(in []byte, o ImageOptions, cd codec, maxBytes, start int, contentType string) ImageResult {
	if o.Target <= 0 {
		return ImageResult{Body: in, Format: Sniff(in), Skip: SkipNoTarget}
	}
	res, e := open(in, o)
	if e == nil {
		return res
	}
	defer e.close()
	if e.pages > 1 && contentType != TypeWebP {
		res.Skip = SkipAnimated // libvips writes no AVIF image sequence
		return res
	}
	limit := int(float64(len(in)) * (1 - o.MinSaving))
	if maxBytes >= 0 && maxBytes < limit {
		limit = maxBytes
	}
	c, err := e.search(cd, o.Target, o.TileFloor, o.Refine, limit, false, start)
	return res.chosen(e, c, err, limit, contentType)
}

// open checks in's format, header and pixel count and decodes it: the
// encoder, or nil and res with the input and the reason in Skip.
func open(in []byte, o ImageOptions) (ImageResult, *encoder) {
	res := ImageResult{Body: in, Format: Sniff(in)}
	if res.Format == "" {
		res.Skip = SkipFormat
		return res, nil
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(in))
	if err != nil {
		res.Skip = SkipUndecodable
		return res, nil
	}
	if o.MaxPixels > 0 && int64(cfg.Width)*int64(cfg.Height) > o.MaxPixels {
		res.Skip = SkipPixels
		return res, nil
	}
	e, err := newEncoder(in, o.MaxPixels)
	if err != nil {
		var s errSkip
		if errors.As(err, &s) {
			res.Skip = string(s)
		} else {
			res.Skip = SkipUndecodable
		}
		return res, nil
	}
	return res, e
}

// AVIFEffort is the AV1 encoder's effort for AVIF (libvips heifsave
// effort, 0-9, libaom through libheif): libvips's default 4. Measured over
// the default pages' images (README "AVIF"): at 4 an AVIF at the WebP's
// SSIM target is smaller than the WebP for 23 of 81 images and the
// images' bytes are 0.86 of the WebPs'; at 2, 17 images and 0.93, at a
// third of the CPU.
const AVIFEffort = 4

// AVIFQualities are the AVIF qualities (libvips heifsave Q, 1-100) the
// SSIM search chooses from, ascending: 15 of them, at most 4 encodes by
// binary search, as LossyQualities for WebP; 2 when the search starts at
// the quality the WebP's predicts and that prediction is right (avifStart).
var AVIFQualities = []int{10, 20, 30, 40, 50, 55, 60, 65, 70, 75, 80, 85, 90, 95, 100}

// AVIF is the second image format (issue 27), for requests whose Accept
// names image/avif: the smallest lossy AVIF (AV1 in HEIF, libheif's libaom
// encoder through libvips, AVIFEffort, 8 bits) on AVIFQualities whose SSIM
// against the decoded original reaches o.Target and whose lowest 32x32
// tile reaches o.TileFloor (the same measurement as Image's), provided it
// is smaller than what Image serves for the same input: webp is Image's
// result for in (with the same o). The AVIF must be smaller than
// webp.Body when Image serves one (a WebP or its JPEG fallback), and at
// most len(in)*(1-o.MinSaving) bytes in any case. Pixels are prepared as for Image (EXIF orientation applied, ICC
// or CMYK to sRGB, alpha kept, metadata stripped).
//
// The result has ContentType TypeAVIF when an AVIF qualifies; else Body
// is in, ContentType "" and Skip the reason: SkipNotSmaller when no AVIF
// reaches the target below that size, SkipNoTarget when o.Target is 0
// (AVIF is only chosen by the SSIM target), or Image's reasons
// (undecodable, animated, over the pixel limit, ...). An image under 7x7
// pixels (no SSIM window) gets no AVIF. AVIF never returns an error.
// Safe for concurrent use; an encode costs several times a WebP encode's
// CPU (README "AVIF"), so pepd runs it behind the response
// (Options.AVIF).
func AVIF(in []byte, o ImageOptions, webp ImageResult) ImageResult {
	maxBytes, start := -1, -1
	if webp.Skip == "" {
		maxBytes = len(webp.Body) - 1
	}
	if webp.ContentType == TypeWebP && !webp.Lossless && webp.Quality > 0 {
		start = avifStart(webp.Quality)
	}
	return targetSearch(in, o, avifCodec, maxBytes, start, TypeAVIF)
}

// avifStart is the AVIF search's first probe for an image whose lossy WebP
// at the same SSIM target has quality webpQuality (1-100): the index on
// AVIFQualities nearest 0.7*webpQuality + 5, the AVIF quality that a lossy
// WebP's quality predicts. Fitted over the 148 images of a 500-image sample
// of tp5n and the default pages whose AVIF was smaller than their lossy
// WebP (README "Where the AVIF search starts"): the nearest grid index is
// the search's answer for 76 of them, and the search that starts there
// (search's start) probes 2.6 grid qualities per image instead of a binary
// search's 4.
func avifStart(webpQuality int) int {
	p := 0.7*float64(webpQuality) + 5
	best := 0
	for i, q := range AVIFQualities {
		if math.Abs(float64(q)-p) < math.Abs(float64(AVIFQualities[best])-p) {
			best = i
		}
	}
	return best
}

// chosen is the one ending of Image and AVIF: res with the encoder's
// count, and c's body as contentType if the search succeeded (err nil)
// within limit bytes; else res unchanged with the reason in Skip
// (SkipUndecodable, SkipNotSmaller).
func (res ImageResult) chosen(e *encoder, c candidate, err error, limit int, contentType string) ImageResult {
	res.Encodes = e.encodes
	if e.pages > 1 {
		res.Frames = e.pages
	}
	if err != nil {
		res.Skip = SkipUndecodable
		return res
	}
	res.SSIM, res.WorstTile = c.ssim, c.worst
	if c.out == nil || len(c.out) > limit {
		res.Skip = SkipNotSmaller
		return res
	}
	res.Body, res.ContentType = c.out, contentType
	res.Lossless, res.Quality = c.lossless, c.quality
	return res
}

// ToPNG decodes an image libvips reads (WebP, AVIF, JPEG, PNG, GIF) and
// returns its pixels as a PNG (lossless: the same pixels, for a tool that
// cannot decode the format itself, such as make optimize-quality's
// scikit-image for AVIF). Errors: libvips cannot decode b, or encode PNG.
func ToPNG(b []byte) ([]byte, error) {
	startVips()
	p := vips.NewImportParams()
	p.FailOnError.Set(true)
	img, err := vips.LoadImageFromBuffer(b, p)
	if err != nil {
		return nil, fmt.Errorf("optimize: decode: %w", err)
	}
	defer img.Close()
	ep := vips.NewPngExportParams()
	ep.Compression = 1
	out, _, err := img.ExportPng(ep)
	if err != nil {
		return nil, fmt.Errorf("optimize: png: %w", err)
	}
	return out, nil
}

// candidate is one WebP encode of an image: its bytes, how it was made,
// and its SSIM against the original (0: not measured).
type candidate struct {
	out      []byte
	lossless bool
	quality  int
	ssim     float64
	worst    float64 // the lowest tile's SSIM (ssimTiles)
}

// encoder holds one decoded image for several encodes: the libvips image
// after EXIF rotation and conversion to sRGB (decoded once: libvips keeps
// a loaded image's pixels for the life of the image), and, once the
// search needs them, its reference pixels for SSIM.
type encoder struct {
	img     *vips.ImageRef
	ref     []byte // sRGB over white, 3 bands, row by row; nil until needed
	encodes int
	inBytes int // the original's size
	// pages is the number of frames stacked in img (1 unless an animated
	// GIF; img.PageHeight() is one frame's height). Each encode writes
	// them all, as an animation, and ssim compares them all.
	pages   int
	frameOf []int // expandFrames' map, built on first use
}

// newEncoder decodes in with libvips. Decoding is strict (libvips
// fail=true: a truncated or corrupt file is an error, not grey pixels). An
// animated GIF is decoded whole, its frames stacked (encoder.pages), when
// all its frames together have at most maxPixels pixels (0: no limit);
// any other animated image, or one over the limit, is
// errSkip(SkipAnimated).
func newEncoder(in []byte, maxPixels int64) (*encoder, error) {
	startVips()
	p := vips.NewImportParams()
	p.FailOnError.Set(true)
	img, err := vips.LoadImageFromBuffer(in, p)
	if err != nil {
		return nil, fmt.Errorf("optimize: load: %w", err)
	}
	e := &encoder{img: img, inBytes: len(in), pages: 1}
	if n := img.Pages(); n > 1 {
		frame := int64(img.Width()) * int64(img.Height())
		img.Close()
		if Sniff(in) != "gif" || maxPixels > 0 && int64(n)*frame > maxPixels {
			return nil, errSkip(SkipAnimated)
		}
		// An animated GIF: every frame, as libvips composes it (disposal
		// and transparency applied), stacked into one image n pages tall
		// with each frame's delay and the loop count in its metadata, which
		// webpsave writes as an animated WebP (RIFF ANIM/ANMF chunks).
		p.NumPages.Set(-1)
		if img, err = vips.LoadImageFromBuffer(in, p); err != nil {
			return nil, fmt.Errorf("optimize: load frames: %w", err)
		}
		e.img, e.pages = img, n
		if img.PageHeight()*n != img.Height() {
			e.close()
			return nil, errSkip(SkipAnimated) // frames of different sizes: not one stack
		}
		return e, nil // a GIF: no EXIF orientation, no ICC profile
	}
	if err := img.AutoRotate(); err != nil {
		e.close()
		return nil, fmt.Errorf("optimize: autorotate: %w", err)
	}
	if img.HasICCProfile() || img.Interpretation() == vips.InterpretationCMYK {
		if err := img.OptimizeICCProfile(); err != nil {
			e.close()
			return nil, fmt.Errorf("optimize: icc: %w", err)
		}
	}
	return e, nil
}

func (e *encoder) close() { e.img.Close() }

// codec is one output format of the SSIM search: its lossy qualities,
// ascending, its encoder, and whether it has a lossless fallback (the
// search's answer for an image it cannot measure).
type codec struct {
	qualities []int
	encode    func(e *encoder, quality int, lossless bool) (candidate, error)
	lossless  bool
}

var (
	webpCodec = codec{LossyQualities, (*encoder).webp, true}
	avifCodec = codec{AVIFQualities, (*encoder).avif, false}
	jpegCodec = codec{LossyQualities, (*encoder).jpeg, false}
)

// ProgressiveMinBytes is the original's size from which the JPEG
// fallback (jpegCodec) is progressive: 10,000 bytes, as Stefanov's study
// of 10,000 images found (progressive is smaller above about 10 KB,
// baseline below). Over tp5n's 226 JPEGs that no WebP serves, this
// threshold gave 1.784 MB against 1.781 for the smaller of both per image,
// 1.803 all progressive, 1.820 all baseline (README "JPEG as JPEG").
const ProgressiveMinBytes = 10_000

// jpeg encodes the image as a JPEG at quality (libvips jpegsave,
// libjpeg-turbo; progressive from ProgressiveMinBytes of original) with
// optimized Huffman tables, metadata stripped and full-resolution chroma
// (4:4:4): the fallback for a JPEG whose lossy WebP, always 4:2:0 (lossy
// WebP is VP8, RFC 9649 §1; VP8 codes YUV 4:2:0, RFC 6386 §2), cannot
// reach the SSIM target below the original's size, typically small
// banners with coloured text saved at quality 95-100. Lossless is not
// offered.
func (e *encoder) jpeg(quality int, lossless bool) (candidate, error) {
	ep := vips.NewJpegExportParams()
	ep.Quality = quality
	ep.StripMetadata = true
	ep.OptimizeCoding = true
	ep.Interlace = e.inBytes >= ProgressiveMinBytes
	ep.SubsampleMode = vips.VipsForeignSubsampleOff
	return e.lossyOnly("jpeg", quality, lossless, func() ([]byte, *vips.ImageMetadata, error) { return e.img.ExportJpeg(ep) })
}

// lossyOnly is the encode of a format the search uses lossy only (jpeg,
// avif): an error for lossless, else export's bytes as the candidate at
// quality, counted in e.encodes.
func (e *encoder) lossyOnly(format string, quality int, lossless bool, export func() ([]byte, *vips.ImageMetadata, error)) (candidate, error) {
	if lossless {
		return candidate{}, fmt.Errorf("optimize: lossless %s is not used", format)
	}
	e.encodes++
	out, _, err := export()
	if err != nil {
		return candidate{}, fmt.Errorf("optimize: %s: %w", format, err)
	}
	return candidate{out: out, quality: quality}, nil
}

// avif encodes the image as lossy AVIF at quality (lossless is not
// offered: AV1's lossless mode is larger than lossless WebP on the
// graphics where it would matter).
func (e *encoder) avif(quality int, lossless bool) (candidate, error) {
	ep := vips.NewAvifExportParams()
	ep.Quality = quality
	ep.StripMetadata = true
	ep.Effort = AVIFEffort
	ep.Bitdepth = 8
	return e.lossyOnly("avif", quality, lossless, func() ([]byte, *vips.ImageMetadata, error) { return e.img.ExportAvif(ep) })
}

// webp encodes the image: lossy at quality, or lossless.
func (e *encoder) webp(quality int, lossless bool) (candidate, error) {
	ep := vips.NewWebpExportParams()
	ep.Quality = quality
	ep.StripMetadata = true
	if lossless {
		ep.Lossless = true
		ep.Quality = 100 // with lossless: effort, not fidelity
	}
	e.encodes++
	out, _, err := e.img.ExportWebp(ep)
	if err != nil {
		return candidate{}, fmt.Errorf("optimize: webp: %w", err)
	}
	c := candidate{out: dropWebPMetadata(out), lossless: lossless}
	if lossless {
		c.ssim, c.worst = 1, 1
	} else {
		c.quality = quality
	}
	return c, nil
}

// fixed is the rule before issue 27: a JPEG lossy at quality, a PNG or
// GIF (graphics) lossless. Lossy WebP at any quality up to 85 left the 5th
// percentile SSIM of tp5n's PNGs and GIFs under 0.90 (README "Quality").
func (e *encoder) fixed(quality int, lossless bool) (candidate, error) {
	return e.webp(quality, lossless)
}

// search returns the smallest encode in cd's format (webpCodec,
// avifCodec) whose SSIM reaches target and whose
// size is at most limit bytes, or a candidate with nil out when there is
// none: lossless WebP first when tryLossless (its SSIM is 1, and its size
// bounds every lossy candidate), then a binary search over cd.qualities
// for the lowest quality that reaches target, assuming SSIM and size grow
// with quality: a probe larger than the best so far sends the search
// lower without measuring it; then up to refine encodes bisecting the
// qualities between that one and the grid's next lower one
// (ImageOptions.Refine). Lossless is not tried for a JPEG: its
// decoded pixels carry the JPEG's block noise, which lossless WebP spends
// bytes on (photo.jpg: 122 KB against the JPEG's 27 KB), at several times a
// lossy encode's CPU. An image under 7x7
// pixels (no SSIM window), or one whose SSIM cannot be measured, is
// served lossless WebP or not at all (never AVIF). A lossy candidate qualifies when its
// SSIM reaches target and its lowest 32x32 tile reaches floor.
func (e *encoder) search(cd codec, target, floor float64, refine, limit int, tryLossless bool, start int) (candidate, error) {
	var best candidate
	bound := limit
	consider := func(c candidate) {
		if len(c.out) <= bound {
			best, bound = c, len(c.out)-1
		}
	}
	measurable := e.img.Width() >= ssimMinSide && e.img.PageHeight() >= ssimMinSide
	if !measurable && !cd.lossless {
		return candidate{}, nil // no SSIM, no lossless: nothing is safe
	}
	if tryLossless || !measurable {
		c, err := e.webp(0, true)
		if err != nil {
			return candidate{}, err
		}
		consider(c)
		if !measurable {
			return best, nil
		}
	}
	var closest candidate // the smallest lossy candidate that reached target
	closestAt := -1       // its index on cd.qualities
	errUnmeasurable := errors.New("unmeasurable")
	// probe encodes at quality q; fits is false when the result is larger
	// than bound (then it is not measured).
	probe := func(q int) (c candidate, fits bool, err error) {
		if c, err = cd.encode(e, q, false); err != nil || len(c.out) > bound {
			return c, false, err
		}
		st, err := e.ssim(c.out)
		if err != nil {
			return c, false, errUnmeasurable
		}
		c.ssim, c.worst = st.mean, st.worst
		return c, true, nil
	}
	lo, hi := 0, len(cd.qualities)-1
	lowestTried := false
	next, predicted := start, start >= 0 // next: the index to probe instead of the middle, or -1
	for lo <= hi {
		mid := (lo + hi) / 2
		if next >= lo && next <= hi {
			mid = next
		}
		next = -1
		c, fits, err := probe(cd.qualities[mid])
		first := predicted
		predicted = false
		if !fits && err == nil {
			hi = mid - 1
			if lowestTried || lo > hi {
				continue
			}
			// Too large already: the lowest quality left next, and stop
			// if it is too large as well (a flat graphic whose lossless
			// WebP is small costs 2 lossy encodes, not 4).
			lowestTried, mid = true, lo
			if c, fits, err = probe(cd.qualities[lo]); !fits && err == nil {
				break
			}
		}
		if errors.Is(err, errUnmeasurable) {
			// Pixels the metric cannot compare (a colour space libvips
			// cannot bring to sRGB): only the same pixels are safe.
			if !cd.lossless {
				return candidate{}, nil
			}
			return e.losslessOnly(limit, tryLossless, best)
		}
		if err != nil {
			return candidate{}, err
		}
		if c.ssim >= target && c.worst >= floor {
			consider(c)
			closest, closestAt = c, mid
			hi = mid - 1
		} else {
			lo = mid + 1
		}
		if first && mid == start {
			next = hi // the prediction's neighbour: below it when it qualified
			if lo > mid {
				next = lo // above it when it fell short
			}
		}
	}
	if closestAt > 0 && closestAt == lo {
		// The grid's answer is q[lo], and q[lo-1] fell short: bisect the
		// qualities between them, refine encodes at most, for the lowest
		// that still reaches target (README "Between the grid's
		// qualities").
		fail, pass := cd.qualities[lo-1], cd.qualities[lo]
		for range refine {
			if pass-fail < 2 {
				break
			}
			q := (fail + pass) / 2
			c, fits, err := probe(q)
			if err != nil {
				break // keep the grid's answer
			}
			if fits && c.ssim >= target && c.worst >= floor {
				consider(c)
				closest, pass = c, q
			} else {
				fail = q
			}
		}
	}
	if best.out == nil {
		best.ssim, best.worst = closest.ssim, closest.worst
	}
	return best, nil
}

// losslessOnly is search's answer when SSIM cannot be measured: the
// lossless WebP if it is at most limit bytes (best already holds it when
// tried is true), else a candidate with nil out.
func (e *encoder) losslessOnly(limit int, tried bool, best candidate) (candidate, error) {
	if tried {
		if best.lossless {
			return best, nil
		}
		return candidate{}, nil
	}
	c, err := e.webp(0, true)
	if err != nil || len(c.out) > limit {
		return candidate{}, err
	}
	return c, nil
}

// ssim decodes a WebP with libvips and returns its SSIM against the
// original (both sRGB, composited over white, 3 bands: what
// testbed/quality's scikit-image measures), and its lowest ssimTile tile;
// for an animation, its lowest frame's SSIM and its lowest tile in any
// frame.
func (e *encoder) ssim(webp []byte) (ssimStats, error) {
	if e.ref == nil {
		ref, err := flatPixels(e.img)
		if err != nil {
			return ssimStats{}, err
		}
		e.ref = ref
	}
	p := vips.NewImportParams()
	p.FailOnError.Set(true)
	if e.pages > 1 {
		p.NumPages.Set(-1) // every frame, stacked as in e.img
	}
	img, err := vips.LoadImageFromBuffer(webp, p)
	if err != nil {
		return ssimStats{}, fmt.Errorf("optimize: decode webp: %w", err)
	}
	defer img.Close()
	px, err := flatPixels(img)
	if err != nil {
		return ssimStats{}, err
	}
	if e.pages > 1 {
		px = e.expandFrames(px)
	}
	if len(px) != len(e.ref) {
		return ssimStats{}, fmt.Errorf("optimize: the encode has %dx%d pixels, the original %dx%d", img.Width(), img.Height(), e.img.Width(), e.img.Height())
	}
	if e.pages == 1 {
		return ssimTiles(e.ref, px, e.img.Width(), e.img.Height(), 3, ssimTile)
	}
	// An animation: each frame against its original, and the worst frame
	// is the image's (over all frames together one frame could fall
	// below the target unseen: 0.85 for one of tp5n's GIFs whose stack
	// reached 0.95).
	size := len(e.ref) / e.pages
	all := ssimStats{mean: 1, worst: 1}
	for i := range e.pages {
		st, err := ssimTiles(e.ref[i*size:(i+1)*size], px[i*size:(i+1)*size], e.img.Width(), e.img.PageHeight(), 3, ssimTile)
		if err != nil {
			return ssimStats{}, err
		}
		all.mean, all.worst = min(all.mean, st.mean), min(all.worst, st.worst)
	}
	return all, nil
}

// expandFrames returns an animated encode's frames (px: flatPixels of
// all of them, stacked) as one frame per frame of the original, in the
// original's order, or px unchanged when its frame count is not the one
// expected (then ssim's size check fails). libwebp's animation encoder
// (WebPAnimEncoder) merges a frame identical to the one before it into
// that frame, adding its duration, so an encode shows the same sequence
// in fewer frames; frame i of the original is shown by encode frame
// e.frameOf[i], counted over the reference's runs of identical frames.
func (e *encoder) expandFrames(px []byte) []byte {
	size := len(e.ref) / e.pages
	if e.frameOf == nil {
		e.frameOf = make([]int, e.pages)
		for i := 1; i < e.pages; i++ {
			e.frameOf[i] = e.frameOf[i-1]
			if !bytes.Equal(e.ref[(i-1)*size:i*size], e.ref[i*size:(i+1)*size]) {
				e.frameOf[i]++
			}
		}
	}
	if len(px) == len(e.ref) || len(px) != (e.frameOf[e.pages-1]+1)*size {
		return px
	}
	out := make([]byte, 0, len(e.ref))
	for _, j := range e.frameOf {
		out = append(out, px[j*size:(j+1)*size]...)
	}
	return out
}

// ssimTile is the tile, in window positions (about pixels), over which
// the search's local floor (ImageOptions.TileFloor) takes SSIM's mean.
const ssimTile = 32

// white is the background flatPixels composites alpha over (a page's
// usual background; testbed/quality's ssim.py does the same).
var white = &vips.Color{R: 255, G: 255, B: 255}

// flatPixels returns img's pixels as 8-bit sRGB composited over white,
// 3 bytes per pixel, row by row, leaving img unchanged.
func flatPixels(img *vips.ImageRef) ([]byte, error) {
	c, err := img.Copy()
	if err != nil {
		return nil, fmt.Errorf("optimize: pixels: %w", err)
	}
	defer c.Close()
	if c.Interpretation() != vips.InterpretationSRGB || c.BandFormat() != vips.BandFormatUchar {
		if err := c.ToColorSpace(vips.InterpretationSRGB); err != nil {
			return nil, fmt.Errorf("optimize: pixels: srgb: %w", err)
		}
	}
	if c.HasAlpha() {
		if err := c.Flatten(white); err != nil {
			return nil, fmt.Errorf("optimize: pixels: flatten: %w", err)
		}
	}
	if c.BandFormat() != vips.BandFormatUchar {
		if err := c.Cast(vips.BandFormatUchar); err != nil {
			return nil, fmt.Errorf("optimize: pixels: cast: %w", err)
		}
	}
	if c.Bands() != 3 {
		return nil, fmt.Errorf("optimize: pixels: %d bands after conversion to sRGB", c.Bands())
	}
	px, err := c.ToBytes()
	if err != nil {
		return nil, fmt.Errorf("optimize: pixels: %w", err)
	}
	if len(px) != c.Width()*c.Height()*3 {
		return nil, fmt.Errorf("optimize: pixels: %d bytes for %dx%d", len(px), c.Width(), c.Height())
	}
	return px, nil
}

// WebP container (RIFF) chunk IDs and the VP8X EXIF flag (Google's "WebP
// Container Specification", Extended File Format).
var (
	fccWEBP = [4]byte{'W', 'E', 'B', 'P'}
	fccVP8X = [4]byte{'V', 'P', '8', 'X'}
	fccEXIF = [4]byte{'E', 'X', 'I', 'F'}
	fccXMP  = [4]byte{'X', 'M', 'P', ' '}
)

const vp8xFlagEXIF, vp8xFlagXMP = 0x08, 0x04

// dropWebPMetadata removes the EXIF and XMP chunks from a WebP file and
// clears their flags in VP8X. libvips 8.14.1 (Debian bookworm) writes an
// EXIF chunk it builds from the image's fields even with strip set (186
// bytes of resolution and orientation per image; `vips webpsave --strip`
// does the same). The chunks are read with x/image/riff; the pixels are
// not touched. Anything unexpected returns b unchanged.
func dropWebPMetadata(b []byte) []byte {
	form, r, err := riff.NewReader(bytes.NewReader(b))
	if err != nil || form != fccWEBP {
		return b
	}
	out := make([]byte, 12, len(b))
	copy(out, b[:12])
	for {
		id, n, data, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return b
		}
		if id == fccEXIF || id == fccXMP {
			continue
		}
		body, err := io.ReadAll(data)
		if err != nil || uint32(len(body)) != n {
			return b
		}
		if id == fccVP8X && len(body) >= 1 {
			body[0] &^= vp8xFlagEXIF | vp8xFlagXMP
		}
		out = append(out, id[:]...)
		out = binary.LittleEndian.AppendUint32(out, n)
		out = append(out, body...)
		if n%2 == 1 {
			out = append(out, 0) // RIFF pads chunks to even sizes
		}
	}
	binary.LittleEndian.PutUint32(out[4:8], uint32(len(out)-8))
	return out
}
