package report

import (
	"bytes"
	"flag"
	"fmt"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []float64
		want Spread
		fmt1 string
	}{
		{"empty", nil, Spread{}, "-"},
		{"one", []float64{3}, Spread{N: 1, Median: 3, Min: 3, Max: 3}, "3.0"},
		{"odd", []float64{5, 1, 3}, Spread{N: 3, Median: 3, Min: 1, Max: 5}, "3.0 (1.0-5.0)"},
		{"even", []float64{4, 1, 2, 3}, Spread{N: 4, Median: 2.5, Min: 1, Max: 4}, "2.5 (1.0-4.0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NewSpread(tc.in)
			if got != tc.want {
				t.Errorf("NewSpread(%v) = %+v, want %+v", tc.in, got, tc.want)
			}
			if f := got.Format(1); f != tc.fmt1 {
				t.Errorf("Format(1) = %q, want %q", f, tc.fmt1)
			}
		})
	}
}

func TestBoundAndChange(t *testing.T) {
	avg := ProfileInfo{Name: "paper-average", RTTms: 400, DownKbit: 81}
	// 74000 bytes = 592000 bit at 81 kbit/s = 7308.64 ms, plus 4 x 400 ms.
	if got := Bound(74000, avg); math.Abs(got-8908.642) > 0.01 {
		t.Errorf("Bound(74000, paper-average) = %.3f ms, want 8908.642", got)
	}
	if got := Bound(74000, ProfileInfo{RTTms: 20}); got != 80 {
		t.Errorf("Bound without rate = %v ms, want 80 (round trips alone)", got)
	}
	if got := Kbit(100000, 10000); got != 80 {
		t.Errorf("Kbit(100000 B, 10 s) = %v, want 80", got)
	}
	if got := Change(7, 10); math.Abs(got+30) > 1e-9 {
		t.Errorf("Change(7, 10) = %v, want -30", got)
	}
	if !math.IsNaN(Change(1, 0)) {
		t.Error("Change(1, 0) is not NaN")
	}
}

// synthetic is two pages, two modes, two runs under one profile, with one
// page that failed to load in url mode, run 2.
func synthetic() *Results {
	rec := func(mode string, run int, page string, seq int, plt float64, syn, dns, vip, origin int, bytes int64) Record {
		return Record{Mode: mode, Profile: "paper-average", Run: run, Page: page, URL: "http://www." + page + ".com/",
			Seq: seq, Loaded: true, PLTms: plt, DCLms: plt / 2, SYNCount: syn + 1, BrowserConns: syn, DNSQueries: dns, VIPConns: vip,
			OriginConns: origin, Bytes: bytes, Requests: 10, Resolver: "builtin",
			TTFBms: plt / 10, FCPms: plt / 4, LCPms: plt * 3 / 4, LinkUpBytes: bytes / 10, LinkDnBytes: bytes}
	}
	failed := rec("url", 2, "cnn", 1, 0, 3, 1, 2, 1, 0)
	failed.Loaded, failed.Error = false, "no loadEventEnd within 3m0s"
	return &Results{
		Config: RunConfig{
			Corpus: "default", Pages: []string{"yahoo", "cnn"}, Modes: []string{"direct", "url"}, Runs: 2,
			Profiles: []ProfileInfo{{Name: "paper-average", RTTms: 400, DownKbit: 81, UpKbit: 81,
				Description: "CDMA2000-1xRTT average cell", Exact: "paper-average up{delay=200ms rate=81kbit loss=0% queue=50p} down{delay=200ms rate=81kbit loss=0% queue=50p}"}},
			Resolver: "builtin", Backend: "userspace", Browser: "HeadlessChrome/156", VIP: "192.0.2.12", Origins: "198.19.0.0/16",
			SquidCache: "cold: restarted with an empty cache before every run", PageTimeout: "3m0s",
			Started: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), Finished: time.Date(2026, 11, 21, 12, 10, 0, 0, time.UTC),
			Command: "bin/testbed run -corpus default -pepd optimize.deadline=150ms -dns-origins drop",
			Pepd:    []string{"optimize.deadline=150ms", "dns.origins=drop"},
		},
		Records: []Record{
			rec("direct", 1, "yahoo", 0, 10000, 4, 3, 0, 4, 74000),
			rec("direct", 1, "cnn", 1, 30000, 8, 6, 0, 8, 197000),
			rec("direct", 2, "yahoo", 0, 12000, 4, 3, 0, 4, 74000),
			rec("direct", 2, "cnn", 1, 34000, 10, 6, 0, 10, 197000),
			rec("url", 1, "yahoo", 0, 7000, 2, 1, 1, 1, 74000),
			rec("url", 1, "cnn", 1, 20000, 3, 1, 2, 1, 197000),
			rec("url", 2, "yahoo", 0, 9000, 2, 1, 1, 1, 74000),
			failed,
		},
	}
}

func TestViews(t *testing.T) {
	vs := Views(synthetic())
	if len(vs) != 1 {
		t.Fatalf("%d views, want 1", len(vs))
	}
	v := vs[0]
	if strings.Join(v.Modes, ",") != "direct,url" || strings.Join(v.Pages, ",") != "yahoo,cnn" || len(v.Runs) != 2 {
		t.Fatalf("modes %v pages %v runs %v", v.Modes, v.Pages, v.Runs)
	}
	for _, tc := range []struct {
		name string
		got  any
		want any
	}{
		{"direct conns per run", v.Totals["direct"].Conns, Spread{N: 2, Median: 13, Min: 12, Max: 14}},
		{"direct conns per page", v.Totals["direct"].ConnsPerPage, Spread{N: 2, Median: 6.5, Min: 6, Max: 7}},
		{"direct dns per run", v.Totals["direct"].DNS, Spread{N: 2, Median: 9, Min: 9, Max: 9}},
		{"url conns per run", v.Totals["url"].Conns, Spread{N: 2, Median: 5, Min: 5, Max: 5}},
		{"url vip per run", v.Totals["url"].VIP, Spread{N: 2, Median: 3, Min: 3, Max: 3}},
		{"url loaded", v.Totals["url"].Loaded, 3},
		{"url pages", v.Totals["url"].Pages, 4},
		{"cnn url plt (failed run left out)", v.Stats[[2]string{"cnn", "url"}].PLT, Spread{N: 1, Median: 20000, Min: 20000, Max: 20000}},
		{"yahoo direct plt", v.Stats[[2]string{"yahoo", "direct"}].PLT, Spread{N: 2, Median: 11000, Min: 10000, Max: 12000}},
		{"yahoo direct kbit", v.Stats[[2]string{"yahoo", "direct"}].Kbit.Median, (59.2 + 592.0/12) / 2},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
	// yahoo: 8000 vs 11000 = -27.27 %; cnn: 20000 vs 32000 = -37.5 %.
	if c, ok := v.MeanChange("url", "direct"); !ok || math.Abs(c-(-27.2727-37.5)/2) > 0.001 {
		t.Errorf("MeanChange(url, direct) = %v, %v; want -32.39", c, ok)
	}
}

func TestSummarize(t *testing.T) {
	v := Views(synthetic())[0]
	s, ok := v.Summarize("url", "direct")
	if !ok {
		t.Fatal("Summarize(url, direct): no page compared")
	}
	// yahoo 8000 against 11000 (0.727), cnn 20000 against 32000 (0.625):
	// both below direct's fastest run.
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"pages", float64(s.Pages), 2},
		{"PLT median change", s.PLTMedianChange, ((8000.0/11000+20000.0/32000)/2 - 1) * 100},
		{"PLT mean ratio", s.PLTMeanRatio, (8000.0/11000 + 20000.0/32000) / 2},
		{"LCP median change", s.LCPMedianChange, ((8000.0/11000+20000.0/32000)/2 - 1) * 100},
		{"radio ratio", s.RadioRatio, 1},
		{"radio per page", s.RadioPerPage, (74000*1.1 + 197000*1.1) / 2},
		{"slower", float64(s.Slower), 0},
		{"faster", float64(s.Faster), 2},
	} {
		if math.Abs(tc.got-tc.want) > 1e-6 {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	// Against itself nothing is slower or faster; against a mode no page
	// has, there is nothing to compare.
	if s, _ := v.Summarize("direct", "direct"); s.Slower != 0 || s.Faster != 0 || s.PLTMedianChange != 0 {
		t.Errorf("direct against itself: %+v", s)
	}
	if _, ok := v.Summarize("url+opt", "direct"); ok {
		t.Error("Summarize of a mode without records: ok")
	}
}

// TestHTTPSPages: a page whose document loaded over https in some record
// (Chromium's HSTS upgrade) is named in the report, and the summary is
// given again over the other pages alone; without such a page there is
// no second table.
func TestHTTPSPages(t *testing.T) {
	r := synthetic()
	if md := string(Markdown(r, nil)); strings.Contains(md, "loaded over http.") {
		t.Error("a summary without https pages got the table over http pages")
	}
	for i := range r.Records {
		if r.Records[i].Page == "cnn" && r.Records[i].Mode == "direct" && r.Records[i].Run == 2 {
			r.Records[i].DocScheme = "https"
		}
	}
	v := Views(r)[0]
	if strings.Join(v.HTTPSPages, ",") != "cnn" {
		t.Fatalf("HTTPS pages %v, want cnn", v.HTTPSPages)
	}
	only := v.Only(func(p string) bool { return p != "cnn" })
	s, ok := only.Summarize("url", "direct")
	if !ok || s.Pages != 1 || math.Abs(s.PLTMeanRatio-8000.0/11000) > 1e-9 {
		t.Errorf("summary over http pages: %+v, want yahoo alone (ratio %v)", s, 8000.0/11000)
	}
	md := string(Markdown(r, nil))
	i := strings.Index(md, "**Over the 1 pages whose document loaded over http.** 1 pages loaded their document over https in some load (cnn)")
	if i < 0 {
		t.Fatalf("no table over the http pages:\n%s", md)
	}
	if row := "| url | direct | 1 | -27.3 %"; !strings.Contains(md[i:], row) {
		t.Errorf("the table over the http pages has no row %q:\n%s", row, md[i:])
	}
	// The https pages alone: the control table, cnn's own change.
	j := strings.Index(md, "**The 1 https pages, the campaign's control.**")
	if j < i {
		t.Fatalf("no control table after the http pages' table:\n%s", md[i:])
	}
	c, ok := v.Only(func(p string) bool { return p == "cnn" }).Summarize("url", "direct")
	if !ok || c.Pages != 1 {
		t.Fatalf("summary over cnn: %+v", c)
	}
	if row := fmt.Sprintf("| url | direct | 1 | %+.1f %%", c.PLTMedianChange); !strings.Contains(md[j:], row) {
		t.Errorf("the control table has no row %q:\n%s", row, md[j:])
	}
}

func TestMarkdownGolden(t *testing.T) {
	r := synthetic()
	md := Markdown(r, map[string][]string{"paper-average": {"paper-average-fig6-plt.png"}})
	golden := filepath.Join("testdata", "report.md")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(golden, md, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(md, want) {
		t.Errorf("report differs from %s (go test -update to accept):\n%s", golden, md)
	}
	// The figures the golden file must hold, written out.
	for _, s := range []string{
		"| direct | 13 (12-14) | 6.5 (6.0-7.0) | 0 | 15 (14-16) | 0 | 13 (12-14) | 9 | 4.5 | 4/4 |",
		"| url | 5 (-62 %) | 2.5 | 0 | 7 | 3 | 2 | 2 (-78 %) | 1.0 | 3/4 |",
		"| yahoo | 11.00 (10.00-12.00) | 8.00 (7.00-9.00) (-27 %) |",
		"| cnn | 32.00 (30.00-34.00) | 20.00 (-38 %) [1/2 loaded] |",
		"| **mean change vs direct** | | **-32 %** |",
		"| url | direct | 2 | -32.4 % | 0.68 | -32.4 % | -32.4 % | 1.00 | 149 | 0 | 2 |",
		"- url, run 2, cnn: no loadEventEnd within 3m0s",
		"- pepd settings (-pepd, over the testbed's pepd.yaml): `optimize.deadline=150ms`, `dns.origins=drop`\n",
	} {
		if !strings.Contains(string(md), s) {
			t.Errorf("report lacks %q", s)
		}
	}
}

func TestGenerateWritesPlots(t *testing.T) {
	dir := t.TempDir()
	r := synthetic()
	if err := r.Write(filepath.Join(dir, "results.json")); err != nil {
		t.Fatal(err)
	}
	back, err := Read(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Records) != len(r.Records) || back.Records[7].Error != "no loadEventEnd within 3m0s" || back.Schema != SchemaVersion {
		t.Fatalf("round trip lost data: %+v", back.Records)
	}
	md, err := Generate(back, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"paper-average-fig5-conns-dns.png", "paper-average-fig6-plt.png", "paper-average-fig7-throughput.png", "paper-average-change.png"} {
		if st, err := os.Stat(filepath.Join(dir, strings.TrimSuffix(f, ".png")+".svg")); err != nil || st.Size() < 1000 {
			t.Errorf("%s: no SVG beside the PNG: %v", f, err)
		}
		fh, err := os.Open(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(fh)
		fh.Close()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if img.Bounds().Dx() < 100 {
			t.Errorf("%s: %d pixels wide", f, img.Bounds().Dx())
		}
		if !strings.Contains(string(md), "]("+f+")") {
			t.Errorf("report does not link %s", f)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "report.md")); err != nil {
		t.Error(err)
	}
}

// TestReadLegacyPepd: results from before -pepd kept three pepd keys in
// fields of their own; Read turns them into -pepd settings, so their
// report still says what pepd ran with.
func TestReadLegacyPepd(t *testing.T) {
	p := filepath.Join(t.TempDir(), "results.json")
	body := `{"schema":1,"config":{"dns_origins":"drop","pepd_radio":"congestion: bbr","opt_deadline":"10s"},"records":[]}`
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"dns.origins=drop", "radio={congestion: bbr}", "optimize.deadline=10s"}; !slices.Equal(r.Config.Pepd, want) {
		t.Errorf("Pepd = %q, want %q", r.Config.Pepd, want)
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, body, want string }{
		{"no mode", `{"schema":1,"records":[{"profile":"p","page":"x"}]}`, "records[0]: mode, profile and page are required"},
		{"newer schema", `{"schema":99,"records":[]}`, "schema 99 is newer than this program's 1"},
		{"not json", `{"schema":`, "unexpected end of JSON input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".json")
			os.WriteFile(p, []byte(tc.body), 0o644)
			_, err := Read(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("Read = %v, want an error naming %s and %q", err, p, tc.want)
			}
		})
	}
}

// TestPlotsManyPages: with 100 pages the PLT and change plots are CDFs
// over pages (no 100 bar groups), and the throughput bars are left out.
func TestPlotsManyPages(t *testing.T) {
	r := synthetic()
	r.Records = nil
	r.Config.Pages = nil
	for i := range 100 {
		pg := fmt.Sprintf("page%03d", i)
		r.Config.Pages = append(r.Config.Pages, pg)
		for _, m := range []string{"direct", "url"} {
			plt := float64(5000 + 50*i)
			if m == "url" {
				plt *= 0.9
			}
			r.Records = append(r.Records, Record{Mode: m, Profile: "paper-average", Run: 1, Page: pg, Loaded: true, PLTms: plt, Bytes: 100000})
		}
	}
	dir := t.TempDir()
	names, err := Plots(r, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"paper-average-fig5-conns-dns.png", "paper-average-fig6-plt-cdf.png", "paper-average-change.png"}
	if !slices.Equal(names["paper-average"], want) {
		t.Errorf("plots %v, want %v", names["paper-average"], want)
	}
}

// TestYMax: the axis keeps headroom above the largest value, and room for
// the legend's entries.
func TestYMax(t *testing.T) {
	for _, tc := range []struct {
		top  float64
		n    int
		want float64
	}{{100, 0, 115}, {100, 2, 129}, {0, 0, 1.15}} {
		if got := YMax(tc.top, tc.n); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("YMax(%v, %d) = %v, want %v", tc.top, tc.n, got, tc.want)
		}
	}
}

// TestModeLook: a variant of a mode keeps the mode's colour (lighter when
// warm) and is told apart by its hatch; the hatch is drawn, in a dark
// shade of the fill, over a fair share of a swatch (0.7 pt lines 4 pt
// apart: about a quarter of it for one direction).
func TestModeLook(t *testing.T) {
	green, lightGreen := color.RGBA{R: 0x55, G: 0xa8, B: 0x68, A: 0xff}, color.RGBA{R: 0xaa, G: 0xd3, B: 0xb3, A: 0xff}
	for _, tc := range []struct {
		mode  string
		color color.RGBA
		hatch string
	}{
		{"url", green, ""}, {"url+opt", green, "/"}, {"url+hints", green, `\`}, {"url+opt+hints", green, "x"},
		{"url+warm", lightGreen, ""}, {"url+opt+warm", lightGreen, "/"}, {"url+opt+hints+warm", lightGreen, "x"},
		{"off+opt", color.RGBA{R: 0x4c, G: 0x72, B: 0xb0, A: 0xff}, "/"},
		{"url-https-k1", color.RGBA{R: 0x81, G: 0x72, B: 0xb2, A: 0xff}, ""},
		{"url-https-k3+opt", color.RGBA{R: 0x93, G: 0x78, B: 0x60, A: 0xff}, "/"},
	} {
		l := lookOf(tc.mode)
		if r, g, b, a := l.color.RGBA(); color.RGBAModel.Convert(l.color) != tc.color || a != 0xffff {
			t.Errorf("%s: colour %d,%d,%d, want %v", tc.mode, r>>8, g>>8, b>>8, tc.color)
		}
		if l.hatch != tc.hatch {
			t.Errorf("%s: hatch %q, want %q", tc.mode, l.hatch, tc.hatch)
		}
	}
	dark := color.RGBA{R: 0x55 * 2 / 5, G: 0xa8 * 2 / 5, B: 0x68 * 2 / 5, A: 0xff}
	for _, tc := range []struct {
		hatch    string
		min, max float64 // share of dark pixels
	}{{"", 0, 0}, {"/", 0.1, 0.4}, {"x", 0.2, 0.6}} {
		img := vgimg.New(vg.Points(40), vg.Points(40))
		dc := draw.New(img)
		bars, err := plotter.NewBarChart(plotter.Values{1}, vg.Points(10))
		if err != nil {
			t.Fatal(err)
		}
		bars.Color, bars.LineStyle.Width = green, 0
		hatchedBars{bars, tc.hatch}.Thumbnail(&dc)
		var fill, hatch, all int
		im := img.Image()
		for y := im.Bounds().Min.Y; y < im.Bounds().Max.Y; y++ {
			for x := im.Bounds().Min.X; x < im.Bounds().Max.X; x++ {
				// Lines are antialiased: a pixel is the hatch's when its
				// green is nearer the hatch's than the fill's.
				switch c := color.RGBAModel.Convert(im.At(x, y)).(color.RGBA); {
				case c == green:
					fill++
				case c.G < (green.G+dark.G)/2:
					hatch++
				}
				all++
			}
		}
		if share := float64(hatch) / float64(all); share < tc.min || share > tc.max || fill < all/8 {
			t.Errorf("hatch %q: %d fill, %d hatch pixels of %d (hatch share %.2f, want %.2f-%.2f)", tc.hatch, fill, hatch, all, share, tc.min, tc.max)
		}
	}
}

// TestVIPOriginHeld: the VIP's origin table gives per url mode its scheme,
// k and protocol, and over HTTPS the held surplus TLS handshakes per page
// (Record.TLSSurplusClosed and TLSSurplusServed summed over the loads,
// divided by their number); over plain http that column is "-".
func TestVIPOriginHeld(t *testing.T) {
	r := synthetic()
	r.Config.Modes = []string{"direct", "url", "url-https-k1"}
	for i := range r.Records {
		if r.Records[i].Mode == "url" {
			r.Records[i].Scheme, r.Records[i].Shards, r.Records[i].VIPProto = "http", 1, "http/1.1"
		}
	}
	for i, held := range [][2]int{{3, 1}, {4, 0}, {2, 1}, {0, 0}} {
		rec := r.Records[4+i]
		rec.Mode, rec.Scheme, rec.Shards, rec.VIPProto = "url-https-k1", "https", 1, "h2"
		rec.TLSSurplusClosed, rec.TLSSurplusServed = held[0], held[1]
		r.Records = append(r.Records, rec)
	}
	md := string(Markdown(r, nil))
	for _, row := range []string{
		"| url | http | 1 | http/1.1 | 0 | - |\n",
		"| url-https-k1 | https | 1 | h2 | 0 | 2.25 / 0.50 |\n",
	} {
		if !strings.Contains(md, row) {
			t.Errorf("the VIP's origin table lacks %q:\n%s", row, md)
		}
	}
}
