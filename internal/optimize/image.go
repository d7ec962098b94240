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
)

// ImageOptions are the image transform's settings (config optimize.*).
type ImageOptions struct {
	// Quality is libwebp's lossy quality for JPEG photos, 1-100 (cwebp
	// -q); the default (DefaultQuality) is the lowest-byte setting whose
	// median SSIM over tp5n's and the default pages' JPEGs is at least
	// 0.95 and 5th percentile at least 0.90 (make optimize-quality). PNG
	// and GIF graphics become lossless WebP.
	Quality int
	// MaxPixels bounds width*height of an image the optimizer decodes
	// (a decompression bomb is a few KB of PNG that decodes to gigabytes);
	// larger images pass untouched (SkipPixels).
	MaxPixels int64
	// MinSaving is the fraction of the original the WebP must save to be
	// served (0.10: at most 90 % of the original's bytes); else the
	// original is served (SkipNotSmaller).
	MinSaving float64
}

// DefaultQuality is the WebP quality the optimizer uses unless configured
// (optimize.quality), chosen by the quality report (README "Quality").
const DefaultQuality = 75

// DefaultMaxPixels is optimize.max_pixels's default: 40 megapixels, more
// than any photograph a page embeds, well below a bomb.
const DefaultMaxPixels = 40_000_000

// DefaultImageOptions returns the defaults: DefaultQuality,
// DefaultMaxPixels, 10 % minimum saving (issue 11).
func DefaultImageOptions() ImageOptions {
	return ImageOptions{Quality: DefaultQuality, MaxPixels: DefaultMaxPixels, MinSaving: 0.10}
}

// Skip reasons: why a body was served as the origin sent it. They are the
// values of the reason label of pep_optimize_skipped_total.
const (
	SkipNotSmaller  = "not smaller"      // the result saved less than MinSaving
	SkipPixels      = "over pixel limit" // width*height > MaxPixels
	SkipUndecodable = "undecodable"      // corrupt, truncated, or a variant the decoder refuses
	SkipFormat      = "unknown format"   // the bytes are not the JPEG, PNG or GIF the type names
	SkipAnimated    = "animated"         // an animated GIF (passes as it is)
	SkipTooLarge    = "body too large"   // over optimize.max_body_bytes: not buffered
	SkipOverload    = "overload"         // the transform queue was full
	SkipDeferred    = "deferred"         // not finished within optimize.deadline: served untransformed, finished for the next miss
	SkipNoTransform = "no-transform"     // Cache-Control: no-transform (request or response)
	SkipRange       = "range"            // a Range request or a Content-Range response
	SkipEncoded     = "encoded"          // the origin's own Content-Encoding (left alone)
	SkipExcluded    = "excluded site"    // the host is in optimize.exclude
	SkipNoAccept    = "not accepted"     // Accept has no image/webp, Accept-Encoding no gzip
	SkipSmall       = "too small"        // below the text transform's minimum size
)

// ImageResult is the outcome of Image: Body and ContentType are what to
// serve; Skip is empty when Body is the WebP, else the reason the
// original (Body = the input, ContentType = "") is served.
type ImageResult struct {
	Body        []byte
	ContentType string
	Skip        string
	// Format is the input's format ("jpeg", "png", "gif"; "" if unknown).
	Format string
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

// errSkip carries a skip reason out of transcode.
type errSkip string

func (e errSkip) Error() string { return string(e) }

// Image transcodes a JPEG to lossy WebP at o.Quality, and a PNG or static
// GIF to lossless WebP, with libvips
// (libwebp's encoder, libjpeg-turbo/libspng/libnsgif decoders): EXIF
// orientation applied (the pixels rotated, the tag dropped), colour in an
// embedded ICC profile or in CMYK converted to sRGB and a 0.5 KB sRGB
// profile kept, alpha kept, other metadata (EXIF, XMP) dropped. Only the
// header is parsed before the pixel limit is checked. It never returns an
// error: a body it cannot or should not transcode comes back unchanged
// with the reason in Skip. Safe for concurrent use.
func Image(in []byte, o ImageOptions) ImageResult {
	res := ImageResult{Body: in, Format: Sniff(in)}
	if res.Format == "" {
		res.Skip = SkipFormat
		return res
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(in))
	if err != nil {
		res.Skip = SkipUndecodable
		return res
	}
	if o.MaxPixels > 0 && int64(cfg.Width)*int64(cfg.Height) > o.MaxPixels {
		res.Skip = SkipPixels
		return res
	}
	out, err := transcode(in, o.Quality, res.Format != "jpeg")
	if err != nil {
		var s errSkip
		if errors.As(err, &s) {
			res.Skip = string(s)
		} else {
			res.Skip = SkipUndecodable
		}
		return res
	}
	if float64(len(out)) > float64(len(in))*(1-o.MinSaving) {
		res.Skip = SkipNotSmaller
		return res
	}
	res.Body, res.ContentType = out, TypeWebP
	return res
}

// transcode is Image's libvips pipeline. Decoding is strict (libvips
// fail=true: a truncated or corrupt file is an error, not grey pixels).
func transcode(in []byte, quality int, lossless bool) ([]byte, error) {
	startVips()
	p := vips.NewImportParams()
	p.FailOnError.Set(true)
	img, err := vips.LoadImageFromBuffer(in, p)
	if err != nil {
		return nil, fmt.Errorf("optimize: load: %w", err)
	}
	defer img.Close()
	if img.Pages() > 1 {
		return nil, errSkip(SkipAnimated)
	}
	if err := img.AutoRotate(); err != nil {
		return nil, fmt.Errorf("optimize: autorotate: %w", err)
	}
	if img.HasICCProfile() || img.Interpretation() == vips.InterpretationCMYK {
		if err := img.OptimizeICCProfile(); err != nil {
			return nil, fmt.Errorf("optimize: icc: %w", err)
		}
	}
	ep := vips.NewWebpExportParams()
	ep.Quality = quality
	ep.StripMetadata = true
	if lossless {
		// Graphics (PNG, GIF): lossless WebP, the same pixels in fewer
		// bytes. Lossy WebP at any quality up to 85 left the 5th
		// percentile SSIM of tp5n's PNGs and GIFs under 0.90 (text, lines
		// and flat colours ring); see README "Quality".
		ep.Lossless = true
		ep.Quality = 100 // with lossless: effort, not fidelity
	}
	out, _, err := img.ExportWebp(ep)
	if err != nil {
		return nil, fmt.Errorf("optimize: webp: %w", err)
	}
	return dropWebPMetadata(out), nil
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
