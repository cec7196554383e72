#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/fs/dmabuf.sh - dmar export-dmabuf on this host (arena/dmabuf.h):
# a file of a mount in a dma-buf through /dev/udmabuf, mapped by the
# command it is handed to and compared with the file, whole and a range.
# The module's path (/dev/dmar_arena) is tested in the QEMU guest of
# tests/kmod/run.sh.  Without /dev/udmabuf (a kernel without
# CONFIG_UDMABUF, as this machine's and Debian's are) only the refusals
# are checked, and the test says it skipped the export.
. "$(dirname "$0")/lib.sh"
: "${DMAR:=$top_builddir/dmar}"

fs_setup
fs_mount "size=64m"
m=$MNT
mkprng "$m/w" 3000000 5

check "refusals: usage errors exit 2, a bad range or exporter 1 with what is wrong"
st=0; "$DMAR" export-dmabuf "$m/w" >/dev/null 2>&1 || st=$?
[ $st -eq 2 ] || fail "no COMMAND: exit $st (want 2)"
st=0; "$DMAR" export-dmabuf --via gpu "$m/w" -- true 2>/dev/null || st=$?
[ $st -eq 2 ] || fail "--via gpu: exit $st (want 2)"
st=0; "$DMAR" export-dmabuf --offset 3000001 "$m/w" -- true 2>"$T/e" || st=$?
[ $st -eq 1 ] || fail "a range past the end: exit $st (want 1)"
grep -q "past the end" "$T/e" || fail "range past the end says: $(cat "$T/e")"
: >"$m/empty"
"$DMAR" export-dmabuf "$m/empty" -- true 2>"$T/e" && fail "an empty file accepted"
grep -q "empty file" "$T/e" || fail "empty file says: $(cat "$T/e")"
if [ ! -e /dev/dmar_arena ]; then
	"$DMAR" export-dmabuf --via kmod "$m/w" -- true 2>"$T/e" && fail "--via kmod without the module"
	grep -q "dmar_arena module" "$T/e" || fail "--via kmod says: $(cat "$T/e")"
fi

# the command checks its dma-buf: mapped, the file's bytes from OFFSET,
# zeros to the end of its pages
cat >"$T/see.py" <<'PY'
import mmap, os, sys
fd = int(os.environ["DMAR_DMABUF_FD"])
size = int(os.environ["DMAR_DMABUF_SIZE"])
length = int(os.environ["DMAR_DMABUF_LENGTH"])
off = int(sys.argv[2])
want = open(sys.argv[1], "rb").read()[off:off + length]
m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
assert size % 4096 == 0 and size >= length, (size, length)
assert m[:length] == want, "the dma-buf differs from the file"
assert m[length:] == bytes(size - length), "not zero past the file's bytes"
print("dma-buf of %d bytes holds %d bytes of the file from %d" % (size, length, off))
PY
if [ ! -e /dev/udmabuf ]; then
	"$DMAR" export-dmabuf --via udmabuf "$m/w" -- true 2>"$T/e" && fail "--via udmabuf without /dev/udmabuf"
	grep -q "CONFIG_UDMABUF" "$T/e" || fail "no /dev/udmabuf says: $(cat "$T/e")"
	fs_umount "$m"
	echo "SKIP: no /dev/udmabuf on this kernel (CONFIG_UDMABUF): the export itself is not run here (the refusals passed; the module's export runs in tests/kmod/run.sh)"
	exit 77
fi
check "a file in a dma-buf of udmabuf, whole and a range"
"$DMAR" export-dmabuf --via udmabuf "$m/w" -- python3 "$T/see.py" "$m/w" 0 || fail "the whole file"
"$DMAR" export-dmabuf --via udmabuf -o 8192 -l 100000 "$m/w" -- python3 "$T/see.py" "$m/w" 8192 ||
	fail "a range"
limit=$(cat /sys/module/udmabuf/parameters/size_limit_mb 2>/dev/null || echo)
if [ -n "$limit" ] && [ "$limit" -lt 48 ]; then
	mkprng "$m/big" $(((limit + 1) * 1048576)) 6
	"$DMAR" export-dmabuf --via udmabuf "$m/big" -- true 2>"$T/e" && fail "past udmabuf's size_limit_mb"
	grep -q size_limit_mb "$T/e" || fail "past the limit says: $(cat "$T/e")"
fi
check_arena "$m"
fs_umount "$m"
say "PASS: export-dmabuf"
