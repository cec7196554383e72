#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/fs/dedup.sh - content-addressed storage, seen through statfs:
#  1. two copies of a 512 MiB random file occupy about one copy of arena
#     memory (used after both < 1.2 x one file, once both are encoded);
#  2. `cp --reflink=never` and plain `cp` (copy_file_range) both end with
#     shared chunks; every copy's SHA-256 matches the source's;
#  3. a full arena: writes fail with ENOSPC ("No space left on device"),
#     existing files keep their digests, and after `rm` new writes succeed.
# DEDUP_MIB=N makes the big file N MiB (default 512).
. "$(dirname "$0")/lib.sh"

fs_setup
need dd
need cp
[ -x "$FSUTIL" ] || fail "helper not built: $FSUTIL"

big_mib=${DEDUP_MIB:-512}
big=$((big_mib * MiB))

fs_mem_source "$big_mib" 1

# ---- 1. two copies ------------------------------------------------------------
# Room for one encoded copy plus one copy's raw extents in flight, and more.
fs_mount "size=$((big_mib * 3))m,encode=dedup"
m=$MNT
u0=$(used_bytes "$m")

ms() { date +%s%3N; }
mkdir "$m/other"
echo small >"$m/other/small"
check "dd the source into the mount (copy a), no fsync: encoding starts at the last close"
dd if="$src" of="$m/a" bs=1M status=none || fail "dd to $m/a failed"
# While a is being encoded, a stat of a may wait for it, but operations on
# other files must not: encoding is in the background.  The short sleep only
# orders the background stat before the probe; if the encode is already
# over by then, the probe passes trivially.
t0=$(ms)
stat "$m/a" >/dev/null &
pstat=$!
CLEANUP_PIDS=$pstat
sleep 0.1
t1=$(ms)
stat "$m/other/small" >/dev/null && ls "$m/other" >/dev/null && touch "$m/other/probe" && stat -f "$m" >/dev/null ||
	fail "metadata operations on other files failed"
t2=$(ms)
wait "$pstat" || fail "stat of a failed"
CLEANUP_PIDS=""
wait_state "$m/a" encoded 60
t3=$(ms)
enc_ms=$((t3 - t0))
say "  encoding took about $enc_ms ms; stat/ls/touch/statfs of other files meanwhile: $((t2 - t1)) ms"
check "operations on other files are not held up by the encoding of a"
[ $((t2 - t1)) -le 500 ] || [ $((t2 - t1)) -le $((enc_ms / 2)) ] ||
	fail_later "stat/ls/touch/statfs on other files took $((t2 - t1)) ms while a $big_mib MiB file was encoding ($enc_ms ms): the whole filesystem waits for the encode"
rm -rf "$m/other"
u1=$(used_bytes "$m")
one=$((u1 - u0))
say "  one copy: $(mib "$one") of arena for $(mib "$big")"
check "one copy of random data uses about its size (>= 0.95 x)"
[ "$one" -ge $((big * 95 / 100)) ] ||
	fail "one copy of $(mib "$big") of random data uses only $(mib "$one"): statfs does not count it"
[ "$one" -le $((big * 110 / 100)) ] || fail "one copy of $(mib "$big") uses $(mib "$one") (> 1.1 x)"

check "dd the source again (copy b): used stays < 1.2 x one file"
dd if="$src" of="$m/b" bs=1M conv=fsync status=none || fail "dd to $m/b failed"
wait_state "$m/b" encoded 60
u2=$(used_bytes "$m")
two=$((u2 - u0))
say "  two copies: $(mib "$two")"
[ "$two" -lt $((big * 12 / 10)) ] ||
	fail "two copies of $(mib "$big") use $(mib "$two") of arena, expected < 1.2 x one file (no dedup)"
for f in a b; do
	check "copy $f: user.dmar.logical = $big, chunks > 0, digest matches"
	[ "$(xattr "$m/$f" user.dmar.logical)" = "$big" ] || fail "$f: user.dmar.logical $(xattr "$m/$f" user.dmar.logical)"
	[ "$(xattr "$m/$f" user.dmar.chunks)" -gt 0 ] || fail "$f: no chunks"
	[ "$(digest_uncached "$m/$f")" = "$src_sum" ] || fail "$f: SHA-256 differs from the source"
done

# ---- 2. cp ------------------------------------------------------------------------
for how in "--reflink=never" ""; do
	name=cp${how:+-never}
	before=$(used_bytes "$m")
	check "cp $how a $name: shares the chunks (used grows < 0.1 x the file)"
	# shellcheck disable=SC2086
	cp $how "$m/a" "$m/$name" || fail "cp $how failed"
	wait_state "$m/$name" encoded 60
	after=$(used_bytes "$m")
	grew=$((after - before))
	say "  cp $how: arena use grew by $(mib "$grew")"
	[ "$grew" -lt $((big / 10)) ] ||
		fail "cp $how of $(mib "$big") grew arena use by $(mib "$grew"): chunks not shared"
	[ "$(xattr "$m/$name" user.dmar.chunks)" = "$(xattr "$m/a" user.dmar.chunks)" ] ||
		fail "cp $how: the copy has $(xattr "$m/$name" user.dmar.chunks) chunks, the source $(xattr "$m/a" user.dmar.chunks)"
	[ "$(digest_uncached "$m/$name")" = "$src_sum" ] || fail "cp $how: SHA-256 of the copy differs"
done

check "a 4 KiB rewrite in the middle of encoded a: work and memory proportional to the region"
mkprng "$T/patch" 4096 9
before=$(used_bytes "$m")
t0=$(ms)
dd if="$T/patch" of="$m/a" bs=4096 seek=65537 conv=notrunc,fsync status=none || fail "dd rewrite"
t1=$(ms)
after=$(used_bytes "$m")
say "  rewrite + fsync: $((t1 - t0)) ms (the whole file took ~$enc_ms ms to encode); arena use grew by $(mib $((after - before)))"
[ "$(xattr "$m/a" user.dmar.state)" = encoded ] || fail "a is $(xattr "$m/a" user.dmar.state) after rewrite + fsync"
[ $((after - before)) -lt $((2 * MiB)) ] ||
	fail "a 4 KiB rewrite grew arena use by $(mib $((after - before)))"
[ $((t1 - t0)) -le 400 ] || [ $((t1 - t0)) -le $((enc_ms / 4)) ] ||
	fail_later "a 4 KiB rewrite + fsync took $((t1 - t0)) ms, the encoding of the whole file ~$enc_ms ms: not proportional to the region"
dd if="$T/patch" of="$src" bs=4096 seek=65537 conv=notrunc status=none
[ "$(digest_uncached "$m/a")" = "$(digest "$src")" ] || fail "a's SHA-256 after the rewrite is not the patched source's"
[ "$(digest_uncached "$m/b")" = "$src_sum" ] || fail "b changed when a was rewritten (shared chunks written through?)"

check "removing all but one copy keeps the data, and all copies frees it"
rm "$m/a" "$m/b" "$m/cp-never"
[ "$(digest_uncached "$m/cp")" = "$src_sum" ] || fail "the last copy's SHA-256 changed after removing the others"
rm "$m/cp"
wait_data_below "$m" 1 20 ||
	fail "after removing every copy the arena holds $(mib "$(data_bytes "$m")") of data ($(arena_check "$m"))"
check_arena "$m" "the arena after removing every copy"
fs_umount "$m"
rm -f "$src"

# ---- 3. full arena --------------------------------------------------------------
fs_mount "size=64m,encode=dedup"
m=$MNT
mkprng "$T/keep" $((20 * MiB)) 2
keep_sum=$(digest "$T/keep")
cp "$T/keep" "$m/keep" || fail "cp keep"
wait_state "$m/keep" encoded 30

check "writing past the end of the arena fails with ENOSPC"
# Bounded (128 MiB into a 64 MiB arena).  With the kernel's writeback
# cache a write() may land in the page cache and the error come back from
# fsync or close instead: conv=fsync makes dd report it either way.
rc=0
dd if=/dev/urandom of="$m/fill" bs=1M count=128 conv=fsync 2>"$T/dd.err" || rc=$?
sed 's/^/  dd: /' "$T/dd.err"
[ "$rc" != 0 ] || fail "dd of 128 MiB into a 64 MiB arena succeeded"
grep -q "No space left on device" "$T/dd.err" ||
	fail "dd failed, but not with ENOSPC (No space left on device): $(tr '\n' ' ' <"$T/dd.err")"

check "with O_DIRECT the write itself fails with ENOSPC, and the file keeps what was written"
rm -f "$m/fill"
wait_used_below "$m" $((30 * MiB)) 20 || fail "the filler's space did not come back"
rc=0
dd if=/dev/urandom of="$m/fill" bs=1M count=128 oflag=direct 2>"$T/dd.err" || rc=$?
sed 's/^/  dd: /' "$T/dd.err"
[ "$rc" != 0 ] || fail "O_DIRECT dd of 128 MiB into a 64 MiB arena succeeded"
grep -q "error writing.*No space left on device" "$T/dd.err" ||
	fail "O_DIRECT dd did not fail in write() with ENOSPC: $(tr '\n' ' ' <"$T/dd.err")"
out=$(sed -n 's/^\([0-9]*\)+0 records out$/\1/p' "$T/dd.err")
[ -n "$out" ] && [ "$(fsize "$m/fill")" = $((out * MiB)) ] ||
	fail "after ENOSPC the file is $(fsize "$m/fill") bytes, dd wrote $out full MiB"

check "the filesystem still answers and keep's digest is unchanged"
stat "$m" >/dev/null || fail "stat of the mount failed after ENOSPC"
[ "$(digest_uncached "$m/keep")" = "$keep_sum" ] || fail "keep's SHA-256 changed after the arena filled up"
[ "$(xattr "$m/keep" user.dmar.state)" = encoded ] || fail "keep is no longer encoded"

check "small metadata operations still work on a full arena"
mkdir "$m/dir-on-full" || fail "mkdir on a full arena"
rmdir "$m/dir-on-full"

check "after rm, space comes back and a new 16 MiB write succeeds"
rm "$m/fill" || fail "rm fill"
wait_used_below "$m" $((30 * MiB)) 20 ||
	fail "after rm of the filler used is still $(mib "$(used_bytes "$m")") (keep is 20 MiB)"
mkprng "$T/new" $((16 * MiB)) 3
dd if="$T/new" of="$m/new" bs=1M conv=fsync status=none || fail "writing 16 MiB after rm failed"
[ "$(digest_uncached "$m/new")" = "$(digest "$T/new")" ] || fail "the new file's digest differs"
[ "$(digest_uncached "$m/keep")" = "$keep_sum" ] || fail "keep's digest changed"
fs_umount "$m"

# ---- 4. encode=zstd compresses, encode=none does not share ----------------------
check "encode=zstd: 16 MiB of text take far less arena than their size"
fs_mount "size=64m,encode=zstd"
m=$MNT
u0=$(used_bytes "$m")
awk 'BEGIN { srand(7); for (i = 0; i < 400000; i++) printf "%08d level=%s user=u%04d took %d ms status=ok\n", i, (rand() < 0.5 ? "info" : "warn"), int(rand() * 5000), int(rand() * 900) }' |
	head -c $((16 * MiB)) >"$T/text"
cp "$T/text" "$m/text"
wait_state "$m/text" encoded 30
u1=$(used_bytes "$m")
say "  16 MiB of text: $(mib $((u1 - u0))) of arena, user.dmar.stored $(xattr "$m/text" user.dmar.stored)"
[ $((u1 - u0)) -lt $((8 * MiB)) ] || fail "encode=zstd: 16 MiB of text use $(mib $((u1 - u0)))"
[ "$(xattr "$m/text" user.dmar.stored)" -lt $((8 * MiB)) ] || fail "encode=zstd: user.dmar.stored $(xattr "$m/text" user.dmar.stored)"
[ "$(digest_uncached "$m/text")" = "$(digest "$T/text")" ] || fail "encode=zstd: the text's SHA-256 differs"
fs_umount "$m"

check "encode=none: two copies take two copies' space, and stay raw"
fs_mount "size=96m,encode=none"
m=$MNT
u0=$(used_bytes "$m")
mkprng "$T/r" $((16 * MiB)) 5
cp "$T/r" "$m/r1"
dd if="$T/r" of="$m/r2" bs=1M status=none
"$FSUTIL" dropcache "$m/r1" "$m/r2"
u1=$(used_bytes "$m")
[ $((u1 - u0)) -ge $((31 * MiB)) ] || fail "encode=none: two 16 MiB copies use only $(mib $((u1 - u0)))"
[ "$(xattr "$m/r2" user.dmar.state)" = raw ] || fail "encode=none: state $(xattr "$m/r2" user.dmar.state)"
[ "$(digest_uncached "$m/r1")" = "$(digest "$T/r")" ] && [ "$(digest_uncached "$m/r2")" = "$(digest "$T/r")" ] ||
	fail "encode=none: SHA-256 differs"
# copy_file_range within the mount copies raw bytes: whole, and a piece at
# unaligned offsets into an existing file
cp "$m/r1" "$m/r3" || fail "encode=none: cp within the mount"
[ "$(digest_uncached "$m/r3")" = "$(digest "$T/r")" ] || fail "encode=none: copy_file_range copy differs"
python3 - "$m/r1" "$m/r3" <<'PY' || fail "encode=none: copy_file_range of a piece"
import os, sys
src, dst = os.open(sys.argv[1], os.O_RDONLY), os.open(sys.argv[2], os.O_RDWR)
n = os.copy_file_range(src, dst, 70000, 1234567, 4000000 + 7)
assert n == 70000, n
os.lseek(src, 1234567, 0)
want = os.read(src, 70000)
assert os.pread(dst, 70000, 4000007) == want, "piece differs"
PY
fs_umount "$m"
finish
