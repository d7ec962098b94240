// Command pepd is the appliance's one process (DESIGN.md "pepd"): the HTTP
// path in front of Squid (internal/httpproxy) with its listeners for
// nftables REDIRECT and TPROXY (internal/intercept), the DNS rewriter
// (internal/dnsproxy), the TLS SNI splice for VIP:443 (internal/splice),
// the admin API (internal/admin), and the run-time mode switch.
//
//	pepd -config /etc/pep/pepd.yaml [-mode url] [-http-listen :3129] ...
//
// Flags override the file (internal/config). Signals: SIGHUP reloads the
// config file (see reload for what changes without a restart); SIGTERM and
// SIGINT shut down gracefully (requests in flight get 10s). Under systemd
// (Type=notify) pepd sends READY=1 once every listener is up, and, when
// WatchdogSec is set, WATCHDOG=1 only while its HTTP listener answers a
// real request (httpproxy.Check): a hung pepd stops pinging and systemd
// restarts it.
//
// main only wires: each component is built in build, started in start,
// reloaded in reload and stopped in shutdown.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"pep/internal/admin"
	"pep/internal/cachepolicy"
	"pep/internal/config"
	"pep/internal/dnsproxy"
	"pep/internal/guard"
	"pep/internal/hints"
	"pep/internal/httpproxy"
	"pep/internal/intercept"
	"pep/internal/mode"
	"pep/internal/optimize"
	"pep/internal/rewrite"
	"pep/internal/splice"
	"pep/internal/squid"
	"pep/internal/squiddns"
	"pep/internal/viptls"
)

const pepdUsage = `pepd: the pep appliance's one process, a carrier-side performance enhancing
proxy (DNS rewriting and URL rewriting in front of Squid, paper: Rodriguez et
al., WWW 2004). It serves subscribers' HTTP (intercepted or to the VIP) through
Squid, rewrites DNS answers in dns mode, splices TLS to the VIP by SNI, and
serves its admin API (mode switch, metrics, health). Configuration: a YAML file
(-config, example configs/pepd.yaml); flags override it. SIGHUP reloads it.

usage: pepd [-config FILE] [flags]
       pepd -check -config FILE     validate the configuration and exit

`

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run is main with its arguments and error stream, returning the exit
// status: 0 after a clean shutdown, 1 on a runtime error, 2 on bad flags
// or config.
func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("pepd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), pepdUsage)
		fs.PrintDefaults()
	}
	flags := config.RegisterFlags(fs)
	check := fs.Bool("check", false, "validate the configuration (file and flags), print the result and exit: 0 valid, 2 not (as nginx -t, squid -k parse)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // asked for: -h, -help
		}
		return 2
	}
	cfg, err := loadConfig(flags)
	if err != nil {
		fmt.Fprintf(stderr, "pepd: %v\n", err)
		return 2
	}
	if *check {
		src := flags.Config
		if src == "" {
			src = "built-in defaults"
		}
		fmt.Fprintf(stderr, "pepd: configuration %s is valid (mode %s, vip %s, squid %s)\n", src, cfg.Mode, cfg.VIP, cfg.Squid)
		return 0
	}
	level := new(slog.LevelVar)
	log := newLogger(stderr, cfg.Log, level)

	setProcs(cfg.Procs, log)
	d, err := build(cfg, log, level)
	if err != nil {
		log.Error("startup failed", "err", err)
		return 1
	}
	if err := d.start(); err != nil {
		log.Error("startup failed", "err", err)
		d.shutdown()
		return 1
	}
	log.Info("pepd started", "mode", cfg.Mode, "vip", cfg.VIP, "http", cfg.Listen.HTTP, "tproxy", cfg.Listen.TPROXY,
		"admin", cfg.Listen.Admin, "squid", cfg.Squid, "proxy_protocol", cfg.SquidProxyProtocol)
	daemon.SdNotify(false, daemon.SdNotifyReady)

	ctx, stopWatchdog := context.WithCancel(context.Background())
	go d.watchdog(ctx)

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	status := 0
loop:
	for {
		select {
		case sig := <-sigs:
			if sig != syscall.SIGHUP {
				log.Info("shutting down", "signal", sig)
				break loop
			}
			daemon.SdNotify(false, daemon.SdNotifyReloading)
			if err := d.reload(flags); err != nil {
				log.Error("reload failed; keeping the running config", "err", err)
			}
			daemon.SdNotify(false, daemon.SdNotifyReady)
		case err := <-d.errc:
			log.Error("a server failed", "err", err)
			status = 1
			break loop
		}
	}
	daemon.SdNotify(false, daemon.SdNotifyStopping)
	stopWatchdog()
	d.shutdown()
	return status
}

// loadConfig reads the file named by -config (or takes the defaults) and
// applies the flags given.
func loadConfig(f *config.Flags) (*config.Config, error) {
	var cfg *config.Config
	if f.Config != "" {
		c, err := config.Load(f.Config)
		if err != nil {
			return nil, err
		}
		cfg = c
	} else {
		c := config.Default()
		cfg = &c
	}
	if err := f.Apply(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

func newLogger(w io.Writer, c config.Log, level *slog.LevelVar) *slog.Logger {
	level.Set(parseLevel(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func parseLevel(s string) slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(s)) // validated by config
	return l
}

// service is one server pepd runs: serve blocks until shutdown is called
// (and returns nil or http.ErrServerClosed then).
type service struct {
	name     string
	serve    func() error
	shutdown func(context.Context) error
}

// pepd is the running process: its config and components.
type pepd struct {
	cfg      *config.Config
	log      *slog.Logger
	level    *slog.LevelVar
	reg      *prometheus.Registry
	mode     *mode.Switch
	optimize *optimize.Policy
	// optimizer is the optimizer (Squid's parent); nil without
	// optimize.listen.
	optimizer *optimize.Server
	// hints are the dependency hints (internal/hints), switch and learner.
	hints *httpproxy.Hints
	// cache is the cache policy (admission, marks' counters) and
	// cacheStatus what GET /cache shows (internal/cachepolicy).
	cache       *cachepolicy.Policy
	cacheStatus *cachepolicy.StatusSource
	rwm         *rewrite.Metrics
	// res is the one cache of carrier-resolver answers (resolver): the
	// HTTP path resolves a request's host before Squid, and the optimizer
	// the same host after it, on a miss; sharing the answers saves the
	// second lookup's round trip; Squid's lookups are answered from it too
	// (listen.squid_dns). Swapped on SIGHUP when the resolvers change,
	// read by those answers' goroutines.
	res      atomic.Pointer[httpproxy.Resolver]
	proxy    *httpproxy.Proxy
	httpSrv  *httpproxy.Server
	healthAt string // the address the watchdog probes

	// services are started by start and stopped by shutdown, in order.
	services []service
	// reloaders apply a new config to a component on SIGHUP.
	reloaders []func(*config.Config) error
	errc      chan error
}

// build creates every component from cfg and opens the listeners (so that
// a port in use fails the start, before READY=1). Adding a component: open
// its listener here, append a service (start/stop) and, if SIGHUP changes
// it, a reloader.
func build(cfg *config.Config, log *slog.Logger, level *slog.LevelVar) (*pepd, error) {
	d := &pepd{cfg: cfg, log: log, level: level, reg: prometheus.NewRegistry(), mode: mode.NewSwitch(cfg.Mode), errc: make(chan error, 8)}
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := admin.RegisterMetrics(d.reg, d.mode); err != nil {
		return nil, err
	}

	// HTTP path.
	hm, err := httpproxy.NewMetrics(d.reg)
	if err != nil {
		return nil, err
	}
	if d.rwm, err = rewrite.NewMetrics(d.reg); err != nil {
		return nil, err
	}
	st, err := d.httpSettings(cfg)
	if err != nil {
		return nil, err
	}
	if err := d.buildOptimizer(cfg); err != nil {
		return nil, err
	}
	if err := d.buildCache(cfg); err != nil {
		return nil, err
	}
	if err := d.buildHints(cfg); err != nil {
		return nil, err
	}
	po := cfg.HTTP.ProxyOptions()
	po.VIP, po.VIPNames, po.Squid, po.SquidProxyProtocol = cfg.VIP, cfg.HTTPS.VIPNames(), cfg.Squid, cfg.SquidProxyProtocol
	po.Mode, po.Log, po.Metrics, po.Settings = d.mode, log, hm, st
	po.Optimize, po.Cache, po.Hints = d.optimize, d.cache, d.hints
	d.proxy, err = httpproxy.New(po)
	if err != nil {
		return nil, err
	}
	d.httpSrv = httpproxy.NewServer(d.proxy, cfg.HTTP.Limits(cfg.Radio, cfg.HTTPS), log, hm)
	// Shutdown of the HTTP server closes its listeners and waits for the
	// requests in flight, so it comes first.
	d.services = append(d.services, service{name: "http", serve: func() error { return nil }, shutdown: d.httpSrv.Shutdown})
	for _, l := range []struct {
		addr string
		kind intercept.Kind
	}{{cfg.Listen.HTTP, intercept.Redirect}, {cfg.Listen.TPROXY, intercept.TPROXY}} {
		if l.addr == "" {
			continue
		}
		ln, err := intercept.Listen(context.Background(), l.kind, l.addr)
		if err != nil {
			d.closeListeners()
			return nil, err
		}
		if d.healthAt == "" {
			d.healthAt = ln.Addr().String()
		}
		d.services = append(d.services, service{
			name:     "http-" + l.kind.String() + " " + ln.Addr().String(),
			serve:    func() error { return d.httpSrv.Serve(ln) },
			shutdown: func(context.Context) error { return ln.Close() },
		})
	}
	d.reloaders = append(d.reloaders, func(c *config.Config) error {
		st, err := d.httpSettings(c)
		if err != nil {
			return err
		}
		return d.proxy.Reload(st)
	})

	// DNS rewriter and SNI splice (dns mode, issue 3).
	if err := d.buildDNS(cfg); err != nil {
		d.closeListeners()
		return nil, err
	}

	// Admin API.
	if cfg.Listen.Admin != "" {
		ln, err := net.Listen("tcp", cfg.Listen.Admin)
		if err != nil {
			d.closeListeners()
			return nil, fmt.Errorf("admin: listen %q: %w", cfg.Listen.Admin, err)
		}
		srv := &http.Server{Handler: admin.Handler(admin.Options{Mode: d.mode, Optimize: d.optimize.Switch, Hints: d.hints.Switch, HintsReset: d.hints.Learner.Reset, OptimizeReset: d.optimizeReset(),
			Cache: d.cacheStatus.Status, Gatherer: d.reg, Health: d.health, Log: log}),
			ReadHeaderTimeout: 5 * time.Second}
		d.services = append(d.services, service{name: "admin " + ln.Addr().String(),
			serve: func() error { return srv.Serve(ln) }, shutdown: srv.Shutdown})
	}
	return d, nil
}

// optimizeReset is DELETE /optimize/results' action: nil without an
// optimizer.
func (d *pepd) optimizeReset() func() {
	if d.optimizer == nil {
		return nil
	}
	return d.optimizer.ResetResults
}

// buildOptimizer creates the optimizer's policy (the switch, the
// exclusion list: what pepd marks) and, when optimize.listen is set, the
// optimizer itself, Squid's parent (internal/optimize). The switch and the
// exclusion list follow SIGHUP; the rest needs a restart.
func (d *pepd) buildOptimizer(cfg *config.Config) error {
	om, err := optimize.NewMetrics(d.reg)
	if err != nil {
		return err
	}
	d.optimize = &optimize.Policy{Switch: optimize.NewSwitch(cfg.Optimize.Enabled), Metrics: om}
	if err := admin.RegisterOptimizeMetrics(d.reg, d.optimize.Switch); err != nil {
		return err
	}
	sites, err := optimize.LoadSites(cfg.Optimize.ExcludeFile)
	if err != nil {
		return err
	}
	d.optimize.SetSites(sites)
	d.reloaders = append(d.reloaders, func(c *config.Config) error {
		sites, err := optimize.LoadSites(c.Optimize.ExcludeFile)
		if err != nil {
			return err
		}
		d.optimize.SetSites(sites)
		if prev := d.optimize.Switch.Set(c.Optimize.Enabled); prev != c.Optimize.Enabled {
			d.log.Info("optimizer switched", "enabled", c.Optimize.Enabled, "by", "SIGHUP")
		}
		return nil
	})
	o := cfg.Optimize
	if o.Listen == "" {
		return nil
	}
	pol, err := d.policy(cfg)
	if err != nil {
		return err
	}
	res := d.resolver(cfg)
	oo := o.Options()
	oo.Lookup, oo.Control, oo.UpstreamTimeout = res.Lookup, pol.Control, cfg.HTTP.UpstreamTimeout
	oo.Metrics, oo.Log = om, d.log.With("component", "optimize")
	oo.Rewritten = func(mt string) bool { return d.proxy != nil && d.proxy.Rewrites(mt) }
	srv, err := optimize.New(oo)
	if err != nil {
		return err
	}
	d.optimizer = srv
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("optimize: listen %q: %w", o.Listen, err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	d.services = append(d.services, service{name: "optimize " + ln.Addr().String(),
		serve: func() error { return hs.Serve(ln) }, shutdown: hs.Shutdown})
	return nil
}

// buildHints creates the dependency learner and its switch (issue 26);
// the switch follows SIGHUP, the learner's sizes need a restart. Its
// series (pep_hints_*) exist from the start, on or off.
func (d *pepd) buildHints(cfg *config.Config) error {
	h := cfg.Hints
	l := hints.New(h.Options(cfg.HTTPS.Origins(cfg.VIP)))
	sw := hints.NewSwitch(h.Enabled)
	m, err := hints.Register(d.reg, l, sw)
	if err != nil {
		return err
	}
	d.hints = &httpproxy.Hints{Learner: l, Switch: sw, Metrics: m}
	d.hints.PrefetchPerSubscriber, d.hints.PrefetchMax = h.PrefetchBounds()
	d.reloaders = append(d.reloaders, func(c *config.Config) error {
		if prev := sw.Set(c.Hints.Enabled); prev != c.Hints.Enabled {
			d.log.Info("hints switched", "enabled", c.Hints.Enabled, "by", "SIGHUP")
		}
		l.SetOrigins(c.HTTPS.Origins(c.VIP)) // https.* follow SIGHUP
		return nil
	})
	return nil
}

// buildCache creates the cache policy (second-hit admission when
// cache.admission says so; the private opt-out's counter either way) and
// the status interface: Squid's cache manager read on loopback for GET
// /cache and for every /metrics scrape (pep_cache_*). SIGHUP switches
// admission on and off when pepd started with it; window and filter size
// need a restart.
func (d *pepd) buildCache(cfg *config.Config) error {
	k := cfg.Cache
	var adm *cachepolicy.Admission
	if k.SecondHit() {
		var err error
		if adm, err = cachepolicy.NewAdmission(k.AdmissionOptions()); err != nil {
			return err
		}
		d.log.Info("cache admission", "admission", k.Admission, "window", k.Window, "filter_bytes", adm.FilterBytes())
	}
	d.cache = cachepolicy.NewPolicy(adm, adm != nil)
	if err := d.cache.Register(d.reg); err != nil {
		return err
	}
	mgr := &squid.Manager{Addr: cfg.Squid, ProxyProtocol: cfg.SquidProxyProtocol, Timeout: k.StatusTimeout}
	if err := d.reg.Register(&cachepolicy.Collector{Manager: mgr}); err != nil {
		return err
	}
	d.cacheStatus = &cachepolicy.StatusSource{Policy: d.cache, Window: k.Window, Manager: mgr}
	d.reloaders = append(d.reloaders, func(c *config.Config) error {
		on := c.Cache.SecondHit()
		if on && adm == nil {
			d.log.Warn("cache.admission second-hit needs a restart (pepd started with it off)")
			return nil
		}
		if prev := d.cache.SetAdmission(on); prev != on {
			d.log.Info("cache admission switched", "admission", c.Cache.Admission, "by", "SIGHUP")
		}
		return nil
	})
	return nil
}

// buildDNS adds the DNS proxy (listen.dns, UDP and TCP) and the TLS SNI
// splice (listen.tls). The DNS proxy answers in every mode and rewrites
// only in dns mode; the splice serves in every mode, since phones keep the
// VIP cached for a whole vip_ttl after a switch. Their subscriber ranges,
// VIP and resolvers need a restart; SIGHUP re-reads the rewrite lists.
func (d *pepd) buildDNS(cfg *config.Config) error {
	pol, err := d.policy(cfg)
	if err != nil {
		return err
	}
	dp, err := dnsproxy.New(dnsproxy.Options{Config: cfg.DNS, VIP: cfg.VIP, VIP6: cfg.VIP6, Resolvers: cfg.Resolvers,
		Mode: d.mode, Guard: pol, Logger: d.log.With("component", "dnsproxy"), Registerer: d.reg})
	if err != nil {
		return err
	}
	if cfg.Listen.DNS != "" {
		pc, ln, err := listenDNS("dns", cfg.Listen.DNS)
		if err != nil {
			return err
		}
		d.services = append(d.services, service{name: "dns " + pc.LocalAddr().String(),
			serve: func() error { return ignoreClosed(dp.Serve(pc, ln)) }, shutdown: dp.Shutdown})
	}
	d.reloaders = append(d.reloaders, func(c *config.Config) error { return dp.ReloadConfig(c.DNS) })
	if cfg.Listen.SquidDNS != "" {
		d.resolver(cfg) // made by the HTTP path already; Squid's answers need one even without it
		if err := d.buildSquidDNS(cfg.Listen.SquidDNS, squiddns.New(d.res.Load, dp.Upstream(), cfg.DNS.Timeout, d.reg)); err != nil {
			return err
		}
	}
	if cfg.Listen.TLS != "" {
		term, err := d.buildVIPTLS(cfg)
		if err != nil {
			return err
		}
		sp, err := splice.New(splice.Options{Resolver: dp.Upstream(), Guard: pol,
			Logger: d.log.With("component", "splice"), Registerer: d.reg, Terminator: term})
		if err != nil {
			return err
		}
		// VIP:443 may be steered by TPROXY (deploy/nftables) or by
		// REDIRECT/local delivery: a transparent listener takes both. Without
		// CAP_NET_ADMIN it cannot be transparent; then only REDIRECT works.
		ln, err := intercept.Listen(context.Background(), intercept.TPROXY, cfg.Listen.TLS)
		if errors.Is(err, syscall.EPERM) {
			d.log.Warn("splice: no CAP_NET_ADMIN for IP_TRANSPARENT; TPROXY-steered VIP:443 will not reach pepd", "listen", cfg.Listen.TLS)
			ln, err = intercept.Listen(context.Background(), intercept.Redirect, cfg.Listen.TLS)
		}
		if err != nil {
			return fmt.Errorf("splice: %w", err)
		}
		d.services = append(d.services, service{name: "tls-splice " + ln.Addr().String(),
			serve: func() error { return ignoreClosed(sp.Serve(ln)) }, shutdown: sp.Shutdown})
	}
	return nil
}

// listenDNS opens a DNS listener's UDP and TCP sockets on addr; the
// error names the listener (what) and closes what was opened.
func listenDNS(what, addr string) (net.PacketConn, net.Listener, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: listen udp %q: %w", what, addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		pc.Close()
		return nil, nil, fmt.Errorf("%s: listen tcp %q: %w", what, addr, err)
	}
	return pc, ln, nil
}

// buildSquidDNS serves h, Squid's resolver (internal/squiddns), on addr
// over UDP and TCP.
func (d *pepd) buildSquidDNS(addr string, h dns.Handler) error {
	pc, ln, err := listenDNS("squid_dns", addr)
	if err != nil {
		return err
	}
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		d.services = append(d.services, service{name: "squid-dns " + addr,
			serve: func() error { return ignoreClosed(srv.ActivateAndServe()) }, shutdown: srv.ShutdownContext})
	}
	return nil
}

// buildVIPTLS returns the VIP's own HTTPS origin (https.*, issue 25) for
// the splice to hand its connections to, or nil when https.cert_file is
// empty (everything is spliced, as before). The certificate and key are
// read again on SIGHUP: a bad file is an error and the old pair keeps
// serving. The names, the shards and the stream bounds need a restart.
func (d *pepd) buildVIPTLS(cfg *config.Config) (splice.Terminator, error) {
	h := cfg.HTTPS
	if !h.Enabled() {
		return nil, nil
	}
	st, err := viptls.Load(h.CertFile, h.KeyFile, h.CertNames(cfg.VIP))
	if err != nil {
		return nil, err
	}
	term, err := viptls.NewTerminator(st, cfg.VIP, h.Names, d.httpSrv.ServeTLS)
	if err != nil {
		return nil, err
	}
	if err := term.SetKeyExchange(h.KeyExchange); err != nil {
		return nil, err
	}
	d.reloaders = append(d.reloaders, func(c *config.Config) error {
		if c.HTTPS.CertFile != h.CertFile || c.HTTPS.KeyFile != h.KeyFile {
			d.log.Warn("https.cert_file and https.key_file need a restart to change; reloading the old files", "cert_file", h.CertFile)
		}
		if err := st.Reload(); err != nil {
			return err
		}
		d.log.Info("VIP certificate reloaded", "cert_file", h.CertFile, "not_after", st.Leaf().NotAfter)
		return nil
	})
	d.log.Info("VIP served as an HTTPS origin", "cert_file", h.CertFile, "names", h.Names, "ip", st.Covers(cfg.VIP.String()),
		"not_after", st.Leaf().NotAfter, "urls", h.URLs, "shards", h.Shards, "key_exchange", h.KeyExchange)
	return term, nil
}

// ignoreClosed maps the DNS proxy's and the splice's "served after
// Shutdown" errors to nil, as start expects of a stopped service.
func ignoreClosed(err error) error {
	if errors.Is(err, dnsproxy.ErrServerClosed) || errors.Is(err, splice.ErrServerClosed) {
		return nil
	}
	return err
}

// policy builds the not-an-open-proxy policy for c: subscribers, allowed
// ports, and the VIP and this host's addresses as Self.
func (d *pepd) policy(c *config.Config) (*guard.Policy, error) {
	self, err := guard.LocalAddrs()
	if err != nil {
		return nil, err
	}
	self = append(self, c.VIP)
	if c.VIP6.IsValid() {
		self = append(self, c.VIP6)
	}
	return guard.New(c.Guard.Options(c.Subscribers, self)), nil
}

// httpSettings builds the HTTP path's reloadable settings from c.
func (d *pepd) httpSettings(c *config.Config) (httpproxy.Settings, error) {
	pol, err := d.policy(c)
	if err != nil {
		return httpproxy.Settings{}, err
	}
	rc := c.Rewrite
	rc.Origins, rc.PlainBlocking = c.HTTPS.Origins(c.VIP), c.HTTPS.PlainBlocking()
	if c.HTTPS.URLs {
		rc.OwnHostMax, rc.FirstImagesPlain = c.HTTPS.OwnHostMax, c.HTTPS.FirstImagesPlain
	}
	rw, err := rewrite.New(c.VIP.String(), rc, d.log, d.rwm)
	if err != nil {
		return httpproxy.Settings{}, err
	}
	return c.HTTP.Settings(pol, d.resolver(c), rw), nil
}

// resolver returns pepd's Resolver for c's carrier resolvers and DNS
// timeout: the one already made when they are the same (its cached
// answers kept), else a new one, which later calls share. The optimizer
// keeps the one it started with (optimize.* needs a restart).
func (d *pepd) resolver(c *config.Config) *httpproxy.Resolver {
	if r := d.res.Load(); r != nil && slices.Equal(r.Servers, c.Resolvers) && r.Timeout == c.DNS.Timeout {
		return r
	}
	r := &httpproxy.Resolver{Servers: slices.Clone(c.Resolvers), Timeout: c.DNS.Timeout}
	d.res.Store(r)
	return r
}

func (d *pepd) closeListeners() {
	for _, s := range d.services {
		s.shutdown(context.Background())
	}
}

// start runs every service in its own goroutine; a service that stops on
// its own is reported on d.errc.
func (d *pepd) start() error {
	for _, s := range d.services {
		go func() {
			err := s.serve()
			if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				d.errc <- fmt.Errorf("%s: %w", s.name, err)
			}
		}()
	}
	return nil
}

// shutdown stops the services in order, giving requests in flight 10s.
func (d *pepd) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range d.services {
		if err := s.shutdown(ctx); err != nil && !errors.Is(err, net.ErrClosed) {
			d.log.Warn("shutdown", "service", s.name, "err", err)
		}
	}
	d.proxy.Close()
}

// reload reads the config again (same file, same flags) and applies what
// can change without a restart: mode, log level, procs, subscribers, guard.*,
// resolvers, rewrite.*, http.host_mismatch, and each component's
// reloader. The settings whose fields are tagged `reload:"restart"` in
// their section's type (listen, vip, squid, squid_proxy_protocol, the http
// limits, ...: config.Restarts) need a restart; a change to them is logged
// and ignored.
func (d *pepd) reload(f *config.Flags) error {
	c, err := loadConfig(f)
	if err != nil {
		return err
	}
	for _, r := range d.reloaders {
		if err := r(c); err != nil {
			return err
		}
	}
	for _, ch := range config.Restarts(d.cfg, c) {
		d.log.Warn("setting changed in the config needs a restart; still using the old value", "field", ch.Key, "old", ch.Old, "new", ch.New)
	}
	prev := d.mode.Set(c.Mode)
	d.level.Set(parseLevel(c.Log.Level))
	setProcs(c.Procs, d.log)
	d.log.Info("config reloaded", "mode", c.Mode, "previous_mode", prev)
	return nil
}

// setProcs applies the procs setting (config.Config.Procs): n > 0 sets
// runtime.GOMAXPROCS; 0 restores Go's default, or leaves the GOMAXPROCS
// environment variable's value if it is set.
func setProcs(n int, log *slog.Logger) {
	switch {
	case n > 0:
		runtime.GOMAXPROCS(n)
	case os.Getenv("GOMAXPROCS") == "":
		runtime.SetDefaultGOMAXPROCS()
	}
	log.Info("processors for Go code", "procs", runtime.GOMAXPROCS(0))
}

// health is the admin API's /healthz: the HTTP listener answers.
func (d *pepd) health(ctx context.Context) error {
	if d.healthAt == "" {
		return nil
	}
	return httpproxy.Check(ctx, d.healthAt)
}

// watchdog sends WATCHDOG=1 at a third of systemd's WatchdogSec, but only
// after a health check of the HTTP listener passed within that third.
func (d *pepd) watchdog(ctx context.Context) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval == 0 {
		return
	}
	tick := time.NewTicker(interval / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, interval/3)
		err := d.health(cctx)
		cancel()
		if err != nil {
			d.log.Error("health check failed; withholding the watchdog ping", "err", err)
			continue
		}
		daemon.SdNotify(false, daemon.SdNotifyWatchdog)
	}
}
