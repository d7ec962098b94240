// Package run orchestrates a testbed experiment (the seed paper's §4): for
// each link profile it builds a testbed (topo), emulates the radio link
// (netem), serves the corpus (origin, dnsmasq), runs Squid and pepd in gw,
// and for each run and mode loads the page list in a fresh headless
// Chromium in mn, one record per page (report.Record), reading the radio
// link's counters around each page. Everything it builds is removed on
// return, whatever the outcome, and on interrupt (the caller's context).
package run

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"pep/netem"
	"pep/testbed/browser"
	"pep/testbed/corpus"
	"pep/testbed/origin"
	"pep/testbed/report"
	"pep/testbed/topo"
)

// Run runs the experiment c describes, writes Out/results.json after every
// session (so an interrupted run keeps what it measured) and returns the
// results. progress receives a progress bar (nil: none). Errors of the
// setup end the run; a page that does not load is a record with
// Loaded false, not an error.
func Run(ctx context.Context, c Config, log *slog.Logger, progress io.Writer) (*report.Results, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	log.Info("testbed configuration", "config", c)
	if err := os.MkdirAll(filepath.Join(c.Out, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
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
	imported := corp.ImportReport()
	for _, l := range imported {
		log.Info("corpus import", "line", l)
	}
	var profs []netem.Profile
	for _, name := range c.Profiles {
		p, err := netem.LoadProfile(name)
		if err != nil {
			return nil, err
		}
		log.Info("profile", "profile", p)
		profs = append(profs, p)
	}
	var wired *netem.Profile
	if c.Wired != "" && c.Wired != "none" {
		w, err := netem.LoadProfile(c.Wired)
		if err != nil {
			return nil, err
		}
		log.Info("wired profile", "profile", w)
		wired = &w
	}

	res := &report.Results{Config: report.RunConfig{
		Corpus: c.Corpus, Modes: c.Modes, Runs: c.Runs, Resolver: string(c.Resolver), HTTPSRR: c.HTTPSRR, Unpartitioned: c.Unpartitioned, DisableFeatures: c.DisableFeatures, DNSOrigins: c.DNSOrigins, PepdRadio: c.PepdRadio, OptDeadline: durString(c.OptDeadline), Warm: c.Warm,
		Backend: c.Backend, VIP: cmp.Or(c.VIP, topo.Default().VIP).String(), Origins: plan.Prefix.String(), Started: time.Now(), Import: imported,
		Command: c.Command, PageTimeout: c.PageTimeout.String(),
		SquidCache: "cold: Squid restarted on an empty cache folder before every (mode, run) session",
		Parallel:   c.Parallel, SplitModes: c.SplitModes, Settle: c.Settle.String(), SettleMax: c.SettleMax.String(),
		OriginCompress: string(originCompress(c.OriginCompress)),
		ModeOrder:      "rotated: run r's sessions start with mode (r-1) mod the number of modes",
	}}
	warmFill := "Squid restarted empty, then filled by a discarded pass over the pages in the same mode, before every session"
	if c.Warm {
		res.Config.SquidCache = "warm: " + warmFill
	} else if slices.ContainsFunc(c.Modes, IsWarm) {
		res.Config.SquidCache = "cold in modes without " + WarmSuffix + ": Squid restarted on an empty cache folder before every (mode, run) session; warm in the " + WarmSuffix + " modes: " + warmFill
	}
	res.Config.StockChromium = c.StockChromium
	res.Config.Resolver = c.resolverLabel()
	bo := browser.Options{Resolver: c.Resolver, HTTPSRR: c.HTTPSRR, Unpartitioned: c.Unpartitioned, DisableFeatures: c.DisableFeatures, IgnoreCertErrors: true}
	for _, ch := range browser.Changes(bo) {
		if !c.StockChromium || ch.Stock {
			res.Config.ChromiumChanges = append(res.Config.ChromiumChanges, report.ChromiumChange{What: ch.String(), Why: ch.Why, KeptInStock: ch.Stock})
		}
	}
	if wired != nil {
		res.Config.Wired = &report.ProfileInfo{Name: wired.Name, RTTms: ms(wired.RTT()), DownKbit: float64(wired.Down.Rate) / 1000, UpKbit: float64(wired.Up.Rate) / 1000,
			Description: wired.Description, Exact: wired.String(), Source: wired.Source}
	}
	for _, p := range corp.Pages {
		res.Config.Pages = append(res.Config.Pages, p.Name)
	}
	for _, p := range profs {
		res.Config.Profiles = append(res.Config.Profiles, report.ProfileInfo{
			Name: p.Name, RTTms: ms(p.RTT()), DownKbit: float64(p.Down.Rate) / 1000, UpKbit: float64(p.Up.Rate) / 1000,
			Description: p.Description, Exact: p.String(),
		})
	}

	total := len(profs) * c.Runs * len(c.Modes) * len(corp.Pages)
	bar := NewProgress(total, progress)
	var mu sync.Mutex // guards res
	save := func(recs []report.Record, backend, ua string, cc map[string]string) error {
		mu.Lock()
		defer mu.Unlock()
		res.Config.Backend = backend // the same for every profile
		if res.Config.CC == nil {
			res.Config.CC = cc
		}
		if res.Config.Browser == "" {
			res.Config.Browser = ua
		}
		res.Records = append(res.Records, recs...)
		res.Config.Finished = time.Now()
		return res.Write(filepath.Join(c.Out, "results.json"))
	}
	step := func(desc string) {
		bar.Describe(desc)
		bar.Add(1)
	}

	// One testbed per (profile, run), or per (profile, run, mode) with
	// SplitModes: units run c.Parallel at a time.
	type unit struct {
		prof  netem.Profile
		run   int
		modes []string
	}
	var units []unit
	for run := 1; run <= c.Runs; run++ {
		for _, p := range profs {
			if c.SplitModes {
				for _, m := range c.Modes {
					units = append(units, unit{p, run, []string{m}})
				}
			} else {
				units = append(units, unit{p, run, c.Modes})
			}
		}
	}
	sem := make(chan struct{}, c.Parallel)
	var wg sync.WaitGroup
	errs := make([]error, len(units))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, u := range units {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				return
			}
			errs[i] = runUnit(ctx, c, u.prof, u.run, u.modes, wired, corp, plan, log, save, step)
			if errs[i] != nil && ctx.Err() == nil {
				log.Error("testbed failed, stopping the others", "profile", u.prof.Name, "run", u.run, "err", errs[i])
				cancel() // one broken testbed ends the experiment
			}
		}()
	}
	wg.Wait()
	bar.Finish()
	res.Config.Finished = time.Now()
	var names []string
	for _, p := range profs {
		names = append(names, p.Name)
	}
	sortRecords(res.Records, names)
	if err := res.Write(filepath.Join(c.Out, "results.json")); err != nil {
		return res, err
	}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	return res, ctx.Err()
}

// vipProto is the protocol most responses from addr came over, by the
// browser's count per "address protocol" (browser.Page.Protocols).
func vipProto(protos map[string]int, addr string) string {
	best, n := "", 0
	for k, c := range protos {
		a, proto, _ := strings.Cut(k, " ")
		if a == addr && (c > n || c == n && proto < best) {
			best, n = proto, c
		}
	}
	return best
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// runUnit builds one testbed for prof and runs the sessions of one run in
// modes on it, in order.
func runUnit(ctx context.Context, c Config, prof netem.Profile, run int, modes []string, wired *netem.Profile, corp *corpus.Corpus, plan *corpus.Plan,
	log *slog.Logger, save func(recs []report.Record, backend, ua string, cc map[string]string) error, step func(string)) error {
	logs := filepath.Join(c.Out, "logs", prof.Name, fmt.Sprintf("run%d", run))
	if c.SplitModes {
		logs = filepath.Join(logs, modes[0])
	}
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	needPEP := slices.ContainsFunc(modes, NeedsPEP)
	bed, err := NewBed(ctx, c, BedOptions{Profile: prof, Wired: wired, Corpus: corp, Plan: plan, NeedPEP: needPEP, Logs: logs},
		log.With("run", run))
	if err != nil {
		return err
	}
	defer bed.Close()
	cc := map[string]string{}
	for _, r := range bed.Topo.Config.CCs() {
		got, err := topo.ReadCC(r.NS)
		if err != nil {
			return err
		}
		if got != r.CC {
			return fmt.Errorf("run: %s namespace runs %s congestion control, want %s", r.Role, got, r.CC)
		}
		cc[r.Role] = got
	}
	for _, m := range RotateModes(modes, run) {
		if err := ctx.Err(); err != nil {
			return err
		}
		recs, ua, err := session(ctx, c, bed, m, run, corp, step)
		if serr := save(recs, bed.Link.Backend().String(), ua, cc); serr != nil && err == nil {
			err = serr
		}
		if err != nil {
			return fmt.Errorf("run: %s, %s, run %d: %w", prof.Name, m, run, err)
		}
	}
	return nil
}

// RotateModes returns the session order of run (1-based): modes rotated
// so that run r starts with modes[(r-1) mod len(modes)], and no mode always
// goes first (a cold machine, a cold page cache, a fresh link favour or
// handicap the first session).
func RotateModes(modes []string, run int) []string {
	if len(modes) == 0 {
		return nil
	}
	k := (run - 1) % len(modes)
	if k < 0 {
		k += len(modes)
	}
	return append(slices.Clone(modes[k:]), modes[:k]...)
}

// session is one browser loading every page in order in one mode.
func session(ctx context.Context, c Config, bed *Bed, m string, run int, corp *corpus.Corpus, step func(string)) ([]report.Record, string, error) {
	if err := bed.SetMode(ctx, m); err != nil {
		return nil, "", err
	}
	bopts := browser.Options{
		NS: bed.Topo.Config.MNNS(), ExecPath: c.Chromium, Resolver: c.Resolver,
		PageTimeout: c.PageTimeout, Settle: c.Settle, SettleMax: c.SettleMax, IgnoreCertErrors: true, HTTPSRR: c.HTTPSRR, Unpartitioned: c.Unpartitioned,
		DisableFeatures: c.DisableFeatures, Stock: c.StockChromium, ProfileDir: bed.work, Log: bed.log.With("mode", m, "run", run),
	}

	warm := NeedsPEP(m) && (c.Warm || IsWarm(m))
	scheme, shards := Scheme(m)
	if scheme == "https" {
		// The VIP's certificate is checked as a phone checks a public
		// one: both CAs in the browser's NSS store, no ignored errors.
		bopts.IgnoreCertErrors, bopts.TrustCAs = false, []string{bed.vipCA, bed.originCA}
	}
	if NeedsPEP(m) {
		if err := bed.ColdCache(ctx); err != nil {
			return nil, "", err
		}
		if HasHints(m) {
			// The teaching pass: pepd's learner emptied, a browser with
			// another profile loads every page (figures dropped), then
			// Squid is emptied again so that only what pepd learned
			// carries over (HintsSuffix).
			if err := bed.pep.resetHints(); err != nil {
				return nil, "", err
			}
			if err := warmUp(ctx, bopts, corp); err != nil {
				return nil, "", err
			}
			if err := bed.ColdCache(ctx); err != nil {
				return nil, "", err
			}
		}
		if warm {
			if err := warmUp(ctx, bopts, corp); err != nil {
				return nil, "", err
			}
		}
	}
	bopts.HAR = c.HAR
	s, err := browser.NewSession(ctx, bopts)
	if err != nil {
		return nil, "", err
	}
	defer s.Close()
	vip := bed.Topo.Config.VIP
	var recs []report.Record
	for seq, pg := range corp.Pages {
		step(fmt.Sprintf("%s %s run %d %s", bed.Profile.Name, m, run, pg.Name))
		bed.Link.ResetCounters()
		bed.Origin.ResetStats()
		p, err := s.Load(ctx, pg.URL)
		if err != nil {
			return recs, s.UserAgent(), err
		}
		lc := bed.Link.Counters()
		st := bed.Origin.Stats()
		r := report.Record{
			Mode: m, Profile: bed.Profile.Name, Run: run, Page: pg.Name, URL: pg.URL, Seq: seq,
			Loaded: p.Loaded, Error: p.Err, PLTms: ms(p.PLT), DCLms: ms(p.DCL), TTFBms: ms(p.TTFB), FCPms: ms(p.FCP), LCPms: ms(p.LCP),
			Bytes: p.Bytes, Requests: p.Requests, Failed: p.Failed, HTTPErrors: p.HTTPErrors,
			DocHosts: len(p.DocHosts), Hosts: len(p.Hosts),
			BrowserConns: p.Conns, BrowserVIPConns: p.ConnsByIP[vip.String()], BrowserConnsReused: p.ConnsReused,
			SYNCount: int(lc.Up.SYNs), DNSQueries: int(lc.Up.DNSQueries), DNSRepeats: int(lc.Up.DNSRepeats),
			LinkUpBytes: int64(lc.Up.Bytes), LinkDnBytes: int64(lc.Down.Bytes), LinkDrops: int(lc.Up.Drops + lc.Down.Drops),
			Origin404: int(st.Misses), Resolver: c.resolverLabel(), Warm: warm, WallMs: ms(p.Wall),
			ConnsByDst: map[string]int{}, Scheme: scheme, Shards: shards, VIPProto: vipProto(p.Protocols, vip.String()),
		}
		if r.HAR, err = saveHAR(c.Out, bed.Profile.Name, run, m, seq, pg.Name, p); err != nil {
			return recs, s.UserAgent(), err
		}
		for a, n := range lc.Up.ConnsByDst {
			r.ConnsByDst[a.String()] = int(n)
			switch {
			case a == vip:
				r.VIPConns += int(n)
			case bed.Plan.Prefix.Contains(a):
				r.OriginConns += int(n)
			default:
				r.OtherConns += int(n)
			}
		}
		recs = append(recs, r)
	}
	if HasHints(m) {
		bed.pep.logHints(bed.log.With("mode", m, "run", run))
	}
	return recs, s.UserAgent(), nil
}

// HARDir is the folder, relative to the run's output folder, of the HAR
// files of one session: har/PROFILE/runN/MODE (names made safe for a
// file system).
func HARDir(profile string, run int, mode string) string {
	return filepath.Join("har", safeFileName(profile), fmt.Sprintf("run%d", run), safeFileName(mode))
}

// saveHAR writes p's HAR (if any) into its session's HARDir under out and
// returns its path relative to out ("" with no HAR).
func saveHAR(out, profile string, run int, mode string, seq int, page string, p browser.Page) (string, error) {
	if p.HAR == nil {
		return "", nil
	}
	rel := filepath.Join(HARDir(profile, run, mode), fmt.Sprintf("%03d-%s.har", seq, safeFileName(page)))
	if err := os.MkdirAll(filepath.Dir(filepath.Join(out, rel)), 0o755); err != nil {
		return "", fmt.Errorf("run: %w", err)
	}
	if err := p.HAR.Write(filepath.Join(out, rel)); err != nil {
		return "", err
	}
	return filepath.ToSlash(rel), nil
}

// safeFileName keeps letters, digits and -_.+ and turns the rest into _.
func safeFileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.+", r) {
			return r
		}
		return '_'
	}, s)
}

// warmUp loads every page once in a browser of its own, whose figures are
// dropped, so that Squid's cache holds the pages when the measured session
// starts.
func warmUp(ctx context.Context, o browser.Options, corp *corpus.Corpus) error {
	s, err := browser.NewSession(ctx, o)
	if err != nil {
		return err
	}
	defer s.Close()
	for _, pg := range corp.Pages {
		if _, err := s.Load(ctx, pg.URL); err != nil {
			return err
		}
	}
	return nil
}

// sortRecords orders records by profile (in the order of profiles), run,
// mode (paper order) and page sequence, so that results.json reads like
// the sessions.
func sortRecords(recs []report.Record, profiles []string) {
	rank := map[string]int{}
	for i, m := range Modes {
		rank[m] = i
	}
	prank := map[string]int{}
	for i, p := range profiles {
		prank[p] = i
	}
	sort.SliceStable(recs, func(i, j int) bool {
		a, b := recs[i], recs[j]
		if a.Profile != b.Profile {
			return prank[a.Profile] < prank[b.Profile]
		}
		if a.Run != b.Run {
			return a.Run < b.Run
		}
		if a.Mode != b.Mode {
			ba, _ := SplitMode(a.Mode)
			bb, _ := SplitMode(b.Mode)
			if ra, rb := rank[PepdMode(ba)], rank[PepdMode(bb)]; ra != rb {
				return ra < rb
			}
			return a.Mode < b.Mode
		}
		return a.Seq < b.Seq
	})
}

func originCompress(s string) origin.Compress {
	c, _ := origin.ParseCompress(s) // Validate checked it
	return c
}

// durString is d as a config value, "" for zero.
func durString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}
