package run

import (
	"os"
	"strings"
	"testing"

	"pep/testbed/report"
)

// TestSurplusCounts: the held surplus TLS handshakes from a /metrics
// pepd served (testdata/pepd-metrics-hold.prom, saved by session 31's
// warm campaign with https.hold_surplus on: 329 closed, 83 served),
// pep_http_tls_surplus_hold_seconds_total beside them ignored; a pepd
// that never held one reads 0; a value that is not a number is an error;
// creditSurplus gives a load what changed.
func TestSurplusCounts(t *testing.T) {
	b, err := os.ReadFile("testdata/pepd-metrics-hold.prom")
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseSurplusCounts(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if c != (surplusCounts{closed: 329, served: 83}) {
		t.Errorf("got %+v, want closed 329, served 83", c)
	}
	old, err := os.ReadFile("testdata/pepd-metrics.prom")
	if err != nil {
		t.Fatal(err)
	}
	if z, err := parseSurplusCounts(string(old)); err != nil || z != (surplusCounts{}) {
		t.Errorf("a pepd without the counters: %+v, %v; want zeros", z, err)
	}
	if _, err := parseSurplusCounts(`pep_http_tls_surplus_total{outcome="closed"} some`); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("a value that is not a number: %v", err)
	}
	next, err := parseSurplusCounts(strings.NewReplacer(`"closed"} 329`, `"closed"} 333`, `"served"} 83`, `"served"} 84`).Replace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	var r report.Record
	creditSurplus(&r, c, next)
	if r.TLSSurplusClosed != 4 || r.TLSSurplusServed != 1 {
		t.Errorf("credited closed %d, served %d; want 4, 1", r.TLSSurplusClosed, r.TLSSurplusServed)
	}
}
