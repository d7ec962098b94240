package corpus

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// TP5NManifestPrefix starts every line of tp5n/tp5n.manifest; the rest is
// "<site>/<host>/<path>" of the page's top-level file.
const TP5NManifestPrefix = "http://localhost/page_load_test/tp5n/"

// LoadTP5NTarball imports the Talos tp5n page set straight from its
// tarball (entries "tp5n/tp5n.manifest" and "tp5n/<site>/<host>/<path>"),
// without extracting it. See BuildTP5N for what the import does.
func LoadTP5NTarball(path string) (*Corpus, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("corpus: open %q: %w", path, err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("corpus: %q: %w", path, err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	var manifest []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("corpus: %q: %w", path, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := strings.TrimPrefix(h.Name, "./")
		rel, ok := strings.CutPrefix(name, "tp5n/")
		if !ok {
			continue // LICENSE and anything else beside the set
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("corpus: %q: %s: %w", path, h.Name, err)
		}
		if rel == "tp5n.manifest" {
			manifest = body
			continue
		}
		files[rel] = body
	}
	if manifest == nil {
		return nil, fmt.Errorf("corpus: %q has no tp5n/tp5n.manifest", path)
	}
	return BuildTP5N(path, manifest, files)
}

// LoadTP5NDir imports an extracted tp5n set: dir holds tp5n/tp5n.manifest
// (or is the tp5n folder itself).
func LoadTP5NDir(dir string) (*Corpus, error) {
	m, err := findManifest(dir)
	if err != nil {
		return nil, fmt.Errorf("corpus: %q: %w", dir, err)
	}
	return loadTP5NDir(dir, m)
}

func loadTP5NDir(dir, manifestPath string) (*Corpus, error) {
	manifest, err := os.ReadFile(manifestPath)
	if err != nil {
		return nil, fmt.Errorf("corpus: %w", err)
	}
	root := filepath.Dir(manifestPath)
	files := map[string][]byte{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() || p == manifestPath {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		body, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = body
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("corpus: %q: %w", dir, err)
	}
	return BuildTP5N(dir, manifest, files)
}

// BuildTP5N builds a corpus from a tp5n manifest and the files of the set,
// keyed "<site>/<host>/<path>". It handles the quirks of the wget mirror
// (shared/corpus/README.md):
//   - each manifest line http://localhost/page_load_test/tp5n/<site>/<host>/<path>
//     becomes page <site> with top-level URL http://<host>/<path>;
//   - files keep their wget names: "?" stored as "@" is served literally and
//     Lookup maps a real query to it, wget-appended ".html"/".css" stay;
//   - relative references that lead into another host's folder are turned
//     back into absolute http://<host>/<path> URLs in HTML and CSS (rewriteHTML,
//     rewriteCSS); "httpdisabled://" links are left alone;
//   - files missing from the mirror are simply absent (the origin answers
//     404);
//   - Content-Type comes from the file name, then from the bytes.
//
// A manifest line that does not fit is an error naming the line; files
// outside a host folder and sites missing from the manifest are skipped.
func BuildTP5N(source string, manifest []byte, files map[string][]byte) (*Corpus, error) {
	type entry struct{ host, path, src string }
	sites := map[string][]entry{}
	siteHosts := map[string]map[string]bool{}
	loose := map[string][]string{}
	var stats ImportStats
	for rel := range files {
		site, rest, ok1 := strings.Cut(rel, "/")
		host, p, ok2 := strings.Cut(rest, "/")
		if ok1 && !ok2 && !strings.HasPrefix(rest, ".") {
			loose[site] = append(loose[site], rest)
			continue
		}
		if !ok1 || !ok2 || p == "" || host == "" || strings.HasPrefix(host, ".") {
			stats.Skipped++
			continue
		}
		sites[site] = append(sites[site], entry{host, p, rel})
		if siteHosts[site] == nil {
			siteHosts[site] = map[string]bool{}
		}
		siteHosts[site][host] = true
	}
	var pages []*Page
	used := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(manifest))
	var err error
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		rest, ok := strings.CutPrefix(l, TP5NManifestPrefix)
		site, hp, ok2 := strings.Cut(rest, "/")
		host, p, ok3 := strings.Cut(hp, "/")
		if !ok || !ok2 || !ok3 || host == "" {
			return nil, fmt.Errorf("corpus: %s: tp5n.manifest:%d: %q is not %s<site>/<host>/<path>", source, line, l, TP5NManifestPrefix)
		}
		// The manifest holds URLs: the file name is the unescaped path
		// ("%252F" names a file with "%2F" in it).
		rawPath := p
		if p, err = url.PathUnescape(rawPath); err != nil {
			return nil, fmt.Errorf("corpus: %s: tp5n.manifest:%d: path %q: %w", source, line, rawPath, err)
		}
		if used[site] {
			return nil, fmt.Errorf("corpus: %s: tp5n.manifest:%d: site %q listed twice", source, line, site)
		}
		used[site] = true
		if _, ok := files[site+"/"+host+"/"+p]; !ok {
			return nil, fmt.Errorf("corpus: %s: tp5n.manifest:%d: page file %q is missing", source, line, site+"/"+host+"/"+p)
		}
		pu, err := url.Parse("http://" + host + "/" + rawPath)
		if err != nil {
			return nil, fmt.Errorf("corpus: %s: tp5n.manifest:%d: %q: %w", source, line, l, err)
		}
		u := pu.String()
		page := &Page{Name: site, URL: u, Host: strings.ToLower(host)}
		ents := sites[site]
		sort.Slice(ents, func(i, j int) bool {
			if ents[i].host != ents[j].host {
				return ents[i].host < ents[j].host
			}
			return ents[i].path < ents[j].path
		})
		// Files lying in the site folder itself were fetched through
		// references that climb above a host's root ("../r.gif" in the
		// top-level page); a browser clamps those to the root of the page's
		// host, so they are stored there unless the host has the name.
		have := map[string]bool{}
		for _, e := range ents {
			if e.host == host {
				have[e.path] = true
			}
		}
		sort.Strings(loose[site])
		for _, name := range loose[site] {
			if have[name] {
				stats.Skipped++
				continue
			}
			ents = append(ents, entry{host, name, site + "/" + name})
		}
		var top *Object
		for _, e := range ents {
			body := files[e.src]
			ct := ContentType(e.path, body)
			if isHTML(ct) || isCSS(ct) {
				segs := strings.Split(e.path, "/")
				b := &refBase{host: e.host, dir: segs[:len(segs)-1], hosts: siteHosts[site]}
				var n int
				if isHTML(ct) {
					body, n = b.rewriteHTML(body)
				} else {
					body, n = b.rewriteCSS(body)
				}
				stats.Rewritten += n
			}
			o := &Object{Host: strings.ToLower(e.host), Path: "/" + e.path, Body: body, ContentType: ct}
			stats.Files++
			if e.host == host && e.path == p {
				top = o
				continue
			}
			page.Objects = append(page.Objects, o)
		}
		page.Objects = append([]*Object{top}, page.Objects...)
		pages = append(pages, page)
	}
	for site, ents := range sites {
		if !used[site] {
			stats.Skipped += len(ents) + len(loose[site])
		}
	}
	if len(pages) == 0 {
		return nil, fmt.Errorf("corpus: %s: tp5n.manifest lists no pages", source)
	}
	return New(source, pages, stats), nil
}
