// Package hints learns each page's dependency set from the loads the
// gateway sees and hands it to the next browser at the start of the load:
// `Link: <url>; rel=preload` on the document's response (RFC 8288 §3; the
// preload keyword, W3C Preload §2, and the `as` and `crossorigin`
// attributes of the HTML Standard §4.6.7.15), and a list of URLs to ask
// Squid for ahead of the browser. Anchors: Polaris (NSDI 2016), Vroom
// (SIGCOMM 2017, server-side hints), WatchTower (MobiSys 2019), Cloudflare's
// Early Hints learned from Link headers, mod_pagespeed's
// hint_preload_subresources.
//
// A load is a document request from one subscriber and the subresource
// responses that subscriber receives within Options.LoadWindow of it. Each
// page (its document URL, normalised by PageKey: fragment dropped, query
// parameters that change from load to load set aside) keeps, per
// subresource URL, a bit per recent load (the last Options.Window loads) in
// which the URL was requested. A URL is hinted once the page has at least
// Options.MinLoads loads and the URL was requested in at least Options.Share
// of them, and in two of them once the page has two (so a URL whose query
// changes on every load is hinted at most on the second load, and never
// when the change is one PageKey recognises: a cache-buster parameter
// name or a value of ten or more digits, such URLs are not learned); a
// URL no recent load requested ages out. The hints are chosen by how many
// recent loads requested them (the most first, within Options.MaxHints and
// Options.MaxHintBytes) and given in the order a browser needs them: styles,
// fonts, scripts, images, then the rest, each kind in the order recent loads
// received them (Chromium starts Link preloads in field order, and over
// HTTP/2 responses of one priority come in request order). Memory is bounded as a
// cache's: at most Options.MaxPages pages (least recently loaded evicted),
// Options.MaxURLs entries per page (the least seen evicted), and
// Options.MaxLoads loads in progress.
//
// Never learned, so never hinted: https URLs (pepd never sees them), the
// responses that may not be stored (no-store, private: Cacheable is false),
// HTML (a frame's document is a navigation, not a preload), and every
// transaction of a subscriber who opted out (CacheKeeper's CK-Private: the
// caller passes private loads as such and gets no hints for them).
//
// A Learner is safe for concurrent use.
package hints

import (
	"container/list"
	"math/bits"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Options sizes and tunes a Learner. The zero value of a field takes the
// default named on it.
type Options struct {
	// MaxPages is the number of pages remembered (default 10,000).
	MaxPages int
	// MaxURLs is the number of subresource URLs remembered per page
	// (default 64).
	MaxURLs int
	// MaxLoads is the number of loads in progress tracked at once, one per
	// subscriber (default 65,536); the oldest is ended early when full.
	MaxLoads int
	// Window is the number of recent loads a page's statistics cover, 1-32
	// (default 8).
	Window int
	// MinLoads is the number of loads of a page before any of its URLs is
	// hinted (default 1: the first load teaches, the next ones use it).
	MinLoads int
	// Share is the fraction of the recent loads (at most Window) that must
	// have requested a URL for it to be hinted, in (0, 1] (default 0.5).
	Share float64
	// LoadWindow is how long after a document request a subscriber's
	// subresource requests are counted as that document's load (default
	// 30 s: a page over 3G takes 5-15 s).
	LoadWindow time.Duration
	// MaxHints caps the hints for one document (default 20).
	MaxHints int
	// MaxHintBytes caps the sum of the hinted URLs' last seen sizes for
	// one document, in bytes (default 1 MiB), so that preloads cannot
	// crowd out what the parser finds itself on a slow link.
	MaxHintBytes int64
	// PreloadAs are the destinations (Hint.As values) that are preloaded:
	// sent to the browser as Link fields and counted as hints. A learned
	// URL of another destination is only fetched ahead into Squid
	// (Hint.Preload false): it costs the radio link nothing and cannot
	// take an earlier image's share of it. Empty: every destination.
	PreloadAs []string
	// Origins are https origins that are pepd's own (issue 25's VIP,
	// "https://192.0.2.12", "https://192.0.2.12:8443" per shard): their
	// URLs are learned and hinted like http ones. Every other https URL
	// never is (pepd does not see it). SetOrigins changes them.
	Origins []string
}

func (o Options) withDefaults() Options {
	d := DefaultConfig()
	if o.MaxPages <= 0 {
		o.MaxPages = d.MaxPages
	}
	if o.MaxURLs <= 0 {
		o.MaxURLs = d.MaxURLs
	}
	if o.MaxLoads <= 0 {
		o.MaxLoads = 65536
	}
	if o.Window <= 0 || o.Window > 32 {
		o.Window = d.Window
	}
	if o.MinLoads <= 0 {
		o.MinLoads = 1
	}
	if o.Share <= 0 || o.Share > 1 {
		o.Share = d.Share
	}
	if o.LoadWindow <= 0 {
		o.LoadWindow = d.LoadWindow
	}
	if o.MaxHints <= 0 {
		o.MaxHints = d.MaxHints
	}
	if o.MaxHintBytes <= 0 {
		o.MaxHintBytes = int64(d.MaxHintBytes)
	}
	return o
}

// Hint is one learned subresource of a page: its URL as the browser will
// request it, the request destination for Link's `as` attribute, and
// whether it is preloaded or only fetched ahead.
type Hint struct {
	// URL is absolute, http only.
	URL string
	// As is "style", "script", "font", "image" or "fetch".
	As string
	// Bytes is the size of the response last seen for URL (body bytes as
	// sent to the subscriber), 0 when unknown.
	Bytes int64
	// Preload is set when As is one of Options.PreloadAs: the hint goes
	// to the browser (Link), counted in Counts.Hinted; otherwise it is
	// only fetched ahead into Squid.
	Preload bool
}

// Link formats h as one Link field value (RFC 8288 §3): `<URL>;
// rel=preload; as=AS`, with `crossorigin` for fonts (fonts are always
// fetched in CORS mode, HTML Standard §4.6.7.15; without it the preload is
// not used).
func (h Hint) Link() string {
	v := "<" + h.URL + ">; rel=preload; as=" + h.As
	if h.As == "font" {
		v += "; crossorigin"
	}
	return v
}

// Counts are a Learner's counters since it was made.
type Counts struct {
	// Pages and URLs are the pages and subresource entries remembered now.
	Pages, URLs int
	// Loads counts the loads ended (their statistics folded into their
	// page).
	Loads int64
	// HintedLoads counts documents that were given at least one hint, and
	// Hinted the hints given.
	HintedLoads, Hinted int64
	// Used counts hinted URLs that the load then requested; Unused those it
	// did not, and UnusedBytes their last seen sizes.
	Used, Unused, UnusedBytes int64
	// Evicted counts pages evicted for MaxPages.
	Evicted int64
}

// Learner learns pages' dependency sets (see the package comment).
type Learner struct {
	o Options

	mu    sync.Mutex
	pages map[string]*list.Element // of *page, by PageKey
	lru   *list.List               // front: most recently loaded
	loads map[netip.Addr]*load
	order *list.List // of *load, oldest first, for MaxLoads
	c     Counts
}

type page struct {
	key   string
	loads int // loads folded in, saturating at Window for the share
	urls  map[string]*entry
}

type entry struct {
	as    string
	bytes int64
	seen  uint32 // bit i: requested in the i-th most recent load
	// pos is where the URL comes in its loads: in a load, the number of
	// the load's learned URLs received before it; in a page, the mean of
	// that over the loads folded in, the newest weighing half.
	pos float32
}

type load struct {
	sub    netip.Addr
	page   *page
	host   string          // the document's host, for the Referer check
	hosts  map[string]bool // hosts of the URLs the load requested
	start  time.Time
	seen   map[string]*entry // requested in this load (not yet folded in)
	hinted map[string]Hint   // given at the start
	used   map[string]bool
	elem   *list.Element
}

// New returns a Learner with o's sizes.
func New(o Options) *Learner {
	return &Learner{o: o.withDefaults(), pages: map[string]*list.Element{}, lru: list.New(),
		loads: map[netip.Addr]*load{}, order: list.New()}
}

// Options returns the Learner's options with defaults filled in.
func (l *Learner) Options() Options { return l.o }

// volatileParams are query parameter names whose values are cache busters
// or per-load tokens: set aside in a document's key.
var volatileParams = map[string]bool{"_": true, "t": true, "ts": true, "timestamp": true, "rand": true,
	"random": true, "r": true, "cb": true, "cachebuster": true, "nocache": true, "nc": true}

// PageKey is the key under which a document's loads are learned: scheme,
// lower-case host and path, and the query with its parameters sorted and
// those that change from load to load set aside (cache busters by name,
// and any value of ten or more digits: a timestamp or a random number).
// The fragment is dropped. "" when raw does not parse as an absolute http
// URL.
func PageKey(raw string) string { return pageKey(raw, false) }

// pageKey is PageKey, for an https URL too when https is set (a document
// on one of Options.Origins: pepd's own VIP origin, where HTTP/2 and 103
// Early Hints reach the browser).
func pageKey(raw string, https bool) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Scheme != "http" && !(https && u.Scheme == "https") {
		return ""
	}
	q := u.Query()
	var keep []string
	for k, vs := range q {
		if volatileParams[strings.ToLower(k)] {
			continue
		}
		for _, v := range vs {
			if longDigits(v) {
				continue
			}
			keep = append(keep, url.QueryEscape(k)+"="+url.QueryEscape(v))
		}
	}
	sort.Strings(keep)
	key := u.Scheme + "://" + strings.ToLower(u.Host) + u.EscapedPath()
	if len(keep) > 0 {
		key += "?" + strings.Join(keep, "&")
	}
	return key
}

// volatileQuery reports whether URL u's query has a parameter that
// changes from load to load by PageKey's rules (a cache-buster name, or a
// value of ten or more digits): such a URL is never the same in the next
// load, so it is neither learned nor hinted.
func volatileQuery(u string) bool {
	_, q, ok := strings.Cut(u, "?")
	if !ok {
		return false
	}
	q, _, _ = strings.Cut(q, "#")
	for q != "" {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(kv, "=")
		if volatileParams[strings.ToLower(k)] || longDigits(v) {
			return true
		}
	}
	return false
}

func longDigits(v string) bool {
	if len(v) < 10 {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}

// Document starts sub's load of the document docURL at now and returns the
// hints for it, preloaded and fetch-only ones together in the order the
// browser needs them (Hint.Preload tells them apart); nil when the page
// has too few loads, none qualifies, or private is set. docURL is the URL the browser navigated to (absolute
// http, or https on one of Options.Origins). A private load (CK-Private)
// ends sub's previous load and is neither learned nor hinted.
func (l *Learner) Document(sub netip.Addr, docURL string, private bool, now time.Time) []Hint {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := pageKey(docURL, l.own(docURL))
	l.expire(now)
	if old := l.loads[sub]; old != nil {
		l.end(old)
	}
	if key == "" || private {
		return nil
	}
	p := l.page(key)
	ld := &load{sub: sub, page: p, start: now, seen: map[string]*entry{}, used: map[string]bool{}, hosts: map[string]bool{}}
	ld.host = hostOf(docURL)
	hs := l.hints(p)
	for _, h := range hs {
		if !h.Preload {
			continue
		}
		if ld.hinted == nil {
			ld.hinted = make(map[string]Hint, len(hs))
			l.c.HintedLoads++
		}
		ld.hinted[h.URL] = h
		l.c.Hinted++
	}
	for l.order.Len() >= l.o.MaxLoads {
		l.end(l.order.Front().Value.(*load))
	}
	ld.elem = l.order.PushBack(ld)
	l.loads[sub] = ld
	return hs
}

// Subresource records that sub received the response for u (absolute URL,
// as requested) with the given Content-Type, body size in bytes, and
// cacheability, at now, with the request's Referer (may be empty). It
// counts toward sub's current load when that load started less than
// LoadWindow ago and the Referer is empty or names the document's host or
// a host already seen in the load. https URLs, HTML and uncacheable
// responses are not learned (a hinted one that the load uses is still
// counted as used).
func (l *Learner) Subresource(sub netip.Addr, u, referer, contentType string, bytes int64, cacheable bool, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ld := l.loads[sub]
	if ld == nil {
		return
	}
	if now.Sub(ld.start) > l.o.LoadWindow {
		l.end(ld)
		return
	}
	if !ld.refererFits(referer) {
		return
	}
	if _, ok := ld.hinted[u]; ok {
		ld.used[u] = true
	}
	if h := hostOf(u); h != "" && !ld.hosts[h] {
		ld.hosts[h] = true
	}
	as := Destination(contentType)
	if !cacheable || as == "" || !strings.HasPrefix(u, "http://") && !l.own(u) || volatileQuery(u) {
		return
	}
	if e := ld.seen[u]; e != nil {
		e.bytes = bytes
		return
	}
	ld.seen[u] = &entry{as: as, bytes: bytes, pos: float32(len(ld.seen))}
}

// SetOrigins replaces Options.Origins (pepd's https origins change with
// its https.* settings on SIGHUP); what was learned stays.
func (l *Learner) SetOrigins(origins []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.o.Origins = slices.Clone(origins)
}

// own reports whether u is on one of Options.Origins. Called with l.mu
// held.
func (l *Learner) own(u string) bool {
	for _, o := range l.o.Origins {
		if len(u) > len(o) && strings.HasPrefix(u, o) && u[len(o)] == '/' {
			return true
		}
	}
	return false
}

// InLoad reports whether a document request from sub with this Referer at
// now belongs to sub's load in progress (a frame of the page being
// loaded, not a new navigation): the load started less than LoadWindow
// ago and the Referer is non-empty and names the document's host or a host
// the load requested. Such a document is recorded with Subresource (HTML:
// not learned) and gets no hints.
func (l *Learner) InLoad(sub netip.Addr, referer string, now time.Time) bool {
	if referer == "" {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ld := l.loads[sub]
	return ld != nil && now.Sub(ld.start) < l.o.LoadWindow && ld.refererFits(referer)
}

func (ld *load) refererFits(referer string) bool {
	if referer == "" {
		return true
	}
	h := hostOf(referer)
	return h != "" && (h == ld.host || ld.hosts[h])
}

// hostOf returns the lower-case host of an absolute URL (without
// userinfo, port or IPv6 brackets), as url.Parse's Hostname would, ""
// when raw has no "scheme://" authority. It does not allocate for a host
// already in lower case (the learner calls it for every response).
func hostOf(raw string) string {
	i := strings.Index(raw, "://")
	if i <= 0 {
		return ""
	}
	a := raw[i+3:]
	if j := strings.IndexAny(a, "/?#"); j >= 0 {
		a = a[:j]
	}
	if j := strings.LastIndexByte(a, '@'); j >= 0 {
		a = a[j+1:]
	}
	if strings.HasPrefix(a, "[") {
		if j := strings.IndexByte(a, ']'); j >= 0 {
			a = a[1:j]
		}
	} else if j := strings.LastIndexByte(a, ':'); j >= 0 {
		a = a[:j]
	}
	for k := 0; k < len(a); k++ {
		if c := a[k]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(a)
		}
	}
	return a
}

// Destination maps a response Content-Type to the preload destination
// (`as`): style, script, font, image or fetch for JSON; "" for what is not
// preloaded (HTML, media, unknown types).
func Destination(contentType string) string {
	ct := strings.ToLower(strings.TrimSpace(contentType))
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = strings.TrimSpace(ct[:i])
	}
	switch {
	case ct == "text/css":
		return "style"
	case ct == "application/javascript" || ct == "text/javascript" || ct == "application/x-javascript" ||
		ct == "application/ecmascript" || ct == "text/ecmascript":
		return "script"
	case strings.HasPrefix(ct, "font/") || ct == "application/font-woff" || ct == "application/x-font-woff" ||
		ct == "application/vnd.ms-fontobject" || ct == "application/x-font-ttf" || ct == "application/font-sfnt":
		return "font"
	case strings.HasPrefix(ct, "image/"):
		return "image"
	case ct == "application/json":
		return "fetch"
	}
	return ""
}

// Flush ends every load that started LoadWindow or more before now, so
// that their statistics count. Document does this itself; callers run it
// before reading Counts (pepd: with its metrics scrape).
func (l *Learner) Flush(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire(now)
}

// expire ends the loads, oldest first, that started LoadWindow or more
// before now. Called with l.mu held.
func (l *Learner) expire(now time.Time) {
	for e := l.order.Front(); e != nil; e = l.order.Front() {
		ld := e.Value.(*load)
		if now.Sub(ld.start) < l.o.LoadWindow {
			return
		}
		l.end(ld)
	}
}

// Reset ends every load in progress (its hinted URLs are counted used or
// unused, as when its window passes) and then forgets every page (the
// admin API's DELETE /hints; the testbed before a teaching pass and after
// a measured session, so that its last load is counted); the counters
// stay.
func (l *Learner) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for e := l.order.Front(); e != nil; e = l.order.Front() {
		l.end(e.Value.(*load))
	}
	l.pages, l.lru = map[string]*list.Element{}, list.New()
	l.loads, l.order = map[netip.Addr]*load{}, list.New()
}

// Counts returns the counters and the sizes now.
func (l *Learner) Counts() Counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.c
	c.Pages = len(l.pages)
	for _, e := range l.pages {
		c.URLs += len(e.Value.(*page).urls)
	}
	return c
}

// page returns the page for key, made (and the least recently loaded page
// evicted past MaxPages) if needed, and marks it recently loaded.
func (l *Learner) page(key string) *page {
	if e := l.pages[key]; e != nil {
		l.lru.MoveToFront(e)
		return e.Value.(*page)
	}
	for l.lru.Len() >= l.o.MaxPages {
		old := l.lru.Back()
		l.lru.Remove(old)
		delete(l.pages, old.Value.(*page).key)
		l.c.Evicted++
	}
	p := &page{key: key, urls: map[string]*entry{}}
	l.pages[key] = l.lru.PushFront(p)
	return p
}

// hints returns p's qualifying URLs, chosen most often seen first: the
// preloaded ones within MaxHints and MaxHintBytes, the fetch-only ones
// (Options.PreloadAs) within MaxHints; in the order the browser needs
// them.
func (l *Learner) hints(p *page) []Hint {
	if p.loads < l.o.MinLoads {
		return nil
	}
	n := min(p.loads, l.o.Window)
	// At least two loads once the page has two: a URL seen in one load
	// only (a per-load query, an ad) is not hinted again and again while
	// Share of few loads is one load.
	need := max(int(l.o.Share*float64(n)+0.999999), min(n, 2))
	mask := uint32(1)<<uint(l.o.Window) - 1
	if l.o.Window == 32 {
		mask = ^uint32(0)
	}
	type cand struct {
		h    Hint
		seen int
		pos  float32
	}
	var cs []cand
	for u, e := range p.urls {
		if c := bits.OnesCount32(e.seen & mask); c >= need {
			cs = append(cs, cand{Hint{URL: u, As: e.as, Bytes: e.bytes}, c, e.pos})
		}
	}
	// needed orders hints as a browser needs them: by kind (asOrder),
	// then in the order the loads received them.
	needed := func(a, b cand) int {
		if pa, pb := asOrder(a.h.As), asOrder(b.h.As); pa != pb {
			return pa - pb
		}
		if a.pos != b.pos {
			if a.pos < b.pos {
				return -1
			}
			return 1
		}
		return strings.Compare(a.h.URL, b.h.URL)
	}
	// Chosen by how many recent loads requested them.
	slices.SortFunc(cs, func(a, b cand) int {
		if a.seen != b.seen {
			return b.seen - a.seen
		}
		return needed(a, b)
	})
	// Preloads within MaxHints and MaxHintBytes (the first that does not
	// fit ends them); fetch-only URLs within MaxHints (they do not cross
	// the radio link).
	var total int64
	preloads, fetches, full := 0, 0, false
	chosen := cs[:0]
	for _, c := range cs {
		if l.preloads(c.h.As) {
			if full || preloads == l.o.MaxHints || total+c.h.Bytes > l.o.MaxHintBytes {
				full = true
				continue
			}
			total += c.h.Bytes
			preloads++
			c.h.Preload = true
		} else {
			if fetches == l.o.MaxHints {
				continue
			}
			fetches++
		}
		chosen = append(chosen, c)
	}
	// The chosen ones in the order the browser needs them.
	cs = chosen
	n = len(cs)
	slices.SortFunc(cs, needed)
	out := make([]Hint, n)
	for i, c := range cs {
		out[i] = c.h
	}
	return out
}

// preloads reports whether destination as is preloaded (Options.PreloadAs;
// empty: all).
func (l *Learner) preloads(as string) bool {
	return len(l.o.PreloadAs) == 0 || slices.Contains(l.o.PreloadAs, as)
}

// asOrder ranks destinations as a browser's preload scanner would need
// them: styles and fonts block the first paint, scripts the parser.
func asOrder(as string) int {
	switch as {
	case "style":
		return 0
	case "font":
		return 1
	case "script":
		return 2
	case "image":
		return 3
	}
	return 4
}

// end folds ld into its page: every entry's history shifts by one load, the
// URLs ld requested set the newest bit, entries no recent load requested
// age out, and the page keeps its MaxURLs most often seen entries. Hinted
// URLs are counted used or unused. Called with l.mu held.
func (l *Learner) end(ld *load) {
	delete(l.loads, ld.sub)
	l.order.Remove(ld.elem)
	for u, h := range ld.hinted {
		if ld.used[u] {
			l.c.Used++
		} else {
			l.c.Unused++
			l.c.UnusedBytes += h.Bytes
		}
	}
	p := ld.page
	if e := l.pages[p.key]; e == nil || e.Value.(*page) != p {
		return // evicted while the load ran
	}
	l.c.Loads++
	if p.loads < l.o.Window {
		p.loads++
	}
	mask := uint32(1)<<uint(l.o.Window) - 1
	if l.o.Window == 32 {
		mask = ^uint32(0)
	}
	for u, e := range p.urls {
		e.seen = (e.seen << 1) & mask
		if s := ld.seen[u]; s != nil {
			e.seen |= 1
			e.as, e.bytes = s.as, s.bytes
			e.pos = (e.pos + s.pos) / 2
			delete(ld.seen, u)
		}
		if e.seen == 0 {
			delete(p.urls, u)
		}
	}
	for u, s := range ld.seen {
		s.seen = 1
		p.urls[u] = s
	}
	if len(p.urls) > l.o.MaxURLs {
		type kv struct {
			u string
			n int
			s uint32
		}
		all := make([]kv, 0, len(p.urls))
		for u, e := range p.urls {
			all = append(all, kv{u, bits.OnesCount32(e.seen), e.seen})
		}
		// Fewest loads first; among equals the one seen least recently.
		sort.Slice(all, func(i, j int) bool {
			if all[i].n != all[j].n {
				return all[i].n < all[j].n
			}
			return bits.TrailingZeros32(all[i].s) > bits.TrailingZeros32(all[j].s)
		})
		for _, x := range all[:len(all)-l.o.MaxURLs] {
			delete(p.urls, x.u)
		}
	}
}
