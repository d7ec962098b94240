# testbed.mk: the paper's experiment (testbed/README.md). Included by the top
# Makefile. Variables (make testbed CORPUS=... PROFILE=...):
#   CORPUS   default (embedded: the paper's Yahoo, CNN, Britannica), a tp5n
#            .tar.gz or folder, a .warc[.gz] or a folder of them
#   PROFILE  netem profiles, comma-separated (default: the paper's two cells)
#   MODES    direct,off,dns,url
#   OPTIMIZE off,on: every mode but direct also with pepd's optimizer on
#            (url+opt, ...); "off" for the paper's four modes only
#   RUNS     runs per mode (a fresh browser, a cold Squid each)
#   PAGES    "" (all), N (the first N) or a comma-separated list of names
#   OUT      output folder (results.json, report.md, plots, logs)
#   TESTBED_FLAGS  more flags for `testbed run` (-har, -warm, -resolver system,
#            -unpartitioned, -wired PROFILE, -parallel N, ...)

CORPUS        ?= default
PROFILE       ?= paper-average,paper-congested
MODES         ?= direct,off,dns,url
OPTIMIZE      ?= off,on
RUNS          ?= 3
PAGES         ?=
OUT           ?= testbed-out
TESTBED_FLAGS ?= -parallel 6

.PHONY: testbed testbed-report testbed-smoke testbed-clean optimize-quality cache-trace cache-tests

# make cache-trace: the tp5n corpus (shared/ beside the repository) and the
# page views of the trace (internal/cachepolicy/README.md).
CACHE_TRACE_CORPUS ?= ../shared/corpus/tp5n.tar.gz
CACHE_TRACE_VIEWS  ?= 20000
# memory tier sizes in MB, comma-separated: one second-hit run per size
CACHE_TRACE_TIER_MB ?= 1024

testbed: deps build ## run the paper's experiment (CORPUS= PROFILE= MODES= RUNS= PAGES= OUT=), print OUT/report.md
	$(BIN)/testbed run -corpus '$(CORPUS)' -profile '$(PROFILE)' -modes '$(MODES)' -optimize '$(OPTIMIZE)' -runs $(RUNS) \
	  -pages '$(PAGES)' -out '$(OUT)' $(TESTBED_FLAGS)

testbed-report: build ## regenerate OUT/report.md and the plots from OUT/results.json
	$(BIN)/testbed report -in '$(OUT)'

testbed-smoke: deps build ## the testbed smoke test: a few tp5n pages, fast profile, four modes (root)
	$(GO) test -count=1 -run 'TestSmoke' -v ./testbed/

testbed-clean: build ## remove namespaces and files left by killed testbed runs
	$(BIN)/testbed clean

QUALITIES ?= 0,75
# RULES: more settings (testbed quality -rules), e.g. the trade-off curve
# RULES='t0.93,t0.90,t0.95/f0,t0.93/f0,t0.90/f0,t0.95/f0.90/avif'; SAMPLE=N
# measures N distinct images drawn with SEED (0: all).
RULES ?=
SAMPLE ?= 0
SEED ?= 1

optimize-quality: deps build ## the optimizer's image quality report over the default pages and tp5n: SSIM, bytes and CPU of pepd's per-image SSIM target (0) against the fixed rule at each quality (QUALITIES=, RULES=, SAMPLE=, SEED=, OUT=)
	$(BIN)/testbed quality -q '$(QUALITIES)' -rules '$(RULES)' -sample $(SAMPLE) -seed $(SEED) -out '$(OUT)/quality'

cache-trace: deps ## replay a tp5n browsing trace (Zipf pages, fixed seed) through pepd+Squid: admission off, second-hit, second-hit + memory tier (CACHE_TRACE_TIER_MB): disk writes, hit ratios, origin bytes (root)
	set -o pipefail; PEP_CACHE_TRACE='$(abspath $(CACHE_TRACE_CORPUS))' PEP_CACHE_TRACE_VIEWS=$(CACHE_TRACE_VIEWS) PEP_CACHE_TRACE_TIER_MB=$(CACHE_TRACE_TIER_MB) \
	  $(GO) test -count=1 -timeout 90m -run '^TestCacheTrace$$' -v ./internal/httpproxy/ 2>&1 | \
	  grep -E 'cachetrace_test|^(--- |ok|FAIL|panic)'

# make cache-tests CACHE_TESTS=DIR: DIR is a checkout of the HTTP caching test
# suite (git clone https://github.com/http-tests/cache-tests; not on npm, and
# the project keeps none of its code). Node.js runs it (installed here).
CACHE_TESTS ?=

cache-tests: deps build ## the HTTP caching test suite (CACHE_TESTS=checkout) against Squid alone and pepd+Squid, same Squid and config: both counts; fails on a test only Squid alone passes (root)
	@test -n '$(CACHE_TESTS)' || { echo "cache-tests: set CACHE_TESTS to a checkout of https://github.com/http-tests/cache-tests" >&2; exit 2; }
	@$(MAKE) --no-print-directory install-pkgs PKGS='nodejs'
	$(BIN)/testbed cache-tests -suite '$(abspath $(CACHE_TESTS))' -out '$(OUT)/cache-tests'
