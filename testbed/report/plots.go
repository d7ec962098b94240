package report

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// modeColors keeps a mode's colour the same in every plot.
var modeColors = map[string]color.RGBA{
	"direct": {R: 0x60, G: 0x60, B: 0x60, A: 0xff},
	"off":    {R: 0x4c, G: 0x72, B: 0xb0, A: 0xff},
	"dns":    {R: 0xdd, G: 0x84, B: 0x52, A: 0xff},
	"url":    {R: 0x55, G: 0xa8, B: 0x68, A: 0xff},
}

func modeColor(m string) color.Color {
	// A mode on a warm cache ("url+warm"): its cold mode's hue, lighter.
	if cold, ok := strings.CutSuffix(m, "+warm"); ok {
		r, g, b, _ := modeColor(cold).RGBA()
		light := func(v uint32) uint8 { return uint8((v >> 8) + (255-(v>>8))/2) }
		return color.RGBA{R: light(r), G: light(g), B: light(b), A: 0xff}
	}
	if c, ok := modeColors[m]; ok {
		return c
	}
	// A mode with the optimizer on ("url+opt"): its mode's hue, darker.
	if base, ok := strings.CutSuffix(m, "+opt"); ok {
		if c, ok := modeColors[base]; ok {
			return color.RGBA{R: c.R * 3 / 5, G: c.G * 3 / 5, B: c.B * 3 / 5, A: 0xff}
		}
	}
	return plotter.DefaultLineStyle.Color
}

// ManyPages is the page count above which per-page bar groups give way to
// distributions (empirical CDFs over pages): 100 bar groups are unreadable.
const ManyPages = 12

// Plots writes, per profile of r, each plot as PNG and SVG into dir:
// NAME-fig5-conns-dns (connections and DNS requests per page and mode),
// NAME-fig6-plt (PLT per page and mode with min-max bars and the page's
// lower bound; with more than ManyPages pages, the CDF of per-page median
// PLT per mode), NAME-fig7-throughput (throughput per page and mode with
// the link rate and the lower bound's throughput; omitted for many pages)
// and NAME-change (per-page PLT change against direct per mode: bars, or
// a CDF for many pages; only when direct and another mode ran). Every
// y-axis has headroom above the largest value drawn, legends sit in space
// kept free for them, page names are slanted. It returns the PNG file
// names per profile (the SVG is the same name with .svg).
//
// With HARs (Record.HAR), per profile also: NAME-inflight (requests in
// flight and blocked over time, the median page, every mode),
// NAME-critical (the critical path's phases as shares of PLT per mode) and
// NAME-waterfall-MODE (the median page's median-run load, one row per
// request).
func Plots(r *Results, dir string) (map[string][]string, error) {
	return plots(r, dir, readTimes(r, dir))
}

// readTimes analyses the HARs of every profile of r that has any.
func readTimes(r *Results, dir string) map[string]TimeView {
	out := map[string]TimeView{}
	for _, v := range Views(r) {
		if tv := ReadTimes(r, dir, v); len(tv.Loads) > 0 || len(tv.Errors) > 0 {
			out[v.Profile.Name] = tv
		}
	}
	return out
}

func plots(r *Results, dir string, times map[string]TimeView) (map[string][]string, error) {
	out := map[string][]string{}
	for _, v := range Views(r) {
		name := safeName(v.Profile.Name)
		type fig struct {
			file string
			draw func(View) (*plot.Plot, vg.Length, error)
		}
		figs := []fig{{name + "-fig5-conns-dns", plotFig5}}
		if len(v.Pages) > ManyPages {
			figs = append(figs, fig{name + "-fig6-plt-cdf", plotPLTCDF})
		} else {
			figs = append(figs, fig{name + "-fig6-plt", plotFig6}, fig{name + "-fig7-throughput", plotFig7})
		}
		if _, ok := v.Totals["direct"]; ok && len(v.Modes) > 1 {
			figs = append(figs, fig{name + "-change", plotChange})
		}
		for _, f := range figs {
			p, width, err := f.draw(v)
			if err != nil {
				return nil, fmt.Errorf("report: plot %s: %w", f.file, err)
			}
			for _, ext := range []string{".png", ".svg"} {
				if err := p.Save(width, 11*vg.Centimeter, filepath.Join(dir, f.file+ext)); err != nil {
					return nil, fmt.Errorf("report: %w", err)
				}
			}
			out[v.Profile.Name] = append(out[v.Profile.Name], f.file+".png")
		}
		if tv, ok := times[v.Profile.Name]; ok && len(tv.Loads) > 0 {
			names, err := timingPlots(v, tv, dir, name)
			if err != nil {
				return nil, err
			}
			out[v.Profile.Name] = append(out[v.Profile.Name], names...)
		}
	}
	return out, nil
}

// timingPlots writes the HAR plots of one profile (Plots).
func timingPlots(v View, tv TimeView, dir, name string) ([]string, error) {
	var out []string
	save := func(p *plot.Plot, file string, w, h vg.Length) error {
		for _, ext := range []string{".png", ".svg"} {
			if err := p.Save(w, h, filepath.Join(dir, file+ext)); err != nil {
				return fmt.Errorf("report: %w", err)
			}
		}
		out = append(out, file+".png")
		return nil
	}
	p, w, err := plotShares(v, tv)
	if err != nil {
		return nil, fmt.Errorf("report: plot %s-critical: %w", name, err)
	}
	if err := save(p, name+"-critical", w, 11*vg.Centimeter); err != nil {
		return nil, err
	}
	page := MedianPage(v)
	if page == "" {
		return out, nil
	}
	p, w, err = plotInFlight(v, tv, page)
	if err != nil {
		return nil, fmt.Errorf("report: plot %s-inflight: %w", name, err)
	}
	if err := save(p, name+"-inflight", w, 11*vg.Centimeter); err != nil {
		return nil, err
	}
	for _, m := range v.Modes {
		i := tv.MedianLoad(page, m)
		if i < 0 {
			continue
		}
		p, w, h, err := plotWaterfall(v, tv, i)
		if err != nil {
			return nil, fmt.Errorf("report: plot %s-waterfall-%s: %w", name, m, err)
		}
		if err := save(p, name+"-waterfall-"+safeName(m), w, h); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Headroom is the share of free space above the largest value drawn.
const Headroom = 0.15

// YMax returns the y-axis maximum for values drawn up to top: Headroom
// above it, and more when a legend of n entries must fit above the data
// (each entry takes about 7 % of the axis).
func YMax(top float64, legendEntries int) float64 {
	if top <= 0 {
		top = 1
	}
	return top * (1 + Headroom + 0.07*float64(legendEntries))
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, s)
}

// errBars are bar heights (medians) with their min-max range.
type errBars struct {
	vals, low, high []float64
	dx              float64 // x offset of the series inside a category
}

func (e *errBars) add(s Spread, scale float64) {
	e.vals, e.low, e.high = append(e.vals, s.Median*scale), append(e.low, s.Min*scale), append(e.high, s.Max*scale)
}

// Len, XY and YError make errBars a plotter.YErrorBars input.
func (e *errBars) Len() int                    { return len(e.vals) }
func (e *errBars) XY(i int) (float64, float64) { return float64(i) + e.dx, e.vals[i] }
func (e *errBars) YError(i int) (float64, float64) {
	return e.vals[i] - e.low[i], e.high[i] - e.vals[i]
}

// grouped draws one bar group per category (at x = 0, 1, ...) and one bar
// per mode in each, with min-max error bars when withErr. plotWidth is the
// width of the saved image, which sets the bar width.
func grouped(p *plot.Plot, v View, cats []string, series map[string]*errBars, withErr bool, plotWidth vg.Length) error {
	n := len(v.Modes)
	step := 0.8 / float64(n) // share of a category per bar, in x units
	w := plotWidth * 0.8 / vg.Length(len(cats)) * vg.Length(step) * 0.9
	for i, m := range v.Modes {
		s := series[m]
		if s == nil {
			continue
		}
		s.dx = (float64(i) - float64(n-1)/2) * step
		bars, err := plotter.NewBarChart(plotter.Values(s.vals), w)
		if err != nil {
			return err
		}
		bars.XMin = s.dx
		bars.Color = modeColor(m)
		bars.LineStyle.Width = 0
		p.Add(bars)
		p.Legend.Add(m, bars)
		if withErr {
			eb, err := plotter.NewYErrorBars(s)
			if err != nil {
				return err
			}
			p.Add(eb)
		}
	}
	p.NominalX(cats...)
	p.X.Min, p.X.Max = -0.5, float64(len(cats))-0.5
	p.Legend.Top = true
	if len(cats) > 3 {
		p.X.Tick.Label.Rotation = math.Pi / 6
		p.X.Tick.Label.XAlign = draw.XRight
		p.X.Tick.Label.YAlign = draw.YCenter
	}
	return nil
}

// highest returns the largest high end (max) of the series.
func highest(series map[string]*errBars) float64 {
	top := 0.0
	for _, s := range series {
		for i := range s.vals {
			top = max(top, s.high[i], s.vals[i])
		}
	}
	return top
}

// boundMarks draws a marker per page at y(page) labelled as the lower
// bound; it returns the largest y.
func boundMarks(p *plot.Plot, v View, y func(pg string) float64, label string) (float64, error) {
	var pts plotter.XYs
	top := 0.0
	for i, pg := range v.Pages {
		val := y(pg)
		pts = append(pts, plotter.XY{X: float64(i), Y: val})
		top = max(top, val)
	}
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return 0, err
	}
	sc.GlyphStyle.Shape = draw.BoxGlyph{}
	sc.GlyphStyle.Radius = vg.Points(3)
	sc.GlyphStyle.Color = color.Black
	p.Add(sc)
	p.Legend.Add(label, sc)
	return top, nil
}

func plotFig5(v View) (*plot.Plot, vg.Length, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: per page, over the radio link (median, min-max over runs)", v.Profile.Name)
	p.Y.Label.Text = "count per page"
	series := map[string]*errBars{}
	for _, m := range v.Modes {
		t := v.Totals[m]
		e := &errBars{}
		e.add(t.ConnsPerPage, 1)
		e.add(t.DNSPerPage, 1)
		series[m] = e
	}
	if err := grouped(p, v, []string{"TCP connections", "DNS requests"}, series, true, 16*vg.Centimeter); err != nil {
		return nil, 0, err
	}
	p.Y.Min, p.Y.Max = 0, YMax(highest(series), len(v.Modes))
	return p, 16 * vg.Centimeter, nil
}

func plotFig6(v View) (*plot.Plot, vg.Length, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: page load time (median, min-max over runs)", v.Profile.Name)
	p.Y.Label.Text = "PLT (s)"
	series := map[string]*errBars{}
	for _, m := range v.Modes {
		e := &errBars{}
		for _, pg := range v.Pages {
			e.add(v.Stats[[2]string{pg, m}].PLT, 1.0/1000)
		}
		series[m] = e
	}
	if err := grouped(p, v, v.Pages, series, true, width(v)); err != nil {
		return nil, 0, err
	}
	bt, err := boundMarks(p, v, func(pg string) float64 { ms, _ := v.PageBound(pg); return ms / 1000 }, "lower bound (bytes*8/rate + 4 RTT)")
	if err != nil {
		return nil, 0, err
	}
	p.Y.Min, p.Y.Max = 0, YMax(max(highest(series), bt), len(v.Modes)+1)
	return p, width(v), nil
}

func plotFig7(v View) (*plot.Plot, vg.Length, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: throughput bytes*8/PLT (median, min-max over runs)", v.Profile.Name)
	p.Y.Label.Text = "kbit/s"
	series := map[string]*errBars{}
	for _, m := range v.Modes {
		e := &errBars{}
		for _, pg := range v.Pages {
			e.add(v.Stats[[2]string{pg, m}].Kbit, 1)
		}
		series[m] = e
	}
	if err := grouped(p, v, v.Pages, series, true, width(v)); err != nil {
		return nil, 0, err
	}
	top := highest(series)
	bt, err := boundMarks(p, v, func(pg string) float64 { ms, b := v.PageBound(pg); return Kbit(b, ms) }, "lower bound's throughput")
	if err != nil {
		return nil, 0, err
	}
	top = max(top, bt)
	entries := len(v.Modes) + 1
	if r := v.Profile.DownKbit; r > 0 {
		top = max(top, r)
		entries++
		line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: r}, {X: float64(len(v.Pages)) - 0.5, Y: r}})
		if err != nil {
			return nil, 0, err
		}
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(line)
		p.Legend.Add("link rate", line)
	}
	p.Y.Min, p.Y.Max = 0, YMax(top, entries)
	return p, width(v), nil
}

// cdfLines draws, per mode, the empirical CDF over pages of val(page, mode)
// (pages where ok is false are left out) and returns the x range drawn.
func cdfLines(p *plot.Plot, v View, val func(pg, m string) (float64, bool), modes []string) (lo, hi float64, err error) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, m := range modes {
		var xs []float64
		for _, pg := range v.Pages {
			if x, ok := val(pg, m); ok && !math.IsNaN(x) {
				xs = append(xs, x)
			}
		}
		if len(xs) == 0 {
			continue
		}
		sort.Float64s(xs)
		pts := make(plotter.XYs, 0, 2*len(xs))
		for i, x := range xs {
			pts = append(pts, plotter.XY{X: x, Y: float64(i) / float64(len(xs))}, plotter.XY{X: x, Y: float64(i+1) / float64(len(xs))})
		}
		lo, hi = min(lo, xs[0]), max(hi, xs[len(xs)-1])
		l, err := plotter.NewLine(pts)
		if err != nil {
			return 0, 0, err
		}
		l.Color = modeColor(m)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (%d pages)", m, len(xs)), l)
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0, 1
	}
	p.Y.Min, p.Y.Max = 0, 1.0
	p.Y.Label.Text = "share of pages"
	// Bottom right, inside: a CDF's curves have left that corner by
	// then (they reach it only at the largest values).
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.XOffs, p.Legend.YOffs = -vg.Points(8), vg.Points(8)
	p.Add(plotter.NewGrid())
	return lo, hi, nil
}

// plotPLTCDF is Fig. 6 for many pages: the CDF over pages of each page's
// median PLT, per mode.
func plotPLTCDF(v View) (*plot.Plot, vg.Length, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: page load time over %d pages (per-page median over runs)", v.Profile.Name, len(v.Pages))
	p.X.Label.Text = "PLT (s)"
	lo, hi, err := cdfLines(p, v, func(pg, m string) (float64, bool) {
		s := v.Stats[[2]string{pg, m}]
		return s.PLT.Median / 1000, s.PLT.N > 0
	}, v.Modes)
	if err != nil {
		return nil, 0, err
	}
	p.X.Min, p.X.Max = 0, hi*(1+Headroom)
	_ = lo
	return p, 18 * vg.Centimeter, nil
}

// plotChange is each page's median PLT change against direct, per mode:
// bars per page (few pages) or the CDF over pages (many).
func plotChange(v View) (*plot.Plot, vg.Length, error) {
	var modes []string
	for _, m := range v.Modes {
		if m != "direct" {
			modes = append(modes, m)
		}
	}
	change := func(pg, m string) (float64, bool) {
		a, b := v.Stats[[2]string{pg, m}], v.Stats[[2]string{pg, "direct"}]
		if a.PLT.N == 0 || b.PLT.N == 0 || b.PLT.Median == 0 {
			return 0, false
		}
		return Change(a.PLT.Median, b.PLT.Median), true
	}
	p := plot.New()
	if len(v.Pages) > ManyPages {
		p.Title.Text = fmt.Sprintf("%s: PLT change against direct over %d pages (per-page medians)", v.Profile.Name, len(v.Pages))
		p.X.Label.Text = "PLT change against direct (%)"
		lo, hi, err := cdfLines(p, v, change, modes)
		if err != nil {
			return nil, 0, err
		}
		pad := (hi - lo) * Headroom
		p.X.Min, p.X.Max = lo-pad, hi+pad
		return p, 18 * vg.Centimeter, nil
	}
	p.Title.Text = fmt.Sprintf("%s: PLT change against direct per page (medians over runs)", v.Profile.Name)
	p.Y.Label.Text = "PLT change (%)"
	series := map[string]*errBars{}
	lo, hi := 0.0, 0.0
	for _, m := range modes {
		e := &errBars{}
		for _, pg := range v.Pages {
			c, ok := change(pg, m)
			if !ok {
				c = 0
			}
			e.vals, e.low, e.high = append(e.vals, c), append(e.low, c), append(e.high, c)
			lo, hi = min(lo, c), max(hi, c)
		}
		series[m] = e
	}
	vv := v
	vv.Modes = modes
	if err := grouped(p, vv, v.Pages, series, false, width(v)); err != nil {
		return nil, 0, err
	}
	span := max(hi-lo, 10)
	p.Y.Min, p.Y.Max = lo-span*Headroom, hi+span*(Headroom+0.07*float64(len(modes)))
	zero, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: 0}, {X: float64(len(v.Pages)) - 0.5, Y: 0}})
	if err != nil {
		return nil, 0, err
	}
	p.Add(zero)
	return p, width(v), nil
}

// width grows a per-page plot with the number of pages.
func width(v View) vg.Length {
	w := vg.Length(len(v.Pages)*len(v.Modes)) * 0.6 * vg.Centimeter
	return max(16*vg.Centimeter, min(w, 120*vg.Centimeter))
}
