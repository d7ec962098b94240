package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"pep/netem"
)

// Scraper reads the link emulator's counters from its Prometheus endpoint
// (netem.NewCollector's pep_netem_* series, exposition format 0.0.4).
type Scraper struct {
	URL    string
	Client *http.Client // nil: http.DefaultClient
}

// LinkSnapshot is one reading of the link's counters.
type LinkSnapshot struct {
	// Profile is the emulated profile's name (the series' profile label).
	Profile string
	// Counters holds the counters by direction, ConnsByDst included (up to
	// netem.MaxDstSeries addresses per direction).
	Counters netem.Counters
}

// Scrape fetches and parses one exposition.
func (s *Scraper) Scrape(ctx context.Context) (LinkSnapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	if err != nil {
		return LinkSnapshot{}, fmt.Errorf("run: link metrics: %w", err)
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	c := s.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return LinkSnapshot{}, fmt.Errorf("run: link metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return LinkSnapshot{}, fmt.Errorf("run: link metrics %s: %s", s.URL, resp.Status)
	}
	return ParseLinkMetrics(resp.Body)
}

// ParseLinkMetrics reads netem.NewCollector's series from a Prometheus
// text exposition: pep_netem_{packets,bytes,syns,dns_queries,
// capture_drops}_total, pep_netem_drops_total{cause=loss|queue|any} and
// pep_netem_syns_by_dst_total{dst=ADDR} (Counters.ConnsByDst), each by
// direction (up: mobile to network, down: the reverse). Errors
// name the series; an exposition without pep_netem_syns_total is an error
// (not a link emulator's).
func ParseLinkMetrics(r io.Reader) (LinkSnapshot, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return LinkSnapshot{}, fmt.Errorf("run: link metrics: %w", err)
	}
	if fams["pep_netem_syns_total"] == nil {
		return LinkSnapshot{}, errors.New("run: link metrics: no pep_netem_syns_total series (is this pepnetem run -metrics?)")
	}
	var snap LinkSnapshot
	snap.Counters.Up.ConnsByDst = map[netip.Addr]uint64{}
	snap.Counters.Down.ConnsByDst = map[netip.Addr]uint64{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "pep_netem_") {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			var d *netem.DirCounters
			switch labels["direction"] {
			case "up":
				d = &snap.Counters.Up
			case "down":
				d = &snap.Counters.Down
			default:
				return LinkSnapshot{}, fmt.Errorf("run: link metrics: %s: direction %q, want up or down", name, labels["direction"])
			}
			if pr := labels["profile"]; pr != "" {
				if snap.Profile != "" && snap.Profile != pr {
					return LinkSnapshot{}, fmt.Errorf("run: link metrics: profiles %q and %q in one exposition", snap.Profile, pr)
				}
				snap.Profile = pr
			}
			fv := m.GetCounter().GetValue()
			if m.GetCounter() == nil {
				fv = m.GetUntyped().GetValue() // no # TYPE line
			}
			if fv < 0 || fv != float64(uint64(fv)) {
				return LinkSnapshot{}, fmt.Errorf("run: link metrics: %s: value %s is not a count", name, strconv.FormatFloat(fv, 'g', -1, 64))
			}
			v := uint64(fv)
			switch name {
			case "pep_netem_packets_total":
				d.Packets = v
			case "pep_netem_bytes_total":
				d.Bytes = v
			case "pep_netem_syns_total":
				d.SYNs = v
			case "pep_netem_dns_queries_total":
				d.DNSQueries = v
			case "pep_netem_capture_drops_total":
				d.CaptureDrops = v
			case "pep_netem_syns_by_dst_total":
				a, err := netip.ParseAddr(labels["dst"])
				if err != nil {
					// "other": beyond the collector's series bound; counted
					// in pep_netem_syns_total but not attributable.
					continue
				}
				d.ConnsByDst[a] = v
			case "pep_netem_drops_total":
				switch labels["cause"] {
				case "loss":
					d.LossDrops = v
				case "queue":
					d.QueueDrops = v
				}
				d.Drops += v
			}
		}
	}
	return snap, nil
}
