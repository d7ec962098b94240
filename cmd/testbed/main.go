// Command testbed runs the seed paper's experiment (§4) in network
// namespaces and reports it (testbed/README.md).
//
//	testbed run -corpus default -profile paper-average,paper-congested \
//	    -modes direct,off,dns,url -runs 3 -pages 3 -out testbed-out
//	testbed report -in testbed-out
//	testbed clean
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"pep/testbed/browser"
	"pep/testbed/corpus"
	"pep/testbed/report"
	"pep/testbed/run"
	"pep/testbed/topo"
)

const usage = `usage:
  testbed run [flags]     run the experiment, write OUT/results.json, OUT/report.md, plots
  testbed report -in DIR  regenerate DIR/report.md and the plots from DIR/results.json
  testbed import -corpus PATH [-pages SPEC]
                          import a corpus without running anything and print what
                          it holds: pages, objects, hosts, bytes, records skipped
                          by reason, payloads repaired, objects without a response
  testbed clean           remove what killed runs left behind (namespaces, /etc/netns)
  testbed quality [-corpus SPECS] [-q 50,60,70,75,80,90] [-out DIR]
                          the optimizer's image quality report: SSIM and bytes per WebP quality
  testbed cache-tests -suite DIR [-out DIR]
                          the HTTP caching test suite (a checkout of http-tests/cache-tests)
                          against Squid alone and against pepd+Squid; fails on a test Squid
                          alone passes and pepd+Squid fails
Run "testbed run -h" for the flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = cmdRun(os.Args[2:])
	case "report":
		err = cmdReport(os.Args[2:])
	case "import":
		err = cmdImport(os.Args[2:], os.Stdout)
	case "clean":
		err = cmdClean()
	case "quality":
		err = cmdQuality(os.Args[2:])
	case "cache-tests":
		err = cmdCacheTests(os.Args[2:])
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
		return
	default:
		err = fmt.Errorf("unknown command %q\n%s", os.Args[1], usage)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testbed:", err)
		os.Exit(1)
	}
}

func cmdRun(args []string) error {
	c := run.Default()
	fs := flag.NewFlagSet("testbed run", flag.ExitOnError)
	fs.StringVar(&c.Corpus, "corpus", c.Corpus, `"default" (embedded, the paper's three sites), a tp5n .tar.gz or directory, a .warc[.gz] or a directory of them`)
	profiles := fs.String("profile", strings.Join(c.Profiles, ","), "netem profiles (names or files), comma-separated")
	fs.StringVar(&c.Wired, "wired", c.Wired, `netem profile for the gw-core link: the origins' distance from the gateway; "none": 0 ms`)
	fs.StringVar(&c.PrepareLink, "prepare-link", c.PrepareLink, `netem profile of the radio link during the loads a session does not measure (a warm cache's passes, the hints' teaching pass: other subscribers' loads); "same": the measured profile`)
	modes := fs.String("modes", strings.Join(c.Modes, ","), "modes to compare: direct, off, dns, url, url-https-kN (url mode over the VIP's HTTPS origin, HTTP/2, k shards; N 1..16), and those but direct with +opt (pepd's optimizer on) and @NAME (the pepd settings of -variant NAME:KEY=VALUE)")
	hintsFlag := fs.String("hints", "", "off, on or off,on: run every mode but direct without and/or with pepd's dependency hints (adds the +hints modes; each such session starts with a teaching pass by another browser profile, discarded)")
	optimize := fs.String("optimize", "", "off, on or off,on: run every mode but direct without and/or with pepd's optimizer (adds the +opt modes)")
	fs.IntVar(&c.Runs, "runs", c.Runs, "runs per mode (each a fresh browser and, unless -warm, a cold Squid)")
	fs.StringVar(&c.Pages, "pages", "", `pages: "" (all), N (the first N) or a comma-separated list of names`)
	fs.StringVar(&c.Out, "out", c.Out, "output folder")
	cache := fs.String("cache", "", "cold, warm or cold,warm: run every mode but direct on a cold Squid and/or on one filled by a discarded pass over the pages (two in +opt modes, each followed by a wait until the optimizer is idle; adds the +warm modes)")
	warm := fs.Bool("warm", false, "the same as -cache warm")
	resolver := fs.String("resolver", string(c.Resolver), "Chromium's resolver: builtin (AsyncDns) or system (getaddrinfo)")
	fs.BoolVar(&c.HTTPSRR, "https-rr", false, "let Chromium ask for HTTPS records (type 65) beside A records")
	fs.BoolVar(&c.Unpartitioned, "unpartitioned", false, "turn off Chromium's partitioning of connections and host cache by top-level site")
	fs.StringVar(&c.OriginCompress, "origin-compress", "auto", "replay origin's content coding: auto (gzip text when the request accepts it, as nginx with gzip on), none, recorded (WARC records as recorded)")
	fs.StringVar(&c.CCPhone, "cc-phone", "cubic", "TCP congestion control of the phone's namespace (mn)")
	fs.StringVar(&c.CCGW, "cc-gw", "cubic", "TCP congestion control of the gateway's namespace (pepd, Squid)")
	fs.StringVar(&c.CCOrigin, "cc-origin", "cubic", "TCP congestion control of the origin's namespace (core)")
	fs.Func("gw-initcwnd", `initial congestion window, in segments, of the gateway's TCP toward the radio link (pepd, Squid; ip route initcwnd): a number, 0 for the kernel's 10, or "bdp" for each profile's bandwidth-delay product (10 to 44; run.BDPInitCwnd) (default "bdp")`, func(v string) error {
		if v == "bdp" {
			c.GWInitCwnd = run.InitCwndBDP
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1000 {
			return fmt.Errorf(`want "bdp" or 0 to 1000 segments`)
		}
		c.GWInitCwnd = n
		return nil
	})
	fs.BoolVar(&c.GWInitCwndTLSOnly, "gw-initcwnd-tls-only", c.GWInitCwndTLSOnly, "-gw-initcwnd for the connections of pepd's TLS listener only (the VIP's HTTPS origin); the others keep 10")
	fs.Func("gw-slow-start-after-idle", "the gateway's net.ipv4.tcp_slow_start_after_idle, 0 or 1 (default 0, as deploy/sysctl/90-pep.conf; 1 is the kernel's)", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || (n != 0 && n != 1) {
			return fmt.Errorf("want 0 or 1")
		}
		c.GWSlowStartAfterIdle = &n
		return nil
	})
	fs.Func("vip", "the VIP's address in the testbed (default 192.0.2.12; 10.0.0.12, the paper's private one, shows Chromium's Local Network Access checks)", func(v string) error {
		a, err := netip.ParseAddr(v)
		if err != nil || !a.Is4() {
			return fmt.Errorf("%q is not an IPv4 address", v)
		}
		c.VIP = a
		return nil
	})
	addPepdFlags(fs, &c.Pepd)
	addVariantFlag(fs, &c.Variants)
	disableFeatures := fs.String("disable-features", "", "more Chromium features to turn off, comma-separated (e.g. HappyEyeballsV3)")
	fs.DurationVar(&c.PageTimeout, "page-timeout", c.PageTimeout, "time limit of one page load")
	fs.DurationVar(&c.Settle, "settle", c.Settle, "quiet network time after onload before the next page")
	fs.DurationVar(&c.SettleMax, "settle-max", c.SettleMax, "longest wait for the quiet after onload")
	fs.DurationVar(&c.OptIdleMax, "opt-idle-max", c.OptIdleMax, "longest wait, after each warm-up pass of a +opt mode, for pepd's optimizer to finish its transforms (AVIF searches need more)")
	fs.BoolVar(&c.SplitModes, "split-modes", false, "one testbed per (profile, run, mode), so that -parallel covers the modes too")
	fs.StringVar(&c.Backend, "backend", c.Backend, "link emulator: auto, tc or userspace")
	fs.StringVar(&c.Bin, "bin", "", "folder with pepd and pepctl (default: this program's folder)")
	fs.StringVar(&c.Chromium, "chromium", "chromium", "Chromium binary")
	fs.IntVar(&c.Parallel, "parallel", 1, "testbeds at once, one per (profile, run); warm-up and teaching passes never run beside a measured load, and with -split-modes a run's testbeds measure together, each page begun on all of them at once")
	fs.BoolVar(&c.StockChromium, "stock-chromium", false, "run Chromium with its stock defaults for whatever changes a page load (HTTPS upgrades, QUIC, HTTPS records, resolver); the report lists every change the testbed makes otherwise")
	fs.BoolVar(&c.HAR, "har", false, "save a HAR file per load (OUT/har/PROFILE/runN/MODE/NNN-PAGE.har, about 1 kB per request) and report where the time went")
	fs.BoolVar(&c.NetLog, "netlog", false, "save Chromium's net log of every measured session (OUT/netlog/PROFILE/runN/MODE.json): every socket it connected, used or not")
	quiet := fs.Bool("q", false, "no progress bar and no report on stdout")
	topology := addTopologyFlags(fs)
	fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("run: unexpected arguments %q", fs.Args())
	}
	c.Profiles = splitList(*profiles)
	c.Modes = splitList(*modes)
	if *optimize != "" {
		var err error
		if c.Modes, err = run.WithOptimize(c.Modes, splitList(*optimize)); err != nil {
			return err
		}
	}
	if *hintsFlag != "" {
		var err error
		if c.Modes, err = run.WithHints(c.Modes, splitList(*hintsFlag)); err != nil {
			return err
		}
	}
	if *warm {
		if *cache != "" && *cache != "warm" {
			return fmt.Errorf("run: -warm is -cache warm, but -cache is %q", *cache)
		}
		*cache = "warm"
	}
	if *cache != "" {
		var err error
		if c.Modes, err = run.WithCache(c.Modes, splitList(*cache)); err != nil {
			return err
		}
	}
	c.DisableFeatures = splitList(*disableFeatures)
	r, err := browser.ParseResolver(*resolver)
	if err != nil {
		return err
	}
	c.Resolver = r
	c.Command = run.ShellQuote(os.Args)
	if err := c.Validate(); err != nil {
		return err
	}
	external, err := topology.external()
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 && !external {
		return errors.New("run: needs root (network namespaces, nftables, AF_PACKET)")
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return err
	}

	logFile, err := os.Create(filepath.Join(c.Out, "testbed.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	stderrLevel := slog.LevelWarn
	log := slog.New(slog.NewMultiHandler(
		slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug}),
		slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: stderrLevel}),
	)).With("component", "testbed")
	// The exact configuration comes first, on the terminal too.
	fmt.Fprintf(os.Stderr, "testbed: %s\n", c.Command)
	fmt.Fprintf(os.Stderr, "testbed: corpus=%s pages=%q profiles=%s wired=%q modes=%s runs=%d pepd=%q variants=%q resolver=%s https-rr=%v unpartitioned=%v disable-features=%q har=%v backend=%s page-timeout=%s settle=%s parallel=%d out=%s\n",
		c.Corpus, c.Pages, strings.Join(c.Profiles, ","), c.Wired, strings.Join(c.Modes, ","), c.Runs, strings.Join(run.PepdStrings(c.Pepd), " "), variantsString(c.Variants), c.Resolver, c.HTTPSRR, c.Unpartitioned, strings.Join(c.DisableFeatures, ","), c.HAR,
		c.Backend, c.PageTimeout, c.Settle, c.Parallel, c.Out)

	if external {
		// Nothing of ours to sweep: the topology is not ours.
	} else if removed, err := topo.Sweep(); err != nil {
		log.Warn("sweeping leftovers of killed runs", "err", err)
	} else if len(removed) > 0 {
		log.Warn("removed leftovers of killed runs", "paths", removed)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var progress io.Writer = os.Stderr
	if *quiet {
		progress = nil
	}
	start := time.Now()
	res, runErr := topology.run(ctx, c, log, progress)
	if res != nil && len(res.Records) > 0 {
		md, err := report.Generate(res, c.Out)
		if err != nil {
			return errors.Join(runErr, err)
		}
		if !*quiet {
			os.Stdout.Write(md)
		}
	}
	fmt.Fprintf(os.Stderr, "testbed: %s in %s; results in %s\n", outcome(runErr), time.Since(start).Round(time.Second), c.Out)
	return runErr
}

func outcome(err error) string {
	if err != nil {
		return "failed"
	}
	return "done"
}

func cmdReport(args []string) error {
	fs := flag.NewFlagSet("testbed report", flag.ExitOnError)
	in := fs.String("in", "testbed-out", "folder holding results.json")
	quiet := fs.Bool("q", false, "do not print the report")
	fs.Parse(args)
	res, err := report.Read(filepath.Join(*in, "results.json"))
	if err != nil {
		return err
	}
	md, err := report.Generate(res, *in)
	if err != nil {
		return err
	}
	if !*quiet {
		os.Stdout.Write(md)
	}
	return nil
}

// cmdImport loads a corpus as `testbed run` would and prints its import
// report (corpus.ImportReport), one line each.
func cmdImport(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("testbed import", flag.ExitOnError)
	spec := fs.String("corpus", "default", `"default", a tp5n .tar.gz or directory, a .warc[.gz] or a directory of them`)
	pages := fs.String("pages", "", `pages: "" (all), N (the first N) or a comma-separated list of names`)
	fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("import: unexpected arguments %q", fs.Args())
	}
	c, err := corpus.Open(*spec)
	if err != nil {
		return err
	}
	if c, err = c.SelectSpec(*pages); err != nil {
		return err
	}
	for _, l := range c.ImportReport() {
		fmt.Fprintln(out, l)
	}
	return nil
}

func cmdClean() error {
	removed, err := topo.Sweep()
	for _, r := range removed {
		fmt.Println("removed", r)
	}
	return err
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
