//go:build ignore

// Command gen builds the embedded default corpus of package corpus: the seed
// paper's Yahoo, CNN and Britannica pages (§4.1) made of real,
// redistributable assets. It fetches pinned Debian and npm packages
// (apt-get download, npm pack), runs every asset's recipe below (ImageMagick,
// libjpeg-turbo cjpeg, pngquant, optipng, gifsicle, rsvg-convert), renders
// the page and site style sheet templates in src/ with public-domain text
// (Ambrose Bierce, The Devil's Dictionary, 1911), adds whole dictionary
// entries to each page until the page and its objects weigh the paper's
// total, and writes site/<page>/<host>/<path>, NOTICE and a table of bytes
// by type. Run it through build.sh, which installs the tools; the committed
// output is what package corpus embeds, so nothing here runs at build or
// test time.
//
//	go run gen.go [-work DIR]
package main

import (
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	htmltemplate "html/template"
	"image"
	_ "image/gif"
	_ "image/jpeg"
	_ "image/png"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	texttemplate "text/template"

	"pep/testbed/corpus"
)

// pkg is one pinned source package.
type pkg struct {
	Kind      string // "deb" (apt-get download) or "npm" (npm pack)
	Name      string
	Version   string
	License   string
	Copyright string
}

// packages are every source this corpus takes files from, by name.
var packages = []pkg{
	{"deb", "dict-devil", "1.0-13.1", "public domain", "Ambrose Bierce, The Devil's Dictionary (1911), copyright expired"},
	{"deb", "tango-icon-theme", "0.8.90-11", "public domain", "Tango Desktop Project contributors, relicensed into the public domain (COPYING)"},
	{"deb", "python3-skimage", "0.19.3-8", "per image, see the object (scikit-image code: BSD-3-Clause)", "scikit-image data; licences in skimage/data/_fetchers.py"},
	{"deb", "libjs-headjs", "1.0.3+dfsg.1-5", "MIT (Expat)", "Tero Piirainen, Head JS"},
	{"deb", "libjs-mousetrap", "1.6.0+dfsg1-4", "Apache-2.0", "Craig Campbell, Mousetrap"},
	{"deb", "node-html5shiv", "3.7.3+dfsg-5", "MIT (Expat) or GPL-2+", "Alexander Farkas and contributors, html5shiv"},
	{"deb", "libjs-json", "0~20221030+~1.0.8-1", "public domain", "Douglas Crockford, JSON-js (json2.js, cycle.js)"},
	{"deb", "libjs-mustache", "3.0.1-1", "MIT (Expat)", "Chris Wanstrath, Jan Lehnardt and contributors, mustache.js"},
	{"deb", "libjs-spin.js", "1.2.8+dfsg2-1.1", "MIT (Expat)", "Felix Gnass, spin.js"},
	{"deb", "libjs-blazy", "1.8.2+dfsg-2", "MIT (Expat)", "Bjørn Klinggaard, bLazy"},
	{"deb", "libjs-reqwest", "2.0.5+dfsg-1", "MIT (Expat)", "Dustin Diaz, reqwest"},
	{"deb", "libjs-underscore", "1.13.4~dfsg+~1.11.4-3", "MIT (Expat)", "Jeremy Ashkenas, DocumentCloud and Investigative Reporters & Editors, Underscore.js"},
	{"deb", "libjs-sprintf-js", "1.1.2+ds1+~1.1.2-1", "BSD-3-Clause", "Alexandru Mărășteanu, sprintf.js"},
	{"deb", "libjs-favico.js", "0.3.10~dfsg1-6", "MIT (Expat) or GPL-2.0", "Miroslav Magda, favico.js"},
	{"deb", "libjs-cssrelpreload", "3.1.0+dfsg+~cs3.1.3-1", "MIT (Expat)", "Filament Group, loadCSS"},
	{"deb", "libjs-milligram", "1.4.1-2", "MIT (Expat)", "CJ Patoilo, Milligram"},
	{"npm", "purecss", "3.0.0", "BSD-3-Clause", "Yahoo! Inc., Pure"},
}

func pkgByName(name string) *pkg {
	for i := range packages {
		if packages[i].Name == name {
			return &packages[i]
		}
	}
	log.Fatalf("unknown package %q", name)
	return nil
}

// asset is one embedded object and how it is made.
type asset struct {
	ID     string // name in the templates
	Host   string
	Path   string
	Inputs []string // "package:/file", or "tmpl:src/x.css" (rendered first)
	// Cmd is a bash script: inputs are $1..$n, the output is $OUT; empty
	// means the inputs concatenated.
	Cmd    string
	Credit string // a note on what the object is, for NOTICE
}

func (a asset) url() string { return "http://" + a.Host + a.Path }

// siteDef is one page: its template (src/<Name>.html) and its embedded
// objects. Its hosts, object count and total come from corpus.PaperSites.
type siteDef struct {
	Name   string
	From   string // first Devil's Dictionary headword the page's text uses
	Assets []asset
	paper  corpus.PaperSite
}

// Host is the page's host: the page is http://Host/index.html.
func (s siteDef) Host() string { return s.paper.Hosts[0] }

// Bytes is the paper's total for the page and its objects.
func (s siteDef) Bytes() int { return int(s.paper.Bytes) }

// check ties the definition to its PaperSite: the same number of embedded
// objects, every host one of the site's, every host used.
func (s *siteDef) check() {
	for _, p := range corpus.PaperSites {
		if p.Name == s.Name {
			s.paper = p
		}
	}
	if s.paper.Name == "" {
		log.Fatalf("%s: not in corpus.PaperSites", s.Name)
	}
	if len(s.Assets) != s.paper.Embedded {
		log.Fatalf("%s: %d objects, the paper has %d", s.Name, len(s.Assets), s.paper.Embedded)
	}
	used := map[string]bool{s.Host(): true}
	for _, a := range s.Assets {
		used[a.Host] = true
	}
	for _, h := range s.paper.Hosts {
		if !used[h] {
			log.Fatalf("%s: no object on %s", s.Name, h)
		}
		delete(used, h)
	}
	if len(used) > 0 {
		log.Fatalf("%s: hosts not in corpus.PaperSites: %v", s.Name, used)
	}
}

// skimage data: file, licence, credit (skimage/data/_fetchers.py).
var skimageData = map[string][2]string{
	"astronaut.png":         {"public domain", "Astronaut Eileen Collins, NASA Great Images database"},
	"coffee.png":            {"CC0-1.0", "Coffee cup, photograph by Rachel Michetti"},
	"chelsea.png":           {"CC0-1.0", "Chelsea the cat, photograph by Stefan van der Walt"},
	"rocket.jpg":            {"public domain", "Falcon 9 rocket launch, SpaceX"},
	"hubble_deep_field.jpg": {"public domain", "Hubble eXtreme Deep Field, NASA"},
	"retina.jpg":            {"CC0-1.0", "Human retina, Häggström, Mikael (2014), Medical gallery of Mikael Häggström"},
	"camera.png":            {"CC0-1.0", "Cameraman, photograph by Lav Varshney"},
	"clock_motion.png":      {"public domain", "Motion-blurred clock, photograph by Stefan van der Walt"},
	"horse.png":             {"CC0-1.0", "Horse silhouette, Andreas Preuss (marauder)"},
	"brick.png":             {"CC0-1.0", "Bricks25 texture, CC0Textures"},
	"grass.png":             {"CC0-1.0", "Grass texture, CC0Textures"},
	"gravel.png":            {"CC0-1.0", "Gravel04 texture, CC0Textures"},
}

func sk(file string) string {
	if _, ok := skimageData[file]; !ok {
		log.Fatalf("no licence recorded for skimage %s", file)
	}
	return "python3-skimage:/usr/lib/python3/dist-packages/skimage/data/" + file
}

func tango(file string) string { return "tango-icon-theme:/usr/share/icons/Tango/" + file }

// recipe is the part of an asset that says how it is made.
type recipe struct {
	Inputs []string
	Cmd    string
}

func a(id, host, path string, r recipe) asset {
	return asset{ID: id, Host: host, Path: path, Inputs: r.Inputs, Cmd: r.Cmd}
}

// jpg resizes and crops a photograph to size (WxH, filling it) and encodes
// it with libjpeg-turbo at quality q, Huffman-optimized, progressive or
// baseline. crop, when set, is an ImageMagick geometry cut from the source
// first.
func jpg(src, size, crop string, q int, progressive bool) recipe {
	c := `convert "$1" `
	if crop != "" {
		c += "-crop " + crop + " +repage "
	}
	c += fmt.Sprintf(`-resize %s^ -gravity center -extent %s -strip pnm:- | cjpeg -quality %d -optimize `, size, size, q)
	if progressive {
		c += "-progressive "
	}
	return recipe{[]string{src}, c + `> "$OUT"`}
}

// pngOpt copies a PNG, optimized losslessly with its metadata stripped.
func pngOpt(src string) recipe {
	return recipe{[]string{src}, `convert "$1" -strip png:- > "$OUT" && optipng -quiet -o2 -strip all "$OUT"`}
}

// pngQuant turns a PNG into a palette PNG with alpha (tRNS), as TinyPNG and
// most build pipelines do.
func pngQuant(src string) recipe {
	return recipe{[]string{src}, `pngquant --speed 1 --strip --quality 70-95 - < "$1" > "$OUT"`}
}

// svgPNG renders a scalable icon at size pixels square, palette-quantized or
// optimized losslessly.
func svgPNG(src string, size int, quant bool) recipe {
	c := fmt.Sprintf(`rsvg-convert -w %d -h %d "$1" | `, size, size)
	if quant {
		c += `pngquant --speed 1 --strip --quality 70-95 - > "$OUT"`
	} else {
		c += `convert png:- -strip png:- > "$OUT" && optipng -quiet -o2 -strip all "$OUT"`
	}
	return recipe{[]string{src}, c}
}

// sprite appends icons left to right into one CSS sprite sheet.
func sprite(quant bool, srcs ...string) recipe {
	c := `convert "$@" -background none +append -strip png:- | `
	if quant {
		c += `pngquant --speed 1 --strip --quality 70-95 - > "$OUT"`
	} else {
		c += `cat > "$OUT" && optipng -quiet -o2 -strip all "$OUT"`
	}
	return recipe{srcs, c}
}

// gifIcon converts an icon to a GIF with one transparent colour, as the web
// of 2004 served its bullets and arrows.
func gifIcon(src string) recipe {
	return recipe{[]string{src}, `convert "$1" -channel A -threshold 50% +channel -strip gif:- | gifsicle -O3 > "$OUT"`}
}

// gifSilhouette reduces a black-and-white drawing to a two-colour GIF.
func gifSilhouette(src, width string) recipe {
	return recipe{[]string{src}, `convert "$1" -resize ` + width + ` -colors 4 -strip gif:- | gifsicle -O3 > "$OUT"`}
}

// spinner turns Tango's process-working frame strip (frames of tile pixels,
// the first one the idle frame) into a looping animated GIF on white.
func spinner(src string, tile int) recipe {
	return recipe{[]string{src}, fmt.Sprintf(`convert "$1" -crop %dx%d +repage -delete 0 -background white -alpha remove -set delay 6 -loop 0 -strip gif:- | gifsicle -O3 > "$OUT"`, tile, tile)}
}

// banner cuts an advertising banner from a photograph as an animated GIF:
// frames are successive crops (a slow pan), 64 colours.
func banner(src, size string, crops ...string) recipe {
	c := `convert "$1" `
	for _, cr := range crops {
		c += `\( -clone 0 -crop ` + cr + ` +repage -resize ` + size + `^ -gravity center -extent ` + size + ` +gravity \) `
	}
	c += `-delete 0 -set delay 150 -loop 0 +dither -colors 32 -strip gif:- | gifsicle -O3 > "$OUT"`
	return recipe{[]string{src}, c}
}

// beacon is the 1x1 transparent GIF that web analytics request.
func beacon() recipe {
	return recipe{nil, `convert -size 1x1 xc:none -strip gif:- | gifsicle -O3 > "$OUT"`}
}

// file copies a package file unchanged.
func file(src string) recipe { return recipe{[]string{src}, ""} }

// bundle concatenates files (e.g. a framework module and the site's rules).
func bundle(srcs ...string) recipe { return recipe{srcs, ""} }

const (
	pure   = "purecss:/package/build/"
	js     = "/usr/share/javascript/"
	nodejs = "/usr/share/nodejs/"
)

var sites = []siteDef{
	{Name: "yahoo", From: "ABASEMENT", Assets: []asset{
		a("css", "l.yimg.com", "/a/lib/fp/fp_2004_1.css", bundle(pure+"grids-min.css", "tmpl:src/yahoo.css")),
		a("head", "l.yimg.com", "/a/lib/head/head.min.js", file("libjs-headjs:"+js+"headjs/head.min.js")),
		a("mousetrap", "l.yimg.com", "/a/lib/mousetrap/mousetrap.min.js", file("libjs-mousetrap:"+js+"mousetrap/mousetrap.min.js")),
		a("hero", "us.i1.yimg.com", "/us.yimg.com/i/ww/news/2004/05/17/astronaut.jpg", jpg(sk("astronaut.png"), "380x254", "", 84, true)),
		a("t1", "us.i1.yimg.com", "/us.yimg.com/i/ww/news/2004/05/17/rocket_t.jpg", jpg(sk("rocket.jpg"), "120x90", "", 82, false)),
		a("t2", "us.i1.yimg.com", "/us.yimg.com/i/ww/news/2004/05/17/cat_t.jpg", jpg(sk("chelsea.png"), "120x90", "", 82, false)),
		a("t3", "us.i1.yimg.com", "/us.yimg.com/i/ww/news/2004/05/17/coffee_t.jpg", jpg(sk("coffee.png"), "120x90", "", 82, false)),
		a("t4", "us.i1.yimg.com", "/us.yimg.com/i/ww/news/2004/05/17/hubble_t.jpg", jpg(sk("hubble_deep_field.jpg"), "120x90", "", 82, false)),
		a("wx", "us.i1.yimg.com", "/us.yimg.com/i/us/we/sprite_32.png", sprite(false,
			tango("32x32/status/weather-clear.png"), tango("32x32/status/weather-few-clouds.png"),
			tango("32x32/status/weather-overcast.png"), tango("32x32/status/weather-showers.png"),
			tango("32x32/status/weather-snow.png"))),
		a("mail", "us.i1.yimg.com", "/us.yimg.com/i/ww/t/mail.png", pngQuant(tango("32x32/apps/internet-mail.png"))),
		a("news", "us.i1.yimg.com", "/us.yimg.com/i/ww/t/news.png", pngQuant(tango("32x32/apps/internet-news-reader.png"))),
		a("search", "us.i1.yimg.com", "/us.yimg.com/i/ww/t/search.png", pngOpt(tango("16x16/actions/system-search.png"))),
		a("logo", "l.yimg.com", "/a/i/ww/beta/y3.png", svgPNG(tango("scalable/apps/internet-web-browser.svg"), 64, false)),
		a("bullet", "l.yimg.com", "/a/i/ww/bullet.gif", gifIcon(tango("16x16/actions/go-next.png"))),
		a("spinner", "www.yahoo.com", "/i/spinner.gif", spinner(tango("16x16/animations/process-working.png"), 16)),
		a("beacon", "www.yahoo.com", "/p.gif", beacon()),
	}},
	{Name: "cnn", From: "GALLOWS", Assets: []asset{
		a("base", "i.cdn.turner.com", "/cnn/.element/css/2.0/base-min.css", file(pure+"base-min.css")),
		a("grids", "i.cdn.turner.com", "/cnn/.element/css/2.0/grids-min.css", file(pure+"grids-min.css")),
		a("menus", "i.cdn.turner.com", "/cnn/.element/css/2.0/menus-min.css", file(pure+"menus-min.css")),
		a("main", "i.cdn.turner.com", "/cnn/.element/css/2.0/main.css", bundle("tmpl:src/cnn.css")),
		a("html5shiv", "z.cdn.turner.com", "/cnn/.element/js/2.0/html5shiv.min.js", file("node-html5shiv:"+nodejs+"html5shiv/dist/html5shiv.min.js")),
		a("json2", "z.cdn.turner.com", "/cnn/.element/js/2.0/json2.min.js", file("libjs-json:"+js+"json/json2.min.js")),
		a("cycle", "z.cdn.turner.com", "/cnn/.element/js/2.0/cycle.min.js", file("libjs-json:"+js+"json/cycle.min.js")),
		a("mustache", "z.cdn.turner.com", "/cnn/.element/js/2.0/mustache.min.js", file("libjs-mustache:"+js+"mustache/mustache.min.js")),
		a("spin", "z.cdn.turner.com", "/cnn/.element/js/2.0/spin.min.js", file("libjs-spin.js:"+js+"spin.js/spin.min.js")),
		a("blazy", "z.cdn.turner.com", "/cnn/.element/js/2.0/blazy.min.js", file("libjs-blazy:"+nodejs+"blazy/blazy.min.js")),
		a("reqwest", "z.cdn.turner.com", "/cnn/.element/js/2.0/reqwest.min.js", file("libjs-reqwest:"+js+"reqwest/reqwest.min.js")),
		// Photographs: the lead, three section stories, ten thumbnails.
		a("lead", "i.cnn.net", "/cnn/2004/TECH/space/05/17/falcon.launch/top.rocket.jpg", jpg(sk("rocket.jpg"), "460x290", "", 85, true)),
		a("s1", "i2.cdn.turner.com", "/cnn/2004/TECH/space/05/17/crew/story.astronaut.jpg", jpg(sk("astronaut.png"), "260x146", "512x288+0+40", 80, false)),
		a("s2", "i2.cdn.turner.com", "/cnn/2004/HEALTH/05/17/eye.scan/story.retina.jpg", jpg(sk("retina.jpg"), "260x146", "1200x675+100+368", 80, false)),
		a("s3", "i2.cdn.turner.com", "/cnn/2004/LIVING/05/17/coffee/story.coffee.jpg", jpg(sk("coffee.png"), "260x146", "", 80, true)),
		a("th1", "i.cnn.net", "/cnn/2004/US/05/17/t1.cat.jpg", jpg(sk("chelsea.png"), "140x79", "", 80, false)),
		a("th2", "i.cnn.net", "/cnn/2004/SHOWBIZ/05/17/t1.cameraman.jpg", jpg(sk("camera.png"), "140x79", "", 80, false)),
		a("th3", "i.cnn.net", "/cnn/2004/TECH/05/17/t1.clock.jpg", jpg(sk("clock_motion.png"), "140x79", "", 80, false)),
		a("th4", "i.cnn.net", "/cnn/2004/TECH/space/05/17/t1.galaxies.jpg", jpg(sk("hubble_deep_field.jpg"), "140x79", "400x225+0+0", 80, false)),
		a("th5", "i.cnn.net", "/cnn/2004/TECH/space/05/17/t1.deep.field.jpg", jpg(sk("hubble_deep_field.jpg"), "140x79", "400x225+600+600", 80, false)),
		a("th6", "i.cnn.net", "/cnn/2004/TECH/space/05/17/t1.helmet.jpg", jpg(sk("astronaut.png"), "140x79", "320x180+100+300", 80, false)),
		a("th7", "i.cnn.net", "/cnn/2004/TECH/space/05/17/t1.shuttle.jpg", jpg(sk("astronaut.png"), "140x79", "160x90+340+60", 80, false)),
		a("th8", "i.cnn.net", "/cnn/2004/TECH/space/05/17/t1.liftoff.jpg", jpg(sk("rocket.jpg"), "140x79", "320x180+200+180", 80, false)),
		a("th9", "i.cnn.net", "/cnn/2004/LIVING/05/17/t1.espresso.jpg", jpg(sk("coffee.png"), "140x79", "240x135+180+120", 80, false)),
		a("th10", "i.cnn.net", "/cnn/2004/HEALTH/05/17/t1.eye.jpg", jpg(sk("retina.jpg"), "140x79", "480x270+700+600", 80, false)),
		a("ad", "ads.cnn.com", "/html.ng/site=cnn&cnn_pagetype=main&cnn_position=300x250_rgt/deepfield_300x250.jpg", jpg(sk("hubble_deep_field.jpg"), "300x250", "600x500+200+200", 80, false)),
		a("tx1", "i.cdn.turner.com", "/cnn/.element/img/2.0/bg/header_gravel.jpg", jpg(sk("gravel.png"), "160x160", "", 75, false)),
		a("tx2", "i.cdn.turner.com", "/cnn/.element/img/2.0/bg/section_grass.jpg", jpg(sk("grass.png"), "300x40", "512x68+0+200", 75, false)),
		// Graphics: logo, navigation sprite, section icons (from the style sheet), weather, tools.
		a("logo", "i.cdn.turner.com", "/cnn/.element/img/2.0/global/logo.png", svgPNG(tango("scalable/apps/internet-news-reader.svg"), 128, false)),
		a("nav", "i.cdn.turner.com", "/cnn/.element/img/2.0/global/nav_sprite.png", sprite(false,
			tango("16x16/actions/go-home.png"), tango("16x16/apps/internet-news-reader.png"),
			tango("16x16/apps/internet-mail.png"), tango("16x16/apps/office-calendar.png"),
			tango("16x16/status/weather-few-clouds.png"), tango("16x16/devices/camera-photo.png"),
			tango("16x16/apps/help-browser.png"), tango("16x16/actions/system-search.png"))),
		a("sec1", "i.cdn.turner.com", "/cnn/.element/img/2.0/sect/world.png", pngOpt(tango("22x22/categories/applications-internet.png"))),
		a("sec2", "i.cdn.turner.com", "/cnn/.element/img/2.0/sect/us.png", pngOpt(tango("22x22/apps/system-users.png"))),
		a("sec3", "i.cdn.turner.com", "/cnn/.element/img/2.0/sect/business.png", pngQuant(tango("22x22/apps/utilities-system-monitor.png"))),
		a("sec4", "i.cdn.turner.com", "/cnn/.element/img/2.0/sect/sports.png", pngQuant(tango("22x22/categories/applications-games.png"))),
		a("sec5", "i.cdn.turner.com", "/cnn/.element/img/2.0/sect/showbiz.png", pngQuant(tango("22x22/devices/video-display.png"))),
		a("sec6", "i.cdn.turner.com", "/cnn/.element/img/2.0/sect/photos.png", pngOpt(tango("22x22/devices/camera-photo.png"))),
		a("sec7", "i.cdn.turner.com", "/cnn/.element/img/2.0/sect/weather.png", pngOpt(tango("22x22/status/weather-storm.png"))),
		a("sec8", "i.cdn.turner.com", "/cnn/.element/img/2.0/sect/travel.png", pngQuant(tango("22x22/apps/preferences-desktop-locale.png"))),
		a("wx1", "i2.cdn.turner.com", "/cnn/.element/img/2.0/weather/64/clear.png", svgPNG(tango("scalable/status/weather-clear.svg"), 64, false)),
		a("wx2", "i2.cdn.turner.com", "/cnn/.element/img/2.0/weather/64/showers.png", svgPNG(tango("scalable/status/weather-showers.svg"), 64, false)),
		a("wx3", "i2.cdn.turner.com", "/cnn/.element/img/2.0/weather/64/storm.png", svgPNG(tango("scalable/status/weather-storm.svg"), 64, false)),
		a("wx4", "i2.cdn.turner.com", "/cnn/.element/img/2.0/weather/64/snow.png", svgPNG(tango("scalable/status/weather-snow.svg"), 64, false)),
		a("video", "i2.cdn.turner.com", "/cnn/.element/img/2.0/global/video/camera.png", svgPNG(tango("scalable/devices/camera-video.svg"), 48, false)),
		a("email", "i2.cdn.turner.com", "/cnn/.element/img/2.0/global/tools/email.png", pngOpt(tango("16x16/actions/mail-forward.png"))),
		a("print", "i2.cdn.turner.com", "/cnn/.element/img/2.0/global/tools/print.png", pngOpt(tango("16x16/actions/document-print.png"))),
		a("save", "i2.cdn.turner.com", "/cnn/.element/img/2.0/global/tools/save.png", pngOpt(tango("16x16/actions/bookmark-new.png"))),
		// GIF bullets, arrows and badges, an animated spinner, a silhouette, beacons.
		a("next", "i.cdn.turner.com", "/cnn/.element/img/2.0/global/arrow_next.gif", gifIcon(tango("16x16/actions/go-next.png"))),
		a("down", "i.cdn.turner.com", "/cnn/.element/img/2.0/global/arrow_down.gif", gifIcon(tango("16x16/actions/go-down.png"))),
		a("up", "i.cdn.turner.com", "/cnn/.element/img/2.0/global/arrow_up.gif", gifIcon(tango("16x16/actions/go-up.png"))),
		a("play", "i2.cdn.turner.com", "/cnn/.element/img/2.0/global/icons/video_play.gif", gifIcon(tango("16x16/actions/media-playback-start.png"))),
		a("live", "i2.cdn.turner.com", "/cnn/.element/img/2.0/global/icons/live.gif", gifIcon(tango("16x16/actions/media-record.png"))),
		a("audio", "i2.cdn.turner.com", "/cnn/.element/img/2.0/global/icons/audio.gif", gifIcon(tango("16x16/status/audio-volume-high.png"))),
		a("breaking", "i2.cdn.turner.com", "/cnn/.element/img/2.0/global/icons/breaking.gif", gifIcon(tango("22x22/status/dialog-warning.png"))),
		a("tvcam", "i2.cdn.turner.com", "/cnn/.element/img/2.0/global/icons/tv.gif", gifIcon(tango("22x22/devices/camera-video.png"))),
		a("horse", "i2.cdn.turner.com", "/cnn/2004/SPORT/05/17/preakness/horse.silhouette.gif", gifSilhouette(sk("horse.png"), "110x")),
		a("spinner", "www.cnn.com", "/.element/img/2.0/loading.gif", spinner(tango("22x22/animations/process-working.png"), 22)),
		a("beacon1", "www.cnn.com", "/.element/img/2.0/s.gif", beacon()),
		a("beacon2", "ads.cnn.com", "/event.ng/Type=count&ClientType=2&AdID=40453/b.gif", beacon()),
	}},
	{Name: "britannica", From: "RABBLE", Assets: []asset{
		a("milligram", "css.eb.com", "/eb/css/milligram.min.css", file("libjs-milligram:"+js+"milligram/milligram.min.css")),
		a("site", "css.eb.com", "/eb/css/britannica.css", bundle("tmpl:src/britannica.css")),
		a("underscore", "js.eb.com", "/eb/js/underscore-min.js", file("libjs-underscore:"+js+"underscore/underscore.min.js")),
		a("sprintf", "js.eb.com", "/eb/js/sprintf.min.js", file("libjs-sprintf-js:"+js+"sprintf-js/sprintf.min.js")),
		a("favico", "static.eb.com", "/eb/js/favico.min.js", file("libjs-favico.js:"+js+"favico.js/favico.min.js")),
		a("loadcss", "static.eb.com", "/eb/js/loadCSS.min.js", file("libjs-cssrelpreload:"+js+"cssrelpreload/loadCSS.min.js")),
		a("bullet", "static.eb.com", "/eb/i/bullet.gif", gifIcon(tango("16x16/actions/go-next.png"))),
		a("horse", "static.eb.com", "/eb/i/art/horse.gif", gifSilhouette(sk("horse.png"), "160x")),
		a("logo", "www.britannica.com", "/eb/i/logo.png", svgPNG(tango("scalable/mimetypes/x-office-address-book.svg"), 128, false)),
		a("topic1", "www.britannica.com", "/eb/i/topics/geography.png", svgPNG(tango("scalable/apps/internet-web-browser.svg"), 64, false)),
		a("topic2", "www.britannica.com", "/eb/i/topics/world.png", svgPNG(tango("scalable/apps/preferences-desktop-locale.svg"), 64, false)),
		a("lead", "media-1.britannica.com", "/eb-media/17/95317-004-DEEPFIELD.jpg", jpg(sk("hubble_deep_field.jpg"), "460x345", "", 80, true)),
		a("g1", "media-1.britannica.com", "/eb-media/21/94121-004-ASTRONAUT.jpg", jpg(sk("astronaut.png"), "180x120", "", 80, false)),
		a("g2", "media-1.britannica.com", "/eb-media/33/96233-004-ROCKET.jpg", jpg(sk("rocket.jpg"), "180x120", "", 80, false)),
		a("g3", "media-1.britannica.com", "/eb-media/48/91548-004-CLOCK.jpg", jpg(sk("clock_motion.png"), "180x120", "", 80, false)),
		a("p1", "media-2.britannica.com", "/eb-media/05/90105-004-CAT.jpg", jpg(sk("chelsea.png"), "240x180", "", 80, true)),
		a("p2", "media-2.britannica.com", "/eb-media/62/93462-004-COFFEE.jpg", jpg(sk("coffee.png"), "240x180", "", 80, false)),
		a("p3", "media-2.britannica.com", "/eb-media/77/92577-004-RETINA.jpg", jpg(sk("retina.jpg"), "240x180", "", 80, false)),
		a("banner", "ads.eb.com", "/ads/468x60/space_exhibit.jpg", jpg(sk("hubble_deep_field.jpg"), "468x60", "1000x128+0+300", 75, false)),
		a("tx", "images.britannica.com", "/eb/i/bg/brick.jpg", jpg(sk("brick.png"), "200x200", "", 75, false)),
		a("sprite", "images.britannica.com", "/eb/i/sprite_tools.png", sprite(false,
			tango("16x16/actions/document-print.png"), tango("16x16/actions/mail-forward.png"),
			tango("16x16/actions/bookmark-new.png"), tango("16x16/actions/edit-find.png"),
			tango("16x16/actions/go-previous.png"), tango("16x16/actions/go-next.png"))),
		a("i1", "images.britannica.com", "/eb/i/icons/history.png", svgPNG(tango("scalable/apps/office-calendar.svg"), 40, false)),
		a("i2", "images.britannica.com", "/eb/i/icons/science.png", svgPNG(tango("scalable/apps/utilities-system-monitor.svg"), 40, false)),
		a("i3", "images.britannica.com", "/eb/i/icons/arts.png", svgPNG(tango("scalable/apps/preferences-desktop-theme.svg"), 40, false)),
		a("i4", "images.britannica.com", "/eb/i/icons/technology.png", svgPNG(tango("scalable/devices/computer.svg"), 40, false)),
		a("wotd", "www.merriam-webster.com", "/images/wotd/wotd_64.png", svgPNG(tango("scalable/apps/accessories-text-editor.svg"), 64, false)),
		a("share", "s7.addthis.com", "/static/btn/sm-share-en.png", pngOpt(tango("32x32/actions/mail-forward.png"))),
		a("adgif", "ad.atdmt.com", "/b/EBRITEBRI0010/234x60_launch.gif", banner(sk("rocket.jpg"), "234x60",
			"470x120+0+60", "470x120+170+260")),
		a("b1", "view.atdmt.com", "/action/eb_home/v.gif", beacon()),
		a("b2", "stats.eb.com", "/s/p.gif", beacon()),
		a("b3", "stats.hitbox.com", "/HG/hb.gif", beacon()),
		a("b4", "pixel.quantserve.com", "/pixel/p-eb.gif", beacon()),
	}},
}

// ---------------------------------------------------------------------------

var work = flag.String("work", "/tmp/pep-default-corpus", "scratch directory for packages and intermediate files")

func run(dir string, name string, args ...string) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	if out, err := cmd.Output(); err != nil {
		log.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// fetch downloads and unpacks every package into work/<name>/.
func fetch() {
	for _, p := range packages {
		root := filepath.Join(*work, p.Name)
		if _, err := os.Stat(filepath.Join(root, ".done")); err == nil {
			continue
		}
		dl := filepath.Join(*work, "dl")
		os.MkdirAll(dl, 0o755)
		os.Chmod(dl, 0o777) // apt-get download drops privileges to _apt
		os.MkdirAll(root, 0o755)
		switch p.Kind {
		case "deb":
			run(dl, "apt-get", "download", p.Name+"="+p.Version)
			debs, _ := filepath.Glob(filepath.Join(dl, p.Name+"_*.deb"))
			if len(debs) != 1 {
				log.Fatalf("%s: want one .deb, have %v", p.Name, debs)
			}
			run(dl, "dpkg-deb", "-x", debs[0], root)
		case "npm":
			run(dl, "npm", "pack", "--silent", p.Name+"@"+p.Version)
			run(dl, "tar", "-xzf", p.Name+"-"+p.Version+".tgz", "-C", root)
		}
		os.WriteFile(filepath.Join(root, ".done"), nil, 0o644)
	}
}

// source maps "package:/file" to its path under work/.
func source(ref string) string {
	name, path, ok := strings.Cut(ref, ":")
	if !ok {
		log.Fatalf("bad source %q", ref)
	}
	pkgByName(name)
	return filepath.Join(*work, name, path)
}

// entry is one Devil's Dictionary article.
type entry struct {
	Word  string // "Absurdity"
	Slug  string // "absurdity"
	POS   string // "n."
	Paras []para
	Len   int // characters of text
}

// para is a paragraph of prose (one line) or of verse (its lines), as HTML:
// text escaped, the source's _underscored_ words in <em>.
type para struct {
	Verse bool
	Lines []htmltemplate.HTML
}

var underscored = regexp.MustCompile(`_([^_]+)_`)

func toHTML(s string) htmltemplate.HTML {
	return htmltemplate.HTML(underscored.ReplaceAllString(htmltemplate.HTMLEscapeString(s), "<em>$1</em>"))
}

// dictionary reads dict-devil's dictd database: the index gives each
// headword's offset and length (base64 digits) in the gzip-compressed data.
func dictionary() []entry {
	root := filepath.Join(*work, "dict-devil/usr/share/dictd")
	f, err := os.Open(filepath.Join(root, "devil.dict.dz"))
	if err != nil {
		log.Fatal(err)
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		log.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		log.Fatal(err)
	}
	idx, err := os.ReadFile(filepath.Join(root, "devil.index"))
	if err != nil {
		log.Fatal(err)
	}
	const digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	num := func(s string) int {
		n := 0
		for _, c := range s {
			n = n*64 + strings.IndexRune(digits, c)
		}
		return n
	}
	seen := map[int]bool{}
	var out []entry
	head := regexp.MustCompile(`^([A-Z][A-Z0-9'. -]*[A-Z.]), ([a-z.]+(?: [a-z.]+)*)\s+`)
	ref := regexp.MustCompile(`\{([^}]*)\}`)
	for _, line := range strings.Split(string(idx), "\n") {
		fs := strings.Split(line, "\t")
		if len(fs) != 3 || strings.HasPrefix(fs[0], "00database") {
			continue
		}
		off, n := num(fs[1]), num(fs[2])
		if seen[off] {
			continue
		}
		seen[off] = true
		body := strings.TrimRight(string(data[off:off+n]), "\n ")
		body = ref.ReplaceAllString(body, "$1")
		m := head.FindStringSubmatch(body)
		if m == nil {
			continue
		}
		word := m[1]
		e := entry{Word: titleCase(word), Slug: slug(word), POS: m[2]}
		body = body[len(m[0]):]
		for _, block := range strings.Split(body, "\n\n") {
			lines := strings.Split(block, "\n")
			verse := strings.HasPrefix(lines[0], "    ") || (len(e.Paras) > 0 && strings.HasPrefix(lines[0], "  "))
			p := para{Verse: verse}
			if verse {
				for _, l := range lines {
					l = strings.TrimSpace(l)
					e.Len += len(l)
					p.Lines = append(p.Lines, toHTML(l))
				}
			} else {
				var words []string
				for _, l := range lines {
					words = append(words, strings.Fields(l)...)
				}
				l := strings.Join(words, " ")
				e.Len += len(l)
				p.Lines = []htmltemplate.HTML{toHTML(l)}
			}
			e.Paras = append(e.Paras, p)
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slug < out[j].Slug })
	return out
}

func titleCase(s string) string {
	ws := strings.Fields(strings.ToLower(s))
	for i, w := range ws {
		ws[i] = strings.ToUpper(w[:1]) + w[1:]
	}
	return strings.Join(ws, " ")
}

var nonAlnum = regexp.MustCompile(`[^a-z0-9]+`)

func slug(s string) string {
	return strings.Trim(nonAlnum.ReplaceAllString(strings.ToLower(s), "-"), "-")
}

// textCursor hands out a page's entries in alphabetical order from a start,
// each once.
type textCursor struct {
	all  []entry
	next int
}

func newCursor(all []entry, from string) *textCursor {
	i := sort.Search(len(all), func(i int) bool { return all[i].Slug >= slug(from) })
	return &textCursor{all: all, next: i}
}

// take returns the next entry whose text is between min and max characters
// (verse allowed or not); entries that do not fit are skipped for good.
func (c *textCursor) take(min, max int, verse bool) entry {
	for ; c.next < len(c.all); c.next++ {
		e := c.all[c.next]
		if e.Len >= min && e.Len <= max && (verse || !e.hasVerse()) {
			c.next++
			return e
		}
	}
	log.Fatal("dictionary exhausted")
	return entry{}
}

func (e entry) hasVerse() bool {
	for _, p := range e.Paras {
		if p.Verse {
			return true
		}
	}
	return false
}

// Lead is the entry's first prose paragraph.
func (e entry) Lead() htmltemplate.HTML {
	for _, p := range e.Paras {
		if !p.Verse {
			return p.Lines[0]
		}
	}
	return ""
}

// built is an asset once made.
type built struct {
	asset
	Body   []byte
	Type   string
	W, H   int
	Source []string
}

func kind(path string) string {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".html":
		return "html"
	case ".css":
		return "css"
	case ".js":
		return "js"
	case ".jpg", ".jpeg":
		return "jpeg"
	case ".png":
		return "png"
	case ".gif":
		return "gif"
	}
	log.Fatalf("unknown type of %s", path)
	return ""
}

func main() {
	log.SetFlags(0)
	flag.Parse()
	here, _ := os.Getwd()
	if _, err := os.Stat(filepath.Join(here, "gen.go")); err != nil {
		log.Fatal("run gen from testbed/corpus/default")
	}
	os.MkdirAll(*work, 0o755)
	fetch()
	dict := dictionary()
	log.Printf("dictionary: %d entries", len(dict))

	os.RemoveAll(filepath.Join(here, "site"))
	var notice bytes.Buffer
	writeNoticeHead(&notice)
	var table bytes.Buffer
	for _, s := range sites {
		s.check()
		objs := buildSite(here, s, dict)
		writeNoticeSite(&notice, s, objs)
		report(&table, s, objs)
	}
	writeNoticePackages(&notice)
	copyLicences(here)
	if err := os.WriteFile(filepath.Join(here, "NOTICE"), notice.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
	os.Stdout.Write(table.Bytes())
}

func buildSite(here string, s siteDef, dict []entry) []*built {
	byID := map[string]*built{}
	var objs []*built
	tmp := filepath.Join(*work, "out", s.Name)
	os.RemoveAll(tmp)
	os.MkdirAll(tmp, 0o755)
	urls := func(id string) string {
		for _, as := range s.Assets {
			if as.ID == id {
				return as.url()
			}
		}
		log.Fatalf("%s: no asset %q", s.Name, id)
		return ""
	}
	for i, as := range s.Assets {
		var args []string
		var srcs []string
		for _, in := range as.Inputs {
			if t, ok := strings.CutPrefix(in, "tmpl:"); ok {
				out := filepath.Join(tmp, fmt.Sprintf("tmpl-%d-%s", i, filepath.Base(t)))
				renderCSS(filepath.Join(here, t), out, urls)
				args = append(args, out)
				srcs = append(srcs, in)
				continue
			}
			args = append(args, source(in))
			srcs = append(srcs, in)
		}
		out := filepath.Join(tmp, fmt.Sprintf("%02d-%s", i, filepath.Base(as.Path)))
		cmd := as.Cmd
		if cmd == "" {
			cmd = `cat "$@" > "$OUT"`
		}
		c := exec.Command("bash", append([]string{"-o", "pipefail", "-c", cmd, "bash"}, args...)...)
		// /usr/bin first: Debian's ImageMagick and friends, whatever else PATH has.
		c.Env = append(os.Environ(), "OUT="+out, "PATH=/usr/bin:/bin:"+os.Getenv("PATH"))
		c.Stderr = os.Stderr
		if err := c.Run(); err != nil {
			log.Fatalf("%s %s: %s: %v", s.Name, as.ID, cmd, err)
		}
		body, err := os.ReadFile(out)
		if err != nil || len(body) == 0 {
			log.Fatalf("%s %s: no output: %v", s.Name, as.ID, err)
		}
		b := &built{asset: as, Body: body, Type: kind(as.Path), Source: srcs}
		if b.Type == "jpeg" || b.Type == "png" || b.Type == "gif" {
			cfg, _, err := image.DecodeConfig(bytes.NewReader(body))
			if err != nil {
				log.Fatalf("%s %s: %v", s.Name, as.ID, err)
			}
			b.W, b.H = cfg.Width, cfg.Height
		}
		byID[as.ID] = b
		objs = append(objs, b)
	}
	others := 0
	for _, o := range objs {
		others += len(o.Body)
	}
	target := s.Bytes() - others
	page := fitHTML(here, s, dict, byID, target)
	top := &built{asset: asset{ID: "page", Host: s.Host(), Path: "/index.html", Credit: "page layout written for this corpus; text from The Devil's Dictionary"},
		Body: page, Type: "html", Source: []string{"tmpl:src/" + s.Name + ".html", "dict-devil:/usr/share/dictd/devil.dict.dz"}}
	objs = append([]*built{top}, objs...)
	for _, o := range objs {
		p := filepath.Join(here, "site", s.Name, o.Host, filepath.FromSlash(o.Path))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, o.Body, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	return objs
}

func renderCSS(tmplPath, out string, url func(string) string) {
	t := texttemplate.Must(texttemplate.New(filepath.Base(tmplPath)).Funcs(texttemplate.FuncMap{"url": url}).ParseFiles(tmplPath))
	var b bytes.Buffer
	if err := t.Execute(&b, nil); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}

// fitHTML renders the page with the number of extra dictionary entries
// (the template's fill) that brings the page closest to target bytes.
func fitHTML(here string, s siteDef, dict []entry, byID map[string]*built, target int) []byte {
	render := func(n int) []byte {
		cur := newCursor(dict, s.From)
		funcs := htmltemplate.FuncMap{
			"url": func(id string) string {
				b, ok := byID[id]
				if !ok {
					log.Fatalf("%s: no asset %q", s.Name, id)
				}
				return b.url()
			},
			"img": func(id, alt string) htmltemplate.HTML {
				b, ok := byID[id]
				if !ok {
					log.Fatalf("%s: no asset %q", s.Name, id)
				}
				return htmltemplate.HTML(fmt.Sprintf(`<img src="%s" width="%d" height="%d" alt="%s">`, b.url(), b.W, b.H, htmltemplate.HTMLEscapeString(alt)))
			},
			// short, medium and long take the next entry of that length
			// (characters) without verse; fill takes the fitted number of
			// entries between min and max characters, verse allowed.
			"short":  func() entry { return cur.take(20, 160, false) },
			"medium": func() entry { return cur.take(120, 450, false) },
			"long":   func() entry { return cur.take(450, 3000, true) },
			"fill": func(min, max int) []entry {
				var out []entry
				for i := 0; i < n; i++ {
					out = append(out, cur.take(min, max, true))
				}
				return out
			},
		}
		p := filepath.Join(here, "src", s.Name+".html")
		t := htmltemplate.Must(htmltemplate.New(s.Name + ".html").Funcs(funcs).ParseFiles(p))
		var b bytes.Buffer
		if err := t.Execute(&b, nil); err != nil {
			log.Fatal(err)
		}
		return b.Bytes()
	}
	best, bestN := render(0), 0
	if len(best) > target {
		log.Printf("%s: the page without fill is %d bytes, more than the %d left: shrink the assets", s.Name, len(best), target)
		return best
	}
	for n := 1; ; n++ {
		b := render(n)
		if abs(len(b)-target) < abs(len(best)-target) {
			best, bestN = b, n
		}
		if len(b) > target {
			break
		}
	}
	log.Printf("%s: %d fill entries, page %d bytes for %d left", s.Name, bestN, len(best), target)
	return best
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// Shares used for the report (see the corpus README): HTTP Archive, January
// 2011 transfer sizes, Flash left out; image formats, Web Almanac 2019 Media.
var typeShare = map[string]float64{"html": 31.0 / 546, "js": 110.0 / 546, "css": 26.0 / 546, "img": 379.0 / 546}

func report(w io.Writer, s siteDef, objs []*built) {
	count := map[string]int{}
	bytesBy := map[string]int{}
	hosts := map[string]bool{}
	total := 0
	var text []byte
	for _, o := range objs {
		t := o.Type
		count[t]++
		bytesBy[t] += len(o.Body)
		hosts[o.Host] = true
		total += len(o.Body)
		if t == "html" || t == "css" || t == "js" {
			text = append(text, o.Body...)
		}
	}
	img := bytesBy["jpeg"] + bytesBy["png"] + bytesBy["gif"]
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, 6)
	zw.Write(text)
	zw.Close()
	fmt.Fprintf(w, "%s: %d objects (%d embedded), %d hosts, %d bytes (paper %d, %+.2f %%); text gzip -6 keeps %.1f %%\n",
		s.Name, len(objs), len(objs)-1, len(hosts), total, s.Bytes(), 100*float64(total-s.Bytes())/float64(s.Bytes()), 100*float64(z.Len())/float64(len(text)))
	for _, t := range []string{"html", "css", "js", "jpeg", "png", "gif"} {
		fmt.Fprintf(w, "  %-5s %3d objects %7d bytes %5.1f %%", t, count[t], bytesBy[t], 100*float64(bytesBy[t])/float64(total))
		if sh, ok := typeShare[t]; ok {
			fmt.Fprintf(w, " (target %4.1f %%)", 100*sh)
		} else {
			fmt.Fprintf(w, " of images %5.1f %%", 100*float64(bytesBy[t])/float64(img))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  img   %3d objects %7d bytes %5.1f %% (target %4.1f %%)\n", count["jpeg"]+count["png"]+count["gif"], img, 100*float64(img)/float64(total), 100*typeShare["img"])
	// The row of the corpus README's bytes-by-type table.
	cell := func(n, b int, of int) string {
		return fmt.Sprintf("%d, %s, %.1f %%", n, thousands(b), 100*float64(b)/float64(of))
	}
	fmt.Fprintf(w, "  README: | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Name,
		cell(count["html"], bytesBy["html"], total), cell(count["css"], bytesBy["css"], total), cell(count["js"], bytesBy["js"], total),
		cell(count["jpeg"], bytesBy["jpeg"], img), cell(count["png"], bytesBy["png"], img), cell(count["gif"], bytesBy["gif"], img),
		cell(count["jpeg"]+count["png"]+count["gif"], img, total))
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func writeNoticeHead(w io.Writer) {
	fmt.Fprint(w, `Default corpus of testbed/corpus: third-party assets and their licences
=======================================================================

Every object of the three default pages is listed below with the package it
comes from (name and version as fetched by gen.go), the file inside it, its
licence and how it was processed. This file is written by gen.go; do not
edit it by hand. The page layouts (src/*.html) and site style rules
(src/*.css) were written for this repository. licenses/ holds each
package's copyright file (Debian) or LICENSE (npm) and the Apache-2.0 text.

`)
}

func writeNoticeSite(w io.Writer, s siteDef, objs []*built) {
	fmt.Fprintf(w, "%s (http://%s/index.html)\n%s\n\n", s.Name, s.Host(), strings.Repeat("-", len(s.Name)+len(s.Host())+21))
	for _, o := range objs {
		fmt.Fprintf(w, "%s  (%d bytes)\n", o.url(), len(o.Body))
		for _, src := range o.Source {
			name, path, _ := strings.Cut(src, ":")
			if strings.HasPrefix(src, "tmpl:") {
				fmt.Fprintf(w, "    from     %s (this repository)\n", path)
				continue
			}
			p := pkgByName(name)
			lic := p.License
			credit := ""
			if name == "python3-skimage" {
				d := skimageData[filepath.Base(path)]
				lic, credit = d[0], d[1]
			}
			fmt.Fprintf(w, "    from     %s %s (%s): %s\n", p.Name, p.Version, p.Kind, path)
			fmt.Fprintf(w, "    licence  %s\n", lic)
			if credit != "" {
				fmt.Fprintf(w, "    credit   %s\n", credit)
			}
		}
		if len(o.Source) == 0 {
			fmt.Fprintf(w, "    from     no source file: drawn by the command below\n    licence  none needed (a 1x1 transparent pixel)\n")
		}
		if o.Type != "html" {
			cmd := o.Cmd
			if cmd == "" {
				cmd = `cat "$@" > "$OUT"`
			}
			fmt.Fprintf(w, "    made by  %s\n", cmd)
		}
		if o.Credit != "" {
			fmt.Fprintf(w, "    note     %s\n", o.Credit)
		}
	}
	fmt.Fprintln(w)
}

func writeNoticePackages(w io.Writer) {
	fmt.Fprint(w, "Packages\n--------\n\n")
	for _, p := range packages {
		fmt.Fprintf(w, "%s %s (%s)\n    licence    %s\n    copyright  %s\n", p.Name, p.Version, p.Kind, p.License, p.Copyright)
	}
}

// copyLicences puts each package's licence and copyright file (Debian's
// copyright file, the npm package's LICENSE) into licenses/, with the full
// Apache-2.0 text that Debian's copyright files refer to.
func copyLicences(here string) {
	dir := filepath.Join(here, "licenses")
	os.RemoveAll(dir)
	os.MkdirAll(dir, 0o755)
	cp := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, to), b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	for _, p := range packages {
		switch p.Kind {
		case "deb":
			cp(filepath.Join(*work, p.Name, "usr/share/doc", p.Name, "copyright"), p.Name+".copyright")
		case "npm":
			cp(filepath.Join(*work, p.Name, "package/LICENSE"), p.Name+".LICENSE")
		}
	}
	cp("/usr/share/common-licenses/Apache-2.0", "Apache-2.0")
}
