#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/fs/stress.sh - names under churn, for a bounded time (STRESS_SECONDS,
# default 40): the namespace must never say ENOENT, EEXIST or ENOTEMPTY
# where a local filesystem would not.
#   clone    git clone --no-hardlinks of a repository of loose objects (a
#            mkdir of each objects/xx, then a create in it), checkout of the
#            older commit and back, git fsck, rm -rf, again into the same
#            path (a name that was a directory a moment ago);
#   workers  two loops making a fresh directory tree, files in it, and
#            removing it, at the same names each round;
#   idle     a file held open and written now and then, so the idle encoder
#            runs beside the rest, and every close encodes in the background;
#   forget   (root) the kernel's dentry and inode caches dropped every 0.3 s,
#            so lookups, FORGETs and revalidations race with the rest.
# At the end every loop ran without an error, the daemon logged no
# lookup-count bug, the mount is empty and its arena adds up.
. "$(dirname "$0")/lib.sh"

fs_setup
need git
[ -x "$FSUTIL" ] || fail "helper not built: $FSUTIL"
SECS=${STRESS_SECONDS:-40}

# The source: two commits of a few thousand files, as loose objects (a
# clone copies each object file into a directory it has just made).
check "a source repository of loose objects"
src=$T/src
mkdir -p "$src"
inc=/usr/include/linux
[ -d "$inc" ] || inc=/usr/include
[ -d "$inc" ] || skip "no /usr/include to make a repository from"
(
	cd "$src" && git init -q . && cp -r "$inc" tree && git add -A &&
		git -c user.email=t@t -c user.name=t commit -qm one &&
		find tree -name '*.h' | head -n 300 | while read -r f; do echo "/* two */" >>"$f"; done &&
		mkdir -p tree/new && echo new >tree/new/file && git add -A &&
		git -c user.email=t@t -c user.name=t commit -qm two
) >"$T/git.out" 2>&1 || fail "making the source repository: $(tail -n 3 "$T/git.out")"
say "  $(git -C "$src" count-objects | cut -d, -f1)"

fs_mount "size=1g"
m=$MNT
end=$(($(date +%s) + SECS))
# A loop that fails writes its error here: the first one says what broke.
ERRS=$T/errors
: >"$ERRS"

clone_loop() {
	k=0
	while [ "$(date +%s)" -lt "$end" ]; do
		k=$((k + 1))
		git clone -q --no-hardlinks "$src" "$m/r" 2>"$T/clone.err" ||
			{ echo "clone round $k: git clone: $(head -c 300 "$T/clone.err")" >>"$ERRS"; return 1; }
		(cd "$m/r" && git checkout -q HEAD~1 && git checkout -q -) 2>"$T/clone.err" ||
			{ echo "clone round $k: git checkout: $(head -c 300 "$T/clone.err")" >>"$ERRS"; return 1; }
		if [ $((k % 3)) = 1 ]; then
			git -C "$m/r" fsck --full >"$T/fsck.out" 2>&1 ||
				{ echo "clone round $k: git fsck: $(head -c 300 "$T/fsck.out")" >>"$ERRS"; return 1; }
		fi
		rm -rf "$m/r" 2>"$T/clone.err" ||
			{ echo "clone round $k: rm -rf: $(head -c 300 "$T/clone.err")" >>"$ERRS"; return 1; }
	done
	echo "$k" >"$T/clone.rounds"
}

# worker N: the same names every round: dir trees made, filled, removed.
worker() {
	j=0
	while [ "$(date +%s)" -lt "$end" ]; do
		j=$((j + 1))
		d=$m/w$1/a/b$((j % 4))
		mkdir -p "$d" 2>>"$ERRS" || { echo "worker $1 round $j: mkdir -p $d" >>"$ERRS"; return 1; }
		for f in 1 2 3 4 5 6 7 8; do
			echo "$1.$j.$f" >"$d/f$f" 2>>"$ERRS" || { echo "worker $1 round $j: create $d/f$f" >>"$ERRS"; return 1; }
		done
		mv "$d/f1" "$d/g1" 2>>"$ERRS" || { echo "worker $1 round $j: rename" >>"$ERRS"; return 1; }
		[ "$(cat "$d/g1")" = "$1.$j.1" ] || { echo "worker $1 round $j: $d/g1 holds the wrong bytes" >>"$ERRS"; return 1; }
		rm -rf "$m/w$1" 2>>"$ERRS" || { echo "worker $1 round $j: rm -rf" >>"$ERRS"; return 1; }
	done
}

# A file held open, written every 2 s: the idle encoder's work.
idle_writer() {
	exec 3>"$m/held"
	while [ "$(date +%s)" -lt "$end" ]; do
		head -c 300000 /dev/urandom >&3
		sleep 2
	done
	exec 3>&-
}

dropper() {
	while [ "$(date +%s)" -lt "$end" ]; do
		echo 2 >/proc/sys/vm/drop_caches 2>/dev/null || return 0
		sleep 0.3
	done
}

check "$SECS s of clone/checkout/fsck/rm -rf, two tree workers, an idle writer$([ "$(id -u)" = 0 ] && echo ', cache drops')"
clone_loop & P1=$!
worker 1 & P2=$!
worker 2 & P3=$!
idle_writer & P4=$!
P5=""
[ "$(id -u)" = 0 ] && { dropper & P5=$!; }
rc=0
for p in $P1 $P2 $P3 $P4 $P5; do
	wait "$p" || rc=1
done
[ "$rc" = 0 ] && [ ! -s "$ERRS" ] || fail "a loop failed: $(head -c 600 "$ERRS")"
say "  $(cat "$T/clone.rounds") clone rounds"
[ "$(cat "$T/clone.rounds")" -ge 1 ] || fail "no clone round finished"

check "the daemon saw no lookup-count bug"
! grep -h 'bug:' "$T"/dmarfs.*.log || fail "the daemon logged a lookup-count bug"

check "everything removed: the mount is empty and the arena adds up"
rm -f "$m/held"
[ -z "$(ls -A "$m")" ] || fail "left in the mount: $(ls -A "$m" | head -n 5 | tr '\n' ' ')"
wait_data_below "$m" 1 30 || fail "data left in the arena: $(arena_check "$m")"
check_arena "$m" "the arena after the stress"
fs_umount "$m"
finish
