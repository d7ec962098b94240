# netem/netem.mk: the radio-link emulator's targets, included by the top
# Makefile ("include netem/netem.mk"). Every target needs root (network
# namespaces, AF_PACKET); see netem/README.md.

# Debian packages the netem tests and the tc backend use.
NETEM_DEB_PACKAGES := iproute2

# The calibration subset for "make test". It also runs inside
# "go test ./netem/..." as TestCalibrateQuick, so a top Makefile that runs
# "go test ./..." as root needs nothing more; this target prints the table.
NETEM_TEST_CALIBRATE := netem-calibrate-quick

.PHONY: netem-calibrate netem-calibrate-quick netem-test netem-bench

# Full calibration: paper-average, paper-congested, lte, h2a-rtt100-loss2
# (about 1 to 2 minutes); prints the table and fails outside tolerance.
netem-calibrate: ## calibrate the link emulator: paper cells, LTE, a loss profile; table; fails outside tolerance (root)
	go run ./cmd/pepnetem calibrate

# Quick subset (about 20 s): paper-average and h2a-rtt100-loss2.
netem-calibrate-quick: ## the quick calibration subset (also inside go test, root)
	go run ./cmd/pepnetem calibrate -quick

netem-test: ## the emulator's tests
	go test ./netem/... ./cmd/pepnetem

# Emulator CPU at the LTE rate (target: at most 0.10 cpu-core).
netem-bench: ## emulator CPU at the LTE rate (target <= 0.10 core)
	go test -run '^$$' -bench . -benchtime 10x ./netem
