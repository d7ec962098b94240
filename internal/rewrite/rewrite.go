// Package rewrite is pepd's URL mode (the seed paper, section 3.1, Fig. 2):
// it rewrites the embedded http:// URLs of HTML and CSS responses into the VIP
// form http://VIP/host[:port]/path?query, and maps VIP-form requests, Location
// headers and cookies between the two forms.
//
// The HTML rewriter works on a document in memory: it finds tokens with the
// boundaries of golang.org/x/net/html's Tokenizer (scan.go; the Tokenizer is
// the reference in a differential test and fuzzer) and copies every byte it
// does not change as it came. Response applies it to an *http.Response
// (content type, content coding, charset, Content-Length, ETag), buffering
// the body up to Config.MaxBodyBytes. ParseVIPPath, Rewriter.VIPURL, Rewriter.Location, SetCookie and
// CookieHeader are the pure mappings the HTTP proxy uses.
package rewrite

import (
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Rewriter rewrites documents for one VIP. It is safe for concurrent use.
type Rewriter struct {
	vip      string // authority in VIP-form URLs: "192.0.2.12", "[2001:db8::1]:8080"
	origins  vipOrigins
	cfg      Config
	htmlTyp  map[string]bool
	cssTyp   map[string]bool
	log      *slog.Logger
	metrics  *Metrics
	gzipPool sync.Pool // *gzip.Writer at cfg.GzipLevel
	absOnly  bool      // tests: rewrite absolute http: URLs only
	noURLs   bool      // tests: rewrite no URL (identity)
}

// New returns a Rewriter that puts URLs under vip, an IP address with an
// optional port: "192.0.2.12", "192.0.2.12:8080", "2001:db8::1" or
// "[2001:db8::1]:8080". cfg is validated (zero fields take their defaults).
// A nil log discards; a nil m counts nothing.
func New(vip string, cfg Config, log *slog.Logger, m *Metrics) (*Rewriter, error) {
	auth, host, err := parseVIP(vip)
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rewrite: %w", err)
	}
	cfg = cfg.withDefaults()
	origins, err := newVIPOrigins(auth, host, cfg.Origins)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Rewriter{
		vip:     auth,
		origins: origins,
		cfg:     cfg,
		htmlTyp: make(map[string]bool),
		cssTyp:  make(map[string]bool),
		log:     log.With("component", "rewrite"),
		metrics: m,
	}
	for _, t := range cfg.HTMLTypes {
		r.htmlTyp[t] = true
	}
	for _, t := range cfg.CSSTypes {
		r.cssTyp[t] = true
	}
	return r, nil
}

// VIP returns the authority VIP-form URLs carry, e.g. "192.0.2.12".
func (r *Rewriter) VIP() string { return r.vip }

// Handles reports whether Response rewrites bodies of mediaType
// (lowercase, without parameters): Config.HTMLTypes and CSSTypes.
func (r *Rewriter) Handles(mediaType string) bool { return r.htmlTyp[mediaType] || r.cssTyp[mediaType] }

// vipOrigins are the origins VIP-form URLs are written under.
type vipOrigins struct {
	// origins are "scheme://authority" without a slash at the end; an
	// object host goes to origins[shard(host)].
	origins []string
	// hosts are the lowercase hosts (no port) that are the VIP: URLs on
	// them are already in VIP form.
	hosts []string
	// plain is "http://" + the VIP authority, the paper's url mode, always
	// served (FromVIPURL maps it back whatever Origins say).
	plain string
}

// newVIPOrigins checks origins (Config.Origins) and returns them with
// the VIP's own authority and host; no origins means http://VIP.
func newVIPOrigins(auth, host string, origins []string) (vipOrigins, error) {
	v := vipOrigins{hosts: []string{host}, plain: "http://" + auth}
	if len(origins) == 0 {
		v.origins = []string{v.plain}
		return v, nil
	}
	for _, o := range origins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Host != strings.ToLower(u.Host) {
			return vipOrigins{}, fmt.Errorf("rewrite: origin %q is not a lowercase http or https origin (scheme://host[:port])", o)
		}
		v.origins = append(v.origins, u.Scheme+"://"+u.Host)
		if h := u.Hostname(); !slices.Contains(v.hosts, h) {
			if strings.IndexByte(h, ':') >= 0 {
				h = "[" + h + "]"
			}
			v.hosts = append(v.hosts, h)
		}
	}
	return v, nil
}

// shard is the index of the origin an object host (lowercase authority,
// "host[:port]") goes to: FNV-1a (32 bit) of the authority modulo the
// number of origins, so that a host always goes to the same origin (its
// objects share a connection, its cookies one path) whatever the page.
func shard[T string | []byte](auth T, n int) int {
	if n <= 1 {
		return 0
	}
	h := uint32(2166136261)
	for i := 0; i < len(auth); i++ {
		h ^= uint32(auth[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}

func (v *vipOrigins) pick(auth string) string { return v.origins[shard(auth, len(v.origins))] }

func (v *vipOrigins) pickBytes(auth []byte) string { return v.origins[shard(auth, len(v.origins))] }

// isVIP reports whether host (lowercase, no port) is the VIP.
func (v *vipOrigins) isVIP(host []byte) bool {
	for _, h := range v.hosts {
		if string(host) == h {
			return true
		}
	}
	return false
}

// parseVIP checks a VIP given as address or address:port and returns the
// authority as it goes into URLs and its host part.
func parseVIP(vip string) (auth, host string, err error) {
	if ap, err := netip.ParseAddrPort(vip); err == nil {
		if ap.Port() == 0 {
			return "", "", fmt.Errorf("rewrite: vip %q: port 0", vip)
		}
		a := ap.Addr().Unmap()
		h := a.String()
		if a.Is6() {
			h = "[" + h + "]"
		}
		if ap.Port() == 80 {
			return h, h, nil
		}
		return fmt.Sprintf("%s:%d", h, ap.Port()), h, nil
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(vip, "["), "]"))
	if err != nil || a.Zone() != "" {
		return "", "", fmt.Errorf("rewrite: vip %q is not an IP address or IP:port", vip)
	}
	a = a.Unmap()
	h := a.String()
	if a.Is6() {
		h = "[" + h + "]"
	}
	return h, h, nil
}
