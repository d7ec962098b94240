package optimize

import (
	"bytes"
	"image"
	_ "image/gif" // DecodeConfig: GIF headers
	_ "image/jpeg"
	_ "image/png"
	"sync"
	"time"
)

// backlog predicts when a transform queued now would finish, so that a
// response whose transform cannot make Options.Deadline is served at
// once instead of after waiting the whole deadline for nothing
// (SkipBacklog).
//
// Each transform's work is estimated from its size in units (pixels for
// an image, from its header; bytes for text) by its format's cost line,
// a fixed cost plus a cost per unit, fitted by least squares to the wall
// times of the transforms that finished, the newest weighted most (so
// that it follows the machine's load). A line, not a cost per unit: on
// the default pages' 98 images (one idle core) a JPEG costs 10 ms at 11
// kilopixels and 100 ms at 133, 0.01 to 50 µs per pixel, and a 1-pixel
// GIF 0.6 ms; a cost per pixel learned from the many small images
// predicted a photograph at seconds and deferred most transforms that
// would have finished in time (session 14's first campaign). The backlog
// is the estimated work of the transforms waiting and running, by
// urgency; a new one waits for the backlog of its urgency and the more
// urgent ones (workPool starts those first) / workers, and then runs for
// its own estimate. Until a format has finished minSamples transforms
// nothing is predicted and responses wait as before.
type backlog struct {
	workers int
	gauge   func(seconds float64)

	mu     sync.Mutex
	queued [nextMiss + 1]time.Duration // estimated work of the transforms waiting and running, by rank (RFC 9218's urgency 0-7, then nextMiss)
	// nextRunning is the estimated work of the nextMiss transforms
	// running: a worker they hold is not free for any other.
	nextRunning time.Duration
	costs       map[string]*formatCost // by format: "jpeg", "png", "gif", "text"
}

// formatCost is a format's cost line: exponentially weighted sums of
// the finished transforms' units (x: pixels or bytes) and wall times
// (y, ns).
type formatCost struct {
	w, x, y, xx, xy float64
	samples         int
}

// add weighs the sums down by 1-costWeight and adds a transform of x
// units that took y ns.
func (c *formatCost) add(x, y float64) {
	d := 1 - costWeight
	c.w, c.x, c.y, c.xx, c.xy = c.w*d+1, c.x*d+x, c.y*d+y, c.xx*d+x*x, c.xy*d+x*y
	c.samples++
}

// predict returns the fitted wall time (ns) of a transform of x units:
// the least-squares line through the weighted samples, its slope and
// intercept held at 0 or above (the mean time when the units do not
// vary).
func (c *formatCost) predict(x float64) float64 {
	mx, my := c.x/c.w, c.y/c.w
	b := 0.0
	if vx := c.xx/c.w - mx*mx; vx > 0 {
		b = max((c.xy/c.w-mx*my)/vx, 0)
	}
	a := my - b*mx
	if a < 0 { // the line through the origin instead
		a, b = 0, c.xy/c.xx
	}
	return a + b*x
}

// minSamples is how many transforms of a format finish before its cost
// is trusted.
const minSamples = 4

// costWeight is how much each finished transform weighs down the older
// ones in a format's cost line: about the last 20 count.
const costWeight = 0.05

func newBacklog(workers int, gauge func(float64)) *backlog {
	return &backlog{workers: workers, gauge: gauge, costs: map[string]*formatCost{}}
}

// size returns the format and size in units of a body of kind "image" or
// "text"; ok is false for an image whose header Go cannot read (its cost
// is not predicted).
func size(kind string, body []byte) (format string, units int64, ok bool) {
	if kind != "image" {
		return "text", int64(len(body)), true
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(body))
	if err != nil || cfg.Width <= 0 || cfg.Height <= 0 {
		return "", 0, false
	}
	return format, int64(cfg.Width) * int64(cfg.Height), true
}

// frameUnits is the units a finished image transform learns from: the
// size's pixels (one frame: size reads the header alone) times the frames
// it decoded (ImageResult.Frames; an animated GIF's encodes and SSIMs
// cover every frame, so its time grows with them). Learned as one frame,
// a 20-frame GIF would sit on the cost line as a small image that took
// long, and raise the predicted work of every GIF after it.
func frameUnits(units int64, res ImageResult) int64 {
	return units * int64(max(res.Frames, 1))
}

// estimate returns the predicted work of a transform of units of format;
// known is false until the format has minSamples finished transforms.
func (b *backlog) estimate(format string, units int64) (work time.Duration, known bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.costs[format]
	if c == nil || c.samples < minSamples {
		return 0, false
	}
	return time.Duration(c.predict(float64(units))), true
}

// finish returns the predicted time from now until a transform of work
// and urgency (a rank: 0-7 or nextMiss) queued now would be done: the
// backlog of its urgency and the more urgent ones (which start first),
// and the nextMiss transforms already running, shared by the workers,
// then its own work. nextMiss transforms waiting are not ahead of any
// other.
func (b *backlog) finish(urgency int, work time.Duration) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ahead time.Duration
	for u := 0; u <= urgency && u < len(b.queued); u++ {
		ahead += b.queued[u]
	}
	if urgency < nextMiss {
		ahead += b.nextRunning
	}
	return ahead/time.Duration(b.workers) + work
}

// running moves the work of the nextMiss transforms running by work
// (negative when one ends).
func (b *backlog) running(work time.Duration) {
	b.mu.Lock()
	b.nextRunning += work
	b.mu.Unlock()
}

// add moves the backlog of urgency by work (negative when a transform
// ends).
func (b *backlog) add(urgency int, work time.Duration) {
	b.mu.Lock()
	b.queued[urgency] += work
	var q time.Duration
	for _, w := range b.queued {
		q += w
	}
	b.mu.Unlock()
	if b.gauge != nil {
		b.gauge(q.Seconds())
	}
}

// learn records that a transform of units of format took took (its wall
// time on a worker).
func (b *backlog) learn(format string, units int64, took time.Duration) {
	if units <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.costs[format]
	if c == nil {
		c = &formatCost{}
		b.costs[format] = c
	}
	c.add(float64(units), float64(took))
}
