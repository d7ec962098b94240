package run

// The VIP's surplus TLS handshakes per load (url-https-kN modes): pepd's
// pep_http_tls_surplus_total counters read around each load and credited
// to its record.

import "pep/testbed/report"

// surplusCounts are pepd's pep_http_tls_surplus_total series: TLS
// handshakes to the VIP held behind the subscriber's first handshake to
// the same origin (https.hold_surplus, internal/httpproxy/hold.go) that
// the subscriber closed while held, and those served after the hold.
type surplusCounts struct{ closed, served float64 }

// surplusCounts reads pepd's surplus handshake counters from its /metrics.
func (p *pep) surplusCounts() (surplusCounts, error) {
	return readCounts(p, "surplus handshake counters", parseSurplusCounts)
}

// parseSurplusCounts reads the surplus handshake counters from a
// Prometheus text exposition; absent series read 0 (nothing held yet, or
// the hold off), a value that is not a number is an error.
func parseSurplusCounts(m string) (surplusCounts, error) {
	var c surplusCounts
	err := parseSeries(m, map[string]*float64{
		`pep_http_tls_surplus_total{outcome="closed"}`: &c.closed,
		`pep_http_tls_surplus_total{outcome="served"}`: &c.served,
	})
	if err != nil {
		return surplusCounts{}, err
	}
	return c, nil
}

// creditSurplus adds to r the handshakes held from before to after. pepd
// counts a held handshake when its hold ends: 40 ms after the
// subscriber's first handshake to that origin ends, early in the load,
// and at most https.hold_surplus after its ClientHello; one held past
// the load's settling would be credited to the next load.
func creditSurplus(r *report.Record, before, after surplusCounts) {
	r.TLSSurplusClosed += int(after.closed - before.closed)
	r.TLSSurplusServed += int(after.served - before.served)
}
