package squid

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestManagerNoSquid: nothing listens, the error says so.
func TestManagerNoSquid(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	m := &Manager{Addr: addr, ProxyProtocol: true}
	if _, err := m.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "squid: cache manager") || !strings.Contains(err.Error(), "refused") {
		t.Errorf("Fetch of a closed port: %v, want connection refused", err)
	}
}

// TestParsePages: pages without the fields Fetch needs are errors, not
// zeros.
func TestParsePages(t *testing.T) {
	want := map[string]*int64{"client_http.requests": new(int64), "client_http.hits": new(int64)}
	if err := parseCounters("client_http.requests = 7\nclient_http.hits = 3\nother = 1\n", want); err != nil || *want["client_http.requests"] != 7 || *want["client_http.hits"] != 3 {
		t.Errorf("parseCounters: %v, %d, %d; want 7, 3", err, *want["client_http.requests"], *want["client_http.hits"])
	}
	for _, tc := range []struct{ name, page, err string }{
		{"a field missing", "client_http.requests = 7\n", "1 of 2 fields found"},
		{"not a number", "client_http.requests = 7\nclient_http.hits = x\n", `client_http.hits: strconv.ParseInt: parsing "x"`},
		{"an error page", "<html>Access Denied</html>", "0 of 2 fields found"},
	} {
		if err := parseCounters(tc.page, want); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("parseCounters, %s: %v, want %q", tc.name, err, tc.err)
		}
	}
	var s Stats
	info := "Storage Swap size:\t8 KB\nStorage Mem size:\t228 KB\n\t     2 Hot Object Cache Items\n\t     3 on-disk objects\n"
	if err := parseInfo(info, &s); err != nil || s.DiskBytes != 8192 || s.MemBytes != 228*1024 || s.MemObjects != 2 || s.DiskObjects != 3 {
		t.Errorf("parseInfo: %v, %+v", err, s)
	}
	if err := parseInfo("Storage Swap size:\t8 KB\n", &s); err == nil {
		t.Error("parseInfo of a page without the memory lines: no error")
	}
}

func TestService(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "pep"},
		{"tb1-", "peptb1"},
		{"a.b_c/9", "pepabc9"},
		{"Ünï", "pepn"},
	} {
		if got := Service(tc.in); got != tc.want {
			t.Errorf("Service(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestFiles: ReadTemplate finds the repository's template, WriteConf
// writes Render's bytes and extra, MakeDirs empties the cache when fresh
// and gives the folders to the user as root.
func TestFiles(t *testing.T) {
	tmpl, p, err := ReadTemplate()
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(filepath.Join("..", "..", Template))
	if p != abs {
		t.Errorf("ReadTemplate's path %q, want %q", p, abs)
	}
	if b, _ := os.ReadFile(abs); tmpl != string(b) || !strings.HasPrefix(tmpl, "# Squid 5.x") {
		t.Errorf("ReadTemplate's text is not %s's", abs)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "squid.conf")
	if err := WriteConf(conf, tmpl, DefaultConf(netip.MustParseAddr("192.0.2.12")), "http_port 3130 intercept\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(conf)
	want, _ := os.ReadFile(filepath.Join("testdata", "conf", "default.conf"))
	if string(got) != string(want)+"http_port 3130 intercept\n" {
		t.Errorf("WriteConf wrote other bytes than testdata/conf/default.conf and the extra line")
	}
	bad := DefaultConf(netip.MustParseAddr("192.0.2.12"))
	bad.Resolvers = nil
	if err := WriteConf(filepath.Join(dir, "bad.conf"), tmpl, bad, ""); err == nil {
		t.Error("WriteConf without resolvers: no error")
	} else if _, err := os.Stat(filepath.Join(dir, "bad.conf")); err == nil {
		t.Error("WriteConf wrote a file for a configuration Render refused")
	}

	c := Conf{CacheDir: filepath.Join(dir, "cache"), LogDir: filepath.Join(dir, "logs"), User: "proxy"}
	if err := MakeDirs(c, false); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(c.CacheDir, "00")
	os.Mkdir(old, 0o755)
	if err := MakeDirs(c, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); err != nil {
		t.Errorf("MakeDirs(warm) removed the cache: %v", err)
	}
	if err := MakeDirs(c, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("MakeDirs(fresh) kept the old cache: %v", err)
	}
	if os.Geteuid() != 0 {
		return
	}
	u, err := user.Lookup("proxy")
	if err != nil {
		t.Skip("no proxy user (Squid's package adds it)")
	}
	for _, d := range []string{c.CacheDir, c.LogDir} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; strconv.Itoa(int(uid)) != u.Uid {
			t.Errorf("%s: owner %d, want proxy (%s)", d, uid, u.Uid)
		}
	}
	c.User = "no-such-user-pep"
	if err := MakeDirs(c, false); err == nil || !strings.Contains(err.Error(), "cache_effective_user") {
		t.Errorf("MakeDirs for an unknown user: %v", err)
	}
}
