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
	"slices"
	"strings"
	"time"

	"pep/testbed/browser"
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
// label); c.Wired, c.Backend, c.Parallel, c.SplitModes, c.VIP, c.CC* and
// c.OriginCompress do not apply (the testbed is not ours), and c.Pepd is
// an error (the gateway's pepd reads its own configuration).
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
	if x.Hook == "" && slices.Contains(c.Modes, "direct") {
		return nil, errors.New("run: external topology: mode direct needs the gateway hook (-gw-hook) to remove the steering rules")
	}
	if len(c.Pepd) > 0 {
		return nil, fmt.Errorf("run: external topology: -pepd %s: the gateway's pepd reads its own configuration; set it there", c.Pepd[0])
	}
	if len(c.Variants) > 0 {
		return nil, errors.New("run: external topology: -variant: the gateway's pepd reads its own configuration; set it there")
	}
	// -cache warm (-warm) keeps the gateway's cache between sessions; a
	// mix of cold and warm modes cannot be had here (no discarded pass).
	if slices.ContainsFunc(c.Modes, IsWarm) {
		if slices.ContainsFunc(c.Modes, func(m string) bool { return NeedsPEP(m) && !IsWarm(m) }) {
			return nil, fmt.Errorf("run: external topology: cold and %s modes in one run are not supported; use -cache warm (-warm) alone", WarmSuffix)
		}
		c.Warm = true
	}
	if x.HookTimeout == 0 {
		x.HookTimeout = time.Minute
	}
	c.Wired = "" // the external testbed's own
	log.Info("testbed configuration (external topology)", "config", c, "gw_admin", x.GWAdmin, "link_metrics", x.LinkMetrics, "hook", x.Hook)
	e, err := prepare(c, log, progress)
	if err != nil {
		return nil, err
	}
	prof := e.profs[0]
	scr := &Scraper{URL: x.LinkMetrics, Client: &http.Client{Timeout: 5 * time.Second}}
	first, err := scr.Scrape(ctx)
	if err != nil {
		return nil, err
	}
	if first.Profile != prof.Name {
		return nil, fmt.Errorf("run: external topology: the link emulator runs profile %q, not %q", first.Profile, prof.Name)
	}
	gw := &gateway{admin: strings.TrimRight(x.GWAdmin, "/"), hook: x.Hook, timeout: x.HookTimeout, log: log,
		client: &http.Client{Timeout: 5 * time.Second}}

	rc := &e.res.Config
	rc.Backend, rc.VIP, rc.Parallel, rc.SplitModes = "external: "+x.LinkMetrics, externalVIP.String(), 1, false
	rc.SquidCache = "cold: Squid restarted on an empty cache folder by the gateway hook before every (mode, run) session"
	switch {
	case c.Warm:
		rc.SquidCache = "warm: Squid's cache kept from the earlier sessions (-warm)"
	case x.Hook == "":
		rc.Warm = true
		rc.SquidCache = "warm: no gateway hook, so Squid's cache was kept from the earlier sessions"
	}
	warm := rc.Warm

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
			s := session{profile: prof.Name, run: run, mode: m, warm: warm}
			recs, ua, err := e.externalSession(ctx, gw, scr, s, work)
			serr := e.save(recs, func(rc *report.RunConfig) {
				if rc.Browser == "" {
					rc.Browser = ua
				}
			})
			if serr != nil && err == nil {
				err = serr
			}
			if err != nil {
				runErr = fmt.Errorf("run: %s, %s, run %d: %w", prof.Name, m, run, err)
				break sessions
			}
		}
	}
	// Leave the gateway as a subscriber would find it: steered, mode off.
	if x.Hook != "" {
		if err := gw.do(context.WithoutCancel(ctx), "steering on"); err != nil {
			log.Warn("restoring the gateway's steering", "err", err)
		}
	}
	return e.finish(runErr)
}

// externalVIP is the compose testbed's VIP (deploy/docker-compose.yml).
var externalVIP = netip.MustParseAddr("192.0.2.12")

// externalSession puts the gateway in s's mode and loads every page in a
// fresh browser (its profile in work), reading the link's counters around
// each page.
func (e *experiment) externalSession(ctx context.Context, gw *gateway, scr *Scraper, s session, work string) ([]report.Record, string, error) {
	if err := gw.setMode(ctx, s.mode); err != nil {
		return nil, "", err
	}
	if NeedsPEP(s.mode) && !s.warm {
		if err := gw.do(ctx, "squid cold"); err != nil {
			return nil, "", err
		}
	}
	bopts := e.browserOptions()
	bopts.ProfileDir, bopts.HAR, bopts.Log = work, e.c.HAR, s.logWith(e.log)
	b, err := browser.NewSession(ctx, bopts)
	if err != nil {
		return nil, "", err
	}
	defer b.Close()
	var recs []report.Record
	for seq, pg := range e.corp.Pages {
		e.step(s, pg)
		before, err := scr.Scrape(ctx)
		if err != nil {
			return recs, b.UserAgent(), err
		}
		p, err := b.Load(ctx, pg.URL)
		if err != nil {
			return recs, b.UserAgent(), err
		}
		after, err := scr.Scrape(ctx)
		if err != nil {
			return recs, b.UserAgent(), err
		}
		r, err := e.record(s, seq, pg, p, after.Counters.Sub(before.Counters), externalVIP)
		if err != nil {
			return recs, b.UserAgent(), err
		}
		recs = append(recs, r)
	}
	return recs, b.UserAgent(), nil
}
