package run

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"pep/testbed/topo"
)

// Targets of CacheTests: what the suite's requests go through.
const (
	// TargetSquid is Squid alone: gw redirects the subscriber's port 80 to
	// Squid's intercept port (SquidIntercept).
	TargetSquid = "squid"
	// TargetPepd is pepd (mode off, optimizer off) in front of the same
	// Squid: gw redirects port 80 to pepd, as in the testbed's off mode.
	TargetPepd = "pepd+squid"
)

// SquidIntercept is Squid's intercept port in gw for CacheTests' Squid-alone
// target (http_port N intercept).
const SquidIntercept = 3130

// CacheTestsOptions are the inputs of CacheTests.
type CacheTestsOptions struct {
	// Suite is a checkout of the HTTP caching test suite
	// (https://github.com/http-tests/cache-tests): test-engine/cli.mjs and
	// test-engine/server/server.mjs are below it. The project keeps none of
	// its code; the suite runs with Node.js as its README says (no npm
	// install is needed for the server and the command-line client).
	Suite string
	// Bin is the folder of pepd and pepctl ("": the executable's folder).
	Bin string
	// Logs is the folder for the processes' logs and each target's raw
	// results (cache-tests-<target>.json).
	Logs string
}

// CacheTestResult is one test's outcome on one target, from the suite's
// results JSON: true is a pass, else [class, detail].
type CacheTestResult struct {
	Pass bool `json:"pass"`
	// Class is "" for a pass, else the suite's class: "Assertion" (the
	// cache behaved otherwise), "Setup" (a precondition failed, e.g. a
	// response was not cached when the test needs it to be), "AbortError"
	// (timeout), ...
	Class  string `json:"class,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// CacheTestsReport is the suite's outcome through Squid alone and through
// pepd+Squid, one Squid and one configuration for both.
type CacheTestsReport struct {
	Suite  string `json:"suite"`  // the checkout's path
	Commit string `json:"commit"` // its git commit ("" if not a git checkout)
	// Kinds maps a test id to its kind in the suite: required, optimal or
	// check (a check reports a behaviour, neither pass nor fail).
	Kinds map[string]string `json:"kinds"`
	// Results maps a target (TargetSquid, TargetPepd) to test id to result.
	Results map[string]map[string]CacheTestResult `json:"results"`
	// Seconds is each target's run time in seconds.
	Seconds map[string]float64 `json:"seconds"`
	// PepdRequests is how many requests pepd answered during each target's
	// run (pep_http_requests_total): 0 for Squid alone, the suite's
	// requests for pepd+Squid. CacheTests fails when it is otherwise, so a
	// redirect that missed cannot pass for a result.
	PepdRequests map[string]float64 `json:"pepd_requests"`
}

// CacheTests runs the HTTP caching test suite against Squid alone and
// against pepd+Squid (issue 12): a testbed without link emulation (mn, gw,
// core; the radio namespace bridges), the suite's server on an origin
// address in core (port 80), the testbed's Squid in gw with its
// configuration but without the optimizer parent and with an intercept
// port, pepd in mode off in front of it, and the suite's client in mn, so
// that the server is never on pepd's or Squid's own address. The suite runs
// once per target, gw's nftables redirecting port 80 to Squid, then to
// pepd. Errors: the suite or node missing, the testbed failing to start,
// the client failing or printing no JSON.
func CacheTests(ctx context.Context, o CacheTestsOptions, log *slog.Logger) (rep *CacheTestsReport, err error) {
	cli := filepath.Join(o.Suite, "test-engine", "cli.mjs")
	server := filepath.Join(o.Suite, "test-engine", "server", "server.mjs")
	for _, f := range []string{cli, server} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("run: cache-tests: %s is not a checkout of github.com/http-tests/cache-tests: %w", o.Suite, err)
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		return nil, fmt.Errorf("run: cache-tests: %w (apt-get install -y nodejs)", err)
	}
	rep = &CacheTestsReport{Suite: o.Suite, Results: map[string]map[string]CacheTestResult{}, Seconds: map[string]float64{}, PepdRequests: map[string]float64{}}
	if out, err := exec.CommandContext(ctx, "git", "-C", o.Suite, "rev-parse", "HEAD").Output(); err == nil {
		rep.Commit = strings.TrimSpace(string(out))
	}
	if rep.Kinds, err = suiteKinds(ctx, o.Suite); err != nil {
		return nil, err
	}

	tc := topo.Default()
	b := &Bed{logs: o.Logs, log: log, mode: "direct"}
	defer func() {
		if cerr := b.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if b.work, err = os.MkdirTemp("", tc.Prefix+"-"); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	if err := os.Chmod(b.work, 0o755); err != nil { // Squid drops privileges
		return nil, fmt.Errorf("run: %w", err)
	}
	if b.Topo, err = topo.Up(ctx, tc, true, log); err != nil {
		return nil, err
	}
	origin := tc.Origins.Addr().Next().String() // 198.19.0.1, local in core
	srv, err := b.Topo.Start("cache-tests-server", tc.CoreNS(), filepath.Join(o.Logs, "cache-tests-server.log"),
		"env", "npm_package_config_protocol=http", "npm_package_config_port=80",
		"npm_package_config_pidfile="+filepath.Join(b.work, "cache-tests-server.pid"), "node", server)
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, srv, "cache-tests server", func() error {
		return topo.Do(tc.CoreNS(), func() error {
			c, err := net.DialTimeout("tcp4", net.JoinHostPort(origin, "80"), 200*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
	}); err != nil {
		return nil, err
	}
	if b.squid, err = newSquid(b, squidOptions{noOptimizer: true, interceptPort: SquidIntercept}); err != nil {
		return nil, err
	}
	if err := b.squid.start(ctx, true); err != nil {
		return nil, err
	}
	if b.pep, err = startPEP(ctx, b, o.Bin, PepdSettings{}); err != nil {
		return nil, err
	}

	for _, t := range []struct {
		name string
		port int
	}{{TargetSquid, SquidIntercept}, {TargetPepd, PepdHTTPPort}} {
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", tc.GWNS(), "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(ruleset(tc, "off", t.port, false))
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("run: cache-tests: nft for %s: %w: %s", t.name, err, bytes.TrimSpace(out))
		}
		if t.name == TargetPepd {
			if err := b.pep.setMode(ctx, "off"); err != nil {
				return nil, err
			}
		}
		before, err := b.pep.requests()
		if err != nil {
			return nil, err
		}
		log.Info("cache-tests: running the suite", "target", t.name, "base", "http://"+origin)
		start := time.Now()
		res, err := runSuite(ctx, tc.MNNS(), cli, o.Suite, "http://"+origin, filepath.Join(o.Logs, "cache-tests-"+strings.ReplaceAll(t.name, "+", "-")+".json"))
		if err != nil {
			return nil, fmt.Errorf("run: cache-tests: %s: %w", t.name, err)
		}
		rep.Seconds[t.name] = time.Since(start).Seconds()
		rep.Results[t.name] = res
		after, err := b.pep.requests()
		if err != nil {
			return nil, err
		}
		rep.PepdRequests[t.name] = after - before
		if through := after > before; through != (t.name == TargetPepd) {
			return nil, fmt.Errorf("run: cache-tests: %s: pepd answered %.0f requests: the redirect to port %d did not take the suite's requests where it should", t.name, after-before, t.port)
		}
		log.Info("cache-tests: done", "target", t.name, "tests", len(res), "seconds", rep.Seconds[t.name])
	}
	return rep, nil
}

// requests returns pepd's pep_http_requests_total summed over its labels,
// from the admin API's /metrics.
func (p *pep) requests() (float64, error) {
	body, err := p.adminPath(http.MethodGet, "/metrics", "")
	if err != nil {
		return 0, err
	}
	var n float64
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, "pep_http_requests_total{") {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err != nil {
			return 0, fmt.Errorf("run: pepd /metrics: %q: %w", l, err)
		}
		n += v
	}
	return n, nil
}

// suiteKinds asks the suite itself (tests/index.mjs, with node) for each
// test's kind; a test without one is required, as the suite's
// determineTestResult has it.
func suiteKinds(ctx context.Context, suite string) (map[string]string, error) {
	const script = `const { default: suites } = await import(process.argv[1]);
const k = {};
for (const s of suites) for (const t of s.tests) k[t.id] = t.kind || 'required';
console.log(JSON.stringify(k));`
	index, err := filepath.Abs(filepath.Join(suite, "tests", "index.mjs"))
	if err != nil {
		return nil, fmt.Errorf("run: cache-tests: %w", err)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "node", "--input-type=module", "-e", script, "file://"+index)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("run: cache-tests: reading the suite's tests: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	k := map[string]string{}
	if err := json.Unmarshal(out, &k); err != nil {
		return nil, fmt.Errorf("run: cache-tests: reading the suite's tests: %w", err)
	}
	return k, nil
}

// runSuite runs the suite's command-line client in namespace ns against
// base and parses its results JSON, which it also writes to raw.
func runSuite(ctx context.Context, ns, cli, dir, base, raw string) (map[string]CacheTestResult, error) {
	var stderr bytes.Buffer
	// npm_package_config_* are what `npm run cli --base=...` would set.
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "env",
		"npm_package_config_base="+base, "npm_package_config_id=", "node", "--no-warnings", cli)
	cmd.Dir = dir
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("suite client: %w: %s", err, tail(stderr.Bytes(), 2000))
	}
	if err := os.WriteFile(raw, out, 0o644); err != nil {
		return nil, err
	}
	return parseSuiteResults(out)
}

// parseSuiteResults reads the client's results JSON: test id to true (a
// pass), false, or [class, detail].
func parseSuiteResults(b []byte) (map[string]CacheTestResult, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("suite client printed no results JSON: %w: %s", err, tail(b, 500))
	}
	res := make(map[string]CacheTestResult, len(m))
	for id, v := range m {
		var pass bool
		if json.Unmarshal(v, &pass) == nil {
			r := CacheTestResult{Pass: pass}
			if !pass {
				r.Class = "false"
			}
			res[id] = r
			continue
		}
		var a []any
		if err := json.Unmarshal(v, &a); err != nil {
			return nil, fmt.Errorf("suite result of %s: %w", id, err)
		}
		r := CacheTestResult{Class: "Error"}
		if len(a) > 0 {
			r.Class = fmt.Sprint(a[0])
		}
		if len(a) > 1 {
			r.Detail = fmt.Sprint(a[1])
		}
		res[id] = r
	}
	return res, nil
}

// tail returns the last n bytes of b as a string.
func tail(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Failed reports a failure the suite counts as one: neither a pass nor a
// failed precondition ("Setup": the suite's setup_fail, e.g. a response
// that had to come from the cache did not) nor a harness failure
// ("AbortError": its 10 s request timeout; false). Those two say the test
// could not judge the cache, and they vary from run to run on a loaded
// machine for Squid alone as well (testbed/README.md).
func (c CacheTestResult) Failed() bool {
	switch c.Class {
	case "", "Setup", "AbortError", "false":
		return false
	}
	return !c.Pass
}

// Regressions returns the ids of the tests that Squid alone passes and
// that fail through pepd+Squid (Failed), sorted: none is the acceptance of
// issue 12.
func (r *CacheTestsReport) Regressions() []string {
	return r.differ(TargetSquid, TargetPepd, true)
}

// Inconclusive returns the ids of the tests that Squid alone passes and
// that could not judge pepd+Squid (a Setup or harness failure), sorted.
func (r *CacheTestsReport) Inconclusive() []string {
	return r.differ(TargetSquid, TargetPepd, false)
}

// Gains returns the ids of the tests that pepd+Squid passes and Squid alone
// fails or could not judge, sorted.
func (r *CacheTestsReport) Gains() []string {
	return append(r.differ(TargetPepd, TargetSquid, true), r.differ(TargetPepd, TargetSquid, false)...)
}

// differ lists the tests that target a passes and b does not: with failed,
// those b fails (Failed), else those b could not judge.
func (r *CacheTestsReport) differ(a, b string, failed bool) []string {
	var ids []string
	for id, ra := range r.Results[a] {
		rb := r.Results[b][id]
		if ra.Pass && !rb.Pass && rb.Failed() == failed {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// WriteMarkdown writes the counts per kind (tests run, passed through each
// target; for checks, "yes" answers) and the tests whose outcome differs,
// with the failing side's class and detail.
func (r *CacheTestsReport) WriteMarkdown(w io.Writer) {
	commit := r.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	fmt.Fprintf(w, "# HTTP caching test suite: Squid alone and pepd+Squid\n\n")
	fmt.Fprintf(w, "Suite: %s (commit %s). One Squid, one configuration (configs/squid.conf as the testbed renders it, no optimizer parent); pepd in mode off. Run time: Squid alone %.0f s, pepd+Squid %.0f s; requests pepd answered: %.0f and %.0f.\n\n",
		r.Suite, commit, r.Seconds[TargetSquid], r.Seconds[TargetPepd], r.PepdRequests[TargetSquid], r.PepdRequests[TargetPepd])
	fmt.Fprintf(w, "| kind | tests | passed, Squid alone | passed, pepd+Squid |\n|---|---:|---:|---:|\n")
	type count struct{ n, squid, pepd int }
	counts := map[string]*count{}
	all := &count{}
	for id, rs := range r.Results[TargetSquid] {
		k := r.Kinds[id]
		if k == "" {
			k = "required"
		}
		if counts[k] == nil {
			counts[k] = &count{}
		}
		for _, c := range []*count{counts[k], all} {
			c.n++
			if rs.Pass {
				c.squid++
			}
			if r.Results[TargetPepd][id].Pass {
				c.pepd++
			}
		}
	}
	for _, k := range []string{"required", "optimal", "check"} {
		if c := counts[k]; c != nil {
			label := k
			if k == "check" {
				label = "check (passed: yes)"
			}
			fmt.Fprintf(w, "| %s | %d | %d | %d |\n", label, c.n, c.squid, c.pepd)
		}
	}
	fmt.Fprintf(w, "| all | %d | %d | %d |\n\n", all.n, all.squid, all.pepd)
	list := func(title string, ids []string, failing string) {
		fmt.Fprintf(w, "%s: %d\n\n", title, len(ids))
		for _, id := range ids {
			f := r.Results[failing][id]
			fmt.Fprintf(w, "- `%s` (%s): %s %s\n", id, r.Kinds[id], f.Class, f.Detail)
		}
		if len(ids) > 0 {
			fmt.Fprintln(w)
		}
	}
	list("Passed by Squid alone, failed through pepd+Squid", r.Regressions(), TargetPepd)
	list("Passed by Squid alone, not judged through pepd+Squid (Setup or harness failure, the suite's setup_fail and harness_fail: not failures)", r.Inconclusive(), TargetPepd)
	list("Passed through pepd+Squid, failed or not judged by Squid alone", r.Gains(), TargetSquid)
}
