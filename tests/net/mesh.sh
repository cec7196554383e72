#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Broadcast (net/relay.h): eight nodes a..h on one bridge.
#  1. dmar cp on a to 'b,c,d:f1': every copy is the source's; a's link
#     carries the file about once (a chain, not three pushes), b and c
#     forward it as it arrives (their relay counters), d's link only
#     receives it; -v prints a line per node; b's event stream shows its
#     forwarding to c (relay.progress) and the results after it;
#  2. the same again: nothing but commits crosses any link;
#  3. a near-duplicate (1 MiB changed): each link carries about the change;
#  4. c killed mid-broadcast: the cp fails, naming c; its progress
#     showed what reached c (from b's event stream); b and d have the
#     file; c mounted again has no part of it; the retry succeeds and only
#     c's copy crosses the wire (from b: a's and d's links stay quiet);
#  5. POST /v1/transfers on a to "all": the other seven nodes get a's file,
#     the answer has one ok result per node; a file held by b and c read
#     at d through d/@b/ comes from both (their chunks_served counters),
#     and so does dmar cp 'e,b,c:FILE' (e lacks it) to a local file,
#     and with c killed mid-read the read completes from b;
#  6. a's @all/: mkdir, cp, rm and rmdir there happen at the seven others;
#     with h dead, the cp fails, a's log names h, the six others have the
#     file and h (mounted again) has none of it;
#  7. everything deleted: every arena back to no data, and each adds up.
. "$(dirname "$0")/lib.sh"

net_setup
need tc
: "${DMAR:=$top_builddir/dmar}"
NODES="a b c d e f g h"
for n in $NODES; do
	net_ns "$n"
done
net_peers_file
net_token_file
export DMARFS_STAGE_SECONDS=5
# copies of peers' files read here (d/@b/sw) go 5 s after their last close
export DMARFS_REMOTE_CACHE_SECONDS=5
for n in $NODES; do
	net_node_start "$n" "" size=256m
done
S=$T/src
mkdir -p "$S"
mnt() { eval "printf '%s\n' \"\$NODE_MNT_$1\""; }
dmar_cp() { net_exec a "$DMAR" cp --peers "$NET_PEERS" --token "$NET_TOKEN" "$@"; }
# bytes NAME...: each node's link counter, "a=N b=N ..." into $T/bytes.$1...
snap() { for _n in $NODES; do echo "$_n $(net_bytes "$_n")"; done >"$T/bytes.$1"; }
# moved TAG NODE: bytes NODE's link carried since snap TAG.
moved() { echo $(( $(net_bytes "$2") - $(awk -v n="$2" '$1 == n { print $2 }' "$T/bytes.$1") )); }
same() {
	for _n in $2; do
		[ "$(digest "$(mnt "$_n")/$1")" = "$(digest "$S/$1")" ] || fail "$_n's $1 differs from the source"
	done
}

# ---- 1. a chain through b, c, d --------------------------------------------------
check "(1) dmar cp to b,c,d: every copy is the source's; a's link carries it once"
mkprng "$S/f1" $((24 * MiB)) 41
net_spawn a "$T/watch-b" "$DMAR" watch --peers "$NET_PEERS" --token "$NET_TOKEN" b
watch_pid=$NET_PID
k=0
until grep -q '"hello"' "$T/watch-b" 2>/dev/null; do
	k=$((k + 1))
	[ "$k" -lt 100 ] || fail "dmar watch b: no hello in 10 s: $(cat "$T/watch-b")"
	sleep 0.1
done
snap 1
dmar_cp -v "$S/f1" 'b,c,d:f1' 2>"$T/cp1.err" || fail "the broadcast failed: $(cat "$T/cp1.err")"
same f1 "b c d"
sa=$(moved 1 a) sb=$(moved 1 b) sc=$(moved 1 c) sd=$(moved 1 d)
say "  links: a $(mib "$sa"), b $(mib "$sb"), c $(mib "$sc"), d $(mib "$sd")"
[ "$sa" -le $((27 * MiB)) ] || fail "a's link carried $(mib "$sa") for a 24 MiB broadcast (a push to each?)"
# b and c receive it and send it on; d only receives it
[ "$sb" -ge $((48 * MiB)) ] && [ "$sb" -le $((54 * MiB)) ] || fail "b's link carried $(mib "$sb"), not in and out"
[ "$sc" -ge $((48 * MiB)) ] && [ "$sc" -le $((54 * MiB)) ] || fail "c's link carried $(mib "$sc"), not in and out"
[ "$sd" -ge $((24 * MiB)) ] && [ "$sd" -le $((27 * MiB)) ] || fail "d's link carried $(mib "$sd") for one copy"
for n in b c; do
	k=$(net_node_info "$n" relay.chunks_forwarded) || fail "$n's GET /v1/node has no relay figures"
	[ "$k" -gt 0 ] || fail "$n forwarded no chunk as they came: the chain went at commit only"
done
[ "$(net_node_info d relay.chunks_forwarded)" = 0 ] || fail "d, the chain's end, forwarded chunks"
for n in b c d; do
	grep -q "^  $n: ok, wire" "$T/cp1.err" || fail "dmar cp -v has no line for $n: $(cat "$T/cp1.err")"
done
# b's event stream: its forwarding to c as it went, then the nodes after it
k=0
until grep -q '"relay.done"' "$T/watch-b"; do
	k=$((k + 1))
	[ "$k" -lt 50 ] || fail "no relay.done in b's event stream: $(cat "$T/watch-b")"
	sleep 0.1
done
net_stop_pid "$watch_pid"
grep '"relay.progress"' "$T/watch-b" | grep -q '"to": *"c"' ||
	fail "b's event stream has no relay.progress to c: $(cat "$T/watch-b")"
grep '"relay.done"' "$T/watch-b" | grep -q '"node": *"d"' ||
	fail "b's relay.done does not report on d: $(grep relay.done "$T/watch-b")"

check "(2) the same broadcast again: every node holds it, nothing but commits crosses"
snap 2
dmar_cp -q "$S/f1" 'b,c,d:f1' 2>"$T/cp2.err" || fail "the second broadcast failed: $(cat "$T/cp2.err")"
for n in a b c d; do
	m=$(moved 2 "$n")
	[ "$m" -lt $((1 * MiB)) ] || fail "$n's link carried $(mib "$m") for a file every node holds"
done
same f1 "b c d"

# ---- 3. a near-duplicate ------------------------------------------------------------
check "(3) a near-duplicate of f1 (1 MiB changed) to b,c,d: each link carries about the change"
cp "$S/f1" "$S/f1v2"
mkprng "$T/patch" $((1 * MiB)) 42
dd if="$T/patch" of="$S/f1v2" bs=1M seek=10 conv=notrunc status=none
snap 3
dmar_cp -q "$S/f1v2" 'b,c,d:f1v2' 2>"$T/cp3.err" || fail "the near-duplicate broadcast failed: $(cat "$T/cp3.err")"
same f1v2 "b c d"
for n in a b c d; do
	m=$(moved 3 "$n")
	[ "$m" -lt $((4 * MiB)) ] || fail "$n's link carried $(mib "$m") for a 1 MiB change"
done

# ---- 4. a node killed mid-broadcast ------------------------------------------------
check "(4) c killed mid-broadcast: the cp fails naming c, b and d get the file, c has none of it"
mkprng "$S/f4" $((64 * MiB)) 43
net_exec a tc qdisc add dev eth0 root tbf rate 200mbit burst 512kb latency 200ms || fail "cannot shape a's eth0"
snap 4
# -v: progress lines, the nodes after b's from b's and c's event streams
# (set -e holds in the subshell: the status is kept through ||)
(rc=0; dmar_cp -v "$S/f4" 'b,c,d:f4' 2>"$T/cp4.err" || rc=$?; echo "$rc" >"$T/cp4.rc") &
cp_pid=$!
CLEANUP_PIDS="${CLEANUP_PIDS:-} $cp_pid"
k=0
while [ "$(moved 4 c)" -lt $((8 * MiB)) ]; do
	k=$((k + 1))
	[ "$k" -lt 300 ] || fail "c received $(mib "$(moved 4 c)") in 30 s"
	sleep 0.1
done
net_node_kill c
wait_pid_exit "$cp_pid" 120 || fail "the broadcast still runs 120 s after c died"
rc=$(cat "$T/cp4.rc") || fail "the broadcast's subshell left no status"
[ "$rc" -ne 0 ] || fail "the broadcast succeeded with c killed"
grep -q "1 of 3 nodes failed: c: " "$T/cp4.err" || fail "the failure does not name c: $(cat "$T/cp4.err")"
grep -q "^dmar: *c: FAILED" "$T/cp4.err" || grep -q "c: FAILED" "$T/cp4.err" ||
	fail "no per-node line for c: $(cat "$T/cp4.err")"
grep -q "^  c: got [0-9.]* [KMG]iB / 64.0 MiB ([ 0-9]*%) from b, wire " "$T/cp4.err" ||
	fail "dmar cp -v showed no progress at c (b's relay.progress): $(cat "$T/cp4.err")"
say "  $(grep "^  c: got" "$T/cp4.err" | tail -n 1)"
say "  $(grep "nodes failed" "$T/cp4.err")"
same f4 "b d"
net_exec a tc qdisc del dev eth0 root || fail "cannot remove a's tc qdisc"
net_node_start c "" size=256m
C=$(mnt c)
[ ! -e "$C/f4" ] || fail "c has an f4 of $(stat -c %s "$C/f4") bytes after dying mid-broadcast"
same f1v2 c
check_arena "$C" "c's arena after its restart"

check "(4) the retry: only c's copy crosses, from b"
snap 5
dmar_cp -q "$S/f4" 'b,c,d:f4' 2>"$T/cp5.err" || fail "the retry failed: $(cat "$T/cp5.err")"
same f4 "b c d"
sa=$(moved 5 a) sc=$(moved 5 c) sd=$(moved 5 d)
say "  links: a $(mib "$sa"), c $(mib "$sc"), d $(mib "$sd")"
[ "$sa" -lt $((1 * MiB)) ] || fail "a's link carried $(mib "$sa") in the retry"
[ "$sd" -lt $((1 * MiB)) ] || fail "d's link carried $(mib "$sd") in the retry"
[ "$sc" -ge $((64 * MiB)) ] && [ "$sc" -le $((70 * MiB)) ] || fail "c's link carried $(mib "$sc") for its copy"

# ---- 5. eight nodes ------------------------------------------------------------------
check "(5) POST /v1/transfers on a to \"all\": the seven others get a's file"
A=$(mnt a)
cp "$S/f1v2" "$A/f5"
cp "$S/f1v2" "$S/f5"
code=$(NET_CURL_MAX=120 net_api a a POST /v1/transfers -H 'Content-Type: application/json' \
	-d '{"path": "f5", "to": "all"}')
[ "$code" = 200 ] || fail "POST /v1/transfers to all answered $code: $(cat "$T/api.body" "$T/api.err")"
cp "$T/api.body" "$T/all.json"
i=0
for n in b c d e f g h; do
	[ "$(json_get "$T/all.json" "nodes.$i.node")" = "$n" ] || fail "result $i is not $n's: $(cat "$T/all.json")"
	[ "$(json_get "$T/all.json" "nodes.$i.ok")" = true ] || fail "$n failed: $(cat "$T/all.json")"
	i=$((i + 1))
done
json_get "$T/all.json" "nodes.7" >/dev/null 2>&1 && fail "more than seven results: $(cat "$T/all.json")"
same f5 "b c d e f g h"

# ---- 5. swarm pulls --------------------------------------------------------------------
check "(5) a file held by b and c, read at d through d/@b/: its chunks come from both"
mkprng "$S/sw" $((48 * MiB)) 44
dmar_cp -q "$S/sw" 'b,c:sw' 2>"$T/sw.err" || fail "the broadcast to b,c failed: $(cat "$T/sw.err")"
D=$(mnt d)
sb=$(net_node_info b server.chunks_served) sc=$(net_node_info c server.chunks_served)
[ "$(digest "$D/@b/sw")" = "$(digest "$S/sw")" ] || fail "d/@b/sw differs from the source"
db=$(( $(net_node_info b server.chunks_served) - sb )) dc=$(( $(net_node_info c server.chunks_served) - sc ))
say "  d pulled $db chunks from b, $dc from c"
[ "$db" -gt 100 ] && [ "$dc" -gt 100 ] || fail "d pulled $db chunks from b and $dc from c, not from both"

check "(5) dmar cp 'e,b,c:sw' to a local file: the recipe from b (e lacks it), chunks from b and c"
sb=$(net_node_info b server.chunks_served) sc=$(net_node_info c server.chunks_served)
dmar_cp -v 'e,b,c:sw' "$T/sw.pulled" 2>"$T/swcp.err" || fail "the swarm pull failed: $(cat "$T/swcp.err")"
[ "$(digest "$T/sw.pulled")" = "$(digest "$S/sw")" ] || fail "the swarm pull's file differs from the source"
db=$(( $(net_node_info b server.chunks_served) - sb )) dc=$(( $(net_node_info c server.chunks_served) - sc ))
say "  dmar cp pulled $db chunks from b, $dc from c"
[ "$db" -gt 100 ] && [ "$dc" -gt 100 ] || fail "dmar cp pulled $db chunks from b and $dc from c, not from both"
for n in b c; do
	grep -q "^  $n: [1-9][0-9]* of [0-9]* chunks" "$T/swcp.err" ||
		fail "dmar cp -v has no line for what $n gave: $(cat "$T/swcp.err")"
done
grep -q "^  e: 0 of" "$T/swcp.err" || fail "e, which holds none of it, gave chunks: $(cat "$T/swcp.err")"
rm -f "$T/sw.pulled"

check "(5) the same with c killed mid-read: the read completes from b"
mkprng "$S/sw2" $((64 * MiB)) 45
dmar_cp -q "$S/sw2" 'b,c:sw2' 2>"$T/sw.err" || fail "the broadcast to b,c failed: $(cat "$T/sw.err")"
for n in b c; do
	net_exec "$n" tc qdisc add dev eth0 root tbf rate 100mbit burst 256kb latency 200ms || fail "cannot shape $n"
done
sc=$(net_node_info c server.chunks_served)
(rc=0; digest "$D/@b/sw2" >"$T/sw2.dig" || rc=$?; echo "$rc" >"$T/sw2.rc") &
rd_pid=$!
CLEANUP_PIDS="${CLEANUP_PIDS:-} $rd_pid"
k=0
while [ $(( $(net_node_info c server.chunks_served) - sc )) -lt 100 ]; do
	k=$((k + 1))
	[ "$k" -lt 300 ] || fail "c served no chunks to d's read in 30 s"
	sleep 0.1
done
net_node_kill c
wait_pid_exit "$rd_pid" 120 || fail "the read still runs 120 s after c died"
[ "$(cat "$T/sw2.rc")" = 0 ] && [ "$(cat "$T/sw2.dig")" = "$(digest "$S/sw2")" ] ||
	fail "the read with c killed: status $(cat "$T/sw2.rc"), digest $(cat "$T/sw2.dig")"
for n in b c; do
	net_exec "$n" tc qdisc del dev eth0 root || fail "cannot remove $n's tc qdisc"
done
net_node_start c "" size=256m

# ---- 6. the mount's @all/ -------------------------------------------------------------
check "(6) a's @all/: mkdir makes a directory at the seven others, cp ships to all of them, rm and rmdir everywhere"
ls "$A" | grep -qx @all || fail "no @all in a's root: $(ls "$A" | tr '\n' ' ')"
mkdir "$A/@all/grp" || fail "mkdir a/@all/grp"
for n in b c d e f g h; do
	[ -d "$(mnt "$n")/grp" ] || fail "mkdir a/@all/grp made no grp at $n"
done
cp "$S/f1v2" "$A/@all/grp/g1" || fail "cp into a/@all/grp/ failed"
for n in b c d e f g h; do
	[ "$(digest "$(mnt "$n")/grp/g1")" = "$(digest "$S/f1v2")" ] || fail "$n's grp/g1 differs from the source"
done
[ "$(fsize "$A/@all/grp/g1")" = "$(fsize "$S/f1v2")" ] || fail "stat a/@all/grp/g1: $(fsize "$A/@all/grp/g1") bytes"
[ "$(fsize "$A/@h/grp/g1")" = "$(fsize "$S/f1v2")" ] || fail "a/@h/ does not show the file shipped through @all/"
rm "$A/@all/grp/g1" || fail "rm a/@all/grp/g1"
rmdir "$A/@all/grp" || fail "rmdir a/@all/grp"
for n in b c d e f g h; do
	[ ! -e "$(mnt "$n")/grp" ] || fail "$n still has grp after rm and rmdir under a/@all/"
done

check "(6) with h dead, a cp into a/@all/ fails (close says so); the six others get the file"
net_node_kill h
if cp "$S/f1" "$A/@all/g2" 2>"$T/cpall.err"; then
	fail "cp into a/@all/ succeeded with h dead"
fi
say "  cp: $(cat "$T/cpall.err")"
grep -q "1 of 7 nodes failed: h: " "$T/dmarfs.a.log" || fail "a's log does not name h: $(tail -n 5 "$T/dmarfs.a.log")"
for n in b c d e f g; do
	[ "$(digest "$(mnt "$n")/g2")" = "$(digest "$S/f1")" ] || fail "$n's g2 differs from the source"
done
net_node_start h "" size=256m
[ ! -e "$(mnt h)/g2" ] || fail "h has a g2 it never got"

# ---- 7. clean up ---------------------------------------------------------------------
check "(7) everything deleted: every arena back to no data, and each adds up"
for n in $NODES; do
	m=$(mnt "$n")
	rm -f "$m/f1" "$m/f1v2" "$m/f4" "$m/f5" "$m/g2" "$m/sw" "$m/sw2"
done
for n in $NODES; do
	m=$(mnt "$n")
	wait_data_below "$m" 1 30 ||
		fail "$n's arena holds $(mib "$(data_bytes "$m")") ($(net_node_info "$n" store.staged) staged): $(arena_check "$m")"
	check_arena "$m" "$n's emptied arena"
done
for n in $NODES; do
	net_node_stop "$n"
done
finish
