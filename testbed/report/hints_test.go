package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pep/testbed/har"
)

// hintsHAR writes a HAR of one load: entries of (url, resource type,
// initiator type, initiator URL, start ms, bytes).
func hintsHAR(t *testing.T, dir, name string, onLoad float64, es ...[6]any) string {
	t.Helper()
	h := &har.HAR{Log: har.Log{Version: har.Version, Pages: []har.Page{{ID: "page_1", PageTimings: har.PageTimings{OnLoad: onLoad}}}}}
	for _, e := range es {
		h.Log.Entries = append(h.Log.Entries, har.Entry{PageRef: "page_1", Start: e[4].(float64), Time: 100,
			Request:      har.Request{Method: "GET", URL: e[0].(string)},
			Response:     har.Response{Status: 200, TransferSize: e[5].(int64)},
			ResourceType: e[1].(string), Initiator: har.Initiator{Type: e[2].(string), URL: e[3].(string), Line: -1}})
	}
	if err := h.Write(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestHintsSection: a page whose stylesheet names a font, loaded without
// hints (chain document > stylesheet > font: 3 levels) and with hints
// (stylesheet, font and an image the page never needs preloaded from the
// document's Link headers: 2 levels); pepd's counters from the records,
// the fetches ahead among them.
// The section is compared with testdata/hints.md (go test -update) and
// its figures are written out.
func TestHintsSection(t *testing.T) {
	dir := t.TempDir()
	const doc, css, font, img = "http://www.site.test/", "http://192.0.2.12/cdn.test/a.css", "http://192.0.2.12/cdn.test/f.woff2", "http://192.0.2.12/cdn.test/unused.png"
	off := hintsHAR(t, dir, "off.har", 3000,
		[6]any{doc, "Document", "other", "", 0.0, int64(10000)},
		[6]any{css, "Stylesheet", "parser", doc, 1000.0, int64(5000)},
		[6]any{font, "Font", "parser", css, 2000.0, int64(20000)},
		[6]any{"http://www.site.test/favicon.ico", "Other", "other", "", 2900.0, int64(500)})
	on := hintsHAR(t, dir, "on.har", 2000,
		[6]any{doc, "Document", "other", "", 0.0, int64(10000)},
		[6]any{css, "Stylesheet", "other", "", 900.0, int64(5000)},
		[6]any{font, "Font", "other", "", 900.0, int64(20000)},
		[6]any{img, "Image", "other", "", 900.0, int64(3000)})
	r := synthetic()
	r.Config.Modes = []string{"url", "url+hints"}
	recs := []Record{}
	for run := 1; run <= 2; run++ {
		for _, m := range []string{"url", "url+hints"} {
			rec := Record{Mode: m, Profile: "paper-average", Run: run, Page: "site", Loaded: true, PLTms: 3000, LCPms: 2500,
				LinkUpBytes: 10000, LinkDnBytes: 90000, HAR: off}
			if m == "url+hints" {
				rec.PLTms, rec.LCPms, rec.HAR = 2000, 1500, on
				rec.HintsSent, rec.HintsUsed, rec.HintsUnused, rec.HintsUnusedBytes = 3, 3, 0, 0
				rec.HintsFetchedAhead, rec.HintsFetchBusy = 4, run-1
				if run == 2 {
					rec.HintsUsed, rec.HintsUnused, rec.HintsUnusedBytes = 2, 1, 3000
				}
			}
			recs = append(recs, rec)
		}
	}
	r.Records = recs
	md, err := Generate(r, dir)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(md, []byte("### Dependency hints"))
	if i < 0 {
		t.Fatalf("no hints section:\n%s", md)
	}
	sec := md[i:]
	if j := bytes.Index(sec, []byte("| mode |")); j >= 0 {
		if k := bytes.Index(sec[j:], []byte("\n\n")); k >= 0 {
			sec = sec[:j+k+2] // the table's end
		}
	}
	golden := filepath.Join("testdata", "hints.md")
	if *update {
		if err := os.WriteFile(golden, sec, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sec, want) {
		t.Errorf("hints section differs from %s (go test -update to accept):\n%s", golden, sec)
	}
	for _, s := range []string{
		// No hints: no preload, chain of 3.
		"| url | 2 | – | – | – | – | 0.0 | 0.0 kB | – | – | 3 (3-3) | 3.00 | 2.50 |",
		// Hints: 3 sent per load, 5 used, 1 unused of 3 kB, 4 fetched
		// ahead per load and 1 busy (pepd); 3
		// preloads per load of 28 kB each, the image never needed
		// (2 x 3 kB of 2 x 100 kB radio bytes: 3.0 %); chain of 2.
		"| url+hints | 2 | 3.0 | 5 | 1 (3.0 kB) | 4.0 (1) | 3.0 | 56.0 kB | 2 (6.0 kB) | 3.0 % | 2 (2-2) | 2.00 | 1.50 |",
	} {
		if !strings.Contains(string(sec), s) {
			t.Errorf("hints section lacks %q:\n%s", s, sec)
		}
	}
	if rows := HintsRows(Views(&Results{Records: recs[:1], Config: r.Config})[0], &Results{Records: recs[:1]}, TimeView{}); rows != nil {
		t.Errorf("rows for results without a +hints mode: %+v", rows)
	}
}

func TestHintsBase(t *testing.T) {
	for m, want := range map[string]string{"url+hints": "url", "url+opt+hints+warm": "url+opt+warm", "url-https-k3+hints": "url-https-k3", "url": "", "direct": ""} {
		if got := HintsBase(m); got != want {
			t.Errorf("HintsBase(%q) = %q, want %q", m, got, want)
		}
	}
}
