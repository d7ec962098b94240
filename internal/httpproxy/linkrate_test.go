package httpproxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"pep/internal/mode"
	"pep/internal/optimize"
	"pep/internal/testenv"
)

// TestLinkRatesWindow: the estimate is the largest sample of the last
// LinkRateWindow; a smaller sample replaces it only once it is that old,
// and a subscriber idle for 5 windows has none.
func TestLinkRatesWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLinkRates()
	l.now = func() time.Time { return now }
	sub := netip.MustParseAddr("100.64.0.1")
	if got := l.get(sub); got != 0 {
		t.Fatalf("no sample yet: %d, want 0", got)
	}
	step := func(d time.Duration, sample, want uint64) {
		t.Helper()
		now = now.Add(d)
		l.add(sub, sample)
		if got := l.get(sub); got != want {
			t.Errorf("after %d at +%v: %d, want %d", sample, d, got, want)
		}
	}
	step(0, 200_000, 200_000)
	step(10*time.Second, 50_000, 200_000)   // smaller, within the window: kept
	step(0, 0, 200_000)                     // no sample
	step(LinkRateWindow, 50_000, 50_000)    // the largest is a window old: replaced
	step(time.Second, 1_500_000, 1_500_000) // larger: at once
	if got := l.get(netip.MustParseAddr("100.64.0.2")); got != 0 {
		t.Errorf("another subscriber: %d, want 0", got)
	}
	now = now.Add(5 * LinkRateWindow)
	if got := l.get(sub); got != 0 {
		t.Errorf("idle for 5 windows: %d, want 0", got)
	}
}

// TestLinkRatesBound: at linkRateMaxSubscribers estimates a new
// subscriber is not kept while every estimate is recent, and is once the
// old ones can be dropped.
func TestLinkRatesBound(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLinkRates()
	l.now = func() time.Time { return now }
	for i := range linkRateMaxSubscribers {
		l.add(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 1000)
	}
	late := netip.MustParseAddr("100.64.9.9")
	l.add(late, 5000)
	if got := l.get(late); got != 0 || len(l.m) != linkRateMaxSubscribers {
		t.Fatalf("full of recent estimates: the new one kept (%d), %d estimates", got, len(l.m))
	}
	now = now.Add(LinkRateWindow)
	l.add(late, 5000)
	if got := l.get(late); got != 5000 || len(l.m) != 1 {
		t.Errorf("after a window: the new one %d (want 5000), %d estimates (want 1: the old dropped)", got, len(l.m))
	}
}

// TestLinkRateSample reads the kernel's delivery rate of a real loopback
// connection whose subscriber takes 8 KiB every 32 ms through a 16 KiB
// receive buffer (256 kB/s: a slow link as the sender sees it, its data
// delivered as fast as the far end drains it): no sample before
// LinkRateMinBytes are delivered, then an estimate of that rate's order
// (loopback alone gives gigabytes per second).
func TestLinkRateSample(t *testing.T) {
	const chunk, every = 8 << 10, 32 * time.Millisecond
	const rate = uint64(chunk * int(time.Second/every)) // 256,000 bytes/s
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	read := make(chan int64, 2)
	go func() {
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			var err error
			rc.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 16<<10) })
			return err
		}}
		c, err := d.Dial("tcp", l.Addr().String())
		if err != nil {
			read <- -1
			return
		}
		defer c.Close()
		for _, n := range []int64{8 << 10, 384 << 10} {
			var got int64
			for got < n {
				k, err := io.CopyN(io.Discard, c, min(chunk, n-got))
				got += k
				if err != nil {
					break
				}
				time.Sleep(every)
			}
			read <- got
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub := netip.MustParseAddr("127.0.0.1")
	rates := newLinkRates()
	send := func(n int) {
		t.Helper()
		if _, err := c.Write(make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		if got := <-read; got != int64(n) {
			t.Fatalf("the subscriber read %d bytes, want %d", got, n)
		}
	}
	send(8 << 10)
	rates.sample(sub, c)
	if got := rates.get(sub); got != 0 {
		t.Errorf("after 8 KiB delivered: estimate %d, want none (below LinkRateMinBytes)", got)
	}
	start := time.Now()
	send(384 << 10)
	rates.sample(sub, c)
	got := rates.get(sub)
	t.Logf("384 KiB in %v; delivery rate %d bytes/s (read at %d)", time.Since(start).Round(time.Millisecond), got, rate)
	// The sender is held back by the receive window, so its data leaves in
	// bursts as the window opens, and one sample may be a few times the
	// mean rate; unpaced, loopback delivers at gigabytes per second.
	if got < rate/3 || got > rate*4 {
		t.Errorf("estimate %d bytes/s, want the read rate %d within a factor of 3-4", got, rate)
	}
}

// TestLinkRateBothPaths: once pepd has a sample of a subscriber's link, a
// request it marks for the optimizer reaches Squid with
// optimize.LinkRateHeader, on the relay and on the standard library path
// alike; before that, and on requests not marked, it has none, and a
// subscriber's own is dropped.
func TestLinkRateBothPaths(t *testing.T) {
	ns := startDNS(t, siteRecords)
	big := strings.Repeat("x", 256<<10)
	up := startScripted(t, func(r *http.Request) scriptedAnswer {
		if strings.HasSuffix(r.URL.Path, "/big.js") {
			return scriptedAnswer{raw: fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/javascript\r\nContent-Length: %d\r\n\r\n%s", len(big), big)}
		}
		return scriptedAnswer{raw: "HTTP/1.1 204 No Content\r\n\r\n"}
	})
	pol := &optimize.Policy{Switch: optimize.NewSwitch(true)}
	p := startPepd(t, pepdOpts{squid: up.addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.Off,
		subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80}, optimize: pol})
	stdlib := "Expect: 100-continue\r\nContent-Length: 0\r\n" // the relay leaves such a GET to the standard library
	tokens := map[string]string{}                             // subscriber -> token
	squidGot := func(t *testing.T) (rate uint64, marked bool) {
		t.Helper()
		r, _ := up.last()
		v := r.Header.Get(optimize.LinkRateHeader)
		if v == "" {
			return 0, r.Header.Get(optimize.MarkHeader) != ""
		}
		rs, token, ok := strings.Cut(v, " ")
		rate, err := strconv.ParseUint(rs, 10, 64)
		if !ok || err != nil || token == "" || strings.Contains(token, "127.") {
			t.Errorf("%s: %q, want a rate, a space and a token", optimize.LinkRateHeader, v)
		}
		src := t.Name() // one subscriber per subtest
		if prev, seen := tokens[src]; seen && prev != token {
			t.Errorf("one subscriber: token %q, then %q", prev, token)
		}
		tokens[src] = token
		return rate, r.Header.Get(optimize.MarkHeader) != ""
	}
	for _, path := range []struct{ name, extra string }{{"relay", ""}, {"standard library", stdlib}} {
		t.Run(path.name, func(t *testing.T) {
			src := "127.0.0.21"
			if path.extra != "" {
				src = "127.0.0.22"
			}
			c := p.dial(t, src)
			defer c.Close()
			br := bufio.NewReader(c)
			get := func(obj, extra string) {
				t.Helper()
				if _, err := io.WriteString(c, "GET /img.cdn.test/"+obj+" HTTP/1.1\r\nHost: 192.0.2.12\r\n"+path.extra+extra+"\r\n"); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			get("big.js", "Pep-Link-Rate: 1\r\n")
			if rate, marked := squidGot(t); rate != 0 || !marked {
				t.Errorf("first request: Squid got rate %d, marked %v; want no rate (none measured, the subscriber's dropped), marked", rate, marked)
			}
			time.Sleep(linkRateEvery + testenv.Scale(50*time.Millisecond)) // the big response is delivered and acknowledged
			get("a.png", "")
			rate, marked := squidGot(t)
			if rate == 0 || !marked {
				t.Errorf("after 256 KiB delivered: Squid got rate %d, marked %v; want a rate", rate, marked)
			}
			get("c.png", "")
			squidGot(t)                          // the same token
			get("b.png", "Range: bytes=0-9\r\n") // not marked (Range): no rate either
			if rate, marked := squidGot(t); rate != 0 || marked {
				t.Errorf("a Range request: rate %d, marked %v; want neither", rate, marked)
			}
		})
	}
	if len(tokens) != 2 || tokens["TestLinkRateBothPaths/relay"] == tokens["TestLinkRateBothPaths/standard_library"] {
		t.Errorf("tokens %v, want one for each of the two subscribers, apart", tokens)
	}
}
