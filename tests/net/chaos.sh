#!/bin/sh
# SPDX-License-Identifier: MIT
#
# A randomized fault test of two nodes, a (sender) and b (receiver): a
# seeded sequence of rounds, each one of
#   ship      cp of a new file into a/@b/ (some too big for b: ENOSPC);
#   near-dup  64 KiB of a file b holds rewritten at a, shipped again;
#   delete    rm of a file at b;
#   kill-b    b killed (kill -9) mid-ship, mounted again;
#   kill-a    a killed mid-ship, mounted again;
#   link      a's link down for 2 s mid-ship;
#   local     a local write at b that needs the space failed ships staged.
# Every cp either succeeds with the file whole at b, or fails and leaves
# no file at b (a full b says ENOSPC).  After every round both arenas add
# up (user.dmar.check), and b holds exactly the files of the model, each
# bit-exact after a restart; at the end, with everything deleted, both
# arenas hold no data.
#
# DMAR_CHAOS_SEED (default: the time) and DMAR_CHAOS_ROUNDS (default 10)
# set the sequence; the seed is printed first, so a failure can be run
# again as it was.
. "$(dirname "$0")/lib.sh"

SEED=${DMAR_CHAOS_SEED:-$(date +%s)}
ROUNDS=${DMAR_CHAOS_ROUNDS:-10}
say "chaos: seed $SEED, $ROUNDS rounds (DMAR_CHAOS_SEED=$SEED DMAR_CHAOS_ROUNDS=$ROUNDS to run it again)"

net_setup
need tc
net_ns a
net_ns b
net_peers_file
net_token_file
export DMARFS_STAGE_SECONDS=5 DMARFS_REMOTE_CACHE_SECONDS=3
net_node_start a "" size=640m
A=$NODE_MNT
net_node_start b "" size=256m
B=$NODE_MNT
S=$T/src
mkdir -p "$S"

rng=$SEED
# rnd N: a number in [0, N) from the seeded sequence, in R
rnd() {
	rng=$(((rng * 1103515245 + 12345) % 2147483648))
	R=$(((rng / 65536) % $1))
}

# The sources a ships: sizes in MiB, the last bigger than b's arena.
i=0
for mb in 3 12 40 72 300; do
	mkprng "$S/src$i" $((mb * MiB)) $((SEED % 1000 + i))
	i=$((i + 1))
done
NSRC=$i

# The model: the files b holds, "name digest" per line.
MODEL=$T/model
: >"$MODEL"
model_add() { grep -v "^$1 " "$MODEL" >"$MODEL.n" || :; echo "$1 $2" >>"$MODEL.n"; mv "$MODEL.n" "$MODEL"; }
model_del() { grep -v "^$1 " "$MODEL" >"$MODEL.n" || :; mv "$MODEL.n" "$MODEL"; }
model_pick() {
	_n=$(wc -l <"$MODEL")
	[ "$_n" -gt 0 ] || return 1
	rnd "$_n"
	PICK=$(sed -n "$((R + 1))p" "$MODEL" | cut -d' ' -f1)
}

# ship SRC NAME: cp SRC into a/@b/NAME; on success the model has it, on
# failure b has no NAME (and a full b said ENOSPC).
ship() {
	if cp "$1" "$A/@b/$2" 2>"$T/cp.err"; then
		model_add "$2" "$(digest "$1")"
		say "  $2: shipped"
	else
		[ ! -e "$B/$2" ] || fail "$2: the cp failed ($(cat "$T/cp.err")) and left $(stat -c %s "$B/$2") bytes at b"
		say "  $2: failed: $(cat "$T/cp.err")"
		model_del "$2"
	fi
}

# midship NAME ACTION: a shaped ship of 64 MiB new to b; once b has
# received 8 MiB, ACTION runs; then the cp's outcome is checked as in ship.
midship() {
	set -- "$T/mid" "$1" "$2"
	mkprng "$1" $((64 * MiB)) $((SEED % 1000 + 100 + seq_no))
	net_exec a tc qdisc add dev eth0 root tbf rate 400mbit burst 512kb latency 200ms || fail "cannot shape a's eth0"
	_used0=$(net_node_info b arena.used)
	cp "$1" "$A/@b/$2" 2>"$T/cp.err" &
	_cp=$!
	CLEANUP_PIDS="$_cp"
	_n=300
	while [ "$(net_node_info b arena.used)" -lt $((_used0 + 8 * MiB)) ]; do
		kill -0 "$_cp" 2>/dev/null || break
		_n=$((_n - 1))
		[ "$_n" -gt 0 ] || fail "b received less than 8 MiB in 30 s"
		sleep 0.1
	done
	"$3"
	if wait "$_cp"; then
		model_add "$2" "$(digest "$1")"
		say "  $2: shipped (the transfer survived)"
	else
		say "  $2: failed: $(cat "$T/cp.err")"
		model_del "$2"
	fi
	CLEANUP_PIDS=""
	net_exec a tc qdisc del dev eth0 root 2>/dev/null || :
	[ -e "$B/$2" ] && ! grep -q "^$2 " "$MODEL" && fail "$2: the cp failed and left $(stat -c %s "$B/$2") bytes at b"
	:
}
kill_b() { net_node_kill b; net_node_start b "" size=256m; B=$NODE_MNT; }
kill_a() { net_node_kill a; net_node_start a "" size=640m; A=$NODE_MNT; }
link_blip() { net_exec a ip link set eth0 down; sleep 2; net_exec a ip link set eth0 up; }

# b holds exactly the model's files, each bit-exact (with full: read).
check_b() {
	ls "$B" | grep -v '^@' | sort >"$T/have"
	cut -d' ' -f1 "$MODEL" | sort >"$T/want"
	cmp -s "$T/have" "$T/want" || fail "b holds [$(tr '\n' ' ' <"$T/have")], the model [$(tr '\n' ' ' <"$T/want")]"
	[ "${1:-}" = full ] || return 0
	while read -r _f _d; do
		[ "$(digest_uncached "$B/$_f")" = "$_d" ] || fail "b's $_f differs from what was shipped"
	done <"$MODEL"
}

seq_no=0
round=1
while [ "$round" -le "$ROUNDS" ]; do
	rnd 7
	act=$R
	rnd "$NSRC"
	src=$S/src$R
	seq_no=$((seq_no + 1))
	name=f$seq_no
	full=
	case $act in
	0)
		check "round $round: ship src$R as $name"
		ship "$src" "$name"
		;;
	1)
		if model_pick; then
			check "round $round: near-dup of $PICK as $name"
			cp "$B/$PICK" "$T/near" || fail "read $B/$PICK"
			rnd 16
			dd if=/dev/urandom of="$T/near" bs=65536 count=1 seek="$R" conv=notrunc status=none
			ship "$T/near" "$name"
		else
			check "round $round: ship src0 as $name (nothing to near-dup)"
			ship "$S/src0" "$name"
		fi
		;;
	2)
		if model_pick; then
			check "round $round: delete $PICK at b"
			rm "$B/$PICK" || fail "rm $B/$PICK"
			model_del "$PICK"
		else
			round=$((round + 1))
			continue
		fi
		;;
	3)
		check "round $round: b killed mid-ship of $name"
		midship "$name" kill_b
		full=full
		;;
	4)
		check "round $round: a killed mid-ship of $name"
		midship "$name" kill_a
		full=full
		;;
	5)
		check "round $round: a's link down for 2 s mid-ship of $name"
		midship "$name" link_blip
		;;
	6)
		check "round $round: a local 48 MiB write at b, then removed"
		sleep 2.5 # stages younger than 2 s belong to a transfer still running
		if head -c $((48 * MiB)) "$S/src4" >"$B/local" 2>"$T/w.err"; then
			say "  written"
		else
			grep -q 'No space left on device' "$T/w.err" || fail "the local write failed: $(cat "$T/w.err")"
			say "  ENOSPC (b holds $(mib "$(data_bytes "$B")") of files)"
		fi
		rm -f "$B/local"
		;;
	esac
	check_b $full
	check_arena "$A" "a's arena after round $round"
	check_arena "$B" "b's arena after round $round"
	round=$((round + 1))
done

check "everything deleted at both ends: no data left in either arena (staged chunks and copies expire)"
check_b full
rm -f "$B"/f*
wait_data_below "$A" 1 20 || fail "a's arena holds $(mib "$(data_bytes "$A")") of data: $(arena_check "$A")"
wait_data_below "$B" 1 30 ||
	fail "b's arena holds $(mib "$(data_bytes "$B")") of data ($(net_node_info b store.staged) staged): $(arena_check "$B")"
check_arena "$A" "a's emptied arena"
check_arena "$B" "b's emptied arena"
net_node_stop a
net_node_stop b
finish
