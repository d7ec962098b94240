package httpproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"pep/internal/mode"
	"pep/internal/testenv"
)

// TestShutdownInFlight: Server.Shutdown with a request in flight, on the
// relay (a plain GET) and on the standard library path (a GET the relay
// hands over), through a real Squid to an origin that holds the response
// until the test lets it go. Shutdown stops accepting at once; a request
// whose response comes before the context ends gets it whole, and
// Shutdown returns nil; one whose response does not come is closed when
// the context ends, and Shutdown returns the context's error.
func TestShutdownInFlight(t *testing.T) {
	testenv.Log(t)
	ns := startDNS(t, siteRecords)
	var release [4]chan struct{} // one per case: a held request of an earlier case waits on its own
	held := make(chan struct{}, 8)
	// One object per case: Squid would join a request for an object
	// already being fetched to that fetch (collapsed forwarding).
	pages := maps.Clone(sitePages)
	for i := range release {
		release[i] = make(chan struct{})
		pages["img.cdn.test/held"+strconv.Itoa(i)+".png"] = page{ctype: "image/png", body: "PNG-held", header: map[string]string{"Cache-Control": "no-store"},
			wait: func() {
				held <- struct{}{}
				<-release[i]
			}}
	}
	o := startOrigin(t, originIP, pages)
	port := o.Addr.Port()
	sq := startSquid(t, siteSquidConf(t, ns, siteRecords, port))
	t.Cleanup(func() {
		for _, r := range release {
			select {
			case <-r:
			default:
				close(r)
			}
		}
	})
	n := 0
	for _, path := range []struct {
		name  string
		extra string
	}{{"relay", ""}, {"standard library", "Expect: 100-continue\r\nContent-Length: 0\r\n"}} {
		for _, finish := range []bool{true, false} {
			req := "GET /img.cdn.test:" + o.Port + "/held" + strconv.Itoa(n) + ".png HTTP/1.1\r\nHost: 192.0.2.12\r\n" + path.extra + "\r\n"
			rel := release[n]
			n++
			name := path.name + ", response before the deadline"
			if !finish {
				name = path.name + ", deadline force-closes"
			}
			t.Run(name, func(t *testing.T) {
				p := startPepd(t, pepdOpts{squid: sq.Addr, proxyProtocol: true, resolver: ns.Addr, mode: mode.Off,
					subscribers: []string{"127.0.0.0/8"}, allow: []string{originIP + "/32"}, ports: []uint16{80, port}})
				c, br := dialSub(t, p)
				c.SetDeadline(time.Now().Add(testenv.Scale(20 * time.Second)))
				if _, err := io.WriteString(c, req); err != nil {
					t.Fatal(err)
				}
				select {
				case <-held: // the request is at the origin
				case <-time.After(testenv.Scale(10 * time.Second)):
					t.Fatal("the request did not reach the origin")
				}
				grace := testenv.Scale(500 * time.Millisecond)
				if finish {
					grace = testenv.Scale(10 * time.Second)
				}
				ctx, cancel := context.WithTimeout(context.Background(), grace)
				defer cancel()
				done := make(chan error, 1)
				start := time.Now()
				go func() { done <- p.Srv.Shutdown(ctx) }()
				// No new connection once Shutdown started.
				for deadline := time.Now().Add(testenv.Scale(5 * time.Second)); ; time.Sleep(5 * time.Millisecond) {
					nc, err := net.Dial("tcp", p.Addr)
					if err != nil {
						break
					}
					nc.Close()
					if time.Now().After(deadline) {
						t.Fatal("pepd still accepts connections during Shutdown")
					}
				}
				if finish {
					close(rel) // the response goes
					resp, body, err := readFinal(br, "GET")
					if err != nil || resp.StatusCode != 200 || body != "PNG-held" {
						t.Fatalf("in-flight request during Shutdown: %v %v %q, want 200 PNG-held", resp, err, body)
					}
					if err := <-done; err != nil {
						t.Errorf("Shutdown after the response: %v, want nil", err)
					}
					if err := expectClosed(c, br); err != nil {
						t.Errorf("after the response and Shutdown: %v", err)
					}
					return
				}
				select {
				case err := <-done:
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Shutdown with a response that never came: %v, want %v", err, context.DeadlineExceeded)
					}
					if took := time.Since(start); took < grace {
						t.Errorf("Shutdown returned after %s, before its context ended (%s)", took, grace)
					}
				case <-time.After(grace + testenv.Scale(10*time.Second)):
					t.Fatal("Shutdown did not return after its context ended")
				}
				// The subscriber's connection was closed without a response.
				c.SetReadDeadline(time.Now().Add(testenv.Scale(5 * time.Second)))
				b, err := io.ReadAll(br)
				if errors.Is(err, errTimeout) || isTimeout(err) {
					t.Fatalf("the subscriber's connection stays open after Shutdown's deadline (%d bytes)", len(b))
				}
				if resp, _ := http.ReadResponse(bufio.NewReader(strings.NewReader(string(b))), nil); resp != nil && resp.StatusCode == 200 {
					t.Errorf("a 200 came after Shutdown's deadline: %q", b)
				}
				t.Logf("closed after %s; %d bytes came (%q)", time.Since(start).Round(time.Millisecond), len(b), truncate(string(b), 80))
			})
		}
	}
}

var errTimeout = errors.New("timeout")

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
