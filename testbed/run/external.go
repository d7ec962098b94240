package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"pep/netem"
	"pep/testbed/browser"
	"pep/testbed/corpus"
	"pep/testbed/report"
)

// External describes a testbed the runner did not build (the compose
// testbed of deploy/docker-compose.yml): the runner's host is the mobile
// node, so Chromium runs in the runner's own network namespace (no ip netns
// exec), and the gateway and the link emulator are reached over a control
// network that does not cross the emulated radio link.
type External struct {
	// GWAdmin is pepd's admin API base URL (http://HOST:PORT); the runner
	// switches modes with PUT /mode (internal/admin).
	GWAdmin string
	// LinkMetrics is the link emulator's Prometheus endpoint
	// (`pepnetem run -metrics`, netem.NewCollector), read before and after
	// every page.
	LinkMetrics string
	// Hook is the request file of the gateway's hook
	// (deploy/docker/entrypoint.sh): the runner writes "SEQ COMMAND" to it
	// and waits for "SEQ ok" in Hook+".done". Commands: "steering off"
	// (direct: the gateway's ruleset removed, no appliance on the path),
	// "steering on" (the ruleset back, DNS guard armed), "squid cold"
	// (Squid restarted on an empty cache). "" means no hook: direct mode
	// cannot run and Squid's cache stays warm across sessions (recorded).
	Hook string
	// HookTimeout bounds one hook command; zero means 60 s.
	HookTimeout time.Duration
}

// RunExternal runs the experiment c describes on the external testbed x
// and returns the results like Run: one record per page, Out/results.json
// written after every session. c.Profiles must hold exactly one profile,
// the one the link emulator runs (checked against the metrics' profile
// label); c.Wired, c.Backend, c.Parallel and c.SplitModes do not apply.
func RunExternal(ctx context.Context, c Config, x External, log *slog.Logger, progress io.Writer) (*report.Results, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(c.Profiles) != 1 {
		return nil, fmt.Errorf("run: external topology: profile: %q, want exactly the one the link emulator runs", strings.Join(c.Profiles, ","))
	}
	if x.GWAdmin == "" || x.LinkMetrics == "" {
		return nil, errors.New("run: external topology needs -gw-admin and -link-metrics")
	}
	if x.Hook == "" && contains(c.Modes, "direct") {
		return nil, errors.New("run: external topology: mode direct needs the gateway hook (-gw-hook) to remove the steering rules")
	}
	if x.HookTimeout == 0 {
		x.HookTimeout = time.Minute
	}
	log.Info("testbed configuration (external topology)", "config", c, "gw_admin", x.GWAdmin, "link_metrics", x.LinkMetrics, "hook", x.Hook)
	corp, err := corpus.Open(c.Corpus)
	if err != nil {
		return nil, err
	}
	if corp, err = corp.SelectSpec(c.Pages); err != nil {
		return nil, err
	}
	plan, err := corpus.PlanFor(corp, corpus.DefaultPrefix)
	if err != nil {
		return nil, err
	}
	prof, err := netem.LoadProfile(c.Profiles[0])
	if err != nil {
		return nil, err
	}
	scr := &Scraper{URL: x.LinkMetrics, Client: &http.Client{Timeout: 5 * time.Second}}
	first, err := scr.Scrape(ctx)
	if err != nil {
		return nil, err
	}
	if first.Profile != prof.Name {
		return nil, fmt.Errorf("run: external topology: the link emulator runs profile %q, not %q", first.Profile, prof.Name)
	}
	// -cache warm (-warm) keeps the gateway's cache between sessions; a
	// mix of cold and warm modes cannot be had here (no discarded pass).
	if slices.ContainsFunc(c.Modes, IsWarm) {
		if slices.ContainsFunc(c.Modes, func(m string) bool { return NeedsPEP(m) && !IsWarm(m) }) {
			return nil, fmt.Errorf("run: external topology: cold and %s modes in one run are not supported; use -cache warm (-warm) alone", WarmSuffix)
		}
		c.Warm = true
	}
	gw := &gateway{admin: strings.TrimRight(x.GWAdmin, "/"), hook: x.Hook, timeout: x.HookTimeout, log: log,
		client: &http.Client{Timeout: 5 * time.Second}}

	res := &report.Results{Config: report.RunConfig{
		Corpus: c.Corpus, Modes: c.Modes, Runs: c.Runs, Resolver: string(c.Resolver), HTTPSRR: c.HTTPSRR, Unpartitioned: c.Unpartitioned,
		DisableFeatures: c.DisableFeatures, Warm: c.Warm, Backend: "external: " + x.LinkMetrics,
		VIP: "192.0.2.12", Origins: plan.Prefix.String(), Started: time.Now(), Command: c.Command, PageTimeout: c.PageTimeout.String(),
		SquidCache: "cold: Squid restarted on an empty cache folder by the gateway hook before every (mode, run) session",
		Parallel:   1, Settle: c.Settle.String(), SettleMax: c.SettleMax.String(),
	}}
	switch {
	case c.Warm:
		res.Config.SquidCache = "warm: Squid's cache kept from the earlier sessions (-warm)"
	case x.Hook == "":
		res.Config.Warm = true
		res.Config.SquidCache = "warm: no gateway hook, so Squid's cache was kept from the earlier sessions"
	}
	for _, p := range corp.Pages {
		res.Config.Pages = append(res.Config.Pages, p.Name)
	}
	res.Config.Profiles = []report.ProfileInfo{{Name: prof.Name, RTTms: ms(prof.RTT()), DownKbit: float64(prof.Down.Rate) / 1000,
		UpKbit: float64(prof.Up.Rate) / 1000, Description: prof.Description, Exact: prof.String()}}

	bar := NewProgress(c.Runs*len(c.Modes)*len(corp.Pages), progress)
	work, err := os.MkdirTemp("", "pep-testbed-ext-")
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	defer os.RemoveAll(work)
	var runErr error
sessions:
	for run := 1; run <= c.Runs; run++ {
		for _, m := range c.Modes {
			if runErr = ctx.Err(); runErr != nil {
				break sessions
			}
			recs, ua, err := externalSession(ctx, c, gw, scr, prof.Name, plan, corp, m, run, work, res.Config.Warm, log, bar)
			res.Records = append(res.Records, recs...)
			if res.Config.Browser == "" {
				res.Config.Browser = ua
			}
			res.Config.Finished = time.Now()
			if werr := res.Write(filepath.Join(c.Out, "results.json")); werr != nil && err == nil {
				err = werr
			}
			if err != nil {
				runErr = fmt.Errorf("run: %s, %s, run %d: %w", prof.Name, m, run, err)
				break sessions
			}
		}
	}
	bar.Finish()
	// Leave the gateway as a subscriber would find it: steered, mode off.
	if x.Hook != "" {
		if err := gw.do(context.WithoutCancel(ctx), "steering on"); err != nil {
			log.Warn("restoring the gateway's steering", "err", err)
		}
	}
	sortRecords(res.Records, []string{prof.Name})
	res.Config.Finished = time.Now()
	if err := res.Write(filepath.Join(c.Out, "results.json")); err != nil {
		return res, errors.Join(runErr, err)
	}
	return res, runErr
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// externalSession puts the gateway in mode m and loads every page in a
// fresh browser, reading the link's counters around each page.
func externalSession(ctx context.Context, c Config, gw *gateway, scr *Scraper, profile string, plan *corpus.Plan, corp *corpus.Corpus,
	m string, run int, work string, warm bool, log *slog.Logger, bar *Progress) ([]report.Record, string, error) {
	if err := gw.setMode(ctx, m); err != nil {
		return nil, "", err
	}
	if NeedsPEP(m) && !warm {
		if err := gw.do(ctx, "squid cold"); err != nil {
			return nil, "", err
		}
	}
	s, err := browser.NewSession(ctx, browser.Options{
		ExecPath: c.Chromium, Resolver: c.Resolver, PageTimeout: c.PageTimeout, Settle: c.Settle, SettleMax: c.SettleMax,
		IgnoreCertErrors: true, HTTPSRR: c.HTTPSRR, Unpartitioned: c.Unpartitioned, DisableFeatures: c.DisableFeatures,
		ProfileDir: work, HAR: c.HAR, Log: log.With("mode", m, "run", run),
	})
	if err != nil {
		return nil, "", err
	}
	defer s.Close()
	vip := netip.MustParseAddr("192.0.2.12")
	var recs []report.Record
	for seq, pg := range corp.Pages {
		bar.Describe(fmt.Sprintf("%s %s run %d %s", profile, m, run, pg.Name))
		before, err := scr.Scrape(ctx)
		if err != nil {
			return recs, s.UserAgent(), err
		}
		p, err := s.Load(ctx, pg.URL)
		if err != nil {
			return recs, s.UserAgent(), err
		}
		after, err := scr.Scrape(ctx)
		if err != nil {
			return recs, s.UserAgent(), err
		}
		lc := after.Counters.Sub(before.Counters)
		r := report.Record{
			Mode: m, Profile: profile, Run: run, Page: pg.Name, URL: pg.URL, Seq: seq,
			Loaded: p.Loaded, Error: p.Err, PLTms: ms(p.PLT), DCLms: ms(p.DCL), TTFBms: ms(p.TTFB), FCPms: ms(p.FCP), LCPms: ms(p.LCP),
			Bytes: p.Bytes, Requests: p.Requests, Failed: p.Failed, HTTPErrors: p.HTTPErrors,
			DocHosts: len(p.DocHosts), Hosts: len(p.Hosts),
			BrowserConns: p.Conns, BrowserVIPConns: p.ConnsByIP[vip.String()], BrowserConnsReused: p.ConnsReused,
			SYNCount: int(lc.Up.SYNs), DNSQueries: int(lc.Up.DNSQueries), DNSRepeats: int(lc.Up.DNSRepeats),
			LinkUpBytes: int64(lc.Up.Bytes), LinkDnBytes: int64(lc.Down.Bytes), LinkDrops: int(lc.Up.Drops + lc.Down.Drops),
			Resolver: string(c.Resolver), Warm: warm, WallMs: ms(p.Wall),
		}
		if r.HAR, err = saveHAR(c.Out, profile, run, m, seq, pg.Name, p); err != nil {
			return recs, s.UserAgent(), err
		}
		// Destinations: only when the emulator exports SYNs by destination.
		if len(lc.Up.ConnsByDst) > 0 {
			r.ConnsByDst = map[string]int{}
			for a, n := range lc.Up.ConnsByDst {
				r.ConnsByDst[a.String()] = int(n)
				switch {
				case a == vip:
					r.VIPConns += int(n)
				case plan.Prefix.Contains(a):
					r.OriginConns += int(n)
				default:
					r.OtherConns += int(n)
				}
			}
		}
		recs = append(recs, r)
		bar.Add(1)
	}
	return recs, s.UserAgent(), nil
}

// gateway drives the compose gateway: pepd's admin API and the hook.
type gateway struct {
	admin   string
	hook    string
	timeout time.Duration
	client  *http.Client
	log     *slog.Logger
	seq     int
}

// setMode puts the gateway in mode m: for direct, the steering rules
// removed (pepd and Squid see no traffic); otherwise the rules in place and
// pepd switched with PUT /mode, checked with GET /mode.
func (g *gateway) setMode(ctx context.Context, m string) error {
	if !NeedsPEP(m) {
		return g.do(ctx, "steering off")
	}
	if g.hook != "" {
		if err := g.do(ctx, "steering on"); err != nil {
			return err
		}
	}
	if _, err := g.request(ctx, http.MethodPut, m); err != nil {
		return fmt.Errorf("run: mode %s: %w", m, err)
	}
	got, err := g.request(ctx, http.MethodGet, "")
	if err != nil {
		return fmt.Errorf("run: after mode %s: %w", m, err)
	}
	if strings.TrimSpace(got) != m {
		return fmt.Errorf("run: mode %s: pepd says %q", m, strings.TrimSpace(got))
	}
	g.log.Info("mode set", "mode", m)
	return nil
}

// request sends one request to pepd's admin API /mode and returns the body
// of a 200 answer.
func (g *gateway) request(ctx context.Context, method, body string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, method, g.admin+"/mode", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "text/plain")
	resp, err := g.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s /mode: %s: %s", method, resp.Status, strings.TrimSpace(string(got)))
	}
	return string(got), nil
}

// do runs one hook command on the gateway: "SEQ COMMAND" written to the
// request file (write and rename), then Hook.done polled every 50 ms until
// it starts with "SEQ ": "SEQ ok" is success, anything else the gateway's
// error.
func (g *gateway) do(ctx context.Context, cmd string) error {
	g.seq++
	req := fmt.Sprintf("%d-%d %s", os.Getpid(), g.seq, cmd)
	tmp := g.hook + ".tmp"
	if err := os.WriteFile(tmp, []byte(req+"\n"), 0o644); err != nil {
		return fmt.Errorf("run: gateway hook: %w", err)
	}
	if err := os.Rename(tmp, g.hook); err != nil {
		return fmt.Errorf("run: gateway hook: %w", err)
	}
	id, _, _ := strings.Cut(req, " ")
	deadline := time.Now().Add(g.timeout)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		b, _ := os.ReadFile(g.hook + ".done")
		if got, ok := strings.CutPrefix(strings.TrimSpace(string(b)), id+" "); ok {
			if got != "ok" {
				return fmt.Errorf("run: gateway hook %q: %s", cmd, got)
			}
			g.log.Info("gateway hook", "command", cmd)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run: gateway hook %q: no answer in %s (is the gateway's hook running? %s)", cmd, g.timeout, g.hook)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

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
