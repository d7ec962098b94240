package report

import (
	"strings"
	"testing"
)

// TestMissingContent: a page whose direct loads lost responses the mode
// got (a failed DNS lookup) is listed with direct's PLT over all its loads
// and over its complete ones; the origin's 404s do not count, and a page
// whose loads got the same responses is not listed.
func TestMissingContent(t *testing.T) {
	rec := func(page, mode string, run int, plt float64, failed, httpErr int) Record {
		return Record{Profile: "p", Page: page, Mode: mode, Run: run, Loaded: true, PLTms: plt, Failed: failed, HTTPErrors: httpErr}
	}
	r := &Results{Config: RunConfig{Modes: []string{"direct", "url"}, Profiles: []ProfileInfo{{Name: "p"}}}, Records: []Record{
		// cnn: direct's lookup of an ad host failed in 2 of 3 loads (2
		// requests without a response each); one 404 in every load.
		rec("cnn", "direct", 1, 10000, 3, 1), rec("cnn", "direct", 2, 11000, 3, 1), rec("cnn", "direct", 3, 15000, 1, 1),
		rec("cnn", "url", 1, 6000, 1, 1), rec("cnn", "url", 2, 6200, 1, 1), rec("cnn", "url", 3, 5800, 1, 1),
		// yahoo: the same 404s everywhere.
		rec("yahoo", "direct", 1, 9000, 2, 2), rec("yahoo", "url", 1, 5000, 2, 2),
	}}
	v := Views(r)[0]
	got := MissingContent(v, r.Records, "direct")
	if len(got) != 1 {
		t.Fatalf("got %+v, want cnn alone", got)
	}
	want := Missing{Page: "cnn", Mode: "url", Incomplete: 2, Loads: 3, RefNoResponse: 2, ModeNoResponse: 0, RefPLT: 11000, RefPLTComplete: 15000, ModePLT: 6000}
	if got[0] != want {
		t.Errorf("got %+v\nwant %+v", got[0], want)
	}
	md := string(Markdown(r, nil))
	for _, s := range []string{"### Content missing from direct's loads", "| cnn | url | 2 of 3 | 2 / 0 | 11.00 s / 15.00 s | 6.00 s | 0.55 / 0.40 |"} {
		if !strings.Contains(md, s) {
			t.Errorf("report lacks %q", s)
		}
	}
	if strings.Contains(md, "| yahoo | url |") {
		t.Error("yahoo listed: its loads got the same responses")
	}
}
