package httpproxy

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/summerwind/h2spec/config"
	"github.com/summerwind/h2spec/generic"
	"github.com/summerwind/h2spec/hpack"
	"github.com/summerwind/h2spec/http2"
	"github.com/summerwind/h2spec/spec"

	"pep/internal/mode"
	"pep/internal/viptls"
	"pep/internal/viptls/viptlstest"
)

// h2specGaps are the h2spec cases the VIP's HTTP/2 server may fail, each
// with the RFC 9113 section it checks and why it is not closed: Go's own
// HTTP/2 server fails them too (TestH2Spec runs it alone beside pepd), and
// pepd's handler cannot change what the server's framer does. Two that Go's
// server alone fails pepd closes in its own handling, so they are not
// here: 4.2/3 (a HEADERS frame over 16,384 bytes: pepd reads frames up to
// the protocol's initial SETTINGS_MAX_FRAME_SIZE, Go's server up to 1 MiB)
// and 8.1.2.6/1-2 (a Content-Length the DATA frames disagree with, which
// Go's server alone sometimes answers 200 before its reset: pepd reads the
// body before it answers).
var h2specGaps = map[string]string{
	// Go's server closes the connection (PROTOCOL_ERROR) on a SETTINGS
	// frame repeating SETTINGS_INITIAL_WINDOW_SIZE instead of applying the
	// values in order and acknowledging.
	"http2/6.5.3/1": "RFC 9113 §6.5.3: the values of one SETTINGS frame are processed in order; Go's server closes the connection",
	// Go's server answers a request with a connection-specific field (or
	// TE other than "trailers") with its own 400 (http2new400Handler)
	// instead of a PROTOCOL_ERROR stream reset: it is refused and never
	// reaches pepd's handler, nothing is forwarded, but h2spec wants the
	// reset, which no handler can send.
	"http2/8.1.2.2/1": "RFC 9113 §8.2.2: a connection-specific header field makes a request malformed (PROTOCOL_ERROR); Go's server answers 400 before pepd sees it",
	"http2/8.1.2.2/2": "RFC 9113 §8.2.2: TE other than \"trailers\" makes a request malformed (PROTOCOL_ERROR); Go's server answers 400 before pepd sees it",
}

// runH2Spec runs every h2spec case (generic, http2, hpack) against the
// TLS server at addr and returns the IDs of the failed ones
// ("http2/4.2/3"). h2spec cannot be given a CA, so it skips verification
// (it checks framing, not trust).
func runH2Spec(t *testing.T, addr, path string, sections ...string) (failed []string, total int) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	c := &config.Config{Host: host, Port: p, Path: path, Timeout: 3 * time.Second, MaxHeaderLen: 4000, TLS: true, Insecure: true, Sections: sections}
	var walk func(g *spec.TestGroup)
	walk = func(g *spec.TestGroup) {
		for i, tc := range g.Tests {
			if tc.Result == nil {
				continue
			}
			total++
			if tc.Result.Failed {
				failed = append(failed, fmt.Sprintf("%s/%d", g.ID(), i+1))
			}
		}
		for _, sg := range g.Groups {
			walk(sg)
		}
	}
	for _, s := range []*spec.TestGroup{generic.Spec(), http2.Spec(), hpack.Spec()} {
		s.Test(c)
		walk(s)
	}
	return failed, total
}

// TestH2Spec runs the HTTP/2 conformance suite (h2spec) against Go's own
// HTTP/2 server alone (pepd's TLS configuration, Go's default frame size,
// a handler that answers 200) and against the VIP's HTTPS origin (the
// health path through Proxy.ServeHTTP): pepd fails no case Go's server
// passes, and every case it fails is in h2specGaps with its RFC 9113
// section.
func TestH2Spec(t *testing.T) {
	if testing.Short() {
		t.Skip("h2spec takes about a minute")
	}
	ca, err := viptlstest.NewCA("h2spec CA")
	if err != nil {
		t.Fatal(err)
	}
	cf, kf, err := ca.WriteFiles(t.TempDir(), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	st, err := viptls.Load(cf, kf, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Go's server alone.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) }),
		TLSConfig: st.Config(), HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 100, WriteByteTimeout: 30 * time.Second}}
	go gs.ServeTLS(ln, "", "")
	t.Cleanup(func() { gs.Close() })
	goFailed, goTotal := runH2Spec(t, ln.Addr().String(), "/")

	p := startPepd(t, pepdOpts{squid: "127.0.0.1:1", resolver: "127.0.0.1:1", mode: mode.URL, subscribers: []string{"127.0.0.0/8"},
		log: slog.New(slog.DiscardHandler)})
	lt, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lt.Close() })
	go func() {
		for {
			c, err := lt.Accept()
			if err != nil {
				return
			}
			p.Srv.ServeTLS(c, nil, st.Config())
		}
	}()
	pepFailed, pepTotal := runH2Spec(t, lt.Addr().String(), HealthPath)
	t.Logf("h2spec: Go's server alone failed %d of %d: %v", len(goFailed), goTotal, goFailed)
	t.Logf("h2spec: pepd's VIP failed %d of %d: %v", len(pepFailed), pepTotal, pepFailed)
	for _, id := range pepFailed {
		if why, known := h2specGaps[id]; known {
			t.Logf("h2spec %s (known): %s", id, why)
			continue
		}
		// Some cases race the server's own writes against the frames
		// h2spec sends next (8.1.2.6/1 and /2, a Content-Length that
		// disagrees with the DATA: Go's server alone fails each in about
		// one run of six, the one-run fifth failure): run the case
		// three more times against both, and fail on a failure that comes
		// back.
		pepN, goN := 0, 0
		for range 3 {
			if f, _ := runH2Spec(t, lt.Addr().String(), HealthPath, id); len(f) > 0 {
				pepN++
			}
			if f, _ := runH2Spec(t, ln.Addr().String(), "/", id); len(f) > 0 {
				goN++
			}
		}
		switch {
		case pepN >= 2 && goN == 0:
			t.Errorf("h2spec %s: pepd fails a case Go's server passes (again %d of 3 times, Go's server 0)", id, pepN)
		case pepN >= 2:
			t.Errorf("h2spec %s: failed by pepd (again %d of 3 times) and Go's server (%d of 3), not named in h2specGaps", id, pepN, goN)
		default:
			t.Logf("h2spec %s: failed once by pepd, then pepd %d of 3, Go's server %d of 3: a race, not a gap", id, pepN, goN)
		}
	}
}
