// Package report holds the testbed's results (results.json, one record per
// mode, profile, run and page) and turns them into the seed paper's figures
// (§4.2): connections and DNS requests per mode (Fig. 5), page load time per
// page and mode against direct (Fig. 6) and throughput against the link
// (Fig. 7), as a Markdown report with medians and min-max over runs, and as
// PNG plots. The schema is documented in ../README.md.
package report

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// SchemaVersion is the version of the results.json layout; it changes when
// a field changes meaning.
const SchemaVersion = 1

// Modes in the order the paper's figures show them, direct (the paper's
// NULL) first. Other names sort after these, alphabetically.
var Modes = []string{"direct", "off", "dns", "url"}

// Record is one page load: the figures of one page, in one mode, under one
// profile, in one run. JSON names are the schema of results.json.
type Record struct {
	Mode    string `json:"mode"`    // direct, off, dns or url
	Profile string `json:"profile"` // link profile name (netem)
	Run     int    `json:"run"`     // 1-based; each run of a mode is a fresh browser and a cold Squid
	Page    string `json:"page"`    // corpus page name
	URL     string `json:"url"`     // top-level URL loaded
	Seq     int    `json:"seq"`     // position of the page in its session, 0-based
	// DocScheme is the scheme the top-level document loaded over
	// (browser.Page.DocURL): "https" for an http:// page that Chromium
	// upgraded (HSTS preload), which pepd only splices, so every mode
	// loads it as direct does; "" in results from before it was recorded.
	DocScheme string `json:"doc_scheme,omitempty"`
	// Scheme and Shards are the VIP URLs' scheme and k in url modes
	// (http and 1 for url, https and k for url-https-kN; empty and 0
	// elsewhere); VIPProto is the protocol most of the page's responses
	// from the VIP came over ("h2", "http/1.1"; "" without any).
	Scheme   string `json:"scheme,omitempty"`
	Shards   int    `json:"shards,omitempty"`
	VIPProto string `json:"vip_proto,omitempty"`

	Loaded bool   `json:"loaded"`          // load event ended in time
	Error  string `json:"error,omitempty"` // why not, when not loaded

	PLTms float64 `json:"plt_ms"` // navigationStart to loadEventEnd, ms
	DCLms float64 `json:"dcl_ms"` // navigationStart to domContentLoadedEventEnd, ms
	// The metrics users and browser teams judge by (browser.Page), ms from
	// navigationStart; 0 when not measured (results from before them, or
	// a page without contentful paint).
	TTFBms float64 `json:"ttfb_ms,omitempty"` // the document's responseStart
	FCPms  float64 `json:"fcp_ms,omitempty"`  // first contentful paint
	LCPms  float64 `json:"lcp_ms,omitempty"`  // largest contentful paint (last candidate)
	// LCPURL is the LCP element's resource URL (browser.Page.LCPURL): ""
	// for a text element, no LCP, or results from before it.
	LCPURL string `json:"lcp_url,omitempty"`

	Bytes      int64 `json:"bytes"`       // response bytes the browser received (encodedDataLength, headers included)
	Requests   int   `json:"requests"`    // http(s) requests the page made, redirects included
	Failed     int   `json:"failed"`      // requests that failed (no response, or status >= 400)
	HTTPErrors int   `json:"http_errors"` // of which status >= 400 (the origin's 404s)
	DocHosts   int   `json:"doc_hosts"`   // distinct hostnames of document requests (top-level page and frames)
	Hosts      int   `json:"hosts"`       // distinct hostnames the page requested

	// From the browser (DevTools connectionId of each response): the
	// connections this page used that no earlier page of the session had
	// opened, those to the VIP among them, and the earlier ones it used
	// again. Only connections that carried a response count.
	BrowserConns       int `json:"browser_conns"`
	BrowserVIPConns    int `json:"browser_vip_conns"`
	BrowserConnsReused int `json:"browser_conns_reused"`

	// From the radio link's counters, between the start of this page's
	// load and the end of its settling: what crossed the radio link.
	SYNCount    int            `json:"syn_count"`    // TCP SYNs from mn (connection attempts, retransmissions included)
	DNSQueries  int            `json:"dns_queries"`  // DNS queries from mn (UDP and TCP port 53)
	DNSRepeats  int            `json:"dns_repeats"`  // of them, repeats of a question sent within 5 s (retransmissions; netem.DirCounters.DNSRepeats)
	VIPConns    int            `json:"vip_conns"`    // SYNs to the VIP
	OriginConns int            `json:"origin_conns"` // SYNs to origin addresses (the corpus's address block)
	OtherConns  int            `json:"other_conns"`  // SYNs to anything else
	ConnsByDst  map[string]int `json:"conns_by_dst,omitempty"`
	LinkUpBytes int64          `json:"link_up_bytes"`   // IP bytes mn -> gw
	LinkDnBytes int64          `json:"link_down_bytes"` // IP bytes gw -> mn
	LinkDrops   int            `json:"link_drops"`      // packets dropped by the link (loss and queue), both ways

	Origin404 int `json:"origin_404"` // requests the replay origin answered 404 during this page

	Resolver string  `json:"resolver"` // Chromium's resolver: builtin or system
	Warm     bool    `json:"warm"`     // Squid's cache was kept from the previous run
	WallMs   float64 `json:"wall_ms"`  // time the load took in the runner, settling included

	// HAR is the load's HAR file (package har), relative to the folder
	// of results.json; "" when none was written.
	HAR string `json:"har,omitempty"`

	// Dependency hints, +hints modes only (pepd's pep_hints_* counters,
	// read after each load and, for the session's last load, after
	// DELETE /hints ended it): HintsSent is the Link preload hints pepd
	// put on this load's document; HintsUsed and HintsUnused count its
	// hinted URLs that the subscriber then requested from pepd during
	// the load or not (a browser's preload request counts as a request),
	// HintsUnusedBytes the unused ones' sizes as pepd last saw them.
	// pepd counts a load's hints when the load ends (the next document
	// from the subscriber, or 30 s after it), so each figure is read
	// with the next load's and credited to this one.
	HintsSent        int   `json:"hints_sent,omitempty"`
	HintsUsed        int   `json:"hints_used,omitempty"`
	HintsUnused      int   `json:"hints_unused,omitempty"`
	HintsUnusedBytes int64 `json:"hints_unused_bytes,omitempty"`
	// HintsFetchedAhead is the fetches ahead into Squid that this load's
	// document started and Squid answered (pep_hints_prefetches_total,
	// outcomes hit and miss: preloaded URLs and those only fetched ahead,
	// hints.preload_as), HintsFetchBusy those not made because the
	// subscriber's or the overall bound was reached (outcome busy).
	HintsFetchedAhead int `json:"hints_fetched_ahead,omitempty"`
	HintsFetchBusy    int `json:"hints_fetch_busy,omitempty"`

	// The optimizer's outcomes, +opt modes only (pepd's
	// pep_optimize_transforms_total and pep_optimize_skipped_total, read
	// before and after the load): OptTransformed is the transformed
	// bodies served to Squid (images and text, fresh or reused from an
	// earlier deferred transform), OptSkipped the responses passed
	// untransformed by reason ("deferred": the deadline passed, "overload": the queue was
	// full, "not smaller", "encoded", ...).
	OptTransformed int            `json:"opt_transformed,omitempty"`
	OptSkipped     map[string]int `json:"opt_skipped,omitempty"`
	// OptLinkWaits is the responses the optimizer let wait longer than
	// optimize.deadline because their subscriber's link is slow
	// (pep_optimize_link_waits_total; optimize.link_deadline).
	OptLinkWaits int `json:"opt_link_waits,omitempty"`
	// OptLinkShortWaits is the responses the optimizer let wait less than
	// optimize.deadline, by their subscriber's link rate, during this load
	// (pep_optimize_link_short_waits_total; optimize.link_floor).
	OptLinkShortWaits int `json:"opt_link_short_waits,omitempty"`
	// OptQuick is the transformed responses that were the quick WebP of an
	// image the backlog turned away, served unstored
	// (pep_optimize_quick_total{outcome="served"}; optimize.quick_quality),
	// counted in OptTransformed too.
	OptQuick int `json:"opt_quick,omitempty"`

	// The VIP's surplus TLS handshakes, url-https-kN modes only (pepd's
	// pep_http_tls_surplus_total{outcome}, read before and after the
	// load; https.hold_surplus): the subscriber's handshakes to the VIP
	// that pepd held behind its first to the same origin and that the
	// browser then closed unanswered (TLSSurplusClosed: a handshake's
	// flight of certificates the radio link did not carry), or that
	// pepd answered once the hold ended (TLSSurplusServed).
	TLSSurplusClosed int `json:"tls_surplus_closed,omitempty"`
	TLSSurplusServed int `json:"tls_surplus_served,omitempty"`
}

// ProfileInfo is what the report needs of a link profile.
type ProfileInfo struct {
	Name        string  `json:"name"`
	RTTms       float64 `json:"rtt_ms"`           // propagation round trip, ms
	DownKbit    float64 `json:"down_kbit"`        // gw -> mn rate, kbit/s (0: unlimited)
	UpKbit      float64 `json:"up_kbit"`          // mn -> gw rate, kbit/s (0: unlimited)
	Description string  `json:"description"`      // one line from the profile file
	Exact       string  `json:"configuration"`    // the profile's exact configuration, one line
	Source      string  `json:"source,omitempty"` // where the profile's figures come from
}

// RunConfig is the configuration of a testbed run, logged first and kept in
// results.json.
type RunConfig struct {
	Corpus   string        `json:"corpus"`
	Pages    []string      `json:"pages"`
	Profiles []ProfileInfo `json:"profiles"`
	// StockChromium: the browser ran with stock Chromium's defaults for
	// everything that changes how a page loads (-stock-chromium).
	StockChromium bool `json:"stock_chromium,omitempty"`
	// ChromiumChanges are the browser's departures from stock Chromium
	// in the run, each with its reason (testbed/browser Changes).
	ChromiumChanges []ChromiumChange `json:"chromium_changes,omitempty"`
	// Wired is the gw-core link's profile: the origins' distance from
	// the gateway (nil: none, origins 0 ms away; also in results from
	// before it).
	Wired    *ProfileInfo `json:"wired,omitempty"`
	Modes    []string     `json:"modes"`
	Runs     int          `json:"runs"`
	Resolver string       `json:"resolver"`
	HTTPSRR  bool         `json:"https_rr"` // Chromium also asked for HTTPS records (type 65)
	// Unpartitioned: Chromium's connections and host cache were not
	// partitioned by top-level site (they are by default).
	Unpartitioned bool `json:"unpartitioned"`
	// DisableFeatures are further Chromium features the run turned off.
	DisableFeatures []string `json:"disable_features,omitempty"`
	// Pepd are pepd's settings the run set (testbed run -pepd KEY=VALUE,
	// and the flags that are aliases of it), in order; results from before
	// -pepd read their dns_origins, pepd_radio and opt_deadline into it
	// (Read).
	Pepd []string `json:"pepd,omitempty"`
	// Variants are the pepd settings of each variant the run's modes were
	// tagged with (testbed run -variant NAME:KEY=VALUE; VariantMark),
	// written over Pepd in the testbeds of those modes: name -> KEY=VALUE
	// in order.
	Variants map[string][]string `json:"variants,omitempty"`
	// OriginCompress is the replay origin's content coding (auto, none,
	// recorded; "" in results from before the option: none).
	OriginCompress string `json:"origin_compress,omitempty"`
	// CC is the TCP congestion control read back from each namespace after
	// setup: "phone", "gateway", "origin" ("" in older results: the host's
	// default, bbr on this project's machines).
	CC map[string]string `json:"congestion_control,omitempty"`
	// GWTCP is the gateway's TCP toward the radio link by profile, read
	// back after setup (topo.ReadGWTCP), e.g. "initcwnd 40,
	// tcp_slow_start_after_idle 0"; initcwnd 0 is the kernel's 10
	// segments. Empty in older results: the kernel's defaults (initcwnd
	// 10, tcp_slow_start_after_idle 1).
	GWTCP map[string]string `json:"gateway_tcp,omitempty"`
	// ModeOrder says how the sessions of a run were ordered ("" in older
	// results: the order of Modes in every run).
	ModeOrder  string    `json:"mode_order,omitempty"`
	Warm       bool      `json:"warm"`
	Backend    string    `json:"link_backend"`
	Browser    string    `json:"browser"` // user agent
	VIP        string    `json:"vip"`
	Origins    string    `json:"origins"` // origin address block
	Started    time.Time `json:"started"`
	Finished   time.Time `json:"finished"`
	Command    string    `json:"command"`
	SquidCache string    `json:"squid_cache"` // what "cold" means: how the cache was emptied
	// PrepareLink is the radio link's profile during the loads a session
	// does not measure (warm-up and hints teaching passes), as netem
	// prints it; "" when they went over the measured profile.
	PrepareLink string `json:"prepare_link,omitempty"`
	PageTimeout string `json:"page_timeout"`
	Parallel    int    `json:"parallel"`    // testbeds run at once, one per (profile, run)
	SplitModes  bool   `json:"split_modes"` // one testbed per (profile, run, mode) instead
	Settle      string `json:"settle"`      // quiet network time awaited after onload
	SettleMax   string `json:"settle_max"`  // longest wait for it
	// Import is the corpus import report (corpus.ImportReport), one line
	// each: what the run replayed, records skipped and repaired, and per
	// page the http (rewritable) and https (spliced) objects.
	Import []string `json:"import,omitempty"`
}

// ChromiumChange is one departure of the testbed's Chromium from stock
// Chromium: a flag or "feature F on/off", why, and whether a
// -stock-chromium run keeps it (it does not change how a page loads).
type ChromiumChange struct {
	What        string `json:"what"`
	Why         string `json:"why"`
	KeptInStock bool   `json:"kept_in_stock"`
}

// Results is the content of results.json.
type Results struct {
	Schema  int       `json:"schema"`
	Config  RunConfig `json:"config"`
	Records []Record  `json:"records"`
	// Sockets are the sockets each measured session's browser connected,
	// read from its net log (testbed run -netlog); absent without it.
	Sockets []SessionSockets `json:"sockets,omitempty"`
}

// SessionSockets is what one measured session's browser connected over
// its pages, from Chromium's net log (browser.NetLogConns): TCP sockets to
// the VIP (any port) and to everything else. A HAR shows the connections
// requests used; this also counts the ones the browser connected and never
// used, and the TLS handshakes made on them.
type SessionSockets struct {
	Profile string       `json:"profile"`
	Run     int          `json:"run"`
	Mode    string       `json:"mode"`
	Pages   int          `json:"pages"` // loads in the session
	VIP     SocketCounts `json:"vip"`
	Other   SocketCounts `json:"other"`
}

// SocketCounts counts TCP sockets (each one SYN that got an answer or not).
type SocketCounts struct {
	Sockets int `json:"sockets"` // connected
	Used    int `json:"used"`    // carried a request (application data sent)
	TLS     int `json:"tls"`     // began a TLS handshake (a ClientHello went out)
	TLSDone int `json:"tls_done"`
	// TLSUnused began a TLS handshake and carried no request.
	TLSUnused int `json:"tls_unused"`
}

// Profile returns the ProfileInfo named name.
func (r *Results) Profile(name string) (ProfileInfo, bool) {
	for _, p := range r.Config.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return ProfileInfo{}, false
}

// Write writes r to path as indented JSON.
func (r *Results) Write(path string) error {
	r.Schema = SchemaVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// Read reads a results.json. Unknown fields are ignored; a schema newer
// than SchemaVersion or a record without mode, profile or page is an error
// naming the file and the record.
func Read(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("report: %s: %w", path, err)
	}
	// Before -pepd, three pepd keys had fields of their own.
	var legacy struct {
		Config struct {
			DNSOrigins  string `json:"dns_origins"`
			PepdRadio   string `json:"pepd_radio"`
			OptDeadline string `json:"opt_deadline"`
		} `json:"config"`
	}
	if err := json.Unmarshal(b, &legacy); err == nil {
		for _, kv := range [][2]string{{"dns.origins", legacy.Config.DNSOrigins}, {"radio", legacy.Config.PepdRadio}, {"optimize.deadline", legacy.Config.OptDeadline}} {
			if kv[1] != "" {
				if kv[0] == "radio" {
					kv[1] = "{" + kv[1] + "}"
				}
				r.Config.Pepd = append(r.Config.Pepd, kv[0]+"="+kv[1])
			}
		}
	}
	if r.Schema > SchemaVersion {
		return nil, fmt.Errorf("report: %s: schema %d is newer than this program's %d", path, r.Schema, SchemaVersion)
	}
	for i, rec := range r.Records {
		if rec.Mode == "" || rec.Profile == "" || rec.Page == "" {
			return nil, fmt.Errorf("report: %s: records[%d]: mode, profile and page are required", path, i)
		}
	}
	return &r, nil
}

// modeOrder sorts mode names as Modes does, unknown names (the +opt
// modes) last, alphabetically; a +warm mode right after the same mode cold.
func modeOrder(modes []string) []string {
	rank := func(m string) int {
		for i, k := range Modes {
			if k == m {
				return i
			}
		}
		return len(Modes)
	}
	out := append([]string(nil), modes...)
	sort.SliceStable(out, func(i, j int) bool {
		ci, wi := strings.CutSuffix(out[i], "+warm")
		cj, wj := strings.CutSuffix(out[j], "+warm")
		if ri, rj := rank(ci), rank(cj); ri != rj {
			return ri < rj
		}
		if ci != cj {
			return ci < cj
		}
		return !wi && wj
	})
	return out
}
