package run

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	pepsquid "pep/internal/squid"
	"pep/testbed/topo"
)

// SquidListen is Squid's port for pepd inside gw (configs/pepd.yaml: squid).
const SquidListen = "127.0.0.1:3128"

// squid runs Squid in gw, from configs/squid.conf rendered for the testbed.
// start(cold) with cold set begins from an empty cache: Squid is stopped,
// its cache folder removed and made again (squid -z), and started.
type squid struct {
	service string // Squid's -n service name (pepsquid.Service)
	b       *Bed
	dir     string // b.work/squid: conf, cache, pid
	conf    string
	c       pepsquid.Conf // what conf was rendered from
	proc    *topo.Proc
	runs    int
}

// squidOptions change the testbed's Squid configuration from what the
// experiment runs (newSquid).
type squidOptions struct {
	// noOptimizer leaves pepd's optimizer out as Squid's parent, so that
	// Squid fetches from the origin itself (make cache-tests: Squid alone
	// and pepd+Squid must share one Squid and one configuration).
	noOptimizer bool
	// interceptPort, when not 0, adds "http_port :N intercept": subscribers'
	// port 80 redirected to Squid itself, with no pepd in front (Squid
	// alone, make cache-tests).
	interceptPort int
}

func newSquid(b *Bed, o squidOptions) (*squid, error) {
	if _, err := exec.LookPath("squid"); err != nil {
		return nil, fmt.Errorf("run: squid: %w (apt-get install -y squid)", err)
	}
	tmpl, tmplPath, err := pepsquid.ReadTemplate()
	if err != nil {
		return nil, err
	}
	s := &squid{b: b, dir: filepath.Join(b.work, "squid"), service: pepsquid.Service(b.Topo.Config.Prefix)}
	for _, d := range []string{s.dir, filepath.Join(s.dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("run: %w", err)
		}
	}
	c := pepsquid.DefaultConf(b.Topo.Config.VIP)
	c.Listen = SquidListen
	c.Optimizer = PepdOptimizer // pepd's optimizer is Squid's parent; switched per mode (+opt)
	if o.noOptimizer {
		c.Optimizer = ""
	}
	c.Subscribers = []string{fmt.Sprintf("%s/%d", b.Topo.Config.MN, b.Topo.Config.RadioBits)}
	squidDNS, _, _ := net.SplitHostPort(PepdSquidDNS)
	c.Resolvers = []string{squidDNS, b.Topo.Config.Core.String()}
	c.CacheDir = filepath.Join(s.dir, "cache")
	c.CacheDirMB = 2000
	c.CacheMemMB = 64
	c.LogDir = filepath.Join(s.dir, "logs")
	c.PidFile = filepath.Join(s.dir, "squid.pid")
	c.User = "proxy"
	c.ShutdownSeconds = 0
	extra := ""
	if o.interceptPort != 0 {
		extra = fmt.Sprintf("\n# make cache-tests: subscribers' port 80, redirected by gw's nftables\nhttp_port %d intercept\n", o.interceptPort)
	}
	s.conf, s.c = filepath.Join(s.dir, "squid.conf"), c
	if err := pepsquid.WriteConf(s.conf, tmpl, c, extra); err != nil {
		return nil, err
	}
	if err := pepsquid.MakeDirs(c, false); err != nil {
		return nil, err
	}
	b.log.Info("squid configured", "template", tmplPath, "conf", s.conf)
	return s, nil
}

// start (re)starts Squid. With cold (or on the first start) the cache
// folder is made anew, so no object survives from an earlier session.
func (s *squid) start(ctx context.Context, cold bool) error {
	s.stop()
	s.runs++
	if cold || s.runs == 1 {
		if err := pepsquid.MakeDirs(s.c, true); err != nil {
			return err
		}
		ns := s.b.Topo.Config.GWNS()
		out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, "squid"}, pepsquid.InitArgs(s.service, s.conf)...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("run: squid -z: %w: %s", err, bytes.TrimSpace(out))
		}
	}
	p, err := s.b.Topo.Start("squid", s.b.Topo.Config.GWNS(), filepath.Join(s.b.logs, "squid.log"),
		append(append([]string{"squid"}, pepsquid.RunArgs(s.service, s.conf)...), "-d", "1")...)
	if err != nil {
		return err
	}
	s.proc = p
	return waitReady(ctx, p, "squid", func() error {
		return topo.Do(s.b.Topo.Config.GWNS(), func() error {
			c, err := net.DialTimeout("tcp4", SquidListen, 200*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
	})
}

// stop ends Squid (SIGTERM; shutdown_lifetime is 0) and waits for it.
func (s *squid) stop() {
	if s.proc != nil {
		s.proc.Stop(5 * time.Second)
		s.proc = nil
	}
}
