package httpproxy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"pep/internal/config/field"
	"pep/internal/guard"
	"pep/internal/rewrite"
	"pep/internal/viptls"
)

// Config is pepd's "http" section: the limits and policies of the HTTP
// path (issue 2 "Limits"). DefaultConfig gives its defaults; Validate
// checks it. Config.Limits, ProxyOptions and Settings turn it into what
// NewServer and New take, so that pepd copies no field of it.
type Config struct {
	// MaxHeaderBytes bounds a request's header block; at most 64 KiB
	// (Squid's request_header_max_size default). Default 32 KiB.
	MaxHeaderBytes field.ByteSize `yaml:"max_header_bytes" reload:"restart"`
	// ReadHeaderTimeout bounds the time to read a request's headers
	// (slowloris). Default 10s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout" reload:"restart"`
	// IdleTimeout closes a kept-alive client connection idle this long.
	// Default 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout" reload:"restart"`
	// UpstreamTimeout bounds the wait for Squid's response headers.
	// Default 60s.
	UpstreamTimeout time.Duration `yaml:"upstream_timeout" reload:"restart"`
	// UpstreamIdle is how long an idle connection to Squid is kept for
	// reuse (the pool of both HTTP paths); below Squid's
	// client_idle_pconn_timeout (2 min). Default 60s.
	UpstreamIdle time.Duration `yaml:"upstream_idle" reload:"restart"`
	// MaxConns bounds concurrent client connections; more wait in the
	// kernel's accept queue. Default 10000.
	MaxConns int `yaml:"max_conns" reload:"restart"`
	// WriteTimeout closes a subscriber connection that does not take a
	// write for this long (a subscriber that stopped reading). Default 30s
	// (Limits.WriteTimeout says why; Squid's write_timeout, HAProxy's
	// timeout client).
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// MaxConnsPerSubscriber bounds the connections of one source address;
	// more are closed at accept. Default 1024 (Limits says why not
	// Chromium's 256); -1: no bound.
	MaxConnsPerSubscriber int `yaml:"max_conns_per_subscriber"`
	// HostMismatch says what pepd does with an intercepted request whose
	// Host does not resolve to the original destination: "direct" (forward
	// to the original destination, never cached under that name) or
	// "refuse" (403). Default "direct". Follows SIGHUP.
	HostMismatch string `yaml:"host_mismatch"`
	// KeepPrivateToken passes the CacheKeeper opt-out token (CK-Private in
	// User-Agent, seed 000 §4) on to the origin; by default pepd strips it
	// (the transaction is still never cached: internal/cachepolicy).
	// Follows SIGHUP.
	KeepPrivateToken bool `yaml:"keep_private_token"`
}

// DefaultConfig returns the http section's defaults.
func DefaultConfig() Config {
	return Config{MaxHeaderBytes: 32 << 10, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
		UpstreamTimeout: 60 * time.Second, UpstreamIdle: 60 * time.Second, MaxConns: 10000,
		WriteTimeout: 30 * time.Second, MaxConnsPerSubscriber: 1024, HostMismatch: "direct"}
}

// Validate returns the first invalid field as a *field.Error whose path
// is the key within the section ("max_header_bytes").
func (c Config) Validate() error {
	return field.First(
		field.Check(c.MaxHeaderBytes < 1024 || c.MaxHeaderBytes > 64<<10, "max_header_bytes",
			"%d is outside 1KiB..64KiB (Squid's request_header_max_size)", c.MaxHeaderBytes),
		field.Positive("read_header_timeout", c.ReadHeaderTimeout),
		field.Positive("idle_timeout", c.IdleTimeout),
		field.Positive("upstream_timeout", c.UpstreamTimeout),
		field.Positive("upstream_idle", c.UpstreamIdle),
		field.AtLeast("max_conns", c.MaxConns, 1),
		field.Check(c.WriteTimeout < 0, "write_timeout", "%s must not be negative", c.WriteTimeout),
		field.Check(c.MaxConnsPerSubscriber < -1, "max_conns_per_subscriber", "%d must be -1 (no bound) or more", c.MaxConnsPerSubscriber),
		field.Check(!field.OneOf(c.HostMismatch, "direct", "refuse"), "host_mismatch", "%q is not one of direct, refuse", c.HostMismatch),
	)
}

// Limits returns the Server's limits: c's, the radio section's socket
// options and the https section's stream bounds.
func (c Config) Limits(radio RadioOptions, streams HTTPS) Limits {
	return Limits{MaxHeaderBytes: int(c.MaxHeaderBytes), ReadHeaderTimeout: c.ReadHeaderTimeout,
		IdleTimeout: c.IdleTimeout, MaxConns: c.MaxConns, WriteTimeout: c.WriteTimeout,
		MaxConnsPerSubscriber: c.MaxConnsPerSubscriber, Radio: radio,
		MaxStreams: streams.MaxStreams, MaxStreamsPerSubscriber: streams.MaxStreamsPerSubscriber,
		H2Priority: streams.Priority, HoldSurplus: streams.HoldSurplus}
}

// ProxyOptions returns the Options of New that c sets (the upstream
// timeout and idle time); the caller adds the rest (VIP, Squid, Mode,
// Settings, ...).
func (c Config) ProxyOptions() Options {
	return Options{UpstreamTimeout: c.UpstreamTimeout, UpstreamIdle: c.UpstreamIdle}
}

// Settings returns the reloadable Settings for c with the policy,
// resolver and rewriter built by the caller.
func (c Config) Settings(pol *guard.Policy, res *Resolver, rw *rewrite.Rewriter) Settings {
	return Settings{Policy: pol, Resolver: res, Rewriter: rw, HostMismatch: c.HostMismatch, KeepPrivate: c.KeepPrivateToken}
}

// HTTPS is pepd's "https" section: the VIP as the operator's own HTTPS
// origin (issue 25). TLS to the VIP itself is terminated (internal/viptls
// holds the certificate and picks the connections; ServeTLS serves them,
// HTTP/2 or HTTP/1.1) instead of spliced; url mode may write https VIP
// URLs over k shards (Origins). With cert_file empty (the default)
// nothing is terminated: every TLS connection to the VIP is spliced by
// SNI. DefaultHTTPS gives its defaults; Validate checks it.
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
	Names []string `yaml:"names" reload:"restart"`
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
	// (SETTINGS_MAX_CONCURRENT_STREAMS, RFC 9113 §6.5.2; Limits.MaxStreams).
	// Default 100, at most 1000.
	MaxStreams int `yaml:"max_streams" reload:"restart"`
	// MaxStreamsPerSubscriber bounds the concurrent requests over TLS of
	// one source address, all its connections together; more get 429
	// (Limits.MaxStreamsPerSubscriber). Default 512.
	MaxStreamsPerSubscriber int `yaml:"max_streams_per_subscriber" reload:"restart"`
	// Priority is the HTTP/2 write scheduler of the VIP's TLS origin, the
	// order in which the responses of one connection's streams get the
	// connection's bytes (Limits.H2Priority): "round-robin" (Go's
	// net/http default: every ready stream in turn) or "rfc7540" (the
	// streams' dependency tree and weights from the client's HEADERS
	// frames, RFC 7540 §5.3, as Chromium sends them: a render-blocking
	// stylesheet before images; golang.org/x/net/http2's scheduler).
	// Default rfc7540: with radio.notsent_lowat 16KiB it sends the image
	// Chromium marks High (the LCP candidate) before the rest, where
	// round-robin shares the link among a page's images until the end
	// (beatonna on 3G: LCP 17.3 s against 8.5 s; over 15 pages, LCP 1.06
	// against 1.03 of direct's; testbed/README.md, session 13).
	Priority string `yaml:"priority" reload:"restart"`
	// KeyExchange is the VIP's TLS key exchange (viptls.KeyExchanges):
	// "hybrid" (default: X25519MLKEM768, post-quantum, where the client
	// offers it) or "classical" (X25519, P-256): about 1.1 KB less from the
	// server per handshake. Chromium makes up to 6 TLS handshakes to the
	// VIP on each page's first use of it (testbed/README.md, session 21),
	// so on a byte-bound cell that is several kB per page, at the price
	// of the post-quantum protection of the VIP's leg.
	KeyExchange string `yaml:"key_exchange" reload:"restart"`
	// RenderBlocking is the scheme url mode writes an HTML document's
	// render-blocking elements under (stylesheet links, parser-blocking
	// scripts; rewrite.Config.PlainBlocking) when URLs is on: "https"
	// (the shards, like every other object) or "http" (the plain
	// http://VIP: TCP alone, no TLS handshake before the first paint's
	// stylesheets). Default http: on tp5n over 3G (15 pages, 2 runs,
	// HTTP/2 k=1 with the optimizer) it took FCP from 1.14 to 0.91 of
	// direct's and LCP from 1.12 to 1.01 (testbed/README.md, session 13).
	RenderBlocking string `yaml:"render_blocking"`
	// OwnHostMax is rewrite.Config.OwnHostMax when URLs is on: an HTML
	// document naming at most this many distinct URLs on its own host
	// keeps them as they are (they ride the browser's connections to
	// that host, still through pepd by the L4 redirect), and so do the
	// style sheets it keeps there; 0 rewrites every URL. Default 6
	// (Chromium's HTTP/1.1 connections per host): on the 18 tp5n pages
	// with 1-6 such URLs over 3G (5 runs, warm), no page is slower than
	// direct beyond its spread where google.com and torrentz.eu were
	// (1.08, 1.14 of direct's PLT; now 0.96, 0.97), and page by page PLT,
	// FCP and LCP are 1.00, 0.99 and 0.97 of what they were
	// (testbed/README.md, session 18).
	OwnHostMax int `yaml:"own_host_max"`
	// FirstImagesPlain is rewrite.Config.FirstImagesPlain with
	// RenderBlocking http: the first this many <img> of a document go
	// under the plain http://VIP too. Default 0: measured with 4, LCP
	// 0.835 of direct's against 0.892 in the median but worse on the
	// pages whose LCP image comes later (reuters.com 0.73 to 1.08), and
	// PLT 0.698 against 0.671 (testbed/README.md, session 18).
	FirstImagesPlain int `yaml:"first_images_plain"`
	// HoldSurplus bounds how long a ClientHello offering h2 waits for
	// pepd's answer while the same subscriber's first handshake with the
	// same VIP origin is in flight (Limits.HoldSurplus): the browser
	// closes its surplus connections once the first says h2, and a closed
	// one then costs no ServerHello, certificate or key exchange. 0: no
	// hold. Default 2s, above a 3G round trip under loss; a held
	// connection is answered at the latest 40 ms after the first
	// handshake ends. On tp5n over 3G, warm (100 pages, against off in
	// the campaign before): 329 of 412 held handshakes closed unanswered,
	// radio bytes per page 0.634 of direct's against 0.645, the 20
	// smallest pages' 88 kB per load against 99, PLT and LCP within one
	// run's noise (testbed/README.md, session 31).
	HoldSurplus time.Duration `yaml:"hold_surplus" reload:"restart"`
}

// DefaultHTTPS returns the https section's defaults.
func DefaultHTTPS() HTTPS {
	return HTTPS{Shards: 1, MaxStreams: 100, MaxStreamsPerSubscriber: 512, Priority: H2RFC7540, RenderBlocking: "http", OwnHostMax: 6, KeyExchange: viptls.KeyExchangeHybrid, HoldSurplus: 2 * time.Second}
}

// Validate returns the first invalid field as a *field.Error whose path
// is relative to the section ("shard_ports.1"). The certificate and key
// files themselves are read (and their errors reported) by
// internal/viptls; that a certificate needs pepd's listen.tls is the
// caller's check.
func (h HTTPS) Validate() error {
	if err := field.First(
		field.Check((h.CertFile == "") != (h.KeyFile == ""), "key_file", "cert_file and key_file go together (one is empty)"),
		field.Check(h.URLs && !h.Enabled(), "urls", "needs https.cert_file"),
		field.Check(h.Shards < 1 || h.Shards > 16, "shards", "%d is outside 1..16", h.Shards),
		field.Check(h.MaxStreams < 1 || h.MaxStreams > 1000, "max_streams", "%d is outside 1..1000", h.MaxStreams),
		field.AtLeast("max_streams_per_subscriber", h.MaxStreamsPerSubscriber, 1),
		field.Check(h.Priority != H2RoundRobin && h.Priority != H2RFC7540, "priority", "%q is not %s or %s", h.Priority, H2RoundRobin, H2RFC7540),
		field.Check(!field.OneOf(h.RenderBlocking, "https", "http"), "render_blocking", "%q is not https or http", h.RenderBlocking),
		field.Check(!field.OneOf(h.KeyExchange, viptls.KeyExchanges...), "key_exchange", "%q is not one of %s", h.KeyExchange, strings.Join(viptls.KeyExchanges, ", ")),
		field.AtLeast("own_host_max", h.OwnHostMax, 0),
		field.AtLeast("first_images_plain", h.FirstImagesPlain, 0),
		field.Check(h.HoldSurplus < 0 || h.HoldSurplus > time.Minute, "hold_surplus", "%s is outside 0..1m", h.HoldSurplus),
		field.Check(len(h.ShardPorts) > 0 && len(h.ShardPorts) < h.Shards, "shard_ports", "%d ports for %d shards", len(h.ShardPorts), h.Shards),
	); err != nil {
		return err
	}
	for i, n := range h.Names {
		if err := field.DomainSuffix(n, false); err != nil || strings.HasPrefix(n, ".") || !strings.Contains(n, ".") {
			return field.Errorf(fmt.Sprintf("names.%d", i), "%q is not a host name", n)
		}
	}
	if h.Host != "" && !slices.Contains(h.Names, h.Host) {
		return field.Errorf("host", "%q is not one of https.names", h.Host)
	}
	seen := map[uint16]bool{}
	for i, p := range h.ShardPorts {
		if p == 0 || seen[p] {
			return field.Errorf(fmt.Sprintf("shard_ports.%d", i), "port %d is zero or repeated", p)
		}
		seen[p] = true
	}
	return nil
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

// VIPNames returns Names in lowercase (Options.VIPNames).
func (h HTTPS) VIPNames() []string {
	out := make([]string, len(h.Names))
	for i, v := range h.Names {
		out[i] = strings.ToLower(v)
	}
	return out
}

// PlainBlocking reports whether url mode writes render-blocking elements
// under the plain http://VIP (rewrite.Config.PlainBlocking): URLs on
// and RenderBlocking "http".
func (h HTTPS) PlainBlocking() bool { return h.URLs && h.RenderBlocking == "http" }

// Origins are the origins url mode writes VIP URLs under
// (rewrite.Config.Origins, hints.Options.Origins): with URLs, one https
// origin per shard, https://HOST[:port], HOST being Host or else vip;
// else none (http://VIP).
func (h HTTPS) Origins(vip netip.Addr) []string {
	if !h.URLs {
		return nil
	}
	host := cmp.Or(strings.ToLower(h.Host), vip.String())
	var out []string
	for _, p := range h.Ports() {
		o := "https://" + host
		if p != 443 {
			o += ":" + strconv.Itoa(int(p))
		}
		out = append(out, o)
	}
	return out
}

// CertNames are the names the VIP's certificate must be valid for
// (viptls.Load): Names, and the VIP address when https URLs are written
// on it (or no name is given, so that the address is all that can be
// served).
func (h HTTPS) CertNames(vip netip.Addr) []string {
	names := h.VIPNames()
	if h.Host == "" && (h.URLs || len(h.Names) == 0) {
		names = append(names, vip.String())
	}
	return names
}

// DefaultRadio returns the radio section's defaults: NotsentLowat 16KiB,
// so that the HTTP/2 write scheduler (https.priority) chooses among
// frames, not the kernel's socket buffer (which takes every frame at
// once otherwise); congestion control and pacing are the system's. On
// HTTP/1.1 the low-water mark moved neither PLT nor LCP
// (internal/httpproxy/README.md, "Radio queue").
func DefaultRadio() RadioOptions { return RadioOptions{NotsentLowat: 16 << 10} }

// Validate checks the radio section (RadioOptions are pepd's "radio"
// section): sizes must not be negative. The error's path is "" (the section itself).
func (o RadioOptions) Validate() error {
	if o.NotsentLowat < 0 || o.MaxPacingRate < 0 {
		return field.Errorf("", "sizes must not be negative")
	}
	return nil
}
