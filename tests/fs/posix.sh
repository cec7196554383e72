#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/fs/posix.sh - the syscall exerciser (tests/fs/syscalls.c) on a fresh
# mount for each encoding: dedup (the default), zstd, none.  Each mount is
# 256 MiB; the daemon must end cleanly (status 0) at unmount.
. "$(dirname "$0")/lib.sh"

fs_setup
[ -x "$SYSCALLS" ] || fail "exerciser not built: $SYSCALLS"
need timeout

size=$((256 * MiB))
# allow_other: the permission check drops to uid 65534 in a child, and
# without allow_other FUSE refuses every other user outright (which would
# hide whether the mode bits are enforced).  Root may always ask for it.
# uid 65534 must also be able to walk down to the mount: $T is 0700.
extra=""
if [ "$(id -u)" = 0 ]; then
	extra=",allow_other"
	chmod 0711 "$T"
fi

failed=""
for enc in dedup zstd none; do
	fs_mount "size=256m,encode=$enc$extra"
	check "syscall exerciser, encode=$enc"
	rc=0
	timeout -k 5 150 "$SYSCALLS" "$MNT" "$size" "$enc" >"$T/syscalls.$enc.out" 2>&1 || rc=$?
	sed 's/^/  /' "$T/syscalls.$enc.out"
	[ "$rc" != 124 ] && [ "$rc" != 137 ] || fail "exerciser timed out (encode=$enc): a filesystem call hung?"
	if [ "$rc" != 0 ]; then
		# go on with the other encodings, so one run shows them all
		say "encode=$enc: exit $rc, $(grep -c '^FAIL' "$T/syscalls.$enc.out") failure lines"
		failed="$failed $enc"
		rm -rf "$MNT"/syscalls.*
	fi
	check "nothing left behind (encode=$enc)"
	[ -z "$(ls -A "$MNT")" ] || fail "mount not empty after the exerciser: $(ls -A "$MNT" | head -5 | tr '\n' ' ')"
	# Every file is gone: every inode but the root and every arena byte
	# must come back (chunk references, raw extents).  The kernel forgets
	# inodes asynchronously, so poll (bounded).
	check "no inode and no arena memory leaked (encode=$enc)"
	n=100
	while :; do
		inodes=$(stat -f -c '%c %d' "$MNT" | awk '{ print $1 - $2 }')
		used=$(data_bytes "$MNT")
		[ "$inodes" -le 1 ] && [ "$used" = 0 ] && break
		n=$((n - 1))
		if [ "$n" = 0 ]; then
			fail_later "encode=$enc: after deleting everything, $inodes inodes in use (expected 1: the root) and $(mib "$used") of data in the arena ($(arena_check "$MNT"))"
			break
		fi
		sleep 0.1
	done
	check_arena "$MNT" "encode=$enc: the arena after the exerciser"
	fs_umount "$MNT"
done
[ -z "$failed" ] || fail_later "the exerciser reported failures with encode=$failed (see FAIL lines above)"
finish
