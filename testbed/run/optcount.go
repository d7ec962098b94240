package run

// The optimizer's outcomes per load (+opt modes): pepd's pep_optimize_*
// counters read around each load and credited to its record.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"pep/internal/optimize"
	"pep/testbed/report"
)

// optCounts are pepd's optimizer counters: transformed bodies served to
// Squid, fresh or reused (every transform and type:
// pep_optimize_transforms_total), and responses passed untransformed by
// reason (pep_optimize_skipped_total{reason}).
type optCounts struct {
	transformed float64
	skipped     map[string]float64
	linkWaits   float64 // pep_optimize_link_waits_total
	shortWaits  float64 // pep_optimize_link_short_waits_total
	quick       float64 // pep_optimize_quick_total{outcome="served"}
	avifPending float64 // pep_optimize_avif_total{outcome="pending"}
	avifLate    float64 // pep_optimize_avif_total{outcome="late"}
}

// deferred is how many responses the optimizer served unstored with a
// transform to come for the next miss (Pep-Deferred): skipped as deferred
// or backlog, a quick WebP served while the search runs, an AVIF pending
// or predicted late. A warm-up pass that deferred none left nothing for
// another pass to store (prepareSession).
func (c optCounts) deferred() float64 {
	return c.skipped[optimize.SkipDeferred] + c.skipped[optimize.SkipBacklog] + c.quick + c.avifPending + c.avifLate
}

// optCounts reads pepd's optimizer counters from its /metrics.
func (p *pep) optCounts() (optCounts, error) {
	return readCounts(p, "optimizer counters", parseOptCounts)
}

// parseOptCounts reads the optimizer counters from a Prometheus text
// exposition; absent counters read 0, a value that is not a number is an
// error. Label values may hold spaces (reason="not smaller").
func parseOptCounts(m string) (optCounts, error) {
	c := optCounts{skipped: map[string]float64{}}
	// The counters read as they are, one series each.
	single := map[string]*float64{
		"pep_optimize_link_waits_total":              &c.linkWaits,
		"pep_optimize_link_short_waits_total":        &c.shortWaits,
		`pep_optimize_quick_total{outcome="served"}`: &c.quick,
		`pep_optimize_avif_total{outcome="pending"}`: &c.avifPending,
		`pep_optimize_avif_total{outcome="late"}`:    &c.avifLate,
	}
	for _, l := range strings.Split(m, "\n") {
		i := strings.LastIndexByte(l, ' ')
		if i < 0 || strings.HasPrefix(l, "#") {
			continue
		}
		name, v := l[:i], l[i+1:]
		reason, isSkip := strings.CutPrefix(name, `pep_optimize_skipped_total{reason="`)
		dst, isSingle := single[name]
		if !isSkip && !isSingle && !strings.HasPrefix(name, "pep_optimize_transforms_total{") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return optCounts{}, fmt.Errorf("run: pepd's metrics: %s %q: %w", name, v, err)
		}
		switch {
		case isSkip:
			c.skipped[strings.TrimSuffix(reason, `"}`)] += f
		case isSingle:
			*dst = f
		default:
			c.transformed += f
		}
	}
	return c, nil
}

// creditOpt adds to r what changed from before to after: the load's
// transformed responses and skips (both counted when the optimizer
// answers Squid, so within the load).
func creditOpt(r *report.Record, before, after optCounts) {
	r.OptTransformed += int(after.transformed - before.transformed)
	r.OptLinkWaits += int(after.linkWaits - before.linkWaits)
	r.OptLinkShortWaits += int(after.shortWaits - before.shortWaits)
	r.OptQuick += int(after.quick - before.quick)
	for reason, n := range after.skipped {
		if d := int(n - before.skipped[reason]); d > 0 {
			if r.OptSkipped == nil {
				r.OptSkipped = map[string]int{}
			}
			r.OptSkipped[reason] += d
		}
	}
}

// parseOptBusy returns the optimizer's transforms waiting and running
// from a Prometheus text exposition: pep_optimize_queue_depth,
// pep_optimize_avif_queue_depth and pep_optimize_running summed (absent
// gauges read 0: nothing to wait for).
func parseOptBusy(m string) (busy float64, err error) {
	for _, l := range strings.Split(m, "\n") {
		name, v, _ := strings.Cut(l, " ")
		switch name {
		case "pep_optimize_queue_depth", "pep_optimize_avif_queue_depth", "pep_optimize_running":
		default:
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, fmt.Errorf("run: pepd's metrics: %s %q: %w", name, v, err)
		}
		busy += f
	}
	return busy, nil
}

// DefaultOptIdleMax is Config.OptIdleMax's default (and its value when
// zero): how long a warm session waits for the optimizer to finish the
// transforms a warm-up pass left behind its responses.
const DefaultOptIdleMax = 5 * time.Minute

// optIdleMax is Config.OptIdleMax, DefaultOptIdleMax when zero.
func (c Config) optIdleMax() time.Duration {
	if c.OptIdleMax > 0 {
		return c.OptIdleMax
	}
	return DefaultOptIdleMax
}

// waitOptIdle waits until pepd's optimizer has no transform waiting or
// running (parseOptBusy), polling every 200 ms, at most max; it returns
// the time waited. A warm cache is what an earlier subscriber's load
// left: by then the transforms that load deferred for the next miss have
// ended, so a measured load does not share the gateway's CPU with them.
func (p *pep) waitOptIdle(ctx context.Context, max time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		busy, err := readCounts(p, "optimizer gauges", parseOptBusy)
		if err != nil {
			return time.Since(start), err
		}
		if busy == 0 {
			return time.Since(start), nil
		}
		if time.Since(start) >= max {
			return time.Since(start), fmt.Errorf("run: pepd's optimizer still had %v transforms waiting or running after %v", busy, max)
		}
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
