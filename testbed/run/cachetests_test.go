package run

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// Results as the suite's client printed them (cache-tests b55b8bd, make
// cache-tests on this project's testbed): a pass is true, a failure
// [class, detail].
const (
	suiteSquid = `{
  "age-parse-float": ["Assertion", "Response 2 does not come from cache"],
  "cc-resp-no-store": true,
  "freshness-max-age": ["AbortError", "This operation was aborted"],
  "vary-normalise-combine": true,
  "304-etag-update-response-Test-Header": true
}`
	suitePepd = `{
  "age-parse-float": ["Assertion", "Response 2 does not come from cache"],
  "cc-resp-no-store": true,
  "freshness-max-age": true,
  "vary-normalise-combine": ["Assertion", "Response 2 comes from cache"],
  "304-etag-update-response-Test-Header": ["Setup", "Response 3 does not come from cache"]
}`
)

func TestCacheTestsReport(t *testing.T) {
	sq, err := parseSuiteResults([]byte(suiteSquid))
	if err != nil {
		t.Fatal(err)
	}
	pe, err := parseSuiteResults([]byte(suitePepd))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sq["freshness-max-age"], (CacheTestResult{Class: "AbortError", Detail: "This operation was aborted"}); got != want {
		t.Errorf("freshness-max-age = %+v, want %+v", got, want)
	}
	if !sq["cc-resp-no-store"].Pass || sq["age-parse-float"].Pass {
		t.Errorf("pass flags wrong: %+v", sq)
	}
	r := &CacheTestsReport{
		Kinds: map[string]string{"age-parse-float": "required", "cc-resp-no-store": "required", "freshness-max-age": "optimal",
			"vary-normalise-combine": "optimal", "304-etag-update-response-Test-Header": "required"},
		Results: map[string]map[string]CacheTestResult{TargetSquid: sq, TargetPepd: pe},
	}
	if got := r.Regressions(); !reflect.DeepEqual(got, []string{"vary-normalise-combine"}) {
		t.Errorf("Regressions = %v", got)
	}
	if got := r.Inconclusive(); !reflect.DeepEqual(got, []string{"304-etag-update-response-Test-Header"}) {
		t.Errorf("Inconclusive = %v", got)
	}
	if got := r.Gains(); !reflect.DeepEqual(got, []string{"freshness-max-age"}) {
		t.Errorf("Gains = %v", got)
	}
	var md bytes.Buffer
	r.WriteMarkdown(&md)
	for _, want := range []string{"| required | 3 | 2 | 1 |", "| optimal | 2 | 1 | 1 |", "| all | 5 | 3 | 2 |",
		"failed through pepd+Squid: 1", "- `vary-normalise-combine` (optimal): Assertion Response 2 comes from cache"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, md.String())
		}
	}
	if _, err := parseSuiteResults([]byte("Running undefined\n")); err == nil {
		t.Error("parseSuiteResults took output without JSON")
	}
}
