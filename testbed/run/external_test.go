package run

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pep/internal/admin"
	"pep/internal/mode"
	"pep/testbed/report"
)

// TestRunExternal drives the external runner against pepd's real admin
// API (internal/admin over a mode switch) and a link emulator's exposition
// (testdata, profile fast), with real Chromium: the gateway ends in the
// session's mode, each page is one record, and the header says what the
// external topology is (no hook: warm Squid). -pepd is refused there.
func TestRunExternal(t *testing.T) {
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Skipf("needs chromium (make deps): %v", err)
	}
	sw := mode.NewSwitch(mode.Off)
	gw := httptest.NewServer(admin.Handler(admin.Options{Mode: sw}))
	defer gw.Close()
	prom, err := os.ReadFile("testdata/pepnetem-metrics-2.prom")
	if err != nil {
		t.Fatal(err)
	}
	link := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(prom) }))
	defer link.Close()

	// The page itself goes nowhere: Chromium (outside a desktop
	// environment) takes its proxy from the environment, and nothing
	// listens there.
	t.Setenv("all_proxy", "http://127.0.0.1:9")
	c := Default()
	c.Profiles, c.Modes, c.Runs, c.Pages, c.Out = []string{"fast"}, []string{"url"}, 1, "yahoo", t.TempDir()
	c.PageTimeout, c.Settle, c.SettleMax = 20*time.Second, 100*time.Millisecond, time.Second
	x := External{GWAdmin: gw.URL, LinkMetrics: link.URL + "/metrics"}
	log := slog.New(slog.NewTextHandler(tLog{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))

	bad := c
	bad.Pepd = []PepdSetting{{"optimize.deadline", "150ms"}}
	if _, err := RunExternal(context.Background(), bad, x, log, nil); err == nil || !strings.Contains(err.Error(), "the gateway's pepd reads its own configuration") {
		t.Errorf("-pepd on an external topology: err %v", err)
	}

	res, err := RunExternal(context.Background(), c, x, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := sw.Get(); got != mode.URL {
		t.Errorf("gateway in mode %s, want url", got)
	}
	if len(res.Records) != 1 || res.Records[0].Mode != "url" || res.Records[0].Profile != "fast" || res.Records[0].Page != "yahoo" || !res.Records[0].Warm {
		t.Fatalf("records %+v, want one warm url record of yahoo under fast", res.Records)
	}
	t.Logf("the page (through a dead proxy): loaded %v, error %q", res.Records[0].Loaded, res.Records[0].Error)
	rc := res.Config
	if rc.Backend != "external: "+x.LinkMetrics || rc.VIP != "192.0.2.12" || rc.Parallel != 1 || rc.Wired != nil || !rc.Warm ||
		rc.SquidCache != "warm: no gateway hook, so Squid's cache was kept from the earlier sessions" || rc.Browser == "" || len(rc.Pages) != 1 {
		t.Errorf("header %+v", rc)
	}
	back, err := report.Read(filepath.Join(c.Out, "results.json"))
	if err != nil || len(back.Records) != 1 {
		t.Errorf("results.json: %v, %d records", err, len(back.Records))
	}
}
