package report

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"pep/testbed/har"
)

// reachHAR is a load of three responses with the given transfer sizes:
// the http document, an image (at url) and a script over https from
// another origin (spliced in every mode).
func reachHAR(doc, img, script int64, imgURL string) *har.HAR {
	e := func(url string, start float64, size int64) har.Entry {
		x := har.Entry{Start: start, Time: 10, Connection: url}
		x.Request.URL = url
		x.Response.Status = 200
		x.Response.TransferSize = size
		return x
	}
	return &har.HAR{Log: har.Log{
		Pages: []har.Page{{ID: "page_1", PageTimings: har.PageTimings{OnLoad: 1000}}},
		Entries: []har.Entry{
			e("http://a.test/", 0, doc),
			e(imgURL, 20, img),
			e("https://cdn.test/j.js", 30, script),
		},
	}}
}

// TestReach: bytes split by where they came from (AnalyzeVIP), and the
// reach table page by page. direct: document 10 kB, image 50 kB from the
// origin, spliced script 40 kB; url mode: document 9 kB, the image 10 kB
// from the https VIP, the same script. Reachable: 60 kB against 19 kB;
// floor: 40 of direct's 100 kB.
func TestReach(t *testing.T) {
	const vip = "198.18.0.9"
	d := AnalyzeVIP(reachHAR(10000, 50000, 40000, "http://a.test/i.png"), 100, vip)
	u := AnalyzeVIP(reachHAR(9000, 10000, 40000, "https://"+vip+"/a.test/i.png"), 100, vip)
	if d.Bytes != 100000 || d.SplicedBytes != 40000 || d.VIPBytes != 0 {
		t.Errorf("direct: bytes %d spliced %d VIP %d, want 100000, 40000, 0", d.Bytes, d.SplicedBytes, d.VIPBytes)
	}
	if u.Bytes != 59000 || u.SplicedBytes != 40000 || u.VIPBytes != 10000 {
		t.Errorf("url: bytes %d spliced %d VIP %d, want 59000, 40000, 10000 (the https VIP is not spliced)", u.Bytes, u.SplicedBytes, u.VIPBytes)
	}
	if a := Analyze(reachHAR(9000, 10000, 40000, "https://"+vip+"/a.test/i.png"), 100); a.SplicedBytes != 50000 {
		t.Errorf("without the VIP: spliced %d, want 50000 (every https byte)", a.SplicedBytes)
	}
	// A second page whose bytes are all spliced: floor 1, above the target.
	d2 := AnalyzeVIP(reachHAR(0, 0, 80000, "https://b.test/i.png"), 100, vip)
	u2 := d2
	d.Page, u.Page, d2.Page, u2.Page = "a", "a", "b", "b"
	d.Mode, d2.Mode, u.Mode, u2.Mode = "direct", "direct", "url", "url"
	v := View{Modes: []string{"direct", "url"}, Pages: []string{"a", "b"}}
	rs := Reaches(v, TimeView{Loads: []Load{d, u, d2, u2}})
	if len(rs) != 1 {
		t.Fatalf("Reaches = %+v, want one row (url)", rs)
	}
	r := rs[0]
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if r.Pages != 2 || r.Above != 1 {
		t.Errorf("pages %d above %d, want 2 and 1", r.Pages, r.Above)
	}
	near("Bytes", r.Bytes, (0.59+1)/2)
	near("Reached", r.Reached, 19.0/60) // page b has nothing reachable: left out
	near("Floor", r.Floor, (0.4+1)/2)
	near("FloorLow", r.FloorLow, 0.4+0.25*0.6)
	var b bytes.Buffer
	writeReach(&b, v, TimeView{Loads: []Load{d, u, d2, u2}})
	if !strings.Contains(b.String(), "| url | 2 | 0.795 | 0.317 | 0.700 (0.550-0.850) | 1 |") {
		t.Errorf("reach table:\n%s", b.String())
	}
}
