package main

import (
	"bytes"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"pep/internal/admin"
	"pep/internal/mode"
)

func TestCommands(t *testing.T) {
	sw := mode.NewSwitch(mode.Off)
	srv := httptest.NewServer(admin.Handler(admin.Options{Mode: sw}))
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
		{"status", []string{"-admin", addr, "status"}, "", 0, "mode: url\nhealth: ok\n", mode.URL},
		{"rewrite-html", []string{"rewrite-html", "-vip", "192.0.2.12", "-base", "http://www.foo.com/a/"},
			`<img src="x.png"><a href="http://i.cnn.net/">`, 0, `<img src="http://192.0.2.12/www.foo.com/a/x.png"><a href="http://i.cnn.net/">`, mode.URL},
		{"rewrite-html without vip", []string{"rewrite-html", "-base", "http://www.foo.com/"}, "", 2, "", mode.URL},
		{"unknown command", []string{"frobnicate"}, "", 2, "", mode.URL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			st := run(c.args, strings.NewReader(c.stdin), &out, &errb)
			if st != c.wantStatus || !strings.HasPrefix(out.String(), c.wantOut) {
				t.Errorf("status %d out %q (stderr %q); want %d, %q", st, out.String(), errb.String(), c.wantStatus, c.wantOut)
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
	for _, want := range []string{"http_port 127.0.0.1:3128 require-proxy-header\n", "dns_nameservers 198.18.1.2\n",
		"acl subscribers src 198.18.0.0/24\n", "acl pep_ports port 80\n", "collapsed_forwarding on\n", " 192.0.2.12\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("squid.conf lacks %q", want)
		}
	}
	bin, err := exec.LookPath("squid")
	if err != nil {
		t.Skip("squid not installed: parse check skipped")
	}
	f := filepath.Join(t.TempDir(), "squid.conf")
	os.WriteFile(f, out.Bytes(), 0o644)
	if b, err := exec.Command(bin, "-k", "parse", "-f", f).CombinedOutput(); err != nil || bytes.Contains(b, []byte("ERROR")) || bytes.Contains(b, []byte("FATAL")) {
		t.Errorf("squid -k parse: %v\n%s", err, b)
	}
}
