#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/kmod/run.sh - the dmar_arena kernel module (kmod/), built against
# Debian's linux-headers-amd64 with -Werror and sparse, then loaded in a
# guest: Debian's linux-image-amd64 under qemu-system-x86_64 (TCG: this
# machine has no KVM and its own kernel loads no modules), booted with a
# small initramfs of busybox-static, the module, vgem (and the drm modules
# it needs) and tests/kmod/arena_test, built static.  In the guest: load
# dmar_arena (max_total_mb=64) and vgem, run arena_test, check that dmesg
# has no WARNING/BUG/Oops/KASAN line, unload dmar_arena.  The guest prints
# one verdict line that this script waits for (bounded: KMOD_TIMEOUT, 300 s).
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
make -C "$T/kmod" KDIR="/lib/modules/$KVER/build" $SPARSE >"$T/build.log" 2>&1 || {
	cat "$T/build.log"
	fail "the module does not build"
}
if grep -E "warning:|error:" "$T/build.log"; then
	fail "the module's build (or sparse) has warnings"
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
sed -n '/^ok \|^not ok \|arena_test:\|KMOD-VERDICT\|WARNING\|BUG\|Oops\|Call Trace/p' "$T/console.log"
v=$(sed -n 's/^KMOD-VERDICT: //p' "$T/console.log" | tr -d '\r' | head -1)
echo "guest: ${secs} s"
case $v in
PASS) echo "PASS: kmod in the guest" ;;
"") tail -40 "$T/console.log"; fail "no verdict from the guest (it hung, or timed out after $KMOD_TIMEOUT s)" ;;
*) tail -60 "$T/console.log"; fail "the guest says: $v" ;;
esac
