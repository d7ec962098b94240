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
	"maps"
	"net/netip"
	"net/url"
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

// experiment is one experiment prepared once (prepare) and then run by
// one of the runners: in network namespaces (Run) or on a testbed built
// elsewhere (RunExternal). It holds the corpus and its address plan, the
// link profiles, the results with their header, and the progress bar.
type experiment struct {
	c     Config
	log   *slog.Logger
	corp  *corpus.Corpus
	plan  *corpus.Plan
	profs []netem.Profile
	wired *netem.Profile // nil: no wired emulation
	prep  *netem.Profile // the radio link while preparing (Config.PrepareLink); nil: the measured
	bar   *Progress

	mu  sync.Mutex // guards res
	res *report.Results

	gate  phaseGate // preparations and measured loads never at once
	pairs runPairs  // the modes of a run measure together (-split-modes)
}

// prepare validates c and makes what every runner needs from it: the
// corpus (opened, its pages selected, its import report logged) and its
// address plan, the link profiles, and the results' header
// (report.RunConfig) as far as c and these say; runners fill in what
// only they know. progress receives the bar (nil: none).
func prepare(c Config, log *slog.Logger, progress io.Writer) (*experiment, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	e := &experiment{c: c, log: log}
	corp, err := corpus.Open(c.Corpus)
	if err != nil {
		return nil, err
	}
	if e.corp, err = corp.SelectSpec(c.Pages); err != nil {
		return nil, err
	}
	if e.plan, err = corpus.PlanFor(e.corp, corpus.DefaultPrefix); err != nil {
		return nil, err
	}
	imported := e.corp.ImportReport()
	for _, l := range imported {
		log.Info("corpus import", "line", l)
	}
	for _, name := range c.Profiles {
		p, err := netem.LoadProfile(name)
		if err != nil {
			return nil, err
		}
		log.Info("profile", "profile", p)
		e.profs = append(e.profs, p)
	}
	if c.Wired != "" && c.Wired != "none" {
		w, err := netem.LoadProfile(c.Wired)
		if err != nil {
			return nil, err
		}
		log.Info("wired profile", "profile", w)
		e.wired = &w
	}
	if c.PrepareLink != "" && c.PrepareLink != SamePrepareLink {
		p, err := netem.LoadProfile(c.PrepareLink)
		if err != nil {
			return nil, fmt.Errorf("run: -prepare-link: %w", err)
		}
		e.prep = &p
	}

	rc := report.RunConfig{
		Corpus: c.Corpus, Modes: c.Modes, Runs: c.Runs, Resolver: c.resolverLabel(), HTTPSRR: c.HTTPSRR, Unpartitioned: c.Unpartitioned,
		DisableFeatures: c.DisableFeatures, Pepd: PepdStrings(c.Pepd), Variants: variantStrings(c.Variants), Warm: c.Warm, StockChromium: c.StockChromium,
		Backend: c.Backend, VIP: cmp.Or(c.VIP, topo.Default().VIP).String(), Origins: e.plan.Prefix.String(), Started: time.Now(), Import: imported,
		Command: c.Command, PageTimeout: c.PageTimeout.String(), Settle: c.Settle.String(), SettleMax: c.SettleMax.String(),
		Parallel: c.Parallel, SplitModes: c.SplitModes,
	}
	for _, ch := range browser.Changes(e.browserOptions()) {
		if !c.StockChromium || ch.Stock {
			rc.ChromiumChanges = append(rc.ChromiumChanges, report.ChromiumChange{What: ch.String(), Why: ch.Why, KeptInStock: ch.Stock})
		}
	}
	if w := e.wired; w != nil {
		rc.Wired = &report.ProfileInfo{Name: w.Name, RTTms: ms(w.RTT()), DownKbit: float64(w.Down.Rate) / 1000, UpKbit: float64(w.Up.Rate) / 1000,
			Description: w.Description, Exact: w.String(), Source: w.Source}
	}
	for _, p := range e.corp.Pages {
		rc.Pages = append(rc.Pages, p.Name)
	}
	for _, p := range e.profs {
		rc.Profiles = append(rc.Profiles, report.ProfileInfo{
			Name: p.Name, RTTms: ms(p.RTT()), DownKbit: float64(p.Down.Rate) / 1000, UpKbit: float64(p.Up.Rate) / 1000,
			Description: p.Description, Exact: p.String(),
		})
	}
	e.res = &report.Results{Config: rc}
	e.bar = NewProgress(len(e.profs)*c.Runs*len(c.Modes)*len(e.corp.Pages), progress)
	return e, nil
}

// browserOptions are the browser settings of every session of the run
// (Chromium's flags and the page load's bounds); runners add the
// namespace, the profile folder, trusted CAs and the HAR.
func (e *experiment) browserOptions() browser.Options {
	c := e.c
	return browser.Options{
		ExecPath: c.Chromium, Resolver: c.Resolver, PageTimeout: c.PageTimeout, Settle: c.Settle, SettleMax: c.SettleMax,
		IgnoreCertErrors: true, HTTPSRR: c.HTTPSRR, Unpartitioned: c.Unpartitioned, DisableFeatures: c.DisableFeatures, Stock: c.StockChromium,
	}
}

// save adds one session's records to the results, lets header fill in
// what the session learnt (nil: nothing), and writes results.json, so
// that an interrupted run keeps what it measured.
func (e *experiment) save(recs []report.Record, header func(*report.RunConfig)) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if header != nil {
		header(&e.res.Config)
	}
	e.res.Records = append(e.res.Records, recs...)
	e.res.Config.Finished = time.Now()
	return e.res.Write(filepath.Join(e.c.Out, "results.json"))
}

// finish ends the experiment: the bar closed, the records sorted as the
// sessions read, results.json written a last time. It returns the results
// and runErr joined with a write error.
func (e *experiment) finish(runErr error) (*report.Results, error) {
	e.bar.Finish()
	var names []string
	for _, p := range e.profs {
		names = append(names, p.Name)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	sortRecords(e.res.Records, names)
	e.res.Config.Finished = time.Now()
	if err := e.res.Write(filepath.Join(e.c.Out, "results.json")); err != nil {
		return e.res, errors.Join(runErr, err)
	}
	return e.res, runErr
}

// session is one browser loading every page in order in one mode: the
// (profile, run, mode) a session's records carry.
type session struct {
	profile string
	run     int
	mode    string
	warm    bool // Squid's cache was filled before it (Record.Warm)
}

// logWith is l with the session's attributes.
func (s session) logWith(l *slog.Logger) *slog.Logger {
	return l.With("mode", s.mode, "run", s.run)
}

// step shows that page pg of s starts loading.
func (e *experiment) step(s session, pg *corpus.Page) {
	e.bar.Describe(fmt.Sprintf("%s %s run %d %s", s.profile, s.mode, s.run, pg.Name))
	e.bar.Add(1)
}

// record is the report.Record of one page load of s: the browser's
// figures p, the radio link's counters lc over the load, SYNs by
// destination sorted into the VIP, the corpus's origins and the rest. Its
// HAR is saved under the output folder.
func (e *experiment) record(s session, seq int, pg *corpus.Page, p browser.Page, lc netem.Counters, vip netip.Addr) (report.Record, error) {
	r := report.Record{
		Mode: s.mode, Profile: s.profile, Run: s.run, Page: pg.Name, URL: pg.URL, Seq: seq,
		Loaded: p.Loaded, Error: p.Err, PLTms: ms(p.PLT), DCLms: ms(p.DCL), TTFBms: ms(p.TTFB), FCPms: ms(p.FCP), LCPms: ms(p.LCP), LCPURL: p.LCPURL,
		Bytes: p.Bytes, Requests: p.Requests, Failed: p.Failed, HTTPErrors: p.HTTPErrors,
		DocHosts: len(p.DocHosts), Hosts: len(p.Hosts), DocScheme: scheme(p.DocURL),
		BrowserConns: p.Conns, BrowserVIPConns: p.ConnsByIP[vip.String()], BrowserConnsReused: p.ConnsReused,
		SYNCount: int(lc.Up.SYNs), DNSQueries: int(lc.Up.DNSQueries), DNSRepeats: int(lc.Up.DNSRepeats),
		LinkUpBytes: int64(lc.Up.Bytes), LinkDnBytes: int64(lc.Down.Bytes), LinkDrops: int(lc.Up.Drops + lc.Down.Drops),
		Resolver: e.c.resolverLabel(), Warm: s.warm, WallMs: ms(p.Wall),
	}
	var err error
	if r.HAR, err = saveHAR(e.c.Out, s.profile, s.run, s.mode, seq, pg.Name, p); err != nil {
		return r, err
	}
	// Destinations: only where the link's counters have them.
	if len(lc.Up.ConnsByDst) > 0 {
		r.ConnsByDst = map[string]int{}
		for a, n := range lc.Up.ConnsByDst {
			r.ConnsByDst[a.String()] = int(n)
			switch {
			case a == vip:
				r.VIPConns += int(n)
			case e.plan.Prefix.Contains(a):
				r.OriginConns += int(n)
			default:
				r.OtherConns += int(n)
			}
		}
	}
	return r, nil
}

// Run runs the experiment c describes in network namespaces, writes
// Out/results.json after every session (so an interrupted run keeps what
// it measured) and returns the results. progress receives a progress bar
// (nil: none). Errors of the setup end the run; a page that does not load
// is a record with Loaded false, not an error.
func Run(ctx context.Context, c Config, log *slog.Logger, progress io.Writer) (*report.Results, error) {
	log.Info("testbed configuration", "config", c)
	e, err := prepare(c, log, progress)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(c.Out, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	if slices.ContainsFunc(c.Modes, NeedsPEP) || len(c.Pepd) > 0 {
		// pepd's own loader judges the -pepd settings before any testbed
		// is built; OUT/pepd.yaml records the configuration.
		if err := ValidatePepd(filepath.Join(c.Out, "pepd.yaml"), bedTopo(c, e.plan), c.Modes, c.Pepd); err != nil {
			return nil, err
		}
		// Each variant's configuration too, from OUT/pepd@NAME.yaml.
		for _, v := range slices.Sorted(maps.Keys(c.Variants)) {
			modes := slices.DeleteFunc(slices.Clone(c.Modes), func(m string) bool { _, mv := report.SplitVariant(m); return mv != v })
			if err := ValidatePepd(filepath.Join(c.Out, "pepd"+report.VariantMark+v+".yaml"), bedTopo(c, e.plan), modes, c.PepdFor(modes[0])); err != nil {
				return nil, fmt.Errorf("run: -variant %s: %w", v, err)
			}
		}
	}
	rc := &e.res.Config
	if e.prep != nil && slices.ContainsFunc(c.Modes, c.prepares) {
		rc.PrepareLink = e.prep.String()
	}
	rc.SquidCache = "cold: Squid restarted on an empty cache folder before every (mode, run) session"
	warmFill := fmt.Sprintf("Squid restarted empty, then filled by a discarded pass over the pages in the same mode, before every session (in +opt modes, passes until one defers no transform for the next miss, at most %d, each followed by a wait until the optimizer has no transform waiting or running: each pass stores what the one before deferred)", MaxWarmPasses)
	if c.Parallel > 1 {
		warmFill += "; no testbed measured a load while another ran these passes or a hints teaching pass"
	}
	if c.Warm {
		rc.SquidCache = "warm: " + warmFill
	} else if slices.ContainsFunc(c.Modes, IsWarm) {
		rc.SquidCache = "cold in modes without " + WarmSuffix + ": Squid restarted on an empty cache folder before every (mode, run) session; warm in the " + WarmSuffix + " modes: " + warmFill
	}
	rc.OriginCompress = string(originCompress(c.OriginCompress))
	rc.ModeOrder = "rotated: run r's sessions start with mode (r-1) mod the number of modes"

	// One testbed per (profile, run), or per (profile, run, mode) with
	// SplitModes: units run c.Parallel at a time.
	var units []unit
	for run := 1; run <= c.Runs; run++ {
		for _, p := range e.profs {
			if c.SplitModes {
				for _, m := range c.Modes {
					units = append(units, unit{p, run, []string{m}})
				}
			} else {
				units = append(units, unit{p, run, c.Modes})
			}
		}
	}
	if c.SplitModes && len(c.Modes) > 1 && c.Parallel >= len(c.Modes) {
		// A run's testbeds start one after the other (units are in run
		// order, taken in order below), so they hold places at once.
		e.pairs.size = len(c.Modes)
		rc.ModeOrder += "; with -split-modes the testbeds of a run measured their loads at the same time, page by page: each page load began on every testbed of the run together"
	}
	sem := make(chan struct{}, c.Parallel)
	var wg sync.WaitGroup
	errs := make([]error, len(units))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
units:
	for i, u := range units {
		// Places are taken in unit order: run r's testbeds start before
		// run r+1's.
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break units
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if ctx.Err() != nil {
				return
			}
			errs[i] = e.runUnit(ctx, u)
			if errs[i] != nil && ctx.Err() == nil {
				log.Error("testbed failed, stopping the others", "profile", u.prof.Name, "run", u.run, "err", errs[i])
				cancel() // one broken testbed ends the experiment
			}
		}()
	}
	wg.Wait()
	return e.finish(cmp.Or(errors.Join(errs...), ctx.Err()))
}

// unit is one testbed's share of a namespace run: the sessions of one run
// in modes (in RotateModes order) under one profile.
type unit struct {
	prof  netem.Profile
	run   int
	modes []string
}

// bedTopo is the topology of the run's testbeds (topo.Default with the
// plan's origins and c's VIP and congestion controls); each bed gets its
// own Prefix.
func bedTopo(c Config, plan *corpus.Plan) topo.Config {
	tc := topo.Default()
	tc.Origins = plan.Prefix
	if c.VIP.IsValid() {
		tc.VIP = c.VIP
	}
	for _, cc := range []struct {
		dst *string
		v   string
	}{{&tc.CCPhone, c.CCPhone}, {&tc.CCGW, c.CCGW}, {&tc.CCOrigin, c.CCOrigin}} {
		if cc.v != "" {
			*cc.dst = cc.v
		}
	}
	tc.GWInitCwnd = max(c.GWInitCwnd, 0) // InitCwndBDP: NewBed, by profile
	if c.GWInitCwndTLSOnly {
		tc.GWInitCwndPorts = []uint16{PepdTLSPort}
	}
	if c.GWSlowStartAfterIdle != nil {
		tc.GWSlowStartAfterIdle = *c.GWSlowStartAfterIdle
	}
	return tc
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

// runUnit builds one testbed for u and runs its sessions on it, in order.
func (e *experiment) runUnit(ctx context.Context, u unit) error {
	c := e.c
	logs := filepath.Join(c.Out, "logs", u.prof.Name, fmt.Sprintf("run%d", u.run))
	if c.SplitModes {
		logs = filepath.Join(logs, u.modes[0])
	}
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	needPEP := slices.ContainsFunc(u.modes, NeedsPEP)
	bed, err := NewBed(ctx, c, BedOptions{Profile: u.prof, Wired: e.wired, Corpus: e.corp, Plan: e.plan, NeedPEP: needPEP, Logs: logs, Modes: u.modes},
		e.log.With("run", u.run))
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
	iw, ssai, err := topo.ReadGWTCP(bed.Topo.Config)
	if err != nil {
		return err
	}
	if want := bed.Topo.Config; iw != want.GWInitCwnd || ssai != want.GWSlowStartAfterIdle {
		return fmt.Errorf("run: gateway TCP is initcwnd %d, tcp_slow_start_after_idle %d; want %d, %d", iw, ssai, want.GWInitCwnd, want.GWSlowStartAfterIdle)
	}
	gwTCP := fmt.Sprintf("initcwnd %d, tcp_slow_start_after_idle %d", iw, ssai)
	if ports := bed.Topo.Config.GWInitCwndPorts; iw > 0 && len(ports) > 0 {
		gwTCP = fmt.Sprintf("initcwnd %d from local ports %v only (pepd's TLS listener), tcp_slow_start_after_idle %d", iw, ports, ssai)
	}
	for _, m := range RotateModes(u.modes, u.run) {
		if err := ctx.Err(); err != nil {
			return err
		}
		s := session{profile: u.prof.Name, run: u.run, mode: m, warm: c.warmSession(m)}
		recs, ua, err := e.bedSession(ctx, bed, s)
		serr := e.save(recs, func(rc *report.RunConfig) {
			rc.Backend = bed.Link.Backend().String() // the same for every profile
			if rc.CC == nil {
				rc.CC = cc
			}
			if rc.GWTCP == nil {
				rc.GWTCP = map[string]string{}
			}
			rc.GWTCP[u.prof.Name] = gwTCP
			if rc.Browser == "" {
				rc.Browser = ua
			}
		})
		if serr != nil && err == nil {
			err = serr
		}
		if err != nil {
			return fmt.Errorf("run: %s, %s, run %d: %w", u.prof.Name, m, u.run, err)
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

// bedSession runs session s on bed: the bed put in s's mode, Squid
// emptied (and, for hints, pepd taught; for a warm session, Squid filled),
// then one browser loads every page in order, the link's and the origin's
// counters read around each.
func (e *experiment) bedSession(ctx context.Context, bed *Bed, s session) ([]report.Record, string, error) {
	m := s.mode
	if err := bed.SetMode(ctx, m); err != nil {
		return nil, "", err
	}
	bopts := e.browserOptions()
	bopts.NS, bopts.ProfileDir, bopts.Log = bed.Topo.Config.MNNS(), bed.work, s.logWith(bed.log)
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
		if HasHints(m) || s.warm {
			if err := e.prepareSession(ctx, bed, s, bopts); err != nil {
				return nil, "", err
			}
		}
	}
	// Measured loads run beside measured loads only (phaseGate), the
	// modes of a run together and page by page (runPairs).
	turn, waited, err := e.pairs.enterMeasure(ctx, &e.gate, s)
	if err != nil {
		return nil, "", err
	}
	defer turn.leave()
	if waited >= time.Second {
		s.logWith(bed.log).Info("measure: waited for the other testbeds' preparations", "waited", waited.Round(time.Millisecond))
	}
	bopts.HAR = e.c.HAR
	if e.c.NetLog {
		nl := filepath.Join(e.c.Out, NetLogFile(s.profile, s.run, m))
		if err := os.MkdirAll(filepath.Dir(nl), 0o755); err != nil {
			return nil, "", fmt.Errorf("run: %w", err)
		}
		bopts.NetLog = nl
	}
	b, err := browser.NewSession(ctx, bopts)
	if err != nil {
		return nil, "", err
	}
	defer b.Close()
	vip := bed.Topo.Config.VIP
	var recs []report.Record
	var tally *hintTally
	if HasHints(m) {
		if tally, err = bed.pep.startHints(); err != nil {
			return nil, "", err
		}
	}
	var opt optCounts         // the optimizer's counters before the load (+opt modes)
	var surplus surplusCounts // the surplus TLS handshakes' before the load (https VIP)
	hasTLS := scheme == "https" && NeedsPEP(m)
	_, hasOpt := SplitMode(m)
	hasOpt = hasOpt && NeedsPEP(m)
	var lockWait time.Duration // waits for the run's other testbeds, page by page
	for seq, pg := range e.corp.Pages {
		// Before the counters are reset: what arrives while a testbed
		// waits for the others is not the next page's.
		w, err := turn.page(ctx)
		if err != nil {
			return recs, b.UserAgent(), err
		}
		lockWait += w
		e.step(s, pg)
		bed.Link.ResetCounters()
		bed.Origin.ResetStats()
		if hasOpt {
			if opt, err = bed.pep.optCounts(); err != nil {
				return recs, b.UserAgent(), err
			}
		}
		if hasTLS {
			if surplus, err = bed.pep.surplusCounts(); err != nil {
				return recs, b.UserAgent(), err
			}
		}
		p, err := b.Load(ctx, pg.URL)
		if err != nil {
			return recs, b.UserAgent(), err
		}
		lc, st := bed.Link.Counters(), bed.Origin.Stats()
		r, err := e.record(s, seq, pg, p, lc, vip)
		if err != nil {
			return recs, b.UserAgent(), err
		}
		r.Origin404 = int(st.Misses)
		r.Scheme, r.Shards, r.VIPProto = scheme, shards, vipProto(p.Protocols, vip.String())
		if hasOpt {
			after, err := bed.pep.optCounts()
			if err != nil {
				return recs, b.UserAgent(), err
			}
			creditOpt(&r, opt, after)
		}
		if hasTLS {
			after, err := bed.pep.surplusCounts()
			if err != nil {
				return recs, b.UserAgent(), err
			}
			creditSurplus(&r, surplus, after)
		}
		recs = append(recs, r)
		if tally != nil {
			if err := tally.afterLoad(recs); err != nil {
				return recs, b.UserAgent(), err
			}
		}
	}
	if lockWait > 0 {
		s.logWith(bed.log).Info("measure: waited for the run's other testbeds before its pages", "waited", lockWait.Round(time.Millisecond))
	}
	if NeedsPEP(m) {
		bed.pep.saveMetrics(s.logWith(bed.log), m)
	}
	if bopts.NetLog != "" {
		b.Close() // Chromium's net log is whole once it exits
		ss, err := sessionSockets(bopts.NetLog, s, vip, len(recs))
		if err != nil {
			return recs, b.UserAgent(), err
		}
		e.mu.Lock()
		e.res.Sockets = append(e.res.Sockets, ss)
		e.mu.Unlock()
	}
	if tally != nil {
		bed.pep.logHints(s.logWith(bed.log))
		if err := tally.endSession(recs); err != nil {
			return recs, b.UserAgent(), err
		}
	}
	return recs, b.UserAgent(), nil
}

// prepareSession runs what session s needs on bed before it measures,
// while no other testbed of the campaign measures (phaseGate): for hints,
// the teaching pass; for a warm session, the passes that fill Squid and
// the waits for the optimizer behind them. Squid is already empty.
func (e *experiment) prepareSession(ctx context.Context, bed *Bed, s session, bopts browser.Options) (err error) {
	m := s.mode
	leave, waited, err := e.gate.enter(ctx, phasePrepare)
	if err != nil {
		return err
	}
	defer leave()
	if waited >= time.Second {
		s.logWith(bed.log).Info("prepare: waited for the other testbeds' measured loads", "waited", waited.Round(time.Millisecond))
	}
	if e.prep != nil {
		// Other subscribers fill the cache and teach pepd, over their
		// own links: the passes go over e.prep, the measured loads over
		// bed.Profile again.
		switch perr := bed.Link.SetProfile(*e.prep); {
		case errors.Is(perr, netem.ErrProfileFixed):
			s.logWith(bed.log).Warn("prepare: the radio link keeps the measured profile (tc backend)", "prepare_link", e.prep.Name)
			e.mu.Lock()
			e.res.Config.PrepareLink = ""
			e.mu.Unlock()
		case perr != nil:
			return perr
		default:
			defer func() {
				if rerr := bed.Link.SetProfile(bed.Profile); rerr != nil && err == nil {
					err = rerr
				}
			}()
		}
	}
	if HasHints(m) {
		// The teaching pass: pepd's learner emptied, a browser with
		// another profile loads every page (figures dropped), then
		// Squid is emptied again so that only what pepd learned
		// carries over (HintsSuffix).
		if err := bed.pep.resetHints(); err != nil {
			return err
		}
		if err := warmUp(ctx, bopts, e.corp); err != nil {
			return err
		}
		if err := bed.ColdCache(ctx); err != nil {
			return err
		}
	}
	if s.warm {
		if _, opt := SplitMode(m); !opt {
			return warmUp(ctx, bopts, e.corp)
		}
		// A pass stores what the optimizer transformed within its
		// deadline (or finished for an earlier pass); what it
		// deferred was served unstored and transformed behind the
		// response. Once those transforms end, the next pass (another
		// subscriber) stores them; the passes end with one that
		// deferred nothing: the cache a popular page has.
		// Nothing is served between one pass's end and the next's
		// start, so one read of the counters ends a pass and begins
		// the next.
		before, err := bed.pep.optCounts()
		if err != nil {
			return err
		}
		for pass := 1; ; pass++ {
			if err := warmUp(ctx, bopts, e.corp); err != nil {
				return err
			}
			after, err := bed.pep.optCounts()
			if err != nil {
				return err
			}
			waited, err := bed.pep.waitOptIdle(ctx, e.c.optIdleMax())
			if err != nil {
				return err
			}
			deferred := after.deferred() - before.deferred()
			before = after
			s.logWith(bed.log).Info("warm: the optimizer finished the warm-up's transforms", "pass", pass, "deferred", deferred, "waited", waited.Round(time.Millisecond))
			if deferred == 0 || pass == MaxWarmPasses {
				break
			}
		}
	}
	return nil
}

// MaxWarmPasses bounds the warm-up passes of a warm session of a +opt
// mode: passes go on while the one before deferred transforms for the
// next miss (prepareSession). With WebP alone the optimizer is idle 7 ms
// after the second pass over tp5n's 100 pages; with AVIF it still worked
// 4 min (session 34) on searches a third pass stores.
const MaxWarmPasses = 4

// HARDir is the folder, relative to the run's output folder, of the HAR
// files of one session: har/PROFILE/runN/MODE (names made safe for a
// file system).
func HARDir(profile string, run int, mode string) string {
	return filepath.Join("har", safeFileName(profile), fmt.Sprintf("run%d", run), safeFileName(mode))
}

// sessionSockets counts the TCP sockets in the net log at path of session
// s (pages loads), to the VIP and to the rest (report.SessionSockets).
func sessionSockets(path string, s session, vip netip.Addr, pages int) (report.SessionSockets, error) {
	conns, err := browser.NetLogConns(path)
	if err != nil {
		return report.SessionSockets{}, err
	}
	ss := report.SessionSockets{Profile: s.profile, Run: s.run, Mode: s.mode, Pages: pages}
	for _, c := range conns {
		if c.Proto != "tcp" {
			continue
		}
		n := &ss.Other
		if c.Addr.Addr() == vip {
			n = &ss.VIP
		}
		n.Sockets++
		if c.Used {
			n.Used++
		}
		if c.TLSStarted {
			n.TLS++
			if !c.Used {
				n.TLSUnused++
			}
		}
		if c.TLSDone {
			n.TLSDone++
		}
	}
	return ss, nil
}

// NetLogFile is the file, relative to the run's output folder, of the
// net log of one measured session (Config.NetLog):
// netlog/PROFILE/runN/MODE.json (names made safe for a file system).
func NetLogFile(profile string, run int, mode string) string {
	return filepath.Join("netlog", safeFileName(profile), fmt.Sprintf("run%d", run), safeFileName(mode)+".json")
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

// scheme is the scheme of a URL, lower case ("http", "https"); "" when
// it has none or does not parse.
func scheme(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	return u.Scheme
}
