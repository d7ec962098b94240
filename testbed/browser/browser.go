// Package browser drives headless Chromium (Debian's chromium) with
// chromedp for the testbed: one browser per session with a fresh profile,
// pages loaded in order, one tab per page (the seed paper's sequential runs,
// §4.2), and per page the figures the paper's instrumented Mozilla printed:
// page load time, DOMContentLoaded, bytes, requests and failures.
//
// The browser can run inside a network namespace (Options.NS): the
// process is started as `ip netns exec NS chromium ...` and chromedp talks
// to it over the DevTools pipe (file descriptors 3 and 4, which `ip netns
// exec` passes on), so no port has to cross namespaces.
package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"pep/testbed/har"
)

// Resolver selects the DNS resolver Chromium uses: its built-in
// asynchronous resolver ("builtin": feature AsyncDns on; it honours TTLs)
// or the system's getaddrinfo ("system": AsyncDns off; Chromium caches
// those answers for 60 s whatever the TTL). Both read the namespace's
// /etc/resolv.conf.
type Resolver string

// The two resolvers.
const (
	ResolverBuiltin Resolver = "builtin"
	ResolverSystem  Resolver = "system"
)

// ParseResolver accepts "builtin" or "system".
func ParseResolver(s string) (Resolver, error) {
	switch r := Resolver(s); r {
	case ResolverBuiltin, ResolverSystem:
		return r, nil
	}
	return "", fmt.Errorf("browser: resolver %q: want builtin or system", s)
}

// Options configure a Session.
type Options struct {
	// NS is the network namespace the browser runs in; "" runs it in the
	// caller's namespace.
	NS string
	// ExecPath is the Chromium binary; "" means "chromium" from PATH.
	ExecPath string
	// Resolver selects Chromium's resolver; "" means ResolverBuiltin.
	Resolver Resolver
	// PageTimeout bounds one page: navigation, onload and settling. Zero
	// means 3 minutes.
	PageTimeout time.Duration
	// Settle is how long the network must stay quiet after onload before
	// a page is complete, so that late requests count for their own page
	// and not for the next one. Zero means 500 ms; negative means do not
	// wait.
	Settle time.Duration
	// SettleMax bounds the wait for quiet after onload (a page that polls
	// or holds a request open is never quiet). Zero means 10 s.
	SettleMax time.Duration
	// HTTPSRR lets the built-in resolver ask for HTTPS records (type 65)
	// beside A records (feature UseDnsHttpsSvcb, on in Chromium by
	// default). Off, one DNS query crosses the link per name, as in the
	// seed paper's count of DNS requests.
	HTTPSRR bool
	// Unpartitioned turns off Chromium's network state partitioning of
	// connections and of the host cache by top-level site (features
	// PartitionConnectionsByNetworkIsolationKey and
	// SplitHostCacheByNetworkAnonymizationKey, on by default): with it, a
	// connection to the VIP opened for one site's page is reused by the
	// next site's page, as in the seed paper's 2004 browser.
	Unpartitioned bool
	// DisableFeatures are more Chromium features to turn off (e.g.
	// "HappyEyeballsV3"), appended to the list Flags builds.
	DisableFeatures []string
	// IgnoreCertErrors makes Chromium accept the testbed's test CA
	// (--ignore-certificate-errors).
	IgnoreCertErrors bool
	// TrustCAs are CA certificates (PEM files) Chromium trusts as a phone
	// trusts a public CA: put in an NSS store of the session's own
	// ($HOME/.pki/nssdb, HOME set to a folder of the profile) with
	// certutil (Debian libnss3-tools), trust "C,,". Certificate checks
	// stay on; use it without IgnoreCertErrors.
	TrustCAs []string
	// ResolveOnly, when not empty, are the only host names (or IP
	// literals) the browser may resolve or connect to by name: every other
	// name fails as "not found" inside the browser, before any DNS query
	// (--host-resolver-rules "MAP * ~NOTFOUND, EXCLUDE name..."). Tests
	// set it so that nothing but their own server can be reached.
	ResolveOnly []string
	// NetLog, when not "", is the file Chromium writes its net log to
	// (--log-net-log, capture mode Default: no cookies, no bodies); read
	// it with NetLogSockets after Close.
	NetLog string
	// ProfileDir is the folder in which the session makes its fresh
	// profile folder ("chromium-*", removed on Close); "" means the
	// system's temporary folder. Every Chromium process carries the
	// profile's path on its command line, so a run-unique ProfileDir makes
	// its processes easy to find.
	ProfileDir string
	// Stock runs Chromium with its own defaults for everything that
	// changes how a page loads (Changes: HTTPS upgrades, QUIC, HTTPS
	// records, the resolver and network service defaults); Resolver and
	// HTTPSRR are then not applied.
	Stock bool
	// HAR makes Load return the page's HAR (Page.HAR: package har, built
	// from the tab's DevTools network events).
	HAR bool
	// Log receives the session's events; nil discards them.
	Log *slog.Logger
}

// ServiceHosts are the hostnames of Chromium's own services (component
// and extension updates, network time) that it looks up at start even with
// background networking off (seen with Chromium 156 in the testbed's
// resolver log). Flags maps them to "not found" inside the browser.
// None of them is a host of a tp5n page.
var ServiceHosts = []string{"update.googleapis.com", "clients2.google.com", "accounts.google.com", "redirector.gvt1.com", "edgedl.me.gvt1.com"}

// Change is one way a session's Chromium departs from stock Chromium: a
// command-line switch (Flag, e.g. "--disable-quic") or a feature (Feature,
// e.g. "HttpsUpgrades") turned on or off (On), and why. Stock changes are
// kept by a session with Options.Stock too: they quiet the browser's own
// traffic, fit it to the testbed's machine or stand in for what the
// testbed lacks (a real CA), and change nothing in how a page loads.
type Change struct {
	Flag    string
	Feature string
	On      bool
	Why     string
	Stock   bool
}

// String is the change as a reader names it: the flag, or "feature F on"
// or "off".
func (c Change) String() string {
	if c.Feature == "" {
		return c.Flag
	}
	if c.On {
		return "feature " + c.Feature + " on"
	}
	return "feature " + c.Feature + " off"
}

const (
	whyQuiet  = "Chromium's own background traffic (updates, sync, reporting, field trials): not page traffic, and with no Internet in the testbed it only fails"
	whyHost   = "runs as root, headless, without a display, GPU or keychain in a network namespace"
	whyTab    = "every page is loaded in a new tab of a headless browser, which Chromium would otherwise treat as hidden and throttle"
	whyPageUI = "no dialogs or first-run pages in a measured session"
)

// staticChanges are the changes of every session, in Flags order.
var staticChanges = []Change{
	{Flag: "--headless", Why: whyHost, Stock: true},
	{Flag: "--no-sandbox", Why: whyHost, Stock: true},
	{Flag: "--disable-gpu", Why: whyHost, Stock: true},
	{Flag: "--disable-quic", Why: "the replay origin and pepd speak TCP only (pepd intercepts TCP 80/443, not UDP 443); stock Chromium uses QUIC only after an Alt-Svc h3 from the server, which the replay origin never sends, so stock loads here stay on TCP too"},
	{Flag: "--no-first-run", Why: whyPageUI, Stock: true},
	{Flag: "--no-default-browser-check", Why: whyPageUI, Stock: true},
	{Flag: "--disable-background-networking", Why: whyQuiet, Stock: true},
	{Flag: "--disable-component-update", Why: whyQuiet, Stock: true},
	{Flag: "--disable-sync", Why: whyQuiet, Stock: true},
	{Flag: "--disable-default-apps", Why: whyQuiet, Stock: true},
	{Flag: "--disable-extensions", Why: whyQuiet, Stock: true},
	{Flag: "--disable-breakpad", Why: whyQuiet, Stock: true},
	{Flag: "--disable-domain-reliability", Why: whyQuiet, Stock: true},
	{Flag: "--disable-client-side-phishing-detection", Why: whyQuiet, Stock: true},
	{Flag: "--no-pings", Why: "hyperlink auditing pings: none are sent during a page load without clicks", Stock: true},
	{Flag: "--metrics-recording-only", Why: whyQuiet, Stock: true},
	{Flag: "--safebrowsing-disable-auto-update", Why: whyQuiet, Stock: true},
	{Flag: "--disable-dev-shm-usage", Why: whyHost, Stock: true},
	{Flag: "--disable-background-timer-throttling", Why: whyTab, Stock: true},
	{Flag: "--disable-renderer-backgrounding", Why: whyTab, Stock: true},
	{Flag: "--disable-backgrounding-occluded-windows", Why: whyTab, Stock: true},
	{Flag: "--disable-hang-monitor", Why: whyPageUI, Stock: true},
	{Flag: "--disable-popup-blocking", Why: whyPageUI, Stock: true},
	{Flag: "--password-store=basic", Why: whyHost, Stock: true},
	{Flag: "--use-mock-keychain", Why: whyHost, Stock: true},
	{Flag: "--mute-audio", Why: whyHost, Stock: true},
	{Flag: "--hide-scrollbars", Why: "no scrollbars in headless rendering; no effect on loading", Stock: true},
	{Feature: "NetworkService", On: true, Why: "on by default; named so that the feature list is explicit"},
	{Feature: "NetworkServiceInProcess", On: true, Why: "the network stack runs in the browser process (one process whose network namespace is the phone's); stock runs it in a utility process"},
	{Feature: "HttpsUpgrades", Why: "stock Chromium tries https:// first for every http:// navigation and falls back to http:// when that fails; the replay origin serves every host over TLS too (test CA, h2), so with the upgrade the pages load over https, where pepd can only splice (url mode rewrites nothing): the testbed measures the paper's http:// pages"},
	{Feature: "Translate", Why: whyQuiet, Stock: true},
	{Feature: "MediaRouter", Why: whyQuiet, Stock: true},
	{Feature: "OptimizationHints", Why: whyQuiet, Stock: true},
	{Feature: "DialMediaRouteProvider", Why: whyQuiet, Stock: true},
	{Feature: "AutofillServerCommunication", Why: whyQuiet, Stock: true},
	{Feature: "CertificateTransparencyComponentUpdater", Why: whyQuiet, Stock: true},
	{Feature: "InterestFeedContentSuggestions", Why: whyQuiet, Stock: true},
	{Feature: "PrivacySandboxSettings4", Why: whyQuiet, Stock: true},
	{Feature: "NetworkTimeServiceQuerying", Why: whyQuiet, Stock: true},
}

// Changes returns every change of a session with opts from stock
// Chromium, in the order Flags writes them; with opts.Stock only the
// changes marked Stock (and the test CA's) remain.
func Changes(opts Options) []Change {
	cs := append([]Change(nil), staticChanges...)
	if opts.Resolver == ResolverSystem {
		cs = append(cs, Change{Feature: "AsyncDns", Why: "-resolver system: the system's getaddrinfo, whose answers Chromium caches 60 s whatever the TTL"})
	} else {
		cs = append(cs, Change{Feature: "AsyncDns", On: true, Why: "-resolver builtin: Chromium's own resolver, which honours TTLs; stated, not left to the platform's default"})
	}
	if opts.Unpartitioned {
		why := "-unpartitioned: connections and host cache shared across top-level sites, as in the seed paper's 2004 browser"
		cs = append(cs, Change{Feature: "PartitionConnectionsByNetworkIsolationKey", Why: why, Stock: true}, Change{Feature: "SplitHostCacheByNetworkAnonymizationKey", Why: why, Stock: true})
	}
	for _, f := range opts.DisableFeatures {
		cs = append(cs, Change{Feature: f, Why: "-disable-features", Stock: true})
	}
	if opts.HTTPSRR {
		cs = append(cs, Change{Feature: "UseDnsHttpsSvcb", On: true, Why: "-https-rr: HTTPS records (type 65) asked beside A records, as stock Chromium does"})
	} else {
		cs = append(cs, Change{Feature: "UseDnsHttpsSvcb", Why: "one DNS query crosses the link per name, as the seed paper counted; stock Chromium also asks for HTTPS records (a second query per name)"})
	}
	var rules []string
	if len(opts.ResolveOnly) > 0 {
		rules = append(rules, "MAP * ~NOTFOUND")
		for _, h := range opts.ResolveOnly {
			rules = append(rules, "EXCLUDE "+h)
		}
	} else {
		for _, h := range ServiceHosts {
			rules = append(rules, "MAP "+h+" ~NOTFOUND")
		}
	}
	why := "Chromium's own service hosts, looked up at start whatever the flags above say, fail at once without a DNS query, so that their lookups do not count as the first page's traffic"
	if len(opts.ResolveOnly) > 0 {
		why = "ResolveOnly (tests): every name but the test's own fails at once inside the browser, before any DNS query: nothing outside can be reached"
	}
	cs = append(cs, Change{Flag: "--host-resolver-rules=" + strings.Join(rules, ", "), Why: why, Stock: true})
	if opts.NetLog != "" {
		why := "NetLog: Chromium's net log, to check where its sockets went (no cookies, no bodies); no effect on loading"
		cs = append(cs, Change{Flag: "--log-net-log=" + opts.NetLog, Why: why, Stock: true}, Change{Flag: "--net-log-capture-mode=Default", Why: why, Stock: true})
	}
	if opts.IgnoreCertErrors {
		cs = append(cs, Change{Flag: "--ignore-certificate-errors", Why: "the replay origin's test CA stands in for the real sites' certificates", Stock: true})
	}
	if !opts.Stock {
		return cs
	}
	var out []Change
	for _, c := range cs {
		if c.Stock {
			out = append(out, c)
		}
	}
	return out
}

// Flags returns the Chromium command-line flags of a session with opts, in
// order, without the ones chromedp adds (pipe, user data dir, about:blank):
// the switches of Changes(opts), then --enable-features and
// --disable-features with the features turned on and off, then the rest
// (host resolver rules, net log, certificate errors).
func Flags(opts Options) []string {
	var f, enable, disable, tail []string
	for _, c := range Changes(opts) {
		switch {
		case c.Feature != "" && c.On:
			enable = append(enable, c.Feature)
		case c.Feature != "":
			disable = append(disable, c.Feature)
		case strings.HasPrefix(c.Flag, "--host-resolver-rules=") || strings.HasPrefix(c.Flag, "--log-net-log=") ||
			strings.HasPrefix(c.Flag, "--net-log-capture-mode=") || c.Flag == "--ignore-certificate-errors":
			tail = append(tail, c.Flag)
		default:
			f = append(f, c.Flag)
		}
	}
	if len(enable) > 0 {
		f = append(f, "--enable-features="+strings.Join(enable, ","))
	}
	if len(disable) > 0 {
		f = append(f, "--disable-features="+strings.Join(disable, ","))
	}
	return append(f, tail...)
}

// nssHome makes profile/home/.pki/nssdb, the NSS store Chromium on Linux
// reads from $HOME, trusting each CA in cas (PEM files) for TLS servers,
// and returns the home folder. Errors carry certutil's output.
func nssHome(profile string, cas []string) (string, error) {
	home := filepath.Join(profile, "home")
	db := filepath.Join(home, ".pki", "nssdb")
	if err := os.MkdirAll(db, 0o700); err != nil {
		return "", fmt.Errorf("browser: nss: %w", err)
	}
	run := func(args ...string) error {
		out, err := exec.Command("certutil", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("browser: certutil %s: %w: %s (Debian package libnss3-tools)", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
		return nil
	}
	if err := run("-N", "-d", "sql:"+db, "--empty-password"); err != nil {
		return "", err
	}
	for i, ca := range cas {
		if err := run("-A", "-d", "sql:"+db, "-n", fmt.Sprintf("pep-ca-%d", i), "-t", "C,,", "-i", ca); err != nil {
			return "", err
		}
	}
	return home, nil
}

// Session is one browser with a fresh profile. Load pages one at a time;
// Close ends the browser. A Session is not safe for concurrent Loads.
type Session struct {
	opts      Options
	log       *slog.Logger
	allocCtx  context.Context
	allocStop context.CancelFunc
	browser   context.Context
	stop      context.CancelFunc
	version   string
	profile   string
	// conns maps the DevTools connection ids the session has seen to
	// their remote address, across pages.
	conns map[float64]string
}

// NewSession starts Chromium with a fresh profile folder (removed on
// Close) and waits until DevTools answers. Errors name the binary and carry
// Chromium's output.
func NewSession(ctx context.Context, opts Options) (*Session, error) {
	if opts.ExecPath == "" {
		opts.ExecPath = "chromium"
	}
	if opts.Resolver == "" {
		opts.Resolver = ResolverBuiltin
	}
	if opts.PageTimeout == 0 {
		opts.PageTimeout = 3 * time.Minute
	}
	if opts.Settle == 0 {
		opts.Settle = 500 * time.Millisecond
	}
	if opts.SettleMax == 0 {
		opts.SettleMax = 10 * time.Second
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	path, err := exec.LookPath(opts.ExecPath)
	if err != nil {
		return nil, fmt.Errorf("browser: %w", err)
	}
	profile, err := os.MkdirTemp(opts.ProfileDir, "chromium-")
	if err != nil {
		return nil, fmt.Errorf("browser: profile: %w", err)
	}
	var home string
	if len(opts.TrustCAs) > 0 {
		if home, err = nssHome(profile, opts.TrustCAs); err != nil {
			os.RemoveAll(profile)
			return nil, err
		}
	}
	aopts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(path), chromedp.UserDataDir(profile)}
	for _, f := range Flags(opts) {
		name, val, hasVal := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if hasVal {
			aopts = append(aopts, chromedp.Flag(name, val))
		} else {
			aopts = append(aopts, chromedp.Flag(name, true))
		}
	}
	ns := opts.NS
	aopts = append(aopts, chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
		if home != "" {
			cmd.Env = append(cmd.Environ(), "HOME="+home)
		}
		if ns != "" {
			ip, _ := exec.LookPath("ip")
			cmd.Path = ip
			cmd.Args = append([]string{"ip", "netns", "exec", ns, path}, cmd.Args[1:]...)
		}
	}))
	s := &Session{opts: opts, log: log, profile: profile, conns: map[float64]string{}}
	s.allocCtx, s.allocStop = chromedp.NewExecAllocator(context.WithoutCancel(ctx), aopts...)
	s.browser, s.stop = chromedp.NewContext(s.allocCtx)
	// The first Run starts the browser and binds its life to the context
	// it gets, so it gets s.browser itself; a watchdog bounds the start.
	watchdog := time.AfterFunc(time.Minute, s.stop)
	stopStart := context.AfterFunc(ctx, s.stop)
	product, err := chromedp.Run(s.browser, chromedp.Evaluate[string](`navigator.userAgent`))
	watchdog.Stop()
	stopStart()
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("browser: start %s in %q: %w", path, ns, err)
	}
	s.version = product
	log.Info("browser started", "exec", path, "ns", ns, "resolver", opts.Resolver, "user_agent", product, "flags", strings.Join(Flags(opts), " "))
	return s, nil
}

// UserAgent returns the browser's user agent string (it names the version).
func (s *Session) UserAgent() string { return s.version }

// ClearHTTPCache empties the browser's HTTP cache (DevTools
// Network.clearBrowserCache) and keeps everything else: connections, the
// host cache. A test uses it to make the next load go to the network.
func (s *Session) ClearHTTPCache(ctx context.Context) error {
	tab, closeTab := chromedp.NewContext(s.browser)
	defer closeTab()
	if _, err := chromedp.Call(tab, network.ClearBrowserCache, cdp.Empty{}); err != nil {
		return fmt.Errorf("browser: clear cache: %w", err)
	}
	return nil
}

// Close closes the browser gracefully (killing it after a grace period),
// kills any of its processes still running (found by the profile path on
// their command lines, as chromedp does for its own temporary profiles) and
// removes its profile. Calling it more than once is safe.
func (s *Session) Close() error {
	if s.stop == nil {
		return nil
	}
	s.stop()
	s.allocStop()
	s.stop = nil
	for i := 0; i < 50 && killProfile(s.profile) > 0; i++ {
		time.Sleep(20 * time.Millisecond) // children can fork while their parent dies
	}
	if err := os.RemoveAll(s.profile); err != nil {
		return fmt.Errorf("browser: %w", err)
	}
	return nil
}

// killProfile sends SIGKILL to every process with --user-data-dir=dir on
// its command line and returns how many it found.
func killProfile(dir string) int {
	want := []byte("--user-data-dir=" + dir + "\x00")
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(cmd, want) {
			syscall.Kill(pid, syscall.SIGKILL)
			n++
		}
	}
	return n
}

// Page is what one page load measured. Times are from navigationStart
// (Navigation Timing Level 2: the navigation entry's startTime, 0).
type Page struct {
	URL string
	// Loaded is true when the load event ended within the page timeout.
	Loaded bool
	// Err says why the page did not load ("" when it did).
	Err string
	// PLT is navigationStart to loadEventEnd; DCL navigationStart to
	// domContentLoadedEventEnd.
	PLT, DCL time.Duration
	// TTFB is navigationStart to the document's responseStart (Navigation
	// Timing Level 2: the first byte of the top-level document's
	// response). FCP is the first-contentful-paint entry's startTime (Paint
	// Timing); LCP the last largest-contentful-paint candidate's renderTime
	// (loadTime for images without Timing-Allow-Origin), read with a
	// buffered PerformanceObserver after the page settled (Largest
	// Contentful Paint, W3C). Zero when the page has none (no contentful
	// element) or did not load.
	TTFB, FCP, LCP time.Duration
	// LCPURL is the LCP element's resource (the candidate's url: an
	// image's, a background image's, a video poster's), "" when the
	// element is text or the page has no LCP.
	LCPURL string
	// Bytes is the sum over finished requests of Network.loadingFinished's
	// encodedDataLength: response bytes as received, headers included.
	Bytes int64
	// Requests counts Network.requestWillBeSent events of http(s) URLs,
	// redirects included (each hop is a request).
	Requests int
	// Failed counts the requests that did not succeed, each once: those
	// with a response status of 400 or more, and those ending in
	// Network.loadingFailed without such a response (connection and DNS
	// errors, aborts). HTTPErrors counts the first kind alone (Chromium
	// also aborts a script that got a 404).
	Failed, HTTPErrors int
	// DocURL is the top-level document's URL as the browser finally
	// requested it: after its redirects, Chromium's internal ones
	// included (a 307 to https:// for a name on its HSTS preload list,
	// whose page a gateway that never decrypts cannot change). "" when no
	// document was requested.
	DocURL string
	// Hosts maps each requested hostname to its number of requests;
	// DocHosts does the same for document requests alone (the top-level
	// page, its redirects and frames): the names a browser must resolve
	// whatever a proxy rewrites.
	Hosts, DocHosts map[string]int
	// Conns counts the connections this page's responses came over that
	// no earlier page of the session used (Network.responseReceived's
	// connectionId), by remote IP address in ConnsByIP; ConnsReused counts
	// those opened by earlier pages and used again. Connections that never
	// carried a response (failed, or preconnected and unused) are not
	// counted: the radio link's SYN counter sees those.
	Conns, ConnsReused int
	ConnsByIP          map[string]int
	// Protocols counts responses by "remote-IP protocol" (Network.Response
	// remoteIPAddress and protocol, e.g. "192.0.2.12 h2", "198.19.0.5
	// http/1.1"), cached ones left out.
	Protocols map[string]int
	// Wall is the time Load took, settling included.
	Wall time.Duration
	// HAR is the load's HTTP archive (Options.HAR; nil without): every
	// request the tab made until the page settled, with its timings,
	// initiator and connection, and the page's marks (PLT, DCL, TTFB, FCP,
	// LCP). A page that did not load has its requests up to the timeout.
	HAR *har.HAR
}

// netLog tracks the network events of one tab.
type netLog struct {
	mu        sync.Mutex
	page      *Page
	seen      map[float64]string // the session's connections (Session.conns)
	used      map[float64]bool   // this page's
	inflight  map[network.RequestID]bool
	httpError map[network.RequestID]bool // got a status >= 400
	docID     network.RequestID          // the top-level document's request (Page.DocURL)
	last      time.Time
	har       *harLog // nil: no HAR
}

func (n *netLog) event(ev any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.har != nil {
		n.har.event(ev)
	}
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		if e.Request == nil || !(strings.HasPrefix(e.Request.URL, "http:") || strings.HasPrefix(e.Request.URL, "https:")) {
			return
		}
		n.page.Requests++
		if e.Type == network.ResourceTypeDocument && (n.docID == "" || n.docID == e.RequestID) {
			// The first document request is the top-level navigation; a
			// redirect keeps its request ID (CDP's redirectResponse).
			n.docID, n.page.DocURL = e.RequestID, e.Request.URL
		}
		if u, err := url.Parse(e.Request.URL); err == nil {
			n.page.Hosts[u.Hostname()]++
			if e.Type == network.ResourceTypeDocument {
				n.page.DocHosts[u.Hostname()]++
			}
		}
		n.inflight[e.RequestID] = true
	case *network.EventResponseReceived:
		if r := e.Response; r != nil && r.ConnectionID != 0 && !r.FromDiskCache && !r.FromServiceWorker && !r.FromPrefetchCache && !n.used[r.ConnectionID] {
			n.used[r.ConnectionID] = true
			if _, old := n.seen[r.ConnectionID]; old {
				n.page.ConnsReused++
			} else {
				n.seen[r.ConnectionID] = r.RemoteIPAddress
				n.page.Conns++
				n.page.ConnsByIP[r.RemoteIPAddress]++
			}
		}
		if r := e.Response; r != nil && r.Protocol != "" && !r.FromDiskCache && !r.FromServiceWorker && !r.FromPrefetchCache {
			n.page.Protocols[r.RemoteIPAddress+" "+r.Protocol]++
		}
		if e.Response != nil && e.Response.Status >= 400 && !n.httpError[e.RequestID] {
			n.httpError[e.RequestID] = true
			n.page.HTTPErrors++
			n.page.Failed++
		}
	case *network.EventLoadingFinished:
		n.page.Bytes += int64(e.EncodedDataLength)
		delete(n.inflight, e.RequestID)
	case *network.EventLoadingFailed:
		if n.inflight[e.RequestID] {
			if !n.httpError[e.RequestID] {
				n.page.Failed++
			}
			delete(n.inflight, e.RequestID)
		}
	default:
		return
	}
	n.last = time.Now()
}

// quietFor reports whether no request is in flight and no event came for d.
func (n *netLog) quietFor(d time.Duration) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.inflight) == 0 && time.Since(n.last) >= d
}

// navTiming is the part of the PerformanceNavigationTiming entry Load reads.
type navTiming struct {
	TimeOrigin               float64 `json:"timeOrigin"` // ms since the epoch
	LoadEventEnd             float64 `json:"loadEventEnd"`
	DOMContentLoadedEventEnd float64 `json:"domContentLoadedEventEnd"`
}

const navTimingJS = `(() => { const e = performance.getEntriesByType('navigation')[0];
  return e ? {timeOrigin: performance.timeOrigin, loadEventEnd: e.loadEventEnd, domContentLoadedEventEnd: e.domContentLoadedEventEnd} : {timeOrigin: performance.timeOrigin, loadEventEnd: 0, domContentLoadedEventEnd: 0}; })()`

// Load opens a new tab, navigates it to rawURL, waits for loadEventEnd and
// then for the network to settle (Options.Settle), reads Navigation Timing
// and closes the tab. A page that does not load in time is returned with
// Loaded false and Err set, and a nil error: only a broken browser is an
// error. The browser keeps its connections between tabs, as a user's would.
func (s *Session) Load(ctx context.Context, rawURL string) (Page, error) {
	start := time.Now()
	p := Page{URL: rawURL, Hosts: map[string]int{}, DocHosts: map[string]int{}, ConnsByIP: map[string]int{}, Protocols: map[string]int{}}
	n := &netLog{page: &p, seen: s.conns, used: map[float64]bool{}, inflight: map[network.RequestID]bool{},
		httpError: map[network.RequestID]bool{}, last: start}
	if s.opts.HAR {
		n.har = newHARLog()
	}
	tab, closeTab := chromedp.NewContext(s.browser)
	defer closeTab()
	// Listen opens the tab; chromedp enables the Network domain on it.
	if err := chromedp.Listen(tab, n.event); err != nil {
		if s.browser.Err() != nil || ctx.Err() != nil {
			return p, fmt.Errorf("browser: open tab for %q: %w", rawURL, errors.Join(err, ctx.Err(), context.Cause(s.browser)))
		}
		return p, fmt.Errorf("browser: open tab for %q: %w", rawURL, err)
	}
	pctx, cancel := context.WithTimeout(tab, s.opts.PageTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()

	err := chromedp.Do(pctx,
		chromedp.Navigate(rawURL),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Poll[bool](`(() => { const e = performance.getEntriesByType('navigation')[0]; return !!e && e.loadEventEnd > 0; })()`,
				chromedp.WithPollingInterval(20*time.Millisecond))(ctx, t)
			return err
		}),
	)
	var nt navTiming
	if err == nil {
		nt, err = chromedp.Run(pctx, chromedp.Evaluate[navTiming](navTimingJS))
	}
	if err == nil {
		p.Loaded = true
		p.PLT = msDuration(nt.LoadEventEnd)
		p.DCL = msDuration(nt.DOMContentLoadedEventEnd)
		if s.opts.Settle > 0 {
			t := time.NewTicker(50 * time.Millisecond)
			limit := time.After(s.opts.SettleMax)
		settle:
			for !n.quietFor(s.opts.Settle) {
				select {
				case <-t.C:
				case <-limit:
					break settle
				case <-pctx.Done():
					break settle
				}
			}
			t.Stop()
		}
	} else {
		if ctx.Err() != nil {
			return p, fmt.Errorf("browser: load %q: %w", rawURL, ctx.Err())
		}
		if s.browser.Err() != nil {
			return p, fmt.Errorf("browser: load %q: browser lost: %w", rawURL, err)
		}
		p.Err = err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			p.Err = fmt.Sprintf("no loadEventEnd within %s", s.opts.PageTimeout)
		}
	}
	if p.Loaded {
		p.TTFB, p.FCP, p.LCP, p.LCPURL = paintTimes(pctx)
	}
	n.mu.Lock()
	out := p
	out.Hosts, out.DocHosts, out.ConnsByIP = maps.Clone(p.Hosts), maps.Clone(p.DocHosts), maps.Clone(p.ConnsByIP)
	out.Protocols = maps.Clone(p.Protocols)
	if n.har != nil {
		out.HAR = n.har.build(pageInfo{url: rawURL, userAgent: s.version, timeOrigin: nt.TimeOrigin, p: &out}, time.Now())
	}
	n.mu.Unlock()
	out.Wall = time.Since(start)
	s.log.Debug("page", "url", rawURL, "loaded", out.Loaded, "plt", out.PLT, "ttfb", out.TTFB, "fcp", out.FCP, "lcp", out.LCP, "requests", out.Requests, "bytes", out.Bytes, "failed", out.Failed, "err", out.Err)
	return out, nil
}

// paintJS starts a buffered observer of largest-contentful-paint entries
// that leaves the latest candidate's time in window.__pepLCP and its url
// in window.__pepLCPURL (-1 until the
// buffered entries arrive, which is a task later).
const paintJS = `(() => { window.__pepLCP = -1; window.__pepLCPURL = '';
  try { new PerformanceObserver((l) => { let v = 0, u = ''; for (const x of l.getEntries()) { const t = x.renderTime || x.loadTime || x.startTime; if (t >= v) { v = t; u = x.url || ''; } } window.__pepLCP = v; window.__pepLCPURL = u; })
      .observe({type: 'largest-contentful-paint', buffered: true}); } catch (e) { window.__pepLCP = 0; }
  setTimeout(() => { if (window.__pepLCP < 0) window.__pepLCP = 0; }, 500);
  return true; })()`

type paintTiming struct {
	TTFB   float64 `json:"ttfb"`
	FCP    float64 `json:"fcp"`
	LCP    float64 `json:"lcp"`
	LCPURL string  `json:"lcpURL"`
}

const paintReadJS = `(() => { const e = performance.getEntriesByType('navigation')[0];
  const f = performance.getEntriesByName('first-contentful-paint')[0];
  return {ttfb: e ? e.responseStart : 0, fcp: f ? f.startTime : 0, lcp: window.__pepLCP > 0 ? window.__pepLCP : 0,
    lcpURL: window.__pepLCP > 0 ? window.__pepLCPURL : ''}; })()`

// paintTimes reads the document's TTFB, FCP and LCP, and the LCP
// element's resource URL (Page). Errors leave zeros: the paint metrics
// never fail a load that loaded.
func paintTimes(ctx context.Context) (ttfb, fcp, lcp time.Duration, lcpURL string) {
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](paintJS)); err != nil {
		return 0, 0, 0, ""
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`window.__pepLCP >= 0`, chromedp.WithPollingInterval(10*time.Millisecond), chromedp.WithPollingTimeout(2*time.Second))); err != nil {
		return 0, 0, 0, ""
	}
	pt, err := chromedp.Run(ctx, chromedp.Evaluate[paintTiming](paintReadJS))
	if err != nil {
		return 0, 0, 0, ""
	}
	return msDuration(pt.TTFB), msDuration(pt.FCP), msDuration(pt.LCP), pt.LCPURL
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
