package report

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// modeColors keeps a mode's colour the same in every plot.
var modeColors = map[string]color.RGBA{
	"direct": {R: 0x60, G: 0x60, B: 0x60, A: 0xff},
	"off":    {R: 0x4c, G: 0x72, B: 0xb0, A: 0xff},
	"dns":    {R: 0xdd, G: 0x84, B: 0x52, A: 0xff},
	"url":    {R: 0x55, G: 0xa8, B: 0x68, A: 0xff},
}

func modeColor(m string) color.Color {
	if c, ok := modeColors[m]; ok {
		return c
	}
	return plotter.DefaultLineStyle.Color
}

// Plots writes, per profile of r, three PNGs into dir: NAME-fig5-conns-dns.png
// (connections and DNS requests per page, per mode), NAME-fig6-plt.png (PLT
// per page and mode with min-max bars) and NAME-fig7-throughput.png
// (throughput per page and mode, with the link rate as a line). It returns
// the file names per profile.
func Plots(r *Results, dir string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, v := range Views(r) {
		name := safeName(v.Profile.Name)
		for _, f := range []struct {
			file string
			draw func(View) (*plot.Plot, vg.Length, error)
		}{
			{name + "-fig5-conns-dns.png", plotFig5},
			{name + "-fig6-plt.png", plotFig6},
			{name + "-fig7-throughput.png", plotFig7},
		} {
			p, width, err := f.draw(v)
			if err != nil {
				return nil, fmt.Errorf("report: plot %s: %w", f.file, err)
			}
			if err := p.Save(width, 10*vg.Centimeter, filepath.Join(dir, f.file)); err != nil {
				return nil, fmt.Errorf("report: %w", err)
			}
			out[v.Profile.Name] = append(out[v.Profile.Name], f.file)
		}
	}
	return out, nil
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
	return nil
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
	p.Y.Min = 0
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
	p.Y.Min = 0
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
	if r := v.Profile.DownKbit; r > 0 {
		line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: r}, {X: float64(len(v.Pages)) - 0.5, Y: r}})
		if err != nil {
			return nil, 0, err
		}
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(line)
		p.Legend.Add("link rate", line)
	}
	p.Y.Min = 0
	return p, width(v), nil
}

// width grows a per-page plot with the number of pages.
func width(v View) vg.Length {
	w := vg.Length(len(v.Pages)*len(v.Modes)) * 0.6 * vg.Centimeter
	return max(16*vg.Centimeter, min(w, 120*vg.Centimeter))
}
