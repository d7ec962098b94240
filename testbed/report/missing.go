package report

import (
	"bytes"
	"fmt"
	"slices"
)

// NoResponse returns how many of the load's requests got no response at
// all (a DNS lookup that failed, a connection refused or reset): Failed
// less the origin's answers of status 400 or more (HTTPErrors).
func (r Record) NoResponse() int { return max(r.Failed-r.HTTPErrors, 0) }

// Missing is a page whose reference (direct) loads lacked responses that
// a mode's loads got: content missing from the reference, which can
// shorten its onload (on the congested paper cell, direct's DNS lookup of
// ads.cnn.com failed in 4 of 5 runs, and with it a 16 KB image url mode
// loaded).
type Missing struct {
	Page, Mode string
	// Incomplete and Loads: the reference's loads with more requests
	// without a response (Record.NoResponse) than the mode's median load,
	// and all its loads.
	Incomplete, Loads int
	// RefNoResponse and ModeNoResponse: requests without a response per
	// load, medians.
	RefNoResponse, ModeNoResponse float64
	// RefPLT is the reference's median PLT over all its loads, RefPLTComplete
	// over its complete ones (0 when none was), ModePLT the mode's, ms.
	RefPLT, RefPLTComplete, ModePLT float64
}

// MissingContent returns, for profile's records, the pages and modes
// whose reference (ref) loads missed responses the mode's got, in the
// order of pages and then modes of v.
func MissingContent(v View, records []Record, ref string) []Missing {
	loads := map[[2]string][]Record{}
	for _, r := range records {
		if r.Profile == v.Profile.Name && r.Loaded {
			k := [2]string{r.Page, r.Mode}
			loads[k] = append(loads[k], r)
		}
	}
	median := func(rs []Record, f func(Record) float64) float64 {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = f(r)
		}
		return NewSpread(vs).Median
	}
	noResp := func(r Record) float64 { return float64(r.NoResponse()) }
	plt := func(r Record) float64 { return r.PLTms }
	var out []Missing
	for _, pg := range v.Pages {
		refs := loads[[2]string{pg, ref}]
		for _, m := range v.Modes {
			ms := loads[[2]string{pg, m}]
			if m == ref || len(refs) == 0 || len(ms) == 0 {
				continue
			}
			modeNo := median(ms, noResp)
			complete := slices.DeleteFunc(slices.Clone(refs), func(r Record) bool { return noResp(r) > modeNo })
			if len(complete) == len(refs) {
				continue
			}
			x := Missing{Page: pg, Mode: m, Incomplete: len(refs) - len(complete), Loads: len(refs),
				RefNoResponse: median(refs, noResp), ModeNoResponse: modeNo, RefPLT: median(refs, plt), ModePLT: median(ms, plt)}
			if len(complete) > 0 {
				x.RefPLTComplete = median(complete, plt)
			}
			out = append(out, x)
		}
	}
	return out
}

// writeMissing lists the pages whose direct loads missed responses that
// a mode's loads got (MissingContent), with the PLT ratio against all of
// direct's loads and against its complete ones.
func writeMissing(b *bytes.Buffer, v View, r *Results) {
	rows := MissingContent(v, r.Records, "direct")
	if len(rows) == 0 {
		return
	}
	b.WriteString("### Content missing from direct's loads\n\n")
	b.WriteString("Pages where direct's loads got no response to requests that a mode's loads got (a DNS lookup over the radio link that failed, a connection that did not open): a load with content missing can end sooner. Requests without a response per load (failed, less the origin's 4xx/5xx answers), medians; a direct load is incomplete when it has more of them than the mode's median load. PLT ratio = the mode's median PLT over direct's, over all of direct's loads and over its complete ones alone.\n\n")
	b.WriteString("| page | mode | direct loads incomplete | no response per load, direct / mode | direct PLT, all / complete loads | mode PLT | PLT ratio, all / complete |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|\n")
	for _, x := range rows {
		complete, ratio := "-", "-"
		if x.RefPLTComplete > 0 {
			complete = fmt.Sprintf("%.2f s", x.RefPLTComplete/1000)
			ratio = fmt.Sprintf("%.2f", x.ModePLT/x.RefPLTComplete)
		}
		fmt.Fprintf(b, "| %s | %s | %d of %d | %.0f / %.0f | %.2f s / %s | %.2f s | %.2f / %s |\n", x.Page, x.Mode, x.Incomplete, x.Loads,
			x.RefNoResponse, x.ModeNoResponse, x.RefPLT/1000, complete, x.ModePLT/1000, x.ModePLT/x.RefPLT, ratio)
	}
	b.WriteString("\n")
}
