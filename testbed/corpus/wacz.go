package corpus

import (
	"archive/zip"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
)

// LoadWACZ imports a WACZ package (Webrecorder's "Web Archive Collection
// Zipped" 1.1: a ZIP holding archive/*.warc[.gz] and pages/pages.jsonl) as
// LoadWARC imports WARC files, with the package's page list. The ZIP's
// own index and datapackage.json are not needed for replay and are not
// read.
func LoadWACZ(name string) (*Corpus, error) {
	zr, err := zip.OpenReader(name)
	if err != nil {
		return nil, fmt.Errorf("corpus: %q: %w", name, err)
	}
	defer zr.Close()
	var srcs []warcSource
	var pages []string
	for _, f := range zr.File {
		lower := strings.ToLower(f.Name)
		switch {
		case path.Dir(lower) == "archive" && (strings.HasSuffix(lower, ".warc") || strings.HasSuffix(lower, ".warc.gz")):
			f := f
			srcs = append(srcs, warcSource{name: name + ":" + f.Name, open: func() (io.ReadCloser, error) { return f.Open() }})
		case lower == "pages/pages.jsonl":
			rc, err := f.Open()
			if err != nil {
				return nil, fmt.Errorf("corpus: %q: %w", name, err)
			}
			pages, err = parsePagesJSONL(name+":"+f.Name, rc)
			rc.Close()
			if err != nil {
				return nil, err
			}
		}
	}
	if len(srcs) == 0 {
		return nil, fmt.Errorf("corpus: %q holds no archive/*.warc[.gz]", name)
	}
	sort.Slice(srcs, func(i, j int) bool { return srcs[i].name < srcs[j].name })
	return loadWARCSources(name, srcs, WARCOptions{Pages: pages})
}
