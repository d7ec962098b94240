package report

import (
	"bytes"
	"fmt"
	"strings"

	"pep/testbed/har"
)

// hintsMark marks a mode run with pepd's dependency hints on
// (testbed/run's HintsSuffix: "url+hints", "url+opt+hints+warm").
const hintsMark = "+hints"

// HintsBase returns the mode that a +hints mode is compared with (the
// same mode with hints off: "url+opt+hints" -> "url+opt"), "" for a mode
// without hints.
func HintsBase(mode string) string {
	if !strings.Contains(mode, hintsMark) {
		return ""
	}
	return strings.Replace(mode, hintsMark, "", 1)
}

// Preloads returns the entries of h that Chromium started from a Link
// preload header: initiator type "other" without an initiator URL, other
// than the document and the favicon (resource type Other). Measured with
// Chromium 156 in url mode over HTTP/1.1 (testbed, default pages): every
// URL pepd hinted appears once, initiator "other", started when the
// document's head arrived; the parser's later use of it is served from
// the preload and makes no second entry.
func Preloads(h *har.HAR) []har.Entry {
	var out []har.Entry
	for _, e := range h.Log.Entries {
		if e.Initiator.Type == "other" && e.Initiator.URL == "" && e.ResourceType != "Document" && e.ResourceType != "Other" {
			out = append(out, e)
		}
	}
	return out
}

// HintsRow is one mode's dependency-hint figures in one profile.
type HintsRow struct {
	Mode string
	// Base is the mode without hints this one is compared with; "" when
	// this row is itself a mode without hints.
	Base string
	// Loads counts the mode's records; Loaded those that loaded.
	Loads, Loaded int
	// From pepd's pep_hints_* counters (Record.Hints*): hints sent, and
	// of them the URLs the subscriber then requested during the load
	// (Used, the browser's preload request included) or not (Unused,
	// UnusedBytes their sizes).
	Sent, Used, Unused int
	UnusedBytes        int64
	// Fetched and Busy are the fetches ahead Squid answered and those not
	// made for the bounds (Record.HintsFetchedAhead, HintsFetchBusy).
	Fetched, Busy int
	// RadioBytes is what crossed the radio link (up and down) in the
	// mode's loads; HARRadioBytes in those that have a HAR analysed.
	RadioBytes, HARRadioBytes int64
	// From the HARs (Preloads): HARLoads loads analysed, Preloads the
	// preload requests and PreloadBytes their bytes as received;
	// NeverUsed the preloaded URLs that no load of the same page in the
	// Base mode requested (the page without hints never needed them),
	// NeverUsedBytes their bytes; Unjudged the preloads of pages without
	// a Base load to judge by.
	HARLoads, Preloads, NeverUsed, Unjudged int
	PreloadBytes, NeverUsedBytes            int64
	// Chain is the longest initiator chain's levels over the HAR loads
	// (Load.Depth); PLT and LCP over the loaded records, ms.
	Chain, PLT, LCP Spread
}

// HintsRows returns, for every +hints mode of v, the row of its base mode
// then its own, in v's mode order; nil when v has no +hints mode. tv is
// the profile's HAR analysis (may have no loads: the HAR columns are then
// zero); HARs are read again, one at a time, for the preloads.
func HintsRows(v View, r *Results, tv TimeView) []HintsRow {
	var rows []HintsRow
	for _, m := range v.Modes {
		base := HintsBase(m)
		if base == "" {
			continue
		}
		rows = append(rows, hintsRow(v, r, tv, base, ""), hintsRow(v, r, tv, m, base))
	}
	return rows
}

func hintsRow(v View, r *Results, tv TimeView, mode, base string) HintsRow {
	row := HintsRow{Mode: mode, Base: base}
	radio := map[[2]any]int64{} // page, run
	var plt, lcp []float64
	for _, rec := range r.Records {
		if rec.Profile != v.Profile.Name || rec.Mode != mode {
			continue
		}
		row.Loads++
		row.Sent += rec.HintsSent
		row.Used += rec.HintsUsed
		row.Unused += rec.HintsUnused
		row.UnusedBytes += rec.HintsUnusedBytes
		row.Fetched += rec.HintsFetchedAhead
		row.Busy += rec.HintsFetchBusy
		b := rec.LinkUpBytes + rec.LinkDnBytes
		row.RadioBytes += b
		radio[[2]any{rec.Page, rec.Run}] = b
		if rec.Loaded {
			row.Loaded++
			plt = append(plt, rec.PLTms)
			if rec.LCPms > 0 {
				lcp = append(lcp, rec.LCPms)
			}
		}
	}
	row.PLT, row.LCP = NewSpread(plt), NewSpread(lcp)
	// The URLs each page requested in the base mode (any run).
	var needed map[string]map[string]bool
	if base != "" {
		needed = map[string]map[string]bool{}
		for i, l := range tv.Loads {
			if l.Mode != base {
				continue
			}
			h, err := tv.ReadHAR(i)
			if err != nil {
				continue // listed in tv.Errors when first read
			}
			if needed[l.Page] == nil {
				needed[l.Page] = map[string]bool{}
			}
			for _, e := range h.Log.Entries {
				needed[l.Page][e.Request.URL] = true
			}
		}
	}
	var chain []float64
	for i, l := range tv.Loads {
		if l.Mode != mode {
			continue
		}
		h, err := tv.ReadHAR(i)
		if err != nil {
			continue
		}
		row.HARLoads++
		row.HARRadioBytes += radio[[2]any{l.Page, l.Run}]
		chain = append(chain, float64(l.Depth))
		for _, e := range Preloads(h) {
			row.Preloads++
			row.PreloadBytes += e.Response.TransferSize
			switch need := needed[l.Page]; {
			case base == "":
			case need == nil:
				row.Unjudged++
			case !need[e.Request.URL]:
				row.NeverUsed++
				row.NeverUsedBytes += e.Response.TransferSize
			}
		}
	}
	row.Chain = NewSpread(chain)
	return row
}

// share formats part/whole in per cent with one decimal, "–" when whole
// is 0.
func share(part, whole int64) string {
	if whole == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f %%", 100*float64(part)/float64(whole))
}

func perLoad(n, loads int) string {
	if loads == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", float64(n)/float64(loads))
}

// writeHints prints the dependency hints section: per +hints mode and its
// base, pepd's counters, the preloads the HARs show and those the page
// never needed without hints, as a share of the radio bytes (the issue's
// target: at most 3 %), and the waterfall's chain depth.
func writeHints(b *bytes.Buffer, v View, r *Results, tv TimeView) {
	rows := HintsRows(v, r, tv)
	if len(rows) == 0 {
		return
	}
	b.WriteString("### Dependency hints (pepd's counters and the HARs)\n\n")
	b.WriteString("Every +hints session started with pepd's learner emptied and a teaching pass: a browser with another profile " +
		"loaded every page once (its figures dropped), then Squid was emptied, so that only what pepd learned carries over; " +
		"the session without hints had no teaching pass. " +
		"Sent, used, unused: pepd's pep_hints_* counters, read after each load (a load is counted when the next one starts; " +
		"the session's last one when DELETE /hints ends it); pepd counts a hinted URL used when the subscriber requested it " +
		"during the load, and the browser's own preload request is such a request. " +
		"Fetched ahead: the URLs pepd asked Squid for as the document arrived (preloaded ones and those only fetched ahead, " +
		"hints.preload_as), with those not asked for because a bound was reached (busy). " +
		"Preloads: requests the HAR shows Chromium started from the Link headers (initiator other, no initiator URL). " +
		"Never needed: preloaded URLs that no load of the same page without hints requested, the bytes the hints wasted; " +
		"their share of the radio bytes (up and down, the loads with a HAR) is the one the issue bounds at 3 %. " +
		"Chain: the longest initiator chain in levels (a preloaded URL hangs off the document: a font named in a stylesheet " +
		"is level 3 without hints, 2 with).\n\n")
	b.WriteString("| mode | loads | hints sent / load | used | unused (bytes) | fetched ahead / load (busy) | preloads / load (HAR) | preloaded bytes | never needed (bytes) | never needed / radio bytes | chain levels | PLT s | LCP s |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range rows {
		sent, used, unused, fetched, never, neverShare := "–", "–", "–", "–", "–", "–"
		if x.Base != "" {
			sent, used = perLoad(x.Sent, x.Loads), fmt.Sprint(x.Used)
			fetched = fmt.Sprintf("%s (%d)", perLoad(x.Fetched, x.Loads), x.Busy)
			unused = fmt.Sprintf("%d (%.1f kB)", x.Unused, float64(x.UnusedBytes)/1000)
			never = fmt.Sprintf("%d (%.1f kB)", x.NeverUsed, float64(x.NeverUsedBytes)/1000)
			if x.Unjudged > 0 {
				never += fmt.Sprintf(", %d unjudged", x.Unjudged)
			}
			neverShare = share(x.NeverUsedBytes, x.HARRadioBytes)
		}
		pre, preBytes, chain := "–", "–", "–"
		if x.HARLoads > 0 {
			pre = perLoad(x.Preloads, x.HARLoads)
			preBytes = fmt.Sprintf("%.1f kB", float64(x.PreloadBytes)/1000)
			chain = fmt.Sprintf("%.0f (%.0f-%.0f)", x.Chain.Median, x.Chain.Min, x.Chain.Max)
		}
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", x.Mode, x.Loads, sent, used, unused,
			fetched, pre, preBytes, never, neverShare, chain, secondsOrDash(x.PLT), secondsOrDash(x.LCP))
	}
	b.WriteString("\n")
}

func secondsOrDash(s Spread) string {
	if s.N == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", s.Median/1000)
}
