package squid

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/conf/*.conf from the current output")

// squidConfCases are the inputs whose rendering of configs/squid.conf is
// pinned in testdata/conf/NAME.conf: each branch of the template
// once.
func squidConfCases() map[string]Conf {
	vip := netip.MustParseAddr("192.0.2.12")
	c := func(mod func(*Conf)) Conf {
		sc := DefaultConf(vip)
		mod(&sc)
		return sc
	}
	return map[string]Conf{
		"default": DefaultConf(vip),
		"xff": c(func(sc *Conf) {
			sc.ProxyProtocol = false
			sc.Pepd = []string{"127.0.0.1/32", "10.1.0.0/16"}
		}),
		"allow-dst": c(func(sc *Conf) {
			sc.Subscribers = []string{"127.0.0.0/8", "198.18.0.0/24"}
			sc.AllowedPorts = []uint16{80, 8080}
			sc.AllowDst = []string{"10.9.0.1/32", "10.9.1.0/24"}
			sc.HostsFile = "/tmp/hosts"
			sc.Resolvers = []string{"198.18.1.2", "198.18.1.3"}
		}),
		"optimizer": c(func(sc *Conf) { sc.Optimizer = "127.0.0.1:3131" }),
		"admission": c(func(sc *Conf) {
			sc.Admission = true
			sc.MemoryMaxObjectKB = 0 // the default
		}),
		"memory-max-object": c(func(sc *Conf) { sc.MemoryMaxObjectKB = 64 }),
		"array": c(func(sc *Conf) {
			sc.Peers = []string{"198.18.11.2:3127", "198.18.12.2:3127", "198.18.13.2:3127"}
			sc.PeerListen = "198.18.12.2:3127"
		}),
		"array-optimizer": c(func(sc *Conf) {
			sc.Peers = []string{"198.18.11.2:3127", "198.18.12.2:3127"}
			sc.PeerListen = "198.18.11.2:3127"
			sc.Optimizer = "127.0.0.1:3131"
			sc.Admission = true
		}),
		"memory-tier": c(func(sc *Conf) { sc.MemoryTier = "127.0.0.1:3132" }),
		"memory-tier-optimizer": c(func(sc *Conf) {
			sc.MemoryTier = "127.0.0.1:3132"
			sc.Optimizer = "127.0.0.1:3131"
			sc.Admission = true
		}),
		"memory-only": c(func(sc *Conf) {
			sc.Listen, sc.MemoryOnly, sc.ProxyProtocol = "127.0.0.1:3132", true, false
			sc.Pepd, sc.Subscribers = []string{"127.0.0.1/32"}, []string{"127.0.0.1/32"}
			sc.Optimizer = "127.0.0.1:3131"
			sc.CacheDir, sc.LogDir, sc.PidFile = "/var/spool/squid-memtier", "/var/log/squid-memtier", "/run/squid-memtier.pid"
		}),
		"testbed": c(func(sc *Conf) {
			sc.Subscribers = []string{"198.18.0.2/30"}
			sc.CacheDir, sc.CacheDirMB, sc.CacheMemMB = "/tmp/pep/squid/cache", 2000, 64
			sc.LogDir, sc.PidFile, sc.ShutdownSeconds = "/tmp/pep/squid/logs", "/tmp/pep/squid/squid.pid", 0
		}),
	}
}

// TestConfGolden pins the rendered configs/squid.conf byte for byte
// (go test -run TestConfGolden -update rewrites the files after a
// deliberate change to the template or the renderer).
func TestConfGolden(t *testing.T) {
	tmpl, err := os.ReadFile(filepath.Join("..", "..", "configs", "squid.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for name, sc := range squidConfCases() {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			if err := Render(&b, string(tmpl), sc); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "conf", name+".conf")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if b.String() != string(want) {
				t.Errorf("rendered %s differs from %s:\n%s", name, golden, b.String())
			}
		})
	}
}

// TestConfErrors: inputs Squid cannot run with are refused by name.
func TestConfErrors(t *testing.T) {
	vip := netip.MustParseAddr("192.0.2.12")
	for _, tc := range []struct {
		name string
		mod  func(*Conf)
		want string
	}{
		{"no pepd", func(c *Conf) { c.Pepd = nil }, "Pepd is empty"},
		{"no subscribers", func(c *Conf) { c.Subscribers = nil }, "Subscribers is empty"},
		{"no resolvers", func(c *Conf) { c.Resolvers = nil }, "Resolvers is empty"},
		{"no ports", func(c *Conf) { c.AllowedPorts = nil }, "AllowedPorts is empty"},
		{"no forbidden", func(c *Conf) { c.Forbidden = nil }, "Forbidden is empty"},
		{"negative memory object", func(c *Conf) { c.MemoryMaxObjectKB = -1 }, "MemoryMaxObjectKB -1 is negative"},
		{"optimizer without port", func(c *Conf) { c.Optimizer = "127.0.0.1" }, `optimizer "127.0.0.1"`},
		{"tier without port", func(c *Conf) { c.MemoryTier = "tier" }, `memory tier "tier"`},
		{"tier in an array", func(c *Conf) {
			c.MemoryTier, c.Peers, c.PeerListen = "127.0.0.1:3132", []string{"10.0.0.1:3127"}, "10.0.0.1:3127"
		}, "a memory tier is not built for a CARP array member"},
		{"tier of the tier", func(c *Conf) { c.MemoryTier, c.MemoryOnly = "127.0.0.1:3132", true }, "or for the tier itself"},
		{"peers without listen", func(c *Conf) { c.Peers = []string{"10.0.0.1:3127"} }, "Peers without PeerListen"},
		{"peer without port", func(c *Conf) { c.Peers, c.PeerListen = []string{"10.0.0.1"}, "10.0.0.1:3127" }, `peer "10.0.0.1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConf(vip)
			tc.mod(&c)
			var b strings.Builder
			err := Render(&b, "x", c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Render: %v, want an error with %q", err, tc.want)
			}
		})
	}
	var b strings.Builder
	if err := Render(&b, "{{.NoSuchField}}", DefaultConf(vip)); err == nil || !strings.Contains(err.Error(), "squid.conf template") {
		t.Errorf("a template naming an unknown field: %v, want a template error", err)
	}
}
