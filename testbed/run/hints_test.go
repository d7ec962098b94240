package run

import (
	"slices"
	"testing"

	"pep/testbed/report"
)

// TestHintTally: pepd's counters read before the session (after the
// teaching pass), after each of three loads and after DELETE /hints are
// credited per load: sent to the load just made, used and unused to the
// one before it (its document's successor ended it), the last load's at
// the end; the fetches ahead (hit and miss) and the busy ones to the load
// just made; what the teaching pass's last load adds at the first read is
// dropped.
func TestHintTally(t *testing.T) {
	expo := func(sent, used, unused, bytes, hit, miss, busy string) string {
		return "# HELP pep_hints_sent_total x\npep_hints_sent_total " + sent + "\npep_hints_used_total " + used +
			"\npep_hints_unused_total " + unused + "\npep_hints_unused_bytes_total " + bytes + "\npep_hints_entries 7\n" +
			`pep_hints_prefetches_total{outcome="busy"} ` + busy + "\n" + `pep_hints_prefetches_total{outcome="error"} 1` + "\n" +
			`pep_hints_prefetches_total{outcome="hit"} ` + hit + "\n" + `pep_hints_prefetches_total{outcome="miss"} ` + miss + "\n"
	}
	reads := []string{
		expo("0", "0", "0", "0", "0", "2", "0"),    // after teaching
		expo("5", "1", "0", "0", "1", "8", "3"),    // load 1: 5 sent, 7 fetched ahead (1 hit, 6 miss), 3 busy; the teaching pass's last load ended (1 used: dropped)
		expo("8", "5", "1", "2000", "1", "9", "3"), // load 2: 3 sent, 1 fetched ahead; load 1 ended: 4 used, 1 unused of 2 kB
		expo("8", "8", "1", "2000", "1", "9", "3"), // load 3: none sent; load 2: 3 used
		expo("8", "8", "1", "2000", "1", "9", "3"), // after DELETE /hints: load 3 had none
	}
	i := 0
	ended := false
	read := func() (hintCounts, error) {
		c, err := parseHintCounts(reads[i])
		i++
		return c, err
	}
	tally, err := newHintTally(read, func() error { ended = true; return nil })
	if err != nil {
		t.Fatal(err)
	}
	var recs []report.Record
	for range 3 {
		recs = append(recs, report.Record{})
		if err := tally.afterLoad(recs); err != nil {
			t.Fatal(err)
		}
	}
	if err := tally.endSession(recs); err != nil {
		t.Fatal(err)
	}
	if !ended || i != len(reads) {
		t.Fatalf("ended %v, %d reads of %d", ended, i, len(reads))
	}
	type f struct {
		sent, used, unused int
		bytes              int64
		fetched, busy      int
	}
	var got []f
	for _, r := range recs {
		got = append(got, f{r.HintsSent, r.HintsUsed, r.HintsUnused, r.HintsUnusedBytes, r.HintsFetchedAhead, r.HintsFetchBusy})
	}
	if want := []f{{5, 4, 1, 2000, 7, 3}, {3, 3, 0, 0, 1, 0}, {0, 0, 0, 0, 0, 0}}; !slices.Equal(got, want) {
		t.Errorf("credited %+v, want %+v", got, want)
	}
	if _, err := parseHintCounts("pep_hints_sent_total x\n"); err == nil {
		t.Error("a counter that is not a number: no error")
	}
}
