package rewrite

import (
	"mime"
	"strconv"
	"strings"

	"github.com/klauspost/compress/gzip"

	"pep/internal/config/field"
)

// Config is the rewriter's part of pepd's configuration (YAML section
// "rewrite"). The zero value of every field means its default
// (DefaultConfig has them all filled in).
type Config struct {
	// MaxBodyBytes bounds the response body the rewriter buffers, both as it
	// came (encoded) and decoded. A larger body is passed through byte for
	// byte (reason "too-large"). Zero means 8 MiB; negative or below 1 KiB
	// is an error.
	MaxBodyBytes field.ByteSize `yaml:"max_body_bytes"`
	// MaxTokenBytes bounds one HTML token: a tag, a comment, the text of a
	// <style> or <script> element (also the x/net/html Tokenizer's SetMaxBuf
	// where it measures a script). From a longer token on, the document is
	// copied unchanged (Stats.PassedThrough). Zero means 1 MiB; negative is
	// an error.
	MaxTokenBytes field.ByteSize `yaml:"max_token_bytes"`
	// HTMLTypes are the media types rewritten as HTML, lowercase, without
	// parameters. Empty means text/html and application/xhtml+xml.
	HTMLTypes []string `yaml:"html_types"`
	// CSSTypes are the media types rewritten as CSS. Empty means text/css.
	CSSTypes []string `yaml:"css_types"`
	// GzipLevel is the gzip level (klauspost/compress, RFC 1952) used to
	// encode a rewritten gzip or deflate body again, 1 (fastest) to 9
	// (smallest). Zero means 6 (gzip.DefaultCompression).
	GzipLevel int `yaml:"gzip_level"`
	// BrotliQuality is the brotli quality used to encode a rewritten br body
	// again, 0 to 11. Zero means 5.
	BrotliQuality int `yaml:"brotli_quality"`
	// Origins are the VIP origins rewritten URLs are written under, each
	// "scheme://host[:port]" in lowercase with http or https and a host
	// that is the VIP (its address or one of its names): with one, every
	// object goes there; with k, each object host goes to the one its
	// FNV-1a hash picks (HTTP/2-Advance's k connections, seed 004). Empty
	// means "http://VIP", the paper's url mode. Set by pepd from its https
	// section, not read from YAML.
	Origins []string `yaml:"-"`
	// PlainBlocking writes the URLs of an HTML document's render-blocking
	// elements, stylesheet links, a <style> element's @import rules and
	// parser-blocking scripts, under the plain http://VIP whatever
	// Origins say: they hold the first paint back, and an https VIP
	// origin costs them a TLS handshake, one more radio round trip than
	// TCP alone, on a connection the page cannot have open yet
	// (connections are partitioned by top-level site). The
	// rest (images, fonts, async scripts, what the stylesheets name) goes
	// to Origins. pepd sets it only when Origins are its https shards
	// (httpproxy.HTTPS.PlainBlocking, https.render_blocking), not from
	// YAML.
	PlainBlocking bool `yaml:"-"`
	// OwnHostMax leaves an HTML document's URLs on its own host (the
	// document's scheme, host and port) as they are when the document
	// names at most this many distinct ones: they ride the connections
	// the browser already has to that host, and pepd's L4 redirect still
	// brings them through Squid and the optimizer, where the VIP would
	// first cost a TCP handshake (and a TLS one on an https origin) that
	// so few objects do not repay. More than OwnHostMax, and the VIP's
	// multiplexed connections win: every URL is rewritten. A style sheet
	// fetched from its own host (its document kept it there) keeps the
	// URLs on that host too. URLs on other hosts are rewritten either
	// way. Zero rewrites every URL (the paper's url mode). pepd sets it
	// from https.own_host_max when https.urls is on, not from YAML.
	OwnHostMax int `yaml:"-"`
	// FirstImagesPlain puts the first this many <img> elements of an HTML
	// document (src and srcset, in document order) under the plain
	// http://VIP too, with PlainBlocking: the page's first images are
	// the likeliest to be its largest contentful paint, and the plain
	// origin's connections are open (or cost one round trip, TCP) when
	// the https origin's still wait for their TCP and TLS handshakes.
	// The rest go to Origins, multiplexed. Zero puts no image under
	// plain http. pepd sets it from https.first_images_plain, not from
	// YAML.
	FirstImagesPlain int `yaml:"-"`
}

// Defaults of Config's fields.
const (
	DefaultMaxBodyBytes  = 8 << 20
	DefaultMaxTokenBytes = 1 << 20
	DefaultGzipLevel     = 6
	DefaultBrotliQuality = 5
)

// DefaultConfig returns the rewrite section's defaults: every field's
// zero value replaced by its default.
func DefaultConfig() Config { return Config{}.withDefaults() }

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxTokenBytes == 0 {
		c.MaxTokenBytes = DefaultMaxTokenBytes
	}
	if len(c.HTMLTypes) == 0 {
		c.HTMLTypes = []string{"text/html", "application/xhtml+xml"}
	}
	if len(c.CSSTypes) == 0 {
		c.CSSTypes = []string{"text/css"}
	}
	if c.GzipLevel == 0 {
		c.GzipLevel = DefaultGzipLevel
	}
	if c.BrotliQuality == 0 {
		c.BrotliQuality = DefaultBrotliQuality
	}
	return c
}

// Validate reports the first invalid field as a *field.Error whose path
// is the field's YAML key ("max_body_bytes: -1 is negative"); New adds
// "rewrite: ". Zero fields are valid (their defaults).
func (c Config) Validate() error {
	switch {
	case c.MaxBodyBytes < 0:
		return field.Errorf("max_body_bytes", "%d is negative", c.MaxBodyBytes)
	case c.MaxBodyBytes > 0 && c.MaxBodyBytes < 1024:
		return field.Errorf("max_body_bytes", "%d is below 1KiB", c.MaxBodyBytes)
	case c.MaxTokenBytes < 0:
		return field.Errorf("max_token_bytes", "%d is negative", c.MaxTokenBytes)
	}
	for _, f := range []struct {
		key   string
		types []string
	}{{"html_types", c.HTMLTypes}, {"css_types", c.CSSTypes}} {
		for i, t := range f.types {
			mt, params, err := mime.ParseMediaType(t)
			if err != nil || len(params) != 0 || mt != t || !strings.Contains(t, "/") {
				return field.Errorf(f.key+"."+strconv.Itoa(i), "%q is not a lowercase media type without parameters", t)
			}
		}
	}
	if c.GzipLevel != 0 && (c.GzipLevel < gzip.BestSpeed || c.GzipLevel > gzip.BestCompression) {
		return field.Errorf("gzip_level", "%d is outside 1..9", c.GzipLevel)
	}
	if c.BrotliQuality < 0 || c.BrotliQuality > 11 {
		return field.Errorf("brotli_quality", "%d is outside 0..11", c.BrotliQuality)
	}
	return nil
}
