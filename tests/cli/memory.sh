#!/bin/sh
# Memory use is bounded and independent of file size: pack and unpack a
# large file (8 GiB by default, DMAR_MEMTEST_SIZE to change) through the
# regular-file path and through a pipe, and check peak RSS stays far below
# 1 GiB.  The file is sparse (zeros), so the test costs CPU, not disk.
set -eu
: "${DMAR:?DMAR must point at the dmar binary}"
size=${DMAR_MEMTEST_SIZE:-8G}
limit_kb=$((256 * 1024))   # 256 MiB: the issue asks for "well under 1 GiB"
if [ ! -x /usr/bin/time ]; then
	echo "SKIP: GNU time (/usr/bin/time, Debian package time) not installed"
	exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
truncate -s "$size" "$work/big"

peak() { # peak RSS in KiB of the command after --
	/usr/bin/time -f %M -o "$work/rss" "$@"
	cat "$work/rss"
}
check() { # what kib
	echo "$1: peak RSS $2 KiB (limit $limit_kb)"
	[ "$2" -lt "$limit_kb" ] || { echo "FAIL: $1 used $2 KiB"; exit 1; }
}

r=$(peak "$DMAR" pack -q -T2 -o "$work/big.dmar" "$work/big"); check "pack (regular file, $size)" "$r"
r=$(peak sh -c "cat '$work/big' | '$DMAR' pack -q -T2 -c > '$work/pipe.dmar'"); check "pack (pipe, $size)" "$r"
r=$(peak sh -c "'$DMAR' unpack -q -T2 -c '$work/big.dmar' | cmp - '$work/big'"); check "unpack (to a pipe, $size)" "$r"
logical=$("$DMAR" info "$work/big.dmar" | sed -n 's/^logical size: \([0-9]*\).*/\1/p')
[ "$logical" = "$(stat -c %s "$work/big")" ] || { echo "FAIL: info says $logical bytes"; exit 1; }
echo "PASS: memory bounded for a $size file"
