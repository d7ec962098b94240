package report

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Markdown renders the report of r: the configuration, then per profile
// the tables of the seed paper's Figs. 5, 6 and 7 (§4.2), with medians and
// min-max over runs, and the plots' file names when plots is not empty.
func Markdown(r *Results, plots map[string][]string) []byte {
	return markdown(r, plots, nil)
}

// markdown is Markdown with the HAR analyses of the profiles that have
// them (writeTimes).
func markdown(r *Results, plots map[string][]string, times map[string]TimeView) []byte {
	var b bytes.Buffer
	c := r.Config
	b.WriteString("# pep testbed report\n\n")
	fmt.Fprintf(&b, "- corpus: `%s`, %d pages: %s\n", c.Corpus, len(c.Pages), strings.Join(c.Pages, ", "))
	fmt.Fprintf(&b, "- modes: %s; runs: %d (testbeds at once: %d); Squid cache: %s\n", strings.Join(c.Modes, ", "), c.Runs, max(c.Parallel, 1), c.SquidCache)
	if c.PrepareLink != "" {
		fmt.Fprintf(&b, "- loads not measured (warm-up and hints teaching passes, other subscribers' loads): over the radio link as %s; the measured loads over the profile they name\n", c.PrepareLink)
	}
	part := "partitioned by top-level site (Chromium's default)"
	if c.Unpartitioned {
		part = "not partitioned (PartitionConnectionsByNetworkIsolationKey and SplitHostCacheByNetworkAnonymizationKey off)"
	}
	fmt.Fprintf(&b, "- Chromium resolver: %s; HTTPS records asked: %v; connections and host cache %s\n", c.Resolver, c.HTTPSRR, part)
	oc := c.OriginCompress
	if oc == "" {
		oc = "none (results from before -origin-compress)"
	}
	fmt.Fprintf(&b, "- origin content coding: %s\n", oc)
	if len(c.CC) > 0 {
		fmt.Fprintf(&b, "- TCP congestion control (read back from each namespace): phone %s, gateway %s, origin %s\n", c.CC["phone"], c.CC["gateway"], c.CC["origin"])
	} else {
		b.WriteString("- TCP congestion control: not recorded (the host's default in every namespace)\n")
	}
	if len(c.GWTCP) > 0 {
		var ps []string
		for _, p := range slices.Sorted(maps.Keys(c.GWTCP)) {
			ps = append(ps, p+": "+c.GWTCP[p])
		}
		fmt.Fprintf(&b, "- gateway's TCP toward the radio link (read back; initcwnd 0 is the kernel's 10 segments): %s\n", strings.Join(ps, "; "))
	} else {
		b.WriteString("- gateway's TCP toward the radio link: not recorded (the kernel's: initcwnd 10, tcp_slow_start_after_idle 1)\n")
	}
	if len(c.Pepd) > 0 {
		fmt.Fprintf(&b, "- pepd settings (-pepd, over the testbed's pepd.yaml): `%s`\n", strings.Join(c.Pepd, "`, `"))
	}
	for _, v := range slices.Sorted(maps.Keys(c.Variants)) {
		fmt.Fprintf(&b, "- pepd settings of the modes tagged %s%s (-variant, over the -pepd ones): `%s`\n", VariantMark, v, strings.Join(c.Variants[v], "`, `"))
	}
	if len(c.DisableFeatures) > 0 {
		fmt.Fprintf(&b, "- Chromium features also turned off: %s\n", strings.Join(c.DisableFeatures, ", "))
	}
	fmt.Fprintf(&b, "- browser: %s\n", c.Browser)
	fmt.Fprintf(&b, "- link backend: %s; VIP %s; origins %s; page timeout %s\n", c.Backend, c.VIP, c.Origins, c.PageTimeout)
	if !c.Started.IsZero() {
		fmt.Fprintf(&b, "- started %s, finished %s (%s)\n", c.Started.Format("2006-01-02 15:04:05 MST"), c.Finished.Format("15:04:05"), c.Finished.Sub(c.Started).Round(1e9))
	}
	if c.Command != "" {
		fmt.Fprintf(&b, "- command: `%s`\n", c.Command)
	}
	for _, p := range c.Profiles {
		fmt.Fprintf(&b, "- profile %s: %s\n", p.Name, p.Exact)
	}
	if w := c.Wired; w != nil {
		fmt.Fprintf(&b, "- origins at a distance: gw-core link %s, RTT %.0f ms (%s); source: %s\n", w.Name, w.RTTms, w.Exact, w.Source)
	} else {
		b.WriteString("- origins at a distance: none (gw-core link not emulated: origins 0 ms from the gateway)\n")
	}
	b.WriteString("\n")
	writeChromium(&b, c)
	if len(c.Import) > 0 {
		b.WriteString("## Corpus import\n\n")
		for _, l := range c.Import {
			fmt.Fprintf(&b, "- %s\n", l)
		}
		b.WriteString("\n")
	}

	for _, v := range Views(r) {
		p := v.Profile
		fmt.Fprintf(&b, "## Profile %s: RTT %.0f ms, down %s, up %s\n\n", p.Name, p.RTTms, kbitString(p.DownKbit), kbitString(p.UpKbit))
		if p.Description != "" {
			fmt.Fprintf(&b, "%s.\n\n", p.Description)
		}
		writeSummary(&b, v)
		writeVIPOrigin(&b, v, r)
		writeFig5(&b, v)
		writeSockets(&b, v, r)
		writeFig6(&b, v)
		writePaint(&b, v)
		writeFig7(&b, v)
		if tv, ok := times[p.Name]; ok {
			writeTimes(&b, v, tv)
		}
		writeHints(&b, v, r, times[p.Name])
		writeOptimizer(&b, v, r)
		writeMissing(&b, v, r)
		writeFailures(&b, v, r)
		if names := plots[p.Name]; len(names) > 0 {
			for _, n := range names {
				fmt.Fprintf(&b, "![%s](%s)\n", strings.TrimSuffix(n, ".png"), n)
			}
			b.WriteString("\n")
		}
	}
	return b.Bytes()
}

// writeChromium lists every default of stock Chromium the run's browser
// changed, and why; for a run with the testbed's defaults, also which of
// them -stock-chromium gives back.
func writeChromium(b *bytes.Buffer, c RunConfig) {
	if len(c.ChromiumChanges) == 0 {
		return
	}
	b.WriteString("## Chromium against stock Chromium\n\n")
	if c.StockChromium {
		b.WriteString("This run used stock Chromium's defaults for everything that changes how a page loads (`-stock-chromium`: HTTPS upgrades, QUIC, HTTPS records and the resolver at their defaults). What it still changes, none of which touches a page load:\n\n")
	} else {
		b.WriteString("Every default of stock Chromium this run's browser changed, and why. `-stock-chromium` gives back the ones marked \"no\" in the last column (a campaign with it shows what a stock browser pays).\n\n")
	}
	b.WriteString("| change | why | kept with -stock-chromium |\n|---|---|---|\n")
	// One row per reason: the quieting flags share theirs.
	type row struct {
		what []string
		why  string
		kept bool
	}
	var rows []*row
	for _, ch := range c.ChromiumChanges {
		var r *row
		for _, x := range rows {
			if x.why == ch.Why && x.kept == ch.KeptInStock {
				r = x
			}
		}
		if r == nil {
			r = &row{why: ch.Why, kept: ch.KeptInStock}
			rows = append(rows, r)
		}
		r.what = append(r.what, "`"+ch.What+"`")
	}
	for _, r := range rows {
		kept := "no"
		if r.kept {
			kept = "yes"
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", strings.Join(r.what, ", "), r.why, kept)
	}
	b.WriteString("\n")
}

func kbitString(k float64) string {
	if k <= 0 {
		return "unlimited"
	}
	if k >= 1000 {
		return fmt.Sprintf("%.4g Mbit/s", k/1000)
	}
	return fmt.Sprintf("%.4g kbit/s", k)
}

// writeVIPOrigin prints, for the url modes of a profile, the scheme and k
// of the VIP URLs, the protocol the browser got the VIP's responses over
// (most pages' vip_proto) and the browser's connections to the VIP per
// page (median, min-max over pages and runs): url over HTTP/1.1 against
// the VIP's HTTPS origin over HTTP/2 with k shards (issue 25).
func writeVIPOrigin(b *bytes.Buffer, v View, r *Results) {
	type acc struct {
		scheme string
		k      int
		protos map[string]int
		conns  []float64
		// held surplus TLS handshakes, closed and served, over loads
		closed, served, loads int
	}
	per := map[string]*acc{}
	for _, rec := range r.Records {
		if rec.Profile != v.Profile.Name || rec.Scheme == "" {
			continue
		}
		a := per[rec.Mode]
		if a == nil {
			a = &acc{scheme: rec.Scheme, k: rec.Shards, protos: map[string]int{}}
			per[rec.Mode] = a
		}
		if rec.VIPProto != "" {
			a.protos[rec.VIPProto]++
		}
		a.conns = append(a.conns, float64(rec.BrowserVIPConns))
		a.closed += rec.TLSSurplusClosed
		a.served += rec.TLSSurplusServed
		a.loads++
	}
	if len(per) == 0 {
		return
	}
	b.WriteString("### The VIP's origin per url mode\n\n")
	b.WriteString("Scheme and k of the VIP URLs, the protocol most pages got the VIP's responses over, the browser's new connections to the VIP per page (median, min-max over pages and runs), and over HTTPS the TLS handshakes pepd held behind the subscriber's first to the same origin (`https.hold_surplus`) per page: closed by the browser unanswered, and served after the hold (sums over the loads divided by their number).\n\n")
	b.WriteString("| mode | scheme | k | protocol | VIP connections per page | held handshakes closed / served per page |\n|---|---|---:|---|---:|---:|\n")
	for _, m := range v.Modes {
		a := per[m]
		if a == nil {
			continue
		}
		proto, n := "", 0
		for p, c := range a.protos {
			if c > n || c == n && p < proto {
				proto, n = p, c
			}
		}
		held := "-"
		if a.scheme == "https" && a.loads > 0 {
			held = fmt.Sprintf("%.2f / %.2f", float64(a.closed)/float64(a.loads), float64(a.served)/float64(a.loads))
		}
		fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s |\n", m, a.scheme, a.k, cmp.Or(proto, "-"), NewSpread(a.conns).Format(0), held)
	}
	b.WriteString("\n")
}

// writeSockets prints, when the run saved net logs (-netlog), the TCP
// sockets each mode's browser connected per page, to the VIP and to the
// rest, and how many of them carried a request (Results.Sockets): the
// sockets a browser opens and never uses, and the TLS handshakes made on
// them, which no HAR shows. Sums over the sessions divided by their loads.
func writeSockets(b *bytes.Buffer, v View, r *Results) {
	type acc struct {
		pages      int
		vip, other SocketCounts
	}
	per := map[string]*acc{}
	for _, ss := range r.Sockets {
		if ss.Profile != v.Profile.Name {
			continue
		}
		a := per[ss.Mode]
		if a == nil {
			a = &acc{}
			per[ss.Mode] = a
		}
		a.pages += ss.Pages
		for _, x := range []struct{ dst, src *SocketCounts }{{&a.vip, &ss.VIP}, {&a.other, &ss.Other}} {
			x.dst.Sockets += x.src.Sockets
			x.dst.Used += x.src.Used
			x.dst.TLS += x.src.TLS
			x.dst.TLSDone += x.src.TLSDone
			x.dst.TLSUnused += x.src.TLSUnused
		}
	}
	if len(per) == 0 {
		return
	}
	b.WriteString("### Sockets the browser connected (net log)\n\n")
	b.WriteString("From each measured session's Chromium net log (`-netlog`): TCP sockets connected, those that carried a request, TLS handshakes begun (a ClientHello sent), finished, and begun on a socket that then carried no request; per page (sums over the sessions divided by their loads), to the VIP and to every other address.\n\n")
	b.WriteString("| mode | loads | VIP sockets | used | TLS begun | finished | without a request | other sockets | used | TLS begun | without a request |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range v.Modes {
		a := per[m]
		if a == nil || a.pages == 0 {
			continue
		}
		pp := func(n int) string { return fmt.Sprintf("%.1f", float64(n)/float64(a.pages)) }
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", m, a.pages,
			pp(a.vip.Sockets), pp(a.vip.Used), pp(a.vip.TLS), pp(a.vip.TLSDone), pp(a.vip.TLSUnused),
			pp(a.other.Sockets), pp(a.other.Used), pp(a.other.TLS), pp(a.other.TLSUnused))
	}
	b.WriteString("\n")
}

func writeFig5(b *bytes.Buffer, v View) {
	fmt.Fprintf(b, "### TCP connections and DNS requests over the radio link (Fig. 5)\n\n")
	fmt.Fprintf(b, "Per run (one pass over the %d pages; median (min-max) over %d runs). TCP connections: new connections that carried the pages' responses (the browser's count, as the paper's instrumented Mozilla), and those reused from earlier pages. SYNs: connection attempts that crossed the radio link (retransmissions included), split by destination. DNS: queries that crossed the radio link.\n\n", len(v.Pages), len(v.Runs))
	b.WriteString("| mode | TCP connections | per page | reused | SYNs | to VIP | to origins | DNS requests | per page | pages loaded |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	base, hasBase := v.Totals["direct"]
	for _, m := range v.Modes {
		t := v.Totals[m]
		conns, dns := t.Conns.Format(0), t.DNS.Format(0)
		if hasBase && m != "direct" {
			conns += pct(Change(t.Conns.Median, base.Conns.Median))
			dns += pct(Change(t.DNS.Median, base.DNS.Median))
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d/%d |\n", m, conns, t.ConnsPerPage.Format(1), t.Reused.Format(0),
			t.SYNs.Format(0), t.VIP.Format(0), t.Origin.Format(0), dns, t.DNSPerPage.Format(1), t.Loaded, t.Pages)
	}
	b.WriteString("\n")
}

// writeSummary prints, first in a profile's section, every mode against
// direct over all pages (View.Summarize), then each +opt mode against the
// same mode without the optimizer and each +warm mode against the same
// mode on a cold cache: the figures a comparison is judged by,
// with the pages slower than the reference by more than its spread.
// When some pages loaded their document over https (View.HTTPSPages), it
// names them and gives the table again over the other pages, and over
// them alone: the control, which pep only splices.
func writeSummary(b *bytes.Buffer, v View) {
	rows := summaryRows(v)
	if len(rows) == 0 {
		return
	}
	b.WriteString("### Summary\n\n")
	b.WriteString("Each mode against a reference over the pages both loaded: per page the median over runs, then the median (or mean, or sum) over pages. Changes in percent; radio = IP bytes over the radio link, both ways; slower / faster = pages whose median PLT is above the reference's slowest run / below its fastest.\n\n")
	writeSummaryTable(b, rows)
	if n := len(v.HTTPSPages); n > 0 && n < len(v.Pages) {
		fmt.Fprintf(b, "**Over the %d pages whose document loaded over http.** %d pages loaded their document over https in some load (%s): Chromium upgraded their http:// URL to https:// itself (its HSTS preload list), and pepd, which never decrypts, cannot change them: every mode loads them as direct does. The same rows without them:\n\n",
			len(v.Pages)-n, n, strings.Join(v.HTTPSPages, ", "))
		https := map[string]bool{}
		for _, p := range v.HTTPSPages {
			https[p] = true
		}
		writeSummaryTable(b, summaryRows(v.Only(func(p string) bool { return !https[p] })))
		fmt.Fprintf(b, "**The %d https pages, the campaign's control.** pepd only splices them, so every mode loads them as direct does, and their change against direct should be 0 within the spread: a change beyond it is the campaign's, not pep's (testbeds that shared the machine unequally: testbed/README.md, \"Runs and the cache\"), and the other rows carry it too.\n\n", n)
		writeSummaryTable(b, summaryRows(v.Only(func(p string) bool { return https[p] })))
	}
}

// summaryRows are the summary's rows: each mode against direct, then
// each +opt and +warm mode against the mode without it.
func summaryRows(v View) []Summary {
	var rows []Summary
	for _, m := range v.Modes {
		if m == "direct" {
			continue
		}
		if s, ok := v.Summarize(m, "direct"); ok {
			rows = append(rows, s)
		}
	}
	for _, suffix := range []string{"+opt", "+warm"} {
		for _, m := range v.Modes {
			if base, ok := strings.CutSuffix(m, suffix); ok && slices.Contains(v.Modes, base) {
				if s, ok := v.Summarize(m, base); ok {
					rows = append(rows, s)
				}
			}
		}
	}
	// A variant against the same mode with -pepd's settings alone: peers
	// measured in the same campaign.
	for _, m := range v.Modes {
		if plain, name := SplitVariant(m); name != "" && slices.Contains(v.Modes, plain) {
			if s, ok := v.Summarize(m, plain); ok {
				rows = append(rows, s)
			}
		}
	}
	return rows
}

// writeSummaryTable writes rows as the summary's table.
func writeSummaryTable(b *bytes.Buffer, rows []Summary) {
	b.WriteString("| mode | against | pages | PLT median change | PLT mean ratio | FCP median change | LCP median change | radio bytes ratio | radio kB per page (median) | slower | faster |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	chg := func(c float64) string {
		if math.IsNaN(c) {
			return "-"
		}
		return fmt.Sprintf("%+.1f %%", c)
	}
	num := func(f string, x float64) string {
		if math.IsNaN(x) {
			return "-"
		}
		return fmt.Sprintf(f, x)
	}
	for _, s := range rows {
		fmt.Fprintf(b, "| %s | %s | %d | %s | %.2f | %s | %s | %s | %s | %d | %d |\n", s.Mode, s.Ref, s.Pages, chg(s.PLTMedianChange), s.PLTMeanRatio,
			chg(s.FCPMedianChange), chg(s.LCPMedianChange), num("%.2f", s.RadioRatio), num("%.0f", s.RadioPerPage/1000), s.Slower, s.Faster)
	}
	b.WriteString("\n")
}

func pct(c float64) string {
	if math.IsNaN(c) {
		return ""
	}
	return fmt.Sprintf(" (%+.0f %%)", c)
}

func writeFig6(b *bytes.Buffer, v View) {
	fmt.Fprintf(b, "### Page load time (Fig. 6)\n\n")
	b.WriteString("PLT = navigationStart to loadEventEnd, seconds, median (min-max) over runs; the change is the median's against direct.\n\n")
	b.WriteString("| page |")
	for _, m := range v.Modes {
		fmt.Fprintf(b, " %s |", m)
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(v.Modes)) + "\n")
	for _, pg := range v.Pages {
		fmt.Fprintf(b, "| %s |", pg)
		base := v.Stats[[2]string{pg, "direct"}]
		for _, m := range v.Modes {
			s := v.Stats[[2]string{pg, m}]
			cell := seconds(s.PLT)
			if m != "direct" && s.PLT.N > 0 && base.PLT.N > 0 {
				cell += pct(Change(s.PLT.Median, base.PLT.Median))
			}
			if s.Loaded < s.Runs {
				cell += fmt.Sprintf(" [%d/%d loaded]", s.Loaded, s.Runs)
			}
			fmt.Fprintf(b, " %s |", cell)
		}
		b.WriteString("\n")
	}
	if _, ok := v.Totals["direct"]; ok && len(v.Modes) > 1 {
		b.WriteString("| **mean change vs direct** |")
		for _, m := range v.Modes {
			if c, ok := v.MeanChange(m, "direct"); ok && m != "direct" {
				fmt.Fprintf(b, " **%+.0f %%** |", c)
			} else {
				b.WriteString(" |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// writePaint prints, beside the paper's PLT, the metrics users and
// browser teams judge by (TTFB, FCP, LCP) and the bytes that crossed the
// radio link, per page and mode, median (min-max) over runs, with the mean
// change against direct: a change that shortens onload by hiding content
// shows here.
func writePaint(b *bytes.Buffer, v View) {
	has := false
	for _, s := range v.Stats {
		if s.FCP.N > 0 {
			has = true
			break
		}
	}
	if !has {
		return
	}
	b.WriteString("### Paint metrics and radio bytes\n\n")
	b.WriteString("TTFB = the document's responseStart, FCP = first contentful paint, LCP = largest contentful paint (last candidate after the page settled), seconds from navigationStart; radio = IP bytes that crossed the radio link during the load, both ways, kB; median (min-max) over runs, change of the median against direct.\n\n")
	b.WriteString("| page | mode | TTFB | FCP | LCP | radio kB |\n|---|---|---:|---:|---:|---:|\n")
	for _, pg := range v.Pages {
		base := v.Stats[[2]string{pg, "direct"}]
		for _, m := range v.Modes {
			s := v.Stats[[2]string{pg, m}]
			cell := func(x, ref Spread, scale float64) string {
				if x.N == 0 {
					return "-"
				}
				out := Spread{N: x.N, Median: x.Median / scale, Min: x.Min / scale, Max: x.Max / scale}.Format(2)
				if m != "direct" && ref.N > 0 && ref.Median > 0 {
					out += pct(Change(x.Median, ref.Median))
				}
				return out
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", pg, m, cell(s.TTFB, base.TTFB, 1000), cell(s.FCP, base.FCP, 1000),
				cell(s.LCP, base.LCP, 1000), cell(s.RadioBytes, base.RadioBytes, 1000))
		}
	}
	if _, ok := v.Totals["direct"]; ok && len(v.Modes) > 1 {
		b.WriteString("\n| mean change vs direct | FCP | LCP | radio bytes |\n|---|---:|---:|---:|\n")
		for _, m := range v.Modes {
			if m == "direct" {
				continue
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", m, meanChangeOf(v, m, func(s PageStats) Spread { return s.FCP }),
				meanChangeOf(v, m, func(s PageStats) Spread { return s.LCP }), meanChangeOf(v, m, func(s PageStats) Spread { return s.RadioBytes }))
		}
	}
	b.WriteString("\n")
}

// meanChangeOf is the mean over pages of the change of a metric's median
// in mode against direct, formatted, or "-".
func meanChangeOf(v View, mode string, f func(PageStats) Spread) string {
	var sum float64
	n := 0
	for _, pg := range v.Pages {
		a, b := f(v.Stats[[2]string{pg, mode}]), f(v.Stats[[2]string{pg, "direct"}])
		if a.N == 0 || b.N == 0 || b.Median == 0 {
			continue
		}
		sum += Change(a.Median, b.Median)
		n++
	}
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%+.0f %%", sum/float64(n))
}

func seconds(s Spread) string {
	if s.N == 0 {
		return "-"
	}
	return Spread{N: s.N, Median: s.Median / 1000, Min: s.Min / 1000, Max: s.Max / 1000}.Format(2)
}

func writeFig7(b *bytes.Buffer, v View) {
	p := v.Profile
	fmt.Fprintf(b, "### Throughput (Fig. 7)\n\n")
	fmt.Fprintf(b, "bytes*8/PLT in kbit/s (median over runs); in brackets, as a share of the link's rate (down, %s), then as a share of the throughput of the page's lower bound: bytes*8/rate + %d RTT (DNS, TCP handshake, document, one round of subresources), the best a browser could do.\n\n", kbitString(p.DownKbit), MinRoundTrips)
	b.WriteString("| page | bytes (direct) | bound |")
	for _, m := range v.Modes {
		fmt.Fprintf(b, " %s |", m)
	}
	b.WriteString("\n|---|---:|---:|" + strings.Repeat("---:|", len(v.Modes)) + "\n")
	for _, pg := range v.Pages {
		bound, refBytes := v.PageBound(pg)
		fmt.Fprintf(b, "| %s | %.0f | %.2f s, %.1f kbit/s |", pg, refBytes, bound/1000, Kbit(refBytes, bound))
		for _, m := range v.Modes {
			s := v.Stats[[2]string{pg, m}]
			if s.Kbit.N == 0 {
				b.WriteString(" - |")
				continue
			}
			own := Bound(s.Bytes.Median, p)
			rate := "-"
			if p.DownKbit > 0 {
				rate = fmt.Sprintf("%.0f %%", 100*s.Kbit.Median/p.DownKbit)
			}
			fmt.Fprintf(b, " %.1f (%s, %.0f %%) |", s.Kbit.Median, rate, 100*own/s.PLT.Median)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

func writeFailures(b *bytes.Buffer, v View, r *Results) {
	var lines []string
	for _, rec := range r.Records {
		if rec.Profile == v.Profile.Name && !rec.Loaded {
			lines = append(lines, fmt.Sprintf("- %s, run %d, %s: %s", rec.Mode, rec.Run, rec.Page, rec.Error))
		}
	}
	var requests, failed, e404 int
	for _, m := range v.Modes {
		t := v.Totals[m]
		requests += t.Requests
		failed += t.Failed
		e404 += t.Errs404
	}
	fmt.Fprintf(b, "Requests: %d, failed: %d, answered 404 by the replay origin: %d.\n\n", requests, failed, e404)
	if len(lines) > 0 {
		b.WriteString("Pages that did not load:\n\n" + strings.Join(lines, "\n") + "\n\n")
	}
}

// Generate writes dir/report.md and the PNG plots of r into dir and returns
// the report's text. Records with a HAR add the section "where the time
// goes" (writeTimes), its plots, and dir/PROFILE-loads.csv (one row per
// load: WriteLoadsCSV).
func Generate(r *Results, dir string) ([]byte, error) {
	times := readTimes(r, dir)
	for _, v := range Views(r) {
		if tv, ok := times[v.Profile.Name]; ok && len(tv.Loads) > 0 {
			if err := WriteLoadsCSV(filepath.Join(dir, safeName(v.Profile.Name)+"-loads.csv"), v, tv); err != nil {
				return nil, err
			}
		}
	}
	plots, err := plots(r, dir, times)
	if err != nil {
		return nil, err
	}
	md := markdown(r, plots, times)
	if err := os.WriteFile(filepath.Join(dir, "report.md"), md, 0o644); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return md, nil
}
