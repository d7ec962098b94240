# deploy/deploy.mk: included by the top Makefile.

.PHONY: deploy-check dashboard-check failopen-test compose-deps compose-base compose-testbed scale-test

deploy-check: ## validate deploy/: ruleset in a namespace, systemd units, sysctl, alert rules, compose file (root)
	$(GO) test -count=1 -run 'TestRulesetLoads|TestRender|TestRouting|TestRefresh|TestSystemdUnits|TestSysctlConf|TestAlertRules|TestComposeFile|TestDashboardStructure' -v ./deploy/

dashboard-check: ## every query of the Grafana dashboard and the alert rules, evaluated by a real Prometheus scraping a running pepd under traffic (root)
	@$(MAKE) --no-print-directory install-pkgs PKGS='squid prometheus'
	$(GO) test -count=1 -run 'TestDashboard' -v ./deploy/

failopen-test: build ## kill -9 and SIGSTOP pepd while pages load through the TPROXY ruleset; prints recovery times (root)
	$(GO) test -count=1 -run 'TestTPROXYFailsOpen|TestDNSRedirectGuarded|TestUnit|TestFailOpen' -v ./deploy/

# The compose testbed's own Debian packages (the engine, the base image's
# bootstrapper), installed when missing like DEB_PKGS (top Makefile).
COMPOSE_PKGS := docker.io debootstrap docker-compose

compose-deps: ## install docker.io, debootstrap and docker-compose when missing (root)
	@$(MAKE) --no-print-directory deps DEB_PKGS='$(COMPOSE_PKGS)'

compose-base: compose-deps ## build pep/bookworm-base with debootstrap and docker import (root)
	deploy/docker/compose.sh base

# One command on a fresh machine: packages, the base image when missing
# (compose.sh testbed builds it), pep's binaries, the images, the run.
compose-testbed: compose-deps build ## build what is missing (packages, base image, images) and run the compose testbed; prints its report (root)
	deploy/docker/compose.sh testbed

scale-test: deps build ## gateway array in namespaces: director + 2 gateways (pepd, Squid CARP): cross-gateway hit, mode switch, failover, throughput 1 vs 2 gateways (root)
	PEP_SCALE_THROUGHPUT=1 $(GO) test -count=1 -timeout 10m -run 'TestScaleArray|TestScaleFailover|TestScaleThroughput' -v ./deploy/ 2>&1 | \
	  grep -Ev '^\s+supervisor_test.go:[0-9]+: (pepd[0-9]|squid|director):' 
