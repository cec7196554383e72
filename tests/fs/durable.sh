#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/fs/durable.sh - a node never loses what it was given (persist.h):
#  1. kill -9 of the daemon at DURABLE_KILLS (24) random points of a mixed
#     workload (tests/fs/churn: writes of 0 B to 4 MiB with and without
#     fsync, rewrites in place, truncates, renames over files, unlinks,
#     mkdir/rmdir, hard and symbolic links, xattrs, chmod, copy_file_range),
#     with checkpoints every 64 KiB of journal so that kills land in them
#     too; after each, the same NAME is mounted again on the directory the
#     dead mount is still on, the tree must be exactly what the calls that
#     returned made it (the one in flight either way), and the arena must
#     add up (user.dmar.check);
#  2. deleting everything brings the arena back to no data;
#  3. a process holding an open fd across a kill sees the documented
#     behaviour (docs/mount.md: ENOTCONN on the old fd; a new open after
#     the mount comes back reads the file whole);
#  4. umount frees the arena (tmpfs semantics), -o keep keeps it for the
#     next mount, -o fresh starts empty;
#  5. an arena whose journal is damaged is refused with a message, left
#     as it is, and -o fresh replaces it.
. "$(dirname "$0")/lib.sh"

fs_setup
need timeout
CHURN=${CHURN:-$top_builddir/tests/fs/churn}
[ -x "$CHURN" ] || fail "helper not built: $CHURN"
[ -x "$FSUTIL" ] || fail "helper not built: $FSUTIL"

kills=${DURABLE_KILLS:-24}
name=durable
mkdir "$T/m"
m=$T/m
model=$T/model
export DMARFS_CHECKPOINT_MIN=65536

# ---- 1. kill -9 at random points -------------------------------------------------
fs_mount_at "$name" "$m" "size=256m"
i=1
while [ "$i" -le "$kills" ]; do
	check "kill $i of $kills: churn, kill -9 the daemon, mount again, verify"
	"$CHURN" run "$m" "$model" "$i" 100000 >"$T/churn.$i.out" 2>&1 &
	cpid=$!
	CLEANUP_PIDS="$cpid"
	# 0.2 to 2.2 s into the workload, different for each round.
	ms=$((200 + (i * 7919 + 13) % 2000))
	sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
	kill -0 "$cpid" 2>/dev/null || fail "churn ended before the kill: $(cat "$T/churn.$i.out")"
	fs_kill "$m"
	timeout 60 sh -c "while kill -0 $cpid 2>/dev/null; do sleep 0.1; done" || fail "churn still running 60 s after the kill"
	wait "$cpid" || fail "churn failed: $(cat "$T/churn.$i.out")"
	CLEANUP_PIDS=""
	say "  $(cat "$T/churn.$i.out")"
	if [ "$i" = "$kills" ]; then
		check "dmar fsck of the arena the killed daemon left"
		"$DMAR" fsck "$name" >"$T/fsck.out" 2>&1 || fail "dmar fsck $name: $(cat "$T/fsck.out")"
		sed 's/^/  /' "$T/fsck.out"
		grep -q "^space: state=ok" "$T/fsck.out" || fail "dmar fsck did not say state=ok"
		umount -l "$m" 2>/dev/null || :
	fi
	fs_mount_at "$name" "$m" "size=256m"
	grep -q "re-attached arena $name" "$MNT_LOG" || fail "the mount did not re-attach arena $name"
	"$CHURN" verify "$m" "$model" >"$T/verify.out" 2>&1 || fail "after kill $i: $(cat "$T/verify.out")"
	say "  $(cat "$T/verify.out")"
	check_arena "$m" "the arena after kill $i"
	[ "$i" != 1 ] || "$DMAR" check "$m" >/dev/null || fail "dmar check $m: $("$DMAR" check "$m" 2>&1)"
	i=$((i + 1))
done
grep "re-attached" "$MNT_LOG" | tail -n 1 | sed 's/^/  /'

# ---- 2. everything deleted ----------------------------------------------------------
check "rm -rf of everything leaves no data in the arena"
rm -rf "${m:?}"/* || fail "rm -rf failed"
wait_data_below "$m" 1 20 || fail "after rm -rf the arena holds $(mib "$(data_bytes "$m")") of data ($(arena_check "$m"))"
check_arena "$m" "the emptied arena"

# ---- 3. an open fd and a mapping across a kill ---------------------------------------
check "a file open across a kill: the old fd fails, a new open reads it whole"
fs_mem_source 3 5
cp "$src" "$m/held" || fail "cp failed"
exec 7<"$m/held"
fs_kill "$m"
rc=0
head -c 10 <&7 >/dev/null 2>"$T/err" || rc=$?
[ "$rc" != 0 ] || fail "a read from an fd of the dead mount succeeded"
grep -q "Transport endpoint is not connected\|Software caused connection abort" "$T/err" ||
	fail "the old fd failed with something else than ENOTCONN/ECONNABORTED: $(cat "$T/err")"
exec 7<&-
fs_mount_at "$name" "$m" "size=256m"
[ "$(digest_uncached "$m/held")" = "$src_sum" ] || fail "the file reopened after the restart differs"

check "a mapping across a kill: a page it faults in after gives SIGBUS, never other bytes"
# The helper maps the file and reads its first page, says so, waits for
# the kill, then reads the last page (not faulted in: the page cache was
# dropped) and compares it with the source.
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || :
rm -f "$T/mapped" "$T/killed"
python3 - "$m/held" "$src" "$T/mapped" "$T/killed" >"$T/map.out" 2>&1 <<'PYEOF' &
import mmap, os, sys, time
f, src, ready, go = sys.argv[1:5]
fd = os.open(f, os.O_RDONLY)
size = os.fstat(fd).st_size
m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
first = m[:4096]
open(ready, "w").close()
for _ in range(600):
    if os.path.exists(go):
        break
    time.sleep(0.05)
tail = m[size - 4096:]          # SIGBUS here is the documented outcome
with open(src, "rb") as s:
    want = s.read()
print("same" if first == want[:4096] and tail == want[size - 4096:] else "DIFFERENT")
PYEOF
mpid=$!
for _ in $(seq 1 200); do [ -e "$T/mapped" ] && break; sleep 0.05; done
[ -e "$T/mapped" ] || fail "the mapping helper did not start: $(cat "$T/map.out")"
fs_kill "$m"
touch "$T/killed"
rc=0
wait "$mpid" || rc=$?
case $rc in
135) say "  the helper got SIGBUS (documented)" ;;
0) grep -q '^same$' "$T/map.out" || fail "a mapping read other bytes after the kill: $(cat "$T/map.out")"
   say "  the page was still cached: the right bytes" ;;
*) fail "the mapping helper ended with $rc: $(cat "$T/map.out")" ;;
esac
fs_mount_at "$name" "$m" "size=256m"
[ "$(digest_uncached "$m/held")" = "$src_sum" ] || fail "the file differs after the second restart"
rm "$m/held"
fs_umount "$m"

# ---- 4. umount, keep, fresh -------------------------------------------------------------
arenas() { "$DMAR" arenas | grep -c '\(mounted\|kept\) ' || :; }
check "umount (no keep) frees the arena; keep keeps it for the next mount; fresh starts empty"
[ "$(arenas)" = 0 ] || fail "umount left an arena: $(ls -R "$DMARFS_RUNDIR")"
fs_mount_at k "$m" "size=64m,keep"
echo kept >"$m/f"
mkdir "$m/d"
fs_umount "$m"
[ "$(arenas)" = 1 ] || fail "umount of a keep mount removed its arena"
"$DMAR" arenas | sed 's/^/  /'
"$DMAR" arenas | grep -q '^k .* kept  *yes' || fail "dmar arenas does not show k kept: $("$DMAR" arenas)"
"$DMAR" fsck k >"$T/fsck.out" 2>&1 || fail "dmar fsck k: $(cat "$T/fsck.out")"
fs_mount_at k "$m" "keep"
[ "$(cat "$m/f")" = kept ] && [ -d "$m/d" ] || fail "the kept arena does not show the files after umount and mount"
fs_umount "$m"
fs_mount_at k "$m" "fresh,size=64m"
[ -z "$(ls -A "$m")" ] || fail "fresh did not start empty: $(ls -A "$m")"
echo new >"$m/g"
fs_umount "$m"
[ "$(arenas)" = 0 ] || fail "umount without keep left the arena"

# ---- 5. a damaged journal ------------------------------------------------------------------
check "an arena with a damaged journal is refused with a message and left as it is"
fs_mount_at bad "$m" "size=64m"
echo data >"$m/f"
fs_kill "$m"
a=$(ls "$DMARFS_RUNDIR"/*/bad.arena)
# The journal's first segment follows the 4 KiB superblock: break its header.
printf 'XXXXXXXX' | dd of="$a" bs=1 seek=4096 conv=notrunc status=none
rc=0
timeout 60 "$DMARFS" bad "$m" -f -o size=64m >"$T/bad.out" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "a damaged arena was mounted"
grep -q "cannot be attached: .*damaged" "$T/bad.out" || fail "no clear message: $(cat "$T/bad.out")"
[ -f "$a" ] || fail "the damaged arena was removed"
rc=0
"$DMAR" fsck bad >"$T/fsck.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "DAMAGED" "$T/fsck.out" || fail "dmar fsck of the damaged arena: $rc $(cat "$T/fsck.out")"
umount -l "$m" 2>/dev/null || :
fs_mount_at bad "$m" "size=64m,fresh"
[ -z "$(ls -A "$m")" ] || fail "fresh over a damaged arena is not empty"
fs_umount "$m"
finish
