package testbed

import (
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"pep/netem"
	"pep/testbed/browser"
	"pep/testbed/corpus"
	"pep/testbed/run"
)

// roamingBound is the longest a page load may take after the phone's
// network changed (measured: TestRoaming logs the figure; the bound leaves
// room for a loaded machine).
const roamingBound = 20 * time.Second

// TestRoaming is the seed paper's roaming case (§5), with pepd's
// dns.origins keep (the origins after the VIP) and drop (the VIP alone):
// the phone loads a page in dns mode over the radio link (its
// names resolve to the VIP), then moves to another network, as when a
// phone joins Wi-Fi: its radio address and route go, a new address and a
// default route through a "wifi" namespace come, and from there the VIP
// is unreachable (blackholed, the worst case: no ICMP) while the origins
// and the carrier resolver are reachable. The same browser must load the
// page again, from the origins, within roamingBound. With dns.origins drop
// its host cache held only the VIP (24 h TTL): connecting to an origin
// shows that Chromium dropped its host cache on the network change
// (NetworkChangeNotifier on netlink address events) and resolved again.
func TestRoaming(t *testing.T) {
	needTestbed(t)
	bin := buildCommands(t)
	for _, origins := range []string{"keep", "drop"} {
		t.Run("dns.origins="+origins, func(t *testing.T) { roam(t, bin, origins) })
	}
}

func roam(t *testing.T, bin, origins string) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c := run.Default()
	c.Bin = bin
	c.Pepd = []run.PepdSetting{{Key: "dns.origins", Value: origins}}
	c.Out = t.TempDir()
	corp := corpus.Default()
	corp, err := corp.Select([]string{"yahoo"})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := corpus.PlanFor(corp, corpus.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	prof, err := netem.LoadProfile("fast")
	if err != nil {
		t.Fatal(err)
	}
	bed, err := run.NewBed(ctx, c, run.BedOptions{Profile: prof, Corpus: corp, Plan: plan, NeedPEP: true, Logs: t.TempDir()}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer bed.Close()
	if err := bed.SetMode(ctx, "dns"); err != nil {
		t.Fatal(err)
	}
	tc := bed.Topo.Config
	s, err := browser.NewSession(ctx, browser.Options{NS: tc.MNNS(), PageTimeout: time.Minute, Settle: 300 * time.Millisecond,
		IgnoreCertErrors: true, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	page := corp.Pages[0]
	before, err := s.Load(ctx, page.URL)
	if err != nil || !before.Loaded {
		t.Fatalf("before the move: %v %+v", err, before)
	}
	if before.ConnsByIP[tc.VIP.String()] == 0 {
		t.Fatalf("before the move the page did not come from the VIP: connections %v", before.ConnsByIP)
	}

	// Loads after the move must reach the network: the objects are fresh
	// in the HTTP cache for a day.
	if err := s.ClearHTTPCache(ctx); err != nil {
		t.Fatal(err)
	}

	// The move: a wifi namespace between mn and core; the VIP blackholed
	// there.
	wifi := tc.Prefix + "-wifi"
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	sh("ip", "netns", "add", wifi)
	defer exec.Command("ip", "netns", "del", wifi).Run()
	sh("ip", "-n", wifi, "link", "set", "lo", "up")
	sh("ip", "link", "add", "wifi0", "netns", tc.MNNS(), "type", "veth", "peer", "name", "m0", "netns", wifi)
	sh("ip", "link", "add", "wifi0", "netns", tc.CoreNS(), "type", "veth", "peer", "name", "c0", "netns", wifi)
	sh("ip", "-n", wifi, "addr", "add", "10.77.0.1/24", "dev", "m0")
	sh("ip", "-n", wifi, "addr", "add", "10.78.0.1/24", "dev", "c0")
	sh("ip", "-n", wifi, "link", "set", "m0", "up")
	sh("ip", "-n", wifi, "link", "set", "c0", "up")
	sh("ip", "-n", wifi, "route", "add", "default", "via", "10.78.0.2")
	sh("ip", "-n", wifi, "route", "add", "blackhole", tc.VIP.String()+"/32")
	sh("ip", "netns", "exec", wifi, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	sh("ip", "-n", tc.CoreNS(), "addr", "add", "10.78.0.2/24", "dev", "wifi0")
	sh("ip", "-n", tc.CoreNS(), "link", "set", "wifi0", "up")
	sh("ip", "-n", tc.CoreNS(), "route", "add", "10.77.0.0/24", "via", "10.78.0.1")
	t0 := time.Now()
	sh("ip", "-n", tc.MNNS(), "addr", "flush", "dev", "radio0")
	sh("ip", "-n", tc.MNNS(), "link", "set", "radio0", "down")
	sh("ip", "-n", tc.MNNS(), "addr", "add", "10.77.0.2/24", "dev", "wifi0")
	sh("ip", "-n", tc.MNNS(), "link", "set", "wifi0", "up")
	sh("ip", "-n", tc.MNNS(), "route", "add", "default", "via", "10.77.0.1")

	var after browser.Page
	tries := 0
	for time.Since(t0) < roamingBound {
		tries++
		after, err = s.Load(ctx, page.URL)
		if err != nil {
			t.Fatal(err)
		}
		if after.Loaded && after.Failed == 0 {
			break
		}
	}
	took := time.Since(t0)
	t.Logf("roaming (dns.origins %s): page %s loaded %v after the move in %s (%d tries; load %s); connections %v; before the move: %v",
		origins, page.Name, after.Loaded, took.Round(time.Millisecond), tries, after.PLT.Round(time.Millisecond), after.ConnsByIP, before.ConnsByIP)
	if !after.Loaded || after.Failed > 0 || took > roamingBound {
		t.Fatalf("after the move: loaded %v, %d failed requests, %s; want a whole load within %s: %s", after.Loaded, after.Failed, took, roamingBound, after.Err)
	}
	if after.ConnsByIP[tc.VIP.String()] > 0 || len(after.ConnsByIP) == 0 {
		t.Errorf("after the move: connections %v, want some, none to the unreachable VIP", after.ConnsByIP)
	}
}
