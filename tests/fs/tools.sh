#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/fs/tools.sh - real tools on a dmarfs mount:
#   tar    untar a tar of /usr/include, `diff -r` against the source and
#          `tar --compare` (tar's own listing: sizes, modes, mtimes, links);
#   git    init, add, commit, gc, `git fsck --full`;
#   sqlite two concurrent writer processes, then PRAGMA integrity_check and
#          the row count (rollback journal and WAL);
#   fio    4 KiB random writes over 64 MiB with verify=crc32c, buffered and
#          O_DIRECT, bounded runtime.
# A missing tool skips its case with a note (scripts/install-deps installs
# them all); a missing /dev/fuse skips the test.
. "$(dirname "$0")/lib.sh"

fs_setup
[ -x "$FSUTIL" ] || fail "helper not built: $FSUTIL"
need timeout
fs_mount "size=1g,encode=dedup"
m=$MNT
ran=0

# ---- tar + diff -------------------------------------------------------------
if [ -d /usr/include ] && command -v diff >/dev/null 2>&1; then
	ran=$((ran + 1))
	check "tar of /usr/include, extracted into the mount"
	tar -C /usr -cf "$T/inc.tar" include 2>"$T/tar.err" || fail "tar c: $(head -c 300 "$T/tar.err")"
	n=$(tar -tf "$T/inc.tar" | wc -l)
	timeout 120 tar -C "$m" -xpf "$T/inc.tar" || fail "tar x into the mount failed"
	say "  $n entries"
	check "diff -r --no-dereference /usr/include $m/include"
	# --no-dereference: symlinks compare as links (no loops, no escapes)
	timeout 120 diff -r --no-dereference /usr/include "$m/include" >"$T/diff.out" 2>&1 ||
		fail "diff -r found differences: $(head -c 600 "$T/diff.out")"
	check "tar --compare: every entry of the archive matches (size, mode, mtime, content, link)"
	timeout 120 tar -C "$m" --compare -f "$T/inc.tar" >"$T/cmp.out" 2>&1 ||
		fail "tar --compare: $(head -c 600 "$T/cmp.out")"
	check "the listing of the mount is tar's listing"
	tar -tf "$T/inc.tar" | sed 's,/$,,' | sort >"$T/list.tar"
	(cd "$m" && find include) | sort >"$T/list.mnt"
	cmp -s "$T/list.tar" "$T/list.mnt" ||
		fail "listings differ: $(diff "$T/list.tar" "$T/list.mnt" | head -n 10 | tr '\n' ' ')"
	check "after dropping the page cache, a sample of files still match"
	find "$m/include" -type f -name '*.h' | head -n 300 >"$T/sample"
	# shellcheck disable=SC2046
	"$FSUTIL" dropcache $(cat "$T/sample") || fail "dropcache"
	while read -r f; do
		cmp -s "$f" "/usr/${f#"$m"/}" || fail "$f differs from /usr/${f#"$m"/} (uncached)"
	done <"$T/sample"
	rm -rf "$m/include" || fail "rm -rf of the extracted tree"
	[ -z "$(ls -A "$m")" ] || fail "the mount is not empty after rm -rf"
	rm -f "$T/inc.tar"
else
	note "no /usr/include or diff: tar case skipped"
fi

# ---- cp of a file still open for writing -------------------------------------------
# A writer that has not closed or fsynced yet (a log, a download): its data
# may be only in the kernel's page cache.  cp (coreutils >= 9 looks for
# holes with SEEK_DATA/SEEK_HOLE when st_blocks is small) must still copy
# the bytes, and du must count them.
check "cp of a file another process still holds open for writing copies its bytes"
mkprng "$T/live.src" $((1 * MiB)) 11
mkfifo "$T/ctl"
"$FSUTIL" hold-write "$m/live" "$T/live.src" <"$T/ctl" >"$T/ready" &
hpid=$!
CLEANUP_PIDS=$hpid
exec 4>"$T/ctl"
n=100
until grep -q ready "$T/ready" 2>/dev/null; do
	n=$((n - 1))
	[ "$n" -gt 0 ] && kill -0 "$hpid" 2>/dev/null || fail "the writer did not get ready"
	sleep 0.1
done
blocks=$(stat -c %b "$m/live")
cp "$m/live" "$T/live.copy" || fail "cp of the open file failed"
if ! cmp -s "$T/live.src" "$T/live.copy"; then
	fail_later "cp of a 1 MiB file still open for writing produced different bytes ($(cmp "$T/live.src" "$T/live.copy" 2>&1 | head -n 1); st_blocks was $blocks): data not yet flushed is reported as a hole"
fi
cmp -s "$T/live.src" "$m/live" || fail "reading the open file gives different bytes"
[ "$blocks" -ge 2048 ] || fail_later "st_blocks of a file with 1 MiB written (still open) is $blocks, expected >= 2048"
exec 4>&-
wait "$hpid" || fail "the writer failed to close"
CLEANUP_PIDS=""
cmp -s "$T/live.src" "$m/live" || fail "after close the file differs"
rm -f "$m/live" "$T/live.copy" "$T/live.src" "$T/ctl" "$T/ready"

# ---- git ----------------------------------------------------------------------
if command -v git >/dev/null 2>&1; then
	ran=$((ran + 1))
	check "git init, add, commit, gc, fsck --full in the mount"
	g="git -c user.name=dmarfs-test -c user.email=test@dmarfs.invalid -c init.defaultBranch=main -c gc.auto=0"
	r=$m/repo
	$g init -q "$r" || fail "git init"
	mkdir -p "$r/src" "$r/data"
	i=0
	for f in /usr/include/*.h; do
		[ -f "$f" ] || continue
		cp "$f" "$r/src/"
		i=$((i + 1))
		[ "$i" -lt 120 ] || break
	done
	mkprng "$r/data/blob.bin" $((3 * MiB)) 4
	(cd "$r" && $g add -A && $g commit -q -m "first") || fail "git commit 1"
	# a second commit: edit, rename, delete
	(cd "$r" && echo "/* edited */" >>"$(ls src | head -n 1 | sed 's,^,src/,')" &&
		$g mv "src/$(ls src | sed -n 2p)" src/renamed.h && $g rm -q "src/$(ls src | sed -n 3p)" &&
		$g commit -q -am "second") || fail "git commit 2"
	[ "$(cd "$r" && $g rev-list --count HEAD)" = 2 ] || fail "git log does not show 2 commits"
	(cd "$r" && $g fsck --full --strict) >"$T/fsck.out" 2>&1 || fail "git fsck --full: $(head -c 600 "$T/fsck.out")"
	(cd "$r" && $g gc -q --aggressive --prune=now) >"$T/gc.out" 2>&1 || fail "git gc: $(head -c 400 "$T/gc.out")"
	(cd "$r" && $g fsck --full --strict) >"$T/fsck.out" 2>&1 ||
		fail "git fsck --full after gc: $(head -c 600 "$T/fsck.out")"
	[ -z "$(cd "$r" && $g status --porcelain)" ] || fail "git status not clean: $(cd "$r" && $g status --porcelain | head -5)"
	# a clone inside the mount, then compare the trees
	$g clone -q "$r" "$m/clone" || fail "git clone"
	diff -r -x .git "$r" "$m/clone" >"$T/clone.diff" 2>&1 || fail "clone differs: $(head -c 300 "$T/clone.diff")"
	rm -rf "$r" "$m/clone"
else
	note "git not installed: git case skipped (scripts/install-deps installs it)"
fi

# ---- sqlite3: two concurrent writers ----------------------------------------------------
if command -v sqlite3 >/dev/null 2>&1; then
	ran=$((ran + 1))
	rows=300
	# writer DB ID MODE: $rows separate transactions, each waiting for the
	# lock (.timeout); rows carry a 1 KiB blob so pages split and grow.
	writer() {
		{
			echo ".timeout 20000"
			[ "$3" = wal ] && echo "PRAGMA journal_mode=WAL;"
			i=0
			while [ "$i" -lt "$rows" ]; do
				echo "BEGIN IMMEDIATE; INSERT INTO t(w, n, pad) VALUES ($2, $i, randomblob(1024)); COMMIT;"
				i=$((i + 1))
			done
		} | sqlite3 -bail "$1" >/dev/null 2>"$T/sqlite.$2.err"
	}
	for mode in delete wal; do
		check "sqlite3 ($mode journal): two concurrent writers of $rows rows each"
		db=$m/test-$mode.db
		sqlite3 "$db" "PRAGMA journal_mode=$mode; CREATE TABLE t(id INTEGER PRIMARY KEY, w INT, n INT, pad BLOB); CREATE INDEX tw ON t(w, n);" >/dev/null ||
			fail "sqlite3 create"
		writer "$db" 1 "$mode" &
		p1=$!
		writer "$db" 2 "$mode" &
		p2=$!
		CLEANUP_PIDS="$p1 $p2"
		s1=0
		s2=0
		wait "$p1" || s1=$?
		wait "$p2" || s2=$?
		CLEANUP_PIDS=""
		[ "$s1" = 0 ] || fail "writer 1 ($mode) failed: $(head -c 300 "$T/sqlite.1.err")"
		[ "$s2" = 0 ] || fail "writer 2 ($mode) failed: $(head -c 300 "$T/sqlite.2.err")"
		ic=$(sqlite3 "$db" "PRAGMA integrity_check;")
		[ "$ic" = ok ] || fail "PRAGMA integrity_check ($mode): $ic"
		cnt=$(sqlite3 "$db" "SELECT count(*) FROM t;")
		[ "$cnt" = $((2 * rows)) ] || fail "row count ($mode) $cnt, expected $((2 * rows))"
		per=$(sqlite3 "$db" "SELECT count(DISTINCT n) FROM t GROUP BY w;" | tr '\n' ' ')
		[ "$per" = "$rows $rows " ] || fail "rows per writer ($mode): $per, expected $rows each"
		# once more from the filesystem, not the page cache
		"$FSUTIL" dropcache "$db" || fail "dropcache"
		ic=$(sqlite3 "$db" "PRAGMA integrity_check;")
		[ "$ic" = ok ] || fail "PRAGMA integrity_check ($mode) after dropping the page cache: $ic"
		rm -f "$db" "$db-wal" "$db-shm" "$db-journal"
	done
else
	note "sqlite3 not installed: sqlite case skipped (scripts/install-deps installs it)"
fi

# ---- fio ------------------------------------------------------------------------
if command -v fio >/dev/null 2>&1; then
	ran=$((ran + 1))
	for direct in 0 1; do
		check "fio: 4 KiB random writes over 64 MiB, verify=crc32c, direct=$direct"
		rc=0
		timeout 120 fio --name="randw-d$direct" --filename="$m/fio.dat" --rw=randwrite --bs=4k --size=64m --verify_state_save=0 \
			--ioengine=psync --direct=$direct --verify=crc32c --do_verify=1 --verify_fatal=1 \
			--end_fsync=1 --runtime=40 --randseed=1234 --output="$T/fio.$direct.out" >/dev/null 2>&1 || rc=$?
		grep -E 'write:|read:|err=' "$T/fio.$direct.out" | sed 's/^/  /' | head -n 6
		[ "$rc" = 0 ] || fail "fio (direct=$direct) exited $rc: $(grep -iE 'verify|error|bad' "$T/fio.$direct.out" | head -n 5 | tr '\n' ' ')"
		grep -q 'err= 0' "$T/fio.$direct.out" || fail "fio (direct=$direct) reports an error: $(grep 'err=' "$T/fio.$direct.out")"
		[ "$(fsize "$m/fio.dat")" = $((64 * MiB)) ] || fail "fio file is $(fsize "$m/fio.dat") bytes"
		rm -f "$m/fio.dat"
	done
else
	note "fio not installed: fio case skipped (scripts/install-deps installs it)"
fi

[ "$ran" -gt 0 ] || skip "none of tar/diff, git, sqlite3, fio is installed"
fs_umount "$m"
say "  $ran tool cases ran"
finish
