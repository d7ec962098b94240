package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// MinRoundTrips is the number of round trips the link's lower bound on a
// page load adds to the transfer time: one DNS lookup of the page's host,
// the TCP handshake, the request for the document, and one round of
// subresource requests that the document triggers (all later requests can
// overlap with the transfer). See Bound.
const MinRoundTrips = 4

// Spread is the median, minimum and maximum of a set of values; N is how
// many there were (0: no value, the rest meaningless).
type Spread struct {
	N                int
	Median, Min, Max float64
}

// NewSpread summarises vs (the median of an even count is the mean of the
// two middle values).
func NewSpread(vs []float64) Spread {
	if len(vs) == 0 {
		return Spread{}
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{N: len(s), Median: m, Min: s[0], Max: s[len(s)-1]}
}

// Format prints "median (min-max)" with the given number of decimals, just
// the median when min equals max, and "-" with no values.
func (s Spread) Format(decimals int) string {
	if s.N == 0 {
		return "-"
	}
	f := func(v float64) string { return fmt.Sprintf("%.*f", decimals, v) }
	if f(s.Min) == f(s.Max) {
		return f(s.Median)
	}
	return fmt.Sprintf("%s (%s-%s)", f(s.Median), f(s.Min), f(s.Max))
}

// Change returns the relative change of v against base in percent, NaN when
// base is 0.
func Change(v, base float64) float64 {
	if base == 0 {
		return math.NaN()
	}
	return (v - base) / base * 100
}

// Bound is the link's lower bound on loading bytes: bytes*8/rate plus
// MinRoundTrips round trips, in ms; with no rate, the round trips alone.
func Bound(bytes float64, p ProfileInfo) float64 {
	t := MinRoundTrips * p.RTTms
	if p.DownKbit > 0 {
		t += bytes * 8 / p.DownKbit // bits / (kbit/s) = ms
	}
	return t
}

// Kbit returns the throughput of bytes in ms, in kbit/s.
func Kbit(bytes, ms float64) float64 {
	if ms <= 0 {
		return 0
	}
	return bytes * 8 / ms
}

// ModeTotals is what one mode did over whole runs (Fig. 5): per-run totals
// over the pages, summarised over runs.
type ModeTotals struct {
	Mode                      string
	Conns, DNS, VIP, Origin   Spread // per run, summed over pages: browser connections, DNS queries, SYNs to the VIP and to origins
	SYNs, Reused              Spread // per run: SYNs on the link, connections reused from earlier pages
	ConnsPerPage, DNSPerPage  Spread // per run, divided by the pages of the run
	Loaded, Pages             int    // pages loaded and page loads in all runs
	Requests, Failed, Errs404 int    // summed over all runs
}

// PageStats is one page in one mode over the runs (Figs. 6 and 7).
type PageStats struct {
	Page, Mode string
	PLT, DCL   Spread // ms, loaded runs only
	// TTFB, FCP, LCP: ms, loaded runs that measured them.
	TTFB, FCP, LCP Spread
	// RadioBytes: IP bytes that crossed the radio link during the load,
	// both directions (loaded runs).
	RadioBytes Spread
	Bytes      Spread // bytes, loaded runs only
	Kbit       Spread // bytes*8/PLT, kbit/s
	Conns, DNS Spread // per load: browser connections, DNS queries
	Loaded     int
	Runs       int
}

// View is the results of one profile, grouped for the report.
type View struct {
	Profile ProfileInfo
	Modes   []string // in Modes order
	Pages   []string // in session order
	Runs    []int
	Totals  map[string]ModeTotals
	Stats   map[[2]string]PageStats // key: page, mode
	// HTTPSPages are the pages whose document loaded over https in some
	// record (Record.DocScheme), in Pages order: Chromium upgraded their
	// http:// URL (HSTS preload), and pepd, which never decrypts, loads
	// them as direct does in every mode.
	HTTPSPages []string
}

// Only returns v with its pages limited to those keep reports true for
// (the per-page statistics and Totals are v's own: Totals stay over every
// page).
func (v View) Only(keep func(page string) bool) View {
	v.Pages = slices.DeleteFunc(slices.Clone(v.Pages), func(p string) bool { return !keep(p) })
	v.HTTPSPages = slices.DeleteFunc(slices.Clone(v.HTTPSPages), func(p string) bool { return !keep(p) })
	return v
}

// Views groups r's records by profile (in the configuration's order, then
// by first appearance).
func Views(r *Results) []View {
	var names []string
	seen := map[string]bool{}
	for _, p := range r.Config.Profiles {
		if !seen[p.Name] {
			seen[p.Name] = true
			names = append(names, p.Name)
		}
	}
	for _, rec := range r.Records {
		if !seen[rec.Profile] {
			seen[rec.Profile] = true
			names = append(names, rec.Profile)
		}
	}
	var out []View
	for _, n := range names {
		var recs []Record
		for _, rec := range r.Records {
			if rec.Profile == n {
				recs = append(recs, rec)
			}
		}
		if len(recs) == 0 {
			continue
		}
		p, ok := r.Profile(n)
		if !ok {
			p = ProfileInfo{Name: n}
		}
		out = append(out, newView(p, recs))
	}
	return out
}

func newView(p ProfileInfo, recs []Record) View {
	v := View{Profile: p, Totals: map[string]ModeTotals{}, Stats: map[[2]string]PageStats{}}
	modeSet, runSet := map[string]bool{}, map[int]bool{}
	pageSeq := map[string]int{}
	for _, r := range recs {
		if !modeSet[r.Mode] {
			modeSet[r.Mode] = true
			v.Modes = append(v.Modes, r.Mode)
		}
		if !runSet[r.Run] {
			runSet[r.Run] = true
			v.Runs = append(v.Runs, r.Run)
		}
		if s, ok := pageSeq[r.Page]; !ok || r.Seq < s {
			if !ok {
				v.Pages = append(v.Pages, r.Page)
			}
			pageSeq[r.Page] = r.Seq
		}
	}
	v.Modes = modeOrder(v.Modes)
	sort.Ints(v.Runs)
	sort.SliceStable(v.Pages, func(i, j int) bool { return pageSeq[v.Pages[i]] < pageSeq[v.Pages[j]] })
	https := map[string]bool{}
	for _, r := range recs {
		if r.DocScheme == "https" {
			https[r.Page] = true
		}
	}
	for _, pg := range v.Pages {
		if https[pg] {
			v.HTTPSPages = append(v.HTTPSPages, pg)
		}
	}

	for _, m := range v.Modes {
		t := ModeTotals{Mode: m}
		var conns, dns, vip, origin, syns, reused, cpp, dpp []float64
		for _, run := range v.Runs {
			var c, d, vi, o, sy, re, n float64
			for _, r := range recs {
				if r.Mode != m || r.Run != run {
					continue
				}
				c += float64(r.BrowserConns)
				sy += float64(r.SYNCount)
				re += float64(r.BrowserConnsReused)
				d += float64(r.DNSQueries)
				vi += float64(r.VIPConns)
				o += float64(r.OriginConns)
				n++
				t.Pages++
				if r.Loaded {
					t.Loaded++
				}
				t.Requests += r.Requests
				t.Failed += r.Failed
				t.Errs404 += r.Origin404
			}
			if n == 0 {
				continue
			}
			conns, dns, vip, origin = append(conns, c), append(dns, d), append(vip, vi), append(origin, o)
			syns, reused = append(syns, sy), append(reused, re)
			cpp, dpp = append(cpp, c/n), append(dpp, d/n)
		}
		t.Conns, t.DNS, t.VIP, t.Origin = NewSpread(conns), NewSpread(dns), NewSpread(vip), NewSpread(origin)
		t.SYNs, t.Reused = NewSpread(syns), NewSpread(reused)
		t.ConnsPerPage, t.DNSPerPage = NewSpread(cpp), NewSpread(dpp)
		v.Totals[m] = t

		for _, pg := range v.Pages {
			s := PageStats{Page: pg, Mode: m}
			var plt, dcl, bytes, kbit, cs, ds, ttfb, fcp, lcp, radio []float64
			for _, r := range recs {
				if r.Mode != m || r.Page != pg {
					continue
				}
				s.Runs++
				cs, ds = append(cs, float64(r.BrowserConns)), append(ds, float64(r.DNSQueries))
				if !r.Loaded {
					continue
				}
				s.Loaded++
				plt, dcl = append(plt, r.PLTms), append(dcl, r.DCLms)
				radio = append(radio, float64(r.LinkUpBytes+r.LinkDnBytes))
				if r.TTFBms > 0 {
					ttfb = append(ttfb, r.TTFBms)
				}
				if r.FCPms > 0 {
					fcp = append(fcp, r.FCPms)
				}
				if r.LCPms > 0 {
					lcp = append(lcp, r.LCPms)
				}
				bytes = append(bytes, float64(r.Bytes))
				kbit = append(kbit, Kbit(float64(r.Bytes), r.PLTms))
			}
			s.PLT, s.DCL, s.Bytes, s.Kbit = NewSpread(plt), NewSpread(dcl), NewSpread(bytes), NewSpread(kbit)
			s.Conns, s.DNS = NewSpread(cs), NewSpread(ds)
			s.TTFB, s.FCP, s.LCP, s.RadioBytes = NewSpread(ttfb), NewSpread(fcp), NewSpread(lcp), NewSpread(radio)
			v.Stats[[2]string{pg, m}] = s
		}
	}
	return v
}

// PageBound is page pg's lower bound (Bound, ms) and the bytes it is
// computed from: the median bytes of its direct loads, else of the first
// mode's.
func (v View) PageBound(pg string) (ms, bytes float64) {
	ref := v.Stats[[2]string{pg, "direct"}]
	if ref.Bytes.N == 0 && len(v.Modes) > 0 {
		ref = v.Stats[[2]string{pg, v.Modes[0]}]
	}
	return Bound(ref.Bytes.Median, v.Profile), ref.Bytes.Median
}

// MeanChange is the mean over pages of the PLT change of mode against base
// (percent), over the pages both loaded; ok is false when there is none.
func (v View) MeanChange(mode, base string) (float64, bool) {
	var sum float64
	var n int
	for _, pg := range v.Pages {
		a, b := v.Stats[[2]string{pg, mode}], v.Stats[[2]string{pg, base}]
		if a.PLT.N == 0 || b.PLT.N == 0 || b.PLT.Median == 0 {
			continue
		}
		sum += Change(a.PLT.Median, b.PLT.Median)
		n++
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}

// Summary is one mode against a reference mode over a profile's pages, the
// figures issue 11's targets and the seed paper's §4.2 are read from. A page
// counts when both modes loaded it at least once; every per-page figure is
// the median over runs.
type Summary struct {
	Mode, Ref string
	Pages     int // pages compared
	// PLTMedianChange is the median over pages of the PLT change against
	// Ref, percent; PLTMeanRatio the mean over pages of mode/Ref.
	PLTMedianChange, PLTMeanRatio float64
	// FCPMedianChange and LCPMedianChange are the medians over pages of the
	// paint metrics' change against Ref, percent; NaN when not measured.
	FCPMedianChange, LCPMedianChange float64
	// RadioRatio is the radio bytes of all pages (sum of per-page medians)
	// against Ref's; RadioPerPage the median over pages, bytes, both ways.
	RadioRatio, RadioPerPage float64
	// Slower counts pages whose PLT median is above Ref's slowest run
	// (slower by more than Ref's spread), Faster those below Ref's fastest.
	Slower, Faster int
}

// Summarize compares mode with ref over v's pages; ok is false when no page
// was loaded in both.
func (v View) Summarize(mode, ref string) (s Summary, ok bool) {
	s = Summary{Mode: mode, Ref: ref}
	var plt, fcp, lcp, radio []float64
	var rb, rr float64
	for _, pg := range v.Pages {
		a, b := v.Stats[[2]string{pg, mode}], v.Stats[[2]string{pg, ref}]
		if a.PLT.N == 0 || b.PLT.N == 0 || b.PLT.Median == 0 {
			continue
		}
		s.Pages++
		plt = append(plt, a.PLT.Median/b.PLT.Median)
		if a.PLT.Median > b.PLT.Max {
			s.Slower++
		} else if a.PLT.Median < b.PLT.Min {
			s.Faster++
		}
		if a.FCP.N > 0 && b.FCP.N > 0 && b.FCP.Median > 0 {
			fcp = append(fcp, Change(a.FCP.Median, b.FCP.Median))
		}
		if a.LCP.N > 0 && b.LCP.N > 0 && b.LCP.Median > 0 {
			lcp = append(lcp, Change(a.LCP.Median, b.LCP.Median))
		}
		if a.RadioBytes.N > 0 && b.RadioBytes.N > 0 {
			rb += a.RadioBytes.Median
			rr += b.RadioBytes.Median
			radio = append(radio, a.RadioBytes.Median)
		}
	}
	if s.Pages == 0 {
		return s, false
	}
	median := func(vs []float64) float64 {
		if len(vs) == 0 {
			return math.NaN()
		}
		return NewSpread(vs).Median
	}
	var sum float64
	for _, r := range plt {
		sum += r
	}
	s.PLTMedianChange = (median(plt) - 1) * 100
	s.PLTMeanRatio = sum / float64(len(plt))
	s.FCPMedianChange, s.LCPMedianChange = median(fcp), median(lcp)
	s.RadioRatio, s.RadioPerPage = math.NaN(), median(radio)
	if rr > 0 {
		s.RadioRatio = rb / rr
	}
	return s, true
}
