package testbed

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pep/internal/config"
	"pep/testbed/report"
	"pep/testbed/run"
	"pep/testbed/topo"
)

// TestVariant runs the real testbed over one tp5n page in url+opt and in
// url+opt@late, a variant whose pepd has the optimizer's deadline at 1 ms
// (-variant late:optimize.deadline=1ms) over the run's 10 s (-pepd), each
// on its own testbed (-split-modes): the variant's setting reaches its
// pepd alone. On a cold cache url+opt waits for its transforms and serves
// them; url+opt@late defers them for the next miss. The variant's
// pepd.yaml is kept as pepd read it, results.json records the variant, and
// the report compares the two as peers.
func TestVariant(t *testing.T) {
	c := onePage(t, "whois.domaintools.com", "url+opt", "url+opt@late")
	c.SplitModes, c.Parallel = true, 2
	c.Pepd = []run.PepdSetting{{Key: "optimize.deadline", Value: "10s"}}
	c.Variants = map[string][]run.PepdSetting{"late": {{Key: "optimize.deadline", Value: "1ms"}}}
	log := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	res, err := run.Run(context.Background(), c, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	byMode := map[string]report.Record{}
	for _, r := range res.Records {
		if !r.Loaded {
			t.Fatalf("%s %s did not load: %s", r.Mode, r.Page, r.Error)
		}
		byMode[r.Mode] = r
	}
	plain, late := byMode["url+opt"], byMode["url+opt@late"]
	t.Logf("url+opt: transformed %d, skipped %v; url+opt@late: transformed %d, skipped %v", plain.OptTransformed, plain.OptSkipped, late.OptTransformed, late.OptSkipped)
	if plain.OptTransformed == 0 || plain.OptSkipped["deferred"] > 0 {
		t.Errorf("url+opt (deadline 10s): %d transformed, %d deferred; want transforms served, none deferred", plain.OptTransformed, plain.OptSkipped["deferred"])
	}
	if late.OptSkipped["deferred"] == 0 {
		t.Errorf("url+opt@late (deadline 1ms): none deferred (skipped %v); the variant's setting did not reach its pepd", late.OptSkipped)
	}
	for file, want := range map[string]time.Duration{"pepd.yaml": 10 * time.Second, "pepd@late.yaml": time.Millisecond} {
		pc, err := config.Load(filepath.Join(c.Out, file))
		if err != nil {
			t.Fatal(err)
		}
		if pc.Optimize.Deadline != want {
			t.Errorf("%s: optimize.deadline %s, want %s", file, pc.Optimize.Deadline, want)
		}
	}
	if got := res.Config.Variants["late"]; len(got) != 1 || got[0] != "optimize.deadline=1ms" {
		t.Errorf("results.json's variants %v, want late: [optimize.deadline=1ms]", res.Config.Variants)
	}
	md := string(report.Markdown(res, nil))
	for _, want := range []string{"- pepd settings of the modes tagged @late (-variant, over the -pepd ones): `optimize.deadline=1ms`", "| url+opt@late | url+opt | 1 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	if left := topo.Leftovers(os.Getpid()); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
