// Package config loads and validates pepd's configuration file (YAML) and
// applies command-line overrides.
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
	"net"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"pep/internal/config/field"
	"pep/internal/mode"
)

// Config is pepd's whole configuration. Zero values are replaced by the
// defaults of Default; Validate checks every field.
type Config struct {
	// Mode is the mode at start: off, dns or url. Switch at run time with
	// `pepctl mode`.
	Mode mode.Mode `yaml:"mode"`
	// VIP is the caching proxy's address given to subscribers (DNS answers,
	// rewritten URLs). IPv4. The paper used 10.0.0.12; DESIGN.md 192.0.2.12.
	VIP netip.Addr `yaml:"vip"`
	// VIP6 is an optional IPv6 VIP, used when dns.aaaa is "vip6".
	VIP6 netip.Addr `yaml:"vip6"`
	// Subscribers are the source ranges pepd serves (HTTP and DNS). Anybody
	// else is refused.
	Subscribers []netip.Prefix `yaml:"subscribers"`
	// Resolvers are the carrier resolvers, host:port, asked in order.
	Resolvers []string `yaml:"resolvers"`
	// Squid is Squid's port for pepd's forward-proxy requests, host:port.
	Squid string `yaml:"squid"`
	// SquidProxyProtocol sends a PROXY protocol v1 header first on every
	// connection to Squid (into a require-proxy-header port) so that Squid
	// logs and ACLs see the subscriber's address. If false, pepd sends
	// X-Forwarded-For, which Squid must trust from pepd only. Default true.
	SquidProxyProtocol bool `yaml:"squid_proxy_protocol"`
	// Procs is how many OS threads run pepd's Go code at once
	// (runtime.GOMAXPROCS); 0, the default, is Go's choice: the CPUs pepd
	// may run on. On an appliance where Squid has cores of its own, give
	// pepd the others: each processor beyond the work's needs adds
	// scheduler hand-offs between threads (futex wake-ups) to every
	// request. BenchmarkCachedRequestCPU on 2 cores: about 23 µs of CPU per
	// cached request at 1, about 31 at 2 (internal/httpproxy/README.md).
	// Applied at start and on SIGHUP.
	Procs int `yaml:"procs"`

	Listen  Listen  `yaml:"listen"`
	HTTP    HTTP    `yaml:"http"`
	DNS     DNS     `yaml:"dns"`
	Rewrite Rewrite `yaml:"rewrite"`
	Guard   Guard   `yaml:"guard"`
	// Optimize is the optimizer (internal/optimize, issue 11): images to
	// WebP, gzip for uncompressed text, behind Squid as its parent.
	Optimize Optimize `yaml:"optimize"`
	// Cache is pepd's part of caching beyond the private opt-out: second-hit
	// disk admission, the memory cache's object bound, the status
	// interface (internal/cachepolicy, issue 13).
	Cache Cache `yaml:"cache"`
	// Hints are the dependency hints (internal/hints, issue 26): pages'
	// dependency sets learned from the loads pepd sees, hinted on the next
	// document (Link: rel=preload) and fetched ahead into Squid.
	Hints Hints `yaml:"hints"`
	// Radio are socket options of the subscriber-facing connections.
	Radio Radio `yaml:"radio"`
	// HTTPS is the VIP as the operator's own HTTPS origin (issue 25):
	// TLS to the VIP itself is terminated (HTTP/2, HTTP/1.1) instead of
	// spliced; url mode may write https VIP URLs over k shards.
	HTTPS HTTPS `yaml:"https"`
	Log   Log   `yaml:"log"`

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
}

// HTTP holds the limits of the HTTP path (issue 2 "Limits").
type HTTP struct {
	// MaxHeaderBytes bounds a request's header block; at most 64 KiB
	// (Squid's request_header_max_size default). Default 32 KiB.
	MaxHeaderBytes ByteSize `yaml:"max_header_bytes"`
	// ReadHeaderTimeout bounds the time to read a request's headers
	// (slowloris). Default 10s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// IdleTimeout closes a kept-alive client connection idle this long.
	// Default 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// UpstreamTimeout bounds the wait for Squid's response headers.
	// Default 60s.
	UpstreamTimeout time.Duration `yaml:"upstream_timeout"`
	// UpstreamIdle is how long an idle connection to Squid is kept for
	// reuse (internal/httpproxy's pool, both HTTP paths); below Squid's
	// client_idle_pconn_timeout (2 min). Default 60s.
	UpstreamIdle time.Duration `yaml:"upstream_idle"`
	// MaxConns bounds concurrent client connections; more wait in the
	// kernel's accept queue. Default 10000.
	MaxConns int `yaml:"max_conns"`
	// WriteTimeout closes a subscriber connection that does not take a
	// write for this long (a subscriber that stopped reading). Default 30s
	// (httpproxy.Limits.WriteTimeout says why; Squid's write_timeout,
	// HAProxy's timeout client).
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// MaxConnsPerSubscriber bounds the connections of one source address;
	// more are closed at accept. Default 1024 (httpproxy.Limits says why
	// not Chromium's 256); -1: no bound.
	MaxConnsPerSubscriber int `yaml:"max_conns_per_subscriber"`
	// HostMismatch says what pepd does with an intercepted request whose
	// Host does not resolve to the original destination: "direct" (forward
	// to the original destination, never cached under that name) or
	// "refuse" (403). Default "direct".
	HostMismatch string `yaml:"host_mismatch"`
	// KeepPrivateToken passes the CacheKeeper opt-out token (CK-Private in
	// User-Agent, seed 000 §4) on to the origin; by default pepd strips it
	// (the transaction is still never cached: internal/cachepolicy).
	KeepPrivateToken bool `yaml:"keep_private_token"`
}

// DNS holds the DNS rewriter's settings (issue 3).
type DNS struct {
	// RewriteDomains are domain suffixes whose A answers get the VIP; "*"
	// means every name.
	RewriteDomains []string `yaml:"rewrite_domains"`
	// RewriteDomainsFile is a file of more suffixes, one a line (# comments),
	// reloaded on SIGHUP.
	RewriteDomainsFile string `yaml:"rewrite_domains_file"`
	// RewriteWWW also rewrites every name starting with "www." (paper §3.2).
	RewriteWWW bool `yaml:"rewrite_www"`
	// Exclude are suffixes never rewritten, even when they match.
	Exclude []string `yaml:"exclude"`
	// VIPTTL is the TTL given to the VIP record. Default 24h (the paper's
	// one day).
	VIPTTL time.Duration `yaml:"vip_ttl"`
	// TTLPolicy chooses the TTL of the rewritten RRset (RFC 2181 §5.2: one
	// RRset, one TTL): "rrset" (all records at vip_ttl), "origin" (all at
	// the origin's TTL), "min" (all at the lower of both). Default "rrset".
	TTLPolicy string `yaml:"ttl_policy"`
	// Origins says what happens to the origin addresses of a rewritten A
	// (or AAAA) RRset: "keep" puts them after the VIP, so that a phone that
	// roamed away from the VIP falls back to the origin (paper §3.2, §5.3.2);
	// "drop" answers with the VIP alone. Keeping them costs, at long RTTs, a
	// second SYN per connection: browsers that race addresses (Chromium's
	// Happy Eyeballs, 250 ms) try the origin before the VIP's SYN-ACK is back
	// (testbed/README.md). Default "keep".
	Origins string `yaml:"origins"`
	// AAAA for rewritten names: "pass", "filter" or "vip6". Default "filter".
	AAAA string `yaml:"aaaa"`
	// HTTPSRecords (type 65) for rewritten names: "filter" or "hints".
	// Default "filter".
	HTTPSRecords string `yaml:"https_records"`
	// Timeout for one upstream attempt. Default 2s.
	Timeout time.Duration `yaml:"timeout"`
	// Attempts per query over all resolvers. Default 3.
	Attempts int `yaml:"attempts"`
	// MaxInflight bounds upstream queries in flight. Default 1024.
	MaxInflight int `yaml:"max_inflight"`
}

// Rewrite holds the URL rewriter's settings (issue 2 "URL mode").
type Rewrite struct {
	// MaxBodyBytes is the largest (decoded) HTML or CSS body rewritten;
	// larger bodies pass through unchanged. Default 8 MiB.
	MaxBodyBytes ByteSize `yaml:"max_body_bytes"`
}

// Guard holds the not-an-open-proxy settings beyond Subscribers.
type Guard struct {
	// AllowedPorts are the destination ports pepd forwards to. Default [80].
	AllowedPorts []uint16 `yaml:"allowed_ports"`
	// Allow exempts prefixes from the special-range checks.
	Allow []netip.Prefix `yaml:"allow"`
	// Deny refuses more prefixes.
	Deny []netip.Prefix `yaml:"deny"`
}

// Optimize holds the optimizer's settings (internal/optimize). The
// switch (enabled) is orthogonal to the mode and changes at run time
// (PUT /optimize, pepctl optimize on|off, SIGHUP); listen and the queue
// need a restart; enabled and the exclusion list are re-read on SIGHUP.
type Optimize struct {
	// Enabled marks requests for the optimizer. Default false.
	Enabled bool `yaml:"enabled"`
	// Listen is the optimizer's address, Squid's parent (squid.conf
	// cache_peer pep_optimizer, rendered by pepctl squid-conf when set).
	// Default 127.0.0.1:3131; "" runs no optimizer.
	Listen string `yaml:"listen"`
	// SSIMTarget is the SSIM every served image reaches against its
	// original, in 0..1: per image the smallest of lossless WebP and the
	// lowest lossy quality that reaches it, or the original
	// (optimize.ImageOptions.Target). 0: the fixed rule (JPEG lossy at
	// quality, PNG and GIF lossless). Default optimize.DefaultTarget (0.95).
	SSIMTarget float64 `yaml:"ssim_target"`
	// SSIMTileFloor is the SSIM every 32x32 tile of a lossy WebP reaches
	// with ssim_target, in 0..1; 0: none. Default
	// optimize.DefaultTileFloor (0.90).
	SSIMTileFloor float64 `yaml:"ssim_tile_floor"`
	// Quality is the fixed rule's lossy WebP quality of JPEG photos, 1-100
	// (used with ssim_target 0). Default optimize.DefaultQuality.
	Quality int `yaml:"quality"`
	// MaxPixels bounds width*height of an image to decode. Default 40e6.
	MaxPixels int64 `yaml:"max_pixels"`
	// MinSaving is the fraction a transform must save to be served.
	// Default 0.10.
	MinSaving float64 `yaml:"min_saving"`
	// MaxBodyBytes bounds a body buffered for a transform. Default 8MiB.
	MaxBodyBytes ByteSize `yaml:"max_body_bytes"`
	// Workers is how many transforms run at once; 0: one per CPU.
	Workers int `yaml:"workers"`
	// Queue bounds the transforms waiting for a worker; 0: 4 per worker.
	Queue int `yaml:"queue"`
	// Deadline bounds how long a response waits for its transform (a
	// worker and the transform together); past it the original is served
	// and not stored, and the transform finishes for the next miss.
	// Default optimize.DefaultDeadline (100ms).
	Deadline time.Duration `yaml:"deadline"`
	// ResultBytes bounds the finished transforms pepd keeps for the next
	// miss of their object. Default 64MiB.
	ResultBytes ByteSize `yaml:"result_bytes"`
	// ExcludeFile lists sites never transformed, one host name per line
	// (subdomains included); re-read on SIGHUP. Default none.
	ExcludeFile string `yaml:"exclude_file"`
}

// Hints holds the dependency hints' settings (internal/hints,
// httpproxy.Hints). Enabled follows SIGHUP; the rest needs a restart.
type Hints struct {
	// Enabled learns, hints and fetches ahead. Default false.
	Enabled bool `yaml:"enabled"`
	// MaxPages is the number of pages remembered, least recently loaded
	// evicted (hints.Options.MaxPages). Default 10000.
	MaxPages int `yaml:"max_pages"`
	// MaxURLs is the number of subresource URLs remembered per page.
	// Default 64.
	MaxURLs int `yaml:"max_urls"`
	// Window is the number of recent loads a page's statistics cover,
	// 1-32. Default 8.
	Window int `yaml:"window"`
	// Share is the fraction of the recent loads that must have requested a
	// URL for it to be hinted, in (0, 1]. Default 0.5.
	Share float64 `yaml:"share"`
	// LoadWindow is how long after a document request a subscriber's
	// requests count as that document's load. Default 30s.
	LoadWindow time.Duration `yaml:"load_window"`
	// MaxHints caps the hints on one document. Default 20.
	MaxHints int `yaml:"max_hints"`
	// MaxHintBytes caps the sum of the hinted URLs' sizes for one
	// document. Default 1MiB.
	MaxHintBytes ByteSize `yaml:"max_hint_bytes"`
	// Prefetch asks Squid for a document's hinted URLs as the document
	// request arrives. Default true.
	Prefetch bool `yaml:"prefetch"`
	// PrefetchPerSubscriber bounds the fetches ahead in flight for one
	// subscriber. Default 8.
	PrefetchPerSubscriber int `yaml:"prefetch_per_subscriber"`
	// PrefetchMax bounds the fetches ahead in flight over all
	// subscribers. Default 256.
	PrefetchMax int `yaml:"prefetch_max"`
}

// Cache holds the cache settings (internal/cachepolicy). Admission also
// changes configs/squid.conf (pepctl squid-conf renders its rule from this
// section): render it again and reload Squid when switching it on.
type Cache struct {
	// Admission is "off" (every cacheable miss is stored, Squid's own
	// behaviour) or "second-hit" (CacheSifter, seed 001: a miss whose URL
	// pepd has not seen within Window is served but not stored; the next
	// request for it stores it). Default "off". SIGHUP switches between
	// them when pepd started with second-hit (the filter exists); from off
	// it needs a restart.
	Admission string `yaml:"admission"`
	// Window is how long pepd remembers a URL for admission: a second
	// request within Window of the first is stored, one after 2*Window is
	// first-seen again. Default 1h. Restart to change.
	Window time.Duration `yaml:"window"`
	// FilterItems is the number of distinct URLs each of the two Bloom
	// filters holds at a 1 % false-positive rate (about 1.2 bytes each); a
	// full filter rotates early (the window shrinks). Default 1000000
	// (2.4 MB). Restart to change.
	FilterItems int `yaml:"filter_items"`
	// MemoryMaxObject is Squid's maximum_object_size_in_memory (rendered by
	// pepctl squid-conf, in KiB): larger objects skip the memory cache.
	// Default 1MiB.
	MemoryMaxObject ByteSize `yaml:"memory_max_object"`
	// StatusTimeout bounds one read of Squid's cache manager (GET /cache,
	// a /metrics scrape). Default 2s.
	StatusTimeout time.Duration `yaml:"status_timeout"`
	// MemoryTier is the address (host:port) of a memory-only Squid that
	// pepctl squid-conf renders as the disk Squid's parent (and, with
	// -memory-tier, renders itself): with second-hit admission, a
	// first-seen object the disk Squid does not store is kept there in
	// memory, so that its second request is a memory hit instead of a
	// second origin fetch (CacheSifter's transient objects, seed 001;
	// internal/cachepolicy). Default "" (no tier). pepd itself does not
	// use it.
	MemoryTier string `yaml:"memory_tier"`
}

// Radio holds socket options of subscriber-facing TCP connections (issue
// 11, "a short radio queue"); each is kept only where measured to lower
// PLT or LCP (internal/httpproxy/README.md).
type Radio struct {
	// Congestion is TCP_CONGESTION for accepted connections ("" keeps the
	// namespace's default, net.ipv4.tcp_congestion_control).
	Congestion string `yaml:"congestion"`
	// NotsentLowat is TCP_NOTSENT_LOWAT in bytes (0: the system's).
	NotsentLowat ByteSize `yaml:"notsent_lowat"`
	// MaxPacingRate is SO_MAX_PACING_RATE in bytes per second (0: none).
	MaxPacingRate ByteSize `yaml:"max_pacing_rate"`
}

// HTTPS holds the settings of the VIP as an HTTPS origin
// (internal/viptls). With cert_file empty (the default) nothing is
// terminated: every TLS connection to the VIP is spliced by SNI as before.
type HTTPS struct {
	// CertFile is the VIP's certificate chain (PEM, leaf first) and
	// KeyFile its private key (PEM). Both or neither; re-read on SIGHUP
	// (a bad file keeps the old certificate). The certificate must name
	// every entry of Names, and the VIP address to be served without SNI.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// Names are the VIP's DNS names: a ClientHello with one of them as SNI
	// is terminated. A ClientHello without SNI to the VIP address is
	// terminated when the certificate names that address (an IP-address
	// certificate); every other one is spliced.
	Names []string `yaml:"names"`
	// URLs makes url mode write https VIP URLs
	// (https://HOST[:port]/host/path) instead of http://VIP/host/path.
	// Needs cert_file. Default false.
	URLs bool `yaml:"urls"`
	// Host is the host written in https VIP URLs: "" (the VIP address,
	// for an IP-address certificate) or one of Names.
	Host string `yaml:"host"`
	// Shards is k, the number of VIP origins url mode spreads object hosts
	// over (each host to one by a stable hash), so that a browser holds k
	// HTTP/2 connections. Default 1, at most 16.
	Shards int `yaml:"shards"`
	// ShardPorts are the ports of the shards' origins, shard i at
	// ShardPorts[i]; nftables steers each VIP:port to listen.tls. Default
	// 443, 8443, 8444, ... (distinct ports are distinct origins, which
	// Chromium does not pool into one HTTP/2 connection).
	ShardPorts []uint16 `yaml:"shard_ports"`
	// MaxStreams bounds the concurrent HTTP/2 streams of one connection
	// (SETTINGS_MAX_CONCURRENT_STREAMS, RFC 9113 §6.5.2). Default 100.
	MaxStreams int `yaml:"max_streams"`
	// MaxStreamsPerSubscriber bounds the concurrent requests over TLS of
	// one source address, all its connections together; more get 429.
	// Default 512.
	MaxStreamsPerSubscriber int `yaml:"max_streams_per_subscriber"`
}

// Enabled reports whether the VIP is served as an HTTPS origin.
func (h HTTPS) Enabled() bool { return h.CertFile != "" }

// Ports returns the first Shards ports of the shards' origins, defaults
// applied.
func (h HTTPS) Ports() []uint16 {
	out := make([]uint16, 0, h.Shards)
	for i := 0; i < h.Shards; i++ {
		switch {
		case i < len(h.ShardPorts):
			out = append(out, h.ShardPorts[i])
		case i == 0:
			out = append(out, 443)
		default:
			out = append(out, uint16(8443+i-1))
		}
	}
	return out
}

// Log holds logging settings.
type Log struct {
	// Level: debug, info, warn, error. Default info.
	Level string `yaml:"level"`
	// Format: text or json. Default text.
	Format string `yaml:"format"`
}

// ByteSize is a size in bytes; YAML accepts 65536, "64KiB", "64KB" (1000),
// "8MiB".
type ByteSize int64

var sizeRE = regexp.MustCompile(`^\s*([0-9]+)\s*([KMG]i?B|B)?\s*$`)

// UnmarshalText implements encoding.TextUnmarshaler.
func (b *ByteSize) UnmarshalText(t []byte) error {
	m := sizeRE.FindStringSubmatch(string(t))
	if m == nil {
		return fmt.Errorf("%q is not a size (e.g. 65536, 64KiB, 8MB)", t)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return fmt.Errorf("%q: %w", t, err)
	}
	mult := map[string]int64{"": 1, "B": 1, "KB": 1000, "MB": 1000 * 1000, "GB": 1000 * 1000 * 1000,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m[2]]
	*b = ByteSize(n * mult)
	return nil
}

// Default returns the configuration used where the file says nothing.
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
		HTTP: HTTP{MaxHeaderBytes: 32 << 10, ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout: 120 * time.Second, UpstreamTimeout: 60 * time.Second, UpstreamIdle: 60 * time.Second,
			MaxConns: 10000, HostMismatch: "direct"},
		DNS: DNS{VIPTTL: 24 * time.Hour, TTLPolicy: "rrset", Origins: "keep", AAAA: "filter",
			HTTPSRecords: "filter", Timeout: 2 * time.Second, Attempts: 3, MaxInflight: 1024},
		Rewrite: Rewrite{MaxBodyBytes: 8 << 20},
		Guard:   Guard{AllowedPorts: []uint16{80}},
		Optimize: Optimize{Listen: "127.0.0.1:3131", SSIMTarget: 0.95, SSIMTileFloor: 0.90, Quality: 75, MaxPixels: 40_000_000, MinSaving: 0.10,
			MaxBodyBytes: 8 << 20, Deadline: 100 * time.Millisecond, ResultBytes: 64 << 20},
		Cache: Cache{Admission: "off", Window: time.Hour, FilterItems: 1_000_000, MemoryMaxObject: 1 << 20,
			StatusTimeout: 2 * time.Second},
		HTTPS: HTTPS{Shards: 1, MaxStreams: 100, MaxStreamsPerSubscriber: 512},
		Hints: Hints{MaxPages: 10000, MaxURLs: 64, Window: 8, Share: 0.5, LoadWindow: 30 * time.Second, MaxHints: 20,
			MaxHintBytes: 1 << 20, Prefetch: true, PrefetchPerSubscriber: 8, PrefetchMax: 256},
		Log: Log{Level: "info", Format: "text"},
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
// *field.Error.
func (c *Config) Validate() error {
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
		if err := hostPort(r, true); err != nil {
			return field.Errorf(fmt.Sprintf("resolvers.%d", i), "%w", err)
		}
	}
	if err := hostPort(c.Squid, true); err != nil {
		return field.Errorf("squid", "%w", err)
	}
	for _, l := range []struct{ name, v string }{
		{"listen.http", c.Listen.HTTP}, {"listen.tproxy", c.Listen.TPROXY},
		{"listen.tls", c.Listen.TLS}, {"listen.dns", c.Listen.DNS}, {"listen.admin", c.Listen.Admin},
	} {
		if l.v == "" {
			continue
		}
		if err := hostPort(l.v, false); err != nil {
			return field.Errorf(l.name, "%w", err)
		}
	}
	h := c.HTTP
	switch {
	case h.MaxHeaderBytes < 1024 || h.MaxHeaderBytes > 64<<10:
		return field.Errorf("http.max_header_bytes", "%d is outside 1KiB..64KiB (Squid's request_header_max_size)", h.MaxHeaderBytes)
	case h.ReadHeaderTimeout <= 0:
		return field.Errorf("http.read_header_timeout", "%v must be positive", h.ReadHeaderTimeout)
	case h.IdleTimeout <= 0:
		return field.Errorf("http.idle_timeout", "%v must be positive", h.IdleTimeout)
	case h.UpstreamTimeout <= 0:
		return field.Errorf("http.upstream_timeout", "%v must be positive", h.UpstreamTimeout)
	case h.UpstreamIdle <= 0:
		return field.Errorf("http.upstream_idle", "%v must be positive", h.UpstreamIdle)
	case h.MaxConns < 1:
		return field.Errorf("http.max_conns", "%d must be at least 1", h.MaxConns)
	case h.WriteTimeout < 0:
		return field.Errorf("http.write_timeout", "%s must not be negative", h.WriteTimeout)
	case h.MaxConnsPerSubscriber < -1:
		return field.Errorf("http.max_conns_per_subscriber", "%d must be -1 (no bound) or more", h.MaxConnsPerSubscriber)
	case h.HostMismatch != "direct" && h.HostMismatch != "refuse":
		return field.Errorf("http.host_mismatch", "%q is not one of direct, refuse", h.HostMismatch)
	}
	o := c.Optimize
	switch {
	case o.Listen != "" && hostPort(o.Listen, false) != nil:
		return field.Errorf("optimize.listen", "%w", hostPort(o.Listen, false))
	case o.Enabled && o.Listen == "":
		return field.Errorf("optimize.enabled", "needs optimize.listen (Squid's parent)")
	case o.SSIMTarget < 0 || o.SSIMTarget > 1:
		return field.Errorf("optimize.ssim_target", "%v is outside 0..1 (0: the fixed rule)", o.SSIMTarget)
	case o.SSIMTileFloor < 0 || o.SSIMTileFloor > 1:
		return field.Errorf("optimize.ssim_tile_floor", "%v is outside 0..1 (0: none)", o.SSIMTileFloor)
	case o.Quality < 1 || o.Quality > 100:
		return field.Errorf("optimize.quality", "%d is outside 1..100", o.Quality)
	case o.MaxPixels < 1:
		return field.Errorf("optimize.max_pixels", "%d must be at least 1", o.MaxPixels)
	case o.MinSaving < 0 || o.MinSaving >= 1:
		return field.Errorf("optimize.min_saving", "%v is outside 0..1 (0.10: at least 10 %% smaller)", o.MinSaving)
	case o.MaxBodyBytes < 1024:
		return field.Errorf("optimize.max_body_bytes", "%d is below 1KiB", o.MaxBodyBytes)
	case o.Workers < 0 || o.Queue < 0:
		return field.Errorf("optimize.workers", "workers and queue must not be negative")
	case o.Deadline < 0:
		return field.Errorf("optimize.deadline", "%v must not be negative", o.Deadline)
	case o.ResultBytes < 0:
		return field.Errorf("optimize.result_bytes", "%d must not be negative", o.ResultBytes)
	}
	if o.ExcludeFile != "" {
		if _, err := os.Stat(o.ExcludeFile); err != nil {
			return field.Errorf("optimize.exclude_file", "%w", err)
		}
	}
	hn := c.Hints
	switch {
	case hn.MaxPages < 1:
		return field.Errorf("hints.max_pages", "%d must be at least 1", hn.MaxPages)
	case hn.MaxURLs < 1:
		return field.Errorf("hints.max_urls", "%d must be at least 1", hn.MaxURLs)
	case hn.Window < 1 || hn.Window > 32:
		return field.Errorf("hints.window", "%d is outside 1..32", hn.Window)
	case hn.Share <= 0 || hn.Share > 1:
		return field.Errorf("hints.share", "%v is outside (0, 1]", hn.Share)
	case hn.LoadWindow < time.Second:
		return field.Errorf("hints.load_window", "%v is below 1s", hn.LoadWindow)
	case hn.MaxHints < 1:
		return field.Errorf("hints.max_hints", "%d must be at least 1", hn.MaxHints)
	case hn.MaxHintBytes < 1:
		return field.Errorf("hints.max_hint_bytes", "%d must be at least 1", hn.MaxHintBytes)
	case hn.PrefetchPerSubscriber < 1:
		return field.Errorf("hints.prefetch_per_subscriber", "%d must be at least 1", hn.PrefetchPerSubscriber)
	case hn.PrefetchMax < 1:
		return field.Errorf("hints.prefetch_max", "%d must be at least 1", hn.PrefetchMax)
	}
	k := c.Cache
	switch {
	case !oneOf(k.Admission, "off", "second-hit"):
		return field.Errorf("cache.admission", "%q is not one of off, second-hit", k.Admission)
	case k.Window < time.Second:
		return field.Errorf("cache.window", "%v is below 1s", k.Window)
	case k.FilterItems < 1000 || k.FilterItems > 1_000_000_000:
		return field.Errorf("cache.filter_items", "%d is outside 1000..1000000000", k.FilterItems)
	case k.MemoryMaxObject < 1<<10 || k.MemoryMaxObject > 1<<30:
		return field.Errorf("cache.memory_max_object", "%d is outside 1KiB..1GiB", k.MemoryMaxObject)
	case k.StatusTimeout <= 0:
		return field.Errorf("cache.status_timeout", "%v must be positive", k.StatusTimeout)
	}
	if k.MemoryTier != "" {
		if _, _, err := net.SplitHostPort(k.MemoryTier); err != nil {
			return field.Errorf("cache.memory_tier", "%q: want host:port: %w", k.MemoryTier, err)
		}
	}
	if c.Radio.NotsentLowat < 0 || c.Radio.MaxPacingRate < 0 {
		return field.Errorf("radio", "sizes must not be negative")
	}
	d := c.DNS
	for i, s := range d.RewriteDomains {
		if err := domainSuffix(s, true); err != nil {
			return field.Errorf(fmt.Sprintf("dns.rewrite_domains.%d", i), "%w", err)
		}
	}
	for i, s := range d.Exclude {
		if err := domainSuffix(s, false); err != nil {
			return field.Errorf(fmt.Sprintf("dns.exclude.%d", i), "%w", err)
		}
	}
	switch {
	case d.VIPTTL < time.Second || d.VIPTTL > 68*365*24*time.Hour:
		return field.Errorf("dns.vip_ttl", "%v is outside 1s..2^31s (RFC 2181 §8)", d.VIPTTL)
	case d.VIPTTL%time.Second != 0:
		return field.Errorf("dns.vip_ttl", "%v is not a whole number of seconds", d.VIPTTL)
	case !oneOf(d.TTLPolicy, "rrset", "origin", "min"):
		return field.Errorf("dns.ttl_policy", "%q is not one of rrset, origin, min", d.TTLPolicy)
	case !oneOf(d.Origins, "keep", "drop"):
		return field.Errorf("dns.origins", "%q is not one of keep, drop", d.Origins)
	case !oneOf(d.AAAA, "pass", "filter", "vip6"):
		return field.Errorf("dns.aaaa", "%q is not one of pass, filter, vip6", d.AAAA)
	case d.AAAA == "vip6" && !c.VIP6.IsValid():
		return field.Errorf("dns.aaaa", "vip6 needs the top-level vip6 address")
	case !oneOf(d.HTTPSRecords, "filter", "hints"):
		return field.Errorf("dns.https_records", "%q is not one of filter, hints", d.HTTPSRecords)
	case d.Timeout <= 0:
		return field.Errorf("dns.timeout", "%v must be positive", d.Timeout)
	case d.Attempts < 1:
		return field.Errorf("dns.attempts", "%d must be at least 1", d.Attempts)
	case d.MaxInflight < 1:
		return field.Errorf("dns.max_inflight", "%d must be at least 1", d.MaxInflight)
	}
	if c.Rewrite.MaxBodyBytes < 1024 {
		return field.Errorf("rewrite.max_body_bytes", "%d is below 1KiB", c.Rewrite.MaxBodyBytes)
	}
	for i, p := range c.Guard.AllowedPorts {
		if p == 0 {
			return field.Errorf(fmt.Sprintf("guard.allowed_ports.%d", i), "port 0 is not a port")
		}
	}
	if err := c.validateHTTPS(); err != nil {
		return err
	}
	if !oneOf(c.Log.Level, "debug", "info", "warn", "error") {
		return field.Errorf("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	if !oneOf(c.Log.Format, "text", "json") {
		return field.Errorf("log.format", "%q is not one of text, json", c.Log.Format)
	}
	return nil
}

// validateHTTPS checks the https section. The files themselves are read
// (and their errors reported) by internal/viptls at start and on SIGHUP.
func (c *Config) validateHTTPS() error {
	h := c.HTTPS
	switch {
	case (h.CertFile == "") != (h.KeyFile == ""):
		return field.Errorf("https.key_file", "cert_file and key_file go together (one is empty)")
	case h.Enabled() && c.Listen.TLS == "":
		return field.Errorf("https.cert_file", "needs listen.tls (the VIP:443 listener)")
	case h.URLs && !h.Enabled():
		return field.Errorf("https.urls", "needs https.cert_file")
	case h.Shards < 1 || h.Shards > 16:
		return field.Errorf("https.shards", "%d is outside 1..16", h.Shards)
	case h.MaxStreams < 1 || h.MaxStreams > 1000:
		return field.Errorf("https.max_streams", "%d is outside 1..1000", h.MaxStreams)
	case h.MaxStreamsPerSubscriber < 1:
		return field.Errorf("https.max_streams_per_subscriber", "%d must be at least 1", h.MaxStreamsPerSubscriber)
	case len(h.ShardPorts) > 0 && len(h.ShardPorts) < h.Shards:
		return field.Errorf("https.shard_ports", "%d ports for %d shards", len(h.ShardPorts), h.Shards)
	}
	for i, n := range h.Names {
		if err := domainSuffix(n, false); err != nil || strings.HasPrefix(n, ".") || !strings.Contains(n, ".") {
			return field.Errorf(fmt.Sprintf("https.names.%d", i), "%q is not a host name", n)
		}
	}
	if h.Host != "" && !slices.Contains(h.Names, h.Host) {
		return field.Errorf("https.host", "%q is not one of https.names", h.Host)
	}
	seen := map[uint16]bool{}
	for i, p := range h.ShardPorts {
		if p == 0 || seen[p] {
			return field.Errorf(fmt.Sprintf("https.shard_ports.%d", i), "port %d is zero or repeated", p)
		}
		seen[p] = true
	}
	return nil
}

func oneOf(s string, set ...string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

// hostPort checks "host:port"; needHost requires a non-empty host.
func hostPort(s string, needHost bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port", s)
	}
	if needHost && host == "" {
		return fmt.Errorf("%q has no host", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || (needHost && n == 0) {
		return fmt.Errorf("%q has no valid port", s)
	}
	return nil
}

var labelRE = regexp.MustCompile(`^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$`)

// domainSuffix checks a domain suffix such as "cnn.com" or ".cnn.com";
// star allows "*".
func domainSuffix(s string, star bool) error {
	if star && s == "*" {
		return nil
	}
	t := strings.TrimSuffix(strings.TrimPrefix(strings.ToLower(s), "."), ".")
	if t == "" || len(t) > 253 {
		return fmt.Errorf("%q is not a domain suffix", s)
	}
	for _, l := range strings.Split(t, ".") {
		if !labelRE.MatchString(l) {
			return fmt.Errorf("%q is not a domain suffix (label %q)", s, l)
		}
	}
	return nil
}

// File returns the path the config was loaded from ("" if built in code).
func (c *Config) File() string { return c.file }
