package run

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"pep/internal/httpproxy"
	"pep/testbed/topo"
)

// SquidListen is Squid's port for pepd inside gw (configs/pepd.yaml: squid).
const SquidListen = "127.0.0.1:3128"

// SquidTemplate is where the Squid configuration template is looked for,
// relative to the repository root (configs/squid.conf of the pepd issue).
const SquidTemplate = "configs/squid.conf"

// squid runs Squid in gw, from configs/squid.conf rendered for the testbed.
// start(cold) with cold set begins from an empty cache: Squid is stopped,
// its cache folder removed and made again (squid -z), and started.
type squid struct {
	service string // Squid's -n service name (squidService)
	b       *Bed
	dir     string // b.work/squid: conf, cache, pid
	conf    string
	proc    *topo.Proc
	runs    int
}

// findTemplate looks for configs/squid.conf from the working folder up,
// then from the running executable's folder up (bin/testbed in a
// checkout).
func findTemplate() (string, error) {
	wd, _ := os.Getwd()
	starts := []string{wd}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, dir := range starts {
		for dir != "" {
			p := filepath.Join(dir, SquidTemplate)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("run: %s not found from %q or the executable's folder up", SquidTemplate, wd)
}

// squidService is Squid's service name (-n) for a testbed: letters and
// digits of the testbed's prefix. Squid names its shared memory segments
// (/dev/shm/<service>-cf__*.shm, collapsed forwarding) after it, and
// /dev/shm is not per network namespace: Squids of parallel testbeds with
// the default name "squid" collide ("shm_open ... File exists").
func squidService(prefix string) string {
	b := []byte("pep")
	for _, c := range []byte(prefix) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b = append(b, c)
		}
	}
	return string(b)
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
	tmplPath, err := findTemplate()
	if err != nil {
		return nil, err
	}
	tmpl, err := os.ReadFile(tmplPath)
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	s := &squid{b: b, dir: filepath.Join(b.work, "squid"), service: squidService(b.Topo.Config.Prefix)}
	for _, d := range []string{s.dir, filepath.Join(s.dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("run: %w", err)
		}
	}
	c := httpproxy.DefaultSquidConf(b.Topo.Config.VIP)
	c.Listen = SquidListen
	c.Optimizer = PepdOptimizer // pepd's optimizer is Squid's parent; switched per mode (+opt)
	if o.noOptimizer {
		c.Optimizer = ""
	}
	c.Subscribers = []string{fmt.Sprintf("%s/%d", b.Topo.Config.MN, b.Topo.Config.RadioBits)}
	c.Resolvers = []string{b.Topo.Config.Core.String()}
	c.CacheDir = filepath.Join(s.dir, "cache")
	c.CacheDirMB = 2000
	c.CacheMemMB = 64
	c.LogDir = filepath.Join(s.dir, "logs")
	c.PidFile = filepath.Join(s.dir, "squid.pid")
	c.User = "proxy"
	c.ShutdownSeconds = 0
	var buf bytes.Buffer
	if err := httpproxy.RenderSquidConf(&buf, string(tmpl), c); err != nil {
		return nil, err
	}
	if o.interceptPort != 0 {
		fmt.Fprintf(&buf, "\n# make cache-tests: subscribers' port 80, redirected by gw's nftables\nhttp_port %d intercept\n", o.interceptPort)
	}
	s.conf = filepath.Join(s.dir, "squid.conf")
	if err := os.WriteFile(s.conf, buf.Bytes(), 0o644); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	if err := chownProxy(c.LogDir); err != nil {
		return nil, err
	}
	b.log.Info("squid configured", "template", tmplPath, "conf", s.conf)
	return s, nil
}

// chownProxy gives a folder to Squid's cache_effective_user.
func chownProxy(dir string) error {
	u, err := user.Lookup("proxy")
	if err != nil {
		return fmt.Errorf("run: squid user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// start (re)starts Squid. With cold (or on the first start) the cache
// folder is made anew, so no object survives from an earlier session.
func (s *squid) start(ctx context.Context, cold bool) error {
	s.stop()
	s.runs++
	cache := filepath.Join(s.dir, "cache")
	if cold || s.runs == 1 {
		if err := os.RemoveAll(cache); err != nil {
			return fmt.Errorf("run: %w", err)
		}
		if err := os.MkdirAll(cache, 0o755); err != nil {
			return fmt.Errorf("run: %w", err)
		}
		if err := chownProxy(cache); err != nil {
			return err
		}
		ns := s.b.Topo.Config.GWNS()
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "squid", "-n", s.service, "-z", "-N", "-f", s.conf).CombinedOutput()
		if err != nil {
			return fmt.Errorf("run: squid -z: %w: %s", err, bytes.TrimSpace(out))
		}
	}
	p, err := s.b.Topo.Start("squid", s.b.Topo.Config.GWNS(), filepath.Join(s.b.logs, "squid.log"),
		"squid", "-n", s.service, "-N", "-d", "1", "-f", s.conf)
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
