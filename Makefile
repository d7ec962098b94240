# pep: carrier-side performance enhancing proxy. `make help` lists the targets.
#
# The two commands a new user runs (README.md):
#   make testbed   the experiment (embedded default pages, or CORPUS=...)
#   make test      every test, installing the Debian packages it needs

SHELL      := /bin/bash
GO         ?= go
BIN        := bin
GOFLAGS    ?=
export GOFLAGS

# Debian packages the build needs (pepd's image optimizer links libvips,
# internal/optimize); installed when missing.
BUILD_PKGS := gcc pkg-config libvips-dev
# Debian packages the tests and the testbed need; installed when missing
# (webp: cwebp, the optimizer benchmark's peer; python3-skimage: SSIM for
# make optimize-quality; curl: the glibc resolver check of
# internal/dnsproxy; systemd: systemd-analyze for deploy's TestSystemdUnits;
# libnss3-tools: certutil, the testbed browser's trust store for the VIP's CA;
# nghttp2-client: h2load, the HTTP/2 rows of BenchmarkCachedRequestCPU).
DEB_PKGS := $(BUILD_PKGS) squid dnsmasq dnsutils chromium nftables iproute2 iptables ethtool \
            dnsperf wrk procps ca-certificates docker-compose prometheus haproxy \
            webp python3-skimage python3-pil curl systemd libnss3-tools nghttp2-client

.PHONY: help build build-deps install-pkgs test test-unit test-egress deps vet fmt clean bench bench-h2 soak

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sort | \
	  awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

build: build-deps ## build bin/pepd, bin/pepctl and the testbed tools
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...

# deps: policy-rc.d exit 101 keeps the packages from starting their own squid
# and dnsmasq during install; the tests and the testbed run their own.
deps: ## install the Debian packages the tests and the testbed need (root)
	@$(MAKE) --no-print-directory install-pkgs PKGS='$(DEB_PKGS)'

build-deps: ## install the Debian packages the build needs (root)
	@$(MAKE) --no-print-directory install-pkgs PKGS='$(BUILD_PKGS)'

install-pkgs:
	@missing=""; for p in $(PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "deps: installing$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then echo "deps: not root, cannot install$$missing" >&2; exit 1; fi; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  rcd=""; if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; rcd=1; fi; \
	  { apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends $$missing >/tmp/pep-apt.log 2>&1 || \
	    { apt-get -o DPkg::Lock::Timeout=600 update -q >>/tmp/pep-apt.log 2>&1 && apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends $$missing >>/tmp/pep-apt.log 2>&1; }; }; rc=$$?; \
	  [ -n "$$rcd" ] && rm -f /usr/sbin/policy-rc.d; \
	  if [ $$rc != 0 ]; then tail -20 /tmp/pep-apt.log >&2; exit 1; fi; \
	fi

vet: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

# The packages whose tests run real Squids, dnsmasq, Chromium, namespaces
# with emulated links or timing-sensitive calibration: two of them at once
# overload 2 cores (issue 24), so test-unit runs them one at a time (-p 1)
# after the others, which go test runs in parallel as usual.
HEAVY_PKGS := pep/deploy pep/internal/dnsproxy pep/internal/httpproxy pep/netem pep/netem/calibrate \
              pep/testbed pep/testbed/browser pep/testbed/origin pep/testbed/run pep/testbed/topo

test-unit: ## go test ./... (root runs the namespace, Squid, dnsmasq and Chromium tests too; the heavy packages one at a time)
	@st=0; set -x; \
	$(GO) test -count=1 -timeout 30m $$($(GO) list ./... | grep -vxF $(foreach p,$(HEAVY_PKGS),-e $(p))) || st=1; \
	$(GO) test -count=1 -p 1 -timeout 30m $(HEAVY_PKGS) || st=1; \
	exit $$st

test: deps vet build test-unit ## every test: unit, integration (real Squid, dnsmasq, Chromium, namespaces), a 60 s soak
	@$(MAKE) --no-print-directory soak SOAK_DURATION=60s SOAK_TIMEOUT=10m

# test-egress: test-unit in a network namespace of its own whose only way
# off the machine is a veth with nothing behind it
# (internal/testenv/egress.sh): nftables records every TCP or UDP packet
# sent there, and the target fails if there is one. Test binaries are built
# first, outside; inside, Go may not download (GOPROXY=off). One package:
# sh internal/testenv/egress.sh go test ./x/
test-egress: deps build ## test-unit where nothing can leave the machine; fails if a test sent a TCP/UDP packet off loopback and its own namespaces (root)
	$(GO) test -count=1 -run '^$$' ./... >/dev/null
	GOPROXY=off GOTOOLCHAIN=local sh internal/testenv/egress.sh $(MAKE) --no-print-directory test-unit

bench: ## Go benchmarks (rewriter, DNS, emulator, HTTP path)
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./...

# bench-h2: internal/httpproxy BenchmarkH2CPU (issue 25): pepd's CPU per
# cached request over HTTP/2 with TLS to the VIP against the HTTP/1.1
# relay, on the same Squid hits, h2load for every phase (8 requests in
# flight, connections kept), p99 latency, and HAProxy in pepd's place (the
# C peer: plain HTTP/1.1, HTTP/1.1 over TLS, HTTP/2); BENCH_H2_ROUNDS rounds of
# BENCH_H2_SECONDS per phase; BENCH_H2_PERF=1 adds system calls per request
# (perf stat, root).
BENCH_H2_ROUNDS  ?= 5
BENCH_H2_SECONDS ?= 3
BENCH_H2_PERF    ?= 0

bench-h2: ## CPU per request and p99, HTTP/2 over TLS to the VIP against the HTTP/1.1 relay and HAProxy as the VIP (h2load; BENCH_H2_ROUNDS=5)
	@$(MAKE) --no-print-directory install-pkgs PKGS='squid nghttp2-client haproxy'
	PEP_BENCH_ROUNDS=$(BENCH_H2_ROUNDS) PEP_BENCH_SECONDS=$(BENCH_H2_SECONDS) PEP_BENCH_PERF=$(BENCH_H2_PERF) \
	  $(GO) test -count=1 -run '^$$' -bench '^BenchmarkH2CPU$$' -benchtime 1x -timeout 30m ./internal/httpproxy/

# soak: internal/httpproxy TestSoak (skipped unless PEP_SOAK is set: make
# test runs it for 60 s after the unit tests): 10,000 kept-alive connections through pepd and a
# real Squid for SOAK_DURATION with slow readers and slowloris mixed in;
# prints the samples (RSS, open files, latency). Root: it raises
# RLIMIT_NOFILE for about 35,000 open files. CI: make soak SOAK_DURATION=60s.
SOAK_DURATION ?= 10m
SOAK_TIMEOUT  ?= 2h

soak: ## soak test: 10,000 connections through pepd+Squid, slow readers, slowloris (SOAK_DURATION=10m; CI 60s; root)
	@$(MAKE) --no-print-directory install-pkgs PKGS='squid'
	PEP_SOAK=$(SOAK_DURATION) $(GO) test -count=1 -v -timeout $(SOAK_TIMEOUT) -run '^TestSoak$$' ./internal/httpproxy/

clean: ## remove build output
	rm -rf $(BIN)

-include netem/netem.mk
-include testbed/testbed.mk
-include deploy/deploy.mk
