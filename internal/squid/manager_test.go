package squid_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"

	"pep/internal/squid"
	"pep/internal/squid/squidtest"
	"pep/internal/testenv"
)

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
	c := squid.DefaultConf(netip.MustParseAddr("192.0.2.12"))
	c.Subscribers = []string{"127.0.0.0/8"}
	c.AllowedPorts = []uint16{uint16(port)}
	c.AllowDst = []string{"127.0.0.1/32"}
	c.Resolvers = []string{"127.0.0.1"}
	sq := squidtest.Start(t, c, "", 16, 8)
	m := &squid.Manager{Addr: sq.Addr, ProxyProtocol: true, Timeout: testenv.Scale(5 * time.Second)}
	ctx := context.Background()

	before, err := m.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before.Requests != 0 || before.Hits != 0 {
		t.Errorf("a fresh Squid: %d requests, %d hits; want 0 and 0 (the Manager's own requests are not counted)", before.Requests, before.Hits)
	}
	for i, want := range []string{"MISS", "HIT"} {
		code, xc := get(t, sq.Addr, "127.0.0.2", origin.URL+"/obj")
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
	bare := &squid.Manager{Addr: sq.Addr, Timeout: testenv.Scale(5 * time.Second)}
	if _, err := bare.Fetch(ctx); err == nil || !strings.HasPrefix(err.Error(), "squid: cache manager") {
		t.Errorf("Fetch without the PROXY header Squid requires: %v, want a cache manager error", err)
	}
}
