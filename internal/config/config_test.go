package config

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pep/internal/mode"
)

// TestExampleConfig loads the example shipped in configs/.
func TestExampleConfig(t *testing.T) {
	c, err := Load(filepath.Join("..", "..", "configs", "pepd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != mode.URL {
		t.Errorf("mode = %v, want url", c.Mode)
	}
	if c.VIP != netip.MustParseAddr("192.0.2.12") {
		t.Errorf("vip = %v", c.VIP)
	}
	if c.DNS.VIPTTL != 24*time.Hour || c.HTTP.MaxHeaderBytes != 32<<10 || c.Rewrite.MaxBodyBytes != 8<<20 {
		t.Errorf("dns.vip_ttl=%v http.max_header_bytes=%d rewrite.max_body_bytes=%d",
			c.DNS.VIPTTL, c.HTTP.MaxHeaderBytes, c.Rewrite.MaxBodyBytes)
	}
	if c.Listen.TPROXY != ":3130" || !c.SquidProxyProtocol {
		t.Errorf("listen.tproxy=%q squid_proxy_protocol=%v", c.Listen.TPROXY, c.SquidProxyProtocol)
	}
}

func TestEmptyFileIsDefaults(t *testing.T) {
	c, err := Parse("empty.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != mode.Off || c.Squid != "127.0.0.1:3128" || !c.SquidProxyProtocol {
		t.Errorf("defaults not applied: %+v", c)
	}
	if k := c.Cache; k.Admission != "off" || k.Window != time.Hour || k.FilterItems != 1_000_000 || k.MemoryMaxObject != 1<<20 || k.StatusTimeout != 2*time.Second {
		t.Errorf("cache defaults: %+v", k)
	}
}

// TestErrors checks that every error names the file, the line and the field.
func TestErrors(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown key", "mode: url\nvipp: 1.2.3.4\n", `bad.yaml:2: top level: unknown key "vipp" (did you mean "vip"?)`},
		{"unknown nested key", "dns:\n  vip_ttl: 1h\n  ttl: 5\n", `bad.yaml:3: dns: unknown key "ttl" (did you mean "vip_ttl"?)`},
		{"unknown key far from any", "http:\n  zzzzzzzz: 1\n", `bad.yaml:2: http: unknown key "zzzzzzzz"`},
		{"bad mode", "mode: proxy\n", `bad.yaml:1: mode: mode: "proxy" is not one of off, dns, url`},
		{"vip not an address", "vip: 10.0.0\n", `bad.yaml:1: vip: ParseAddr("10.0.0"): IPv4 address too short`},
		{"vip is v6", "mode: dns\nvip: \"2001:db8::1\"\n", `bad.yaml:2: vip: "2001:db8::1" is not an IPv4 address`},
		{"https key without cert", "listen:\n  tls: \":3443\"\nhttps:\n  key_file: /k.pem\n", `bad.yaml:4: https.key_file: cert_file and key_file go together (one is empty)`},
		{"https without listen.tls", "https:\n  cert_file: /c.pem\n  key_file: /k.pem\n", `bad.yaml:2: https.cert_file: needs listen.tls (the VIP:443 listener)`},
		{"https urls without cert", "https:\n  urls: true\n", `bad.yaml:2: https.urls: needs https.cert_file`},
		{"https shards", "https:\n  shards: 17\n", `bad.yaml:2: https.shards: 17 is outside 1..16`},
		{"https key exchange", "https:\n  key_exchange: X25519\n", `bad.yaml:2: https.key_exchange: "X25519" is not one of hybrid, classical`},
		{"https hold_surplus", "https:\n  hold_surplus: 2m\n", `bad.yaml:2: https.hold_surplus: 2m0s is outside 0..1m`},
		{"https too few ports", "https:\n  shards: 3\n  shard_ports: [443, 8443]\n", `bad.yaml:3: https.shard_ports: 2 ports for 3 shards`},
		{"https repeated port", "https:\n  shard_ports: [443, 443]\n", `bad.yaml:2: https.shard_ports.1: port 443 is zero or repeated`},
		{"https bad name", "https:\n  names: [vip]\n", `bad.yaml:2: https.names.0: "vip" is not a host name`},
		{"https host not a name", "https:\n  names: [vip.example.net]\n  host: other.example.net\n", `bad.yaml:3: https.host: "other.example.net" is not one of https.names`},
		{"squid_dns not on port 53", "listen:\n  squid_dns: \"127.0.53.53:5353\"\n", `bad.yaml:2: listen.squid_dns: "127.0.53.53:5353" is not a loopback address with port 53 (Squid's dns_nameservers take no port)`},
		{"squid_dns not loopback", "listen:\n  squid_dns: \"10.0.0.1:53\"\n", `bad.yaml:2: listen.squid_dns: "10.0.0.1:53" is not a loopback address with port 53 (Squid's dns_nameservers take no port)`},
		{"resolver without port", "resolvers:\n  - 1.1.1.1:53\n  - 9.9.9.9\n", `bad.yaml:3: resolvers.1: "9.9.9.9" is not host:port`},
		{"header too large", "http:\n  max_header_bytes: 1MiB\n", `bad.yaml:2: http.max_header_bytes: 1048576 is outside 1KiB..64KiB`},
		{"bad size", "http:\n  max_header_bytes: lots\n", `bad.yaml:2: http.max_header_bytes: "lots" is not a size`},
		{"bad duration", "dns:\n  vip_ttl: forever\n", `bad.yaml:2: dns.vip_ttl: cannot unmarshal !!str ` + "`forever`" + ` into time.Duration`},
		{"bad origins", "dns:\n  origins: hide\n", `bad.yaml:2: dns.origins: "hide" is not one of keep, drop`},
		{"negative procs", "mode: url\nprocs: -1\n", `bad.yaml:2: procs: -1 is outside 0..1024 (0: one per CPU)`},
		{"bad ttl policy", "dns:\n  ttl_policy: lowest\n", `bad.yaml:2: dns.ttl_policy: "lowest" is not one of rrset, origin, min`},
		{"vip6 needed", "dns:\n  aaaa: vip6\n", `bad.yaml:2: dns.aaaa: vip6 needs the top-level vip6 address`},
		{"bad suffix", "dns:\n  rewrite_domains:\n    - cnn.com\n    - \"bad domain\"\n", `bad.yaml:4: dns.rewrite_domains.1: "bad domain" is not a domain suffix`},
		{"bad cidr", "subscribers: [198.18.0.0/33]\n", `bad.yaml:1: subscribers: netip.ParsePrefix("198.18.0.0/33")`},
		{"bad host mismatch", "http:\n  host_mismatch: cache\n", `bad.yaml:2: http.host_mismatch: "cache" is not one of direct, refuse`},
		{"syntax", "mode: [url\n", `bad.yaml: 1: did not find expected`},
		{"no subscribers", "subscribers: []\n", `bad.yaml:1: subscribers: at least one subscriber range is needed`},
		{"bad admission", "cache:\n  admission: lfu\n", `bad.yaml:2: cache.admission: "lfu" is not one of off, second-hit`},
		{"short window", "cache:\n  admission: second-hit\n  window: 10ms\n", `bad.yaml:3: cache.window: 10ms is below 1s`},
		{"small filter", "cache:\n  filter_items: 10\n", `bad.yaml:2: cache.filter_items: 10 is outside 1000..1000000000`},
		{"memory object bound", "cache:\n  memory_max_object: 2GiB\n", `bad.yaml:2: cache.memory_max_object: 2147483648 is outside 1KiB..1GiB`},
		{"unknown cache key", "cache:\n  admision: off\n", `bad.yaml:2: cache: unknown key "admision" (did you mean "admission"?)`},
		{"hints window", "hints:\n  window: 40\n", `bad.yaml:2: hints.window: 40 is outside 1..32`},
		{"hints share", "hints:\n  enabled: true\n  share: 0\n", `bad.yaml:3: hints.share: 0 is outside (0, 1]`},
		{"hints load window", "hints:\n  load_window: 10ms\n", `bad.yaml:2: hints.load_window: 10ms is below 1s`},
		{"hints preload_as", "hints:\n  preload_as: [style, video]\n", `bad.yaml:2: hints.preload_as: "video" is not one of style, font, script, image, fetch`},
		// Each section's Validate is in its component; the path gets its
		// section and the line here (issue 28).
		{"optimize deadline", "optimize:\n  deadline: -1s\n", `bad.yaml:2: optimize.deadline: -1s must not be negative`},
		{"optimize quick_quality", "optimize:\n  quick_quality: 101\n", `bad.yaml:2: optimize.quick_quality: 101 is outside 0..100 (0: off)`},
		{"optimize ssim_refine", "optimize:\n  ssim_refine: 9\n", `bad.yaml:2: optimize.ssim_refine: 9 is outside 0..8 (0: the grid's quality)`},
		{"optimize link_floor", "optimize:\n  link_floor: -1s\n", `bad.yaml:2: optimize.link_floor: -1s must not be negative`},
		{"optimize order", "optimize:\n  order: lifo\n", `bad.yaml:2: optimize.order: "lifo": want urgency or arrival`},
		{"optimize without listen", "optimize:\n  enabled: true\n  listen: \"\"\n", `bad.yaml:2: optimize.enabled: needs optimize.listen (Squid's parent)`},
		{"rewrite body bound", "rewrite:\n  max_body_bytes: 100\n", `bad.yaml:2: rewrite.max_body_bytes: 100 is below 1KiB`},
		{"rewrite html type", "rewrite:\n  html_types:\n    - text/html\n    - text/HTML\n", `bad.yaml:4: rewrite.html_types.1: "text/HTML" is not a lowercase media type without parameters`},
		{"unknown rewrite key", "rewrite:\n  max_token: 1\n", `bad.yaml:2: rewrite: unknown key "max_token" (did you mean "max_token_bytes"?)`},
		{"guard port 0", "guard:\n  allowed_ports: [80, 0]\n", `bad.yaml:2: guard.allowed_ports.1: port 0 is not a port`},
		{"log level", "log:\n  level: loud\n", `bad.yaml:2: log.level: "loud" is not one of debug, info, warn, error`},
		{"per-subscriber bound", "http:\n  max_conns_per_subscriber: -2\n", `bad.yaml:2: http.max_conns_per_subscriber: -2 must be -1 (no bound) or more`},
		{"dns exclude", "dns:\n  exclude: [ok.com, \"-bad-.com\"]\n", `bad.yaml:2: dns.exclude.1: "-bad-.com" is not a domain suffix (label "-bad-")`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(c.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("error = %v", err)
	}
}

func TestFlagsOverride(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte("mode: off\nsquid: 10.1.1.1:3128\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("pepd", flag.ContinueOnError)
	f := RegisterFlags(fs)
	if err := fs.Parse([]string{"-mode", "dns", "-vip", "10.0.0.12", "-subscribers", "10.64.0.0/10, 198.18.0.0/24",
		"-resolver", "1.1.1.1:53", "-rewrite-domains", "cnn.com,yahoo.com", "-procs", "1"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Apply(c); err != nil {
		t.Fatal(err)
	}
	if c.Mode != mode.DNS || c.VIP.String() != "10.0.0.12" || len(c.Subscribers) != 2 ||
		c.Resolvers[0] != "1.1.1.1:53" || len(c.DNS.RewriteDomains) != 2 || c.Procs != 1 {
		t.Errorf("flags not applied: %+v", c)
	}
	if c.Squid != "10.1.1.1:3128" {
		t.Errorf("a flag not given overrode the file: squid=%q", c.Squid)
	}

	fs = flag.NewFlagSet("pepd", flag.ContinueOnError)
	f = RegisterFlags(fs)
	_ = fs.Parse([]string{"-vip", "nope"})
	if err := f.Apply(c); err == nil || !strings.Contains(err.Error(), `flag -vip: "nope" is not an IPv4 address`) {
		t.Errorf("bad flag error = %v", err)
	}
}

// TestHTTPSPorts: shard i's port is shard_ports[i], by default 443, 8443,
// 8444, ...
func TestHTTPSPorts(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want []uint16
	}{
		{"", []uint16{443}},
		{"https:\n  shards: 3\n", []uint16{443, 8443, 8444}},
		{"https:\n  shards: 2\n  shard_ports: [4443, 4444, 4445]\n", []uint16{4443, 4444}},
	} {
		c2, err := Parse("x.yaml", []byte(c.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if got := c2.HTTPS.Ports(); !slices.Equal(got, c.want) {
			t.Errorf("%q: ports %v, want %v", c.yaml, got, c.want)
		}
	}
}

// TestRestarts: the settings tagged `reload:"restart"` in the sections'
// types are reported when they change, by their dotted key; reloadable
// ones are not.
func TestRestarts(t *testing.T) {
	old, err := Parse("old.yaml", []byte("http:\n  max_conns: 100\n  host_mismatch: direct\n"))
	if err != nil {
		t.Fatal(err)
	}
	new, err := Parse("new.yaml", []byte("mode: url\nlisten:\n  http: \":8080\"\nhttp:\n  max_conns: 200\n  host_mismatch: refuse\n"+
		"cache:\n  window: 2h\nhttps:\n  max_streams: 50\nlog:\n  level: debug\n  format: json\n"))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, ch := range Restarts(old, new) {
		keys = append(keys, ch.Key)
		if ch.Key == "http.max_conns" && (ch.Old != 100 || ch.New != 200) {
			t.Errorf("http.max_conns: old %v new %v, want 100 200", ch.Old, ch.New)
		}
	}
	want := []string{"listen", "http.max_conns", "cache.window", "https.max_streams", "log.format"}
	if !slices.Equal(keys, want) {
		t.Errorf("Restarts = %v, want %v", keys, want)
	}
	if ch := Restarts(old, old); len(ch) != 0 {
		t.Errorf("Restarts of the same config = %v, want none", ch)
	}
}
