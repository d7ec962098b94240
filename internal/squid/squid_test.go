package squid

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"

	"pep/internal/testenv"
)

var testSeq atomic.Int64

// testSquid starts a real Squid from configs/squid.conf with c (Listen,
// folders filled in) by the package's own steps, and stops it when t
// ends. It skips t without squid.
func testSquid(t *testing.T, c Conf) Conf {
	t.Helper()
	bin, err := exec.LookPath("squid")
	if err != nil {
		t.Skip("squid not installed (apt-get install -y squid; make deps)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.Listen = l.Addr().String()
	l.Close()
	dir, err := os.MkdirTemp("", "pep-squidpkg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755) // Squid's user must get through to its folders
	c.CacheDir, c.LogDir, c.PidFile = filepath.Join(dir, "cache"), filepath.Join(dir, "logs"), filepath.Join(dir, "squid.pid")
	c.CacheDirMB, c.CacheMemMB, c.ShutdownSeconds = 16, 8, 0
	tmplPath, err := FindTemplate()
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile(tmplPath)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "squid.conf")
	if err := WriteConf(conf, string(tmpl), c, ""); err != nil {
		t.Fatal(err)
	}
	if err := MakeDirs(c, true); err != nil {
		t.Fatal(err)
	}
	service := Service(fmt.Sprintf("squidpkg%dx%d", os.Getpid(), testSeq.Add(1)))
	if out, err := exec.Command(bin, InitArgs(service, conf)...).CombinedOutput(); err != nil {
		t.Fatalf("squid -z: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, RunArgs(service, conf)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(testenv.Scale(30 * time.Second))
	for {
		if conn, err := net.Dial("tcp", c.Listen); err == nil {
			conn.Close()
			return c
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(filepath.Join(c.LogDir, "cache.log"))
			t.Fatalf("squid exited before it accepted:\n%s", b)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("squid does not accept on %s", c.Listen)
		}
	}
}

// get sends GET url through Squid at addr as pepd does with PROXY
// protocol, naming src as the client, and returns the status and
// X-Cache.
func get(t *testing.T, addr, src, url string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(testenv.Scale(10 * time.Second)))
	dst := netip.MustParseAddrPort(addr)
	h := proxyproto.HeaderProxyFromAddrs(1, net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(src), 40000)), net.TCPAddrFromAddrPort(dst))
	if _, err := h.WriteTo(c); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", url, strings.TrimPrefix(url, "http://"))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Cache")
}

// TestManager reads a real Squid's figures after a miss and a hit: the
// counts are the requests the test sent (the Manager's own requests taken
// out), and the object is in the memory cache.
func TestManager(t *testing.T) {
	body := strings.Repeat("x", 5000)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, body)
	}))
	defer origin.Close()
	port, _ := strconv.Atoi(origin.URL[strings.LastIndex(origin.URL, ":")+1:])
	c := DefaultConf(netip.MustParseAddr("192.0.2.12"))
	c.Subscribers = []string{"127.0.0.0/8"}
	c.AllowedPorts = []uint16{uint16(port)}
	c.AllowDst = []string{"127.0.0.1/32"}
	c.Resolvers = []string{"127.0.0.1"}
	c = testSquid(t, c)
	m := &Manager{Addr: c.Listen, ProxyProtocol: true, Timeout: testenv.Scale(5 * time.Second)}
	ctx := context.Background()

	before, err := m.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before.Requests != 0 || before.Hits != 0 {
		t.Errorf("a fresh Squid: %d requests, %d hits; want 0 and 0 (the Manager's own requests are not counted)", before.Requests, before.Hits)
	}
	for i, want := range []string{"MISS", "HIT"} {
		code, xc := get(t, c.Listen, "127.0.0.2", origin.URL+"/obj")
		if code != 200 || !strings.HasPrefix(xc, want) {
			t.Fatalf("request %d: %d, X-Cache %q; want 200 and %s", i+1, code, xc, want)
		}
	}
	s, err := m.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 2 || s.Hits != 1 || s.OriginRequests != 1 {
		t.Errorf("after a miss and a hit: %d requests, %d hits, %d origin requests; want 2, 1, 1", s.Requests, s.Hits, s.OriginRequests)
	}
	if s.HitRatio() != 0.5 {
		t.Errorf("HitRatio %v, want 0.5", s.HitRatio())
	}
	// Squid counts kilobytes: two 5000-byte bodies and their heads are
	// at least 9 KB, the hit's at least 4 KB.
	if s.SentBytes < 9*1024 || s.HitSentBytes < 4*1024 || s.HitSentBytes >= s.SentBytes {
		t.Errorf("sent %d bytes, %d from the cache; want >= 9216 and 4096, hits less than all", s.SentBytes, s.HitSentBytes)
	}
	if r := s.ByteHitRatio(); r <= 0 || r >= 1 {
		t.Errorf("ByteHitRatio %v, want in (0, 1)", r)
	}
	// The object is in the memory cache, on disk (aufs writes in its own
	// threads, after the response went out), or both.
	for deadline := time.Now().Add(testenv.Scale(5 * time.Second)); s.MemObjects+s.DiskObjects < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("cache: %d objects in memory, %d on disk; want the object in one", s.MemObjects, s.DiskObjects)
		}
		if s, err = m.Fetch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if s.Requests != 2 {
		t.Errorf("%d requests after reading the manager again; want 2 still", s.Requests)
	}

	page, err := m.Page(ctx, "menu")
	if err != nil || !strings.Contains(page, "counters") {
		t.Errorf("Page(menu): %v, a page without the counters entry:\n%s", err, page)
	}
	if _, err := m.Page(ctx, "no_such_page"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("Page(no_such_page): %v, want a 404 error", err)
	}
	// Without the PROXY header Squid's port closes the connection.
	bare := &Manager{Addr: c.Listen, Timeout: testenv.Scale(5 * time.Second)}
	if _, err := bare.Fetch(ctx); err == nil || !strings.HasPrefix(err.Error(), "squid: cache manager") {
		t.Errorf("Fetch without the PROXY header Squid requires: %v, want a cache manager error", err)
	}
}

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

// TestFiles: FindTemplate finds the repository's template, WriteConf
// writes Render's bytes and extra, MakeDirs empties the cache when fresh
// and gives the folders to the user as root.
func TestFiles(t *testing.T) {
	p, err := FindTemplate()
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(filepath.Join("..", "..", Template))
	if p != abs {
		t.Errorf("FindTemplate = %q, want %q", p, abs)
	}
	tmpl, _ := os.ReadFile(p)
	dir := t.TempDir()
	conf := filepath.Join(dir, "squid.conf")
	if err := WriteConf(conf, string(tmpl), DefaultConf(netip.MustParseAddr("192.0.2.12")), "http_port 3130 intercept\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(conf)
	want, _ := os.ReadFile(filepath.Join("testdata", "conf", "default.conf"))
	if string(got) != string(want)+"http_port 3130 intercept\n" {
		t.Errorf("WriteConf wrote other bytes than testdata/conf/default.conf and the extra line")
	}
	bad := DefaultConf(netip.MustParseAddr("192.0.2.12"))
	bad.Resolvers = nil
	if err := WriteConf(filepath.Join(dir, "bad.conf"), string(tmpl), bad, ""); err == nil {
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
