package report

import (
	"strings"
	"testing"
)

// TestSocketsSection: a run with net logs gets the sockets section, per
// page over its sessions (two runs of url-https-k1 on 2 pages: 12 and 8
// VIP sockets, 1 used in each page); one without them does not.
func TestSocketsSection(t *testing.T) {
	rec := func(page, mode string, run int) Record {
		return Record{Profile: "p", Page: page, Mode: mode, Run: run, Loaded: true, PLTms: 1000}
	}
	r := &Results{Config: RunConfig{Modes: []string{"direct", "url-https-k1"}, Profiles: []ProfileInfo{{Name: "p"}}}}
	for run := 1; run <= 2; run++ {
		for _, p := range []string{"a", "b"} {
			r.Records = append(r.Records, rec(p, "direct", run), rec(p, "url-https-k1", run))
		}
	}
	if md := string(Markdown(r, nil)); strings.Contains(md, "### Sockets the browser connected") {
		t.Error("sockets section without net logs")
	}
	r.Sockets = []SessionSockets{
		{Profile: "p", Run: 1, Mode: "url-https-k1", Pages: 2, VIP: SocketCounts{Sockets: 12, Used: 2, TLS: 12, TLSDone: 4, TLSUnused: 10}, Other: SocketCounts{Sockets: 6, Used: 2}},
		{Profile: "p", Run: 2, Mode: "url-https-k1", Pages: 2, VIP: SocketCounts{Sockets: 8, Used: 2, TLS: 8, TLSDone: 2, TLSUnused: 6}, Other: SocketCounts{Sockets: 6, Used: 2}},
		{Profile: "p", Run: 1, Mode: "direct", Pages: 2, Other: SocketCounts{Sockets: 30, Used: 26}},
		{Profile: "other", Run: 1, Mode: "direct", Pages: 2, Other: SocketCounts{Sockets: 99}},
	}
	md := string(Markdown(r, nil))
	for _, s := range []string{
		"### Sockets the browser connected (net log)",
		"| direct | 2 | 0.0 | 0.0 | 0.0 | 0.0 | 0.0 | 15.0 | 13.0 | 0.0 | 0.0 |",
		"| url-https-k1 | 4 | 5.0 | 1.0 | 5.0 | 1.5 | 4.0 | 3.0 | 1.0 | 0.0 | 0.0 |",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("report lacks %q", s)
		}
	}
}
