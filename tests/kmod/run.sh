#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/kmod/run.sh - the dmar_arena kernel module (kmod/), built against
# Debian's linux-headers-amd64 with -Werror and sparse, checked by
# checkpatch.pl (from linux-source), then loaded in a
# guest: Debian's linux-image-amd64 under qemu-system-x86_64 (TCG: this
# machine has no KVM and its own kernel loads no modules), booted with a
# small initramfs of busybox-static, the module, vgem (and the drm modules
# it needs) and tests/kmod/arena_test, built static.  In the guest: load
# dmar_arena (max_total_mb=64) and vgem, run arena_test, check that dmesg
# has no WARNING/BUG/Oops/KASAN line, unload dmar_arena.  The guest prints
# one verdict line that this script waits for (bounded: KMOD_TIMEOUT, 300 s).
#
# Then dmarfs on the module's arenas (the build's dmarfs/dmarfs, with its
# shared libraries and fuse.ko; skipped with a note when top_builddir has
# none, or when it is a sanitizer build): a mount with keep writes files,
# unmounts and mounts again (re-attached from the kernel's arena, files
# intact), the daemon is killed with SIGKILL and the next mount of the
# same name detaches the dead mount and has every file closed before the
# kill; `dmarfs --arenas` lists the arena (backing kmod) and --drop frees
# it.  dmar export-dmabuf puts a file of the mount in a dma-buf, to a
# command and over a Unix socket, which arena_test imports into vgem.
#
# Skips (exit 77) with a message when the headers, the kernel image, qemu
# or busybox-static are missing (scripts/install-deps installs them).
set -eu
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${KMOD_TIMEOUT:=300}"
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

# The newest Debian kernel with both its image and its headers.
KVER=""
for d in /lib/modules/*; do
	v=$(basename "$d")
	[ -f "/boot/vmlinuz-$v" ] && [ -f "$d/build/Makefile" ] && KVER=$v
done
[ -n "$KVER" ] || skip "no kernel with both /boot/vmlinuz-VER and /lib/modules/VER/build (linux-image-amd64, linux-headers-amd64)"
QEMU=$(command -v qemu-system-x86_64) || skip "no qemu-system-x86_64 (qemu-system-x86)"
BUSYBOX=/bin/busybox
file -L "$BUSYBOX" 2>/dev/null | grep -q "statically linked" || skip "no static /bin/busybox (busybox-static)"
command -v cpio >/dev/null || skip "no cpio"
MODDIR=/lib/modules/$KVER/kernel/drivers/gpu/drm
for m in drm.ko drm_shmem_helper.ko vgem/vgem.ko; do
	[ -f "$MODDIR/$m" ] || skip "no $MODDIR/$m"
done

T=$(mktemp -d "${TMPDIR:-/tmp}/dmar-kmod.XXXXXX")
trap 'rm -rf "$T"' EXIT

echo "kernel $KVER; building kmod/ with -Werror and sparse"
cp -r "$top_srcdir/kmod" "$T/kmod"
SPARSE=""
command -v sparse >/dev/null && SPARSE="C=1"
# a make of its own, not a job of make check's (its jobserver is not ours)
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$T/kmod" KDIR="/lib/modules/$KVER/build" $SPARSE >"$T/build.log" 2>&1 || {
	cat "$T/build.log"
	fail "the module does not build"
}
if grep -E "warning:|error:" "$T/build.log"; then
	fail "the module's build (or sparse) has warnings"
fi
# checkpatch.pl: Debian ships it only inside the kernel's source tarball
# (linux-source); three files of it are enough.  LINUX_VERSION_CODE tests
# (and their constant comparisons) stay: an out-of-tree module builds
# against more than one kernel.
SRC_TAR=$(ls /usr/src/linux-source-*.tar.xz 2>/dev/null | tail -n 1)
if [ -n "$SRC_TAR" ] && command -v perl >/dev/null; then
	top=$(basename "$SRC_TAR" .tar.xz)
	xz -dc "$SRC_TAR" | tar -x -C "$T" "$top/scripts/checkpatch.pl" "$top/scripts/spelling.txt" \
		"$top/scripts/const_structs.checkpatch" || fail "cannot take checkpatch.pl from $SRC_TAR"
	perl "$T/$top/scripts/checkpatch.pl" --no-tree --terse --show-types \
		--ignore LINUX_VERSION_CODE,CONSTANT_COMPARISON \
		-f "$top_srcdir/kmod/dmar_arena.c" "$top_srcdir/kmod/include/uapi/dmar_arena.h" >"$T/checkpatch.log" 2>&1 ||
		{ cat "$T/checkpatch.log"; fail "checkpatch.pl finds style problems in kmod/"; }
	if grep -E "(WARNING|ERROR|CHECK):" "$T/checkpatch.log"; then
		fail "checkpatch.pl warns about kmod/"
	fi
	echo "checkpatch.pl ($top): kmod/ clean"
else
	echo "note: no /usr/src/linux-source-*.tar.xz (linux-source): checkpatch.pl not run"
fi
gcc -static -O2 -Wall -Wextra -Werror -I "$top_srcdir" "$top_srcdir/tests/kmod/arena_test.c" -o "$T/arena_test" ||
	fail "arena_test does not build"

# The initramfs.
R=$T/root
mkdir -p "$R/bin" "$R/dev" "$R/proc" "$R/sys" "$R/lib/modules"
cp "$BUSYBOX" "$R/bin/busybox"
for a in sh mount insmod rmmod dmesg grep poweroff cat sleep ls; do ln -s busybox "$R/bin/$a"; done
cp "$MODDIR/drm.ko" "$MODDIR/drm_shmem_helper.ko" "$MODDIR/vgem/vgem.ko" "$T/kmod/dmar_arena.ko" "$R/lib/modules/"
cp "$T/arena_test" "$R/bin/arena_test"

# dmarfs, its libraries and FUSE, when this build has a plain dmarfs.
DMARFS_BIN=${top_builddir:+$top_builddir/dmarfs/dmarfs}
WITH_DMARFS=0
if [ -n "$DMARFS_BIN" ] && [ -x "$DMARFS_BIN" ] && [ -f "/lib/modules/$KVER/kernel/fs/fuse/fuse.ko" ]; then
	if nm "$DMARFS_BIN" 2>/dev/null | grep -q __asan_init; then
		echo "note: $DMARFS_BIN is a sanitizer build: the guest runs no dmarfs (the plain pass does)"
	else
		WITH_DMARFS=1
		mkdir -p "$R/lib64" "$R/lib/x86_64-linux-gnu" "$R/mnt/d" "$R/tmp" "$R/etc"
		cp "$DMARFS_BIN" "$R/bin/dmarfs"
		cp "$top_builddir/dmar" "$R/bin/dmar"
		ldd "$DMARFS_BIN" "$top_builddir/dmar" | awk '$3 ~ /^\// { print $3 } $1 ~ /^\/lib64\// { print $1 }' |
			sort -u | while read -r lib; do
				cp -L "$lib" "$R$lib" 2>/dev/null || cp -L "$lib" "$R/lib/x86_64-linux-gnu/"
			done
		# dlopened, so not in ldd's list: glibc's unwinder (pthread_cancel
		# at the daemon's end) and libcrypto (the hash, where no SHA-NI)
		for lib in /lib/x86_64-linux-gnu/libgcc_s.so.1 /lib/x86_64-linux-gnu/libcrypto.so.3; do
			[ -f "$lib" ] && cp -L "$lib" "$R/lib/x86_64-linux-gnu/"
		done
		cp "/lib/modules/$KVER/kernel/fs/fuse/fuse.ko" "$R/lib/modules/"
		for a in dd sha256sum kill pidof umount mkdir head cmp true; do ln -s busybox "$R/bin/$a"; done
	fi
else
	echo "note: no dmarfs build (top_builddir) or no fuse.ko: the guest runs no dmarfs"
fi
echo "$WITH_DMARFS" >"$R/with_dmarfs"
cat >"$R/init" <<'EOF'
#!/bin/sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
verdict() { echo "KMOD-VERDICT: $*"; poweroff -f; sleep 10; }
cd /lib/modules
for m in drm drm_shmem_helper vgem; do insmod $m.ko || verdict "FAIL insmod $m"; done
insmod dmar_arena.ko max_total_mb=64 || verdict "FAIL insmod dmar_arena"
[ -c /dev/dmar_arena ] || verdict "FAIL no /dev/dmar_arena"
arena_test
rc=$?
rmmod dmar_arena || verdict "FAIL rmmod dmar_arena (still in use?)"
[ -e /sys/kernel/dmar_arena ] && verdict "FAIL /sys/kernel/dmar_arena after rmmod"
if dmesg | grep -E "WARNING|BUG|Oops|KASAN|general protection|refcount_t|list_del corruption"; then
	verdict "FAIL the kernel log has warnings (above)"
fi
[ "$rc" = 0 ] || verdict "FAIL arena_test exit $rc"
if [ "$(cat /with_dmarfs)" = 1 ]; then
	insmod dmar_arena.ko max_total_mb=128 || verdict "FAIL insmod dmar_arena again"
	insmod fuse.ko || verdict "FAIL insmod fuse"
	M=/mnt/d
	dmarfs kt $M -o size=32m,keep || verdict "FAIL dmarfs mount on the module's arena"
	grep -q . /sys/kernel/dmar_arena/kt/size || verdict "FAIL no kernel arena kt after the mount"
	echo "dmarfs: $(cat /sys/kernel/dmar_arena/kt/backing), users $(cat /sys/kernel/dmar_arena/kt/users)"
	echo hello >$M/a
	dd if=/dev/urandom of=/tmp/b bs=65536 count=48 2>/dev/null
	cp_() { cat "$1" >"$2"; }
	cp_ /tmp/b $M/b || verdict "FAIL write b"
	# dmar export-dmabuf: a file of the mount in a dma-buf of the module's,
	# to a command (2 MiB pages: 4 MiB for 2.5 MiB), a range of it, and
	# over a socket; each buffer's arena goes with its dma-buf
	dd if=/dev/urandom of=$M/w bs=65536 count=40 2>/dev/null
	dmar export-dmabuf -v $M/w -- sh -c 'ls /sys/kernel/dmar_arena | grep -q "^dmabuf-" && arena_test import /mnt/d/w' ||
		verdict "FAIL dmar export-dmabuf of a file to a command"
	dmar export-dmabuf --offset 4096 --length 10000 $M/w -- arena_test import $M/w 4096 ||
		verdict "FAIL dmar export-dmabuf of a range"
	arena_test recv /tmp/sock $M/b &
	rp=$!
	for i in 1 2 3 4 5 6 7 8 9 10; do [ -S /tmp/sock ] && break; sleep 0.2; done
	dmar export-dmabuf $M/b --send /tmp/sock || verdict "FAIL dmar export-dmabuf --send"
	wait $rp || verdict "FAIL the dma-buf sent over the socket"
	ls /sys/kernel/dmar_arena | grep "^dmabuf-" && verdict "FAIL an exported buffer's arena outlived its dma-buf"
	dmar export-dmabuf --via udmabuf $M/w -- true 2>/tmp/e && verdict "FAIL --via udmabuf without /dev/udmabuf"
	grep -q "CONFIG_UDMABUF" /tmp/e || verdict "FAIL --via udmabuf says: $(cat /tmp/e)"
	echo "dmarfs: dmar export-dmabuf to vgem: a file, a range, over a socket"
	umount $M || verdict "FAIL umount"
	sleep 1
	[ -e /sys/kernel/dmar_arena/kt ] || verdict "FAIL the kept arena went at umount"
	dmarfs kt $M -o keep || verdict "FAIL mount again (re-attach)"
	[ "$(cat $M/a)" = hello ] && cmp -s /tmp/b $M/b || verdict "FAIL files differ after the re-attach"
	echo "dmarfs: re-attached after umount, files intact"
	dd if=/dev/urandom of=/tmp/c bs=65536 count=16 2>/dev/null
	cp_ /tmp/c $M/c || verdict "FAIL write c"
	kill -9 $(pidof dmarfs) || verdict "FAIL kill -9"
	sleep 1
	dmarfs kt $M -o keep || verdict "FAIL mount after kill -9"
	[ "$(cat $M/a)" = hello ] && cmp -s /tmp/b $M/b && cmp -s /tmp/c $M/c || verdict "FAIL files differ after kill -9"
	echo "dmarfs: re-attached after kill -9, files intact"
	gone() { for i in 1 2 3 4 5 6 7 8 9 10; do pidof dmarfs >/dev/null || return 0; sleep 1; done; return 1; }
	umount $M || verdict "FAIL umount after kill"
	gone || verdict "FAIL the daemon did not end after umount"
	dmarfs --arenas >/tmp/arenas 2>&1
	cat /tmp/arenas
	grep -q "^kt .* kmod " /tmp/arenas || verdict "FAIL dmarfs --arenas does not list kt as kmod"
	dmarfs --arenas --drop kt || verdict "FAIL --drop kt"
	[ -e /sys/kernel/dmar_arena/kt ] && verdict "FAIL kt still there after --drop"
	# without keep, umount frees the arena (as a tmpfs goes)
	dmarfs kt2 $M -o size=8m || verdict "FAIL mount kt2"
	echo x >$M/x
	umount $M || verdict "FAIL umount kt2"
	gone || verdict "FAIL the daemon of kt2 did not end"
	[ -e /sys/kernel/dmar_arena/kt2 ] && verdict "FAIL kt2 (no keep) still there after umount"
	echo "dmarfs: an arena without keep goes at umount"
	rmmod dmar_arena || verdict "FAIL rmmod dmar_arena after dmarfs"
	if dmesg | grep -E "WARNING|BUG|Oops|KASAN|general protection|refcount_t|list_del corruption"; then
		verdict "FAIL the kernel log has warnings after dmarfs (above)"
	fi
fi
verdict PASS
EOF
chmod +x "$R/init"
(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) >"$T/initramfs.gz"

echo "booting $KVER under QEMU (TCG), at most $KMOD_TIMEOUT s"
start=$(date +%s)
timeout "$KMOD_TIMEOUT" "$QEMU" -machine q35 -accel tcg -cpu max -smp 2 -m 512 -nographic -no-reboot \
	-kernel "/boot/vmlinuz-$KVER" -initrd "$T/initramfs.gz" \
	-append "console=ttyS0 panic=-1 loglevel=4 quiet" </dev/null >"$T/console.log" 2>&1 || true
secs=$(($(date +%s) - start))
sed -n '/^ok \|^not ok \|arena_test:\|^dmarfs\|^kt \|KMOD-VERDICT\|WARNING\|BUG\|Oops\|Call Trace/p' "$T/console.log"
v=$(sed -n 's/^KMOD-VERDICT: //p' "$T/console.log" | tr -d '\r' | head -1)
echo "guest: ${secs} s"
case $v in
PASS) echo "PASS: kmod in the guest" ;;
"") tail -40 "$T/console.log"; fail "no verdict from the guest (it hung, or timed out after $KMOD_TIMEOUT s)" ;;
*) tail -60 "$T/console.log"; fail "the guest says: $v" ;;
esac
