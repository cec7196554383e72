#!/bin/sh
# SPDX-License-Identifier: MIT
#
# remote.sh - dmar cp, dmar nodes and dmar watch against a real node: a
# dmarfs mount with node=a serving the REST API on a free loopback port
# (token-less, as loopback allows), and a peer z on a closed port.
#
# Checks: cp FILE -> a:PATH lands byte-identical (read through the mount,
# and back with cp a:PATH -> FILE); a second cp of the same file sends 0
# chunks; a sparse file comes back identical and still sparse; a missing
# remote file fails with exit 1, a message naming the peer, and no temp
# file; -n refuses to replace; nodes reports a reachable and z unreachable
# (exit 1); watch --count prints the transfer events of a node-to-node cp.
# Needs what tests/fs need (/dev/fuse, the right to mount): skips with 77
# without.

. "${top_srcdir:-$(dirname "$0")/../..}/tests/fs/lib.sh"
: "${DMAR:=$top_builddir/dmar}"

# ---- the tests/cli/lib.sh way of running a command (that lib and
# tests/fs/lib.sh cannot both be sourced: each has its own cleanup) ----
run() {
	rc=0
	"$@" >"$T/.stdout" 2>"$T/.stderr" || rc=$?
}
expect_exit() {
	_want=$1
	shift
	check "exit $_want: $*"
	run "$@"
	[ "$rc" = "$_want" ] || fail "'$*' exited $rc, expected $_want; stderr: $(head -c 600 "$T/.stderr")"
}
expect_stderr() {
	check "stderr matches /$1/ ${2:-}"
	grep -Eiq -- "$1" "$T/.stderr" || fail "stderr does not match /$1/: $(head -c 400 "$T/.stderr")"
}
expect_stdout() {
	check "stdout matches /$1/ ${2:-}"
	grep -Eiq -- "$1" "$T/.stdout" || fail "stdout does not match /$1/: $(head -c 400 "$T/.stdout")"
}
expect_same() {
	check "$2 is byte-identical to $1"
	[ -f "$2" ] || fail "$2 does not exist"
	cmp -s "$1" "$2" || fail "$2 differs from $1 (sha256 $(digest "$1") / $(digest "$2"))"
}
# sent_chunks: the "N sent" of the last run's summary line.
sent_chunks() {
	sed -n 's/.* chunks, \([0-9][0-9]*\) sent, .*/\1/p' "$T/.stderr" | tail -n 1
}

# A TCP port nobody listens on (per /proc/net/tcp{,6}); a race with another
# program taking it first is possible, but then the mount fails loudly.
free_port() {
	_try=0
	while [ "$_try" -lt 50 ]; do
		_p=$(awk -v s="$(od -An -N2 -tu2 /dev/urandom)" 'BEGIN { srand(s); print 20000 + int(rand() * 40000) }')
		_hex=$(printf '%04X' "$_p")
		if ! cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '{ print $2 }' | grep -qi ":$_hex\$"; then
			printf '%s\n' "$_p"
			return 0
		fi
		_try=$((_try + 1))
	done
	fail "no free TCP port found"
}

fs_setup
[ -x "$DMAR" ] || fail "dmar binary not found or not executable: $DMAR (build it first)"
need cmp
need timeout
W=$T/w
mkdir "$W"

PORT=$(free_port)
CLOSED=$(free_port)
[ "$PORT" != "$CLOSED" ] || CLOSED=$((PORT + 1))
printf '# the node under test, and a peer on a closed port\na 127.0.0.1:%s\nz 127.0.0.1:%s\n' "$PORT" "$CLOSED" >"$T/peers"
printf 'a 127.0.0.1:%s\n' "$PORT" >"$T/peers.a"
DMAR_PEERS=$T/peers
export DMAR_PEERS
unset DMAR_TOKEN_FILE || :

fs_mount "size=256m,node=a,listen=127.0.0.1:$PORT,peers=$T/peers" A

# Ready: the mount is up, now the API must answer (bounded, no bare sleep).
check "node a answers GET /v1/node on port $PORT"
_n=100
until timeout 5 "$DMAR" nodes --peers "$T/peers.a" >/dev/null 2>&1; do
	_n=$((_n - 1))
	[ "$_n" -gt 0 ] || fail "node a does not answer on 127.0.0.1:$PORT after 10 s"
	sleep 0.1
done

# Every dmar below runs under timeout: a hang is a failure, not a stuck test.
D="timeout 60 $DMAR"

# ---- cp FILE -> a:PATH ------------------------------------------------------
mkprng "$W/f1" 3000000 1
expect_exit 0 $D cp "$W/f1" a:f1
expect_stderr "f1 -> a:f1: 3000000 bytes" "(summary line)"
expect_same "$W/f1" "$A/f1"
check "the copy on the node has f1's mode and mtime"
[ "$(stat -c '%a %Y' "$W/f1")" = "$(stat -c '%a %Y' "$A/f1")" ] ||
	fail "mode/mtime $(stat -c '%a %Y' "$A/f1"), expected $(stat -c '%a %Y' "$W/f1")"

# The same bytes again, under another name: only recipe and query travel.
expect_exit 0 $D cp "$W/f1" a:f1.again
check "a second cp of the same file sends 0 chunks"
[ "$(sent_chunks)" = 0 ] || fail "second cp sent $(sent_chunks) chunks: $(cat "$T/.stderr")"
expect_same "$W/f1" "$A/f1.again"

# -q: nothing on stderr; -n: an existing file is not replaced.
expect_exit 0 $D cp -q "$W/f1" a:f1
check "cp -q prints nothing"
[ ! -s "$T/.stderr" ] || fail "cp -q printed: $(cat "$T/.stderr")"
mkprng "$W/other" 1000 2
expect_exit 1 $D cp -n "$W/other" a:f1
expect_stderr "^dmar: cp: a:f1: already exists" "(-n names the file)"
expect_same "$W/f1" "$A/f1"

# A directory as DST (with or without '/') gets the file name appended.
mkdir "$A/d"
expect_exit 0 $D cp "$W/f1" a:d
expect_same "$W/f1" "$A/d/f1"

# ---- cp a:PATH -> FILE ------------------------------------------------------
expect_exit 0 $D cp a:f1 "$W/back"
expect_same "$W/f1" "$W/back"
check "the copy back has the node's mode and mtime"
[ "$(stat -c '%a %Y' "$W/back")" = "$(stat -c '%a %Y' "$A/f1")" ] || fail "mode/mtime not restored"
mkdir "$W/dir"
expect_exit 0 $D cp a:d/f1 "$W/dir/"
expect_same "$W/f1" "$W/dir/f1"

# A sparse file: 16 MiB with 5 bytes of data in the middle.
truncate -s 16M "$W/sparse"
printf 'hello' | dd of="$W/sparse" bs=1 seek=9000000 conv=notrunc 2>/dev/null
expect_exit 0 $D cp "$W/sparse" a:sparse
expect_exit 0 $D cp a:sparse "$W/sparse.back"
expect_same "$W/sparse" "$W/sparse.back"
check "the copy back is still sparse (allocates under 1 MiB of 16)"
_alloc=$(( $(stat -c '%b * %B' "$W/sparse.back") ))
[ "$_alloc" -lt "$MiB" ] || fail "sparse.back allocates $(mib "$_alloc")"

# ---- failures ---------------------------------------------------------------
ls -A "$W" >"$T/before"
expect_exit 1 $D cp a:no-such-file "$W/x"
expect_stderr "^dmar: cp: a:no-such-file: " "(names peer and file)"
expect_stderr "ENOENT|no such file" "(says why)"
check "no file and no temp file left behind"
ls -A "$W" >"$T/after"
cmp -s "$T/before" "$T/after" || fail "the failed cp left: $(diff "$T/before" "$T/after" | tr '\n' ' ')"

expect_exit 1 $D cp "$W/f1" z:f1
expect_stderr "^dmar: cp: z:f1: .*(refused|ECONNREFUSED)" "(an unreachable peer, named)"
expect_exit 1 $D cp "$W/f1" nosuch:f1
expect_stderr "no peer named 'nosuch'"
expect_exit 2 $D cp "$W/f1" "$W/f2"
expect_exit 2 $D cp "$W/f1"

# ---- nodes ------------------------------------------------------------------
expect_exit 1 $D nodes
expect_stdout "^a +127\.0\.0\.1:$PORT +reachable " "(a is reachable)"
expect_stdout "^z +127\.0\.0\.1:$CLOSED +unreachable .*refused" "(z is not, and why)"
expect_exit 0 $D nodes --peers "$T/peers.a"
expect_exit 1 $D nodes --json
expect_stdout '"reachable": true' "(json)"
expect_stdout '"errno": "ECONNREFUSED"' "(json names z's failure)"

# ---- watch ------------------------------------------------------------------
# hello, then started, progress..., done: --count 2 ends at the first two
# transfer events (started and progress or done).
check "watch --count 2 prints the events of a node-to-node cp"
timeout 30 "$DMAR" watch --count 2 a >"$T/watch.out" 2>"$T/watch.err" &
WATCH=$!
CLEANUP_PIDS="${CLEANUP_PIDS:-} $WATCH"
_n=100
until grep -q '"type":"hello"' "$T/watch.out" 2>/dev/null; do
	_n=$((_n - 1))
	[ "$_n" -gt 0 ] || fail "watch printed no hello within 10 s: $(cat "$T/watch.err")"
	kill -0 "$WATCH" 2>/dev/null || fail "watch ended early: $(cat "$T/watch.err")"
	sleep 0.1
done
expect_exit 0 $D cp a:f1 a:f2
expect_stderr "a:f1 -> a:f2: 3000000 bytes"
wait "$WATCH" && _st=0 || _st=$?
[ "$_st" = 0 ] || fail "watch exited $_st: $(cat "$T/watch.err")"
grep -q '"type":"transfer.started"' "$T/watch.out" || fail "no transfer.started event: $(cat "$T/watch.out")"
grep '"transfer.started"' "$T/watch.out" | grep -q '"dest":"f2"' || fail "the event does not name dest f2"
check "watch printed the hello and exactly 2 events, one JSON object a line"
[ "$(wc -l <"$T/watch.out")" = 3 ] || fail "watch printed $(wc -l <"$T/watch.out") lines: $(cat "$T/watch.out")"
! grep -qv '^{.*}$' "$T/watch.out" || fail "a line is not a JSON object: $(cat "$T/watch.out")"
expect_same "$W/f1" "$A/f2"

expect_exit 1 $D watch --count 1 z
expect_stderr "^dmar: watch: z "
expect_exit 2 $D watch

finish
