#!/bin/sh
# Entry point of pep's compose testbed containers: sets up DESIGN.md's
# addresses on the interfaces compose gave the container, then runs the
# role. Roles: core, linkem, gateway, client. Environment (docker-compose.yml):
#   PROFILE  radio profile (linkem, client), MODES, RUNS, PAGES, CORPUS (client)
set -eu
role=${1:?role}
log() { echo "pep-$role: $*" >&2; }

# ifname_for ADDR: the interface holding ADDR (compose's static addresses).
ifname_for() { ip -o -4 addr show | awk -v a="$1" '$4 ~ "^"a"/" {print $2; exit}'; }

# The gateway hook: the runner (testbed run -topology external -gw-hook)
# writes "ID COMMAND" to $hook, this loop runs it once and answers "ID ok"
# or "ID failed: REASON" in $hook.done. Commands:
#   steering off   direct mode: pep's nftables table removed, so subscriber
#                  traffic is plainly forwarded (no pepd, no Squid, DNS to
#                  the carrier resolver): the testbed without the appliance
#   steering on    the table loaded again; waits until the DNS guard has
#                  put DNS back in dns_alive (else the first queries of a dns
#                  mode session would bypass pepd)
#   squid cold     Squid shut down, its cache folder emptied (squid -z) and
#                  started again: an empty disk and memory cache
hook=/run/pep/gw-hook
squid_conf=/etc/squid/squid.conf
wait_for() { # wait_for TENTHS CMD...: run CMD every 0.1 s until it succeeds
	n=$1; shift
	while ! "$@" >/dev/null 2>&1; do n=$((n - 1)); [ "$n" -gt 0 ] || return 1; sleep 0.1; done
}
squid_gone() { ! pgrep -x squid; }
squid_listens() { ss -Hltn 'sport = :3128' | grep -q LISTEN; }
dns_armed() { nft list set ip pep dns_alive | grep -q 'elements'; }
gw_run() {
	case $1 in
	"steering off")
		if nft list table ip pep >/dev/null 2>&1; then nft delete table ip pep 2>&1 || return 1; fi ;;
	"steering on")
		nft -f /run/pep-gateway.nft 2>&1 || return 1
		wait_for 100 dns_armed || { echo "dns_alive still empty after 10 s"; return 1; } ;;
	"squid cold")
		squid -k shutdown -f "$squid_conf" 2>&1 || true
		wait_for 600 squid_gone || { echo "squid did not stop in 60 s"; return 1; }
		rm -rf /var/spool/squid/* /run/squid.pid
		squid -z -N -f "$squid_conf" >/dev/null 2>&1 || { echo "squid -z failed"; return 1; }
		squid -f "$squid_conf" 2>&1 || return 1
		wait_for 300 squid_listens || { echo "squid not listening on 3128 after 30 s"; return 1; } ;;
	*) echo "unknown command"; return 1 ;;
	esac
}
gw_hook() {
	last=""
	while :; do
		req=$(cat "$hook" 2>/dev/null || true)
		if [ -n "$req" ] && [ "$req" != "$last" ]; then
			last=$req
			id=${req%% *}; cmd=${req#* }
			if out=$(gw_run "$cmd"); then ans="$id ok"; else ans="$id failed: $(echo "$out" | tr '\n' ' ')"; fi
			log "hook: $cmd: ${ans#* }"
			echo "$ans" >"$hook.done.tmp" && mv "$hook.done.tmp" "$hook.done"
		fi
		sleep 0.1
	done
}

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
	# Counters for the runner on the ctl network, off the measured path.
	exec pepnetem run -a "$a" -b "$b" -every 10s -metrics 10.99.0.3:9102 "/usr/share/pep/profiles/${PROFILE:-paper-average}.yaml"
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
	gw_hook &
	exec pepd -config /etc/pep/configs/pepd.yaml -squid 127.0.0.1:3128 \
		-tproxy-listen :3130 -admin-listen 0.0.0.0:9090
	;;
client)
	e=$(ifname_for 198.18.0.2)
	ip addr del 198.18.0.2/25 dev "$e"; ip addr add 198.18.0.2/24 dev "$e"
	ip route replace default via 198.18.0.1
	echo "nameserver 198.18.1.2" > /etc/resolv.conf
	mkdir -p /out
	# The runner drives the containers (testbed run -topology external):
	# Chromium here, modes through pepd's admin API and the gateway hook,
	# link counters from the emulator; control traffic on the ctl network.
	wait_for 600 curl -sf http://10.99.0.4:9090/mode || { log "pepd's admin API did not answer in 60 s"; exit 1; }
	wait_for 600 curl -sf http://10.99.0.3:9102/metrics || { log "the link emulator's metrics did not answer in 60 s"; exit 1; }
	exec testbed run -topology external -gw-admin http://10.99.0.4:9090 \
		-link-metrics http://10.99.0.3:9102/metrics -gw-hook "$hook" \
		-corpus "${CORPUS:-default}" -profile "${PROFILE:-paper-average}" \
		-modes "${MODES:-direct,off,dns,url}" -runs "${RUNS:-1}" -pages "${PAGES:-}" -out /out
	;;
*)
	log "unknown role"; exit 2 ;;
esac
