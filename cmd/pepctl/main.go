// Command pepctl operates a running pepd through its admin API, and runs
// pepd's rewriter and Squid config template offline.
//
//	pepctl [-admin 127.0.0.1:9090] mode [off|dns|url]   print or switch the mode
//	pepctl [-admin 127.0.0.1:9090] status               mode, health, main counters
//	pepctl [-admin 127.0.0.1:9090] optimize [on|off]    print or switch the optimizer
//	pepctl [-admin 127.0.0.1:9090] hints [on|off]       print or switch the dependency hints
//	pepctl [-admin 127.0.0.1:9090] cache                the cache's status (GET /cache)
//	pepctl optimize-image [-target S] [-o out.webp] FILE...  run pepd's image transform on files
//	pepctl optimize-text [-brotli Q] [-o out] FILE         run pepd's text transform on a file
//	pepctl rewrite-html -vip IP -base URL < in.html > out.html
//	pepctl squid-conf [-config pepd.yaml] [-template configs/squid.conf] [flags] > squid.conf
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"pep/internal/config"
	"pep/internal/optimize"
	"pep/internal/rewrite"
	"pep/internal/squid"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `usage:
  pepctl [-admin ADDR[,ADDR...]] mode [off|dns|url]
  pepctl [-admin ADDR[,ADDR...]] status
  pepctl [-admin ADDR[,ADDR...]] optimize [on|off]
  pepctl [-admin ADDR[,ADDR...]] hints [on|off]
  pepctl [-admin ADDR[,ADDR...]] cache [-json]
        (several admin addresses: every gateway of an array, each line prefixed by its address)
  pepctl optimize-image [-target S] [-tile-floor S] [-quality N] [-max-pixels N] [-quick Q] [-avif] [-o out.webp] FILE...
  pepctl optimize-text [-brotli Q] [-o out] FILE   (a gzipped FILE is taken as an origin's gzip body)
  pepctl rewrite-html -vip IP -base URL < in.html > out.html
  pepctl squid-conf [-config pepd.yaml] [-template configs/squid.conf] [options] > squid.conf
`

// run is main with its streams; it returns the exit status (2: usage).
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pepctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	adminAddr := fs.String("admin", "127.0.0.1:9090", "pepd's admin address (listen.admin); several, comma-separated, for every gateway of an array")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	var err error
	switch cmd, rest := fs.Arg(0), fs.Args()[1:]; cmd {
	case "mode":
		if len(rest) == 1 && strings.HasPrefix(rest[0], "-") {
			if rest[0] != "-h" && rest[0] != "-help" && rest[0] != "--help" {
				fmt.Fprintf(stderr, "pepctl: mode: unknown flag %q\n", rest[0])
				return 2
			}
			fmt.Fprint(stdout, modeUsage)
			return 0
		}
		err = eachAdmin(*adminAddr, stdout, stderr, func(c *client, w io.Writer) error { return c.mode(w, rest) })
	case "status":
		err = eachAdmin(*adminAddr, stdout, stderr, func(c *client, w io.Writer) error { return c.status(w) })
	case "optimize", "hints":
		if len(rest) > 1 || len(rest) == 1 && strings.HasPrefix(rest[0], "-") {
			fmt.Fprintf(stderr, "usage: pepctl [-admin ADDR[,ADDR...]] %s [on|off]\n", cmd)
			return 2
		}
		err = eachAdmin(*adminAddr, stdout, stderr, func(c *client, w io.Writer) error {
			if len(rest) == 0 {
				return c.print(w, "GET", "/"+cmd, "")
			}
			return c.print(w, "PUT", "/"+cmd, rest[0])
		})
	case "cache":
		if len(rest) > 1 || len(rest) == 1 && rest[0] != "-json" {
			fmt.Fprint(stderr, cacheUsage)
			return 2
		}
		err = eachAdmin(*adminAddr, stdout, stderr, func(c *client, w io.Writer) error { return c.cache(w, len(rest) == 1) })
	case "optimize-image", "optimize-text":
		err = optimizeFile(cmd, rest, stdout, stderr)
	case "rewrite-html":
		err = rewriteHTML(rest, stdin, stdout, stderr)
	case "squid-conf":
		err = squidConf(rest, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "pepctl: unknown command %q\n", cmd)
		fs.Usage()
		return 2
	}
	if errors.Is(err, flag.ErrHelp) || errors.Is(err, errUsage) {
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "pepctl: %v\n", err)
		return 1
	}
	return 0
}

var errUsage = errors.New("usage")

const modeUsage = `usage: pepctl [-admin ADDR[,ADDR...]] mode [off|dns|url]
  without an argument: print pepd's mode (GET /mode)
  off   pass-through: intercepted HTTP goes through Squid as it is
  dns   DNS answers get the VIP first; HTTP to the VIP is routed by Host
  url   HTML is rewritten so embedded http://host/path becomes http://VIP/host/path
The switch takes effect for the next request and DNS query; open connections stay.
With several admin addresses every gateway of an array is switched.
`

const cacheUsage = `usage: pepctl [-admin ADDR[,ADDR...]] cache [-json]
  the cache's status (GET /cache): admission (off, second-hit) and pepd's marks
  (first-seen: admissions refused; private), Squid's hit ratio by requests and
  bytes, objects and bytes in memory and on disk, disk writes (swap outs), read
  from Squid's cache manager on loopback. -json prints the JSON document.
`

// cache prints GET /cache, as text or (asJSON) the JSON document.
func (c *client) cache(w io.Writer, asJSON bool) error {
	req, err := http.NewRequest("GET", c.base+"/cache", nil)
	if err != nil {
		return err
	}
	if asJSON {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /cache: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	_, err = w.Write(b)
	return err
}

// eachAdmin runs f against every admin address of the comma-separated list
// (a gateway array, docs/operations.md §6), one after the other. With one
// address the output is f's; with several every line is prefixed by the
// address, every gateway is tried even when one fails, and the error names
// the ones that failed.
func eachAdmin(list string, stdout, stderr io.Writer, f func(*client, io.Writer) error) error {
	addrs := strings.Split(list, ",")
	hc := &http.Client{Timeout: 10 * time.Second}
	if len(addrs) == 1 {
		return f(&client{base: "http://" + strings.TrimSpace(addrs[0]), hc: hc}, stdout)
	}
	var failed []string
	for _, a := range addrs {
		a = strings.TrimSpace(a)
		var buf bytes.Buffer
		err := f(&client{base: "http://" + a, hc: hc}, &buf)
		for _, l := range strings.SplitAfter(buf.String(), "\n") {
			if l != "" {
				fmt.Fprintf(stdout, "%s: %s", a, l)
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "pepctl: %s: %v\n", a, err)
			failed = append(failed, a)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d gateways failed: %s", len(failed), len(addrs), strings.Join(failed, ", "))
	}
	return nil
}

type client struct {
	base string
	hc   *http.Client
}

func (c *client) do(method, path, body string) (string, error) {
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "text/plain")
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// print prints the answer to one admin request.
func (c *client) print(w io.Writer, method, path, body string) error {
	b, err := c.do(method, path, body)
	if err != nil {
		return err
	}
	fmt.Fprint(w, b)
	return nil
}

// optimizeFile runs exactly pepd's transform (optimize.Image or
// optimize.Text, with optimize.* defaults or the flags) on files, writes
// the result with -o (one file) and prints, per file, the sizes and the
// outcome: for an image the WebP chosen (lossless, or the lossy quality),
// the SSIM it reached against the original and its lowest 32x32 tile, the
// encodes and the time taken, for operators to preview what subscribers
// would get.
func optimizeFile(cmd string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := optimize.DefaultImageOptions()
	fs.Float64Var(&o.Target, "target", o.Target, "SSIM every served image reaches, 0-1; 0: the fixed rule (optimize.ssim_target)")
	fs.Float64Var(&o.TileFloor, "tile-floor", o.TileFloor, "SSIM every 32x32 tile of a lossy WebP reaches, 0-1 (optimize.ssim_tile_floor)")
	fs.IntVar(&o.Refine, "refine", o.Refine, fmt.Sprintf("refining encodes between two qualities of the search's grid, 0-%d (optimize.ssim_refine)", optimize.MaxRefine))
	fs.IntVar(&o.Quality, "quality", o.Quality, "the fixed rule's WebP quality of JPEG photos, 1-100 (optimize.quality)")
	fs.Int64Var(&o.MaxPixels, "max-pixels", o.MaxPixels, "pixel limit (optimize.max_pixels)")
	fs.Float64Var(&o.MinSaving, "min-saving", o.MinSaving, "the fraction an image's result must save to be served (optimize.min_saving; text: optimize.MinTextSaving, 3 %)")
	out := fs.String("o", "", "write the body pepd would serve here (the input itself when it would pass untouched); one FILE only")
	brotliQ := fs.Int("brotli", optimize.DefaultBrotliQuality, "optimize-text: brotli quality 1-11, as for a request whose Accept-Encoding names br (optimize.brotli_quality); 0: gzip")
	quick := fs.Int("quick", 0, "also the quick WebP at this quality, 1-100, that an image the backlog turns away gets (optimize.quick_quality, default 80); 0: none")
	avif := fs.Bool("avif", false, "also the AVIF search, as for a request whose Accept names image/avif (optimize.avif): served, and written with -o, when smaller than the WebP")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() < 1 || *out != "" && fs.NArg() != 1 || cmd == "optimize-text" && fs.NArg() != 1 {
		fmt.Fprintf(stderr, "usage: pepctl %s [flags] FILE (optimize-image: FILE..., -o with one FILE)\n", cmd)
		fs.PrintDefaults()
		return errUsage
	}
	if *brotliQ < 0 || *brotliQ > 11 {
		return fmt.Errorf("-brotli %d out of range (0-11; 0: gzip)", *brotliQ)
	}
	if *quick < 0 || *quick > 100 {
		return fmt.Errorf("-quick %d out of range (1-100; 0: none)", *quick)
	}
	if o.Target < 0 || o.Target > 1 || o.TileFloor < 0 || o.TileFloor > 1 || o.Quality < 1 || o.Quality > 100 {
		return fmt.Errorf("-target %v, -tile-floor %v (0-1) or -quality %d (1-100) out of range", o.Target, o.TileFloor, o.Quality)
	}
	if o.Refine < 0 || o.Refine > optimize.MaxRefine {
		return fmt.Errorf("-refine %d out of range (0-%d)", o.Refine, optimize.MaxRefine)
	}
	for _, name := range fs.Args() {
		in, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		var body, avifBody []byte
		var skip, what string
		if cmd == "optimize-image" {
			start := time.Now()
			res := optimize.Image(in, o)
			took := time.Since(start)
			body, skip = res.Body, res.Skip
			switch {
			case skip != "" && res.SSIM > 0:
				what = fmt.Sprintf(" (the smallest WebP reaching the target, SSIM %.4f, is not %.0f %% smaller)", res.SSIM, 100*o.MinSaving)
			case skip != "":
			case res.Lossless:
				what = res.Format + " -> webp lossless, SSIM 1 (the same pixels)"
			case o.Target == 0:
				what = fmt.Sprintf("%s -> webp q%d (fixed rule, SSIM not measured)", res.Format, res.Quality)
			default:
				what = fmt.Sprintf("%s -> %s q%d, SSIM %.4f (lowest 32x32 tile %.4f)", res.Format, strings.TrimPrefix(res.ContentType, "image/"), res.Quality, res.SSIM, res.WorstTile)
			}
			if res.Frames > 0 {
				what += fmt.Sprintf(", animated, %d frames (SSIM: the worst frame's)", res.Frames)
			}
			what += fmt.Sprintf(", %d encodes, %.1f ms", res.Encodes, float64(took.Microseconds())/1000)
			if *quick > 0 {
				start := time.Now()
				q := optimize.Quick(in, o, *quick)
				took := float64(time.Since(start).Microseconds()) / 1000
				if q.Skip == "" {
					what += fmt.Sprintf("; under a backlog: webp q%d, %d bytes (%.1f %%), SSIM %.4f (lowest 32x32 tile %.4f), %d encode, %.1f ms",
						q.Quality, len(q.Body), 100*float64(len(q.Body))/float64(len(in)), q.SSIM, q.WorstTile, q.Encodes, took)
				} else {
					what += fmt.Sprintf("; under a backlog: the original (%s at q%d), %.1f ms", q.Skip, *quick, took)
				}
			}
			if *avif {
				start := time.Now()
				a := optimize.AVIF(in, o, res)
				took := float64(time.Since(start).Microseconds()) / 1000
				if a.Skip == "" {
					avifBody = a.Body
					what += fmt.Sprintf("; served to an AVIF Accept: avif q%d, %d bytes (%.1f %%), SSIM %.4f (lowest 32x32 tile %.4f), %d encodes, %.1f ms",
						a.Quality, len(a.Body), 100*float64(len(a.Body))/float64(len(in)), a.SSIM, a.WorstTile, a.Encodes, took)
				} else {
					what += fmt.Sprintf("; no AVIF (%s), %d encodes, %.1f ms", a.Skip, a.Encodes, took)
				}
			}
		} else {
			enc, coding := "", optimize.CodingGzip
			if bytes.HasPrefix(in, []byte{0x1f, 0x8b}) {
				enc = optimize.CodingGzip // gzip's magic (RFC 1952 §2.3.1): an origin's gzip body
			}
			if *brotliQ > 0 {
				coding = optimize.CodingBrotli
			}
			start := time.Now()
			body, skip = optimize.Text(in, enc, coding, *brotliQ, int64(optimize.DefaultConfig().MaxBodyBytes))
			what = fmt.Sprintf("%s -> %s, %.1f ms", cmp.Or(enc, "plain"), coding, float64(time.Since(start).Microseconds())/1000)
			if skip != "" {
				what = " (" + what + ")"
			}
		}
		if skip != "" {
			fmt.Fprintf(stdout, "%s: %d bytes, passes untouched: %s%s\n", name, len(in), skip, what)
		} else {
			fmt.Fprintf(stdout, "%s: %d -> %d bytes (%.1f %%), %s\n", name, len(in), len(body), 100*float64(len(body))/float64(len(in)), what)
		}
		if avifBody != nil {
			body = avifBody
		}
		if *out != "" {
			if err := os.WriteFile(*out, body, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// mode prints the mode, or switches it when given one.
func (c *client) mode(w io.Writer, args []string) error {
	switch len(args) {
	case 0:
		b, err := c.do("GET", "/mode", "")
		if err != nil {
			return err
		}
		fmt.Fprint(w, b)
		return nil
	case 1:
		b, err := c.do("PUT", "/mode", args[0])
		if err != nil {
			return err
		}
		fmt.Fprint(w, b)
		return nil
	}
	return fmt.Errorf("mode takes at most one argument (off, dns, url), got %q", args)
}

// status prints the mode, the health check and the main counters.
func (c *client) status(w io.Writer) error {
	m, err := c.do("GET", "/mode", "")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "mode: %s", m)
	h, herr := c.do("GET", "/healthz", "")
	if herr != nil {
		fmt.Fprintf(w, "health: %v\n", herr)
	} else {
		fmt.Fprintf(w, "health: %s", h)
	}
	metrics, err := c.do("GET", "/metrics", "")
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(strings.NewReader(metrics))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		for _, p := range []string{"pep_http_requests_total", "pep_http_refused_total", "pep_http_open_connections",
			"pep_http_bad_requests_total", "pep_http_host_mismatch_total", "pep_rewrite_responses_total", "pep_rewrite_urls_total",
			"pep_dns_", "pep_admin_optimize_enabled", "pep_optimize_transforms_total", "pep_optimize_served_total",
			"pep_optimize_skipped_total"} {
			if strings.HasPrefix(l, p) {
				fmt.Fprintln(w, l)
			}
		}
	}
	return herr
}

// rewriteHTML runs pepd's rewriter over stdin.
func rewriteHTML(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rewrite-html", flag.ContinueOnError)
	fs.SetOutput(stderr)
	vip := fs.String("vip", "", "the VIP, IP or IP:port (required)")
	base := fs.String("base", "", "the document's URL, for relative references (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *vip == "" || *base == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: pepctl rewrite-html -vip IP -base URL < in.html > out.html")
		return errUsage
	}
	u, err := url.Parse(*base)
	if err != nil || !u.IsAbs() {
		return fmt.Errorf("-base %q is not an absolute URL", *base)
	}
	rw, err := rewrite.New(*vip, rewrite.Config{}, nil, nil)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(stdout)
	st, err := rw.HTML(bw, stdin, u)
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "pepctl: %d URLs rewritten, %d skipped\n", st.URLs, st.Skipped)
	return nil
}

// squidConf renders configs/squid.conf for a pepd config.
func squidConf(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("squid-conf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgFile := fs.String("config", "", "pepd's config file (subscribers, resolvers, squid, vip, guard); default: built-in defaults")
	tmpl := fs.String("template", squid.Template, "the squid.conf template")
	cacheDir := fs.String("cache-dir", "/var/spool/squid", "cache_dir directory")
	cacheDirMB := fs.Int("cache-dir-mb", 10000, "cache_dir size, MB")
	cacheMemMB := fs.Int("cache-mem-mb", 256, "cache_mem, MB")
	logDir := fs.String("log-dir", "/var/log/squid", "directory of access.log and cache.log")
	pidFile := fs.String("pid-file", "/run/squid.pid", "pid_filename")
	hostsFile := fs.String("hosts-file", "none", "hosts_file")
	user := fs.String("user", "proxy", "cache_effective_user")
	pepdSrc := fs.String("pepd", "127.0.0.1/32", "pepd's source addresses as Squid sees them, comma-separated CIDRs")
	peers := fs.String("peers", "", "CARP array members' array ports, host:port, comma-separated, this gateway's included, the same order on every member (docs/operations.md §6); empty: a single cache")
	peerListen := fs.String("peer-listen", "", "this gateway's array port, host:port (with -peers)")
	memTier := fs.Bool("memory-tier", false, "render the memory tier's squid.conf (cache.memory_tier: a memory-only Squid, the disk Squid's parent; -cache-mem-mb sizes it) instead of the disk Squid's")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *memTier {
		// The tier's own files, unless given: it runs beside the disk Squid.
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, d := range []struct {
			name string
			v    *string
			def  string
		}{{"log-dir", logDir, "/var/log/squid-memtier"}, {"pid-file", pidFile, "/run/squid-memtier.pid"}, {"cache-dir", cacheDir, "/var/spool/squid-memtier"}} {
			if !set[d.name] {
				*d.v = d.def
			}
		}
	}
	var cfg *config.Config
	if *cfgFile != "" {
		c, err := config.Load(*cfgFile)
		if err != nil {
			return err
		}
		cfg = c
	} else {
		c := config.Default()
		cfg = &c
	}
	t, err := os.ReadFile(*tmpl)
	if err != nil {
		return err
	}
	sc := squid.DefaultConf(cfg.VIP)
	sc.Listen = cfg.Squid
	sc.ProxyProtocol = cfg.SquidProxyProtocol
	sc.Pepd = strings.Split(*pepdSrc, ",")
	sc.Subscribers = nil
	for _, p := range cfg.Subscribers {
		sc.Subscribers = append(sc.Subscribers, p.String())
	}
	sc.Resolvers = nil
	if a := cfg.Listen.SquidDNS; a != "" { // pepd's answers first (internal/squiddns)
		host, _, _ := net.SplitHostPort(a)
		sc.Resolvers = append(sc.Resolvers, host)
	}
	for _, r := range cfg.Resolvers {
		host, _, err := net.SplitHostPort(r)
		if err != nil {
			return fmt.Errorf("resolver %q: %w", r, err)
		}
		sc.Resolvers = append(sc.Resolvers, host)
	}
	sc.AllowedPorts = cfg.Guard.AllowedPorts
	for _, p := range cfg.Guard.Allow {
		sc.AllowDst = append(sc.AllowDst, p.String())
	}
	for _, p := range cfg.Guard.Deny {
		sc.Forbidden = append(sc.Forbidden, p.String())
	}
	sc.CacheDir, sc.CacheDirMB, sc.CacheMemMB = *cacheDir, *cacheDirMB, *cacheMemMB
	sc.LogDir, sc.PidFile, sc.HostsFile, sc.User = *logDir, *pidFile, *hostsFile, *user
	if *peers != "" {
		sc.Peers = strings.Split(*peers, ",")
		sc.PeerListen = *peerListen
	}
	sc.Admission = cfg.Cache.Admission == "second-hit"
	sc.MemoryMaxObjectKB = int((cfg.Cache.MemoryMaxObject + 1023) / 1024)
	sc.Optimizer = cfg.Optimize.Listen
	if strings.HasPrefix(sc.Optimizer, ":") {
		sc.Optimizer = "127.0.0.1" + sc.Optimizer
	}
	sc.MemoryTier = cfg.Cache.MemoryTier
	if *memTier {
		if sc.MemoryTier == "" {
			return fmt.Errorf("squid-conf -memory-tier: cache.memory_tier is not set in the config")
		}
		// The tier's only client is the disk Squid on loopback (no PROXY
		// header, its X-Forwarded-For deleted); it stores every miss
		// (no admission) in memory only.
		sc.Listen, sc.MemoryOnly, sc.MemoryTier = cfg.Cache.MemoryTier, true, ""
		sc.ProxyProtocol, sc.Admission, sc.Peers, sc.PeerListen = false, false, nil, ""
		sc.Pepd, sc.Subscribers = []string{"127.0.0.1/32"}, []string{"127.0.0.1/32"}
	}
	return squid.Render(stdout, string(t), sc)
}
