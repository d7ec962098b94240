# deploy/deploy.mk: included by the top Makefile.

.PHONY: deploy-check failopen-test compose-base compose-testbed scale-test

deploy-check: ## validate deploy/: ruleset in a namespace, systemd units, sysctl, alert rules, compose file (root)
	$(GO) test -count=1 -run 'TestRulesetLoads|TestRender|TestRouting|TestRefresh|TestSystemdUnits|TestSysctlConf|TestAlertRules|TestComposeFile' -v ./deploy/

failopen-test: build ## kill -9 and SIGSTOP pepd while pages load through the TPROXY ruleset; prints recovery times (root)
	$(GO) test -count=1 -run 'TestTPROXYFailsOpen|TestDNSRedirectGuarded|TestUnit|TestFailOpen' -v ./deploy/

compose-base: ## build pep/bookworm-base with debootstrap and docker import (root, docker.io, debootstrap)
	deploy/docker/compose.sh base

compose-testbed: build ## build the compose testbed's images and run a smoke experiment (root, docker.io, docker-compose)
	deploy/docker/compose.sh testbed

scale-test: deps build ## gateway array in namespaces: director + 2 gateways (pepd, Squid CARP): cross-gateway hit, mode switch, failover, throughput 1 vs 2 gateways (root)
	PEP_SCALE_THROUGHPUT=1 $(GO) test -count=1 -timeout 10m -run 'TestScaleArray|TestScaleFailover|TestScaleThroughput' -v ./deploy/ 2>&1 | \
	  grep -Ev '^\s+supervisor_test.go:[0-9]+: (pepd[0-9]|squid|director):' 
