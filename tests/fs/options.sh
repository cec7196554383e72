#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/fs/options.sh - the dmarfs command line and mount options:
#   --help / --version; every kind of bad option gives a clear message on
#   stderr, a non-zero exit and no mount; a missing /dev/fuse (in a private
#   mount namespace with an empty /dev) is named; pagesize=2M,strict fails
#   with a message about huge pages when the pool is short (or, with a pool,
#   mounts on hugetlb); good options take effect (size, mode/uid/gid,
#   nr_inodes, ro, generic mount options); SIGTERM and umount end the daemon
#   cleanly.
. "$(dirname "$0")/lib.sh"

fs_setup
[ -x "$FSUTIL" ] || fail "helper not built: $FSUTIL"
need timeout

# run CMD...: stdout/stderr to $T/out, $T/err; status in $rc.
run() {
	rc=0
	"$@" >"$T/out" 2>"$T/err" || rc=$?
}

# ---- --help, --version --------------------------------------------------------
check "dmarfs --help: usage on stdout, exit 0, stderr empty"
run "$DMARFS" --help
[ "$rc" = 0 ] || fail "--help exited $rc"
grep -q '^Usage: dmarfs NAME MOUNTPOINT' "$T/out" || fail "--help: no usage line: $(head -n 2 "$T/out")"
for o in size= nr_inodes= mode= uid= gid= pagesize= strict encode= bytepack= node=; do
	grep -q -- "$o" "$T/out" || fail "--help does not mention $o"
done
[ ! -s "$T/err" ] || fail "--help wrote to stderr: $(head -c 200 "$T/err")"
run "$DMARFS" -h
[ "$rc" = 0 ] && grep -q '^Usage:' "$T/out" || fail "-h: exit $rc"

check "dmarfs --version"
run "$DMARFS" --version
[ "$rc" = 0 ] || fail "--version exited $rc"
grep -Eq '^dmarfs [0-9]+\.[0-9]+' "$T/out" || fail "--version printed: $(head -c 100 "$T/out")"

# ---- bad options -----------------------------------------------------------------
mkdir "$T/m"
# refused ERE ARGS...: dmarfs ARGS exits non-zero with stderr matching ERE,
# and nothing is mounted (bounded: a dmarfs that wrongly accepts and stays
# in the foreground is stopped by timeout, which SIGTERMs it).
refused() {
	_re=$1
	shift
	check "refused: dmarfs $* -> /$_re/"
	rc=0
	timeout 20 "$DMARFS" "$@" >"$T/out" 2>"$T/err" || rc=$?
	if is_mounted "$T/m"; then
		unmount_dir "$T/m"
		fail "dmarfs $* mounted (must refuse)"
	fi
	[ "$rc" != 0 ] || fail "dmarfs $* exited 0 (must fail)"
	[ "$rc" != 124 ] || fail "dmarfs $* ran until the timeout (must fail at once)"
	grep -Eq -- "$_re" "$T/err" || fail "dmarfs $*: stderr does not match /$_re/: $(head -c 300 "$T/err")"
	[ "$(wc -l <"$T/err")" -le 30 ] || fail "dmarfs $*: $(wc -l <"$T/err") lines of error output"
	head -n 1 "$T/err" | grep -q '^dmarfs: \|^Usage: ' || fail "dmarfs $*: message does not start with 'dmarfs: '"
}
m=$T/m
refused "unknown option 'bogus'" x "$m" -o size=16m,bogus -f
refused "unknown option 'bogus'" x "$m" -o bogus=1 -f
refused "invalid value 'abc' for option 'size'" x "$m" -o size=abc -f
refused "invalid value '' for option 'size'|option 'size'" x "$m" -o size= -f
refused "invalid value '0' for option 'size'" x "$m" -o size=0 -f
refused "invalid value '-5m' for option 'size'" x "$m" -o size=-5m -f
refused "invalid value '12q' for option 'size'" x "$m" -o size=12q -f
refused "invalid value '200%' for option 'size'" x "$m" -o size=200% -f
refused "invalid value 'bogus' for option 'encode'" x "$m" -o encode=bogus -f
refused "invalid value '3M' for option 'pagesize'" x "$m" -o pagesize=3M -f
refused "invalid value '20' for option 'level'" x "$m" -o level=20 -f
refused "invalid value '999' for option 'mode'" x "$m" -o mode=999 -f
refused "invalid value 'x' for option 'uid'" x "$m" -o uid=x -f
refused "option 'strict' takes no value" x "$m" -o strict=1 -f
refused "option 'size' needs a value" x "$m" -o size -f
refused "bytepack= needs encode=zstd" x "$m" -o bytepack=/nonexistent -f
refused "bytepack: /nonexistent/pack: No such file" x "$m" -o size=16m,encode=zstd,bytepack=/nonexistent/pack -f
refused "-o needs a list" x "$m" -o
refused "unknown option '--bogus'" x "$m" --bogus
refused "too many arguments" x "$m" extra -f
refused "^Usage: " x
refused "mount point $T/nonexistent: No such file or directory" x "$T/nonexistent" -o size=16m -f

# ---- missing /dev/fuse ----------------------------------------------------------
# An empty tmpfs over /dev in a private mount namespace: /dev/fuse is gone
# for dmarfs only.
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null 2>&1 &&
	unshare --mount --propagation private sh -c 'mount -t tmpfs none /dev' 2>/dev/null; then
	check "missing /dev/fuse: a clear message naming it, exit non-zero"
	rc=0
	timeout 20 unshare --mount --propagation private sh -c \
		'mount -t tmpfs none /dev && exec "$0" x "$1" -o size=16m -f' "$DMARFS" "$m" >"$T/out" 2>"$T/err" || rc=$?
	[ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "dmarfs without /dev/fuse exited $rc"
	grep -q '/dev/fuse' "$T/err" || fail "no mention of /dev/fuse: $(head -c 300 "$T/err")"
	! is_mounted "$m" || fail "mounted without /dev/fuse?"
else
	note "not root or no unshare --mount: the missing /dev/fuse case is skipped"
fi

# ---- huge pages ---------------------------------------------------------------------
free2m=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages 2>/dev/null || echo 0)
say "  free 2 MiB huge pages: $free2m (vm.nr_hugepages=$(cat /proc/sys/vm/nr_hugepages 2>/dev/null))"
if [ "$free2m" -lt 8 ]; then
	refused "huge ?page" x "$m" -o size=16m,pagesize=2M,strict -f
	check "the strict failure says how many huge pages were free and needed"
	grep -Eq '[0-9]+ free' "$T/err" || fail "no count of free huge pages: $(head -c 300 "$T/err")"
	check "without strict it falls back, and says so"
	fs_mount "size=16m,pagesize=2M"
	grep -Eiq 'huge ?page' "$MNT_LOG" || fail "no word about huge pages in the mount message: $(head -c 300 "$MNT_LOG")"
	: >"$MNT/f"
	b=$(xattr "$MNT/f" user.dmar.backing)
	say "  backing: $b"
	[ -n "$b" ] || fail "empty user.dmar.backing"
	case $b in hugetlb*) fail "backing says hugetlb with no huge pages free: $b" ;; esac
	fs_umount "$MNT"
else
	check "pagesize=2M,strict with $free2m free huge pages mounts on hugetlb"
	fs_mount "size=16m,pagesize=2M,strict"
	: >"$MNT/f"
	b=$(xattr "$MNT/f" user.dmar.backing)
	say "  backing: $b"
	case $b in *hugetlb*) ;; *) fail "user.dmar.backing does not say hugetlb: $b" ;; esac
	fs_umount "$MNT"
fi
check "pagesize=4k: normal pages"
fs_mount "size=16m,pagesize=4k"
: >"$MNT/f"
b=$(xattr "$MNT/f" user.dmar.backing)
say "  backing: $b"
case $b in *hugetlb*) fail "pagesize=4k but backing says $b" ;; esac
fs_umount "$MNT"

# ---- good options take effect ---------------------------------------------------------
check "size=48m: statfs shows 48 MiB"
fs_mount "size=48m"
[ "$(total_bytes "$MNT")" = $((48 * MiB)) ] || fail "statfs total $(total_bytes "$MNT"), expected $((48 * MiB))"
check "df shows the mount with its name and type"
df -T "$MNT" | grep -q 'fuse.dmarfs' || fail "df -T: $(df -T "$MNT" | tail -n 1)"
if [ "$(id -u)" = 0 ] && command -v mountpoint >/dev/null 2>&1; then
	check "the daemon raises the mount's read-ahead from the kernel's 128 KiB to 1 MiB"
	ra=$(cat "/sys/class/bdi/$(mountpoint -d "$MNT")/read_ahead_kb" 2>/dev/null) || ra=none
	[ "$ra" = 1024 ] || fail "read_ahead_kb of the mount's bdi is $ra"
fi
fs_umount "$MNT"

check "size=1%: a share of RAM"
fs_mount "size=1%"
ram=$(awk '/^MemTotal:/ { printf "%.0f\n", $2 * 1024 }' /proc/meminfo)
tot=$(total_bytes "$MNT")
awk -v t="$tot" -v r="$ram" 'BEGIN { d = t - r / 100; if (d < 0) d = -d; exit !(d <= 4 * 1048576) }' ||
	fail "size=1%: statfs total $tot, 1% of RAM is $((ram / 100))"
fs_umount "$MNT"

check "mode=0750,uid=65534,gid=65534: the root directory"
fs_mount "size=16m,mode=0750,uid=65534,gid=65534"
[ "$(stat -c '%a %u %g' "$MNT")" = "750 65534 65534" ] || fail "root dir is $(stat -c '%a %u %g' "$MNT")"
fs_umount "$MNT"

check "nr_inodes=8: the ninth inode is refused with ENOSPC, statfs counts them"
fs_mount "size=16m,nr_inodes=8"
[ "$(stat -f -c %c "$MNT")" = 8 ] || fail "statfs f_files $(stat -f -c %c "$MNT"), expected 8"
made=0
err=""
for i in 1 2 3 4 5 6 7 8 9 10; do
	if ! touch "$MNT/f$i" 2>"$T/err"; then
		err=$(cat "$T/err")
		break
	fi
	made=$i
done
say "  made $made files; then: $err"
[ "$made" = 7 ] || fail "nr_inodes=8 (root included): $made files could be made, expected 7"
case $err in *"No space left on device"*) ;; *) fail "the ninth inode failed with: $err (expected ENOSPC)" ;; esac
rm "$MNT/f1"
# The idle encoder may still hold f1 (it queues every closed file) for a
# moment after the kernel forgot it; a busy machine showed the race.
i=0
until touch "$MNT/again" 2>/dev/null; do
	i=$((i + 1))
	[ $i -lt 40 ] || fail "an inode freed by rm could not be reused (2 s)"
	sleep 0.05
done
fs_umount "$MNT"

check "ro: writes fail with EROFS, reads work"
fs_mount "size=16m,ro"
if touch "$MNT/x" 2>"$T/err"; then fail "touch on a ro mount succeeded"; fi
grep -q 'Read-only file system' "$T/err" || fail "ro: touch failed with: $(cat "$T/err")"
ls "$MNT" >/dev/null || fail "ls on a ro mount"
fs_umount "$MNT"

check "generic options (nosuid,nodev,noatime,defaults,nofail) are accepted and reach the kernel"
fs_mount "size=16m,nosuid,nodev,noatime,defaults,nofail"
opts=$(awk -v m="$MNT" '$5 == m { print $6 }' /proc/self/mountinfo)
for o in nosuid nodev noatime; do
	case ",$opts," in *",$o,"*) ;; *) fail "mount options '$opts' lack $o" ;; esac
done
fs_umount "$MNT"

# ---- mount.dmarfs: what `mount -t dmarfs` and fstab run --------------------------
helper=$top_srcdir/dmarfs/mount.dmarfs
if [ -f "$helper" ]; then
	check "mount.dmarfs NAME DIR -o OPTS: daemonizes once mounted, umount ends it"
	# beside a dmarfs link, as after make install (it looks in its own dir)
	mkdir "$T/bin" "$T/hm"
	cp "$helper" "$T/bin/mount.dmarfs"
	ln -s "$DMARFS" "$T/bin/dmarfs"
	CLEANUP_MOUNTS="$T/hm"
	rc=0
	timeout 60 sh "$T/bin/mount.dmarfs" dmarfs-helper "$T/hm" -o size=16m,encode=zstd,noatime >"$T/out" 2>"$T/err" || rc=$?
	[ "$rc" = 0 ] || fail "mount.dmarfs exited $rc: $(head -c 300 "$T/err")"
	is_mounted "$T/hm" || fail "mount.dmarfs returned but nothing is mounted on $T/hm"
	line=$(awk -v m="$T/hm" '$5 == m' /proc/self/mountinfo)
	case $line in *" - fuse.dmarfs dmarfs-helper "*) ;; *) fail "mountinfo: $line (expected type fuse.dmarfs, source dmarfs-helper)" ;; esac
	echo hello >"$T/hm/f" && [ "$(cat "$T/hm/f")" = hello ] || fail "write/read on the helper's mount"
	umount "$T/hm" || fail "umount of the helper's mount"
	# the daemon goes: no process left whose command line names the dir
	n=50
	# ("h[m]": grep's own command line must not match)
	while grep -qs "$T/h[m]" /proc/[0-9]*/cmdline 2>/dev/null; do
		n=$((n - 1))
		[ "$n" -gt 0 ] || fail "a dmarfs for $T/hm still runs 5 s after umount"
		sleep 0.1
	done
	CLEANUP_MOUNTS=""
	check "mount.dmarfs -f (mount -f: fake) mounts nothing; a bad option is refused"
	sh "$T/bin/mount.dmarfs" dmarfs-helper "$T/hm" -f -o size=16m || fail "mount.dmarfs -f exited non-zero"
	! is_mounted "$T/hm" || fail "mount.dmarfs -f mounted"
	rc=0
	timeout 20 sh "$T/bin/mount.dmarfs" dmarfs-helper "$T/hm" -o size=16m,bogus >"$T/out" 2>"$T/err" || rc=$?
	[ "$rc" != 0 ] || fail "mount.dmarfs with a bad option exited 0"
	grep -q "unknown option 'bogus'" "$T/err" || fail "mount.dmarfs with a bad option: $(head -c 300 "$T/err")"
	! is_mounted "$T/hm" || { unmount_dir "$T/hm"; fail "mounted with a bad option"; }
else
	note "no dmarfs/mount.dmarfs in the source tree: helper case skipped"
fi

check "max_file_size=1m: a write, truncate or fallocate past 1 MiB is EFBIG; below it works"
fs_mount "size=16m,max_file_size=1m"
head -c 1048576 /dev/zero >"$MNT/full" || fail "a 1 MiB file under max_file_size=1m"
printf x >>"$MNT/full" 2>"$T/err" && fail "a write past max_file_size succeeded"
grep -q 'File too large' "$T/err" || fail "a write past max_file_size: '$(cat "$T/err")', not EFBIG"
truncate -s 2M "$MNT/full" 2>"$T/err" && fail "a truncate past max_file_size succeeded"
grep -q 'File too large' "$T/err" || fail "a truncate past max_file_size: '$(cat "$T/err")', not EFBIG"
fallocate -l 2M "$MNT/fa" 2>"$T/err" && fail "a fallocate past max_file_size succeeded"
grep -q 'File too large' "$T/err" || fail "a fallocate past max_file_size: '$(cat "$T/err")', not EFBIG"
[ "$(stat -c %s "$MNT/full")" = 1048576 ] || fail "the refused calls changed the file's size"
rm -f "$MNT/full" "$MNT/fa"
fs_umount "$MNT"

check "SIGTERM unmounts and ends the daemon (exit, not a crash)"
fs_mount "size=16m"
echo data >"$MNT/f"
kill -TERM "$MNT_PID"
wait_pid_exit "$MNT_PID" 10 || fail "dmarfs still running 10 s after SIGTERM"
st=0
wait "$MNT_PID" || st=$?
# libfuse's loop returns the signal number, and main() (like libfuse's
# passthrough_ll) turns that into 1; 0 would be nicer.  A status above 128
# is a death by signal: a crash in the unmount path.
[ "$st" -le 1 ] || fail "dmarfs exited $st after SIGTERM (killed by signal $((st - 128))?)"
[ "$st" = 0 ] || note "dmarfs exits $st after SIGTERM (umount gives 0)"
! is_mounted "$MNT" || fail "still mounted after SIGTERM"
finish
