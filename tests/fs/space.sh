#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/fs/space.sh - encoding needs room for the file plus one encode
# step, not for a raw and a chunked copy at once:
#  1. a 200 MiB random file in a 256 MiB arena (78 %) is encoded after its
#     close; then statfs used is about the file's size and its SHA-256 is
#     the source's;
#  2. the same with `cp` inside the mount straight after the write
#     (copy_file_range encodes the source before sharing its chunks);
#  3. a file that fills the arena to its last few KiB cannot be encoded
#     (no room for even one chunk): it stays readable and intact; with
#     1 MiB given back the encode steps hit ENOSPC midway and still get
#     somewhere, leaving it intact; with 16 MiB back, fsync encodes it all.
#  4. encode=none: small files give back the room held for appends;
#  5. with writeback, 96 MiB written into 64 MiB get ENOSPC at fsync/close
#     and the arena still adds up.
# Between 1 and 2, rm must give the space back at once (the next dd needs it).
# SPACE_MIB=N makes the arena N MiB (default 256; the file is 78 % of it).
. "$(dirname "$0")/lib.sh"

fs_setup
need dd
need cp
need truncate
[ -x "$FSUTIL" ] || fail "helper not built: $FSUTIL"

arena_mib=${SPACE_MIB:-256}
file_mib=$((arena_mib * 78 / 100))
big=$((file_mib * MiB))

fs_mem_source "$file_mib" 11

# settle FILE: wait (bounded) until FILE's user.dmar.state and raw bytes
# stop changing; the state goes to $st.
settle() {
	_prev=""
	for _i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
		_now="$(xattr "$1" user.dmar.state) $(xattr "$1" user.dmar.raw)"
		[ "$_now" = "$_prev" ] && break
		_prev=$_now
		sleep 0.5
	done
	st=${_now% *}
}

# check_one FILE WHAT: FILE (encoded) uses about its size and is the source.
check_one() {
	_used=$(($(used_bytes "$m") - u0))
	say "  $2: $(mib "$_used") of arena for $(mib "$big"), user.dmar.chunks $(xattr "$1" user.dmar.chunks)"
	[ "$_used" -ge $((big * 95 / 100)) ] && [ "$_used" -le $((big * 105 / 100)) ] ||
		fail "$2: arena use is $(mib "$_used") for a $(mib "$big") file (expected 0.95-1.05 x: the raw extents were not freed)"
	[ "$(xattr "$1" user.dmar.raw)" = 0 ] || fail "$2: user.dmar.raw is $(xattr "$1" user.dmar.raw)"
	[ "$(digest_uncached "$1")" = "$src_sum" ] || fail "$2: SHA-256 differs from the source"
}

# ---- 1. write, close, encode ------------------------------------------------------
fs_mount "size=${arena_mib}m,encode=dedup"
m=$MNT
u0=$(used_bytes "$m")
check "dd $file_mib MiB into a $arena_mib MiB arena; after close it gets encoded"
dd if="$src" of="$m/a" bs=1M status=none || fail "dd to $m/a failed"
wait_state "$m/a" encoded 120
check_one "$m/a" "a, encoded"

check "the encoded file reads the same while it is read twice at once"
"$FSUTIL" dropcache "$m/a"
digest "$m/a" >"$T/d1" &
p1=$!
CLEANUP_PIDS=$p1
digest "$m/a" >"$T/d2" || fail "reading a failed"
wait "$p1" || fail "reading a (background) failed"
CLEANUP_PIDS=""
[ "$(cat "$T/d1")" = "$src_sum" ] && [ "$(cat "$T/d2")" = "$src_sum" ] || fail "concurrent reads of a differ from the source"
check "rm gives the space back at once, not when the kernel's FORGET comes (2-4 s later)"
rm "$m/a"
# 1 s leaves time for the readers' RELEASE, which the kernel sends
# without waiting; the dd below needs the room back.
wait_used_below "$m" $((u0 + 4 * MiB)) 1 || fail "1 s after rm a used is still $(mib "$(used_bytes "$m")")"

# ---- 2. cp (copy_file_range) of a file not yet encoded ----------------------------
check "dd again, then at once cp inside the mount: the copy_file_range encodes and shares"
dd if="$src" of="$m/b" bs=1M status=none || fail "dd to $m/b failed"
# Read b while it is being encoded: every read must see the source's bytes.
digest "$m/b" >"$T/d3" &
p1=$!
CLEANUP_PIDS=$p1
cp "$m/b" "$m/c" 2>"$T/cp.err" || fail "cp b c inside the mount failed: $(cat "$T/cp.err")"
wait "$p1" || fail "reading b during its encode failed"
CLEANUP_PIDS=""
[ "$(cat "$T/d3")" = "$src_sum" ] || fail "a read of b during its encode differs from the source"
wait_state "$m/b" encoded 120
wait_state "$m/c" encoded 120
check_one "$m/b" "b and its copy c"
[ "$(digest_uncached "$m/c")" = "$src_sum" ] || fail "the copy c differs from the source"
fs_umount "$m"

# ---- 3. a full arena --------------------------------------------------------------
fs_mount "size=64m,encode=dedup"
m=$MNT
u0=$(used_bytes "$m")
check "fill a 64 MiB arena with one file, 4 KiB O_DIRECT writes until ENOSPC"
rc=0
dd if="$src" of="$m/full" bs=4k oflag=direct 2>"$T/dd.err" || rc=$?
[ "$rc" != 0 ] && grep -q "No space left on device" "$T/dd.err" ||
	fail "dd into a full arena did not end with ENOSPC: $(tr '\n' ' ' <"$T/dd.err")"
n=$(fsize "$m/full")
say "  the file holds $(mib "$n"); the arena has $(mib $(($(total_bytes "$m") - $(used_bytes "$m")))) free"
[ "$n" -ge $((48 * MiB)) ] || fail "only $(mib "$n") fitted in a 64 MiB arena"
head -c "$n" "$src" >"$T/part"
# The close tried to encode it (in the background, after the reply): let
# the state settle, then it must be whole whatever it says.
settle "$m/full"
say "  state after the close: $st"
check "the file that filled the arena is intact ($st)"
case $st in raw | partly-encoded | encoded) ;; *) fail "user.dmar.state is '$st'" ;; esac
[ "$(digest_uncached "$m/full")" = "$(digest "$T/part")" ] || fail "the file that filled the arena differs from what was written"
[ "$(used_bytes "$m")" -le "$(total_bytes "$m")" ] || fail "used is above the arena size"

check "truncate gives 1 MiB back: the encode steps run out of room and go on (ENOSPC midway), the file stays intact"
keep=$((n - MiB))
truncate -s "$keep" "$m/full" || fail "truncate failed"
settle "$m/full"
say "  state with 1 MiB free: $st, user.dmar.raw $(xattr "$m/full" user.dmar.raw)"
case $st in raw | partly-encoded | encoded) ;; *) fail "user.dmar.state is '$st'" ;; esac
[ "$st" != raw ] || fail "with 1 MiB free nothing of the file was encoded (the steps do not stop early with what fits)"
head -c "$keep" "$src" >"$T/part"
[ "$(digest_uncached "$m/full")" = "$(digest "$T/part")" ] || fail "the file encoded with 1 MiB free differs from what was written"
[ "$(used_bytes "$m")" -le "$(total_bytes "$m")" ] || fail "used is above the arena size"

check "truncate gives 16 MiB back; fsync then encodes the file, still intact"
keep=$((n - 16 * MiB))
truncate -s "$keep" "$m/full" || fail "truncate failed"
"$FSUTIL" dropcache "$m/full" || fail "fsync failed"
wait_state "$m/full" encoded 60
head -c "$keep" "$src" >"$T/part"
[ "$(digest_uncached "$m/full")" = "$(digest "$T/part")" ] || fail "after truncate and encode the file differs"
used=$(($(used_bytes "$m") - u0))
say "  encoded: $(mib "$used") of arena for $(mib "$keep")"
[ "$used" -le $((keep * 105 / 100)) ] || fail "the encoded file uses $(mib "$used") for $(mib "$keep")"
fs_umount "$m"
rm -f "$src"

# Appends reserve room ahead (1 MiB) so a sequential writer fills one
# allocation; a file closed and left RAW must give that back, or 2,000
# small files of an untar hold 2 GiB.
check "encode=none: 400 files of 1 KiB in a 64 MiB arena fit and take about what they hold"
fs_mount "size=64m,encode=none" m
u0=$(used_bytes "$m")
# the daemon counts its FUSE requests by kind (user.dmar.requests)
req_of() { xattr "$m" user.dmar.requests | tr ' ' '\n' | sed -n "s/^$1=//p"; }
c0=$(req_of create)
t0=$(req_of total)
i=0
while [ "$i" -lt 400 ]; do
	head -c 1024 /dev/urandom >"$m/small$i" 2>"$T/err" || fail "small file $i: $(cat "$T/err")"
	i=$((i + 1))
done
used=$(($(used_bytes "$m") - u0))
say "  400 x 1 KiB: $(mib "$used") of arena, $((($(req_of total) - t0) / 400)) FUSE requests a file"
[ $(($(req_of create) - c0)) = 400 ] || fail "user.dmar.requests counted $(($(req_of create) - c0)) creates for 400 files"
[ "$used" -le $((4 * MiB)) ] || fail "400 files of 1 KiB take $(mib "$used")"
rm -f "$m"/small*
check_arena "$m" "the arena after the small files"
fs_umount "$m"
# With writeback the kernel's page cache takes a write before the daemon
# sees it: a full arena shows at fsync and close, and whatever did reach
# the arena still adds up; a file that fits is whole after its close.
check "writeback: 96 MiB written into a 64 MiB arena through the page cache: ENOSPC at fsync/close"
fs_mount "size=64m,writeback" m
python3 - "$m/over" >"$T/wb.out" 2>&1 <<'EOF'
import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
chunk, err = os.urandom(1 << 20), None
try:
    for i in range(96):
        os.write(fd, chunk)
    os.fsync(fd)
except OSError as e:
    err = e.errno
try:
    os.close(fd)
except OSError as e:
    err = err or e.errno
print("ENOSPC" if err == errno.ENOSPC else "no error" if err is None else errno.errorcode[err])
EOF
grep -qx ENOSPC "$T/wb.out" || fail "96 MiB into a 64 MiB arena with writeback: $(cat "$T/wb.out")"
rm -f "$m/over"
check_arena "$m" "the arena after the failed writeback"
mkprng "$T/eight" $((8 * MiB)) 12
python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDWR|os.O_CREAT, 0o644); os.write(fd, open(sys.argv[2],'rb').read()); os.close(fd)" \
	"$m/fits" "$T/eight" || fail "an 8 MiB file after the full arena"
[ "$(digest "$m/fits")" = "$(digest "$T/eight")" ] || fail "the 8 MiB file written with writeback differs"
fs_umount "$m"
finish
