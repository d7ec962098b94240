// Package config loads and validates pepd's configuration file (YAML) and
// applies command-line overrides.
//
// Each component owns its section (issue 28): its type, defaults,
// Validate and documentation are in the component's package
// (httpproxy.Config is "http", dnsproxy.Config "dns", ...), and Config
// composes them. This package keeps the top-level keys, listen and log,
// the loading, the unknown-key check with its nearest-key suggestion, and
// the line-finding of errors: a section's Validate names the key within
// its section, Validate adds the section, locate the file and line. A
// setting that SIGHUP cannot change carries `reload:"restart"` on its
// field (Restarts).
//
// Unknown keys are errors, and every error names the file, the line and the
// field: `pepd: configs/pepd.yaml:12: dns.vip: "10.0.0" is not an IPv4
// address` (STYLE.md §7). Durations are written as Go durations ("30s"),
// sizes in bytes with an optional unit ("64KiB", "8MB").
//
// The file's shape is Config; configs/pepd.yaml is a commented example.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"pep/internal/cachepolicy"
	"pep/internal/config/field"
	"pep/internal/dnsproxy"
	"pep/internal/guard"
	"pep/internal/hints"
	"pep/internal/httpproxy"
	"pep/internal/mode"
	"pep/internal/optimize"
	"pep/internal/rewrite"
)

// Config is pepd's whole configuration: the top-level keys, listen and log
// (pepd's own), and one section per component, each of the component's
// own type (its keys, defaults, Validate and docs are in its package).
// Keys the file does not give keep Default's values; Validate checks
// every field.
type Config struct {
	// Mode is the mode at start: off, dns or url. Switch at run time with
	// `pepctl mode`.
	Mode mode.Mode `yaml:"mode"`
	// VIP is the caching proxy's address given to subscribers (DNS answers,
	// rewritten URLs). IPv4. The paper used 10.0.0.12; DESIGN.md 192.0.2.12.
	VIP netip.Addr `yaml:"vip" reload:"restart"`
	// VIP6 is an optional IPv6 VIP, used when dns.aaaa is "vip6".
	VIP6 netip.Addr `yaml:"vip6"`
	// Subscribers are the source ranges pepd serves (HTTP and DNS). Anybody
	// else is refused.
	Subscribers []netip.Prefix `yaml:"subscribers"`
	// Resolvers are the carrier resolvers, host:port, asked in order.
	Resolvers []string `yaml:"resolvers"`
	// Squid is Squid's port for pepd's forward-proxy requests, host:port.
	Squid string `yaml:"squid" reload:"restart"`
	// SquidProxyProtocol sends a PROXY protocol v1 header first on every
	// connection to Squid (into a require-proxy-header port) so that Squid
	// logs and ACLs see the subscriber's address. If false, pepd sends
	// X-Forwarded-For, which Squid must trust from pepd only. Default true.
	SquidProxyProtocol bool `yaml:"squid_proxy_protocol" reload:"restart"`
	// Procs is how many OS threads run pepd's Go code at once
	// (runtime.GOMAXPROCS); 0, the default, is Go's choice: the CPUs pepd
	// may run on. On an appliance where Squid has cores of its own, give
	// pepd the others: each processor beyond the work's needs adds
	// scheduler hand-offs between threads (futex wake-ups) to every
	// request. BenchmarkCachedRequestCPU on 2 cores: about 23 µs of CPU per
	// cached request at 1, about 31 at 2 (internal/httpproxy/README.md).
	// Applied at start and on SIGHUP.
	Procs int `yaml:"procs"`

	// Listen are pepd's listening addresses.
	Listen Listen `yaml:"listen" reload:"restart"`
	// HTTP are the HTTP path's limits and policies (httpproxy.Config).
	HTTP httpproxy.Config `yaml:"http"`
	// DNS is the DNS rewriter (dnsproxy.Config, issue 3).
	DNS dnsproxy.Config `yaml:"dns"`
	// Rewrite is the URL rewriter of url mode (rewrite.Config).
	Rewrite rewrite.Config `yaml:"rewrite"`
	// Guard is the not-an-open-proxy policy beyond subscribers
	// (guard.Config).
	Guard guard.Config `yaml:"guard"`
	// Optimize is the optimizer (optimize.Config, issue 11): images to
	// WebP, gzip for uncompressed text, behind Squid as its parent.
	Optimize optimize.Config `yaml:"optimize"`
	// Cache is pepd's part of caching beyond the private opt-out: second-hit
	// disk admission, the memory cache's object bound, the status
	// interface (cachepolicy.Config, issue 13).
	Cache cachepolicy.Config `yaml:"cache"`
	// Hints are the dependency hints (hints.Config, issue 26): pages'
	// dependency sets learned from the loads pepd sees, hinted on the next
	// document (Link: rel=preload) and fetched ahead into Squid.
	Hints hints.Config `yaml:"hints"`
	// Radio are socket options of the subscriber-facing connections
	// (httpproxy.RadioOptions).
	Radio httpproxy.RadioOptions `yaml:"radio"`
	// HTTPS is the VIP as the operator's own HTTPS origin (httpproxy.HTTPS,
	// issue 25): TLS to the VIP itself is terminated (HTTP/2, HTTP/1.1)
	// instead of spliced; url mode may write https VIP URLs over k shards.
	HTTPS httpproxy.HTTPS `yaml:"https"`
	// Log is pepd's logging.
	Log Log `yaml:"log"`

	file string    // where it was loaded from, for error messages
	root yaml.Node // the parsed document, to find a field's line
}

// Listen holds pepd's listening addresses. An empty address disables that
// listener.
type Listen struct {
	// HTTP accepts intercepted HTTP redirected by nftables REDIRECT
	// (original destination from SO_ORIGINAL_DST) and requests sent to the
	// VIP itself. Default ":3129".
	HTTP string `yaml:"http"`
	// TPROXY accepts HTTP steered by nftables TPROXY (IP_TRANSPARENT; the
	// original destination is the socket's local address). Default "" (off).
	TPROXY string `yaml:"tproxy"`
	// TLS accepts TLS to VIP:443 for the SNI splice (dns mode). Default "".
	TLS string `yaml:"tls"`
	// DNS is the DNS proxy's address, UDP and TCP. Default ":5353".
	DNS string `yaml:"dns"`
	// Admin serves /mode, /metrics, /healthz. Default "127.0.0.1:9090".
	Admin string `yaml:"admin"`
	// SquidDNS is where pepd answers Squid's DNS lookups, UDP and TCP, from
	// its own resolver cache (internal/squiddns): a loopback address and
	// port 53, since Squid's dns_nameservers take no port ("pepctl
	// squid-conf" lists it before the carrier resolvers). Default "" (off:
	// Squid asks the carrier resolvers itself).
	SquidDNS string `yaml:"squid_dns"`
}

// Log holds logging settings.
type Log struct {
	// Level: debug, info, warn, error. Default info.
	Level string `yaml:"level"`
	// Format: text or json. Default text.
	Format string `yaml:"format" reload:"restart"`
}

// Validate checks the log section: level and format.
func (l Log) Validate() error {
	if !field.OneOf(l.Level, "debug", "info", "warn", "error") {
		return field.Errorf("level", "%q is not one of debug, info, warn, error", l.Level)
	}
	if !field.OneOf(l.Format, "text", "json") {
		return field.Errorf("format", "%q is not one of text, json", l.Format)
	}
	return nil
}

// ByteSize is a size in bytes (field.ByteSize, which the components'
// sections use).
type ByteSize = field.ByteSize

// Default returns the configuration used where the file says nothing:
// the top-level and listen defaults here, each section's from its
// component.
func Default() Config {
	return Config{
		Mode:        mode.Off,
		VIP:         netip.MustParseAddr("192.0.2.12"),
		Subscribers: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")},
		Resolvers:   []string{"198.18.1.2:53"},
		Squid:       "127.0.0.1:3128",
		// PROXY protocol by default, as configs/squid.conf's pepd port expects.
		SquidProxyProtocol: true,
		Listen:             Listen{HTTP: ":3129", DNS: ":5353", Admin: "127.0.0.1:9090"},
		HTTP:               httpproxy.DefaultConfig(),
		DNS:                dnsproxy.DefaultConfig(),
		Rewrite:            rewrite.DefaultConfig(),
		Guard:              guard.DefaultConfig(),
		Optimize:           optimize.DefaultConfig(),
		Cache:              cachepolicy.DefaultConfig(),
		HTTPS:              httpproxy.DefaultHTTPS(),
		Radio:              httpproxy.DefaultRadio(),
		Hints:              hints.DefaultConfig(),
		Log:                Log{Level: "info", Format: "text"},
	}
}

// Load reads the YAML file at path over Default and validates the result.
// Errors name the file, line and field.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data)
}

// Parse is Load for data already read; name is used in error messages.
func Parse(name string, data []byte) (*Config, error) {
	c := Default()
	c.file = name
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %s", name, cleanYAMLError(err))
	}
	if err := unknownKey(&root, reflect.TypeOf(c), nil); err != nil {
		return nil, fmt.Errorf("%s:%w", name, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && err != io.EOF { // io.EOF: empty file, all defaults
		if path, line, ferr := findDecodeError(&root, reflect.TypeOf(c), nil); ferr != nil {
			msg := leadingLineRE.ReplaceAllString(cleanYAMLError(ferr), "")
			return nil, fmt.Errorf("%s:%d: %s: %s", name, line, strings.Join(path, "."), msg)
		}
		return nil, fmt.Errorf("%s: %s", name, cleanYAMLError(err))
	}
	c.root = root
	if err := c.Validate(); err != nil {
		return nil, c.locate(err)
	}
	return &c, nil
}

// unknownKey finds the first mapping key of the document that is not a
// field of the struct type it decodes into, and names its section and the
// nearest known key: "12: dns: unknown key \"ttl\" (did you mean
// \"vip_ttl\"?)". Keys of maps and anything not a struct are not checked.
func unknownKey(n *yaml.Node, t reflect.Type, path []string) error {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || n.Kind != yaml.MappingNode {
		return nil
	}
	known := map[string]reflect.Type{}
	var names []string
	for j := 0; j < t.NumField(); j++ {
		f := t.Field(j)
		name := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		known[name] = f.Type
		names = append(names, name)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		ft, ok := known[key.Value]
		if !ok {
			section := "top level"
			if len(path) > 0 {
				section = strings.Join(path, ".")
			}
			msg := fmt.Sprintf("%d: %s: unknown key %q", key.Line, section, key.Value)
			if best := nearest(key.Value, names); best != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", best)
			}
			return errors.New(msg)
		}
		if err := unknownKey(val, ft, append(slices.Clone(path), key.Value)); err != nil {
			return err
		}
	}
	return nil
}

// nearest returns the candidate closest to s by edit distance
// (Levenshtein), if it is close enough to be a likely typo: at most a
// third of the longer word's length, or s is a prefix or suffix of it.
func nearest(s string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		d := editDistance(s, c)
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	if bestD <= max(len(s), len(best))/3 || strings.HasPrefix(best, s) || strings.HasSuffix(best, s) {
		return best
	}
	return ""
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// findDecodeError walks the document beside the struct type t and decodes
// each field's node on its own, to find which field a decode error (that
// yaml.v3 reports without a line for TextUnmarshaler types) belongs to.
// It returns the path and line of the first field that fails.
func findDecodeError(n *yaml.Node, t reflect.Type, path []string) ([]string, int, error) {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	if t.Kind() != reflect.Struct || n.Kind != yaml.MappingNode {
		v := reflect.New(t)
		if err := n.Decode(v.Interface()); err != nil {
			return path, n.Line, err
		}
		return nil, 0, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		for j := 0; j < t.NumField(); j++ {
			f := t.Field(j)
			if strings.Split(f.Tag.Get("yaml"), ",")[0] != key.Value {
				continue
			}
			if p, line, err := findDecodeError(val, f.Type, append(slices.Clone(path), key.Value)); err != nil {
				if line == 0 {
					line = key.Line
				}
				return p, line, err
			}
		}
	}
	return nil, 0, nil
}

var (
	yamlLineRE = regexp.MustCompile(`line (\d+): `)
	inTypeRE   = regexp.MustCompile(` in type [\w.]+`)
	// leadingLineRE strips the "12: " cleanYAMLError puts first, where the
	// caller prints the line itself.
	leadingLineRE = regexp.MustCompile(`^\d+: `)
)

// cleanYAMLError turns yaml.v3's "yaml: unmarshal errors:\n  line 3: field
// x not found in type config.Config" into "3: field x not found".
func cleanYAMLError(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	s = strings.TrimPrefix(s, "unmarshal errors:\n")
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if m := yamlLineRE.FindStringSubmatchIndex(l); m != nil && m[0] == 0 {
			l = l[m[2]:m[3]] + ": " + l[m[1]:]
		}
		l = inTypeRE.ReplaceAllString(l, "")
		parts = append(parts, l)
	}
	return strings.Join(parts, "; ")
}

// locate turns a *field.Error into "file:line: path: reason".
func (c *Config) locate(err error) error {
	var fe *field.Error
	if !errors.As(err, &fe) {
		return fmt.Errorf("%s: %w", c.file, err)
	}
	line := lineOf(&c.root, strings.Split(fe.Path, "."))
	if line > 0 {
		return fmt.Errorf("%s:%d: %w", c.file, line, fe)
	}
	return fmt.Errorf("%s: %w", c.file, fe)
}

// lineOf finds the line of the node at path (mapping keys and sequence
// indexes); where the path ends early it returns the deepest line found,
// and 0 if the first key is absent (a default value is at fault).
func lineOf(n *yaml.Node, path []string) int {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := 0
	for _, key := range path {
		switch n.Kind {
		case yaml.MappingNode:
			found := false
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == key {
					line = n.Content[i].Line
					n = n.Content[i+1]
					found = true
					break
				}
			}
			if !found {
				return line
			}
		case yaml.SequenceNode:
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i >= len(n.Content) {
				return line
			}
			n = n.Content[i]
			line = n.Line
		default:
			return line
		}
	}
	return line
}

// Validate checks every field and returns the first error as a
// *field.Error whose path starts with its section ("dns.vip_ttl"). The
// top-level keys and listen are checked here, each section by its own
// Validate (in its component's package), then the rules that join two
// sections: dns.aaaa vip6 needs vip6, https.cert_file needs listen.tls.
func (c *Config) Validate() error {
	if err := c.validateTop(); err != nil {
		return err
	}
	for _, s := range []struct {
		name     string
		validate func() error
	}{
		{"http", c.HTTP.Validate}, {"optimize", c.Optimize.Validate}, {"hints", c.Hints.Validate},
		{"cache", c.Cache.Validate}, {"radio", c.Radio.Validate}, {"dns", c.validateDNS},
		{"rewrite", c.Rewrite.Validate}, {"guard", c.Guard.Validate}, {"https", c.validateHTTPS},
		{"log", c.Log.Validate},
	} {
		if err := s.validate(); err != nil {
			return field.Prefix(s.name, err)
		}
	}
	return nil
}

// validateTop checks the top-level keys and listen.
func (c *Config) validateTop() error {
	if !c.VIP.IsValid() || !c.VIP.Is4() {
		return field.Errorf("vip", "%q is not an IPv4 address", c.VIP.String())
	}
	if c.VIP6.IsValid() && !c.VIP6.Is6() {
		return field.Errorf("vip6", "%q is not an IPv6 address", c.VIP6.String())
	}
	if c.Procs < 0 || c.Procs > 1024 {
		return field.Errorf("procs", "%d is outside 0..1024 (0: one per CPU)", c.Procs)
	}
	if len(c.Subscribers) == 0 {
		return field.Errorf("subscribers", "at least one subscriber range is needed")
	}
	if len(c.Resolvers) == 0 {
		return field.Errorf("resolvers", "at least one carrier resolver is needed")
	}
	for i, r := range c.Resolvers {
		if err := field.HostPort(r, true); err != nil {
			return field.Errorf(fmt.Sprintf("resolvers.%d", i), "%w", err)
		}
	}
	if err := field.HostPort(c.Squid, true); err != nil {
		return field.Errorf("squid", "%w", err)
	}
	for _, l := range []struct{ name, v string }{
		{"listen.http", c.Listen.HTTP}, {"listen.tproxy", c.Listen.TPROXY},
		{"listen.tls", c.Listen.TLS}, {"listen.dns", c.Listen.DNS}, {"listen.admin", c.Listen.Admin},
	} {
		if l.v == "" {
			continue
		}
		if err := field.HostPort(l.v, false); err != nil {
			return field.Errorf(l.name, "%w", err)
		}
	}
	if a := c.Listen.SquidDNS; a != "" {
		ap, err := netip.ParseAddrPort(a)
		if err != nil || !ap.Addr().IsLoopback() || ap.Port() != 53 {
			return field.Errorf("listen.squid_dns", "%q is not a loopback address with port 53 (Squid's dns_nameservers take no port)", a)
		}
	}
	return nil
}

// validateDNS checks the dns section and that aaaa vip6 has the
// top-level vip6 to give.
func (c *Config) validateDNS() error {
	if err := c.DNS.Validate(); err != nil {
		return err
	}
	if c.DNS.AAAA == dnsproxy.AAAAVIP6 && !c.VIP6.IsValid() {
		return field.Errorf("aaaa", "vip6 needs the top-level vip6 address")
	}
	return nil
}

// validateHTTPS checks the https section and that a certificate has
// listen.tls (the VIP:443 listener) to be served on.
func (c *Config) validateHTTPS() error {
	h := c.HTTPS
	if h.CertFile != "" && h.KeyFile != "" && c.Listen.TLS == "" {
		return field.Errorf("cert_file", "needs listen.tls (the VIP:443 listener)")
	}
	return h.Validate()
}

// File returns the path the config was loaded from ("" if built in code).
func (c *Config) File() string { return c.file }
