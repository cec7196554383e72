#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Nodes that lose nothing and leak nothing when ships fail (persist.h,
# check.h), two nodes a (sender) and b (receiver):
#  1. b's arena too small: three cps of 512 MiB into a/@b/ fail with ENOSPC,
#     every time, and leave no file at b; the chunks a failed upload left
#     staged at b give their space back at once to whatever needs it (a
#     200 MiB ship, a local write at b, each right after a failed ship);
#  2. a's arena full: a cp into a/@b/ fails with ENOSPC at a's write and
#     leaves nothing at b, not even an empty file;
#  3. b killed (kill -9) mid-ship: the cp fails; b mounted again under its
#     NAME has the file it held before, no part of the one in flight, and an
#     arena that adds up; the cp then completes;
#  4. a killed mid-ship: a mounted again has its files; b has no part of
#     the file, and its staged chunks expire (DMARFS_STAGE_SECONDS);
#  5. everything deleted at both ends: both arenas back to no data, and
#     each adds up (user.dmar.check).
. "$(dirname "$0")/lib.sh"

net_setup
need tc
net_ns a
net_ns b
net_peers_file
net_token_file
export DMARFS_STAGE_SECONDS=5
net_node_start a "" size=768m
A=$NODE_MNT
net_node_start b "" size=300m
B=$NODE_MNT
S=$T/src
mkdir -p "$S"

# no_file DIR NAME: DIR has no NAME, not even an empty one.
no_file() {
	[ ! -e "$1/$2" ] || fail "$1/$2 exists ($(stat -c %s "$1/$2") bytes) after the failed ship"
}

# ---- 1. b's arena too small ---------------------------------------------------------
mkprng "$S/big512" $((512 * MiB)) 31
for k in 1 2 3; do
	check "(1) cp of 512 MiB into a/@b/ with b's arena 300 MiB, try $k: ENOSPC, no file at b"
	if cp "$S/big512" "$A/@b/big512" 2>"$T/cp.err"; then
		fail "a 512 MiB cp into a 300 MiB node succeeded"
	fi
	grep -q 'No space left on device' "$T/cp.err" || fail "try $k: the cp failed with '$(cat "$T/cp.err")', not ENOSPC"
	no_file "$B" big512
	no_file "$A/@b" big512
done
say "  b holds $(net_node_info b store.staged) staged chunks, arena.used $(mib "$(net_node_info b arena.used)")"
check_arena "$B" "b's arena after the failed ships"
# A failed upload's stages go at its ENOSPC (X-Dmar-Upload), not after the
# 2 s that spare a running transfer: the next ship, at once, has the room.
check "(1) at once, a 200 MiB ship into a/@b/ completes"
mkprng "$S/ship200" $((200 * MiB)) 33
cp "$S/big512" "$A/@b/big512" 2>/dev/null && fail "a 512 MiB cp into a 300 MiB node succeeded"
cp "$S/ship200" "$A/@b/ship200" 2>"$T/cp.err" || fail "a 200 MiB ship right after a failed one: $(cat "$T/cp.err")"
[ "$(digest "$B/ship200")" = "$(digest "$S/ship200")" ] || fail "b's ship200 differs"
rm "$B/ship200"
check "(1) a 64 MiB write at b takes the space the failed uploads held"
cp "$S/big512" "$A/@b/big512" 2>/dev/null && fail "a 512 MiB cp into a 300 MiB node succeeded"
mkprng "$S/local64" $((64 * MiB)) 32
cp "$S/local64" "$B/local64" 2>"$T/cp.err" || fail "a local 64 MiB write at b: $(cat "$T/cp.err")"
[ "$(digest "$B/local64")" = "$(digest "$S/local64")" ] || fail "b's local64 differs"
rm "$B/local64"
check_arena "$B" "b's arena after the ship"

# ---- 2. a's arena full ----------------------------------------------------------------
check "(2) a's arena full: a cp into a/@b/ fails with ENOSPC and leaves nothing at b"
net_node_stop a
net_node_start a "" size=96m
A=$NODE_MNT
head -c $((120 * MiB)) "$S/big512" >"$A/fill" 2>/dev/null || :
mkprng "$S/small5" $((5 * MiB)) 34
if cp "$S/small5" "$A/@b/small5" 2>"$T/cp.err"; then
	fail "a cp out of a full arena into a/@b/ succeeded"
fi
grep -q 'No space left on device' "$T/cp.err" || fail "the cp failed with '$(cat "$T/cp.err")', not ENOSPC"
no_file "$B" small5
rm "$A/fill"
check_arena "$A" "a's arena after the failed cp"
net_node_stop a
net_node_start a "" size=768m
A=$NODE_MNT

# ---- 3. b killed mid-ship -----------------------------------------------------------
check "(3) b holds a file; b killed (kill -9) while a 160 MiB ship runs; mounted again it has that file and no part of the other"
mkprng "$S/held" $((8 * MiB)) 35
cp "$S/held" "$A/@b/held" || fail "cp held into a/@b/"
mkprng "$S/big160" $((160 * MiB)) 36
net_exec a tc qdisc add dev eth0 root tbf rate 200mbit burst 512kb latency 200ms || fail "cannot shape a's eth0"
used0=$(net_node_info b arena.used)
cp "$S/big160" "$A/@b/big160" 2>"$T/cp.err" &
CP=$!
CLEANUP_PIDS="$CP"
n=600
while [ "$(net_node_info b arena.used)" -lt $((used0 + 16 * MiB)) ]; do
	kill -0 "$CP" 2>/dev/null || fail "the cp ended before b received 16 MiB"
	n=$((n - 1))
	[ "$n" -gt 0 ] || fail "b received less than 16 MiB in 60 s"
	sleep 0.1
done
net_node_kill b
wait "$CP" && fail "the cp into a/@b/ succeeded although b was killed" || :
CLEANUP_PIDS=""
net_exec a tc qdisc del dev eth0 root || fail "cannot remove a's tc qdisc"
net_node_start b "" size=300m
B=$NODE_MNT
grep -q "re-attached arena b" "$T/dmarfs.b.log" || fail "b did not re-attach its arena"
[ "$(digest "$B/held")" = "$(digest "$S/held")" ] || fail "b's held differs after the restart"
no_file "$B" big160
check_arena "$B" "b's arena after the restart"
cp "$S/big160" "$A/@b/big160" || fail "the cp into a/@b/ after b's restart failed"
[ "$(digest "$B/big160")" = "$(digest "$S/big160")" ] || fail "b's big160 differs"

# ---- 4. a killed mid-ship -----------------------------------------------------------
check "(4) a killed while it ships a file it holds: a keeps it, b has no part of it"
cp "$S/big512" "$A/src" || fail "cp into a"
net_exec a tc qdisc add dev eth0 root tbf rate 200mbit burst 512kb latency 200ms || fail "cannot shape a's eth0"
used0=$(net_node_info b arena.used)
cp "$A/src" "$A/@b/moved" 2>"$T/cp.err" &
CP=$!
CLEANUP_PIDS="$CP"
n=600
while [ "$(net_node_info b arena.used)" -lt $((used0 + 16 * MiB)) ]; do
	kill -0 "$CP" 2>/dev/null || fail "the cp ended before b received 16 MiB"
	n=$((n - 1))
	[ "$n" -gt 0 ] || fail "b received less than 16 MiB in 60 s"
	sleep 0.1
done
net_node_kill a
wait "$CP" && fail "the cp succeeded although a was killed" || :
CLEANUP_PIDS=""
net_exec a tc qdisc del dev eth0 root || fail "cannot remove a's tc qdisc"
net_node_start a "" size=768m
A=$NODE_MNT
[ "$(digest "$A/src")" = "$(digest "$S/big512")" ] || fail "a's src differs after its restart"
no_file "$B" moved
check_arena "$A" "a's arena after its restart"

# ---- 5. everything deleted -----------------------------------------------------------
check "(5) everything deleted at both ends: no data left in either arena (staged chunks expire)"
rm -f "$A/src" "$B/held" "$B/big160"
wait_data_below "$A" 1 20 || fail "a's arena holds $(mib "$(data_bytes "$A")") of data: $(arena_check "$A")"
wait_data_below "$B" 1 30 ||
	fail "b's arena holds $(mib "$(data_bytes "$B")") of data ($(net_node_info b store.staged) staged): $(arena_check "$B")"
check_arena "$A" "a's emptied arena"
check_arena "$B" "b's emptied arena"
net_node_stop a
net_node_stop b
finish
