package hints

import (
	"slices"
	"strings"
	"time"

	"pep/internal/config/field"
)

// Config is pepd's "hints" section: the dependency hints' settings
// (issue 26; the learner here, the hints and fetches ahead in
// httpproxy.Hints). Enabled follows SIGHUP; the rest needs a restart.
// DefaultConfig gives its defaults; Validate checks it; Options and
// PrefetchBounds turn it into what the learner and httpproxy.Hints take.
type Config struct {
	// Enabled learns, hints and fetches ahead. Default false.
	Enabled bool `yaml:"enabled"`
	// MaxPages is the number of pages remembered, least recently loaded
	// evicted (Options.MaxPages). Default 10000.
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
	// requests count as that document's load, at least 1s. Default 30s.
	LoadWindow time.Duration `yaml:"load_window"`
	// MaxHints caps the hints on one document. Default 20.
	MaxHints int `yaml:"max_hints"`
	// MaxHintBytes caps the sum of the hinted URLs' sizes for one
	// document. Default 1MiB.
	MaxHintBytes field.ByteSize `yaml:"max_hint_bytes"`
	// PreloadAs are the destinations sent to the browser as Link preload
	// fields, some of "style", "font", "script", "image", "fetch"
	// (Options.PreloadAs). The page's learned URLs of other destinations
	// are only fetched ahead into Squid (with Prefetch). Default style
	// and font: the second level a stylesheet names that blocks the first
	// paint; a preloaded image or script takes the radio link from what
	// the document itself names (tp5n over 3G, 100 pages x 5 runs cold,
	// hints on against off: LCP 0.968 with style and font, 0.999 with all
	// five; internal/hints/README.md).
	PreloadAs []string `yaml:"preload_as"`
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

// DefaultConfig returns the hints section's defaults, which are also
// those of a zero Options field, except PreloadAs: pepd's default is
// style and font, a zero Options.PreloadAs preloads every destination.
func DefaultConfig() Config {
	return Config{MaxPages: 10000, MaxURLs: 64, Window: 8, Share: 0.5, LoadWindow: 30 * time.Second, MaxHints: 20,
		MaxHintBytes: 1 << 20, PreloadAs: []string{"style", "font"}, Prefetch: true, PrefetchPerSubscriber: 8, PrefetchMax: 256}
}

// Validate returns the first invalid field as a *field.Error whose path
// is the key within the section ("window").
func (c Config) Validate() error {
	return field.First(
		field.AtLeast("max_pages", c.MaxPages, 1),
		field.AtLeast("max_urls", c.MaxURLs, 1),
		field.Check(c.Window < 1 || c.Window > 32, "window", "%d is outside 1..32", c.Window),
		field.Check(c.Share <= 0 || c.Share > 1, "share", "%v is outside (0, 1]", c.Share),
		field.Check(c.LoadWindow < time.Second, "load_window", "%v is below 1s", c.LoadWindow),
		field.AtLeast("max_hints", c.MaxHints, 1),
		field.AtLeast("max_hint_bytes", c.MaxHintBytes, 1),
		field.AtLeast("prefetch_per_subscriber", c.PrefetchPerSubscriber, 1),
		field.AtLeast("prefetch_max", c.PrefetchMax, 1),
		c.validPreloadAs(),
	)
}

// Destinations are the request destinations the learner tells apart
// (Destination's results), the values of Config.PreloadAs.
var Destinations = []string{"style", "font", "script", "image", "fetch"}

func (c Config) validPreloadAs() error {
	if len(c.PreloadAs) == 0 {
		return field.Errorf("preload_as", "is empty; want some of %s (no hints at all: enabled: false)", strings.Join(Destinations, ", "))
	}
	for _, as := range c.PreloadAs {
		if !field.OneOf(as, Destinations...) {
			return field.Errorf("preload_as", "%q is not one of %s", as, strings.Join(Destinations, ", "))
		}
	}
	return nil
}

// Options returns the learner's Options for c with the https origins
// that are pepd's own (Options.Origins).
func (c Config) Options(origins []string) Options {
	return Options{MaxPages: c.MaxPages, MaxURLs: c.MaxURLs, Window: c.Window, Share: c.Share,
		LoadWindow: c.LoadWindow, MaxHints: c.MaxHints, MaxHintBytes: int64(c.MaxHintBytes),
		PreloadAs: slices.Clone(c.PreloadAs), Origins: origins}
}

// PrefetchBounds returns the bounds of the fetches ahead in flight, per
// subscriber and over all (httpproxy.Hints'), or 0, 0 (none) when
// Prefetch is off.
func (c Config) PrefetchBounds() (perSubscriber, max int) {
	if !c.Prefetch {
		return 0, 0
	}
	return c.PrefetchPerSubscriber, c.PrefetchMax
}
