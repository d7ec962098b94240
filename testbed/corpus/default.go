package corpus

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
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

// Default returns the embedded default corpus: one page per PaperSites
// entry, generated deterministically (same bytes on every call and every
// machine). Each page is HTML with absolute http:// URLs to its embedded
// objects on all of the site's hosts: style sheets, scripts and images,
// about a third of the images referenced from the style sheets through
// url(). Images are valid GIF, JPEG and PNG files padded with comment
// chunks so that the sizes add up exactly to the paper's totals.
func Default() *Corpus {
	defaultOnce.Do(func() {
		var pages []*Page
		var stats ImportStats
		for i, s := range PaperSites {
			p := generateSite(s, uint64(i+1))
			stats.Files += len(p.Objects)
			pages = append(pages, p)
		}
		defaultCorpus = New("default", pages, stats)
	})
	return defaultCorpus
}

type genObj struct {
	kind  string // "html", "css", "js", "gif", "jpg", "png"
	host  string
	path  string
	refs  []string // absolute URLs this object references (html, css)
	base  []byte   // minimal body before padding (images)
	size  int
	final []byte
}

func (g *genObj) url() string { return "http://" + g.host + g.path }

// generateSite lays out one page: kinds, hosts and paths, then sizes, then
// bodies.
func generateSite(s PaperSite, seed uint64) *Page {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	nCSS := max(1, s.Embedded/12)
	nJS := max(2, s.Embedded/8)
	nImg := s.Embedded - nCSS - nJS
	nCSSImg := nImg / 3
	top := &genObj{kind: "html", host: s.Hosts[0], path: "/index.html"}
	var emb []*genObj
	imgKinds := []string{"gif", "jpg", "png"}
	for i := 0; i < s.Embedded; i++ {
		g := &genObj{host: s.Hosts[i%len(s.Hosts)]}
		switch {
		case i < nCSS:
			g.kind = "css"
			g.path = fmt.Sprintf("/%s/css/%s-%d.css", s.Name, s.Name, i+1)
		case i < nCSS+nJS:
			g.kind = "js"
			g.path = fmt.Sprintf("/%s/js/%s-%d.js", s.Name, s.Name, i-nCSS+1)
		default:
			k := i - nCSS - nJS
			g.kind = imgKinds[k%3]
			g.path = fmt.Sprintf("/%s/img/%02d/i%03d.%s", s.Name, k%7, k+1, g.kind)
			g.base = baseImage(g.kind, k, rng)
		}
		emb = append(emb, g)
	}
	// References: images 0..nCSSImg-1 from the style sheets, the rest and
	// the sheets and scripts from the page.
	imgs := emb[nCSS+nJS:]
	for k, im := range imgs {
		if k < nCSSImg {
			css := emb[k%nCSS]
			css.refs = append(css.refs, im.url())
			continue
		}
		top.refs = append(top.refs, im.url())
	}
	var all []*genObj
	all = append(all, top)
	all = append(all, emb...)
	// Sizes: every object gets its minimum, the rest of the budget is shared
	// by weight (HTML 6, style sheet 3, script 5, image 1..3), the rounding
	// remainder goes to the HTML.
	minSize := map[*genObj]int{}
	var sumMin int
	for _, g := range all {
		minSize[g] = len(g.render(emb, 0, nil))
		sumMin += minSize[g]
	}
	budget := int(s.Bytes) - sumMin
	if budget < 0 {
		panic(fmt.Sprintf("corpus: default site %q: minimal bodies need %d bytes, more than %d", s.Name, sumMin, s.Bytes))
	}
	weights := make([]float64, len(all))
	var wsum float64
	for i, g := range all {
		switch g.kind {
		case "html":
			weights[i] = 6 * float64(len(all)) / 8
		case "css":
			weights[i] = 3
		case "js":
			weights[i] = 5
		default:
			weights[i] = 1 + 2*rng.Float64()
		}
		wsum += weights[i]
	}
	given := 0
	for i, g := range all {
		g.size = minSize[g] + int(float64(budget)*weights[i]/wsum)
		given += g.size
	}
	top.size += int(s.Bytes) - given
	page := &Page{Name: s.Name, URL: top.url(), Host: top.host}
	for _, g := range all {
		g.final = g.render(emb, g.size, rng)
		if len(g.final) != g.size {
			panic(fmt.Sprintf("corpus: default site %q: %s is %d bytes, want %d", s.Name, g.path, len(g.final), g.size))
		}
		page.Objects = append(page.Objects, &Object{Host: g.host, Path: g.path, Body: g.final, ContentType: ContentType(g.path, g.final)})
	}
	return page
}

// render produces the body padded to size bytes; size 0 gives the minimal
// body (which reserves room for the padding's fixed overhead).
func (g *genObj) render(emb []*genObj, size int, rng *rand.Rand) []byte {
	switch g.kind {
	case "html":
		return renderHTML(g, emb, size, rng)
	case "css":
		var b bytes.Buffer
		fmt.Fprintf(&b, "/* %s */\nbody{margin:0;font:13px arial,sans-serif}\n", g.url())
		for _, r := range g.refs {
			fmt.Fprintf(&b, ".%s{background:url(%s) no-repeat 0 0;width:24px;height:24px}\n", bgClass(r), r)
		}
		return padText(b.Bytes(), "/*", "*/\n", size, rng)
	case "js":
		var b bytes.Buffer
		fmt.Fprintf(&b, "/* %s */\nvar pep_%d=(function(){var n=0;return function(){return ++n;};})();\n", g.url(), len(g.path))
		return padText(b.Bytes(), "/*", "*/\n", size, rng)
	}
	return padImage(g.kind, g.base, size, rng)
}

func renderHTML(g *genObj, emb []*genObj, size int, rng *rand.Rand) []byte {
	var b bytes.Buffer
	b.WriteString("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + g.host + "</title>\n")
	for _, e := range emb {
		if e.kind == "css" {
			fmt.Fprintf(&b, "<link rel=\"stylesheet\" href=\"%s\">\n", e.url())
		}
	}
	for _, e := range emb {
		if e.kind == "js" {
			fmt.Fprintf(&b, "<script src=\"%s\"></script>\n", e.url())
		}
	}
	b.WriteString("</head><body>\n<h1>" + g.host + "</h1>\n")
	for _, e := range emb {
		for _, r := range e.refs {
			fmt.Fprintf(&b, "<div class=\"%s\"></div>\n", bgClass(r))
		}
	}
	for _, r := range g.refs {
		fmt.Fprintf(&b, "<img src=\"%s\" width=\"24\" height=\"24\" alt=\"\">\n", r)
	}
	return padText(b.Bytes(), "<p>", "</p>\n</body></html>\n", size, rng)
}

// bgClass names the CSS class that shows a style-sheet image: "bg-i003"
// for ".../i003.gif". Chromium fetches a url() image only when an element
// matches its rule, so the page has one element per class.
func bgClass(u string) string {
	base := u[strings.LastIndexByte(u, '/')+1:]
	return "bg-" + strings.TrimSuffix(base, base[strings.LastIndexByte(base, '.'):])
}

// padText appends open + filler + close so that the result has size bytes
// (size 0: no filler).
func padText(body []byte, open, close string, size int, rng *rand.Rand) []byte {
	out := append(append([]byte(nil), body...), open...)
	if fill := size - len(body) - len(open) - len(close); fill > 0 {
		out = append(out, filler(fill, rng)...)
	}
	return append(out, close...)
}

// filler gives n bytes of lower-case words and spaces, a newline every 72.
func filler(n int, rng *rand.Rand) []byte {
	out := make([]byte, n)
	for i := range out {
		switch {
		case i%72 == 71:
			out[i] = '\n'
		case rng.IntN(6) == 0:
			out[i] = ' '
		default:
			out[i] = byte('a' + rng.IntN(26))
		}
	}
	return out
}

// baseImage encodes a small deterministic 24x24 image.
func baseImage(kind string, k int, rng *rand.Rand) []byte {
	img := image.NewPaletted(image.Rect(0, 0, 24, 24), color.Palette{
		color.RGBA{uint8(rng.IntN(256)), uint8(rng.IntN(256)), uint8(k * 37), 255},
		color.RGBA{255, 255, 255, 255}, color.RGBA{0, 0, 0, 255}, color.RGBA{200, 30, 30, 255}})
	for y := 0; y < 24; y++ {
		for x := 0; x < 24; x++ {
			img.SetColorIndex(x, y, uint8((x/4+y/4+k)%4))
		}
	}
	var b bytes.Buffer
	var err error
	switch kind {
	case "gif":
		err = gif.Encode(&b, img, nil)
	case "jpg":
		err = jpeg.Encode(&b, img, &jpeg.Options{Quality: 75})
	default:
		err = png.Encode(&b, img)
	}
	if err != nil {
		panic(fmt.Sprintf("corpus: encode %s: %v", kind, err))
	}
	return b.Bytes()
}

// imagePadMin is the smallest padding every image gets, so that each
// format's comment framing fits.
const imagePadMin = 64

// padImage inserts comment data into a valid image so that it has size
// bytes: a PNG tEXt chunk before IEND (PNG §11.3.4.3), a GIF comment
// extension before the trailer (GIF89a §24), JPEG COM segments after SOI
// (ITU T.81 §B.2.4.5). size 0 gives the minimal padded image.
func padImage(kind string, base []byte, size int, rng *rand.Rand) []byte {
	if size == 0 {
		size = len(base) + imagePadMin
	}
	extra := size - len(base)
	fill := func(n int) []byte {
		if rng == nil {
			return make([]byte, n)
		}
		return filler(n, rng)
	}
	var out []byte
	switch kind {
	case "png":
		data := append([]byte("Comment\x00"), fill(extra-12-8)...)
		chunk := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
		chunk = append(chunk, "tEXt"...)
		chunk = append(chunk, data...)
		chunk = binary.BigEndian.AppendUint32(chunk, crc32.ChecksumIEEE(chunk[4:]))
		iend := len(base) - 12
		out = append(append(append([]byte(nil), base[:iend]...), chunk...), base[iend:]...)
	case "gif":
		// 0x21 0xFE, k sub-blocks (length byte + 1..255 bytes), 0x00.
		body := extra - 3
		k := (body + 255) / 256
		data := fill(body - k)
		ext := []byte{0x21, 0xFE}
		for i := 0; i < k; i++ {
			n := len(data) / (k - i)
			ext = append(ext, byte(n))
			ext = append(ext, data[:n]...)
			data = data[n:]
		}
		ext = append(ext, 0x00)
		t := len(base) - 1 // the trailer 0x3B
		out = append(append(append([]byte(nil), base[:t]...), ext...), base[t:]...)
	default: // jpg
		// k COM segments of 4 + up to 65533 bytes each.
		k := (extra + 65536) / 65537
		var segs []byte
		left := extra
		for i := 0; i < k; i++ {
			n := left / (k - i)
			seg := []byte{0xFF, 0xFE, byte((n - 2) >> 8), byte(n - 2)}
			seg = append(seg, fill(n-4)...)
			segs = append(segs, seg...)
			left -= n
		}
		out = append(append(append([]byte(nil), base[:2]...), segs...), base[2:]...)
	}
	return out
}
