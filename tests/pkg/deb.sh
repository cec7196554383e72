#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/pkg/deb.sh - the Debian packages (debian/): dpkg-buildpackage
# -us -uc -b from a copy of the tree builds dmarfs_*.deb and
# dmar-arena-dkms_*.deb, lintian finds no error in them, and dmarfs_*.deb
# installs into an empty root of its own (dpkg --root: the host's package
# database is not touched) with dmar, dmarfs, mount.dmarfs, the unit and
# the man pages in place; the installed dmarfs mounts an arena, keeps a
# file and unmounts; a purge leaves no file behind.  The DKMS package's
# contents are checked (its scripts run dkms on the host, so it is not
# installed here; the module itself is tested in tests/kmod/run.sh).
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

check "dmarfs installs into an empty root"
R=$T/root
mkdir -p "$R/var/lib/dpkg/info" "$R/var/lib/dpkg/updates" "$R/var/lib/dpkg/triggers"
: >"$R/var/lib/dpkg/status"
: >"$R/var/lib/dpkg/available"
dpkg --root="$R" --force-depends -i "$DEB" >"$T/install.log" 2>&1 ||
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

check "a purge leaves no file behind"
dpkg --root="$R" --purge dmarfs >"$T/purge.log" 2>&1 || fail "dpkg --purge: $(cat "$T/purge.log")"
left=$(cd "$R" && find . ! -type d ! -path './var/lib/dpkg/*' | head -n 5)
[ -z "$left" ] || fail "left after the purge: $left"
say "PASS: deb"
