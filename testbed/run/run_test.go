package run

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"pep/internal/config"
	"pep/netem"
	"pep/testbed/topo"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"default", func(*Config) {}, ""},
		{"unknown mode", func(c *Config) { c.Modes = []string{"direct", "fast"} }, `run: modes: "fast" is not one of direct, off, dns, url or url-https-kN (N 1..16), nor one of them but direct with +opt, +hints and/or +warm`},
		{"direct has no optimizer", func(c *Config) { c.Modes = []string{"direct+opt"} }, `run: modes: "direct+opt" is not one of direct, off, dns, url or url-https-kN (N 1..16), nor one of them but direct with +opt, +hints and/or +warm`},
		{"direct has no cache", func(c *Config) { c.Modes = []string{"direct+warm"} }, `run: modes: "direct+warm" is not one of direct, off, dns, url or url-https-kN (N 1..16), nor one of them but direct with +opt, +hints and/or +warm`},
		{"warm comes last", func(c *Config) { c.Modes = []string{"url+warm+opt"} }, `run: modes: "url+warm+opt" is not one of direct, off, dns, url or url-https-kN (N 1..16), nor one of them but direct with +opt, +hints and/or +warm`},
		{"warm optimizer", func(c *Config) { c.Modes = []string{"direct", "url+opt", "url+opt+warm"} }, ""},
		{"mode twice", func(c *Config) { c.Modes = []string{"url", "url"} }, `run: modes: "url" given twice`},
		{"https modes", func(c *Config) { c.Modes = []string{"url", "url-https-k1", "url-https-k3+opt", "url-https-k16"} }, ""},
		{"https k 0", func(c *Config) { c.Modes = []string{"url-https-k0"} }, `run: modes: "url-https-k0" is not one of direct, off, dns, url or url-https-kN (N 1..16), nor one of them but direct with +opt, +hints and/or +warm`},
		{"https k 17", func(c *Config) { c.Modes = []string{"url-https-k17"} }, `run: modes: "url-https-k17" is not one of direct, off, dns, url or url-https-kN (N 1..16), nor one of them but direct with +opt, +hints and/or +warm`},
		{"https k 03", func(c *Config) { c.Modes = []string{"url-https-k03"} }, `run: modes: "url-https-k03" is not one of direct, off, dns, url or url-https-kN (N 1..16), nor one of them but direct with +opt, +hints and/or +warm`},
		{"no runs", func(c *Config) { c.Runs = 0 }, "run: runs: 0, want at least 1"},
		{"no profile", func(c *Config) { c.Profiles = nil }, "run: profile: none given"},
		{"bad resolver", func(c *Config) { c.Resolver = "glibc" }, `run: browser: resolver "glibc": want builtin or system`},
		{"no parallel", func(c *Config) { c.Parallel = 0 }, "run: parallel: 0, want at least 1"},
		{"results dir, warm", func(c *Config) {
			c.Modes, c.Warm, c.Pepd = []string{"direct", "url+opt"}, true, []PepdSetting{{ResultsDirKey, "/var/tmp/opt"}}
		}, ""},
		{"results dir, +warm modes", func(c *Config) {
			c.Modes, c.Pepd = []string{"direct", "url", "url+opt+warm"}, []PepdSetting{{ResultsDirKey, "/var/tmp/opt"}}
		}, ""},
		{"results dir, cold", func(c *Config) {
			c.Modes, c.Pepd = []string{"direct", "url+opt+warm", "url+opt"}, []PepdSetting{{ResultsDirKey, "/var/tmp/opt"}}
		}, `run: -pepd optimize.results_dir=/var/tmp/opt: mode "url+opt" measures a cold cache, whose misses the kept results would answer at once; use it with -warm or +warm modes only`},
		{"results dir, relative", func(c *Config) {
			c.Warm, c.Pepd = true, []PepdSetting{{ResultsDirKey, "opt"}}
		}, `run: -pepd optimize.results_dir=opt (mode "off"): want an absolute path`},
		{"results dir, a quoted YAML value", func(c *Config) {
			c.Modes, c.Pepd = []string{"url+opt"}, []PepdSetting{{ResultsDirKey, `"/var/tmp/opt"`}}
		}, `run: -pepd optimize.results_dir=/var/tmp/opt: mode "url+opt" measures a cold cache, whose misses the kept results would answer at once; use it with -warm or +warm modes only`},
		{"results dir, set back to none", func(c *Config) {
			c.Modes, c.Pepd = []string{"url+opt"}, []PepdSetting{{ResultsDirKey, "/var/tmp/opt"}, {ResultsDirKey, ""}}
		}, ""},
		{"variant", func(c *Config) {
			c.Modes, c.SplitModes = []string{"direct", "url+opt", "url+opt@avif", "url-https-k1+opt@avif+warm"}, true
			c.Variants = map[string][]PepdSetting{"avif": {{"optimize.avif", "true"}}}
		}, ""},
		{"variant alone needs no -split-modes", func(c *Config) {
			c.Modes, c.Variants = []string{"direct", "url+opt@avif"}, map[string][]PepdSetting{"avif": {{"optimize.avif", "true"}}}
		}, ""},
		{"variant and none need -split-modes", func(c *Config) {
			c.Modes, c.Variants = []string{"direct", "url+opt", "url+opt@avif"}, map[string][]PepdSetting{"avif": {{"optimize.avif", "true"}}}
		}, "run: modes: 2 pepd configurations (variants avif); give each mode its own testbed with -split-modes"},
		{"variant undefined", func(c *Config) {
			c.Modes = []string{"direct", "url+opt@avf"}
			c.Variants = map[string][]PepdSetting{"avif": {{"optimize.avif", "true"}}}
		}, `run: modes: "url+opt@avf": no -variant avf:KEY=VALUE defines its pepd settings`},
		{"variant unused", func(c *Config) {
			c.Modes, c.Variants = []string{"direct", "url+opt"}, map[string][]PepdSetting{"avif": {{"optimize.avif", "true"}}}
		}, "run: -variant avif: no mode is tagged @avif (e.g. -modes url+opt,url+opt@avif)"},
		{"variant on direct", func(c *Config) {
			c.Modes, c.Variants = []string{"direct@avif"}, map[string][]PepdSetting{"avif": {{"optimize.avif", "true"}}}
		}, `run: modes: "direct@avif": direct runs no pepd, so it has no variant`},
		{"variant tag empty", func(c *Config) { c.Modes = []string{"url@+opt"} }, `run: modes: "url@+opt": the variant tag after @ is not a name of letters, digits, '-' and '_'`},
		{"variant owned key", func(c *Config) {
			c.Modes, c.Variants = []string{"url@m"}, map[string][]PepdSetting{"m": {{"mode", "dns"}}}
		}, `run: -variant m: run: -pepd "mode=dns": the testbed sets mode itself (each session's mode sets it)`},
		{"variant results dir, cold", func(c *Config) {
			c.Modes, c.SplitModes = []string{"url+opt", "url+opt@kept"}, true
			c.Variants = map[string][]PepdSetting{"kept": {{ResultsDirKey, "/var/tmp/opt"}}}
		}, `run: -pepd optimize.results_dir=/var/tmp/opt: mode "url+opt@kept" measures a cold cache, whose misses the kept results would answer at once; use it with -warm or +warm modes only`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mod(&c)
			got := ""
			if err := c.Validate(); err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("Validate() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWithCache(t *testing.T) {
	got, err := WithCache([]string{"direct", "url", "url+opt"}, []string{"cold", "warm"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"direct", "url", "url+warm", "url+opt", "url+opt+warm"}; !slices.Equal(got, want) {
		t.Errorf("WithCache(cold,warm) = %v, want %v", got, want)
	}
	if got, _ := WithCache([]string{"direct", "off"}, []string{"warm"}); !slices.Equal(got, []string{"direct", "off+warm"}) {
		t.Errorf("WithCache(warm) = %v, want [direct off+warm]", got)
	}
	if _, err := WithCache([]string{"url"}, []string{"hot"}); err == nil || err.Error() != `run: -cache: "hot" is not cold or warm` {
		t.Errorf("WithCache(hot) error = %v", err)
	}
	for m, want := range map[string][2]any{"url+opt+warm": {"url", true}, "dns+warm": {"dns", false}, "off": {"off", false}} {
		base, opt := SplitMode(m)
		if base != want[0] || opt != want[1] {
			t.Errorf("SplitMode(%q) = %q, %v; want %v", m, base, opt, want)
		}
	}
	if !IsWarm("url+opt+warm") || IsWarm("url+opt") {
		t.Error("IsWarm wrong")
	}
}

func fixedTopo() topo.Config {
	c := topo.Default()
	c.Prefix = "peptb-1-1"
	return c
}

// TestRulesetShards: a bed for url-https-kN modes also steers the VIP's
// shard ports to the TLS listener.
func TestRulesetShards(t *testing.T) {
	r := ruleset(fixedTopo(), "url", PepdHTTPPort, true)
	want := `iifname "radio0" ip saddr 198.18.0.2/24 ip daddr 192.0.2.12 tcp dport 8443-8457 counter redirect to :3443`
	if !strings.Contains(r, want) {
		t.Errorf("ruleset lacks %q:\n%s", want, r)
	}
}

func TestRuleset(t *testing.T) {
	c := fixedTopo()
	for _, tc := range []struct {
		mode       string
		want, not_ []string
	}{
		{"direct", []string{"table ip peptb\ndelete table ip peptb\n"}, []string{"redirect"}},
		{"off", []string{
			`iifname "radio0" ip saddr 198.18.0.2/24 tcp dport 80 counter redirect to :3129`,
			`iifname "radio0" ip saddr 198.18.0.2/24 ip daddr 192.0.2.12 tcp dport 443 counter redirect to :3443`,
		}, []string{"dport 53"}},
		{"url", []string{"tcp dport 80 counter redirect to :3129"}, []string{"dport 53", "8443"}},
		{"dns", []string{`iifname "radio0" ip saddr 198.18.0.2/24 meta l4proto { udp, tcp } th dport 53 counter redirect to :5353`}, nil},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			r := Ruleset(c, tc.mode)
			for _, w := range tc.want {
				if !strings.Contains(r, w) {
					t.Errorf("ruleset lacks %q:\n%s", w, r)
				}
			}
			for _, w := range tc.not_ {
				if strings.Contains(r, w) {
					t.Errorf("ruleset has %q:\n%s", w, r)
				}
			}
			// nft itself checks the syntax, in a throwaway namespace.
			if os.Geteuid() == 0 {
				if _, err := exec.LookPath("nft"); err == nil {
					cmd := exec.Command("unshare", "-n", "nft", "-c", "-f", "-")
					cmd.Stdin = strings.NewReader(r)
					if out, err := cmd.CombinedOutput(); err != nil {
						t.Errorf("nft -c rejects the %s ruleset: %v: %s", tc.mode, err, out)
					}
				}
			}
		})
	}
}

// TestPepdConfigLoads checks that the configuration the runner gives pepd
// is one pepd's own loader accepts, with the values the testbed needs.
func TestPepdConfigLoads(t *testing.T) {
	b, err := PepdConfig(fixedTopo(), PepdSettings{Overrides: []PepdSetting{
		{"dns.origins", "drop"}, {"radio", "{congestion: bbr, notsent_lowat: 16384}"}, {"optimize.deadline", "2s"}}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse("pepd.yaml", b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	for _, tc := range []struct{ name, got, want string }{
		{"mode", c.Mode.String(), "off"},
		{"vip", c.VIP.String(), "192.0.2.12"},
		{"subscribers", c.Subscribers[0].String(), "198.18.0.2/24"},
		{"resolvers", strings.Join(c.Resolvers, ","), "198.18.1.2:53"},
		{"squid", c.Squid, "127.0.0.1:3128"},
		{"listen.http", c.Listen.HTTP, ":3129"},
		{"listen.tls", c.Listen.TLS, ":3443"},
		{"listen.dns", c.Listen.DNS, ":5353"},
		{"listen.admin", c.Listen.Admin, "127.0.0.1:9090"},
		{"rewrite_domains", strings.Join(c.DNS.RewriteDomains, ","), "*"},
		{"dns.origins", c.DNS.Origins, "drop"},
		{"optimize.listen", c.Optimize.Listen, PepdOptimizer},
		{"optimize.deadline", c.Optimize.Deadline.String(), "2s"},
		{"radio.congestion", c.Radio.Congestion, "bbr"},
		{"radio.notsent_lowat", strconv.Itoa(int(c.Radio.NotsentLowat)), "16384"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	if !c.SquidProxyProtocol {
		t.Error("squid_proxy_protocol is off; configs/squid.conf's port requires the PROXY header")
	}
}

// cancelOnWrite cancels a context at the progress bar's first output,
// which comes when the first page starts loading.
type cancelOnWrite struct {
	once   sync.Once
	cancel context.CancelFunc
}

func (c *cancelOnWrite) Write(p []byte) (int, error) {
	c.once.Do(c.cancel)
	return len(p), nil
}

// TestInterruptLeavesNothing interrupts a run (as SIGINT does through the
// command's context) while its first page loads, and checks that Run
// returns the cancellation and that no namespace, /etc/netns folder or
// process of the run remains.
func TestInterruptLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (namespaces, AF_PACKET): sudo go test ./testbed/run")
	}
	for _, b := range []string{"chromium", "dnsmasq", "ip", "ethtool"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("needs %s (make deps): %v", b, err)
		}
	}
	c := Default()
	c.Profiles = []string{"paper-congested"} // slow: the first page is still loading when the cancel lands
	c.Modes = []string{"direct"}
	c.Runs = 1
	c.Out = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(tLog{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	start := time.Now()
	_, err := Run(ctx, c, log, &cancelOnWrite{cancel: cancel})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("Run took %s to stop after the interrupt", d)
	}
	if left := topo.Leftovers(os.Getpid()); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if procs := topo.Processes(os.Getpid()); len(procs) > 0 {
		t.Errorf("processes of the run still running: %v", procs)
	}
	if _, err := os.Stat(filepath.Join(c.Out, "results.json")); err != nil {
		t.Errorf("an interrupted run writes results.json: %v", err)
	}
}

type tLog struct{ t *testing.T }

func (w tLog) Write(p []byte) (int, error) { w.t.Log(strings.TrimSpace(string(p))); return len(p), nil }

// TestShellQuoteRoundTrip: the recorded command reads back through a shell
// as the same words (the empty -pages of `make testbed`, spaces, quotes,
// globs, $).
func TestShellQuoteRoundTrip(t *testing.T) {
	args := []string{"bin/testbed", "run", "-corpus", "../shared/corpus/tp5n.tar.gz", "-pages", "", "-out", "my out",
		"-disable-features", "A,B", "-x", "it's", "*.png", "$HOME", `a"b\c`, "-modes=direct,url"}
	line := ShellQuote(args)
	out, err := exec.Command("sh", "-c", `printf '%s\0' `+line).Output()
	if err != nil {
		t.Fatalf("sh: %v (line %s)", err, line)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if !slices.Equal(got, args) {
		t.Errorf("through sh:\n%q\nwant\n%q\n(line %s)", got, args, line)
	}
}

// TestRotateModes: run r starts with mode (r-1) mod n; every run has every
// mode once.
func TestRotateModes(t *testing.T) {
	m := []string{"direct", "off", "dns", "url"}
	for r, want := range map[int][]string{
		1: {"direct", "off", "dns", "url"}, 2: {"off", "dns", "url", "direct"},
		4: {"url", "direct", "off", "dns"}, 5: {"direct", "off", "dns", "url"},
	} {
		if got := RotateModes(m, r); !slices.Equal(got, want) {
			t.Errorf("run %d: %v, want %v", r, got, want)
		}
	}
}

// TestWithHints: -hints off,on adds a +hints variant after each mode but
// direct, before -cache's +warm; SplitMode and HasHints read them back.
func TestWithHints(t *testing.T) {
	got, err := WithHints([]string{"direct", "url", "url+opt"}, []string{"off", "on"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"direct", "url", "url+hints", "url+opt", "url+opt+hints"}; !slices.Equal(got, want) {
		t.Fatalf("WithHints = %q, want %q", got, want)
	}
	if got, _ = WithCache(got, []string{"warm"}); got[2] != "url+hints+warm" {
		t.Fatalf("WithCache after WithHints: %q", got)
	}
	for m, want := range map[string]bool{"url+hints": true, "url+opt+hints+warm": true, "url+opt": false, "url+warm": false} {
		if base, _ := SplitMode(m); base != "url" || HasHints(m) != want {
			t.Errorf("%s: SplitMode base %q, HasHints %v", m, base, HasHints(m))
		}
	}
	if _, err := WithHints([]string{"url"}, []string{"maybe"}); err == nil {
		t.Error("-hints maybe accepted")
	}
	c := Default()
	c.Modes = []string{"direct+hints"}
	if err := c.Validate(); err == nil {
		t.Error("direct+hints accepted")
	}
}

// TestBDPInitCwnd checks the gateway's initial window by profile: the
// radio link's bandwidth-delay product in 1,500-byte packets, 10 to 44.
func TestBDPInitCwnd(t *testing.T) {
	for _, tc := range []struct {
		profile string
		want    int
	}{
		{"3g", 40},              // 1.6 Mbit/s x 300 ms = 60,000 bytes
		{"paper-average", 10},   // 81 kbit/s x 400 ms: 3 packets, the kernel's 10
		{"paper-congested", 10}, // 58 kbit/s x 600 ms
		{"2g", 19},              // 280 kbit/s x 800 ms = 28,000 bytes
		{"4g", 44},              // 9 Mbit/s x 170 ms: 128 packets, the phone's first receive window
	} {
		p, err := netem.LoadProfile(tc.profile)
		if err != nil {
			t.Fatal(err)
		}
		if got := BDPInitCwnd(p); got != tc.want {
			t.Errorf("BDPInitCwnd(%s) = %d, want %d", tc.profile, got, tc.want)
		}
	}
	if got := BDPInitCwnd(netem.Profile{}); got != 10 {
		t.Errorf("BDPInitCwnd(unlimited) = %d, want 10", got)
	}
}
