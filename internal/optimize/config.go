package optimize

import (
	"os"
	"time"

	"pep/internal/config/field"
)

// Config is pepd's "optimize" section: the optimizer's settings (issue
// 11). The switch (Enabled) is orthogonal to the mode and changes at run
// time (PUT /optimize, pepctl optimize on|off, SIGHUP); Listen and the
// queue need a restart; Enabled and the exclusion list are re-read on
// SIGHUP. DefaultConfig gives its defaults; Validate checks it; Options
// turns it into New's Options.
type Config struct {
	// Enabled marks requests for the optimizer. Default false.
	Enabled bool `yaml:"enabled"`
	// Listen is the optimizer's address, Squid's parent (squid.conf
	// cache_peer pep_optimizer, rendered by pepctl squid-conf when set).
	// Default 127.0.0.1:3131; "" runs no optimizer.
	Listen string `yaml:"listen"`
	// SSIMTarget is the SSIM every served image reaches against its
	// original, in 0..1: per image the smallest of lossless WebP and the
	// lowest lossy quality that reaches it, or the original
	// (ImageOptions.Target). 0: the fixed rule (JPEG lossy at quality, PNG
	// and GIF lossless). Default DefaultTarget (0.95).
	SSIMTarget float64 `yaml:"ssim_target"`
	// SSIMTileFloor is the SSIM every 32x32 tile of a lossy WebP reaches
	// with ssim_target, in 0..1; 0: none. Default DefaultTileFloor (0:
	// none; 0.90 keeps 0.48 of tp5n's image bytes instead of 0.37).
	SSIMTileFloor float64 `yaml:"ssim_tile_floor"`
	// SSIMRefine is how many lossy encodes more the search may spend
	// between the lowest quality of its grid that reaches ssim_target and
	// the next lower one, each halving the gap (ImageOptions.Refine),
	// 0..8; 0: the grid's quality. Default DefaultRefine.
	SSIMRefine int `yaml:"ssim_refine"`
	// Quality is the fixed rule's lossy WebP quality of JPEG photos, 1-100
	// (used with ssim_target 0). Default DefaultQuality.
	Quality int `yaml:"quality"`
	// BrotliQuality is the brotli quality, 1-11, of text sent to a
	// request whose Accept-Encoding names br (Chromium names it over
	// HTTPS only: the VIP's HTTPS origin), text the origin gzipped
	// included; 0: gzip only (level 9, of plain or gzipped text).
	// Default DefaultBrotliQuality (5).
	BrotliQuality int `yaml:"brotli_quality"`
	// MaxPixels bounds width*height of an image to decode. Default
	// DefaultMaxPixels (40e6).
	MaxPixels int64 `yaml:"max_pixels"`
	// MinSaving is the fraction an image transform must save to be served
	// (text: MinTextSaving), in [0, 1). Default 0.10.
	MinSaving float64 `yaml:"min_saving"`
	// MaxBodyBytes bounds a body buffered for a transform, at least 1 KiB.
	// Default 8MiB.
	MaxBodyBytes field.ByteSize `yaml:"max_body_bytes"`
	// Workers is how many transforms run at once; 0: one per CPU.
	Workers int `yaml:"workers"`
	// Queue bounds the transforms waiting for a worker; 0:
	// DefaultQueuePerWorker (64) per worker, a page's images over one
	// HTTP/2 connection.
	Queue int `yaml:"queue"`
	// QueueBytes bounds the origin bodies held by waiting and running
	// transforms. Default 64MiB (DefaultQueueBytes).
	QueueBytes field.ByteSize `yaml:"queue_bytes"`
	// Deadline bounds how long a response waits for its transform (a
	// worker and the transform together); past it the original is served
	// and not stored, and the transform finishes for the next miss.
	// Default DefaultDeadline (100ms).
	Deadline time.Duration `yaml:"deadline"`
	// LinkDeadline, when above Deadline, lets a response wait longer on a
	// slow link: with the subscriber's downlink rate known (pepd's
	// estimate, LinkRateHeader), a response waits for its transform up to
	// the original body's transfer time at that rate, at least Deadline
	// and at most LinkDeadline (Options.LinkDeadline). 0: Deadline alone.
	// Default 0.
	LinkDeadline time.Duration `yaml:"link_deadline"`
	// LinkFloor, when above 0 and below Deadline, lets a response on a
	// fast link wait less: with the subscriber's downlink rate known, up
	// to the time that link needs for the originals of the subscriber's
	// waiting responses and this one, at least LinkFloor
	// (Options.LinkFloor). 0, or at least Deadline: Deadline is the least
	// wait. Default 0: on 3G it cost 1 % of radio bytes for no PLT or LCP
	// change beyond the repeat; on LTE it shortened PLT and LCP by 2-4 %
	// (testbed/README.md, session 25), so an LTE gateway sets 10ms.
	LinkFloor time.Duration `yaml:"link_floor"`
	// DeferEarly serves a response untransformed at once, without waiting
	// for the deadline, when the work queued ahead of its transform
	// predicts that it would finish after the deadline (reason "backlog");
	// the transform is queued for the next miss. Default true; false waits
	// the whole deadline as before (Options.DeferLate).
	DeferEarly bool `yaml:"defer_early"`
	// QuickQuality is the one lossy WebP quality (1-100) tried for an
	// image response the backlog turns away: served, unstored, when it
	// reaches ssim_target within the response's wait, while the search
	// goes on for the next miss (Options.QuickQuality). 0: the original.
	// Ignored with ssim_target 0. Default DefaultQuickQuality (80).
	QuickQuality int `yaml:"quick_quality"`
	// Order is the order in which waiting transforms start: "arrival"
	// (default, Options.ByArrival) or "urgency" (the request's RFC 9218
	// Priority urgency, which Chromium sends over HTTP/2, then arrival).
	// Urgency changed no figure beyond the runs' spread on tp5n over 3G
	// (internal/optimize/README.md, "Transform order").
	Order string `yaml:"order"`
	// ResultBytes bounds the finished transforms pepd keeps for the next
	// miss of their object. Default DefaultResultBytes (64MiB).
	ResultBytes field.ByteSize `yaml:"result_bytes"`
	// ResultsDir keeps the finished transforms on disk too (one file
	// each, under a subfolder named after the settings that decide their
	// output), read on a miss after memory: a restarted pepd does not
	// repeat its searches. DELETE /optimize/results leaves it. Default ""
	// (memory only).
	ResultsDir string `yaml:"results_dir"`
	// ResultsDirBytes bounds results_dir, every subfolder included: the
	// files least recently stored or read go first. Default
	// DefaultResultsDirBytes (1GiB).
	ResultsDirBytes field.ByteSize `yaml:"results_dir_bytes"`
	// ExcludeFile lists sites never transformed, one host name per line
	// (subdomains included; LoadSites); re-read on SIGHUP. Default none.
	ExcludeFile string `yaml:"exclude_file"`
	// AVIF serves an image as AVIF to a request whose Accept names
	// image/avif when the AVIF at ssim_target is smaller than the WebP,
	// encoded behind the response (the WebP first, unstored, the AVIF to
	// the next miss: AVIFOptions). Needs ssim_target above 0. Default
	// false.
	AVIF bool `yaml:"avif"`
	// AVIFWorkers is how many AVIF searches run at once, beside workers.
	// 0: 1.
	AVIFWorkers int `yaml:"avif_workers"`
	// AVIFQueue bounds the AVIF searches waiting; beyond it the WebP is
	// served and stored. 0: DefaultAVIFQueue (32).
	AVIFQueue int `yaml:"avif_queue"`
}

// DefaultConfig returns the optimize section's defaults.
func DefaultConfig() Config {
	im := DefaultImageOptions()
	return Config{Listen: "127.0.0.1:3131", SSIMTarget: im.Target, SSIMTileFloor: im.TileFloor, SSIMRefine: im.Refine, Quality: im.Quality,
		BrotliQuality: DefaultBrotliQuality, MaxPixels: im.MaxPixels, MinSaving: im.MinSaving, MaxBodyBytes: 8 << 20, QueueBytes: DefaultQueueBytes, Deadline: DefaultDeadline,
		DeferEarly: true, QuickQuality: DefaultQuickQuality, Order: "arrival", ResultBytes: DefaultResultBytes, ResultsDirBytes: DefaultResultsDirBytes}
}

// Validate returns the first invalid field as a *field.Error whose path
// is the key within the section ("ssim_target"). ExcludeFile must exist
// (its contents are read by LoadSites).
func (c Config) Validate() error {
	if err := field.First(
		field.Check(c.Listen != "" && field.HostPort(c.Listen, false) != nil, "listen", "%w", field.HostPort(c.Listen, false)),
		field.Check(c.Enabled && c.Listen == "", "enabled", "needs optimize.listen (Squid's parent)"),
		field.Check(c.SSIMTarget < 0 || c.SSIMTarget > 1, "ssim_target", "%v is outside 0..1 (0: the fixed rule)", c.SSIMTarget),
		field.Check(c.SSIMTileFloor < 0 || c.SSIMTileFloor > 1, "ssim_tile_floor", "%v is outside 0..1 (0: none)", c.SSIMTileFloor),
		field.Check(c.SSIMRefine < 0 || c.SSIMRefine > MaxRefine, "ssim_refine", "%d is outside 0..%d (0: the grid's quality)", c.SSIMRefine, MaxRefine),
		field.Check(c.Quality < 1 || c.Quality > 100, "quality", "%d is outside 1..100", c.Quality),
		field.Check(c.BrotliQuality < 0 || c.BrotliQuality > 11, "brotli_quality", "%d is outside 0..11 (0: gzip only)", c.BrotliQuality),
		field.AtLeast("max_pixels", c.MaxPixels, 1),
		field.Check(c.MinSaving < 0 || c.MinSaving >= 1, "min_saving", "%v is outside 0..1 (0.10: at least 10 %% smaller)", c.MinSaving),
		field.Check(c.MaxBodyBytes < 1024, "max_body_bytes", "%d is below 1KiB", c.MaxBodyBytes),
		field.Check(c.Workers < 0 || c.Queue < 0, "workers", "workers and queue must not be negative"),
		field.Check(c.QueueBytes < c.MaxBodyBytes, "queue_bytes", "%d is below max_body_bytes (%d): the largest body could never queue", c.QueueBytes, c.MaxBodyBytes),
		field.Check(c.QuickQuality < 0 || c.QuickQuality > 100, "quick_quality", "%d is outside 0..100 (0: off)", c.QuickQuality),
		field.Check(c.Deadline < 0, "deadline", "%v must not be negative", c.Deadline),
		field.Check(c.LinkDeadline < 0, "link_deadline", "%v must not be negative", c.LinkDeadline),
		field.Check(c.LinkFloor < 0, "link_floor", "%v must not be negative", c.LinkFloor),
		field.Check(c.Order != "urgency" && c.Order != "arrival", "order", "%q: want urgency or arrival", c.Order),
		field.Check(c.ResultBytes < 0, "result_bytes", "%d must not be negative", c.ResultBytes),
		field.Check(c.ResultsDirBytes < 0, "results_dir_bytes", "%d must not be negative", c.ResultsDirBytes),
		field.Check(c.AVIF && c.SSIMTarget == 0, "avif", "needs optimize.ssim_target above 0 (AVIF is chosen by the SSIM target)"),
		field.Check(c.AVIFWorkers < 0 || c.AVIFQueue < 0, "avif_workers", "avif_workers and avif_queue must not be negative"),
	); err != nil {
		return err
	}
	if c.ExcludeFile != "" {
		if _, err := os.Stat(c.ExcludeFile); err != nil {
			return field.Errorf("exclude_file", "%w", err)
		}
	}
	return nil
}

// Options returns the Options of New that c sets (the image transform,
// the body bound, the workers, queue, deadlines, result store and AVIF); the
// caller adds Lookup, Control, UpstreamTimeout, Metrics and Log.
func (c Config) Options() Options {
	o := Options{
		Image: ImageOptions{Target: c.SSIMTarget, TileFloor: c.SSIMTileFloor, Refine: c.SSIMRefine, Quality: c.Quality,
			MaxPixels: c.MaxPixels, MinSaving: c.MinSaving},
		BrotliQuality: c.BrotliQuality,
		MaxBodyBytes:  int64(c.MaxBodyBytes), Workers: c.Workers, Queue: c.Queue, QueueBytes: int64(c.QueueBytes), Deadline: c.Deadline, LinkDeadline: c.LinkDeadline, LinkFloor: c.LinkFloor,
		DeferLate: !c.DeferEarly, ByArrival: c.Order == "arrival", ResultBytes: int64(c.ResultBytes), ResultsDir: c.ResultsDir, ResultsDirBytes: int64(c.ResultsDirBytes),
		AVIF: AVIFOptions{Enabled: c.AVIF, Workers: c.AVIFWorkers, Queue: c.AVIFQueue},
	}
	if c.SSIMTarget > 0 {
		o.QuickQuality = c.QuickQuality
	}
	return o
}
