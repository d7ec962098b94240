package report

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// loadsOf returns the loads of mode in tv.
func (tv TimeView) loadsOf(mode string) []Load {
	var out []Load
	for _, l := range tv.Loads {
		if l.Mode == mode {
			out = append(out, l)
		}
	}
	return out
}

func spreadOf(ls []Load, f func(Load) float64) Spread {
	vs := make([]float64, len(ls))
	for i, l := range ls {
		vs[i] = f(l)
	}
	return NewSpread(vs)
}

// shares is the critical path's phases as shares of the summed PLT of ls.
func shares(ls []Load) (out [NumPhases]float64) {
	return sharesOf(ls, func(l Load) ([NumPhases]float64, float64) { return l.Critical, l.PLT })
}

// lcpShares is shares for the LCP element's path (Load.LCPCritical) over
// the loads of ls whose LCP resource was found, which it returns too.
func lcpShares(ls []Load) (out [NumPhases]float64, with []Load) {
	for _, l := range ls {
		if l.LCP > 0 {
			with = append(with, l)
		}
	}
	return sharesOf(with, func(l Load) ([NumPhases]float64, float64) { return l.LCPCritical, l.LCP }), with
}

// sharesOf sums each load's phases and total (of) and returns each
// phase's share of the summed total.
func sharesOf(ls []Load, of func(Load) ([NumPhases]float64, float64)) (out [NumPhases]float64) {
	var total float64
	for _, l := range ls {
		ph, t := of(l)
		for p := range NumPhases {
			out[p] += ph[p]
		}
		total += t
	}
	if total > 0 {
		for p := range out {
			out[p] /= total
		}
	}
	return out
}

func shareCells(s [NumPhases]float64) string {
	var b bytes.Buffer
	for _, v := range s {
		fmt.Fprintf(&b, " %.0f %% |", 100*v)
	}
	return b.String()
}

func phaseHeader() (string, string) {
	var h, sep bytes.Buffer
	for _, n := range PhaseNames {
		fmt.Fprintf(&h, " %s |", n)
		sep.WriteString("---:|")
	}
	return h.String(), sep.String()
}

// writeTimes prints where the loads' time went, from their HARs.
func writeTimes(b *bytes.Buffer, v View, tv TimeView) {
	if len(tv.Loads) == 0 && len(tv.Errors) == 0 {
		return
	}
	rtt := v.Profile.RTTms
	b.WriteString("### Where the time goes (a HAR per load)\n\n")
	fmt.Fprintf(b, "From each load's HAR (`har/`, Chromium's own network events; loads that loaded, requests started before onload). "+
		"Request bound: requests from the network / connections x RTT (%.0f ms): HTTP/1.1 carries one request per round trip per connection. "+
		"Link bound: bytes*8/rate + %d RTT. Chain: the longest initiator chain (document = level 1, what it names 2, what those name 3, a redirect one more), "+
		"in levels and in the round trips it needs at least (one per request, DNS lookup, TCP and TLS handshake on it). "+
		"Queued: the requests' time blocked in the browser (HAR blocked: Chromium's schedulers and the wait for a connection under its 6-per-host limit), summed over requests. "+
		"Critical path (WProf, NSDI 2013): from the request that ended last before onload back through its initiators to the document; "+
		"PLT split into each request's own phases and browser time between them; shares of the summed PLT. "+
		"A request's wait for the handshake of a connection another request opened (HTTP/2: every request to an origin but the first) counts as handshakes there, not queued. "+
		"Every load's figures, page by page: `%s-loads.csv`.\n\n", rtt, MinRoundTrips, safeName(v.Profile.Name))
	b.WriteString("Over all loads, medians over loads:\n\n")
	b.WriteString("| mode | loads | PLT | link bound | request bound | requests / conns | chain levels | chain RTTs (x RTT) | in flight max / mean | queued per load | requests queued > 1 RTT |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range v.Modes {
		ls := tv.loadsOf(m)
		if len(ls) == 0 {
			continue
		}
		med := func(f func(Load) float64) float64 { return spreadOf(ls, f).Median }
		fmt.Fprintf(b, "| %s | %d | %.2f s | %.2f s | %.2f s | %.0f / %.0f | %.0f | %.0f (%.2f s) | %.0f / %.1f | %.1f s | %.0f |\n", m, len(ls),
			med(func(l Load) float64 { return l.PLT })/1000,
			med(func(l Load) float64 { return Bound(float64(l.Bytes), v.Profile) })/1000,
			med(func(l Load) float64 { return l.RequestBound })/1000,
			med(func(l Load) float64 { return float64(l.Network) }), med(func(l Load) float64 { return float64(l.Conns) }),
			med(func(l Load) float64 { return float64(l.Depth) }),
			med(func(l Load) float64 { return float64(l.ChainRTTs) }), med(func(l Load) float64 { return float64(l.ChainRTTs) })*rtt/1000,
			med(func(l Load) float64 { return float64(l.MaxInFlight) }), med(func(l Load) float64 { return l.MeanInFlight }),
			med(func(l Load) float64 { return l.Queued })/1000,
			med(func(l Load) float64 { return float64(l.QueuedRequests) }))
	}
	b.WriteString("\n")
	h, sep := phaseHeader()
	b.WriteString("Share of PLT along the critical path, over all loads:\n\n")
	b.WriteString("| mode |" + h + "\n|---|" + sep + "\n")
	for _, m := range v.Modes {
		if ls := tv.loadsOf(m); len(ls) > 0 {
			fmt.Fprintf(b, "| %s |%s\n", m, shareCells(shares(ls)))
		}
	}
	b.WriteString("\n")
	b.WriteString("Share of LCP along the LCP element's path: from the LCP image's request (the page's last largest-contentful-paint candidate, " +
		"when it names a resource found in the HAR) back through its initiators to the document, up to LCP; browser time after the image's end is its decode and paint. " +
		"Over the loads whose LCP element is such an image; LCP s is their median LCP:\n\n")
	b.WriteString("| mode | loads with an image LCP | LCP s |" + h + "\n|---|---:|---:|" + sep + "\n")
	for _, m := range v.Modes {
		ls := tv.loadsOf(m)
		if len(ls) == 0 {
			continue
		}
		sh, with := lcpShares(ls)
		if len(with) == 0 {
			fmt.Fprintf(b, "| %s | 0 of %d | – |%s\n", m, len(ls), strings.Repeat(" – |", int(NumPhases)))
			continue
		}
		fmt.Fprintf(b, "| %s | %d of %d | %.2f |%s\n", m, len(with), len(ls),
			spreadOf(with, func(l Load) float64 { return l.LCP / 1000 }).Median, shareCells(sh))
	}
	b.WriteString("\n")

	if pg := MedianPage(v); pg != "" {
		fmt.Fprintf(b, "The median page (by direct's median PLT): **%s**; per mode its run with the median PLT:\n\n", pg)
		b.WriteString("| mode | run | PLT | link bound | request bound | requests / conns | chain levels | chain RTTs | queued |" + h + "\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|" + sep + "\n")
		for _, m := range v.Modes {
			i := tv.MedianLoad(pg, m)
			if i < 0 {
				continue
			}
			l := tv.Loads[i]
			fmt.Fprintf(b, "| %s | %d | %.2f s | %.2f s | %.2f s | %d / %d | %d | %d | %.1f s |%s\n", m, l.Run, l.PLT/1000, Bound(float64(l.Bytes), v.Profile)/1000,
				l.RequestBound/1000, l.Network, l.Conns, l.Depth, l.ChainRTTs, l.Queued/1000, shareCells(shares([]Load{l})))
		}
		b.WriteString("\n")
	}
	writeReach(b, v, tv)
	writeSlower(b, v, tv)
	writeUpgrades(b, v, tv)
	if len(tv.Loads) > 0 {
		sz := spreadOf(tv.Loads, func(l Load) float64 { return float64(l.HARBytes) / 1000 })
		var total int64
		for _, l := range tv.Loads {
			total += l.HARBytes
		}
		fmt.Fprintf(b, "HAR files: %d loads, %s kB per load (median (min-max)), %.1f MB in all.\n\n", len(tv.Loads), sz.Format(1), float64(total)/1e6)
	}
	if len(tv.Errors) > 0 {
		fmt.Fprintf(b, "HAR files that could not be read (%d):\n\n", len(tv.Errors))
		for i, e := range tv.Errors {
			if i == 10 {
				fmt.Fprintf(b, "- ... and %d more\n", len(tv.Errors)-10)
				break
			}
			fmt.Fprintf(b, "- %s\n", e)
		}
		b.WriteString("\n")
	}
}

// writeSlower lists, per mode, the pages whose median PLT is above
// direct's, with the change of each critical-path phase between the two
// median-run loads: where the extra time went.
func writeSlower(b *bytes.Buffer, v View, tv TimeView) {
	if _, ok := v.Totals["direct"]; !ok {
		return
	}
	h, sep := phaseHeader()
	wrote := false
	for _, m := range v.Modes {
		if m == "direct" {
			continue
		}
		type row struct {
			page string
			d    Load
			l    Load
		}
		var rows []row
		for _, pg := range v.Pages {
			a, d := v.Stats[[2]string{pg, m}], v.Stats[[2]string{pg, "direct"}]
			if a.PLT.N == 0 || d.PLT.N == 0 || a.PLT.Median <= d.PLT.Median {
				continue
			}
			i, j := tv.MedianLoad(pg, m), tv.MedianLoad(pg, "direct")
			if i < 0 || j < 0 {
				continue
			}
			rows = append(rows, row{pg, tv.Loads[j], tv.Loads[i]})
		}
		if len(rows) == 0 {
			continue
		}
		if !wrote {
			b.WriteString("Pages slower than direct (median PLT over runs), and where the time went: the change of each critical-path phase between the median-run loads (s), and the phase that grew most:\n\n")
			wrote = true
		}
		sort.SliceStable(rows, func(i, j int) bool { return rows[i].l.PLT-rows[i].d.PLT > rows[j].l.PLT-rows[j].d.PLT })
		fmt.Fprintf(b, "%s, %d of %d pages:\n\n", m, len(rows), len(v.Pages))
		b.WriteString("| page | PLT direct | PLT " + m + " | request bound direct / " + m + " |" + h + " most |\n")
		b.WriteString("|---|---:|---:|---:|" + sep + "---|\n")
		for _, r := range rows {
			fmt.Fprintf(b, "| %s | %.2f s | %.2f s | %.2f / %.2f s |", r.page, r.d.PLT/1000, r.l.PLT/1000, r.d.RequestBound/1000, r.l.RequestBound/1000)
			most, mostV := 0, 0.0
			for p := range NumPhases {
				d := r.l.Critical[p] - r.d.Critical[p]
				fmt.Fprintf(b, " %+.2f |", d/1000)
				if d > mostV {
					most, mostV = int(p), d
				}
			}
			name := "-"
			if mostV > 0 {
				name = PhaseNames[most]
			}
			fmt.Fprintf(b, " %s |\n", name)
		}
		b.WriteString("\n")
	}
}

// writeUpgrades prints, when any navigation was upgraded to https or came
// over https, what it cost per mode: Chromium's HttpsUpgrades (on in stock
// Chromium) turns an http:// navigation into https:// and falls back to
// http:// when that fails.
func writeUpgrades(b *bytes.Buffer, v View, tv TimeView) {
	any := false
	for _, l := range tv.Loads {
		any = any || l.Upgraded || l.DocHTTPS || l.Fallback
	}
	if !any {
		return
	}
	b.WriteString("Navigations upgraded to https (Chromium's HttpsUpgrades, on in stock Chromium: an http:// navigation is tried as https:// first, and loaded over http:// if that fails). ")
	b.WriteString("Cost of the attempt per navigation: the time from the first document request to the final one (the internal redirect, or the failed https attempt), and the final document's TLS handshake; medians over loads. ")
	b.WriteString("A page that loads over https passes through pepd spliced (TLS is never decrypted): url mode rewrites nothing on it.\n\n")
	b.WriteString("| mode | loads | upgraded | document over https | fell back to http | requests over https | before the final document | document TLS handshake |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range v.Modes {
		ls := tv.loadsOf(m)
		if len(ls) == 0 {
			continue
		}
		var up, https, fb int
		for _, l := range ls {
			if l.Upgraded {
				up++
			}
			if l.DocHTTPS {
				https++
			}
			if l.Fallback {
				fb++
			}
		}
		fmt.Fprintf(b, "| %s | %d | %d | %d | %d | %.0f %% | %.0f ms | %.0f ms |\n", m, len(ls), up, https, fb,
			100*spreadOf(ls, func(l Load) float64 { return l.HTTPSShare }).Median,
			spreadOf(ls, func(l Load) float64 { return l.DocDelay }).Median, spreadOf(ls, func(l Load) float64 { return l.DocTLS }).Median)
	}
	b.WriteString("\n")
}

// WriteLoadsCSV writes one row per analysed load of tv into path: what
// the report's HAR tables are computed from, for a reader's own cuts.
func WriteLoadsCSV(path string, v View, tv TimeView) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	w := csv.NewWriter(f)
	head := []string{"page", "mode", "run", "plt_ms", "bytes", "requests", "network_requests", "conns", "request_bound_ms", "link_bound_ms",
		"queued_ms", "requests_queued_over_rtt", "max_in_flight", "mean_in_flight", "chain_levels", "chain_rtts",
		"upgraded", "doc_https", "fallback", "doc_delay_ms", "doc_tls_ms", "https_share", "vip_bytes", "spliced_bytes"}
	for _, n := range PhaseNames {
		head = append(head, "critical_"+n+"_ms")
	}
	head = append(head, "lcp_image_ms")
	for _, n := range PhaseNames {
		head = append(head, "lcp_"+n+"_ms")
	}
	head = append(head, "har")
	w.Write(head)
	ff := func(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }
	for _, l := range tv.Loads {
		row := []string{l.Page, l.Mode, strconv.Itoa(l.Run), ff(l.PLT), strconv.FormatInt(l.Bytes, 10), strconv.Itoa(l.Requests), strconv.Itoa(l.Network),
			strconv.Itoa(l.Conns), ff(l.RequestBound), ff(Bound(float64(l.Bytes), v.Profile)), ff(l.Queued), strconv.Itoa(l.QueuedRequests),
			strconv.Itoa(l.MaxInFlight), strconv.FormatFloat(l.MeanInFlight, 'f', 2, 64), strconv.Itoa(l.Depth), strconv.Itoa(l.ChainRTTs),
			strconv.FormatBool(l.Upgraded), strconv.FormatBool(l.DocHTTPS), strconv.FormatBool(l.Fallback), ff(l.DocDelay), ff(l.DocTLS),
			strconv.FormatFloat(l.HTTPSShare, 'f', 3, 64), strconv.FormatInt(l.VIPBytes, 10), strconv.FormatInt(l.SplicedBytes, 10)}
		for _, c := range l.Critical {
			row = append(row, ff(c))
		}
		// The LCP image's path (Load.LCP, LCPCritical): empty cells for a
		// text LCP or an image the HAR does not hold.
		if l.LCP > 0 {
			row = append(row, ff(l.LCP))
			for _, c := range l.LCPCritical {
				row = append(row, ff(c))
			}
		} else {
			row = append(row, make([]string, 1+int(NumPhases))...)
		}
		row = append(row, l.HAR)
		w.Write(row)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("report: %s: %w", filepath.Base(path), err)
	}
	return f.Close()
}
