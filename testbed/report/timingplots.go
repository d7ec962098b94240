package report

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"pep/testbed/har"
)

// phaseColors are the waterfall's and the share plot's colours per phase.
var phaseColors = [NumPhases]color.RGBA{
	PhaseBrowser:   {R: 0xc8, G: 0xc8, B: 0xc8, A: 0xff},
	PhaseQueued:    {R: 0xe0, G: 0xc0, B: 0x50, A: 0xff},
	PhaseHandshake: {R: 0xd0, G: 0x60, B: 0x40, A: 0xff},
	PhaseWait:      {R: 0x50, G: 0x90, B: 0xd0, A: 0xff},
	PhaseTransfer:  {R: 0x40, G: 0xa0, B: 0x60, A: 0xff},
}

// swatchThumb is a legend thumbnail: a box filled with one colour.
type swatchThumb struct{ c color.Color }

func (s swatchThumb) Thumbnail(c *draw.Canvas) {
	r := c.Rectangle
	c.FillPolygon(s.c, []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}})
}

// waterfall draws one row per HAR entry (first on top) with a bar per
// phase, and the page's marks as vertical lines.
type waterfall struct {
	es  []har.Entry
	hs  map[string]Span // es's Handshakes
	end float64         // s
}

func (w waterfall) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	n := len(w.es)
	for i, e := range w.es {
		y0, y1 := trY(float64(n-1-i)-0.4), trY(float64(n-1-i)+0.4)
		for _, s := range segments(e, w.hs) {
			x0, x1 := trX(s.from/1000), trX(s.to/1000)
			if x1-x0 < 0.3 {
				x1 = x0 + 0.3 // a phase too short to see still shows
			}
			c.FillPolygon(phaseColors[s.phase], []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}})
		}
	}
}

func (w waterfall) DataRange() (xmin, xmax, ymin, ymax float64) {
	return 0, w.end, -0.5, float64(len(w.es)) - 0.5
}

// plotWaterfall draws load i of tv: one row per request (in start order),
// coloured per phase, with onload, FCP and LCP marked.
func plotWaterfall(v View, tv TimeView, i int) (*plot.Plot, vg.Length, vg.Length, error) {
	h, err := tv.ReadHAR(i)
	if err != nil {
		return nil, 0, 0, err
	}
	l := tv.Loads[i]
	pt := h.Log.Pages[0].PageTimings
	es := h.Log.Entries
	end := l.PLT
	for _, e := range es {
		end = max(end, e.End())
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, %s: %s run %d, %d requests, PLT %.2f s", v.Profile.Name, l.Mode, l.Page, l.Run, len(es), l.PLT/1000)
	p.X.Label.Text = "time since navigation start (s)"
	p.Y.Label.Text = "requests, in start order"
	p.Y.Tick.Marker = plot.TickerFunc(func(min, max float64) []plot.Tick { return nil })
	p.Add(waterfall{es: es, hs: Handshakes(es), end: end / 1000})
	p.X.Min, p.X.Max = 0, end/1000*1.4 // the right quarter is kept free for the legend
	p.Y.Min, p.Y.Max = -0.5, float64(len(es))-0.5+float64(len(es))*0.02
	for _, m := range []struct {
		name string
		at   float64
		dash bool
	}{{"onload", pt.OnLoad, false}, {"FCP", pt.FCP, true}, {"LCP", pt.LCP, true}} {
		if m.at <= 0 {
			continue
		}
		line, err := plotter.NewLine(plotter.XYs{{X: m.at / 1000, Y: -0.5}, {X: m.at / 1000, Y: float64(len(es)) - 0.5}})
		if err != nil {
			return nil, 0, 0, err
		}
		line.Width = vg.Points(1)
		if m.dash {
			line.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
		}
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s %.2f s", m.name, m.at/1000), line)
	}
	for ph := PhaseQueued; ph < NumPhases; ph++ {
		p.Legend.Add(PhaseNames[ph], swatchThumb{phaseColors[ph]})
	}
	p.Legend.Top, p.Legend.Left = true, false
	p.Legend.XOffs = -vg.Points(4)
	height := vg.Length(math.Min(60, math.Max(11, 4+0.22*float64(len(es))))) * vg.Centimeter
	return p, 22 * vg.Centimeter, height, nil
}

// plotInFlight draws the requests in flight (solid) and those of them
// blocked in the browser (dashed) over time for the median page's
// median-run load of every mode.
func plotInFlight(v View, tv TimeView, page string) (*plot.Plot, vg.Length, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %s, requests in flight (solid) and blocked in the browser (dashed)", v.Profile.Name, page)
	p.X.Label.Text = "time since navigation start (s)"
	p.Y.Label.Text = "requests"
	top, right := 1.0, 1.0
	for _, m := range v.Modes {
		i := tv.MedianLoad(page, m)
		if i < 0 {
			continue
		}
		h, err := tv.ReadHAR(i)
		if err != nil {
			return nil, 0, err
		}
		for k, st := range [][]Step{InFlight(h.Log.Entries), Blocked(h.Log.Entries)} {
			pts := make(plotter.XYs, 0, 2*len(st))
			for j, s := range st {
				if j > 0 {
					pts = append(pts, plotter.XY{X: s.T / 1000, Y: float64(st[j-1].N)})
				}
				pts = append(pts, plotter.XY{X: s.T / 1000, Y: float64(s.N)})
				top, right = max(top, float64(s.N)), max(right, s.T/1000)
			}
			line, err := plotter.NewLine(pts)
			if err != nil {
				return nil, 0, err
			}
			line.Color = modeColor(m)
			line.Width = vg.Points(1.2)
			line.Dashes = lookOf(m).dashes()
			if k == 1 {
				line.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
				line.Width = vg.Points(0.8)
			} else {
				p.Legend.Add(fmt.Sprintf("%s (run %d, PLT %.2f s)", m, tv.Loads[i].Run, tv.Loads[i].PLT/1000), line)
			}
			p.Add(line)
		}
	}
	p.X.Min, p.X.Max = 0, right*1.02
	p.Y.Min, p.Y.Max = 0, YMax(top, len(v.Modes))
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p, 20 * vg.Centimeter, nil
}

// plotShares draws, per mode, the critical path's phases as stacked
// shares of PLT over all loads.
func plotShares(v View, tv TimeView) (*plot.Plot, vg.Length, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: share of PLT along the critical path, all loads", v.Profile.Name)
	p.Y.Label.Text = "share of PLT (%)"
	var modes []string
	var sh [][NumPhases]float64
	for _, m := range v.Modes {
		if ls := tv.loadsOf(m); len(ls) > 0 {
			modes = append(modes, m)
			sh = append(sh, shares(ls))
		}
	}
	w := vg.Points(28)
	var below *plotter.BarChart
	for ph := range NumPhases {
		vals := make(plotter.Values, len(modes))
		for i := range modes {
			vals[i] = 100 * sh[i][ph]
		}
		bar, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, 0, err
		}
		bar.Color = phaseColors[ph]
		bar.LineStyle.Width = 0
		if below != nil {
			bar.StackOn(below)
		}
		below = bar
		p.Add(bar)
		p.Legend.Add(PhaseNames[ph], bar)
	}
	p.NominalX(modes...)
	p.Y.Min, p.Y.Max = 0, 100*(1+Headroom+0.07*float64(NumPhases))
	p.Legend.Top = true
	return p, vg.Length(max(12, 3*len(modes)+6)) * vg.Centimeter, nil
}
