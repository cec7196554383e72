#!/bin/sh
# SPDX-License-Identifier: MIT
#
# mine.sh - `dmar mine` makes a byte pack from files, directories or a
# process's memory; the pack file is well formed, artifacts name it, and it
# makes small similar files smaller.

. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
setup
trap cleanup EXIT
cd "$W" || exit 1

# hexbytes FILE OFFSET COUNT: the bytes as lower-case hex, in file order.
hexbytes() {
	od -An -v -tx1 -j "$2" -N "$3" "$1" | tr -d ' \n'
}

# check_pack FILE MAXDICT: the DMPK layout (bytepack.h) holds together.
check_pack() {
	expect_magic "$1" DMPK
	check "$1: version 1, reserved zero"
	[ "$(hexbytes "$1" 4 4)" = 01000000 ] || fail "$1: version/reserved bytes are $(hexbytes "$1" 4 4)"
	_len=$(od -An -tu4 -j 8 -N 4 "$1" | tr -d ' ')
	check "$1: dictionary length $_len is 1..$2 and the file is 48 + length bytes"
	[ "$_len" -ge 1 ] && [ "$_len" -le "$2" ] || fail "$1: dictionary length $_len"
	[ "$(fsize "$1")" = $((48 + _len)) ] || fail "$1: file is $(fsize "$1") bytes, expected $((48 + _len))"
	check "$1: the stored SHA-256 is that of the dictionary"
	[ "$(hexbytes "$1" 16 32)" = "$(tail -c +49 "$1" | openssl dgst -sha256 -r | cut -d' ' -f1)" ] ||
		fail "$1: stored SHA-256 does not match the dictionary bytes"
}

mkjson train 1000 21
mkdir train/sub train/sub/deeper
mkjson train/sub/deeper 50 22
mkjson held 100 23
say "training data: $(find train -type f | wc -l) files, $(cat train/*.json train/sub/deeper/*.json | wc -c) bytes"

# --- from a directory ------------------------------------------------------------
expect_exit 0 "$DMAR" mine -o p.dmpk train
expect_stdout_empty "(mine -o)"
check_pack p.dmpk $((256 << 10))

expect_exit 0 "$DMAR" mine -q -T1 -o p1.dmpk train
expect_stderr_empty "(mine -q)"
expect_exit 0 "$DMAR" mine -q -T1 -o p2.dmpk train
check "mining the same data twice gives the same pack"
cmp -s p1.dmpk p2.dmpk || fail "two runs of 'mine -T1' on the same data differ"
expect_exit 0 "$DMAR" mine -q -T2 -o p3.dmpk train
check_pack p3.dmpk $((256 << 10))
rm -f p1.dmpk p2.dmpk p3.dmpk

expect_exit 0 "$DMAR" mine -q --maxdict 16k -o small.dmpk train
check_pack small.dmpk 16384
expect_exit 0 "$DMAR" mine -q --maxdict=32k -o s32.dmpk train
check_pack s32.dmpk 32768
rm -f s32.dmpk

# From a list of files.
expect_exit 0 "$DMAR" mine -q --maxdict 16k -o files.dmpk train/rec00*.json train/sub/deeper/rec0001.json
check_pack files.dmpk 16384

# Artifacts name the pack: id = first 8 bytes of its SHA-256 as a LE u64.
id_le=$(hexbytes p.dmpk 16 8)
id_be=$(printf '%s' "$id_le" | sed 's/\(..\)/\1 /g' | awk '{ for (i = NF; i > 0; i--) printf "%s", $i }')
expect_exit 0 "$DMAR" pack -q -D p.dmpk -o h.dmar held/rec0000.json
expect_exit 0 "$DMAR" info h.dmar
shown=$(sed -n 's/^byte pack: *\([0-9a-f]*\).*/\1/p' "$(stdout_file)")
check "info shows the pack id ($shown is $id_be or $id_le)"
[ "$shown" = "$id_be" ] || [ "$shown" = "$id_le" ] || fail "info says byte pack '$shown'"
[ "$shown" = "$id_be" ] || note "info prints the id bytes in file order ($id_le), not as the u64 value ($id_be)"
expect_exit 1 "$DMAR" unpack -o h.out h.dmar
expect_stderr "byte pack"
expect_stderr "$shown" "(names the pack id it needs)"
expect_no_file h.out
expect_exit 0 "$DMAR" unpack -q -D p.dmpk -o h.out h.dmar
expect_same held/rec0000.json h.out
rm -f h.dmar h.out

# --- the pack pays on small similar files ----------------------------------------
with=0
without=0
for f in held/*.json; do
	"$DMAR" pack -q -D p.dmpk -c "$f" >with.dmar || fail "pack -D $f failed"
	"$DMAR" pack -q -c "$f" >without.dmar || fail "pack $f failed"
	with=$((with + $(fsize with.dmar)))
	without=$((without + $(fsize without.dmar)))
done
raw=$(cat held/*.json | wc -c)
say "100 held-out files, $raw bytes: $without bytes packed without a pack, $with with p.dmpk"
check "the mined pack makes them smaller ($with < $without)"
[ "$with" -lt "$without" ] || fail "packing with the mined pack did not help"
check "by at least a quarter"
[ $((with * 4)) -lt $((without * 3)) ] || fail "the pack saved less than 25 %"
"$DMAR" unpack -q -D p.dmpk -c with.dmar >with.out || fail "unpack -D of the last file failed"
expect_same held/rec0099.json with.out
rm -f with.dmar without.dmar with.out

# --- failures --------------------------------------------------------------------------
mkdir empty
expect_exit 1 "$DMAR" mine -o e.dmpk empty
expect_stderr_nonempty "(empty directory)"
expect_error_prefix mine
expect_stderr 'empty|no (input|data|sample|file)|too (few|little|small)|nothing' "(says why)"
expect_no_file e.dmpk

expect_exit 1 "$DMAR" mine -o e.dmpk no-such-dir
expect_stderr "no-such-dir" "(names the missing input)"
expect_no_file e.dmpk

printf 'x' >tiny
expect_exit 1 "$DMAR" mine -o e.dmpk tiny
expect_stderr_nonempty "(a single byte of samples)"
expect_no_file e.dmpk

expect_exit 2 "$DMAR" mine train
expect_stderr_nonempty "(no -o)"
expect_exit 2 "$DMAR" mine -o e.dmpk
expect_stderr_nonempty "(no input)"
expect_no_file e.dmpk
expect_exit 2 "$DMAR" mine --maxdict abc -o e.dmpk train
expect_no_file e.dmpk

before=$(digest small.dmpk)
expect_exit 1 "$DMAR" mine -q -o small.dmpk train
expect_stderr "small\.dmpk" "(refuses to overwrite the existing pack)"
check "existing pack untouched"
[ "$(digest small.dmpk)" = "$before" ] || fail "mine without -f changed small.dmpk"
expect_exit 0 "$DMAR" mine -q -f --maxdict 8k -o small.dmpk train
check_pack small.dmpk 8192

# --- from a process's memory ----------------------------------------------------------
sleep 30 &
spid=$!
CLEANUP_PIDS="$CLEANUP_PIDS $spid"
check "sleep $spid is running"
kill -0 "$spid" 2>/dev/null || fail "could not start sleep"

cap_ptrace=0
capeff=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status 2>/dev/null || :)
if [ -n "$capeff" ] && [ $(((0x$capeff >> 19) & 1)) = 1 ]; then
	cap_ptrace=1
fi
scope=$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo 0)
run "$DMAR" mine -o pid.dmpk --pid "$spid"
if [ "$cap_ptrace" = 1 ] || [ "$scope" = 0 ]; then
	check "mine --pid $spid (our own process; CAP_SYS_PTRACE=$cap_ptrace, ptrace_scope=$scope) works"
	[ "$rc" = 0 ] || fail "mine --pid $spid exited $rc"
	check_pack pid.dmpk $((256 << 10))
	expect_exit 0 "$DMAR" mine -q --maxdict 16k -o pid16.dmpk --pid "$spid"
	check_pack pid16.dmpk 16384
else
	check "mine --pid $spid without ptrace rights: works or says permission"
	if [ "$rc" = 0 ]; then
		check_pack pid.dmpk $((256 << 10))
	else
		[ "$rc" = 1 ] || fail "mine --pid exited $rc"
		expect_stderr 'permission|denied|not permitted|ptrace' "(clear permission error)"
		expect_no_file pid.dmpk
	fi
fi

# Another user may not read our process: a clear permission error.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1 &&
	setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$DMAR" 2>/dev/null; then
	mkdir nob
	chmod 711 "$T" "$W"
	chmod 1777 nob
	check "mine --pid $spid as uid 65534 (process owned by root) fails with a permission error"
	rc=0
	setpriv --reuid=65534 --regid=65534 --clear-groups \
		"$DMAR" mine -o nob/p.dmpk --pid "$spid" >"$T/.stdout" 2>"$T/.stderr" || rc=$?
	[ "$rc" = 1 ] || fail "mine --pid as another user exited $rc"
	expect_stderr 'permission|denied|not permitted|ptrace' "(clear permission error)"
	expect_stderr "$spid" "(names the pid)"
	expect_dir_only nob
else
	note "skipped the other-user --pid case: needs root, setpriv and a dmar that uid 65534 can run"
fi

sh -c 'exit 0' &
dead=$!
wait "$dead" || :
check "pid $dead has exited"
! kill -0 "$dead" 2>/dev/null || fail "pid $dead is still alive"
expect_exit 1 "$DMAR" mine -o dead.dmpk --pid "$dead"
expect_stderr "$dead" "(names the pid)"
expect_error_prefix mine
expect_no_file dead.dmpk
expect_exit 2 "$DMAR" mine -o dead.dmpk --pid abc
expect_no_file dead.dmpk

say "PASS: mine"
exit 0
