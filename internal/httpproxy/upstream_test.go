package httpproxy

import (
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pep/internal/mode"
	"pep/internal/testenv"
)

// TestUpstreamPool: both HTTP paths take their connections to Squid from
// one pool per subscriber (upstream.go), against a real Squid with PROXY
// protocol. A subscriber's requests on three connections, the relay's,
// the standard library's (handed over) and the relay's again, use one
// Squid connection; another subscriber gets its own, and Squid sees its
// address; a connection Squid closed while idle is replaced without an
// error on either path; idle connections are closed after the pool's idle
// time.
func TestUpstreamPool(t *testing.T) {
	ns := startDNS(t, siteRecords)
	o := startOrigin(t, originIP, sitePages)
	port := o.Addr.Port()
	sc := siteSquidConf(t, ns, siteRecords, port)
	sc.ProxyProtocol = true
	testenv.Log(t)
	// The sharing steps run against a Squid with its default idle time
	// (2 min): "one connection for three requests" must not depend on
	// how fast a loaded machine sends them. The stale steps below run
	// against a Squid that closes a client connection idle for 1 s.
	sq := startSquid(t, sc)
	p := startPepd(t, pepdOpts{squid: sq.Addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.Off,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80, port}})
	dials := func() float64 { return testutilValue(p.M.upstreamConns.WithLabelValues("squid")) }
	relayReq := "GET /img.cdn.test:" + o.Port + "/logo.png HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n"
	stdReq := "GET /img.cdn.test:" + o.Port + "/logo.png HTTP/1.1\r\nHost: 192.0.2.12\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n"
	get := func(step, src, req string) {
		t.Helper()
		resp, body := p.raw(t, src, req)
		if resp.StatusCode != 200 || body != "PNG-logo" {
			t.Fatalf("%s: %d %q", step, resp.StatusCode, body)
		}
	}
	// idleOf waits (1 s at most) until the pool holds at least n idle
	// connections of subscriber src: a connection is given back just
	// after its response's last write, which the client may read first.
	idleOf := func(src string, n int) int {
		t.Helper()
		key := netip.MustParseAddr(src)
		var got int
		for deadline := time.Now().Add(testenv.Scale(time.Second)); ; time.Sleep(5 * time.Millisecond) {
			p.Proxy.pool.mu.Lock()
			got = len(p.Proxy.pool.idle[key])
			p.Proxy.pool.mu.Unlock()
			if got >= n || time.Now().After(deadline) {
				return got
			}
		}
	}
	before := dials()
	for i, step := range []struct{ name, req string }{{"relay", relayReq}, {"standard library", stdReq}, {"relay again", relayReq}} {
		get(step.name, "127.0.0.9", step.req)
		idleOf("127.0.0.9", 1)
		if got := dials() - before; got != 1 {
			t.Errorf("after request %d (%s): %v connections to Squid, want 1 (one pool for both paths)", i+1, step.name, got)
		}
	}
	get("another subscriber", "127.0.0.10", relayReq)
	idleOf("127.0.0.10", 1)
	if got := dials() - before; got != 2 {
		t.Errorf("another subscriber: %v connections to Squid in all, want 2", got)
	}
	if len(accessLogWith(t, sq, 1, " 127.0.0.10 ")) == 0 {
		log := sq.AccessLog(t)
		t.Errorf("Squid logged no request from the other subscriber (PROXY protocol); last line %q", log[len(log)-1])
	}
	// The relay gives a connection back just after the response's last
	// write: wait for it.
	for deadline := time.Now().Add(testenv.Scale(time.Second)); p.Proxy.pool.idleCount() != 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections, want 2 (one per subscriber)", p.Proxy.pool.idleCount())
		}
	}

	// Against a Squid that closes client connections idle for 1 s: once
	// it closed both idle connections (seen on pepd's side), each path
	// replaces its stale one (a GET is idempotent) and the subscriber
	// sees no error.
	sq = startSquidExtra(t, sc, "client_idle_pconn_timeout 1 second\n")
	p = startPepd(t, pepdOpts{squid: sq.Addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.Off,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80, port}})
	before = dials()
	get("relay", "127.0.0.9", relayReq)
	get("standard library", "127.0.0.10", stdReq)
	idleOf("127.0.0.9", 1)
	idleOf("127.0.0.10", 1)
	waitIdleClosed(t, p, 2)
	get("relay after Squid closed the idle connection", "127.0.0.9", relayReq)
	get("standard library after Squid closed the idle connection", "127.0.0.10", stdReq)
	if got := dials() - before; got != 4 {
		t.Errorf("after the stale connections: %v connections to Squid in all, want 4", got)
	}

	// Several idle connections of one subscriber, all closed by Squid
	// (as a Squid restart does): the first request after finds one stale
	// and takes a new connection, not the next stale one.
	clickReq := "GET /img.cdn.test:" + o.Port + "/click.png HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n"
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, body := p.raw(t, "127.0.0.11", clickReq); resp.StatusCode != 200 || body != "PNG-click" {
				t.Errorf("concurrent request: %d %q", resp.StatusCode, body)
			}
		}()
	}
	wg.Wait()
	if idle := idleOf("127.0.0.11", 2); idle < 2 {
		t.Fatalf("%d idle connections of the subscriber after 3 concurrent requests, want at least 2", idle)
	}
	waitIdleClosed(t, p, p.Proxy.pool.idleCount())
	get("relay after Squid closed several idle connections", "127.0.0.11", relayReq)

	// A pepd whose pool keeps connections idle for 300 ms closes them
	// then.
	p2 := startPepd(t, pepdOpts{squid: sq.Addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.Off, upIdle: 300 * time.Millisecond,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80, port}})
	// The connection is given back after sent, so it cannot be closed
	// for idleness before sent + 300 ms (given, below, is read only once
	// the client has the response, a little after the give-back).
	sent := time.Now()
	if resp, body := p2.raw(t, "127.0.0.9", relayReq); resp.StatusCode != 200 || body != "PNG-logo" {
		t.Fatalf("short idle time: %d %q", resp.StatusCode, body)
	}
	// The relay gives the connection back just after the response's last
	// write: wait for it (well within the idle time).
	given := time.Now()
	for deadline := time.Now().Add(testenv.Scale(time.Second)); p2.Proxy.pool.idleCount() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections after a request, want 1", p2.Proxy.pool.idleCount())
		}
	}
	for deadline := given.Add(300*time.Millisecond + testenv.Scale(time.Second)); p2.Proxy.pool.idleCount() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections left %s after a request, want 0 (idle time 300 ms)", p2.Proxy.pool.idleCount(), time.Since(given).Round(time.Millisecond))
		}
	}
	if held := time.Since(sent); held < 300*time.Millisecond {
		t.Errorf("the idle connection was closed %s after the request was sent, before the idle time (300 ms)", held)
	}
}

// waitIdleClosed waits (5 s at most, scaled) until at least n of p's idle
// Squid connections are closed by Squid: a peek (MSG_PEEK|MSG_DONTWAIT)
// at the socket reads its end, and consumes nothing.
func waitIdleClosed(t *testing.T, p *pepd, n int) {
	t.Helper()
	closed := func() int {
		p.Proxy.pool.mu.Lock()
		defer p.Proxy.pool.mu.Unlock()
		k := 0
		for _, cs := range p.Proxy.pool.idle {
			for _, c := range cs {
				sc, err := c.countConn.Conn.(syscall.Conn).SyscallConn()
				if err != nil {
					continue
				}
				var eof bool
				sc.Read(func(fd uintptr) bool {
					m, _, err := unix.Recvfrom(int(fd), make([]byte, 1), unix.MSG_PEEK|unix.MSG_DONTWAIT)
					eof = m == 0 && err == nil || err == unix.ECONNRESET
					return true
				})
				if eof {
					k++
				}
			}
		}
		return k
	}
	deadline := time.Now().Add(testenv.Scale(5 * time.Second))
	for closed() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d idle connections closed by Squid within %s", closed(), n, testenv.Scale(5*time.Second))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
