package run

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"pep/testbed/topo"
)

// pepd's listeners inside gw, as configs/pepd.yaml has them.
const (
	PepdHTTPPort = 3129             // REDIRECT target for port 80 and VIP:80
	PepdTLSPort  = 3443             // REDIRECT target for VIP:443 (SNI splice)
	PepdDNSPort  = 5353             // REDIRECT target for port 53 (dns mode)
	PepdAdmin    = "127.0.0.1:9090" // admin API: GET/PUT /mode, /optimize
	// PepdSquidDNS is where pepd answers Squid's lookups (listen.squid_dns),
	// first in the testbed's squid.conf dns_nameservers.
	PepdSquidDNS = "127.0.53.53:53"
	// PepdOptimizer is pepd's optimizer (optimize.listen's default), Squid's parent.
	PepdOptimizer = "127.0.0.1:3131"
)

// pep is pepd running in gw, switched between modes with pepctl.
type pep struct {
	b        *Bed
	bin      string
	pepctl   string
	proc     *topo.Proc
	conf     string       // pepd.yaml
	settings PepdSettings // as conf has them now
}

// binDir is where pepd and pepctl are: dir, or the running executable's
// folder.
func binDir(dir string) string {
	if dir != "" {
		return dir
	}
	exe, err := os.Executable()
	if err != nil {
		return "bin"
	}
	return filepath.Dir(exe)
}

// PepdSettings are what a bed's pepd.yaml holds beyond the testbed's
// fixed keys: the run's -pepd settings and the VIP's HTTPS origin. The
// zero value keeps pepd's defaults.
type PepdSettings struct {
	// Overrides are the run's -pepd settings (Config.Pepd), written over
	// the file in order.
	Overrides []PepdSetting
	// CertFile and KeyFile are the VIP's certificate (an IP-address
	// certificate from the bed's own CA) for the url-https-kN modes; ""
	// renders no https section (pepd splices every TLS connection).
	CertFile, KeyFile string
	// HTTPSURLs and Shards are https.urls and https.shards: what a
	// url-https-kN mode sets by rewriting the file and SIGHUP.
	HTTPSURLs bool
	Shards    int
}

// ShardPortsFirst and ShardPortsLast bound the VIP ports steered to
// pepd's TLS listener besides 443 when a run has url-https-kN modes:
// pepd's default shard ports (443, 8443, 8444, ...) for k up to 16.
const (
	ShardPortsFirst = 8443
	ShardPortsLast  = 8443 + 14
)

// PepdConfig renders pepd's configuration for a testbed with the given
// addresses: mode off at start, Squid with the PROXY protocol, every name
// rewritten in dns mode, the listeners above, the https section of s, and
// then s.Overrides written over it (setPepd). It follows the keys of
// configs/pepd.yaml. Errors are an override's that cannot be written (a
// key through a value that is not a section, a value that is not YAML);
// whether pepd accepts the result is its loader's to say (ValidatePepd).
func PepdConfig(c topo.Config, s PepdSettings) ([]byte, error) {
	https := ""
	if s.CertFile != "" {
		https = fmt.Sprintf("https:\n  cert_file: %q\n  key_file: %q\n  urls: %v\n  shards: %d\n", s.CertFile, s.KeyFile, s.HTTPSURLs, max(s.Shards, 1))
	}
	base := fmt.Appendf(nil, `# pepd for the pep testbed %s (written by testbed/run)
mode: off
vip: %s
subscribers: [%s/%d]
resolvers: ["%s:53"]
squid: "%s"
squid_proxy_protocol: true
listen:
  http: ":%d"
  tls: ":%d"
  dns: ":%d"
  admin: "%s"
  squid_dns: "%s"
optimize:
  listen: "%s"
dns:
  rewrite_domains: ["*"]
  origins: keep
%slog:
  level: info
`, c.Prefix, c.VIP, c.MN, c.RadioBits, c.Resolver, SquidListen, PepdHTTPPort, PepdTLSPort, PepdDNSPort, PepdAdmin, PepdSquidDNS, PepdOptimizer, https)
	return setPepd(base, s.Overrides)
}

func startPEP(ctx context.Context, b *Bed, bin string, s PepdSettings) (*pep, error) {
	dir := binDir(bin)
	p := &pep{b: b, bin: filepath.Join(dir, "pepd"), pepctl: filepath.Join(dir, "pepctl")}
	if _, err := os.Stat(p.bin); err != nil {
		return nil, fmt.Errorf("run: %w (make build)", err)
	}
	if _, err := os.Stat(p.pepctl); err != nil {
		b.log.Warn("pepctl not found: switching modes with PUT /mode on the admin API", "pepctl", p.pepctl)
		p.pepctl = ""
	}
	conf := filepath.Join(b.work, "pepd.yaml")
	p.conf, p.settings = conf, s
	if err := p.writeConf(); err != nil {
		return nil, err
	}
	proc, err := b.Topo.Start("pepd", b.Topo.Config.GWNS(), filepath.Join(b.logs, "pepd.log"), p.bin, "-config", conf)
	if err != nil {
		return nil, err
	}
	p.proc = proc
	err = waitReady(ctx, proc, "pepd", func() error {
		_, err := p.getMode()
		return err
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// writeConf writes pepd.yaml from p.settings.
func (p *pep) writeConf() error {
	b, err := PepdConfig(p.b.Topo.Config, p.settings)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.conf, b, 0o644); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	return nil
}

// getMode asks pepd's admin API for its mode, from inside gw.
func (p *pep) getMode() (string, error) { return p.admin(http.MethodGet, "") }

// admin sends one request to pepd's admin API /mode from inside gw and
// returns the body of a 200 answer.
func (p *pep) admin(method, body string) (string, error) { return p.adminPath(method, "/mode", body) }

// adminPath is admin for another path of the admin API.
func (p *pep) adminPath(method, path, body string) (string, error) {
	var conn net.Conn
	err := topo.Do(p.b.Topo.Config.GWNS(), func() (err error) {
		conn, err = net.DialTimeout("tcp4", PepdAdmin, time.Second)
		return err
	})
	if err != nil {
		return "", err
	}
	tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return conn, nil }}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	req, err := http.NewRequest(method, "http://"+PepdAdmin+path, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "text/plain")
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20)) // /metrics is tens of KB
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(got))
	}
	return string(got), nil
}

// setMode switches pepd with `pepctl -admin ADDR mode M` run in gw (with
// PUT /mode when pepctl is not built), and checks the answer of GET /mode.
func (p *pep) setMode(ctx context.Context, tm string) error {
	base, opt := SplitMode(tm)
	m := PepdMode(base)
	if p.settings.CertFile != "" {
		// First: the SIGHUP applies the file's mode and optimizer switch
		// too, which the steps below then set.
		k, https := HTTPSMode(base)
		if err := p.setHTTPS(ctx, https, k); err != nil {
			return err
		}
	}
	if err := p.setOptimize(ctx, opt); err != nil {
		return err
	}
	if err := p.setSwitch(ctx, "hints", HasHints(tm)); err != nil {
		return err
	}
	if p.pepctl == "" {
		if _, err := p.admin(http.MethodPut, m); err != nil {
			return fmt.Errorf("run: mode %s: %w", m, err)
		}
	} else {
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", p.b.Topo.Config.GWNS(), p.pepctl, "-admin", PepdAdmin, "mode", m).CombinedOutput()
		if err != nil {
			return fmt.Errorf("run: pepctl mode %s: %w: %s", m, err, bytes.TrimSpace(out))
		}
	}
	got, err := p.getMode()
	if err != nil {
		return fmt.Errorf("run: after pepctl mode %s: %w", m, err)
	}
	if !strings.Contains(got, m) {
		return fmt.Errorf("run: pepctl mode %s: pepd says %q", m, strings.TrimSpace(got))
	}
	return nil
}

// setHTTPS sets pepd's https.urls and https.shards (url-https-kN modes)
// by rewriting its config file and sending SIGHUP (the rewriter's origins
// follow a reload), and waits for pepd to log the reload.
func (p *pep) setHTTPS(ctx context.Context, urls bool, k int) error {
	k = max(k, 1)
	if p.settings.HTTPSURLs == urls && max(p.settings.Shards, 1) == k {
		return nil
	}
	p.settings.HTTPSURLs, p.settings.Shards = urls, k
	if err := p.writeConf(); err != nil {
		return err
	}
	logFile := filepath.Join(p.b.logs, "pepd.log")
	count := func() int {
		b, _ := os.ReadFile(logFile)
		return bytes.Count(b, []byte("config reloaded"))
	}
	before := count()
	if err := syscall.Kill(p.proc.Pid(), syscall.SIGHUP); err != nil {
		return fmt.Errorf("run: SIGHUP to pepd: %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); count() <= before; {
		if time.Now().After(deadline) {
			return fmt.Errorf("run: pepd did not log a reload within 10 s of SIGHUP (https.urls %v, shards %d); see %s", urls, k, logFile)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// setOptimize switches pepd's optimizer with `pepctl optimize on|off` in
// gw (PUT /optimize without pepctl) and checks GET /optimize.
func (p *pep) setOptimize(ctx context.Context, on bool) error {
	return p.setSwitch(ctx, "optimize", on)
}

// setSwitch switches one of pepd's on/off switches (optimize, hints) with
// `pepctl NAME on|off` in gw (PUT /NAME without pepctl) and checks GET
// /NAME.
func (p *pep) setSwitch(ctx context.Context, name string, on bool) error {
	v := "off"
	if on {
		v = "on"
	}
	if p.pepctl == "" {
		if _, err := p.adminPath(http.MethodPut, "/"+name, v); err != nil {
			return fmt.Errorf("run: %s %s: %w", name, v, err)
		}
	} else {
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", p.b.Topo.Config.GWNS(), p.pepctl, "-admin", PepdAdmin, name, v).CombinedOutput()
		if err != nil {
			return fmt.Errorf("run: pepctl %s %s: %w: %s", name, v, err, bytes.TrimSpace(out))
		}
	}
	got, err := p.adminPath(http.MethodGet, "/"+name, "")
	if err != nil || strings.TrimSpace(got) != v {
		return fmt.Errorf("run: pepctl %s %s: pepd says %q (%v)", name, v, strings.TrimSpace(got), err)
	}
	return nil
}

// resetHints empties pepd's dependency learner (DELETE /hints).
func (p *pep) resetHints() error {
	if _, err := p.adminPath(http.MethodDelete, "/hints", ""); err != nil {
		return fmt.Errorf("run: emptying pepd's hints: %w", err)
	}
	return nil
}

// saveMetrics writes pepd's /metrics, as read at the end of a session, to
// LOGS/pepd-metrics-MODE.prom (Prometheus text format; counters count from
// pepd's start, so with several modes on one bed, without -split-modes,
// they add up across its sessions in RotateModes order), and logs the
// optimizer's outcomes (optCounts; per load they are in the records). A
// failed read is logged, not an error.
func (p *pep) saveMetrics(log *slog.Logger, mode string) {
	m, err := p.adminPath(http.MethodGet, "/metrics", "")
	if err != nil {
		log.Warn("reading pepd's metrics", "err", err)
		return
	}
	if err := os.WriteFile(filepath.Join(p.b.logs, "pepd-metrics-"+safeFileName(mode)+".prom"), []byte(m), 0o644); err != nil {
		log.Warn("saving pepd's metrics", "err", err)
	}
	if c, err := parseOptCounts(m); err == nil && (c.transformed > 0 || len(c.skipped) > 0) {
		log.Info("optimizer after the session", "transformed", c.transformed, "skipped", c.skipped)
	}
}

// logHints logs pepd's pep_hints_* series (after a +hints session: the
// teaching pass and the measured session together; a load is counted
// used or unused once it ended, LoadWindow after its document or at the
// subscriber's next document).
func (p *pep) logHints(log *slog.Logger) {
	m, err := p.adminPath(http.MethodGet, "/metrics", "")
	if err != nil {
		log.Warn("hints: reading pepd's metrics", "err", err)
		return
	}
	var args []any
	for _, l := range strings.Split(m, "\n") {
		if name, v, ok := strings.Cut(l, " "); ok && strings.HasPrefix(name, "pep_hints_") {
			args = append(args, name, v)
		}
	}
	log.Info("hints after the session", args...)
}

// Ruleset renders gw's nftables table for a mode: nothing for direct (the
// table is deleted: no appliance), else the L4 redirect of the design card
// with REDIRECT (pepd reads SO_ORIGINAL_DST): TCP 80 from mn to pepd's HTTP
// listener (the VIP's port 80 included), VIP:443 to the SNI splice, and in
// dns mode UDP and TCP 53 from mn to pepd's DNS proxy. In the other modes
// DNS goes to the carrier resolver across the radio link, as the phone
// sent it. The table is replaced atomically (declare, delete, define).
func Ruleset(c topo.Config, mode string) string {
	return ruleset(c, mode, PepdHTTPPort, false)
}

// ruleset is Ruleset with port 80 redirected to httpPort; shards also
// steers the VIP's shard ports (ShardPortsFirst..ShardPortsLast) to the
// TLS listener (a bed for url-https-kN modes).
func ruleset(c topo.Config, mode string, httpPort int, shards bool) string {
	var b strings.Builder
	b.WriteString("table ip peptb\ndelete table ip peptb\n")
	if mode == "direct" {
		return b.String()
	}
	sub := fmt.Sprintf("%s/%d", c.MN, c.RadioBits)
	fmt.Fprintf(&b, `table ip peptb {
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		iifname "%s" ip saddr %s tcp dport 80 counter redirect to :%d
		iifname "%s" ip saddr %s ip daddr %s tcp dport 443 counter redirect to :%d
`, topo.IfGWRadio, sub, httpPort, topo.IfGWRadio, sub, c.VIP, PepdTLSPort)
	if shards {
		fmt.Fprintf(&b, "\t\tiifname \"%s\" ip saddr %s ip daddr %s tcp dport %d-%d counter redirect to :%d\n",
			topo.IfGWRadio, sub, c.VIP, ShardPortsFirst, ShardPortsLast, PepdTLSPort)
	}
	if mode == "dns" {
		fmt.Fprintf(&b, "\t\tiifname \"%s\" ip saddr %s meta l4proto { udp, tcp } th dport 53 counter redirect to :%d\n",
			topo.IfGWRadio, sub, PepdDNSPort)
	}
	b.WriteString("\t}\n}\n")
	return b.String()
}

// SetMode puts the bed in mode m: gw's nftables table, then pepd's mode
// (not for direct, where pepd sees no traffic).
func (b *Bed) SetMode(ctx context.Context, m string) error {
	if NeedsPEP(m) && b.pep == nil {
		return fmt.Errorf("run: mode %s needs pepd, which this bed did not start", m)
	}
	base, _ := SplitMode(m)
	rules := ruleset(b.Topo.Config, PepdMode(base), PepdHTTPPort, b.vipCA != "")
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", b.Topo.Config.GWNS(), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("run: nft for mode %s: %w: %s", m, err, bytes.TrimSpace(out))
	}
	if NeedsPEP(m) {
		if err := b.pep.setMode(ctx, m); err != nil {
			return err
		}
	}
	b.mode = m
	b.log.Info("mode set", "mode", m)
	return nil
}

// ColdCache empties Squid's cache (a restart on a fresh cache folder) and
// the optimizer's finished transforms (DELETE /optimize/results), which
// would otherwise serve the next miss of an object a transform from an
// earlier session: from the teaching pass of a +hints session, or from
// another mode's session on the same bed.
func (b *Bed) ColdCache(ctx context.Context) error {
	if b.squid == nil {
		return nil
	}
	if err := b.squid.start(ctx, true); err != nil {
		return err
	}
	if b.pep != nil {
		if _, err := b.pep.adminPath(http.MethodDelete, "/optimize/results", ""); err != nil {
			return fmt.Errorf("run: emptying the optimizer's results: %w", err)
		}
	}
	return nil
}
