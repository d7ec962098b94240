package run

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"testing"

	"pep/netem"
)

// The testdata files are two expositions of one real `pepnetem run
// -backend userspace -metrics ... fast` between two namespaces: the first
// after one HTTP request (1 SYN) and one DNS query, the second after two
// more requests and three more queries.
func TestParseLinkMetrics(t *testing.T) {
	read := func(name string) LinkSnapshot {
		t.Helper()
		f, err := os.Open("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		s, err := ParseLinkMetrics(f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return s
	}
	first, second := read("pepnetem-metrics-1.prom"), read("pepnetem-metrics-2.prom")
	if first.Profile != "fast" {
		t.Errorf("profile %q, want fast", first.Profile)
	}
	wantFirst := netem.DirCounters{Packets: 13, Bytes: 867, SYNs: 1, DNSQueries: 1}
	if got := first.Counters.Up; got.Packets != wantFirst.Packets || got.Bytes != wantFirst.Bytes || got.SYNs != wantFirst.SYNs ||
		got.DNSQueries != wantFirst.DNSQueries || got.Drops != 0 {
		t.Errorf("first up %+v, want %+v", got, wantFirst)
	}
	d := second.Counters.Sub(first.Counters)
	for _, c := range []struct {
		name      string
		got, want uint64
	}{
		{"up SYNs", d.Up.SYNs, 2},
		{"up DNS queries", d.Up.DNSQueries, 3},
		{"up packets", d.Up.Packets, 28 - 13},
		{"up bytes", d.Up.Bytes, 1838 - 867},
		{"down bytes", d.Down.Bytes, 4470 - 1735},
		{"down packets", d.Down.Packets, 25 - 12},
		{"down SYNs", d.Down.SYNs, 0},
		{"drops", d.Up.Drops + d.Down.Drops, 0},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.name, c.got, c.want)
		}
	}
}

func TestParseLinkMetricsErrors(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
	}{
		{"not an emulator", "go_goroutines 7\n", "no pep_netem_syns_total"},
		{"bad direction", `pep_netem_syns_total{direction="sideways",profile="fast"} 1` + "\n", `direction "sideways"`},
		{"two profiles", `pep_netem_syns_total{direction="up",profile="fast"} 1` + "\n" + `pep_netem_syns_total{direction="down",profile="3g"} 1` + "\n", `profiles "fast" and "3g"`},
		{"fraction", `pep_netem_syns_total{direction="up",profile="fast"} 1.5` + "\n", "1.5 is not a count"},
		{"syntax", "pep_netem_syns_total{direction=up} 1\n", "link metrics"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseLinkMetrics(strings.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestScrape serves a real exposition over HTTP, as pepnetem does.
func TestScrape(t *testing.T) {
	body, err := os.ReadFile("testdata/pepnetem-metrics-2.prom")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write(body)
	}))
	defer srv.Close()
	s, err := (&Scraper{URL: srv.URL + "/metrics"}).Scrape(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Counters.Up.SYNs != 3 || s.Counters.Up.DNSQueries != 4 || s.Profile != "fast" {
		t.Errorf("got %+v, want 3 SYNs and 4 DNS queries up, profile fast", s)
	}
	if _, err := (&Scraper{URL: srv.URL + "/nope"}).Scrape(context.Background()); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing endpoint: err %v, want a 404", err)
	}
}

// TestParseLinkMetricsByDst: SYNs by destination, in the form the netem
// collector's test pins (pep_netem_syns_by_dst_total), become ConnsByDst;
// the "other" bucket beyond the series bound is not attributed.
func TestParseLinkMetricsByDst(t *testing.T) {
	in := `pep_netem_syns_total{direction="up",profile="3g"} 7
pep_netem_syns_by_dst_total{direction="up",dst="192.0.2.12",profile="3g"} 4
pep_netem_syns_by_dst_total{direction="up",dst="198.19.0.7",profile="3g"} 2
pep_netem_syns_by_dst_total{direction="up",dst="other",profile="3g"} 1
`
	s, err := ParseLinkMetrics(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got := s.Counters.Up.ConnsByDst
	if len(got) != 2 || got[netip.MustParseAddr("192.0.2.12")] != 4 || got[netip.MustParseAddr("198.19.0.7")] != 2 {
		t.Errorf("ConnsByDst = %v", got)
	}
}
