#!/bin/bash
# make compose-base / make compose-testbed (deploy/deploy.mk).
#
#   compose.sh base      debootstrap a minimal bookworm from this machine's apt
#                        mirror and `docker import` it as pep/bookworm-base
#   compose.sh testbed   stage the build context (bin/, deploy/, configs/,
#                        netem/profiles/), build the four images, run the
#                        experiment, print the report, tear down
#
# If no Docker daemon answers, one is started for the run (and stopped at
# the end) with --iptables=false --ip-forward=false --bridge=none: the
# testbed's networks are internal, and the host must not route between them
# (traffic would bypass the emulated radio link) nor get its firewall changed.
set -euo pipefail
cd "$(dirname "$0")/../.."
top=$PWD
work=${PEP_COMPOSE_WORK:-/tmp/pep-compose}
mkdir -p "$work"
started_dockerd=""

compose() {
	if docker compose version >/dev/null 2>&1; then docker compose "$@"; else docker-compose "$@"; fi
}

ensure_dockerd() {
	if docker info >/dev/null 2>&1; then return; fi
	command -v dockerd >/dev/null || { echo "compose: no dockerd: apt-get install -y docker.io" >&2; exit 1; }
	echo "compose: starting dockerd (log $work/dockerd.log)" >&2
	dockerd --iptables=false --ip-forward=false --bridge=none \
		--data-root "$work/docker" --exec-root "$work/exec" -p "$work/dockerd.pid" \
		>"$work/dockerd.log" 2>&1 &
	started_dockerd=$!
	for _ in $(seq 100); do docker info >/dev/null 2>&1 && return; sleep 0.2; done
	echo "compose: dockerd did not come up:" >&2; tail -20 "$work/dockerd.log" >&2; exit 1
}

stop_dockerd() {
	if [ -n "$started_dockerd" ]; then
		kill "$started_dockerd" 2>/dev/null || true
		wait "$started_dockerd" 2>/dev/null || true
	fi
}
trap stop_dockerd EXIT

# mirror: the first Debian URI this machine's apt uses (deb822 or one-line).
mirror() {
	local m
	m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -1)
	[ -n "$m" ] || m=$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' | grep -v security | head -1)
	echo "${m:-http://deb.debian.org/debian}"
}

# security_mirror: the security suite's URI this machine's apt uses. The
# images must install the same package versions as the namespace testbed's
# host (Debian ships Chromium's updates through bookworm-security: without
# it the client image gets bookworm's older Chromium, which asks the
# resolver for other service names and measures differently).
security_mirror() {
	local m
	m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep security | head -1)
	[ -n "$m" ] || m=$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' | grep security | head -1)
	echo "${m:-http://deb.debian.org/debian-security}"
}

case ${1:-} in
base)
	command -v debootstrap >/dev/null || { echo "compose: apt-get install -y debootstrap" >&2; exit 1; }
	ensure_dockerd
	root="$work/rootfs"
	rm -rf "$root"
	m=$(mirror)
	echo "compose: debootstrap --variant=minbase bookworm from $m" >&2
	debootstrap --variant=minbase bookworm "$root" "$m" >"$work/debootstrap.log" 2>&1 ||
		{ tail -20 "$work/debootstrap.log" >&2; exit 1; }
	# Images need no apt caches or docs; point apt at the same mirror and
	# suites as this machine (security included: see security_mirror).
	printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s bookworm-security main\n' \
		"$m" "$m" "$(security_mirror)" >"$root/etc/apt/sources.list"
	rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/*
	tar -C "$root" -c . | docker import -c 'CMD ["/bin/bash"]' - pep/bookworm-base
	rm -rf "$root"
	docker image ls pep/bookworm-base
	;;
testbed)
	ensure_dockerd
	# The containers set CUBIC (docker-compose.yml sysctls); Linux lets a
	# network namespace choose only algorithms in the host's allowed list,
	# which holds reno and the host's default (bbr here).
	allowed=/proc/sys/net/ipv4/tcp_allowed_congestion_control
	for cc in ${CC_ORIGIN:-cubic} ${CC_GW:-cubic} ${CC_PHONE:-cubic}; do
		grep -qw "$cc" "$allowed" || { echo "compose: allowing $cc in namespaces ($allowed)" >&2; echo "$(cat "$allowed") $cc" >"$allowed"; }
	done
	ctx="$work/ctx"
	rm -rf "$ctx"; mkdir -p "$ctx/bin" "$ctx/netem"
	for b in pepd pepctl pepnetem replay testbed; do
		[ -x "bin/$b" ] || { echo "compose: bin/$b missing: make build" >&2; exit 1; }
		cp "bin/$b" "$ctx/bin/"
	done
	go build -o "$ctx/bin/pep-gateway" ./deploy/cmd/pep-gateway
	cp -r deploy configs "$ctx/"
	cp -r netem/profiles "$ctx/netem/"
	base=${BASE_IMAGE:-}
	if [ -z "$base" ]; then
		# No registry is reachable from a build machine: build the base
		# image locally the first time (debootstrap, docker import).
		if ! docker image inspect pep/bookworm-base >/dev/null 2>&1; then
			echo "compose: pep/bookworm-base missing: building it (compose.sh base)" >&2
			"$0" base
		elif ! docker run --rm pep/bookworm-base grep -q bookworm-security /etc/apt/sources.list; then
			# Built before its sources held the security suite: its
			# images would get an older Chromium than the host's.
			echo "compose: pep/bookworm-base lacks bookworm-security: rebuilding it" >&2
			"$0" base
		fi
		base=pep/bookworm-base
	fi
	out=${PEP_COMPOSE_OUT:-$top/compose-out}
	mkdir -p "$out"
	export PEP_COMPOSE_CONTEXT=$ctx BASE_IMAGE=$base PEP_COMPOSE_OUT=$out
	project=pep$$
	echo "compose: building from $base" >&2
	compose -p "$project" -f deploy/docker-compose.yml build
	rc=0
	compose -p "$project" -f deploy/docker-compose.yml up --abort-on-container-exit --exit-code-from client || rc=$?
	compose -p "$project" -f deploy/docker-compose.yml logs --no-color >"$out/compose.log" 2>&1 || true
	compose -p "$project" -f deploy/docker-compose.yml down -v || true
	[ -s "$out/report.md" ] && cat "$out/report.md"
	exit $rc
	;;
*)
	echo "usage: compose.sh base|testbed" >&2; exit 2 ;;
esac
