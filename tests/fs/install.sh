#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/fs/install.sh - what a user does after `make install`: mount with
# `mount -t dmarfs`, with an /etc/fstab line (`mount DIR`, `mount -a`), read
# the man pages, and `umount`.
#
# The build is installed into a temp DESTDIR; a private mount namespace
# then lays that tree over / with overlayfs (/usr/sbin, where mount(8) looks
# for /sbin/mount.dmarfs, and /usr/local), so the real mount(8) finds the
# real installed helper while the host's /sbin and /usr/local stay as they
# were.  Everything below runs inside that namespace; its mounts vanish
# with it.
. "$(dirname "$0")/lib.sh"

fs_setup
need unshare
need make
grep -qw overlay /proc/filesystems || skip "no overlayfs in this kernel"
[ "$(id -u)" = 0 ] || skip "needs root (make install into a namespace, mount -t)"
[ -f "$top_builddir/Makefile" ] || skip "no Makefile in $top_builddir"

check "make install DESTDIR=... installs dmar, dmarfs, mount.dmarfs and the man pages"
dest=$T/dest
make -s -C "$top_builddir" install DESTDIR="$dest" >"$T/install.log" 2>&1 ||
	fail "make install: $(tail -c 600 "$T/install.log")"
helper_dir=$(sed -n 's/^MOUNT_HELPER_DIR = //p' "$top_builddir/Makefile")
prefix=$(sed -n 's/^prefix = //p' "$top_builddir/Makefile")
mandir=$(sed -n 's/^mandir = //p' "$top_builddir/Makefile" | sed "s|\${datarootdir}|$prefix/share|; s|\${prefix}|$prefix|")
for f in "$helper_dir/mount.dmarfs" "$prefix/bin/dmarfs" "$prefix/bin/dmar" \
	"$mandir/man8/dmarfs.8" "$mandir/man8/mount.dmarfs.8" "$mandir/man1/dmar.1"; do
	[ -e "$dest$f" ] || fail "make install did not install $f"
done
[ -x "$dest$helper_dir/mount.dmarfs" ] || fail "$helper_dir/mount.dmarfs is not executable"
case $helper_dir in
/sbin | /usr/sbin) ;;
*) skip "configured with a mount helper dir ($helper_dir) that mount(8) does not search" ;;
esac
case $prefix in
/usr/local) ;;
*) skip "configured with prefix $prefix; this test lays /usr/local over the host" ;;
esac

# The whole scenario, in a private mount namespace (sh -eu: any failing
# command fails it; every check says what it checks).
cat >"$T/inns.sh" <<'EOF'
set -eu
T=$1
HELPER_DIR=${HELPER_DIR:?}
dest=$T/dest
check() { printf 'check: %s\n' "$*"; }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
mounted() { awk -v m="$1" '$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo; }
gone() {	# DIR: no daemon left whose command line names DIR (5 s)
	n=50
	while grep -qs "$1" /proc/[0-9]*/cmdline 2>/dev/null; do
		n=$((n - 1)); [ "$n" -gt 0 ] || return 1; sleep 0.1
	done
}
# Lay DESTDIR's helper dir over the real one mount(8) searches (on a
# merged-/usr system /sbin is a link to usr/sbin: follow it), and
# DESTDIR's /usr/local over the host's.
lay() {	# REAL_DIR UPPER_DIR
	w=$T/work$1
	mkdir -p "$w" "$2"
	mount -t overlay overlay -o "lowerdir=$1,upperdir=$2,workdir=$w" "$1"
}
lay "$(readlink -f "$HELPER_DIR")" "$dest$HELPER_DIR"
lay /usr/local "$dest/usr/local"
[ -x /sbin/mount.dmarfs ] || die "overlay: /sbin/mount.dmarfs not visible"
export PATH=/usr/local/bin:$PATH

check "mount -t dmarfs -o size=32m,encode=zstd NAME DIR (mount(8) runs /sbin/mount.dmarfs)"
mkdir "$T/m1"
mount -t dmarfs -o size=32m,encode=zstd,noatime install-t "$T/m1" || die "mount -t dmarfs exited $?"
mounted "$T/m1" || die "nothing mounted on $T/m1"
line=$(awk -v m="$T/m1" '$5 == m' /proc/self/mountinfo)
case $line in *" - fuse.dmarfs install-t "*) ;; *) die "mountinfo: $line" ;; esac
case $line in *noatime*) ;; *) die "noatime not applied: $line" ;; esac
head -c 3000000 /dev/urandom >"$T/src"
cp "$T/src" "$T/m1/f"
cmp "$T/src" "$T/m1/f" || die "read back differs"
bs=$(stat -f -c '%S %b' "$T/m1" | awk '{ print $1 * $2 }')
[ "$bs" -ge 30000000 ] && [ "$bs" -le 34000000 ] || die "statfs size $bs, expected about 32 MiB"
check "umount DIR ends the daemon"
umount "$T/m1" || die "umount exited $?"
! mounted "$T/m1" || die "still mounted after umount"
gone "$T/m[1]" || die "a dmarfs for $T/m1 still runs 5 s after umount"

check "an fstab line: mount DIR and mount -a -t dmarfs mount it; mount -t dmarfs with a bad option fails"
mkdir "$T/m2" "$T/m3"
cat >"$T/fstab" <<FSTAB
# test fstab (mount --fstab)
fstab-a  $T/m2  dmarfs  size=16m,mode=0750,noauto  0 0
fstab-b  $T/m3  dmarfs  size=16m,nr_inodes=100  0 0
FSTAB
mount -T "$T/fstab" "$T/m2" || die "mount DIR from the fstab exited $?"
mounted "$T/m2" || die "fstab line 1 not mounted"
[ "$(stat -c %a "$T/m2")" = 750 ] || die "mode=0750 from fstab: got $(stat -c %a "$T/m2")"
! mounted "$T/m3" || die "mount DIR mounted another line too"
mount -a -T "$T/fstab" -t dmarfs || die "mount -a exited $?"
mounted "$T/m3" || die "mount -a did not mount the auto line"
files=$(stat -f -c %c "$T/m3")
[ "$files" = 100 ] || die "nr_inodes=100 from fstab: statfs says $files"
umount "$T/m2" && umount "$T/m3" || die "umount of the fstab mounts"
gone "$T/m[23]" || die "fstab daemons still run after umount"
rc=0
mount -t dmarfs -o size=16m,nosuchopt bad "$T/m2" 2>"$T/err" || rc=$?
[ "$rc" != 0 ] || die "mount -t dmarfs with an unknown option exited 0"
grep -q "unknown option 'nosuchopt'" "$T/err" || die "bad option message: $(head -c 300 "$T/err")"
! mounted "$T/m2" || die "mounted despite a bad option"

check "man finds the installed pages"
if command -v man >/dev/null 2>&1; then
	for p in dmar mount.dmarfs dmarfs; do
		MANPATH=/usr/local/share/man man -w "$p" >/dev/null 2>&1 || die "man -w $p finds no page"
	done
	MANPATH=/usr/local/share/man man -P cat mount.dmarfs 2>/dev/null | grep -q 'mount.dmarfs' ||
		die "man mount.dmarfs does not show the page"
fi
echo "inns: ok"
EOF
rc=0
HELPER_DIR=$helper_dir timeout 120 unshare --mount --propagation private sh "$T/inns.sh" "$T" >"$T/inns.out" 2>&1 || rc=$?
cat "$T/inns.out"
[ "$rc" = 0 ] || fail "the install scenario failed (exit $rc)"
grep -q '^inns: ok$' "$T/inns.out" || fail "the install scenario did not finish"
check "the host's /sbin and /usr/local were not touched"
[ ! -e /sbin/mount.dmarfs ] || [ -n "$(find /sbin/mount.dmarfs ! -newer "$T/install.log" 2>/dev/null)" ] ||
	fail "/sbin/mount.dmarfs appeared on the host"
finish
