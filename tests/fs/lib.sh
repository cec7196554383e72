# SPDX-License-Identifier: MIT
#
# tests/fs/lib.sh - helpers for the real-mount dmarfs tests (sourced, POSIX sh).
#
# The test harness (make check) exports top_srcdir and top_builddir; run by
# hand it is enough to set DMARFS (and FSUTIL/SYSCALLS for the helpers):
#     top_builddir=/tmp/build sh tests/fs/posix.sh
# KEEP_TMP=1 keeps a test's temp dir (logs of the daemons) for a post-mortem.
#
# Conventions (as tests/cli/lib.sh): every test prints what it checks
# ("check: ..."), fails with fail() (exit 1), notes a case it cannot run
# with note(), and skips the whole test (exit 77) only through skip() when a
# prerequisite is truly absent: /dev/fuse, the right to mount, a tool.
#
# fs_setup makes the test's temp dir $T and sets `trap cleanup EXIT`;
# fs_mount starts `dmarfs -f` in the background and waits (bounded) until
# the mount is in /proc/self/mountinfo and answers; cleanup unmounts every
# mount (fusermount3 -u, then umount, then umount -l), stops the daemons and
# removes $T, on success and on failure alike.

set -eu

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
: "${DMARFS:=$top_builddir/dmarfs/dmarfs}"
: "${FSUTIL:=$top_builddir/tests/fs/fsutil}"
: "${SYSCALLS:=$top_builddir/tests/fs/syscalls}"
export LC_ALL=C

TEST_NAME=$(basename "$0" .sh)
# shellcheck disable=SC2034 # used by the tests that source this
MiB=1048576

say() { printf '%s\n' "$*"; }
check() { printf 'check: %s\n' "$*"; }
note() { printf 'note: %s\n' "$*"; }

# The logs of the daemons, to help a post-mortem.
show_logs() {
	for _l in "${T:-/nonexistent}"/dmarfs.*.log; do
		[ -f "$_l" ] || continue
		printf -- '--- %s (last 15 lines):\n' "$(basename "$_l")" >&2
		tail -n 15 "$_l" >&2 || :
	done
}

fail() {
	printf 'FAIL: %s: %s\n' "$TEST_NAME" "$*" >&2
	show_logs
	exit 1
}

# fail_later MSG: a failure that does not stop the test (later checks do
# not depend on it); finish then fails.
FAILURES=0
fail_later() {
	printf 'FAIL: %s: %s\n' "$TEST_NAME" "$*" >&2
	FAILURES=$((FAILURES + 1))
}

# finish: the end of a test: fail if fail_later was called.
finish() {
	[ "$FAILURES" = 0 ] || fail "$FAILURES check(s) failed (see the FAIL lines above)"
	say "$TEST_NAME: ok"
}

skip() {
	printf 'SKIP: %s: %s\n' "$TEST_NAME" "$*"
	exit 77
}

need() {
	command -v "$1" >/dev/null 2>&1 || skip "prerequisite '$1' not found in PATH"
}

# ---- set-up and clean-up --------------------------------------------------

MOUNTS=""      # "PID:DIR" of each mount this test started
N_MOUNTS=0

# fs_need_mount: check the prerequisites of a real mount (the dmarfs
# binary, a usable /dev/fuse, the right to mount, the tools); skips or
# fails as fs_setup does.  tests/net/lib.sh calls it before a node starts.
fs_need_mount() {
	[ -x "$DMARFS" ] || fail "dmarfs binary not found or not executable: $DMARFS (build it first)"
	[ -e /dev/fuse ] || skip "/dev/fuse is missing (no fuse module, or a container without the device)"
	[ -c /dev/fuse ] || skip "/dev/fuse is not a character device"
	if [ "$(id -u)" = 0 ]; then
		# Open it as the daemon will: a container may list the node but
		# deny it (device cgroup).
		( : <>/dev/fuse ) 2>/dev/null || skip "/dev/fuse cannot be opened (device cgroup or permissions)"
	else
		command -v fusermount3 >/dev/null 2>&1 ||
			skip "not root and no fusermount3: this user cannot mount FUSE filesystems"
		[ -u "$(command -v fusermount3)" ] ||
			skip "not root and fusermount3 is not set-user-ID: this user cannot mount"
	fi
	need mountpoint
	need openssl
}

# fs_setup: check the prerequisites of a real mount and make $T.  The
# test's arenas (named after the mounts' NAMEs, which tests running side by
# side share) live in a run directory of its own on tmpfs, removed at
# cleanup with whatever a killed daemon left there.
fs_setup() {
	fs_need_mount
	T=$(mktemp -d "${TMPDIR:-/tmp}/dmarfs-$TEST_NAME.XXXXXX")
	DMARFS_RUNDIR=$(mktemp -d /dev/shm/dmarfs-rundir-"$TEST_NAME".XXXXXX)
	export DMARFS_RUNDIR
	CLEANUP_DIRS="${CLEANUP_DIRS:-} $DMARFS_RUNDIR"
	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	say "test $TEST_NAME: dmarfs=$DMARFS tmp=$T"
}

# is_mounted DIR: DIR is a mount point in this mount namespace (from
# /proc/self/mountinfo: no stat, so it works on a dead daemon too).
is_mounted() {
	awk -v m="$1" '$5 == m { found = 1 } END { exit !found }' /proc/self/mountinfo
}

# unmount_dir DIR: every way, gentlest first; 0 once DIR is no mount point.
unmount_dir() {
	is_mounted "$1" || return 0
	if command -v fusermount3 >/dev/null 2>&1; then
		fusermount3 -u "$1" 2>/dev/null && return 0
	fi
	umount "$1" 2>/dev/null && return 0
	# Busy (a process still in there): detach it, the daemon then ends.
	fusermount3 -u -z "$1" 2>/dev/null || umount -l "$1" 2>/dev/null || :
	! is_mounted "$1"
}

# wait_pid_exit PID SECONDS: poll until PID is gone; 0 if it went.
wait_pid_exit() {
	_n=$(( $2 * 10 ))
	while [ "$_n" -gt 0 ]; do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.1
		_n=$(( _n - 1 ))
	done
	return 1
}

cleanup() {
	_rc=$?
	set +e
	for _m in $MOUNTS; do
		_pid=${_m%%:*}
		_dir=${_m#*:}
		unmount_dir "$_dir" || printf 'cleanup: could not unmount %s\n' "$_dir" >&2
		if ! wait_pid_exit "$_pid" 5; then
			kill "$_pid" 2>/dev/null
			wait_pid_exit "$_pid" 3 || kill -9 "$_pid" 2>/dev/null
		fi
		wait "$_pid" 2>/dev/null
		# A daemon killed with the mount still up leaves it dead:
		# detach it so the rm below cannot hang or reach into it.
		is_mounted "$_dir" && { umount -l "$_dir" 2>/dev/null || fusermount3 -u -z "$_dir" 2>/dev/null; }
	done
	# mounts whose daemon this test did not start itself (a helper that
	# daemonizes): unmounting ends them
	for _d in ${CLEANUP_MOUNTS:-}; do
		unmount_dir "$_d" || umount -l "$_d" 2>/dev/null
	done
	for _p in ${CLEANUP_PIDS:-}; do
		kill "$_p" 2>/dev/null
		wait "$_p" 2>/dev/null
	done
	for _d in ${CLEANUP_DIRS:-}; do
		rm -rf --one-file-system "$_d"
	done
	if [ -n "${T:-}" ] && [ -d "$T" ]; then
		if [ "${KEEP_TMP:-0}" = 1 ] || { [ "$_rc" != 0 ] && [ "$_rc" != 77 ] && [ "${KEEP_TMP_ON_FAIL:-0}" = 1 ]; }; then
			say "kept $T"
		else
			# --one-file-system: never into a mount that would not go
			rm -rf --one-file-system "$T"
		fi
	fi
	exit "$_rc"
}

# fs_mount OPTS [VAR]: mount a fresh dmarfs with -o OPTS on a new dir under
# $T; the dir goes to $MNT (and to VAR if given), the daemon's PID to
# $MNT_PID, its log to $MNT_LOG.  Waits at most ${MOUNT_TIMEOUT:-120} s: a
# mount populates its arena first, and on a VM that hands freed memory back
# to its host fresh pages were measured at 0.1 GB/s (a 2 GiB arena, 20 s).
# Skips (77) when the kernel refuses the mount for want of rights; fails when
# dmarfs itself exits or does not come up.
fs_mount() {
	N_MOUNTS=$((N_MOUNTS + 1))
	mkdir "$T/mnt$N_MOUNTS"
	fs_mount_at "dmarfs-test" "$T/mnt$N_MOUNTS" "$1"
	[ $# -lt 2 ] || eval "$2=\$MNT"
}

# fs_mount_at NAME DIR OPTS: mount arena NAME (an existing one is attached)
# on DIR, which may hold a dead mount; sets MNT, MNT_PID, MNT_LOG (each
# mount of the test its own log, appended to).
fs_mount_at() {
	MNT=$2
	MNT_LOG=$T/dmarfs.$(basename "$2").log
	check "mount dmarfs $1 -o $3 on $MNT"
	"$DMARFS" "$1" "$MNT" -o "$3" -f >>"$MNT_LOG" 2>&1 &
	MNT_PID=$!
	MOUNTS="$MOUNTS $MNT_PID:$MNT"
	_n=$(( ${MOUNT_TIMEOUT:-120} * 10 ))
	while :; do
		if is_mounted "$MNT" && kill -0 "$MNT_PID" 2>/dev/null; then
			# in the table; now the daemon must answer
			if timeout 10 stat -f "$MNT" >/dev/null 2>&1 && mountpoint -q "$MNT"; then
				break
			fi
		fi
		if ! kill -0 "$MNT_PID" 2>/dev/null; then
			wait "$MNT_PID" 2>/dev/null && _st=0 || _st=$?
			if grep -Eq 'Operation not permitted|Permission denied|fuse: device not found|No such device' "$MNT_LOG"; then
				skip "cannot mount FUSE here: $(tr '\n' ' ' <"$MNT_LOG" | head -c 300)"
			fi
			fail "dmarfs exited ($_st) before the mount was ready: $(tail -n 5 "$MNT_LOG" | tr '\n' ' ' | head -c 500)"
		fi
		_n=$((_n - 1))
		[ "$_n" -gt 0 ] || fail "mount on $MNT not ready after ${MOUNT_TIMEOUT:-120} s"
		sleep 0.1
	done
	say "mounted: $(tail -n 3 "$MNT_LOG" | tr '\n' ' ')"
}

# fs_kill DIR: SIGKILL the daemon of DIR (its mount stays, dead) and
# forget it; the next fs_mount_at on DIR detaches the dead mount.
fs_kill() {
	_new=""
	for _m in $MOUNTS; do
		if [ "${_m#*:}" = "$1" ]; then
			kill -9 "${_m%%:*}" 2>/dev/null
			wait "${_m%%:*}" 2>/dev/null || :
		else
			_new="$_new $_m"
		fi
	done
	MOUNTS=$_new
	CLEANUP_MOUNTS="${CLEANUP_MOUNTS:-} $1"
}

# fs_umount DIR: unmount and check that the daemon ends, with status 0.
fs_umount() {
	_pid=""
	for _m in $MOUNTS; do
		[ "${_m#*:}" = "$1" ] && _pid=${_m%%:*}
	done
	[ -n "$_pid" ] || fail "fs_umount: $1 was not mounted by this test"
	check "unmount $1 and the daemon ends cleanly"
	if command -v fusermount3 >/dev/null 2>&1; then
		fusermount3 -u "$1" || fail "fusermount3 -u $1 failed"
	else
		umount "$1" || fail "umount $1 failed"
	fi
	! is_mounted "$1" || fail "$1 still mounted after unmount"
	wait_pid_exit "$_pid" 10 || fail "dmarfs (pid $_pid) still running 10 s after unmount"
	wait "$_pid" && _st=0 || _st=$?
	[ "$_st" = 0 ] || fail "dmarfs exited with status $_st after unmount"
	_new=""
	for _m in $MOUNTS; do
		[ "${_m#*:}" = "$1" ] || _new="$_new $_m"
	done
	MOUNTS=$_new
}

# ---- measuring --------------------------------------------------------------

# used_bytes DIR: arena bytes in use per statfs ((blocks - free) * frsize).
used_bytes() {
	stat -f -c '%b %f %S' "$1" | awk '{ printf "%.0f\n", ($1 - $2) * $3 }'
}

total_bytes() {
	stat -f -c '%b %S' "$1" | awk '{ printf "%.0f\n", $1 * $2 }'
}

xattr() {
	"$FSUTIL" getxattr "$1" "$2"
}

# arena_check MNT: the mount's consistency check (user.dmar.check on its
# root, check.h): one line of key=value figures, "state=ok" first when
# every reserved byte has one owner and every chunk the references its
# holders hold; then a "problem:" line when not.
arena_check() {
	"$FSUTIL" getxattr "$1" user.dmar.check
}

# check_arena MNT [WHAT]: fail unless the arena adds up.  A busy mount
# (a write or an upload in flight: check.h) may be off for a moment:
# three tries.
check_arena() {
	_try=0
	while :; do
		_c=$(arena_check "$1") || fail "user.dmar.check of $1 failed"
		case "$_c" in state=ok*) return 0 ;; esac
		_try=$((_try + 1))
		[ "$_try" -lt 3 ] || fail "${2:-the arena} does not add up: $_c"
		sleep 1
	done
}

# check_field LINE KEY: the value of KEY= in a check line.
check_field() {
	printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# data_bytes MNT: arena bytes that hold data (chunk payloads and raw
# extents): 0 once everything is deleted, whatever the journal holds.
data_bytes() {
	_c=$(arena_check "$1") || fail "user.dmar.check of $1 failed"
	echo $(($(check_field "$_c" chunk_bytes) + $(check_field "$_c" raw)))
}

# wait_data_below MNT BYTES SECONDS: poll until data_bytes < BYTES; 0 if so.
wait_data_below() {
	_n=$(( $3 * 10 ))
	while [ "$_n" -gt 0 ]; do
		[ "$(data_bytes "$1")" -lt "$2" ] && return 0
		sleep 0.1
		_n=$((_n - 1))
	done
	return 1
}

# wait_state FILE STATE [SECONDS]: poll user.dmar.state until it is STATE.
wait_state() {
	"$FSUTIL" wait-state "$1" "$2" "${3:-60}" ||
		fail "$1: user.dmar.state is '$(xattr "$1" user.dmar.state 2>&1)' after ${3:-60} s, expected '$2'"
}

# wait_used_below DIR BYTES SECONDS: poll statfs until used < BYTES; 0 if so.
wait_used_below() {
	_n=$(( $3 * 10 ))
	while [ "$_n" -gt 0 ]; do
		[ "$(used_bytes "$1")" -lt "$2" ] && return 0
		sleep 0.1
		_n=$((_n - 1))
	done
	return 1
}

digest() {
	openssl dgst -sha256 -r "$1" | cut -d' ' -f1
}

# digest_uncached FILE: the digest of FILE as the filesystem holds it (its
# cached pages dropped first).
digest_uncached() {
	"$FSUTIL" dropcache "$1" || fail "dropcache $1 failed"
	digest "$1"
}

fsize() {
	stat -c %s "$1"
}

# mkprng FILE BYTES SEED: pseudo-random bytes, the same for the same SEED.
mkprng() {
	openssl enc -aes-128-ctr -nosalt -K "$(printf '%032x' "$3")" -iv 00000000000000000000000000000000 \
		-in /dev/zero 2>/dev/null | head -c "$2" >"$1"
	[ "$(fsize "$1")" = "$2" ] || fail "mkprng: could not make $2 bytes in $1"
}

# fs_mem_source MIB SEED: a MIB MiB pseudo-random source in memory (tmpfs
# /dev/shm, else $T), so writing it into a mount is not disk-bound; removed
# at cleanup.  Sets src (its path) and src_sum (its SHA-256).
fs_mem_source() {
	_shm=/dev/shm
	[ -d "$_shm" ] && [ -w "$_shm" ] || _shm=$T
	_dir=$(mktemp -d "$_shm/dmarfs-$TEST_NAME.XXXXXX") || fail "mktemp in $_shm failed"
	CLEANUP_DIRS="${CLEANUP_DIRS:-} $_dir"
	src=$_dir/src
	check "make a $1 MiB pseudo-random source in $_dir"
	mkprng "$src" $(($1 * MiB)) "$2"
	src_sum=$(digest "$src")
}

# mib BYTES: for messages.
mib() {
	awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'
}
