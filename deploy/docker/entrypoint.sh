#!/bin/sh
# Entry point of pep's compose testbed containers: sets up DESIGN.md's
# addresses on the interfaces compose gave the container, then runs the
# role. Roles: core, linkem, gateway, client. Environment (docker-compose.yml):
#   PROFILE  radio profile (linkem), MODES, RUNS, PAGES, CORPUS (client)
set -eu
role=${1:?role}
log() { echo "pep-$role: $*" >&2; }

# ifname_for ADDR: the interface holding ADDR (compose's static addresses).
ifname_for() { ip -o -4 addr show | awk -v a="$1" '$4 ~ "^"a"/" {print $2; exit}'; }

case $role in
core)
	# The origin block (one address per corpus hostname) is routed to core
	# by the gateway; AnyIP: every address in it is local here.
	ip route add local 198.19.0.0/16 dev lo
	ip route replace default via 198.18.1.1
	mkdir -p /run/pep
	replay -corpus "${CORPUS:-default}" -http 0.0.0.0:80 -https 0.0.0.0:443 \
		-ca-out /run/pep/ca.pem -dnsmasq-conf /run/pep/dnsmasq.conf -prefix 198.19.0.0/16 &
	while [ ! -s /run/pep/dnsmasq.conf ]; do sleep 0.2; done
	exec dnsmasq --keep-in-foreground --conf-file=/run/pep/dnsmasq.conf --listen-address=198.18.1.2 --bind-interfaces
	;;
linkem)
	a=$(ifname_for 198.18.0.3); b=$(ifname_for 198.18.0.130)
	# A bump in the wire: no addresses, no forwarding of its own.
	ip addr flush dev "$a"; ip addr flush dev "$b"
	for i in "$a" "$b"; do ethtool -K "$i" gro off gso off tso off 2>/dev/null || true; done
	log "radio link $a <-> $b, profile ${PROFILE:-paper-average}"
	exec pepnetem run -a "$a" -b "$b" -every 10s "/usr/share/pep/profiles/${PROFILE:-paper-average}.yaml"
	;;
gateway)
	r=$(ifname_for 198.18.0.129); w=$(ifname_for 198.18.1.1)
	ip addr add 198.18.0.1/24 dev "$r"
	ip link set "$r" name sub0 2>/dev/null && r=sub0 || log "cannot rename $r to sub0: rendering the ruleset for $r"
	ip route add 198.19.0.0/16 via 198.18.1.2
	# ip_forward, rp_filter and tcp_slow_start_after_idle: compose's sysctls
	# (a container cannot write /proc/sys itself).
	pep-gateway render -sub-if "$r" > /run/pep-gateway.nft
	for c in $(pep-gateway routes | tr ' ' '~'); do c=$(echo "$c" | tr '~' ' '); $c 2>/dev/null || true; done
	nft -f /run/pep-gateway.nft
	pep-gateway dns-guard -probe 127.0.0.1:5353 &
	# Squid in pep's role: configs/squid.conf rendered for pepd's config
	# (require-proxy-header port for pepd, carrier resolver, cache).
	pepctl squid-conf -config /etc/pep/configs/pepd.yaml -template /etc/pep/configs/squid.conf \
		-cache-dir-mb 512 -cache-mem-mb 64 > /etc/squid/squid.conf
	squid -z -N -f /etc/squid/squid.conf >/dev/null 2>&1 || true
	squid -f /etc/squid/squid.conf
	exec pepd -config /etc/pep/configs/pepd.yaml -squid 127.0.0.1:3128 \
		-tproxy-listen :3130 -admin-listen 0.0.0.0:9090
	;;
client)
	e=$(ifname_for 198.18.0.2)
	ip addr del 198.18.0.2/25 dev "$e"; ip addr add 198.18.0.2/24 dev "$e"
	ip route replace default via 198.18.0.1
	echo "nameserver 198.18.1.2" > /etc/resolv.conf
	mkdir -p /out
	# The runner drives an existing topology: modes through pepd's admin
	# API, link counters from the emulator (docs/operations.md section 8).
	if testbed run -h 2>&1 | grep -q -- '-topology'; then
		exec testbed run -topology external -gw-admin http://198.18.1.1:9090 \
			-corpus "${CORPUS:-default}" -profile "${PROFILE:-paper-average}" \
			-modes "${MODES:-direct,off,dns,url}" -runs "${RUNS:-1}" -pages "${PAGES:-}" -out /out
	fi
	# Until then, a smoke: every page host of the corpus (core's dnsmasq
	# hosts file, shared), fetched through the radio link and the gateway in
	# each of pepd's modes, with curl's timings.
	log "testbed run has no -topology external: running the smoke load instead"
	while [ ! -s /run/pep/dnsmasq.conf.hosts ]; do sleep 0.2; done
	hosts=$(awk '$1 ~ /^198\.19\./ && $2 ~ /^www\./ {print $2}' /run/pep/dnsmasq.conf.hosts | head -n "${SMOKE_HOSTS:-5}")
	{
		echo "# compose smoke: profile ${PROFILE:-paper-average}"
		echo
		echo "| mode | page | HTTP status | bytes | X-Cache (Squid) | connect (s) | total (s) |"
		echo "|---|---|---|---|---|---|---|"
		for m in off dns url; do
			pepctl -admin 198.18.1.1:9090 mode "$m" >/dev/null 2>&1 || log "pepctl mode $m failed"
			for h in $hosts; do
				curl -s -o /dev/null --max-time 60 -w "| $m | $h | %{http_code} | %{size_download} | %header{x-cache} | %{time_connect} | %{time_total} |\n" "http://$h/" || echo "| $m | $h | failed | | | |"
			done
		done
	} | tee /out/report.md
	;;
*)
	log "unknown role"; exit 2 ;;
esac
