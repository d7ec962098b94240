package cachepolicy

import (
	"net"
	"time"

	"pep/internal/config/field"
)

// Config is pepd's "cache" section: pepd's part of caching beyond the
// private opt-out (issue 13): second-hit disk admission, the memory
// cache's object bound, the status interface. Admission also changes
// configs/squid.conf (pepctl squid-conf renders its rule from this
// section): render it again and reload Squid when switching it on.
// DefaultConfig gives its defaults; Validate checks it.
type Config struct {
	// Admission is AdmissionOff (every cacheable miss is stored, Squid's
	// own behaviour) or AdmissionSecondHit (CacheSifter, seed 001: a miss
	// whose URL pepd has not seen within Window is served but not stored;
	// the next request for it stores it). Default "off". SIGHUP switches
	// between them when pepd started with second-hit (the filter exists);
	// from off it needs a restart.
	Admission string `yaml:"admission"`
	// Window is how long pepd remembers a URL for admission
	// (AdmissionOptions.Window), at least 1s. Default 1h. Restart to
	// change.
	Window time.Duration `yaml:"window" reload:"restart"`
	// FilterItems is the number of distinct URLs each of the two Bloom
	// filters holds at a 1 % false-positive rate (AdmissionOptions.Items),
	// 1000..1e9. Default 1000000 (2.4 MB). Restart to change.
	FilterItems int `yaml:"filter_items" reload:"restart"`
	// MemoryMaxObject is Squid's maximum_object_size_in_memory (rendered by
	// pepctl squid-conf, in KiB), 1KiB..1GiB: larger objects skip the
	// memory cache. Default 1MiB.
	MemoryMaxObject field.ByteSize `yaml:"memory_max_object"`
	// StatusTimeout bounds one read of Squid's cache manager (GET /cache,
	// a /metrics scrape; squid.Manager.Timeout). Default 2s.
	StatusTimeout time.Duration `yaml:"status_timeout" reload:"restart"`
	// MemoryTier is the address (host:port) of a memory-only Squid that
	// pepctl squid-conf renders as the disk Squid's parent (and, with
	// -memory-tier, renders itself): with second-hit admission, a
	// first-seen object the disk Squid does not store is kept there in
	// memory, so that its second request is a memory hit instead of a
	// second origin fetch (CacheSifter's transient objects, seed 001).
	// Default "" (no tier). pepd itself does not use it.
	MemoryTier string `yaml:"memory_tier"`
}

// DefaultConfig returns the cache section's defaults.
func DefaultConfig() Config {
	return Config{Admission: AdmissionOff, Window: time.Hour, FilterItems: 1_000_000, MemoryMaxObject: 1 << 20,
		StatusTimeout: 2 * time.Second}
}

// Validate returns the first invalid field as a *field.Error whose path
// is the key within the section ("admission").
func (c Config) Validate() error {
	if err := field.First(
		field.Check(!field.OneOf(c.Admission, AdmissionOff, AdmissionSecondHit), "admission", "%q is not one of off, second-hit", c.Admission),
		field.Check(c.Window < time.Second, "window", "%v is below 1s", c.Window),
		field.Check(c.FilterItems < 1000 || c.FilterItems > 1_000_000_000, "filter_items", "%d is outside 1000..1000000000", c.FilterItems),
		field.Check(c.MemoryMaxObject < 1<<10 || c.MemoryMaxObject > 1<<30, "memory_max_object", "%d is outside 1KiB..1GiB", c.MemoryMaxObject),
		field.Positive("status_timeout", c.StatusTimeout),
	); err != nil {
		return err
	}
	if c.MemoryTier != "" {
		if _, _, err := net.SplitHostPort(c.MemoryTier); err != nil {
			return field.Errorf("memory_tier", "%q: want host:port: %w", c.MemoryTier, err)
		}
	}
	return nil
}

// SecondHit reports whether c asks for second-hit admission.
func (c Config) SecondHit() bool { return c.Admission == AdmissionSecondHit }

// AdmissionOptions returns NewAdmission's options for c (Window, Items).
func (c Config) AdmissionOptions() AdmissionOptions {
	return AdmissionOptions{Window: c.Window, Items: c.FilterItems}
}
