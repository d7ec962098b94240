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
// an image, from its header; bytes for text) times a cost per unit of
// its format, learned from the transforms that finished (an exponentially
// weighted mean of their wall time per unit, so that it follows the
// machine's load). The backlog is the estimated work of the transforms
// waiting and running; a new one waits for backlog / workers and then
// runs for its own estimate. Until a format has finished minSamples
// transforms nothing is predicted and responses wait as before.
type backlog struct {
	workers int
	gauge   func(seconds float64)

	mu     sync.Mutex
	queued time.Duration          // estimated work of the transforms waiting and running
	costs  map[string]*formatCost // by format: "jpeg", "png", "gif", "text"
}

// formatCost is a format's learned wall time per unit.
type formatCost struct {
	nsPerUnit float64
	samples   int
}

// minSamples is how many transforms of a format finish before its cost
// is trusted.
const minSamples = 4

// costWeight is the weight of the newest transform in a format's cost
// once 10 have finished (before, the plain mean): about the last 10
// transforms count.
const costWeight = 0.1

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

// estimate returns the predicted work of a transform of units of format;
// known is false until the format has minSamples finished transforms.
func (b *backlog) estimate(format string, units int64) (work time.Duration, known bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.costs[format]
	if c == nil || c.samples < minSamples {
		return 0, false
	}
	return time.Duration(c.nsPerUnit * float64(units)), true
}

// finish returns the predicted time from now until a transform of work
// queued now would be done: the backlog shared by the workers, then its
// own work.
func (b *backlog) finish(work time.Duration) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.queued/time.Duration(b.workers) + work
}

// add moves the backlog by work (negative when a transform ends).
func (b *backlog) add(work time.Duration) {
	b.mu.Lock()
	b.queued += work
	q := b.queued
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
	per := float64(took) / float64(units)
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.costs[format]
	if c == nil {
		c = &formatCost{}
		b.costs[format] = c
	}
	c.samples++
	c.nsPerUnit += max(costWeight, 1/float64(c.samples)) * (per - c.nsPerUnit)
}
