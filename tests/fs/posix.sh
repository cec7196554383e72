#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/fs/posix.sh - the syscall exerciser (tests/fs/syscalls.c) on a fresh
# mount for each encoding: dedup (the default), zstd, none, and once more
# as uid 65534 on root's mount; once with the writeback cache (writeback:
# the kernel answers SEEK_DATA/SEEK_HOLE itself, with no holes); then tmpfs's permission model (uid=, gid=,
# mode=, every user on a mount by root, private).  Each mount is 256 MiB;
# the daemon must end cleanly (status 0) at unmount.
. "$(dirname "$0")/lib.sh"

fs_setup
[ -x "$SYSCALLS" ] || fail "exerciser not built: $SYSCALLS"
need timeout

size=$((256 * MiB))
# A mount by root lets every user in, the mode bits checked by the kernel
# (as tmpfs): the permission check drops to uid 65534 in a child.  uid
# 65534 must also be able to walk down to the mount: $T is 0700.
root=false
if [ "$(id -u)" = 0 ]; then
	root=true
	chmod 0711 "$T"
	need setpriv
fi
# as_user UID CMD...: CMD as UID (its own group, no others)
as_user() {
	_u=$1
	shift
	setpriv --reuid="$_u" --regid="$_u" --clear-groups "$@"
}

failed=""
for enc in dedup zstd none writeback; do
	case $enc in
	writeback) opts="encode=dedup,writeback" encoding=dedup nohole=1 ;;
	*) opts="encode=$enc" encoding=$enc nohole="" ;;
	esac
	fs_mount "size=256m,$opts"
	check "syscall exerciser, $opts"
	rc=0
	DMAR_NO_HOLES=$nohole timeout -k 5 150 "$SYSCALLS" "$MNT" "$size" "$encoding" >"$T/syscalls.$enc.out" 2>&1 ||
		rc=$?
	sed 's/^/  /' "$T/syscalls.$enc.out"
	[ "$rc" != 124 ] && [ "$rc" != 137 ] || fail "exerciser timed out (encode=$enc): a filesystem call hung?"
	if [ "$rc" != 0 ]; then
		# go on with the other encodings, so one run shows them all
		say "encode=$enc: exit $rc, $(grep -c '^FAIL' "$T/syscalls.$enc.out") failure lines"
		failed="$failed $enc"
		rm -rf "$MNT"/syscalls.*
	fi
	if $root && [ "$enc" = dedup ]; then
		check "syscall exerciser as uid 65534 on root's mount, in a directory of its own"
		mkdir "$MNT/u" && chown 65534:65534 "$MNT/u"
		rc=0
		as_user 65534 timeout -k 5 150 "$SYSCALLS" "$MNT/u" "$size" "$enc" >"$T/syscalls.user.out" 2>&1 || rc=$?
		sed 's/^/  /' "$T/syscalls.user.out"
		[ "$rc" = 0 ] || { failed="$failed $enc(uid 65534)"; rm -rf "$MNT"/u/syscalls.*; }
		rmdir "$MNT/u" || fail "the exerciser left files behind in $MNT/u"
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
# ---- tmpfs's permission model -------------------------------------------------
if $root; then
	check "uid=65534,gid=65534,mode=0700: the root is 65534's, who may use it; others may not"
	fs_mount "size=64m,uid=65534,gid=65534,mode=0700"
	[ "$(stat -c '%u:%g %a' "$MNT")" = "65534:65534 700" ] ||
		fail "root directory is $(stat -c '%u:%g %a' "$MNT"), expected 65534:65534 700"
	as_user 65534 sh -c "echo x >'$MNT/mine' && mkdir '$MNT/d' && ls '$MNT' >/dev/null" 2>"$T/err" ||
		fail "uid 65534 cannot use its own root directory: $(cat "$T/err")"
	[ "$(stat -c %u "$MNT/mine")" = 65534 ] || fail "uid 65534's file is owned by $(stat -c %u "$MNT/mine")"
	as_user 1234 ls "$MNT" >/dev/null 2>"$T/err" && fail "uid 1234 listed a 0700 root of another user"
	grep -q 'Permission denied' "$T/err" || fail "uid 1234 on a 0700 root: '$(cat "$T/err")', not EACCES"
	rm -rf "$MNT/mine" "$MNT/d"
	fs_umount "$MNT"

	check "default mount by root: mode 1777, every user may create; private: only root"
	fs_mount "size=64m"
	[ "$(stat -c %a "$MNT")" = 1777 ] || fail "root directory mode $(stat -c %a "$MNT"), expected 1777"
	as_user 1234 sh -c "echo x >'$MNT/u1234'" 2>"$T/err" || fail "uid 1234 cannot create at a 1777 root: $(cat "$T/err")"
	as_user 65534 rm -f "$MNT/u1234" 2>/dev/null && fail "uid 65534 removed uid 1234's file in a sticky root"
	rm "$MNT/u1234"
	fs_umount "$MNT"
	fs_mount "size=64m,private"
	as_user 1234 stat "$MNT/." >/dev/null 2>"$T/err" && fail "uid 1234 reached a private mount"
	grep -q 'Permission denied' "$T/err" || fail "uid 1234 on a private mount: '$(cat "$T/err")', not EACCES"
	fs_umount "$MNT"
else
	note "not root: the multi-user cases (uid 65534 on root's mount, uid=/gid=/mode=, private) not run"
fi
[ -z "$failed" ] || fail_later "the exerciser reported failures with encode=$failed (see FAIL lines above)"
finish
