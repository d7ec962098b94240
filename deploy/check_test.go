package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// buildBinary builds a package of this module into dir and returns the
// binary's path.
func buildBinary(t *testing.T, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// TestSystemdUnits runs `systemd-analyze verify` on each unit, with the
// ExecStart binaries pointed at freshly built ones (verify checks that they
// exist and are executable), and requires pepd.service's exposure level from
// `systemd-analyze security --offline` to stay at most 2.0 ("OK").
func TestSystemdUnits(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatal("needs systemd-analyze (make deps installs it; apt-get install -y systemd)")
	}
	bin := t.TempDir()
	gw := buildBinary(t, bin, "./deploy/cmd/pep-gateway")
	pepd := "/bin/true" // until cmd/pepd is in the tree
	if _, err := os.Stat("../cmd/pepd"); err == nil {
		pepd = buildBinary(t, bin, "./cmd/pepd")
	}
	dir := t.TempDir()
	units, _ := filepath.Glob("systemd/*.service")
	if len(units) != 3 {
		t.Fatalf("units %v, want pepd, pep-nftables, pep-dns-guard", units)
	}
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.NewReplacer("/usr/bin/pepd ", pepd+" ", "/usr/bin/pep-gateway ", gw+" ").Replace(string(b))
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(u)), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range units {
		p := filepath.Join(dir, filepath.Base(u))
		out, err := exec.Command("systemd-analyze", "verify", "--man=no", p).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, out)
		}
	}
	out, _ := exec.Command("systemd-analyze", "security", "--offline=yes", filepath.Join(dir, "pepd.service")).CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for pepd.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security: no exposure level in\n%s", out)
	}
	if lvl, _ := strconv.ParseFloat(string(m[1]), 64); lvl > 2.0 {
		t.Errorf("pepd.service exposure level %.1f, want at most 2.0", lvl)
	} else {
		t.Logf("pepd.service exposure level %.1f (systemd-analyze security --offline)", lvl)
	}
}

// TestSysctlConf checks deploy/sysctl/90-pep.conf: every setting has a
// comment above it (its reason), every key exists in a fresh network
// namespace (root) and takes the value when applied there with sysctl -p.
func TestSysctlConf(t *testing.T) {
	f, err := os.Open("sysctl/90-pep.conf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var keys []string
	commented := false
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "":
			commented = false
		case strings.HasPrefix(l, "#"):
			commented = true
		default:
			k, _, ok := strings.Cut(l, "=")
			if !ok {
				t.Fatalf("90-pep.conf:%d: %q is not key = value", line, l)
			}
			if !commented {
				t.Errorf("90-pep.conf:%d: %s has no comment giving its reason", line, strings.TrimSpace(k))
			}
			keys = append(keys, strings.TrimSpace(k))
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("the rest needs root (a network namespace)")
	}
	n := newNetNS(t, "pep6s-"+runSuffix())
	n.exec(t, "nft", "-f", "nftables/pep-gateway.nft") // loads nf_conntrack, whose keys the file sets
	for _, k := range keys {
		if _, err := os.Stat(filepath.Join("/proc/sys", strings.ReplaceAll(k, ".", "/"))); err != nil {
			t.Errorf("90-pep.conf: %s: no such sysctl on this kernel", k)
		}
	}
	// Per-namespace settings apply in the namespace; these global ones are
	// refused there (they belong to the initial namespace) and nothing else
	// may fail.
	global := map[string]bool{"net.netfilter.nf_conntrack_max": true, "net.core.rmem_max": true,
		"net.core.wmem_max": true, "net.core.rmem_default": true}
	out, _ := exec.Command("ip", "netns", "exec", n.name, "sysctl", "-p", "sysctl/90-pep.conf").CombinedOutput()
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.HasPrefix(l, "sysctl:") {
			continue
		}
		m := regexp.MustCompile(`setting key "([^"]+)"`).FindStringSubmatch(l)
		if m == nil || !global[m[1]] {
			t.Errorf("sysctl -p in a namespace: %s", l)
		}
	}
	if got := strings.TrimSpace(n.exec(t, "sysctl", "-n", "net.ipv4.tcp_slow_start_after_idle")); got != "0" {
		t.Errorf("tcp_slow_start_after_idle after sysctl -p = %s, want 0", got)
	}
}

// TestAlertRules runs promtool check rules on the example alert rules.
func TestAlertRules(t *testing.T) {
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Skip("needs promtool (apt-get install -y prometheus)")
	}
	out, err := exec.Command("promtool", "check", "rules", "prometheus/pep-alerts.yml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
}

// TestComposeFile validates deploy/docker-compose.yml with the compose
// tool that is installed (docker compose v2 or docker-compose v1).
func TestComposeFile(t *testing.T) {
	var argv []string
	if exec.Command("docker", "compose", "version").Run() == nil {
		argv = []string{"docker", "compose"}
	} else if _, err := exec.LookPath("docker-compose"); err == nil {
		argv = []string{"docker-compose"}
	} else {
		t.Skip("needs docker compose or docker-compose (apt-get install -y docker-compose)")
	}
	argv = append(argv, "-f", "docker-compose.yml", "config", "-q")
	cmd := exec.Command(argv[0], argv[1:]...)
	// compose v1 checks that the build context exists; the real one is
	// staged by compose.sh.
	cmd.Env = append(os.Environ(), "PEP_COMPOSE_CONTEXT="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}
