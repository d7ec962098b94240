package run

import (
	"maps"
	"os"
	"strings"
	"testing"

	"pep/testbed/report"
)

// TestOptCounts: the optimizer's counters from a /metrics pepd served
// (testdata/pepd-metrics.prom, saved by a session-13 campaign): the
// transforms summed over transform and type, the skips by reason with the
// reason that holds a space, neighbouring families ignored; a value that
// is not a number is an error. creditOpt gives a load what changed, and
// deferred counts what was served unstored for the next miss (deferred,
// backlog, quick served, AVIF pending and late; not the quick WebP's
// other outcomes nor AVIF served).
func TestOptCounts(t *testing.T) {
	b, err := os.ReadFile("testdata/pepd-metrics.prom")
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseOptCounts(string(b))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"animated": 5, "deferred": 31, "encoded": 198, "not accepted": 1, "not smaller": 130, "undecodable": 1}
	if c.transformed != 210+361+77 || !maps.Equal(c.skipped, want) {
		t.Errorf("got transformed %v, skipped %v; want 648, %v", c.transformed, c.skipped, want)
	}
	if _, err := parseOptCounts(`pep_optimize_skipped_total{reason="deferred"} many`); err == nil || !strings.Contains(err.Error(), "deferred") {
		t.Errorf("a value that is not a number: %v", err)
	}
	if c.linkWaits != 0 {
		t.Errorf("link waits %v before pepd had the counter, want 0", c.linkWaits)
	}
	next, _ := parseOptCounts(strings.NewReplacer(`"deferred"} 31`, `"deferred"} 40`, `image/png"} 77`, `image/png"} 80`,
		`pep_optimize_skipped_total{reason="animated"} 5`+"\n", "").Replace(string(b)) + "pep_optimize_link_waits_total 4\n" + "pep_optimize_link_short_waits_total 6\n" +
		`pep_optimize_quick_total{outcome="served"} 2` + "\n" + `pep_optimize_quick_total{outcome="late"} 7` + "\n")
	if d := c.deferred(); d != 31 {
		t.Errorf("deferred %v in the saved metrics, want 31", d)
	}
	withAVIF, _ := parseOptCounts(string(b) + `pep_optimize_skipped_total{reason="backlog"} 3` + "\n" + `pep_optimize_quick_total{outcome="served"} 2` + "\n" +
		`pep_optimize_avif_total{outcome="pending"} 4` + "\n" + `pep_optimize_avif_total{outcome="late"} 5` + "\n" + `pep_optimize_avif_total{outcome="served"} 70` + "\n")
	if d := withAVIF.deferred() - c.deferred(); d != 3+2+4+5 {
		t.Errorf("deferred grew by %v, want 14 (backlog 3, quick served 2, AVIF pending 4 and late 5)", d)
	}
	var r report.Record
	creditOpt(&r, c, next)
	if r.OptTransformed != 3 || !maps.Equal(r.OptSkipped, map[string]int{"deferred": 9}) || r.OptLinkWaits != 4 || r.OptLinkShortWaits != 6 || r.OptQuick != 2 {
		t.Errorf("credited %d, %v, link waits %d, short waits %d, quick %d; want 3, deferred 9, 4, 6, 2 (the served ones alone)", r.OptTransformed, r.OptSkipped, r.OptLinkWaits, r.OptLinkShortWaits, r.OptQuick)
	}
}

// TestOptBusy: the optimizer's transforms waiting and running, from the
// queue depths and pep_optimize_running; a pepd without the gauges reads
// idle (testdata/pepd-metrics.prom predates pep_optimize_running, and its
// queues were empty), a value that is not a number is an error.
func TestOptBusy(t *testing.T) {
	b, err := os.ReadFile("testdata/pepd-metrics.prom")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := parseOptBusy(string(b)); err != nil || n != 0 {
		t.Errorf("saved metrics: %v %v, want 0 (idle)", n, err)
	}
	m := "# TYPE pep_optimize_running gauge\npep_optimize_running 2\npep_optimize_queue_depth 3\npep_optimize_avif_queue_depth 1\npep_optimize_queue_depth_other 9\n"
	if n, err := parseOptBusy(m); err != nil || n != 6 {
		t.Errorf("got %v %v, want 6 (2 running, 3 and 1 waiting)", n, err)
	}
	if _, err := parseOptBusy("pep_optimize_running x"); err == nil {
		t.Error("a value that is not a number read as busy")
	}
}
