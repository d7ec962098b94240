package report

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"sort"
	"strconv"
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

// httpsColors are the url-https-kN modes' colours (url mode over HTTP/2
// to the VIP with k shards), k = 1, 2, 3, 4 (then again): seaborn's "deep"
// palette after the three base modes' colours, so that no two modes of a
// run share a hue.
var httpsColors = []color.RGBA{
	{R: 0x81, G: 0x72, B: 0xb2, A: 0xff},
	{R: 0xc4, G: 0x4e, B: 0x52, A: 0xff},
	{R: 0x93, G: 0x78, B: 0x60, A: 0xff},
	{R: 0xda, G: 0x8b, B: 0xc3, A: 0xff},
}

// modeLook is how a mode is drawn: its base mode's colour (lighter on a
// warm cache), and for the variants of a mode with pepd's optimizer or
// hints on, a hatch over bars and a dash pattern on lines, so that url
// and url+opt share their hue and can still be told apart.
type modeLook struct {
	color color.Color
	// hatch is the bars' pattern: "" none, "/" for +opt, "\\" for
	// +hints, "x" for both.
	hatch string
}

// lookOf returns mode m's look: "url+opt+hints+warm" is url's green,
// lighter (warm), cross-hatched (optimizer and hints); a variant
// ("url+opt@avif") is darker than the mode without its tag.
func lookOf(m string) modeLook {
	m, variant := SplitVariant(m)
	base, warm := strings.CutSuffix(m, "+warm")
	base, hints := strings.CutSuffix(base, "+hints")
	base, opt := strings.CutSuffix(base, "+opt")
	var l modeLook
	if c, ok := modeColors[base]; ok {
		l.color = c
	} else if k, err := strconv.Atoi(strings.TrimPrefix(base, "url-https-k")); err == nil && k >= 1 {
		l.color = httpsColors[(k-1)%len(httpsColors)]
	} else {
		l.color = plotter.DefaultLineStyle.Color
	}
	if variant != "" { // darker than the mode without the tag
		r, g, b, _ := l.color.RGBA()
		dark := func(v uint32) uint8 { return uint8((v >> 8) * 3 / 5) }
		l.color = color.RGBA{R: dark(r), G: dark(g), B: dark(b), A: 0xff}
	}
	if warm {
		r, g, b, _ := l.color.RGBA()
		light := func(v uint32) uint8 { return uint8((v >> 8) + (255-(v>>8))/2) }
		l.color = color.RGBA{R: light(r), G: light(g), B: light(b), A: 0xff}
	}
	switch {
	case opt && hints:
		l.hatch = "x"
	case opt:
		l.hatch = "/"
	case hints:
		l.hatch = "\\"
	}
	return l
}

// modeColor is mode m's colour (lookOf).
func modeColor(m string) color.Color { return lookOf(m).color }

// dashes is the dash pattern of m's lines: solid for a mode, dashed for
// its +opt variant, dotted for +hints, dash-dot for both.
func (l modeLook) dashes() []vg.Length {
	switch l.hatch {
	case "/":
		return []vg.Length{vg.Points(6), vg.Points(2.5)}
	case "\\":
		return []vg.Length{vg.Points(1.5), vg.Points(2)}
	case "x":
		return []vg.Length{vg.Points(6), vg.Points(2), vg.Points(1.5), vg.Points(2)}
	}
	return nil
}

// hatchedBars is a vertical bar chart with a hatch drawn over each bar
// and over its legend swatch.
type hatchedBars struct {
	*plotter.BarChart
	hatch string
}

// Plot draws the bars, then the hatch within each (BarChart.Plot's
// geometry: bar i centred on XMin+i, Width wide, from 0 to its value,
// clipped to the canvas).
func (h hatchedBars) Plot(c draw.Canvas, plt *plot.Plot) {
	h.BarChart.Plot(c, plt)
	trX, trY := plt.Transforms(&c)
	for i, v := range h.Values {
		x := trX(h.XMin + float64(i))
		if !c.ContainsX(x) {
			continue
		}
		x0 := x - h.Width/2 + h.Offset
		y0, y1 := trY(0), trY(v)
		if y0 > y1 {
			y0, y1 = y1, y0
		}
		y0, y1 = max(y0, c.Min.Y), min(y1, c.Max.Y)
		drawHatch(c.Canvas, h.hatch, h.Color, vg.Rectangle{Min: vg.Point{X: x0, Y: y0}, Max: vg.Point{X: x0 + h.Width, Y: y1}})
	}
}

// Thumbnail draws the legend's swatch: BarChart's, hatched.
func (h hatchedBars) Thumbnail(c *draw.Canvas) {
	h.BarChart.Thumbnail(c)
	drawHatch(c.Canvas, h.hatch, h.Color, c.Rectangle)
}

// hatchSpacing is the distance between hatch lines, along x.
var hatchSpacing = vg.Points(4)

// drawHatch strokes the hatch kind ("/", "\\" or "x") over r in a dark
// shade of fill: 45° lines hatchSpacing apart, clipped to r.
func drawHatch(c vg.Canvas, kind string, fill color.Color, r vg.Rectangle) {
	w, hgt := r.Max.X-r.Min.X, r.Max.Y-r.Min.Y
	if kind == "" || w <= 0 || hgt <= 0 {
		return
	}
	cr, cg, cb, _ := fill.RGBA()
	dark := func(v uint32) uint8 { return uint8((v >> 8) * 2 / 5) }
	c.SetColor(color.RGBA{R: dark(cr), G: dark(cg), B: dark(cb), A: 0xff})
	c.SetLineWidth(vg.Points(0.7))
	c.SetLineDash(nil, 0)
	// A line x = d + t, y = Min.Y + t (t in [0, hgt]) for "/"; mirrored
	// in x for "\\". Clip t so that x stays in [Min.X, Max.X].
	stroke := func(mirror bool) {
		for d := -hgt; d < w; d += hatchSpacing {
			t0, t1 := max(0, -d), min(hgt, w-d)
			if t0 >= t1 {
				continue
			}
			x0, x1 := d+t0, d+t1
			if mirror {
				x0, x1 = w-x0, w-x1
			}
			var p vg.Path
			p.Move(vg.Point{X: r.Min.X + x0, Y: r.Min.Y + t0})
			p.Line(vg.Point{X: r.Min.X + x1, Y: r.Min.Y + t1})
			c.Stroke(p)
		}
	}
	switch kind {
	case "/":
		stroke(false)
	case "\\":
		stroke(true)
	case "x":
		stroke(false)
		stroke(true)
	}
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
		look := lookOf(m)
		bars.Color = look.color
		bars.LineStyle.Width = 0
		if look.hatch != "" {
			h := hatchedBars{bars, look.hatch}
			p.Add(h)
			p.Legend.Add(m, h)
		} else {
			p.Add(bars)
			p.Legend.Add(m, bars)
		}
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
		l.Dashes = lookOf(m).dashes()
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
