#!/bin/sh
# egress.sh CMD [ARG...]: runs CMD (make test-egress: go test) in a network
# namespace of its own (unshare --net) whose only way off the machine is
# egress0, a veth whose peer is down: a packet sent there is dropped, and
# nftables records it first (TCP and UDP: destination, protocol, port).
# Loopback and the namespaces the tests create themselves work as usual.
# Exit status: CMD's, or 3 if any TCP/UDP packet went to egress0 (the
# destinations are printed). Root only (issue 24: no test reaches outside).
set -eu
if [ "${PEP_EGRESS_INNER:-}" != 1 ]; then
	exec unshare --net -- env PEP_EGRESS_INNER=1 sh "$0" "$@"
fi
ip link set lo up
ip link add egress0 type veth peer name egress1
ip link set egress0 up
# Source addresses for connect(2); the default routes make "off the
# machine" reachable as it is from the root namespace, so a test that would
# reach out sends its first packet here instead of failing at routing.
ip addr add 100.64.255.1/32 dev egress0
ip -6 addr add fd00:e9e::1/128 dev egress0 nodad
ip route add default dev egress0
ip -6 route add default dev egress0
nft -f - <<'EOF'
table inet pep_egress {
	set seen4 { type ipv4_addr . inet_proto . inet_service; flags dynamic; size 65536; }
	set seen6 { type ipv6_addr . inet_proto . inet_service; flags dynamic; size 65536; }
	chain egress_out {
		type filter hook output priority 0; policy accept;
		oifname "egress0" meta nfproto ipv4 meta l4proto { tcp, udp } update @seen4 { ip daddr . meta l4proto . th dport }
		oifname "egress0" meta nfproto ipv6 meta l4proto { tcp, udp } update @seen6 { ip6 daddr . meta l4proto . th dport }
		oifname "egress0" meta l4proto { tcp, udp } counter
	}
	chain egress_fwd {
		type filter hook forward priority 0; policy accept;
		oifname "egress0" meta nfproto ipv4 meta l4proto { tcp, udp } update @seen4 { ip daddr . meta l4proto . th dport }
		oifname "egress0" meta nfproto ipv6 meta l4proto { tcp, udp } update @seen6 { ip6 daddr . meta l4proto . th dport }
		oifname "egress0" meta l4proto { tcp, udp } counter
	}
}
EOF
status=0
"$@" || status=$?
packets=$(nft list table inet pep_egress | sed -n 's/.*counter packets \([0-9]*\).*/\1/p' | awk '{s += $1} END {print s + 0}')
if [ "$packets" != 0 ]; then
	echo "egress: $packets TCP/UDP packets were sent off the machine (dropped here); destinations:" >&2
	nft list set inet pep_egress seen4 >&2
	nft list set inet pep_egress seen6 >&2
	[ "$status" != 0 ] || status=3
else
	echo "egress: no TCP/UDP packet was sent off loopback and the tests' own namespaces" >&2
fi
exit $status
