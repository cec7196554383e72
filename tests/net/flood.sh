#!/bin/sh
# SPDX-License-Identifier: MIT
#
# A node under a slow-client flood (net/admit.h): node b (token set) is
# flooded from a third namespace x, from 8 addresses, by tests/net/flood:
# up to FLOOD_CONNS (default 1,500) connections for FLOOD_SECONDS (default
# 20), each sending a request head a header at a time and never finishing
# it, with no token, opened again as soon as b closes one.  Meanwhile:
#  - a peer's requests (GET /v1/node from a, with the token) all succeed;
#  - a 64 MiB cp into a/@b/ completes, intact; its time against the same
#    cp before the flood is printed (a figure, not a pass mark);
#  - b closes the flood's connections (its log says why, with counts;
#    GET /v1/node counts them) and its memory stays bounded.
# Afterwards b serves as before and a cp of a new file completes.
. "$(dirname "$0")/lib.sh"

FLOOD=${FLOOD:-$top_builddir/tests/net/flood}
[ -x "$FLOOD" ] || fail "helper not built: $FLOOD"
CONNS=${FLOOD_CONNS:-1500}
SECS=${FLOOD_SECONDS:-20}

net_setup
net_ns a
net_ns b
net_ns x 100
net_peers_file
net_token_file
# x floods from 8 addresses, as 8 hosts would
binds=$(net_addr_of x)
for h in 101 102 103 104 105 106 107; do
	ip -n "$(basename "$(net_ns_path x)")" addr add "$(net_host $h)/24" dev eth0 || fail "address $h on x"
	binds="$binds,$(net_host $h)"
done
net_node_start a "" size=512m
A=$NODE_MNT
net_node_start b "" size=512m
B=$NODE_MNT
eval "BPID=\$NODE_PID_b"
S=$T/src
mkdir -p "$S"
mkprng "$S/f64" $((64 * MiB)) 71
mkprng "$S/g64" $((64 * MiB)) 72
mkprng "$S/h64" $((64 * MiB)) 73

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }

check "a 64 MiB cp into a/@b/ without the flood"
t0=$(now_ms)
cp "$S/f64" "$A/@b/f64" || fail "cp without the flood failed"
base_ms=$(($(now_ms) - t0))
[ "$(digest "$B/f64")" = "$(digest "$S/f64")" ] || fail "b's f64 differs"
rss0=$(rss_kib "$BPID")

check "flood: $CONNS slow connections for $SECS s from 8 addresses of x"
net_spawn x "$T/flood.out" "$FLOOD" "$(net_addr_of b)" "$NET_PORT" --conns "$CONNS" --seconds "$SECS" \
	--drip 2000 --rate 2000 --bind "$binds"
FPID=$NET_PID
sleep 3

check "during the flood: 20 GET /v1/node from peer a succeed"
ok=0
worst=0
for k in $(seq 20); do
	t0=$(now_ms)
	st=$(net_api a b GET /v1/node)
	t=$(($(now_ms) - t0))
	[ "$t" -gt "$worst" ] && worst=$t
	if [ "$st" = 200 ]; then
		ok=$((ok + 1))
	else
		say "  GET $k: $st after $t ms: $(head -c 200 "$T/api.err") $(head -c 200 "$T/api.body")"
	fi
	sleep 0.2
done
say "  $ok of 20 answered 200; slowest $worst ms"
[ "$ok" = 20 ] || fail "a peer's requests failed during the flood: $ok of 20 answered 200 ($(cat "$T/api.err"))"

check "during the flood: a 64 MiB cp into a/@b/ completes, intact"
t0=$(now_ms)
cp "$S/g64" "$A/@b/g64" || fail "cp during the flood failed"
flood_ms=$(($(now_ms) - t0))
[ "$(digest "$B/g64")" = "$(digest "$S/g64")" ] || fail "b's g64 differs"
say "  64 MiB cp: ${base_ms} ms without the flood, ${flood_ms} ms during it ($(awk "BEGIN { printf \"%.2f\", $flood_ms / $base_ms }")x)"
rss1=$(rss_kib "$BPID")
say "  b's RSS: $((rss0 / 1024)) MiB before the flood, $((rss1 / 1024)) MiB during it"
# Each held connection costs a thread's touched stack and MHD's buffer:
# bounded by the pending limits, not by the flood's size.
[ $((rss1 - rss0)) -lt $((${FLOOD_RSS_MIB:-192} * 1024)) ] ||
	fail "b grew by $(((rss1 - rss0) / 1024)) MiB during the flood (bound: ${FLOOD_RSS_MIB:-192} MiB)"

wait_pid_exit "$FPID" $((SECS + 15)) || fail "the flood did not end"
say "  $(cat "$T/flood.out")"
closed=$(sed -n 's/.*closed by the server \([0-9]*\).*/\1/p' "$T/flood.out")
[ "${closed:-0}" -gt 0 ] || fail "b closed none of the flood's connections: $(cat "$T/flood.out")"

check "b says what it closed and why"
grep -q 'closed [0-9]* connections* with no complete request\|closed [0-9]* connections* without a complete request for room' \
	"$T/dmarfs.b.log" || fail "no admission line in b's log"
grep 'connection' "$T/dmarfs.b.log" | sed 's/^/  /' | head -n 6
st=$(net_api a b GET /v1/node)
[ "$st" = 200 ] || fail "GET /v1/node after the flood: $st"
n=$(($(json_get "$T/api.body" server.closed_slow) + $(json_get "$T/api.body" server.closed_for_room)))
[ "$n" -gt 0 ] || fail "GET /v1/node counts no closed connection: $(head -c 300 "$T/api.body")"
say "  GET /v1/node: $(json_get "$T/api.body" server)"

check "after the flood: a cp into a/@b/ completes, intact"
cp "$S/h64" "$A/@b/h64" || fail "cp after the flood"
[ "$(digest "$B/h64")" = "$(digest "$S/h64")" ] || fail "b's h64 differs"
rm "$B/f64" "$B/g64" "$B/h64"
check_arena "$B" "b's arena"
net_node_stop a
net_node_stop b
finish
