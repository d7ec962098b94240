package httpproxy

import (
	"strings"
	"testing"
	"time"

	"pep/internal/cachepolicy"
	"pep/internal/mode"
	pepsquid "pep/internal/squid"
)

// TestMemoryTier: second-hit admission with the memory tier (issue 13;
// CacheSifter's transient objects, seed 001): pepd, the disk Squid
// (store_miss deny for first-seen requests) and a memory-only Squid as
// its parent (squid.Conf.MemoryTier, MemoryOnly), all real. Request 1 of
// an object is fetched from the origin once and written to no disk (the
// tier keeps it in memory); request 2 does not reach the origin (a
// memory hit at the tier) and is written to the disk Squid's cache_dir;
// request 3 is a hit at the disk Squid and does not reach the tier. A
// private request (CK-Private) reaches the origin every time, never
// through the tier; the origin sees neither pepd's marks nor the token.
func TestMemoryTier(t *testing.T) {
	ns := startDNS(t, siteRecords)
	o := startOrigin(t, originIP, sitePages)
	port := o.Addr.Port()
	base := func() pepsquid.Conf { return siteSquidConf(t, ns, siteRecords, port) }
	tc := base()
	tc.MemoryOnly, tc.ProxyProtocol = true, false
	tc.Pepd, tc.Subscribers = []string{"127.0.0.1/32"}, []string{"127.0.0.1/32"}
	tier := startSquid(t, tc)
	if files := diskFiles(t, tier); len(files) != 0 {
		t.Fatalf("the memory tier has a cache_dir with files: %v", files)
	}
	dc := base()
	dc.ProxyProtocol = true
	dc.Subscribers = []string{"127.0.0.0/8"}
	dc.Admission = true
	dc.MemoryTier = tier.Addr
	disk := startSquid(t, dc)
	adm, err := cachepolicy.NewAdmission(cachepolicy.AdmissionOptions{Window: time.Hour, Items: 10000})
	if err != nil {
		t.Fatal(err)
	}
	pol := cachepolicy.NewPolicy(adm, true)
	p := startPepd(t, pepdOpts{squid: disk.Addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.URL,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80, port}, cache: pol})
	dm := &pepsquid.Manager{Addr: disk.Addr, ProxyProtocol: true, Timeout: 5 * time.Second}
	tm := &pepsquid.Manager{Addr: tier.Addr, Timeout: 5 * time.Second}

	obj := "img.cdn.test/logo.png"
	req := "GET /img.cdn.test:" + o.Port + "/logo.png HTTP/1.1\r\nHost: 192.0.2.12\r\n\r\n"
	db, tb := stats(t, dm), stats(t, tm)
	for i, want := range []struct{ origin, swaps, diskHits, tierReqs, tierHits int64 }{
		{1, 0, 0, 1, 0}, // first-seen: through the tier, stored there only
		{1, 1, 0, 2, 1}, // admitted: a memory hit at the tier, written to disk
		{1, 1, 1, 2, 1}, // a disk-cache hit
	} {
		if resp, body := p.raw(t, "127.0.0.9", req); resp.StatusCode != 200 || body != "PNG-logo" {
			t.Fatalf("request %d: %d %q", i+1, resp.StatusCode, body)
		}
		ds := waitSwapOuts(t, dm, db.SwapOuts+want.swaps)
		ts := waitSwapOuts(t, tm, tb.SwapOuts)
		for _, c := range []struct {
			what      string
			got, want int64
		}{
			{"origin requests", int64(o.hitCount(obj)), want.origin},
			{"disk writes (disk Squid swap.outs)", ds.SwapOuts - db.SwapOuts, want.swaps},
			{"disk Squid hits", ds.Hits - db.Hits, want.diskHits},
			{"tier requests", ts.Requests - tb.Requests, want.tierReqs},
			{"tier hits", ts.Hits - tb.Hits, want.tierHits},
			{"tier disk writes", ts.SwapOuts - tb.SwapOuts, 0},
		} {
			if c.got != c.want {
				t.Errorf("after request %d: %s %d, want %d", i+1, c.what, c.got, c.want)
			}
		}
		if files := diskFiles(t, disk); int64(len(files)) != want.swaps {
			t.Errorf("after request %d: %d files in the disk Squid's cache_dir, want %d", i+1, len(files), want.swaps)
		}
	}
	if v := o.lastHeader(obj).Get(cachepolicy.FirstHeader); v != "" {
		t.Errorf("the origin saw %s: %q", cachepolicy.FirstHeader, v)
	}

	// Private: the origin every time, never the tier.
	tb = stats(t, tm)
	priv := "GET /www.site.test:" + o.Port + "/app.js HTTP/1.1\r\nHost: 192.0.2.12\r\nUser-Agent: App/1 CK-Private\r\n\r\n"
	for i := range 2 {
		if resp, _ := p.raw(t, "127.0.0.9", priv); resp.StatusCode != 200 {
			t.Fatalf("private request %d: %d", i+1, resp.StatusCode)
		}
	}
	if got := o.hitCount("www.site.test/app.js"); got != 2 {
		t.Errorf("the origin saw %d of 2 private requests", got)
	}
	if got := stats(t, tm).Requests - tb.Requests; got != 0 {
		t.Errorf("the tier saw %d private requests, want 0", got)
	}
	h := o.lastHeader("www.site.test/app.js")
	if v := h.Get("Pep-Private"); v != "" || strings.Contains(h.Get("User-Agent"), cachepolicy.PrivateToken) {
		t.Errorf("the origin saw the private mark %q or the token: User-Agent %q", v, h.Get("User-Agent"))
	}
}
