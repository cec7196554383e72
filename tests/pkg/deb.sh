#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/pkg/deb.sh - the Debian packages (debian/): dpkg-buildpackage
# -us -uc -b from a copy of the tree builds dmarfs_*.deb and
# dmar-arena-dkms_*.deb, lintian finds no error in them, and dmarfs_*.deb
# installs into an empty root of its own (dpkg --root: the host's package
# database is not touched) with dmar, dmarfs, mount.dmarfs, the unit and
# the man pages in place; the installed dmarfs mounts an arena, keeps a
# file and unmounts, and so does the installed mount.dmarfs (what mount -t
# dmarfs runs), with the installed dmarfs; its prerm, at a removal, unmounts every dmarfs mount
# (run in a mount namespace of its own, so that it sees only the mounts of
# this test and copies of the others', which it cannot harm), refuses
# while one is busy, and leaves mounts alone at an upgrade; a purge
# (its scripts run for that root: nothing of this system's is touched)
# leaves no file behind.  The DKMS package's contents are checked, and
# dkms builds its source for the newest kernel headers here, in trees of
# the test's own (its scripts would run dkms on this system, so it is not
# installed; the module itself is loaded and tested in tests/kmod/run.sh).
# Skips (77) without dpkg-buildpackage, debhelper or dh-dkms, outside a
# git tree, and in a sanitizer build (the plain pass runs it).
. "$(dirname "$0")/../fs/lib.sh"

for t in dpkg-buildpackage dh dh_dkms git; do
	command -v "$t" >/dev/null || skip "no $t (debhelper, dh-dkms, git)"
done
[ -e "$top_srcdir/.git" ] || skip "$top_srcdir is not a git tree"
nm "$DMARFS" 2>/dev/null | grep -q __asan_init && skip "a sanitizer build: the plain pass builds the packages"
fs_setup

check "dpkg-buildpackage -us -uc -b builds both packages"
S=$T/src/dmarfs
mkdir -p "$S"
(cd "$top_srcdir" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -x -C "$S" ||
	fail "copying the tree"
(cd "$S" && timeout 900 dpkg-buildpackage -us -uc -b) >"$T/build.log" 2>&1 ||
	fail "dpkg-buildpackage: $(tail -n 15 "$T/build.log")"
DEB=$(ls "$T"/src/dmarfs_*_*.deb 2>/dev/null | grep -v dbgsym | head -n 1)
DKMS=$(ls "$T"/src/dmar-arena-dkms_*_all.deb 2>/dev/null | head -n 1)
[ -f "$DEB" ] && [ -f "$DKMS" ] || fail "no packages: $(ls "$T/src")"
say "  $(basename "$DEB"), $(basename "$DKMS")"

if command -v lintian >/dev/null; then
	check "lintian: no errors"
	lintian --tag-display-limit 0 "$T"/src/dmarfs_*.changes >"$T/lintian" 2>&1 || :
	grep -v 'root privileges' "$T/lintian" | sed 's/^/  /'
	! grep -q '^E: ' "$T/lintian" || fail "lintian errors (above)"
else
	say "  note: no lintian: not run"
fi

check "the DKMS package has the module's source and dkms.conf"
dpkg -c "$DKMS" >"$T/dkms.list"
for f in dkms.conf dmar_arena.c Kbuild Makefile include/uapi/dmar_arena.h; do
	grep -q "usr/src/dmar-arena-[0-9]*/$f\$" "$T/dkms.list" || fail "no $f in $(basename "$DKMS")"
done
dpkg -I "$DKMS" | grep -q 'Depends:.*dkms' || fail "$(basename "$DKMS") does not depend on dkms"

check "DKMS builds the packaged source for this machine's Debian kernel headers"
KVER=""
for d in /lib/modules/*; do
	[ -f "$d/build/Makefile" ] && KVER=$(basename "$d")
done
if [ -z "$KVER" ] || ! command -v dkms >/dev/null; then
	say "  note: no kernel headers (linux-headers-amd64) or no dkms: not built"
else
	dpkg -x "$DKMS" "$T/dkmsroot" || fail "dpkg -x $(basename "$DKMS")"
	src=$(cd "$T/dkmsroot/usr/src" && ls -d dmar-arena-*) || fail "no /usr/src/dmar-arena-* in the package"
	ver=${src#dmar-arena-}
	# Trees of the test's own (--dkmstree, --sourcetree), and a tmpfs on
	# /var/lib/dkms in a mount namespace of its own for the signing key
	# dkms makes when it finds none: nothing of this system's changes.
	mkdir -p "$T/dkmstree"
	unshare -m --propagation private sh -c 'mount -t tmpfs tmpfs /var/lib/dkms && exec "$@"' sh \
		dkms build --dkmstree "$T/dkmstree" --sourcetree "$T/dkmsroot/usr/src" -m dmar-arena -v "$ver" -k "$KVER" \
		>"$T/dkms.log" 2>&1 || fail "dkms build: $(tail -n 15 "$T/dkms.log")"
	ko=$(find "$T/dkmstree" -name 'dmar_arena.ko*' | head -n 1)
	[ -n "$ko" ] || fail "dkms built no dmar_arena.ko: $(tail -n 5 "$T/dkms.log")"
	[ "$(modinfo -F name "$ko")" = dmar_arena ] || fail "$ko: modinfo name $(modinfo -F name "$ko")"
	case $(modinfo -F vermagic "$ko") in "$KVER "*) ;; *) fail "$ko: vermagic $(modinfo -F vermagic "$ko"), not $KVER" ;; esac
	say "  dkms built dmar-arena $ver for $KVER: $(basename "$ko"), $(fsize "$ko") bytes"
fi

check "dmarfs installs into an empty root"
R=$T/root
mkdir -p "$R/var/lib/dpkg/info" "$R/var/lib/dpkg/updates" "$R/var/lib/dpkg/triggers"
: >"$R/var/lib/dpkg/status"
: >"$R/var/lib/dpkg/available"
# --force-script-chrootless: the empty root has no shell to chroot into;
# dpkg names the root in DPKG_ROOT, and the scripts leave this system be
dpkg --root="$R" --force-depends --force-script-chrootless -i "$DEB" >"$T/install.log" 2>&1 ||
	fail "dpkg -i: $(cat "$T/install.log")"
for f in usr/bin/dmar usr/bin/dmarfs sbin/mount.dmarfs lib/systemd/system/dmarfs@.service \
	usr/share/man/man1/dmar.1.gz usr/share/man/man8/dmarfs.8.gz usr/share/man/man8/mount.dmarfs.8.gz \
	usr/share/doc/dmarfs/copyright; do
	[ -e "$R/$f" ] || fail "no /$f after the install"
done
"$R/usr/bin/dmar" --version | grep -q '^dmar (dmarfs)' || fail "dmar --version: $("$R/usr/bin/dmar" --version 2>&1)"

check "the installed dmarfs mounts an arena and keeps a file"
DMARFS=$R/usr/bin/dmarfs fs_mount "size=16m"
m=$MNT
mkprng "$T/f" 3000000 3
cp "$T/f" "$m/f" || fail "cp into the mount"
cmp -s "$T/f" "$m/f" || fail "the file differs"
check_arena "$m"
fs_umount "$m"

check "the package's mount.dmarfs (what mount -t dmarfs runs) mounts with the package's dmarfs"
mkdir -p "$T/hm"
PATH="$R/usr/bin:$PATH" "$R/sbin/mount.dmarfs" deb-helper "$T/hm" -o size=16m >"$T/helper.log" 2>&1 ||
	fail "mount.dmarfs: $(cat "$T/helper.log")"
is_mounted "$T/hm" || fail "mount.dmarfs returned, nothing mounted on $T/hm"
hp=$(pgrep -f "dmarfs deb-helper " | head -n 1)
[ -n "$hp" ] && [ "$(readlink "/proc/$hp/exe")" = "$R/usr/bin/dmarfs" ] ||
	{ fusermount3 -u "$T/hm"; fail "the helper's daemon is not the package's dmarfs: pid '$hp', $(readlink "/proc/$hp/exe" 2>&1)"; }
cp "$T/f" "$T/hm/f" && cmp -s "$T/f" "$T/hm/f" || { fusermount3 -u "$T/hm"; fail "a file through the helper's mount"; }
fusermount3 -u "$T/hm" || fail "unmount of the helper's mount"
wait_pid_exit "$hp" 10 || fail "the helper's daemon (pid $hp) still runs 10 s after the unmount"

check "the prerm of a removal unmounts every dmarfs mount; a busy one stops it; an upgrade leaves them"
PRERM=$R/var/lib/dpkg/info/dmarfs.prerm
[ -x "$PRERM" ] || fail "no prerm in the package"
mkdir -p "$T/p1" "$T/p 2"
cat >"$T/prerm-test.sh" <<'EOF'
# in a private mount namespace: $1 dmarfs, $2 prerm, $3 $4 mount points
set -u
D=$1 P=$2 A=$3 B=$4
mounted() { awk -v d="$1" '$3 == "fuse.dmarfs" { gsub(/\\040/, " ", $2); if ($2 == d) f = 1 } END { exit !f }' /proc/self/mounts; }
up() {
	"$D" "$1" "$2" -o size=8m -f >/dev/null 2>&1 &
	for _ in $(seq 100); do mounted "$2" && return 0; sleep 0.1; done
	echo "no mount on $2"; exit 1
}
up pa "$A"; pa=$!
up pb "$B"; pb=$!
trap 'kill $pa $pb 2>/dev/null' EXIT
DPKG_ROOT="" sh "$P" upgrade 1.0 || { echo "prerm upgrade failed"; exit 1; }
mounted "$A" && mounted "$B" || { echo "prerm upgrade unmounted a node"; exit 1; }
(cd "$B" && exec sleep 60) & busy=$!
sleep 0.2
if DPKG_ROOT="" sh "$P" remove 2>err; then echo "prerm remove succeeded with $B busy"; exit 1; fi
grep -q "cannot unmount: *$B" err || { echo "the refusal does not name $B: $(cat err)"; exit 1; }
! mounted "$A" || { echo "$A still mounted after the refused removal"; exit 1; }
kill "$busy"; wait "$busy" 2>/dev/null
DPKG_ROOT="" sh "$P" remove || { echo "prerm remove failed: $(cat err)"; exit 1; }
! awk '$3 == "fuse.dmarfs"' /proc/self/mounts | grep -q . || { echo "left mounted: $(awk '$3 == "fuse.dmarfs"' /proc/self/mounts)"; exit 1; }
for p in $pa $pb; do
	for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
	! kill -0 "$p" 2>/dev/null || { echo "node pid $p still running after the unmount"; exit 1; }
done
echo ok
EOF
(cd "$T" && unshare -m --propagation private sh "$T/prerm-test.sh" "$R/usr/bin/dmarfs" "$PRERM" "$T/p1" "$T/p 2") \
	>"$T/prerm.out" 2>&1
grep -qx ok "$T/prerm.out" || fail "the prerm: $(cat "$T/prerm.out")"

check "a purge leaves no file behind"
dpkg --root="$R" --force-script-chrootless --purge dmarfs >"$T/purge.log" 2>&1 ||
	fail "dpkg --purge: $(cat "$T/purge.log")"
left=$(cd "$R" && find . ! -type d ! -path './var/lib/dpkg/*' | head -n 5)
[ -z "$left" ] || fail "left after the purge: $left"
say "PASS: deb"
