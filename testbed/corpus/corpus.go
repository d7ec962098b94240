// Package corpus holds the page corpus that the testbed's replay origin serves:
// pages (a name and a top-level URL), the hostnames they use, and the stored
// objects keyed by (host, path with query). It imports three sources: the
// Mozilla Talos tp5n mirror (tp5n.go), WARC files, ISO 28500 (warc.go), and an
// embedded default made of real, redistributable content to the seed paper's
// three sites, §4.1 (default.go, built by default/build.sh). It also plans one
// origin address per hostname and writes the carrier resolver's dnsmasq
// configuration (plan.go).
package corpus

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Object is one stored response.
type Object struct {
	// Host is the lower-case hostname without port, e.g. "i.cdn.turner.com".
	Host string
	// Path is the request target as stored, starting with "/": for tp5n the
	// wget file name ("/s@wd=mozilla.html", "?" stored as "@"), for WARC the
	// recorded target ("/s?wd=mozilla").
	Path string
	// Body is the entity body exactly as served (tp5n HTML and CSS after the
	// cross-host reference rewrite; WARC bodies still content-coded as
	// recorded).
	Body []byte
	// Status is the recorded status code; 0 when none was recorded (served
	// as 200).
	Status int
	// Header holds the recorded response headers, nil when none were recorded.
	// Hop-by-hop fields, Content-Length and Transfer-Encoding are removed.
	Header http.Header
	// ContentType is the recorded Content-Type, or the one derived from the
	// file name and then from the bytes (ContentType in ctype.go).
	ContentType string
	// Scheme is the recorded URL scheme, "http" or "https"; "" for sources
	// that record none (tp5n, the default pages), which are http.
	Scheme string
}

// Page is one top-level page and the objects it loads.
type Page struct {
	// Name identifies the page in selections and reports: the tp5n site
	// folder ("cnn.com"), "yahoo"/"cnn"/"britannica" for the default corpus,
	// the page's hostname for WARC input.
	Name string
	// URL is the real top-level URL, e.g. "http://www.cnn.com/index.html".
	URL string
	// Host is URL's hostname.
	Host string
	// Objects are the page's stored objects, the top-level document first
	// when it is stored.
	Objects []*Object
}

// Hosts returns the sorted distinct hostnames of the page's objects and of
// its top-level URL.
func (p *Page) Hosts() []string {
	set := map[string]bool{p.Host: true}
	for _, o := range p.Objects {
		set[o.Host] = true
	}
	return sortedKeys(set)
}

// Bytes returns the sum of the page's object body sizes in bytes.
func (p *Page) Bytes() int64 {
	var n int64
	for _, o := range p.Objects {
		n += int64(len(o.Body))
	}
	return n
}

// Summary is the per-page figure set that the testbed report prints.
type Summary struct {
	Name    string `json:"name"`
	URL     string `json:"url"`
	Objects int    `json:"objects"`
	Hosts   int    `json:"hosts"`
	Bytes   int64  `json:"bytes"`
}

// Summary returns the page's object count, host count and bytes.
func (p *Page) Summary() Summary {
	return Summary{Name: p.Name, URL: p.URL, Objects: len(p.Objects), Hosts: len(p.Hosts()), Bytes: p.Bytes()}
}

// Schemes returns how many of the page's objects were recorded over http
// (rewritable by pep's URL mode) and over https (spliced by SNI only).
func (p *Page) Schemes() (httpObjects, httpsObjects int) {
	for _, o := range p.Objects {
		if o.Scheme == "https" {
			httpsObjects++
		} else {
			httpObjects++
		}
	}
	return httpObjects, httpsObjects
}

// ImportStats counts what an import did beyond storing files.
type ImportStats struct {
	// Files is the number of stored files or response records read.
	Files int `json:"files"`
	// Rewritten is the number of relative cross-host references turned into
	// absolute http:// URLs (tp5n only).
	Rewritten int `json:"rewritten"`
	// Conflicts is the number of (host, path) keys stored by more than one
	// page with different bodies; the first page in page order wins.
	Conflicts int `json:"conflicts"`
	// Skipped is the number of entries ignored (files outside a host folder,
	// WARC records not used); SkippedBy splits it by reason (WARC: the
	// Skip* constants).
	Skipped   int            `json:"skipped"`
	SkippedBy map[string]int `json:"skipped_by,omitempty"`
	// Repaired counts WARC responses used after a repair, by Repair.
	Repaired map[string]int `json:"repaired,omitempty"`
	// Records is the number of WARC records read; Responses the response
	// and revisit records among them, ResponsesUsed those that became
	// objects.
	Records       int `json:"records,omitempty"`
	Responses     int `json:"responses,omitempty"`
	ResponsesUsed int `json:"responses_used,omitempty"`
	// Unanswered is the number of request targets recorded without a
	// response (objects the page asked for that the archive lacks).
	Unanswered int `json:"unanswered,omitempty"`
	// Errors are the framing errors that ended a file early, one line each
	// ("file: error").
	Errors []string `json:"errors,omitempty"`
}

// skipSummary lists SkippedBy as "reason n, reason n", sorted by reason.
func (s ImportStats) skipSummary() string {
	return countList(s.SkippedBy)
}

func countList(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// Corpus is an immutable set of pages and the index of their objects. It is
// safe for concurrent use after construction.
type Corpus struct {
	// Source describes where the corpus came from ("default", a path).
	Source string
	// Pages are in source order (manifest order for tp5n).
	Pages []*Page
	// Stats describes the import.
	Stats ImportStats

	index map[objKey]*Object
	// pageIndex holds each page's own objects by page name, so that a
	// request attributed to a page finds that page's recording first.
	pageIndex map[string]map[objKey]*Object
	hosts     []string
}

type objKey struct{ host, path string }

// New builds a corpus from pages. The shared index keeps, for a (host,
// path) key present in several pages, each page's own top-level document
// first (a page's document never comes from another page's recording: a
// combined WARC where Taobao's recording also captured Tmall's HTML still
// serves Tmall's own), then the first page's object; keys whose bodies
// differ are counted in Stats.Conflicts. Each page also gets an index of its
// own objects (LookupPage).
func New(source string, pages []*Page, stats ImportStats) *Corpus {
	c := &Corpus{Source: source, Pages: pages, Stats: stats, index: map[objKey]*Object{},
		pageIndex: map[string]map[objKey]*Object{}}
	c.Stats.Conflicts = 0
	hosts := map[string]bool{}
	add := func(o *Object) {
		k := objKey{o.Host, o.Path}
		if prev, ok := c.index[k]; ok {
			if prev != o && string(prev.Body) != string(o.Body) {
				c.Stats.Conflicts++
			}
			return
		}
		c.index[k] = o
	}
	for _, p := range pages {
		if len(p.Objects) > 0 {
			add(p.Objects[0])
		}
	}
	for _, p := range pages {
		hosts[p.Host] = true
		own := c.pageIndex[p.Name]
		if own == nil {
			own = map[objKey]*Object{}
			c.pageIndex[p.Name] = own
		}
		for i, o := range p.Objects {
			hosts[o.Host] = true
			if k := (objKey{o.Host, o.Path}); own[k] == nil {
				own[k] = o
			}
			if i > 0 {
				add(o)
			}
		}
	}
	c.hosts = sortedKeys(hosts)
	return c
}

// Hosts returns the sorted distinct hostnames of all pages.
func (c *Corpus) Hosts() []string { return append([]string(nil), c.hosts...) }

// Len returns the number of distinct stored objects.
func (c *Corpus) Len() int { return len(c.index) }

// Page returns the page with the given name or top-level URL.
func (c *Corpus) Page(name string) (*Page, bool) {
	for _, p := range c.Pages {
		if p.Name == name || p.URL == name {
			return p, true
		}
	}
	return nil, false
}

// Get returns the object stored under exactly (host, path).
func (c *Corpus) Get(host, path string) (*Object, bool) {
	o, ok := c.index[objKey{normHost(host), path}]
	return o, ok
}

// Lookup finds the object for a request to host with the request target
// target (path and optional query, as on the wire: "/a%20b.png?x=1"). It
// tries, in order, the target as stored by a WARC ("path?query"), the wget
// form with "?" stored as "@" ("path@query"), the wget-appended ".html" and
// ".css" suffixes, "index.html" for a directory, and each of these with the
// path percent-decoded (wget stores decoded file names). host may carry a
// port and a trailing dot.
func (c *Corpus) Lookup(host, target string) (*Object, bool) {
	return c.LookupPage("", host, target)
}

// LookupPage is Lookup for a request attributed to the page named page:
// that page's own recording is tried first (every candidate path), then the
// shared index. An empty or unknown page is Lookup.
func (c *Corpus) LookupPage(page, host, target string) (*Object, bool) {
	host = normHost(host)
	cands := Candidates(target)
	if own := c.pageIndex[page]; own != nil {
		for _, p := range cands {
			if o, ok := own[objKey{host, p}]; ok {
				return o, true
			}
		}
	}
	for _, p := range cands {
		if o, ok := c.index[objKey{host, p}]; ok {
			return o, true
		}
	}
	return nil, false
}

// Candidates returns the stored paths Lookup tries for a request target, in
// order, without duplicates. A target without a leading "/" (an absolute URL
// or "*") yields its path part or nothing.
func Candidates(target string) []string {
	if i := strings.Index(target, "#"); i >= 0 {
		target = target[:i]
	}
	if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") {
		if u, err := url.Parse(target); err == nil {
			target = u.EscapedPath()
			if u.RawQuery != "" || u.ForceQuery {
				target += "?" + u.RawQuery
			}
		}
	}
	if !strings.HasPrefix(target, "/") {
		return nil
	}
	p, q, hasQ := strings.Cut(target, "?")
	paths := []string{p}
	if d, err := url.PathUnescape(p); err == nil && d != p {
		paths = append(paths, d)
	}
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, pp := range paths {
		if hasQ {
			add(pp + "?" + q)
			add(pp + "@" + q)
			add(pp + "@" + q + ".html")
			add(pp + "@" + q + ".css")
			if dq, err := url.QueryUnescape(q); err == nil && dq != q {
				add(pp + "@" + dq)
				add(pp + "@" + dq + ".html")
			}
			continue
		}
		add(pp)
		if strings.HasSuffix(pp, "/") {
			add(pp + "index.html")
			continue
		}
		add(pp + ".html")
		add(pp + ".css")
	}
	return out
}

// PagesOf returns the names of the pages that use host, in page order.
func (c *Corpus) PagesOf(host string) []string {
	host = normHost(host)
	var out []string
	for _, p := range c.Pages {
		for _, h := range p.Hosts() {
			if h == host {
				out = append(out, p.Name)
				break
			}
		}
	}
	return out
}

// First returns a corpus of the first n pages (all when n <= 0 or n exceeds
// the count).
func (c *Corpus) First(n int) *Corpus {
	if n <= 0 || n >= len(c.Pages) {
		return c
	}
	return New(c.Source, append([]*Page(nil), c.Pages[:n]...), c.Stats)
}

// Select returns a corpus of the named pages (by Name or URL), in the order
// given. An unknown name is an error that quotes it.
func (c *Corpus) Select(names []string) (*Corpus, error) {
	var pages []*Page
	for _, n := range names {
		p, ok := c.Page(n)
		if !ok {
			return nil, fmt.Errorf("corpus: no page %q in %s", n, c.Source)
		}
		pages = append(pages, p)
	}
	return New(c.Source, pages, c.Stats), nil
}

// SelectSpec applies a page selection as the runner's -pages flag gives it:
// "" or "all" keeps every page, a number N keeps the first N, anything else
// is a comma-separated list of page names or URLs.
func (c *Corpus) SelectSpec(spec string) (*Corpus, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "all" {
		return c, nil
	}
	var n int
	if _, err := fmt.Sscanf(spec, "%d", &n); err == nil && fmt.Sprint(n) == spec {
		if n <= 0 {
			return nil, fmt.Errorf("corpus: page count %q must be positive", spec)
		}
		return c.First(n), nil
	}
	var names []string
	for _, s := range strings.Split(spec, ",") {
		if s = strings.TrimSpace(s); s != "" {
			names = append(names, s)
		}
	}
	return c.Select(names)
}

// Open loads a corpus from spec: "default" (the embedded corpus, §4.1 of
// the seed paper), a tp5n tarball (".tar.gz", ".tgz"), a tp5n directory
// (one holding tp5n.manifest or tp5n/tp5n.manifest), a WARC file (".warc",
// ".warc.gz"), a WACZ package (".wacz"), a directory of WARC files or a
// Mahimahi recording folder (or a folder of them, LoadMahimahi).
// Errors quote spec.
func Open(spec string) (*Corpus, error) {
	if spec == "default" {
		return Default(), nil
	}
	fi, err := os.Stat(spec)
	if err != nil {
		return nil, fmt.Errorf("corpus: open %q: %w", spec, err)
	}
	lower := strings.ToLower(spec)
	switch {
	case fi.IsDir():
		if m, err := findManifest(spec); err == nil {
			return loadTP5NDir(spec, m)
		}
		files, err := warcFiles(spec)
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			if c, err := LoadMahimahi(spec); err == nil {
				return c, nil
			}
			return nil, fmt.Errorf("corpus: %q holds neither tp5n/tp5n.manifest, .warc/.warc.gz files nor Mahimahi recordings", spec)
		}
		return LoadWARC(spec, files, WARCOptions{})
	case strings.HasSuffix(lower, ".tar.gz") || strings.HasSuffix(lower, ".tgz"):
		return LoadTP5NTarball(spec)
	case strings.HasSuffix(lower, ".warc") || strings.HasSuffix(lower, ".warc.gz"):
		return LoadWARC(spec, []string{spec}, WARCOptions{})
	case strings.HasSuffix(lower, ".wacz"):
		return LoadWACZ(spec)
	}
	return nil, fmt.Errorf("corpus: %q is not \"default\", a .tar.gz, a .warc[.gz], a .wacz or a directory", spec)
}

func warcFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("corpus: read %q: %w", dir, err)
	}
	var out []string
	for _, e := range ents {
		n := strings.ToLower(e.Name())
		if !e.IsDir() && (strings.HasSuffix(n, ".warc") || strings.HasSuffix(n, ".warc.gz")) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

var errNoManifest = errors.New("no tp5n.manifest")

func findManifest(dir string) (string, error) {
	for _, p := range []string{filepath.Join(dir, "tp5n", "tp5n.manifest"), filepath.Join(dir, "tp5n.manifest")} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errNoManifest
}

func normHost(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	h = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(h, "]"), "["), ".")
	return strings.ToLower(h)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
