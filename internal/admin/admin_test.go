package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"pep/internal/mode"
)

func TestAdmin(t *testing.T) {
	sw := mode.NewSwitch(mode.Off)
	reg := prometheus.NewRegistry()
	if err := RegisterMetrics(reg, sw); err != nil {
		t.Fatal(err)
	}
	healthy := true
	srv := httptest.NewServer(Handler(Options{Mode: sw, Gatherer: reg, Health: func(context.Context) error {
		if healthy {
			return nil
		}
		return errors.New("listener does not answer")
	}}))
	defer srv.Close()
	do := func(method, path, ctype, accept, body string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	cases := []struct {
		name, method, path, ctype, accept, body string
		wantCode                                int
		wantBody                                string
		wantMode                                mode.Mode
	}{
		{"get text", "GET", "/mode", "", "", "", 200, "off\n", mode.Off},
		{"put text", "PUT", "/mode", "text/plain", "", "url\n", 200, "url (was off)\n", mode.URL},
		{"get json", "GET", "/mode", "", "application/json", "", 200, `{"mode":"url"}` + "\n", mode.URL},
		{"put json", "PUT", "/mode", "application/json", "application/json", `{"mode":"dns"}`, 200, `{"mode":"dns","previous":"url"}` + "\n", mode.DNS},
		{"put json without type", "PUT", "/mode", "", "", `{"mode":"off"}`, 200, "off (was dns)\n", mode.Off},
		{"post", "POST", "/mode", "", "", "dns", 200, "dns (was off)\n", mode.DNS},
		{"bad mode", "PUT", "/mode", "text/plain", "", "fast", 400, `mode: "fast" is not one of off, dns, url` + "\n", mode.DNS},
		{"bad json", "PUT", "/mode", "application/json", "", `{"mode":1}`, 400, "admin: body", mode.DNS},
		{"json without mode", "PUT", "/mode", "application/json", "", `{}`, 400, `admin: body has no "mode"` + "\n", mode.DNS},
		{"delete", "DELETE", "/mode", "", "", "", 405, "Method Not Allowed", mode.DNS},
		{"healthz", "GET", "/healthz", "", "", "", 200, "ok\n", mode.DNS},
		{"metrics", "GET", "/metrics", "", "", "", 200, `pep_admin_mode{mode="dns"} 1`, mode.DNS},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := do(c.method, c.path, c.ctype, c.accept, c.body)
			if code != c.wantCode || !strings.Contains(body, c.wantBody) {
				t.Errorf("%s %s: %d %q, want %d containing %q", c.method, c.path, code, body, c.wantCode, c.wantBody)
			}
			if sw.Get() != c.wantMode {
				t.Errorf("mode %v, want %v", sw.Get(), c.wantMode)
			}
		})
	}
	healthy = false
	if code, body := do("GET", "/healthz", "", "", ""); code != 503 || !strings.Contains(body, "listener does not answer") {
		t.Errorf("unhealthy: %d %q", code, body)
	}
}

// TestResetRoutes: DELETE /optimize/results and DELETE /hints call their
// actions once each and answer 200; without the actions the routes do
// not exist (404).
func TestResetRoutes(t *testing.T) {
	var opt, hints int
	with := httptest.NewServer(Handler(Options{Mode: mode.NewSwitch(mode.Off), Gatherer: prometheus.NewRegistry(),
		OptimizeReset: func() { opt++ }, HintsReset: func() { hints++ }}))
	defer with.Close()
	without := httptest.NewServer(Handler(Options{Mode: mode.NewSwitch(mode.Off), Gatherer: prometheus.NewRegistry()}))
	defer without.Close()
	del := func(base, path string) int {
		req, _ := http.NewRequest(http.MethodDelete, base+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := del(with.URL, "/optimize/results"); c != 200 || opt != 1 || hints != 0 {
		t.Errorf("DELETE /optimize/results: %d, optimizer resets %d, hints resets %d; want 200, 1, 0", c, opt, hints)
	}
	if c := del(with.URL, "/hints"); c != 200 || opt != 1 || hints != 1 {
		t.Errorf("DELETE /hints: %d, optimizer resets %d, hints resets %d; want 200, 1, 1", c, opt, hints)
	}
	for _, p := range []string{"/optimize/results", "/hints"} {
		if c := del(without.URL, p); c != http.StatusNotFound && c != http.StatusMethodNotAllowed {
			t.Errorf("DELETE %s without its action: %d, want 404 or 405", p, c)
		}
	}
}
