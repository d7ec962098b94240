package corpus

import (
	"bytes"
	"image"
	_ "image/gif"
	_ "image/jpeg"
	_ "image/png"
	"regexp"
	"strings"
	"testing"
)

// TestDefaultMatchesPaper checks the seed paper's §4.1 figures: Yahoo 16
// embedded objects on 3 domains, 74 KB; CNN 58 on 6, 197 KB; Britannica 32
// on 15, 178 KB (KB = 1024 bytes, page included).
func TestDefaultMatchesPaper(t *testing.T) {
	c, err := Open("default")
	if err != nil {
		t.Fatal(err)
	}
	want := []Summary{
		{Name: "yahoo", URL: "http://www.yahoo.com/index.html", Objects: 17, Hosts: 3, Bytes: 75776},
		{Name: "cnn", URL: "http://www.cnn.com/index.html", Objects: 59, Hosts: 6, Bytes: 201728},
		{Name: "britannica", URL: "http://www.britannica.com/index.html", Objects: 33, Hosts: 15, Bytes: 182272},
	}
	if len(c.Pages) != len(want) {
		t.Fatalf("pages = %d, want %d", len(c.Pages), len(want))
	}
	for i, w := range want {
		if got := c.Pages[i].Summary(); got != w {
			t.Errorf("page %d = %+v, want %+v", i, got, w)
		}
	}
	if got := len(c.Hosts()); got != 24 {
		t.Errorf("hosts = %d, want 24 (no host shared between sites)", got)
	}
}

var absURL = regexp.MustCompile(`http://[a-z0-9.-]+/[^"')\s]+`)

func TestDefaultPagesAreLoadable(t *testing.T) {
	c := Default()
	for _, p := range c.Pages {
		t.Run(p.Name, func(t *testing.T) {
			kinds := map[string]int{}
			referenced := map[string]bool{}
			for _, o := range p.Objects {
				kinds[o.ContentType]++
				switch o.ContentType {
				case "text/html", "text/css":
					for _, u := range absURL.FindAll(o.Body, -1) {
						referenced[string(u)] = true
					}
				case "image/gif", "image/jpeg", "image/png":
					cfg, format, err := image.DecodeConfig(bytes.NewReader(o.Body))
					if err != nil || cfg.Width != 24 || "image/"+format != o.ContentType {
						t.Errorf("%s%s: %v %v %s", o.Host, o.Path, err, cfg, format)
					}
					if _, _, err := image.Decode(bytes.NewReader(o.Body)); err != nil {
						t.Errorf("%s%s does not decode: %v", o.Host, o.Path, err)
					}
				}
			}
			if kinds["text/html"] != 1 || kinds["text/css"] < 1 || kinds["application/javascript"] < 2 || kinds["image/gif"] < 3 || kinds["image/jpeg"] < 3 || kinds["image/png"] < 3 {
				t.Errorf("mix = %v", kinds)
			}
			// Every embedded object is referenced by an absolute URL from the
			// page or a style sheet, and every reference resolves.
			for _, o := range p.Objects[1:] {
				if !referenced["http://"+o.Host+o.Path] {
					t.Errorf("%s%s is not referenced", o.Host, o.Path)
				}
			}
			for u := range referenced {
				h, path, _ := strings.Cut(strings.TrimPrefix(u, "http://"), "/")
				if _, ok := c.Lookup(h, "/"+path); !ok {
					t.Errorf("reference %s does not resolve", u)
				}
			}
			// A third of the images come from style sheets.
			var css []byte
			for _, o := range p.Objects {
				if o.ContentType == "text/css" {
					css = append(css, o.Body...)
				}
			}
			if n := bytes.Count(css, []byte("url(http://")); n < 2 {
				t.Errorf("style sheets reference %d images, want some", n)
			}
		})
	}
}

func TestDefaultDeterministic(t *testing.T) {
	for i, s := range PaperSites {
		a, b := generateSite(s, uint64(i+1)), generateSite(s, uint64(i+1))
		for j := range a.Objects {
			if !bytes.Equal(a.Objects[j].Body, b.Objects[j].Body) || a.Objects[j].Path != b.Objects[j].Path {
				t.Fatalf("%s object %d differs between two generations", s.Name, j)
			}
		}
	}
}
