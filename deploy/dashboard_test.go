package deploy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.yaml.in/yaml/v3"

	"pep/internal/squid"
	"pep/internal/testenv"
)

// The dashboard and the alert rules an operator loads (deploy/README.md).
const (
	dashboardFile  = "grafana/pep-dashboard.json"
	alertRulesFile = "prometheus/pep-alerts.yml"
)

// dashboard is the part of a Grafana dashboard model (schema 39) that the
// checks read: panels (rows nest theirs), their targets' PromQL, and the
// template variables.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Annotations   struct {
		List []struct {
			Name string `json:"name"`
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int    `json:"id"`
	Title   string `json:"title"`
	Type    string `json:"type"`
	Panels  []panel
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
}

// query is one PromQL expression an operator's tools evaluate, and where
// it comes from.
type query struct {
	from, expr string
	// alert is set for alerting rules: their comparison filters series
	// out while nothing fires, so the check evaluates it with the bool
	// modifier (every series kept, value 0 or 1).
	alert bool
}

// grafanaVars replaces the dashboard's variables as Grafana would with
// every gateway selected and a 1 m interval.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "5m", "$instance", ".+")

// loadQueries reads every PromQL expression of the dashboard (Grafana's
// interval variables replaced by 1m, $instance by a match-all) and of the
// alert rules.
func loadQueries(t *testing.T) []query {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var qs []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				qs = append(qs, query{from: fmt.Sprintf("dashboard panel %d %q %s", p.ID, p.Title, tg.RefID), expr: grafanaVars.Replace(tg.Expr)})
			}
		}
	}
	walk(d.Panels)
	for _, a := range d.Annotations.List {
		qs = append(qs, query{from: "dashboard annotation " + a.Name, expr: boolComparison(grafanaVars.Replace(a.Expr)), alert: true})
	}
	b, err = os.ReadFile(alertRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("%s: %v", alertRulesFile, err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			qs = append(qs, query{from: "alert " + r.Alert + r.Record, expr: boolComparison(r.Expr), alert: r.Alert != ""})
		}
	}
	return qs
}

// boolComparison adds the bool modifier to every comparison operator at
// the top level of expr (outside parentheses, braces, brackets and
// strings): "a / b > 0.05" becomes "a / b > bool 0.05", so that the
// expression keeps its series while the alert does not fire (PromQL
// comparison binary operators, "bool modifier"); "x == 0 and on (i) up ==
// 1" gets it on both sides of the and.
func boolComparison(expr string) string {
	var out strings.Builder
	depth, quote := 0, byte(0)
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		out.WriteByte(c)
		switch {
		case quote != 0:
			if c == '\\' && i+1 < len(expr) {
				i++
				out.WriteByte(expr[i])
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case c == '(' || c == '{' || c == '[':
			depth++
		case c == ')' || c == '}' || c == ']':
			depth--
		case depth == 0 && strings.IndexByte("<>=!", c) >= 0:
			op := 1
			if i+1 < len(expr) && expr[i+1] == '=' {
				op = 2
			}
			if (c == '=' || c == '!') && op == 1 {
				continue // = and =~ appear only inside braces
			}
			if op == 2 {
				i++
				out.WriteByte('=')
			}
			out.WriteString(" bool")
		}
	}
	return out.String()
}

// seriesName matches the metric names a PromQL expression names: pep's own
// and the two standard ones the rules use.
var seriesName = regexp.MustCompile(`\b(pep_[a-z0-9_]+|process_start_time_seconds|up)\b`)

// TestDashboardNamesExportedSeries: every series name the dashboard and the
// alert rules use is one pepd exports (checked against a running pepd's
// /metrics in TestDashboardQueries; here against the registered names, so
// that a rename fails without root).
func TestDashboardStructure(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q, title %q, schemaVersion %d: want a uid, a title and schema 36 or later", d.UID, d.Title, d.SchemaVersion)
	}
	ids := map[int]bool{}
	var walk func([]panel)
	n := 0
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			if p.Type == "row" {
				continue
			}
			n++
			if len(p.Targets) == 0 {
				t.Errorf("panel %d %q has no query", p.ID, p.Title)
			}
			if p.GridPos.W == 0 || p.GridPos.H == 0 {
				t.Errorf("panel %d %q has no size", p.ID, p.Title)
			}
		}
	}
	walk(d.Panels)
	if n < 10 {
		t.Errorf("%d panels", n)
	}
	for _, q := range loadQueries(t) {
		if !seriesName.MatchString(q.expr) {
			t.Errorf("%s: %q names no series", q.from, q.expr)
		}
	}
	for in, want := range map[string]string{
		`up{job="pepd"} == 0`:                                `up{job="pepd"} == bool 0`,
		`sum(rate(a{x=~"b"}[5m])) / sum(rate(c[5m])) > 0.05`: `sum(rate(a{x=~"b"}[5m])) / sum(rate(c[5m])) > bool 0.05`,
		`changes(p[15m]) >= 2`:                               `changes(p[15m]) >= bool 2`,
		`rate(x[5m])`:                                        `rate(x[5m])`,
		`sum by (i) (rate(c[10m])) == 0 and on (i) up{job="pepd"} == 1`: `sum by (i) (rate(c[10m])) == bool 0 and on (i) up{job="pepd"} == bool 1`,
	} {
		if got := boolComparison(in); got != want {
			t.Errorf("boolComparison(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDashboardQueries runs a real pepd (dns mode, optimizer and admission
// on) and a real Squid in the gateway namespace, sends it a little traffic
// of every kind from the subscriber namespace (HTTP pages, an image twice,
// DNS queries, a TLS splice, a mode switch to url), and a real Prometheus
// (Debian's package) that scrapes pepd every second; then every query of
// the dashboard and of the alert rules must evaluate without error and
// return at least one series.
func TestDashboardQueries(t *testing.T) {
	needRoot(t)
	for _, b := range []string{"squid", "prometheus"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("needs %s (make deps installs it)", b)
		}
	}
	testenv.Log(t)
	tp := newTopo(t)
	photo, err := os.ReadFile("../internal/optimize/testdata/photo.jpg")
	if err != nil {
		t.Fatal(err)
	}
	tp.serveOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Cache-Control", "max-age=60")
			io.WriteString(w, `<html><head><link rel="stylesheet" href="http://www.dash.test/a.css"></head><body><img src="http://img.dash.test/photo.jpg"></body></html>`)
		case "/a.css":
			w.Header().Set("Content-Type", "text/css")
			w.Header().Set("Cache-Control", "max-age=60")
			io.WriteString(w, strings.Repeat("body { margin: 0; }\n", 100))
		case "/photo.jpg":
			w.Header().Set("Content-Type", "image/jpeg")
			w.Header().Set("Cache-Control", "max-age=60")
			w.Write(photo)
		default:
			http.NotFound(w, r)
		}
	}))
	serveDNS(t, tp.origin, "udp", originDNS+":53", originHTTP)
	serveDNS(t, tp.origin, "tcp", originDNS+":53", originHTTP)
	tp.loadRuleset(t, Ruleset)
	// What pep-dns-guard does while pepd answers: DNS is redirected to it.
	tp.gw.exec(t, "nft", "add element ip pep dns_alive { udp timeout 1h, tcp timeout 1h }")
	startSquidWith(t, tp.gw, fmt.Sprintf("pepdash%d", os.Getpid()), func(c *squid.Conf) {
		c.Optimizer = "127.0.0.1:3131"
	})

	dir := t.TempDir()
	cfg := filepath.Join(dir, "pepd.yaml")
	y := fmt.Sprintf(`mode: dns
vip: %s
subscribers: [198.18.0.0/24]
resolvers: ["%s:53"]
squid: 127.0.0.1:3128
squid_proxy_protocol: true
listen:
  http: ":3129"
  tproxy: ":%d"
  tls: ":3443"
  dns: ":%d"
  admin: "127.0.0.1:9090"
optimize:
  enabled: true
  listen: "127.0.0.1:3131"
  deadline: 10s
cache:
  admission: second-hit
dns:
  rewrite_domains: ["*"]
`, testVIP, originDNS, tproxyPort, dnsPort)
	if err := os.WriteFile(cfg, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pepd := tp.gw.command(ctx, buildBinary(t, t.TempDir(), "./cmd/pepd"), "-config", cfg)
	pepd.Stdout, pepd.Stderr = tlogWriter{t, "pepd"}, tlogWriter{t, "pepd"}
	if err := pepd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); pepd.Wait() })
	gwHTTP := &http.Client{Timeout: testenv.Scale(10 * time.Second), Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = tp.gw.do(func() (err error) { c, err = (&net.Dialer{}).DialContext(ctx, network, addr); return err })
			return c, err
		}}}
	waitFor(t, "pepd's admin API", testenv.Scale(30*time.Second), func() error {
		_, err := get(gwHTTP, "http://127.0.0.1:9090/mode")
		return err
	})

	// A little traffic of every kind, from the subscriber.
	client := tp.clientHTTP(testenv.Scale(20 * time.Second))
	fetch := func(host, path, accept string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+originHTTP+path, nil)
		req.Host = host
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s%s: %v", host, path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	query := func(name string) {
		t.Helper()
		var c dns.Client
		var err error
		tp.client.do(func() error {
			_, _, err = c.Exchange(new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA), originDNS+":53")
			return nil
		})
		if err != nil {
			t.Fatalf("DNS %s: %v", name, err)
		}
	}
	query("www.pepdash.test") // a special-use name (RFC 6761): passed unchanged
	for i := 0; i < 3; i++ {
		query(fmt.Sprintf("www%d.pepdash.net", i)) // not a special-use name: rewritten
		fetch("www.dash.test", "/", "")
		fetch("www.dash.test", "/a.css", "")
		fetch("img.dash.test", "/photo.jpg", "image/webp,*/*")
		fetch("www.dash.test", "/missing", "")
	}
	// A TLS ClientHello to the VIP: spliced by SNI to the origin, where
	// nothing listens on 443 (a splice and a reset).
	tp.client.do(func() error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: testenv.Scale(5 * time.Second)}, "tcp", testVIP+":443",
			&tls.Config{ServerName: "www.dash.test", InsecureSkipVerify: true}) //nolint:gosec // the handshake is meant to fail
		if err == nil {
			c.Close()
		}
		return nil
	})
	req, _ := http.NewRequest(http.MethodPut, "http://127.0.0.1:9090/mode", strings.NewReader("url"))
	if resp, err := gwHTTP.Do(req); err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("PUT /mode url: %v %v", resp, err)
	}
	fetch("www.dash.test", "/", "")
	fetch(testVIP, "/www.dash.test/a.css", "")

	metrics, err := get(gwHTTP, "http://127.0.0.1:9090/metrics")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(os.TempDir(), "pep-dashboard-metrics.txt"), []byte(metrics), 0o644)

	// Prometheus in the gateway namespace, scraping pepd every second.
	pdir := t.TempDir()
	rules, _ := filepath.Abs(alertRulesFile)
	pcfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [%q]\nscrape_configs:\n  - job_name: pepd\n    static_configs:\n      - targets: [\"127.0.0.1:9090\"]\n", rules)
	os.WriteFile(filepath.Join(pdir, "prometheus.yml"), []byte(pcfg), 0o644)
	prom := tp.gw.command(ctx, "prometheus", "--config.file="+filepath.Join(pdir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(pdir, "data"), "--web.listen-address=127.0.0.1:19090")
	prom.Stdout, prom.Stderr = tlogWriter{t, "prometheus"}, tlogWriter{t, "prometheus"}
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prom.Process.Kill(); prom.Wait() })
	promQuery := func(expr string) (n int, err error) {
		body, err := get(gwHTTP, "http://127.0.0.1:19090/api/v1/query?query="+url.QueryEscape(expr))
		if err != nil {
			return 0, fmt.Errorf("%v: %s", err, body)
		}
		var r struct {
			Status, Error string
			Data          struct{ Result []json.RawMessage }
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			return 0, err
		}
		if r.Status != "success" {
			return 0, fmt.Errorf("%s", r.Error)
		}
		return len(r.Data.Result), nil
	}
	// Five scrapes at least: rate() and changes() need two samples.
	waitFor(t, "five scrapes of pepd", testenv.Scale(60*time.Second), func() error {
		n, err := promQuery(`count_over_time(up{job="pepd"}[1m]) >= 5`)
		if err == nil && n == 0 {
			err = fmt.Errorf("fewer than 5 scrapes")
		}
		return err
	})
	var failed []string
	for _, q := range loadQueries(t) {
		n, err := promQuery(q.expr)
		switch {
		case err != nil:
			failed = append(failed, fmt.Sprintf("%s: %s: %v", q.from, q.expr, err))
		case n == 0:
			failed = append(failed, fmt.Sprintf("%s: %s: no series", q.from, q.expr))
		}
	}
	sort.Strings(failed)
	for _, f := range failed {
		t.Error(f)
	}
	// Every series name the queries use is one pepd exports.
	for _, q := range loadQueries(t) {
		for _, name := range seriesName.FindAllString(q.expr, -1) {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
			if name != "up" && !strings.Contains(metrics, "\n"+name) && !strings.Contains(metrics, "# TYPE "+base+" ") {
				t.Errorf("%s: series %s is not in pepd's /metrics", q.from, name)
			}
		}
	}
}

// waitFor polls cond every 100 ms until it returns nil or within passes.
func waitFor(t *testing.T, what string, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
