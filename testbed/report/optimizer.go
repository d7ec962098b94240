package report

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// OptRow is one +opt mode's optimizer outcomes over a profile's loads
// (Record.OptTransformed and OptSkipped summed).
type OptRow struct {
	Mode        string
	Loads       int
	Transformed int
	// LinkWaits are the responses allowed a longer wait by their link
	// (Record.OptLinkWaits).
	LinkWaits int
	// LinkShortWaits are the responses given a shorter wait by their link
	// (Record.OptLinkShortWaits).
	LinkShortWaits int
	// Quick are the transformed responses that were quick WebPs
	// (Record.OptQuick).
	Quick int
	// Skipped are the untransformed responses by reason.
	Skipped map[string]int
}

// OptRows returns a row per mode of v whose records carry optimizer
// counters, in v's mode order; none when no record does (the modes
// without +opt, or results from before the counters were recorded).
func OptRows(v View, r *Results) []OptRow {
	var rows []OptRow
	for _, m := range v.Modes {
		row := OptRow{Mode: m, Skipped: map[string]int{}}
		seen := false
		for _, rec := range r.Records {
			if rec.Profile != v.Profile.Name || rec.Mode != m {
				continue
			}
			row.Loads++
			row.Transformed += rec.OptTransformed
			row.LinkWaits += rec.OptLinkWaits
			row.LinkShortWaits += rec.OptLinkShortWaits
			row.Quick += rec.OptQuick
			for k, n := range rec.OptSkipped {
				row.Skipped[k] += n
			}
			seen = seen || rec.OptTransformed > 0 || len(rec.OptSkipped) > 0
		}
		if seen {
			rows = append(rows, row)
		}
	}
	return rows
}

// writeOptimizer prints the optimizer's outcomes per +opt mode: what it
// transformed and why it passed the rest, so that a mode whose radio bytes
// stay near direct's shows the reason (over HTTP/2 a page's image misses
// arrive at once: deferred and overload).
func writeOptimizer(b *bytes.Buffer, v View, r *Results) {
	rows := OptRows(v, r)
	if len(rows) == 0 {
		return
	}
	reasons := map[string]bool{}
	for _, x := range rows {
		for k := range x.Skipped {
			reasons[k] = true
		}
	}
	cols := slices.Sorted(maps.Keys(reasons))
	// The counters of optional settings, each a column once a load has one.
	var extra []optColumn
	for _, c := range optColumns {
		if slices.ContainsFunc(rows, func(x OptRow) bool { return c.val(x) > 0 }) {
			extra = append(extra, c)
		}
	}
	b.WriteString("### The optimizer's outcomes (pepd's counters)\n\n")
	b.WriteString("pep_optimize_transforms_total and pep_optimize_skipped_total{reason}, read before and after each load, " +
		"summed over the mode's loads: transformed bodies served to Squid (images and text, fresh or reused) " +
		"and responses passed untransformed by reason. deferred: the transform missed optimize.deadline and went on for the next miss; " +
		"backlog: the work queued ahead predicted it past the deadline, so the response did not wait (optimize.defer_early), and it was queued for the next miss; " +
		"overload: the transform queue was full and nothing ran.")
	head, sep := "", ""
	for _, c := range extra {
		b.WriteString(" " + c.note)
		head, sep = head+" "+c.head+" |", sep+"---:|"
	}
	b.WriteString("\n\n")
	fmt.Fprintf(b, "| mode | loads | transformed |%s %s |\n", head, strings.Join(cols, " | "))
	fmt.Fprintf(b, "|---|---:|---:|%s%s\n", sep, strings.Repeat("---:|", len(cols)))
	for _, x := range rows {
		fmt.Fprintf(b, "| %s | %d | %d |", x.Mode, x.Loads, x.Transformed)
		for _, c := range extra {
			fmt.Fprintf(b, " %d |", c.val(x))
		}
		for _, c := range cols {
			fmt.Fprintf(b, " %d |", x.Skipped[c])
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// optColumn is a column of the optimizer's table that shows only when a
// load has a count in it: an optional setting's counter.
type optColumn struct {
	head, note string
	val        func(OptRow) int
}

// optColumns are those columns, in the table's order.
var optColumns = []optColumn{
	{"quick", "Quick (pep_optimize_quick_total{outcome=\"served\"}, counted in transformed): images the backlog turned away that got one lossy WebP at optimize.quick_quality within the wait, at the SSIM target, served unstored while the search went on for the next miss.",
		func(x OptRow) int { return x.Quick }},
	{"link waits", "Link waits (pep_optimize_link_waits_total): responses allowed to wait longer than optimize.deadline, as long as the subscriber's link needs for the originals of that subscriber's waiting responses and their own (optimize.link_deadline).",
		func(x OptRow) int { return x.LinkWaits }},
	{"short waits", "Short waits (pep_optimize_link_short_waits_total): responses given a wait shorter than optimize.deadline, as long as the subscriber's link needs for the originals of that subscriber's waiting responses and their own, at least optimize.link_floor.",
		func(x OptRow) int { return x.LinkShortWaits }},
}
