package run

import (
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"pep/netem"
	"pep/testbed/browser"
	"pep/testbed/origin"
	"pep/testbed/report"

	"go.yaml.in/yaml/v3"
)

// Modes the runner knows, in the seed paper's order (direct is its NULL).
// Each mode but direct also runs with pepd's optimizer on, as the mode
// name with OptSuffix ("url+opt"): the optimizer is orthogonal to the
// mode (internal/optimize).
var Modes = []string{"direct", "off", "dns", "url"}

// OptSuffix marks a mode run with the optimizer on.
const OptSuffix = "+opt"

// WarmSuffix marks a mode whose sessions find Squid's cache filled by a
// discarded pass over the pages in the same mode ("url+opt+warm"; with
// +opt, passes until one defers nothing for the next miss, each followed
// by a wait until the optimizer is idle: each stores what the one before
// deferred; at most MaxWarmPasses); it comes last.
const WarmSuffix = "+warm"

// HTTPSPrefix starts the name of url mode over the VIP's HTTPS origin
// (issue 25): "url-https-k3" is url mode with pepd's https.urls on and
// https.shards 3 (k HTTP/2 connections), "url-https-k1+opt" with the
// optimizer. Plain "url" stays http://VIP (the paper's url mode).
const HTTPSPrefix = "url-https-k"

// HTTPSMode reports whether base (a mode without OptSuffix) is url mode
// over the VIP's HTTPS origin, and its k (1..16).
func HTTPSMode(base string) (k int, ok bool) {
	n, found := strings.CutPrefix(base, HTTPSPrefix)
	if !found {
		return 0, false
	}
	k, err := strconv.Atoi(n)
	if err != nil || k < 1 || k > 16 || strconv.Itoa(k) != n {
		return 0, false
	}
	return k, true
}

// PepdMode is pepd's mode for a testbed mode without OptSuffix: "url"
// for the url-https-kN modes, else base itself.
func PepdMode(base string) string {
	if _, ok := HTTPSMode(base); ok {
		return "url"
	}
	return base
}

// Scheme returns the scheme and k of the VIP URLs a mode's pages get:
// https and k for url-https-kN, http and 1 for url, "" and 0 for the
// modes that rewrite nothing.
func Scheme(m string) (scheme string, k int) {
	base, _ := SplitMode(m)
	if k, ok := HTTPSMode(base); ok {
		return "https", k
	}
	if base == "url" {
		return "http", 1
	}
	return "", 0
}

// anyHTTPS reports whether modes has a url-https-kN mode.
func anyHTTPS(modes []string) bool {
	return slices.ContainsFunc(modes, func(m string) bool { s, _ := Scheme(m); return s == "https" })
}

// HintsSuffix marks a mode run with pepd's dependency hints on
// (internal/hints): "url+hints", "url+opt+hints+warm". Its sessions start
// with pepd's learner emptied and a teaching pass: a browser with another
// profile, whose figures are dropped, loads every page; Squid is then
// emptied again (unless the mode is warm), so that the measured session
// differs from the mode without hints only by what pepd learned.
const HintsSuffix = "+hints"

// SplitMode returns the pepd mode of a testbed mode and whether the
// optimizer is on: "url+opt", "url+opt+hints", "url+opt+warm" and
// "url+opt@avif" are ("url", true).
func SplitMode(m string) (base string, opt bool) {
	m, _ = report.SplitVariant(m)
	base, opt = strings.CutSuffix(strings.TrimSuffix(strings.TrimSuffix(m, WarmSuffix), HintsSuffix), OptSuffix)
	return base, opt
}

// HasHints reports whether mode m runs with pepd's hints on (HintsSuffix),
// with or without a variant tag (report.VariantMark).
func HasHints(m string) bool {
	m, _ = report.SplitVariant(m)
	return strings.HasSuffix(strings.TrimSuffix(m, WarmSuffix), HintsSuffix)
}

// WithHints expands modes for -hints: "off" keeps each mode as it is, "on"
// adds its +hints variant (direct has none), "off,on" both, in that order
// per mode. It runs after WithOptimize and before WithCache.
func WithHints(modes []string, hints []string) ([]string, error) {
	return expandModes(modes, "-hints", hints, "off", "on", HintsSuffix, func(m string) bool {
		return HasHints(m) || IsWarm(m) || !NeedsPEP(m)
	})
}

// IsWarm reports whether mode m runs on a warm cache (WarmSuffix), with
// or without a variant tag (report.VariantMark).
func IsWarm(m string) bool {
	m, _ = report.SplitVariant(m)
	return strings.HasSuffix(m, WarmSuffix)
}

// warmSession reports whether c's sessions of mode m fill Squid before
// they measure: m uses Squid and is a +warm mode or c.Warm is set.
func (c Config) warmSession(m string) bool { return NeedsPEP(m) && (c.Warm || IsWarm(m)) }

// prepares reports whether c's sessions of mode m load pages they do not
// measure (prepareSession: a warm cache's passes, the hints' teaching
// pass).
func (c Config) prepares(m string) bool { return NeedsPEP(m) && (HasHints(m) || c.warmSession(m)) }

// WithCache expands modes for -cache: "cold" keeps each mode as it is,
// "warm" adds its +warm variant (direct has none: no cache), "cold,warm"
// both, in that order per mode.
func WithCache(modes []string, cache []string) ([]string, error) {
	return expandModes(modes, "-cache", cache, "cold", "warm", WarmSuffix, func(m string) bool {
		return IsWarm(m) || !NeedsPEP(m)
	})
}

// WithOptimize expands modes for -optimize: "off" keeps each mode as it
// is, "on" adds its +opt variant (direct has none: no appliance), "off,on"
// both, in that order per mode.
func WithOptimize(modes []string, optimize []string) ([]string, error) {
	return expandModes(modes, "-optimize", optimize, "off", "on", OptSuffix, func(m string) bool {
		base, opt := SplitMode(m)
		return opt || base == "direct"
	})
}

// expandModes is the one expansion behind -optimize, -hints and -cache:
// values name plain (each mode as it is), variant (the mode + suffix) or
// both, in that order per mode; a mode for which fixed reports true is kept
// once as it is. An unknown value is an error naming flag.
func expandModes(modes []string, flag string, values []string, plain, variant, suffix string, fixed func(string) bool) ([]string, error) {
	var withPlain, withVariant bool
	for _, v := range values {
		switch v {
		case plain:
			withPlain = true
		case variant:
			withVariant = true
		default:
			return nil, fmt.Errorf("run: %s: %q is not %s or %s", flag, v, plain, variant)
		}
	}
	var out []string
	for _, m := range modes {
		if fixed(m) {
			out = append(out, m)
			continue
		}
		if withPlain {
			out = append(out, m)
		}
		if withVariant {
			out = append(out, m+suffix)
		}
	}
	return out, nil
}

// Config is one testbed run: every page of Pages in every mode, under every
// profile, Runs times. The zero value is not valid; start from Default.
type Config struct {
	// Corpus is "default", a tp5n .tar.gz or directory, or WARC input
	// (testbed/corpus.Open).
	Corpus string
	// Pages selects pages: "" (all), "N" (the first N) or a comma-separated
	// list of page names (corpus.SelectSpec).
	Pages string
	// Profiles are netem profile names or files, emulated on the radio link.
	Profiles []string
	// Wired is a netem profile for the link between gw and core: the
	// origins' distance from the gateway; "" or "none" means no emulation
	// there (a plain veth pair, origins 0 ms away). Default:
	// DefaultWired.
	Wired string
	// Modes to compare, each of Modes.
	Modes []string
	// Runs is how many times each mode loads the page list (>= 1).
	Runs int
	// Out is the output folder: results.json, report.md, plots, logs.
	Out string
	// Warm fills Squid's cache before every session: Squid restarts
	// empty, then a browser whose figures are dropped loads every page in
	// the session's mode. Without it the cache is empty at the start of
	// every (mode, run) session, except for the modes with WarmSuffix
	// (WithCache), which are warm whatever Warm says.
	Warm bool
	// PrepareLink is the netem profile (a name or file) of the radio link
	// while a testbed prepares a session without measuring it: a warm
	// cache's passes and the hints' teaching pass, the loads of other
	// subscribers, whose links are not the measured one. SamePrepareLink
	// ("same") keeps the measured profile; the tc backend always does
	// (netem.ErrProfileFixed). Default DefaultPrepareLink.
	PrepareLink string
	// Resolver is Chromium's resolver (browser.Resolver).
	Resolver browser.Resolver
	// HTTPSRR lets Chromium ask for HTTPS records beside A records
	// (browser.Options.HTTPSRR); off, DNS queries count names.
	HTTPSRR bool
	// Unpartitioned turns off Chromium's partitioning of connections and
	// host cache by top-level site (browser.Options.Unpartitioned).
	Unpartitioned bool
	// DisableFeatures are more Chromium features to turn off
	// (browser.Options.DisableFeatures).
	DisableFeatures []string
	// VIP is the appliance's address in the testbed; the zero value means
	// topo.Default's (192.0.2.12). A private one (10.0.0.12, the paper's)
	// shows what Chromium's Local Network Access checks do to url mode.
	VIP netip.Addr
	// Pepd are pepd's settings for the run (-pepd KEY=VALUE), written in
	// order over the pepd.yaml the testbed generates (PepdConfig) and
	// checked by pepd's loader before the first testbed is built
	// (ValidatePepd): any key of configs/pepd.yaml but PepdOwnedKeys.
	Pepd []PepdSetting
	// Variants are more pepd settings by variant name (-variant
	// NAME:KEY=VALUE), written after Pepd in the testbeds of the modes
	// tagged with the name ("url+opt@avif", report.VariantMark), so that
	// two pepd configurations are measured as peers in one campaign. Every
	// tag used must be defined and every variant used; modes of different
	// variants (or a variant and none) need SplitModes (one pepd per
	// testbed).
	Variants map[string][]PepdSetting
	// OriginCompress is the replay origin's content coding
	// (origin.Compress: auto, none or recorded; "" = auto).
	OriginCompress string
	// CCPhone, CCGW and CCOrigin are the TCP congestion control of the
	// phone (mn), gateway and origin (core) namespaces ("" = cubic;
	// topo.Config).
	CCPhone, CCGW, CCOrigin string
	// GWInitCwnd and GWSlowStartAfterIdle are the gateway's TCP toward the
	// radio link (topo.Config): the initial window in segments (0: the
	// kernel's 10; InitCwndBDP: BDPInitCwnd of each profile) and
	// net.ipv4.tcp_slow_start_after_idle (nil: 1, the kernel's). Default:
	// InitCwndBDP for pepd's TLS listener only, and 0, as
	// docs/operations.md ("The radio leg's TCP") and
	// deploy/sysctl/90-pep.conf set a gateway.
	GWInitCwnd           int
	GWSlowStartAfterIdle *int
	// GWInitCwndTLSOnly limits GWInitCwnd to the connections pepd's TLS
	// listener accepts (the VIP's HTTPS origin; PepdTLSPort): the plain
	// VIP's and the intercepted port 80's keep the kernel's 10 segments.
	GWInitCwndTLSOnly bool
	// PageTimeout bounds one page load; Settle is the quiet time after
	// onload and SettleMax the longest wait for it (browser.Options).
	PageTimeout, Settle, SettleMax time.Duration
	// OptIdleMax bounds each wait, in a warm session of a +opt mode, for
	// pepd's optimizer to finish the transforms a warm-up pass left
	// behind its responses (waitOptIdle); past it the session fails.
	// Zero means DefaultOptIdleMax; AVIF searches (optimize.avif) on this
	// 2-core machine take about 0.75 s of CPU per image and need more.
	OptIdleMax time.Duration
	// Backend is the link emulator backend: "auto", "tc" or "userspace".
	Backend string
	// Bin is the folder with pepd and pepctl; "" means the folder of the
	// running executable.
	Bin string
	// Chromium is the browser binary; "" means "chromium".
	Chromium string
	// Parallel is how many testbeds run at once (>= 1). Each (profile,
	// run) pair gets a testbed of its own, which runs the run's sessions of
	// every mode in turn. More than 1 shortens an experiment on link-bound
	// profiles, at the price of CPU contention between the browsers.
	Parallel int
	// SplitModes gives every (profile, run, mode) session a testbed of
	// its own, so that the modes of a run can run in parallel too.
	SplitModes bool
	// StockChromium runs the browser with stock Chromium's defaults for
	// everything that changes how a page loads (browser.Options.Stock):
	// HTTPS upgrades, QUIC, HTTPS records, the resolver; Resolver and
	// HTTPSRR do not apply.
	StockChromium bool
	// HAR saves a HAR file of every measured load (OUT/har/..., package
	// har). Off by default: about 1 kB per request (36 kB per tp5n load
	// over 3G), 60 % of a run folder (README).
	HAR bool
	// NetLog saves Chromium's net log of every measured session
	// (OUT/netlog/PROFILE/runN/MODE.json, Chromium's default capture mode:
	// no cookies, no bodies; a few MB per session): every socket the
	// browser connected, used or not, and its TLS handshakes and HTTP/2
	// sessions, which a HAR does not show. Read it with Chromium's
	// netlog viewer or browser.NetLogSockets.
	NetLog bool
	// Command is the command line, recorded in results.json.
	Command string
}

// DefaultWired is the gw-core link's default profile (netem's built-in
// profile of that name): the origins at a distance from the gateway
// (testbed/README.md, "Origins at a distance").
const DefaultWired = "origin-20ms"

// SamePrepareLink is Config.PrepareLink's value for the measured
// profile itself.
const SamePrepareLink = "same"

// DefaultPrepareLink is Config.PrepareLink's default: netem's "fast"
// profile (RTT 20 ms, 20 Mbit/s), on which a warm-up pass takes a
// fraction of a 3G one's time (testbed/README.md, session 30).
const DefaultPrepareLink = "fast"

// Default returns the default experiment: the embedded corpus under the
// seed paper's two cells, four modes, three runs.
func Default() Config {
	return Config{
		Corpus: "default", Profiles: []string{"paper-average", "paper-congested"}, Wired: DefaultWired, PrepareLink: DefaultPrepareLink,
		Modes: slices.Clone(Modes), Runs: 3, Out: "testbed-out", Resolver: browser.ResolverBuiltin,
		PageTimeout: 3 * time.Minute, Settle: 500 * time.Millisecond, SettleMax: 10 * time.Second, OptIdleMax: DefaultOptIdleMax, Backend: "auto", Parallel: 1,
		// The gateway's radio-side TCP as docs/operations.md deploys it.
		GWInitCwnd: InitCwndBDP, GWInitCwndTLSOnly: true, GWSlowStartAfterIdle: new(0),
	}
}

// Validate checks c; errors name the field and quote the bad value.
func (c Config) Validate() error {
	for _, s := range c.Pepd {
		if _, err := ParsePepdSetting(s.String()); err != nil {
			return err
		}
	}
	if _, err := origin.ParseCompress(c.OriginCompress); err != nil {
		return fmt.Errorf("run: -origin-compress: %w", err)
	}
	avail, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	for _, cc := range []struct{ flag, v string }{{"cc-phone", c.CCPhone}, {"cc-gw", c.CCGW}, {"cc-origin", c.CCOrigin}} {
		if cc.v != "" && len(avail) > 0 && !slices.Contains(strings.Fields(string(avail)), cc.v) {
			return fmt.Errorf("run: -%s %q is not one of this kernel's congestion controls (%s)", cc.flag, cc.v, strings.TrimSpace(string(avail)))
		}
	}
	if c.Corpus == "" {
		return fmt.Errorf("run: corpus: empty")
	}
	if len(c.Profiles) == 0 {
		return fmt.Errorf("run: profile: none given")
	}
	if len(c.Modes) == 0 {
		return fmt.Errorf("run: modes: none given")
	}
	if err := c.checkVariants(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, m := range c.Modes {
		base, opt := SplitMode(m)
		if !slices.Contains(Modes, PepdMode(base)) || (opt || IsWarm(m) || HasHints(m)) && base == "direct" {
			return fmt.Errorf("run: modes: %q is not one of %s or %sN (N 1..16), nor one of them but direct with %s, %s and/or %s", m, strings.Join(Modes, ", "), HTTPSPrefix, OptSuffix, HintsSuffix, WarmSuffix)
		}
		if seen[m] {
			return fmt.Errorf("run: modes: %q given twice", m)
		}
		seen[m] = true
	}
	if err := c.checkResultsDir(); err != nil {
		return err
	}
	if c.Runs < 1 {
		return fmt.Errorf("run: runs: %d, want at least 1", c.Runs)
	}
	if c.Out == "" {
		return fmt.Errorf("run: out: empty")
	}
	if _, err := browser.ParseResolver(string(c.Resolver)); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if c.PageTimeout <= 0 {
		return fmt.Errorf("run: page timeout: %s, want > 0", c.PageTimeout)
	}
	if c.Parallel < 1 {
		return fmt.Errorf("run: parallel: %d, want at least 1", c.Parallel)
	}
	return nil
}

// ResultsDirKey is pepd's setting that keeps the optimizer's finished
// transforms on disk (optimize.results_dir): given to every testbed of a
// campaign (-pepd), the later runs' warm-up passes find the searches of
// the earlier ones (testbed/README.md, "Keeping the optimizer's results
// across runs").
const ResultsDirKey = "optimize.results_dir"

// checkResultsDir refuses ResultsDirKey where it would change what is
// measured: with a +opt mode measured on a cold cache (the kept results
// would answer its misses at once), or as a relative path (pepd runs in
// the gateway's namespace, from another folder). The folder is read as
// pepd will read it: the -pepd settings written in order (setPepd: YAML
// values, a later setting winning); settings that do not make a pepd.yaml
// are pepd's loader's to report (ValidatePepd).
func (c Config) checkResultsDir() error {
	for _, m := range c.Modes {
		if !NeedsPEP(m) {
			continue
		}
		doc, err := setPepd([]byte("{}"), c.PepdFor(m))
		if err != nil {
			continue
		}
		var set struct {
			Optimize struct {
				ResultsDir string `yaml:"results_dir"`
			} `yaml:"optimize"`
		}
		if yaml.Unmarshal(doc, &set) != nil {
			continue
		}
		dir := set.Optimize.ResultsDir
		if dir == "" {
			continue
		}
		if !filepath.IsAbs(dir) {
			return fmt.Errorf("run: -pepd %s=%s (mode %q): want an absolute path", ResultsDirKey, dir, m)
		}
		if _, opt := SplitMode(m); opt && !c.warmSession(m) {
			return fmt.Errorf("run: -pepd %s=%s: mode %q measures a cold cache, whose misses the kept results would answer at once; use it with -warm or %s modes only", ResultsDirKey, dir, m, WarmSuffix)
		}
	}
	return nil
}

// PepdFor returns the pepd settings of mode m's testbeds: Pepd, then the
// settings of m's variant (Variants), in the order they are written.
func (c Config) PepdFor(m string) []PepdSetting {
	_, v := report.SplitVariant(m)
	if v == "" {
		return c.Pepd
	}
	return append(slices.Clip(c.Pepd), c.Variants[v]...)
}

// checkVariants checks the variant tags of c.Modes against c.Variants:
// names of letters, digits, '-' and '_'; no tag without its -variant, no
// -variant without a mode; no tag on direct (no pepd); settings that
// ParsePepdSetting takes; and, unless SplitModes, one pepd configuration
// for all the modes (a testbed runs one pepd through its modes).
func (c Config) checkVariants() error {
	used := map[string]bool{}
	for _, m := range c.Modes {
		if !strings.Contains(m, report.VariantMark) {
			if NeedsPEP(m) {
				used[""] = true
			}
			continue
		}
		plain, v := report.SplitVariant(m)
		if !validVariantName(v) {
			return fmt.Errorf("run: modes: %q: the variant tag after %s is not a name of letters, digits, '-' and '_'", m, report.VariantMark)
		}
		if !NeedsPEP(plain) {
			return fmt.Errorf("run: modes: %q: direct runs no pepd, so it has no variant", m)
		}
		if _, ok := c.Variants[v]; !ok {
			return fmt.Errorf("run: modes: %q: no -variant %s:KEY=VALUE defines its pepd settings", m, v)
		}
		used[v] = true
	}
	for _, v := range slices.Sorted(maps.Keys(c.Variants)) {
		if !validVariantName(v) {
			return fmt.Errorf("run: -variant %s: want a name of letters, digits, '-' and '_'", v)
		}
		if !used[v] {
			return fmt.Errorf("run: -variant %s: no mode is tagged %s%s (e.g. -modes url+opt,url+opt%s%s)", v, report.VariantMark, v, report.VariantMark, v)
		}
		if len(c.Variants[v]) == 0 {
			return fmt.Errorf("run: -variant %s: no settings", v)
		}
		for _, s := range c.Variants[v] {
			if _, err := ParsePepdSetting(s.String()); err != nil {
				return fmt.Errorf("run: -variant %s: %w", v, err)
			}
		}
	}
	if n := len(used); n > 1 && !c.SplitModes {
		return fmt.Errorf("run: modes: %d pepd configurations (variants %s); give each mode its own testbed with -split-modes", n, strings.Join(slices.Sorted(maps.Keys(c.Variants)), ", "))
	}
	return nil
}

// validVariantName reports whether v is a variant name: 1-32 letters,
// digits, '-' and '_'.
func validVariantName(v string) bool {
	if v == "" || len(v) > 32 {
		return false
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// resolverLabel is Chromium's resolver as results.json records it.
func (c Config) resolverLabel() string {
	if c.StockChromium {
		return "stock (Chromium's default)"
	}
	return string(c.Resolver)
}

// variantStrings are Config.Variants as results.json records them
// (report.RunConfig.Variants); nil for none.
func variantStrings(vs map[string][]PepdSetting) map[string][]string {
	if len(vs) == 0 {
		return nil
	}
	out := map[string][]string{}
	for v, s := range vs {
		out[v] = PepdStrings(s)
	}
	return out
}

// PepdStrings are settings as -pepd arguments, KEY=VALUE each (results.json's
// config.pepd); nil for none.
func PepdStrings(settings []PepdSetting) []string {
	var out []string
	for _, s := range settings {
		out = append(out, s.String())
	}
	return out
}

// NeedsPEP reports whether a mode runs through the appliance (pepd and
// Squid): every mode but direct.
func NeedsPEP(mode string) bool { return mode != "direct" }

// InitCwndBDP as Config.GWInitCwnd sets each profile's gateway initial
// window to BDPInitCwnd of the profile.
const InitCwndBDP = -1

// BDPInitCwnd is the initial window, in segments, that fills the radio
// link of profile p in one round trip: its downlink rate times its RTT
// (the two directions' delays) in 1,500-byte packets, rounded up, at
// least 10 (the kernel's, RFC 6928) and at most 44 (64,240 bytes: the
// receive window a Linux or Android phone advertises in its SYN, which
// bounds the first flight anyway). An unlimited link gets 10. 3g
// (1.6 Mbit/s, 300 ms): 40; the paper's cells: 10.
func BDPInitCwnd(p netem.Profile) int {
	rate := float64(p.Down.Rate)
	if rate == 0 {
		return 10
	}
	rtt := (p.Up.Delay + p.Down.Delay).Seconds()
	n := int(math.Ceil(rate * rtt / 8 / 1500))
	return min(max(n, 10), 44)
}

// LogValue logs the exact configuration as one group.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("corpus", c.Corpus), slog.String("pages", c.Pages),
		slog.String("profiles", strings.Join(c.Profiles, ",")), slog.String("wired", c.Wired),
		slog.String("modes", strings.Join(c.Modes, ",")), slog.Int("runs", c.Runs),
		slog.String("out", c.Out), slog.Bool("warm", c.Warm), slog.String("prepare_link", c.PrepareLink), slog.String("resolver", string(c.Resolver)), slog.Bool("https_rr", c.HTTPSRR), slog.Bool("unpartitioned", c.Unpartitioned),
		slog.String("disable_features", strings.Join(c.DisableFeatures, ",")),
		slog.Any("pepd", PepdStrings(c.Pepd)), slog.Any("variants", variantStrings(c.Variants)), slog.String("origin_compress", c.OriginCompress),
		slog.String("cc_phone", c.CCPhone), slog.String("cc_gw", c.CCGW), slog.String("cc_origin", c.CCOrigin),
		slog.Int("gw_initcwnd", c.GWInitCwnd), slog.Bool("gw_initcwnd_tls_only", c.GWInitCwndTLSOnly), slog.Any("gw_slow_start_after_idle", c.GWSlowStartAfterIdle),
		slog.Duration("page_timeout", c.PageTimeout), slog.Duration("settle", c.Settle),
		slog.Bool("har", c.HAR), slog.Bool("netlog", c.NetLog), slog.Bool("stock_chromium", c.StockChromium), slog.String("backend", c.Backend), slog.String("bin", c.Bin), slog.Int("parallel", c.Parallel), slog.Bool("split_modes", c.SplitModes), slog.Duration("settle_max", c.SettleMax), slog.Duration("opt_idle_max", c.optIdleMax()),
	)
}

// ShellQuote joins args into one line a POSIX shell reads back as the same
// words: an argument of only safe characters (letters, digits and
// -_./:,=+@%) stays as it is, anything else (empty, spaces, quotes, $, *,
// ...) goes in single quotes, with each ' written as '\”. The recorded
// command of a run can so be pasted back into a shell.
func ShellQuote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		safe := a != ""
		for _, r := range a {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:,=+@%", r)) {
				safe = false
				break
			}
		}
		if safe {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
