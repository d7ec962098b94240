package corpus

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
)

// KB is the kilobyte of the seed paper's page sizes, 1024 bytes.
const KB = 1024

// PaperSite describes one of the three sites of the seed paper, §4.1.
type PaperSite struct {
	// Name is the page name, e.g. "yahoo".
	Name string
	// Hosts are the site's hostnames, the top-level host first; the page
	// and its embedded objects use every one of them.
	Hosts []string
	// Embedded is the number of embedded objects (the top-level HTML not
	// counted).
	Embedded int
	// Bytes is the size of the page and all embedded objects, in bytes.
	Bytes int64
}

// PaperSites are the seed paper's three sites (§4.1): Yahoo, 16 embedded
// objects on 3 domains, 74 KB; CNN, 58 on 6, 197 KB; Britannica, 32 on 15,
// 178 KB. The hostnames are invented but plausible; they exist only inside
// the testbed. None is on Chromium's HSTS preload list as far as this
// project knows, so the pages stay on http://.
var PaperSites = []PaperSite{
	{Name: "yahoo", Embedded: 16, Bytes: 74 * KB, Hosts: []string{
		"www.yahoo.com", "us.i1.yimg.com", "l.yimg.com"}},
	{Name: "cnn", Embedded: 58, Bytes: 197 * KB, Hosts: []string{
		"www.cnn.com", "i.cnn.net", "i.cdn.turner.com", "i2.cdn.turner.com",
		"z.cdn.turner.com", "ads.cnn.com"}},
	{Name: "britannica", Embedded: 32, Bytes: 178 * KB, Hosts: []string{
		"www.britannica.com", "media-1.britannica.com", "media-2.britannica.com",
		"images.britannica.com", "static.eb.com", "js.eb.com", "css.eb.com",
		"ads.eb.com", "stats.eb.com", "ad.atdmt.com", "view.atdmt.com",
		"stats.hitbox.com", "pixel.quantserve.com", "s7.addthis.com",
		"www.merriam-webster.com"}},
}

var (
	defaultOnce   sync.Once
	defaultCorpus *Corpus
)

// defaultSite holds the default pages' files as default/gen.go wrote them:
// default/site/<page>/<host>/<path>.
//
//go:embed all:default/site
var defaultSite embed.FS

// Default returns the embedded default corpus: one page per PaperSites
// entry, http://<Hosts[0]>/index.html, with its embedded objects on all of
// the site's hosts. The objects are real, redistributable content, built by
// default/build.sh (default/gen.go) and listed with source package and
// licence in default/NOTICE: JPEG photographs (baseline and progressive,
// quality 75-85) and PNG/GIF graphics from public-domain and CC0 images,
// JavaScript and CSS from permissively licensed libraries, and page text
// from a public-domain book. About a third of each page's images are
// referenced from its site style sheet through url(). Each page's bytes are
// within 0.1 % of the paper's, object and host counts are exact; the bytes by
// type follow the HTTP Archive shares given in the corpus README.
//
// Objects are ordered: the page, then style sheets, scripts and images, each
// by host (in PaperSite.Hosts order) and path. It panics if the embedded
// files do not match PaperSites (a build error, caught by the tests).
func Default() *Corpus {
	defaultOnce.Do(func() {
		var pages []*Page
		var stats ImportStats
		for _, s := range PaperSites {
			p, err := loadSite(defaultSite, "default/site", s)
			if err != nil {
				panic(err)
			}
			stats.Files += len(p.Objects)
			pages = append(pages, p)
		}
		defaultCorpus = New("default", pages, stats)
	})
	return defaultCorpus
}

// loadSite reads dir/<s.Name>/<host>/<path> from fsys into a page.
func loadSite(fsys fs.FS, dir string, s PaperSite) (*Page, error) {
	hostRank := map[string]int{}
	for i, h := range s.Hosts {
		hostRank[h] = i
	}
	root := path.Join(dir, s.Name)
	page := &Page{Name: s.Name, Host: s.Hosts[0], URL: "http://" + s.Hosts[0] + "/index.html"}
	err := fs.WalkDir(fsys, root, func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		host, p, _ := strings.Cut(strings.TrimPrefix(name, root+"/"), "/")
		if _, ok := hostRank[host]; !ok {
			return fmt.Errorf("corpus: default site %q: %s is not on one of its hosts", s.Name, name)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		p = "/" + p
		page.Objects = append(page.Objects, &Object{Host: host, Path: p, Body: body, ContentType: ContentType(p, body)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	rank := func(o *Object) int {
		switch {
		case "http://"+o.Host+o.Path == page.URL:
			return 0
		case o.ContentType == "text/css":
			return 1
		case o.ContentType == "application/javascript":
			return 2
		}
		return 3
	}
	sort.SliceStable(page.Objects, func(i, j int) bool {
		a, b := page.Objects[i], page.Objects[j]
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		if a.Host != b.Host {
			return hostRank[a.Host] < hostRank[b.Host]
		}
		return a.Path < b.Path
	})
	if len(page.Objects) == 0 || rank(page.Objects[0]) != 0 {
		return nil, fmt.Errorf("corpus: default site %q has no %s", s.Name, page.URL)
	}
	return page, nil
}
