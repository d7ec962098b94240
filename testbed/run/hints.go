package run

// Dependency hints' figures per load (-hints on): pepd's pep_hints_*
// counters credited to the session's records.

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"pep/testbed/report"
)

// hintCounts are pepd's pep_hints_* counters that the report needs:
// fetched counts fetches ahead Squid answered (outcome hit or miss), busy
// those not made for the bounds.
type hintCounts struct{ sent, used, unused, unusedBytes, fetched, busy float64 }

// hintCounts reads pepd's hint counters from its /metrics.
func (p *pep) hintCounts() (hintCounts, error) {
	return readCounts(p, "hint counters", parseHintCounts)
}

// readCounts reads pepd's /metrics and parses what of it is named what.
func readCounts[T any](p *pep, what string, parse func(string) (T, error)) (T, error) {
	m, err := p.adminPath(http.MethodGet, "/metrics", "")
	if err != nil {
		var zero T
		return zero, fmt.Errorf("run: reading pepd's %s: %w", what, err)
	}
	return parse(m)
}

// parseHintCounts reads the hint counters from a Prometheus text
// exposition; a counter that is absent reads 0, one whose value is not a
// number is an error.
func parseHintCounts(m string) (hintCounts, error) {
	var c hintCounts
	var hit, miss float64
	err := parseSeries(m, map[string]*float64{"pep_hints_sent_total": &c.sent, "pep_hints_used_total": &c.used,
		"pep_hints_unused_total": &c.unused, "pep_hints_unused_bytes_total": &c.unusedBytes,
		`pep_hints_prefetches_total{outcome="hit"}`: &hit, `pep_hints_prefetches_total{outcome="miss"}`: &miss,
		`pep_hints_prefetches_total{outcome="busy"}`: &c.busy})
	if err != nil {
		return hintCounts{}, err
	}
	c.fetched = hit + miss
	return c, nil
}

// parseSeries sets *dst[name] to the value of each series of a
// Prometheus text exposition whose name (with its labels, as pepd
// writes them: `pep_x_total{outcome="closed"}`) is a key of dst; a
// series that is absent leaves its value as it is, one whose value is
// not a number is an error naming it.
func parseSeries(m string, dst map[string]*float64) error {
	for _, l := range strings.Split(m, "\n") {
		name, v, _ := strings.Cut(l, " ")
		p := dst[name]
		if p == nil {
			continue
		}
		var err error
		if *p, err = strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
			return fmt.Errorf("run: pepd's metrics: %s %q: %w", name, v, err)
		}
	}
	return nil
}

// hintTally credits pepd's hint counters to a +hints session's records
// (report.Record's Hints* fields): read after each load, the hints sent
// and the fetches ahead (made when the document arrived) go to that load, the used and unused to the load before it (a load is
// counted when it ends, at the subscriber's next document; at the first
// load of the session that is the teaching pass's last, dropped).
type hintTally struct {
	read func() (hintCounts, error) // pepd's counters now
	end  func() error               // end the loads in progress (DELETE /hints)
	last hintCounts
}

// startHints reads the counters once the teaching pass is over.
func (p *pep) startHints() (*hintTally, error) {
	return newHintTally(p.hintCounts, p.resetHints)
}

func newHintTally(read func() (hintCounts, error), end func() error) (*hintTally, error) {
	c, err := read()
	return &hintTally{read: read, end: end, last: c}, err
}

// afterLoad credits what changed since the last read to recs' last two
// records.
func (h *hintTally) afterLoad(recs []report.Record) error {
	c, err := h.read()
	if err != nil {
		return err
	}
	cur := &recs[len(recs)-1]
	cur.HintsSent += int(c.sent - h.last.sent)
	cur.HintsFetchedAhead += int(c.fetched - h.last.fetched)
	cur.HintsFetchBusy += int(c.busy - h.last.busy)
	if len(recs) > 1 {
		credit(&recs[len(recs)-2], h.last, c)
	}
	h.last = c
	return nil
}

// endSession ends the session's last load (DELETE /hints: pepd counts the
// loads in progress, then forgets what it learned) and credits it.
func (h *hintTally) endSession(recs []report.Record) error {
	if err := h.end(); err != nil {
		return err
	}
	c, err := h.read()
	if err != nil || len(recs) == 0 {
		return err
	}
	credit(&recs[len(recs)-1], h.last, c)
	h.last = c
	return nil
}

func credit(r *report.Record, before, after hintCounts) {
	r.HintsUsed += int(after.used - before.used)
	r.HintsUnused += int(after.unused - before.unused)
	r.HintsUnusedBytes += int64(after.unusedBytes - before.unusedBytes)
}
