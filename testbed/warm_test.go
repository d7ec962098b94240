package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"pep/internal/testenv"
	"pep/testbed/run"
)

// TestWarmPasses runs the real testbed (namespaces, Squid, pepd, Chromium)
// over one tp5n page in url+opt+warm with pepd's optimizer deadline at
// 1 ms, so that the first warm-up pass defers its transforms for the next
// miss: the passes go on until one defers nothing (run.MaxWarmPasses at
// most), so there is more than one, the first deferring and the last not;
// and the measured load finds every transform stored (no response of it
// deferred: a miss would be, at 1 ms).
func TestWarmPasses(t *testing.T) {
	c := onePage(t, "whois.domaintools.com", "url+opt+warm")
	c.Pepd = []run.PepdSetting{{Key: "optimize.deadline", Value: "1ms"}}
	var logs testenv.Buffer
	log := slog.New(slog.NewJSONHandler(io.MultiWriter(&logs, tWriter{t}), &slog.HandlerOptions{Level: slog.LevelInfo}))
	res, err := run.Run(context.Background(), c, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	var passes []float64 // deferred per pass, in order
	for _, l := range bytes.Split([]byte(logs.String()), []byte("\n")) {
		var e struct {
			Msg      string   `json:"msg"`
			Pass     int      `json:"pass"`
			Deferred *float64 `json:"deferred"`
		}
		if json.Unmarshal(l, &e) != nil || e.Msg != "warm: the optimizer finished the warm-up's transforms" {
			continue
		}
		if e.Pass != len(passes)+1 || e.Deferred == nil {
			t.Fatalf("pass %d (deferred %v) logged after %d passes: %s", e.Pass, e.Deferred, len(passes), l)
		}
		passes = append(passes, *e.Deferred)
	}
	t.Logf("deferred per warm-up pass: %v", passes)
	if len(passes) < 2 || len(passes) > run.MaxWarmPasses || passes[0] == 0 || passes[len(passes)-1] != 0 && len(passes) < run.MaxWarmPasses {
		t.Errorf("passes deferring %v: want a first that defers (1 ms deadline), then passes until one defers nothing, at most %d", passes, run.MaxWarmPasses)
	}
	if len(res.Records) != 1 || !res.Records[0].Loaded {
		t.Fatalf("records %+v: want the page loaded once", res.Records)
	}
	if r := res.Records[0]; len(r.OptSkipped) > 0 && r.OptSkipped["deferred"] > 0 {
		t.Errorf("the measured load had %d responses deferred: the warm cache lacks them", r.OptSkipped["deferred"])
	}
}

// onePage is the configuration of a run over one tp5n page, once, under
// the fast profile, in modes, with the pepd and pepctl of this tree; it
// skips t where the testbed cannot run (needTestbed, needTP5N).
func onePage(t *testing.T, page string, modes ...string) run.Config {
	needTestbed(t)
	c := run.Default()
	c.Corpus = needTP5N(t)
	c.Pages = page
	c.Profiles = []string{"fast"}
	c.Modes = modes
	c.Runs = 1
	c.Out = t.TempDir()
	c.Bin = buildCommands(t)
	c.PageTimeout = time.Minute
	return c
}
