package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"

	"pep/internal/admin"
	"pep/internal/cachepolicy"
	"pep/internal/hints"
	"pep/internal/mode"
	"pep/internal/squid"
)

func TestCommands(t *testing.T) {
	sw := mode.NewSwitch(mode.Off)
	hs := hints.NewSwitch(false)
	srv := httptest.NewServer(admin.Handler(admin.Options{Mode: sw, Hints: hs}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	cases := []struct {
		name       string
		args       []string
		stdin      string
		wantStatus int
		wantOut    string
		wantMode   mode.Mode
	}{
		{"print mode", []string{"-admin", addr, "mode"}, "", 0, "off\n", mode.Off},
		{"switch mode", []string{"-admin", addr, "mode", "url"}, "", 0, "url (was off)\n", mode.URL},
		{"bad mode", []string{"-admin", addr, "mode", "fast"}, "", 1, "", mode.URL},
		{"print hints", []string{"-admin", addr, "hints"}, "", 0, "off\n", mode.URL},
		{"switch hints", []string{"-admin", addr, "hints", "on"}, "", 0, "on (was off)\n", mode.URL},
		{"bad hints", []string{"-admin", addr, "hints", "maybe"}, "", 1, "", mode.URL},
		{"status", []string{"-admin", addr, "status"}, "", 0, "mode: url\nhealth: ok\n", mode.URL},
		{"rewrite-html", []string{"rewrite-html", "-vip", "192.0.2.12", "-base", "http://www.foo.com/a/"},
			`<img src="x.png"><a href="http://i.cnn.net/">`, 0, `<img src="http://192.0.2.12/www.foo.com/a/x.png"><a href="http://i.cnn.net/">`, mode.URL},
		{"rewrite-html without vip", []string{"rewrite-html", "-base", "http://www.foo.com/"}, "", 2, "", mode.URL},
		{"unknown command", []string{"frobnicate"}, "", 2, "", mode.URL},
		{"mode help is not a mode", []string{"-admin", addr, "mode", "-h"}, "", 0, "usage: pepctl", mode.URL},
		{"mode unknown flag", []string{"-admin", addr, "mode", "-x"}, "", 2, "", mode.URL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			st := run(c.args, strings.NewReader(c.stdin), &out, &errb)
			if st != c.wantStatus || !strings.HasPrefix(out.String(), c.wantOut) {
				t.Errorf("status %d out %q (stderr %q); want %d, %q", st, out.String(), errb.String(), c.wantStatus, c.wantOut)
			}
			if c.name == "switch hints" && !hs.On() {
				t.Errorf("hints switch off after pepctl hints on")
			}
			if sw.Get() != c.wantMode {
				t.Errorf("mode %v, want %v", sw.Get(), c.wantMode)
			}
		})
	}
}

// TestSquidConf renders the shipped template for the example pepd config
// and, where Squid is installed, has Squid parse it.
func TestSquidConf(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"squid-conf", "-config", "../../configs/pepd.yaml", "-template", "../../configs/squid.conf", "-cache-dir", "/tmp/x", "-log-dir", "/tmp"}
	if st := run(args, nil, &out, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	for _, want := range []string{"http_port 127.0.0.1:3128 require-proxy-header\n", "dns_nameservers 127.0.53.53 198.18.1.2\n",
		"acl subscribers src 198.18.0.0/24\n", "acl pep_ports port 80\n", "collapsed_forwarding on\n", " 192.0.2.12\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("squid.conf lacks %q", want)
		}
	}
	squidParse(t, out.Bytes())
}

// TestModeArray: -admin with several addresses switches every gateway of
// an array, prefixes each answer with its gateway, and names a gateway
// that cannot be reached while still switching the others.
func TestModeArray(t *testing.T) {
	sw1, sw2 := mode.NewSwitch(mode.Off), mode.NewSwitch(mode.DNS)
	s1 := httptest.NewServer(admin.Handler(admin.Options{Mode: sw1}))
	defer s1.Close()
	s2 := httptest.NewServer(admin.Handler(admin.Options{Mode: sw2}))
	defer s2.Close()
	a1, a2 := strings.TrimPrefix(s1.URL, "http://"), strings.TrimPrefix(s2.URL, "http://")
	var out, errb bytes.Buffer
	if st := run([]string{"-admin", a1 + "," + a2, "mode", "url"}, nil, &out, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	if sw1.Get() != mode.URL || sw2.Get() != mode.URL {
		t.Errorf("modes %v, %v; want url on both", sw1.Get(), sw2.Get())
	}
	if want := a1 + ": url (was off)\n" + a2 + ": url (was dns)\n"; out.String() != want {
		t.Errorf("out %q, want %q", out.String(), want)
	}
	// A dead gateway: the others still switch, the exit status says so.
	dead := httptest.NewServer(nil)
	da := strings.TrimPrefix(dead.URL, "http://")
	dead.Close()
	out.Reset()
	errb.Reset()
	if st := run([]string{"-admin", a1 + "," + da + "," + a2, "mode", "off"}, nil, &out, &errb); st != 1 {
		t.Errorf("status %d with a dead gateway, want 1", st)
	}
	if sw1.Get() != mode.Off || sw2.Get() != mode.Off {
		t.Errorf("modes %v, %v; want off on the live ones", sw1.Get(), sw2.Get())
	}
	if !strings.Contains(errb.String(), "1 of 3 gateways failed: "+da) {
		t.Errorf("stderr %q does not name the dead gateway", errb.String())
	}
}

// TestSquidConfArray renders a CARP array member's squid.conf and, where
// Squid is installed, has Squid parse it.
func TestSquidConfArray(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"squid-conf", "-template", "../../configs/squid.conf", "-cache-dir", "/tmp/x", "-log-dir", "/tmp",
		"-peers", "198.18.11.2:3127,198.18.12.2:3127", "-peer-listen", "198.18.11.2:3127"}
	if st := run(args, nil, &out, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	for _, want := range []string{"http_port 198.18.11.2:3127 name=pep_array\n",
		"acl pep_array_members src 198.18.11.2 198.18.12.2\n",
		"cache_peer 198.18.11.2 parent 3127 0 carp no-query no-digest no-netdb-exchange connect-timeout=2 connect-fail-limit=2 name=pep_array0\n",
		"cache_peer 198.18.12.2 parent 3127 0 carp no-query no-digest no-netdb-exchange connect-timeout=2 connect-fail-limit=2 name=pep_array1\n",
		"cache deny !pep_array_port\n", "unique_hostname pep-198.18.11.2\n", "never_direct allow !pep_array_port\n",
		// The owner fetches through its own optimizer (optimize.listen's default), never another member.
		"cache_peer 127.0.0.1 parent 3131 0 no-query no-digest no-netdb-exchange default connect-timeout=2 connect-fail-limit=3 name=pep_optimizer\n",
		"cache_peer_access pep_optimizer allow pep_array_port\ncache_peer_access pep_optimizer deny all\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("squid.conf lacks %q", want)
		}
	}
	if st := run([]string{"squid-conf", "-template", "../../configs/squid.conf", "-peers", "198.18.11.2:3127"}, nil, &out, &errb); st != 1 {
		t.Errorf("peers without -peer-listen: status %d, want 1", st)
	}
	squidParse(t, out.Bytes())
}

// squidParse has Squid parse conf where Squid is installed.
func squidParse(t *testing.T, conf []byte) {
	t.Helper()
	bin, err := exec.LookPath("squid")
	if err != nil {
		t.Skip("squid not installed: parse check skipped")
	}
	f := filepath.Join(t.TempDir(), "squid.conf")
	os.WriteFile(f, conf, 0o644)
	if b, err := exec.Command(bin, "-k", "parse", "-f", f).CombinedOutput(); err != nil || bytes.Contains(b, []byte("ERROR")) || bytes.Contains(b, []byte("FATAL")) {
		t.Errorf("squid -k parse: %v\n%s", err, b)
	}
}

// TestSquidConfAdmission: cache.admission second-hit renders the
// store_miss rule and cache.memory_max_object the memory bound; the
// defaults render neither the rule nor another bound, and the optimizer's
// (on by default) store_miss rule for deferred transforms. Squid parses
// both.
func TestSquidConfAdmission(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "pepd.yaml")
	if err := os.WriteFile(cfg, []byte("cache:\n  admission: second-hit\n  memory_max_object: 512KiB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args          []string
		want, wantNot []string
	}{
		{[]string{"-config", cfg}, []string{"acl pep_first req_header Pep-First .\nstore_miss deny pep_first\n",
			"maximum_object_size_in_memory 512 KB\n", "request_header_access Pep-First deny all\n"}, nil},
		{nil, []string{"maximum_object_size_in_memory 1024 KB\n", "request_header_access Pep-First deny all\n",
			"http_access allow localhost manager\nhttp_access deny manager\n", "cache deny manager\n",
			"acl pep_deferred rep_header Pep-Deferred .\nstore_miss deny pep_deferred\n"}, []string{"store_miss deny pep_first", "pep_first"}},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"squid-conf", "-template", "../../configs/squid.conf", "-cache-dir", "/tmp/x", "-log-dir", "/tmp"}, tc.args...)
		if st := run(args, nil, &out, &errb); st != 0 {
			t.Fatalf("status %d: %s", st, errb.String())
		}
		for _, want := range tc.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: squid.conf lacks %q", tc.args, want)
			}
		}
		for _, not := range tc.wantNot {
			if strings.Contains(out.String(), not) {
				t.Errorf("%v: squid.conf has %q", tc.args, not)
			}
		}
		squidParse(t, out.Bytes())
	}
}

// TestCacheCommand: pepctl cache prints GET /cache as text, -json the
// JSON document, through the admin API's handler.
func TestCacheCommand(t *testing.T) {
	st := cachepolicy.Status{Admission: "second-hit", Window: "1h0m0s", Pepd: cachepolicy.Counts{FirstSeen: 7, Admitted: 3, Private: 2},
		Squid:    &squid.Stats{Requests: 10, Hits: 4, SentBytes: 10240, HitSentBytes: 2048, SwapOuts: 3, DiskObjects: 3, DiskBytes: 12288},
		HitRatio: 0.4, ByteHitRatio: 0.2}
	srv := httptest.NewServer(admin.Handler(admin.Options{Mode: mode.NewSwitch(mode.Off),
		Cache: func(context.Context) cachepolicy.Status { return st }}))
	defer srv.Close()
	a := strings.TrimPrefix(srv.URL, "http://")
	var out, errb bytes.Buffer
	if code := run([]string{"-admin", a, "cache"}, nil, &out, &errb); code != 0 {
		t.Fatalf("status %d: %s", code, errb.String())
	}
	for _, want := range []string{"admission: second-hit (window 1h0m0s)\n", "first-seen (admissions refused): 7\n", "private requests: 2\n",
		"hit ratio: 40.0 %\n", "byte hit ratio: 20.0 %\n", "disk: 3 objects, 12288 bytes\n", "disk writes (swap outs): 3\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("pepctl cache lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"-admin", a, "cache", "-json"}, nil, &out, &errb); code != 0 {
		t.Fatalf("status %d: %s", code, errb.String())
	}
	var got cachepolicy.Status
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if got.Pepd != st.Pepd || *got.Squid != *st.Squid || got.Collapsed != nil {
		t.Errorf("JSON %+v, want %+v", got, st)
	}
	if code := run([]string{"-admin", a, "cache", "extra"}, nil, &out, &errb); code != 2 {
		t.Errorf("status %d for a bad argument, want 2", code)
	}
}

// TestSquidConfMemoryTier: with cache.memory_tier set, squid-conf renders
// the tier as the disk Squid's parent, and -memory-tier renders the tier
// itself: memory only, on the tier's address, its own files by default.
func TestSquidConfMemoryTier(t *testing.T) {
	src, err := os.ReadFile("../../configs/pepd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "pepd.yaml")
	conf := strings.Replace(string(src), `memory_tier: ""`, `memory_tier: "127.0.0.1:3140"`, 1)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var disk, tier, errb bytes.Buffer
	if st := run([]string{"squid-conf", "-config", cfg, "-template", "../../configs/squid.conf", "-cache-dir", "/tmp/x", "-log-dir", "/tmp"}, nil, &disk, &errb); st != 0 {
		t.Fatalf("status %d: %s", st, errb.String())
	}
	if !strings.Contains(disk.String(), "\ncache_peer 127.0.0.1 parent 3140 ") || !strings.Contains(disk.String(), "\ncache_dir ") {
		t.Errorf("disk Squid's conf lacks the tier parent or its cache_dir:\n%s", disk.String())
	}
	squidParse(t, disk.Bytes())
	if st := run([]string{"squid-conf", "-config", cfg, "-template", "../../configs/squid.conf", "-memory-tier"}, nil, &tier, &errb); st != 0 {
		t.Fatalf("-memory-tier: status %d: %s", st, errb.String())
	}
	for _, want := range []string{"http_port 127.0.0.1:3140\n", "pid_filename /run/squid-memtier.pid\n", "cache_log /var/log/squid-memtier/cache.log\n"} {
		if !strings.Contains(tier.String(), want) {
			t.Errorf("tier conf lacks %q", want)
		}
	}
	if strings.Contains(tier.String(), "\ncache_dir ") || strings.Contains(tier.String(), "\ncache_peer 127.0.0.1 parent 3140") {
		t.Errorf("tier conf has a cache_dir or itself as parent:\n%s", tier.String())
	}
}

// TestOptimizeImage runs pepctl optimize-image on the optimizer's test
// images and checks what it prints per image: the WebP chosen, the SSIM
// reached, the bytes and the time; -o writes the served body.
func TestOptimizeImage(t *testing.T) {
	dir := "../../internal/optimize/testdata/"
	out := filepath.Join(t.TempDir(), "star.webp")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"optimize-image", "-o", out, dir + "starfield.jpg"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	line := stdout.String()
	// The grid's q90, then one refining encode (optimize.ssim_refine 1) at
	// q87, below the target.
	for _, want := range []string{"starfield.jpg: 57074 -> ", "jpeg -> webp q90, SSIM 0.9600 (lowest 32x32 tile 0.9453), 5 encodes, "} {
		if !strings.Contains(line, want) {
			t.Errorf("output %q lacks %q", line, want)
		}
	}
	// Two refining encodes find q88 between the grid's 85 and 90.
	stdout.Reset()
	if code := run([]string{"optimize-image", "-refine", "2", dir + "starfield.jpg"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("-refine 2: exit %d: %s", code, stderr.String())
	}
	if want := "jpeg -> webp q88, SSIM 0.9521"; !strings.Contains(stdout.String(), want) {
		t.Errorf("-refine 2: output %q lacks %q", stdout.String(), want)
	}
	if code := run([]string{"optimize-image", "-refine", "9", dir + "starfield.jpg"}, nil, &stdout, &stderr); code == 0 {
		t.Error("-refine 9: exit 0, want a usage error")
	}
	if b, err := os.ReadFile(out); err != nil || !bytes.HasPrefix(b, []byte("RIFF")) {
		t.Errorf("-o: %v, %d bytes", err, len(b))
	}
	stdout.Reset()
	if code := run([]string{"optimize-image", dir + "palette.png", dir + "animated.gif", dir + "small.gif"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "png -> webp lossless, SSIM 1") ||
		!strings.Contains(lines[1], "animated, 31 frames (SSIM: the worst frame's)") || !strings.Contains(lines[2], "passes untouched: not smaller") {
		t.Errorf("three files: %q", stdout.String())
	}
	if code := run([]string{"optimize-image", "-o", out, dir + "photo.jpg", dir + "palette.png"}, nil, &stdout, &stderr); code != 2 {
		t.Errorf("-o with two files: exit %d, want 2 (usage)", code)
	}
	// -quick: the quick WebP beside the search's choice; the star field
	// needs q90, so under a backlog it would go as it is.
	stdout.Reset()
	if code := run([]string{"optimize-image", "-quick", "80", dir + "photo.jpg", dir + "starfield.jpg"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("-quick: exit %d: %s", code, stderr.String())
	}
	lines = strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "; under a backlog: webp q80, ") || !strings.Contains(lines[0], " 1 encode, ") ||
		!strings.Contains(lines[1], "; under a backlog: the original (not smaller at q80)") {
		t.Errorf("-quick: %q", stdout.String())
	}
	if code := run([]string{"optimize-image", "-quick", "101", dir + "photo.jpg"}, nil, &stdout, &stderr); code == 0 {
		t.Error("-quick 101: exit 0, want an error")
	}
}

// TestOptimizeText: pepctl optimize-text runs pepd's text transform on a
// real script, plain and as an origin's level-1 gzip: brotli by default,
// gzip with -brotli 0, and -o writes a body that decodes to the script.
func TestOptimizeText(t *testing.T) {
	js, err := os.ReadFile("../../testbed/corpus/default/site/britannica/js.eb.com/eb/js/underscore-min.js")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plain, gz, out := filepath.Join(dir, "u.js"), filepath.Join(dir, "u.js.gz"), filepath.Join(dir, "out")
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, 1)
	zw.Write(js)
	zw.Close()
	if err := os.WriteFile(plain, js, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gz, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
		dec  func([]byte) io.Reader
	}{
		{[]string{plain}, "plain -> br", func(b []byte) io.Reader { return brotli.NewReader(bytes.NewReader(b)) }},
		{[]string{gz}, "gzip -> br", func(b []byte) io.Reader { return brotli.NewReader(bytes.NewReader(b)) }},
		{[]string{"-brotli", "0", gz}, "gzip -> gzip", gunzipReader},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"optimize-text", "-o", out}, tc.args...)
		if code := run(args, nil, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, stderr.String())
		}
		if !strings.Contains(stdout.String(), tc.want) {
			t.Errorf("%v: output %q lacks %q", tc.args, stdout.String(), tc.want)
		}
		body, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := io.ReadAll(tc.dec(body)); err != nil || !bytes.Equal(got, js) {
			t.Errorf("%v: -o body does not decode to the script (%v)", tc.args, err)
		}
	}
}

// gunzipReader reads a gzip body; a body that is not gzip reads as empty.
func gunzipReader(b []byte) io.Reader {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return bytes.NewReader(nil)
	}
	return r
}
