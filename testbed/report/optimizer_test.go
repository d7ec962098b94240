package report

import (
	"bytes"
	"strings"
	"testing"
)

// TestOptimizerSection: records of a mode without the optimizer and of
// two +opt modes with pepd's counters credited per load: the section has
// a row per +opt mode with the sums over its loads, a column per reason
// any mode saw (0 where a mode saw none), and nothing for the mode
// without counters; a link-waits column once a load has link waits and
// a quick column before it once a load has a quick WebP; results without
// counters have no section at all.
func TestOptimizerSection(t *testing.T) {
	r := synthetic()
	r.Config.Modes = []string{"url", "url+opt", "url-https-k1+opt"}
	var recs []Record
	for run := 1; run <= 2; run++ {
		for _, m := range r.Config.Modes {
			rec := Record{Mode: m, Profile: "paper-average", Run: run, Page: "site", Loaded: true, PLTms: 3000}
			switch m {
			case "url+opt":
				rec.OptTransformed, rec.OptSkipped = 40, map[string]int{"deferred": 2, "not smaller": 5}
			case "url-https-k1+opt":
				rec.OptTransformed, rec.OptSkipped = 10, map[string]int{"deferred": 20, "overload": 15}
			}
			recs = append(recs, rec)
		}
	}
	r.Records = recs
	md, err := Generate(r, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(md, []byte("### The optimizer's outcomes"))
	if i < 0 {
		t.Fatalf("no optimizer section:\n%s", md)
	}
	sec := string(md[i:])
	if j := strings.Index(sec[3:], "\n#"); j >= 0 {
		sec = sec[:j+3] // up to the next heading
	}
	for _, s := range []string{
		"| mode | loads | transformed | deferred | not smaller | overload |",
		"| url+opt | 2 | 80 | 4 | 10 | 0 |",
		"| url-https-k1+opt | 2 | 20 | 40 | 0 | 30 |",
	} {
		if !strings.Contains(sec, s) {
			t.Errorf("optimizer section lacks %q:\n%s", s, sec)
		}
	}
	if strings.Contains(sec, "| url | ") {
		t.Errorf("a row for the mode without the optimizer:\n%s", sec)
	}
	// with sets a counter on mode's records, and the section must then
	// hold the lines want.
	with := func(what, mode string, set func(*Record), want ...string) {
		t.Helper()
		for i := range recs {
			if recs[i].Mode == mode {
				set(&recs[i])
			}
		}
		md, err := Generate(r, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range want {
			if !bytes.Contains(md, []byte(s)) {
				t.Errorf("with %s, the optimizer section lacks %q", what, s)
			}
		}
	}
	// Link waits (optimize.link_deadline) get a column once a load has one.
	with("link waits", "url-https-k1+opt", func(r *Record) { r.OptLinkWaits = 3 },
		"| mode | loads | transformed | link waits | deferred | not smaller | overload |",
		"| url+opt | 2 | 80 | 0 | 4 | 10 | 0 |",
		"| url-https-k1+opt | 2 | 20 | 6 | 40 | 0 | 30 |")
	// Quick WebPs (optimize.quick_quality) get a column before it.
	with("quick WebPs", "url+opt", func(r *Record) { r.OptQuick = 7 },
		"| mode | loads | transformed | quick | link waits | deferred | not smaller | overload |",
		"| url+opt | 2 | 80 | 14 | 0 | 4 | 10 | 0 |",
		"| url-https-k1+opt | 2 | 20 | 0 | 6 | 40 | 0 | 30 |")
	// Short waits (optimize.link_floor) get one after the link waits.
	with("short waits", "url+opt", func(r *Record) { r.OptLinkShortWaits = 5 },
		"| mode | loads | transformed | quick | link waits | short waits | deferred | not smaller | overload |",
		"| url+opt | 2 | 80 | 14 | 0 | 10 | 4 | 10 | 0 |",
		"| url-https-k1+opt | 2 | 20 | 0 | 6 | 0 | 40 | 0 | 30 |",
		"Short waits (pep_optimize_link_short_waits_total)")
	r.Records = recs[:1]
	if md, err := Generate(r, t.TempDir()); err != nil || bytes.Contains(md, []byte("The optimizer's outcomes")) {
		t.Errorf("results without counters: err %v, section present %v", err, bytes.Contains(md, []byte("The optimizer's outcomes")))
	}
}
