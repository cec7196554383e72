# SPDX-License-Identifier: MIT
#
# tests/cli/lib.sh - helpers shared by the dmar CLI tests (sourced, POSIX sh).
#
# The test harness (make check) exports DMAR, top_srcdir and top_builddir;
# run by hand it is enough to set DMAR:
#     DMAR=/tmp/build/dmar sh tests/cli/basic.sh
# KEEP_TMP=1 keeps a test's temp dir for a post-mortem.
#
# Conventions: every test prints what it checks ("check: ..."), fails with
# fail() (exit 1), skips a case it cannot run with note(), and skips the whole
# test (exit 77) only through skip() when a prerequisite is truly absent.
# Digests come from `openssl dgst -sha256 -r` (never sha256sum).

set -eu

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
: "${DMAR:=$top_builddir/dmar}"
export LC_ALL=C

TEST_NAME=$(basename "$0" .sh)

say() { printf '%s\n' "$*"; }
check() { printf 'check: %s\n' "$*"; }
note() { printf 'note: %s\n' "$*"; }

# Print the last command's captured output (see run) to help a post-mortem.
show_last() {
	if [ -n "${T:-}" ] && [ -f "$T/.stderr" ]; then
		printf -- '--- last stderr (first 20 lines):\n' >&2
		head -n 20 "$T/.stderr" >&2 || :
	fi
}

fail() {
	printf 'FAIL: %s: %s\n' "$TEST_NAME" "$*" >&2
	show_last
	exit 1
}

skip() {
	printf 'SKIP: %s: %s\n' "$TEST_NAME" "$*"
	exit 77
}

need() {
	command -v "$1" >/dev/null 2>&1 || skip "prerequisite '$1' not found in PATH"
}

# setup: check the binary and make this test's temp dir $T (with the work
# dir $W).  The test then sets `trap cleanup EXIT` itself.
CLEANUP_PIDS=""
setup() {
	[ -x "$DMAR" ] || fail "dmar binary not found or not executable: $DMAR (build it first)"
	need openssl
	need cmp
	need stat
	T=$(mktemp -d "${TMPDIR:-/tmp}/dmar-$TEST_NAME.XXXXXX")
	# $T holds the captured output of run; $W is the tests' working dir, so
	# a listing of it shows only what dmar and the test made.
	W=$T/w
	mkdir "$W"
	say "test $TEST_NAME: dmar=$DMAR tmp=$T"
}

cleanup() {
	for p in $CLEANUP_PIDS; do
		kill "$p" 2>/dev/null || :
		wait "$p" 2>/dev/null || :
	done
	if [ -n "${T:-}" ] && [ -d "$T" ]; then
		if [ "${KEEP_TMP:-0}" = 1 ]; then
			say "kept $T"
		else
			rm -rf "$T"
		fi
	fi
}

# run CMD...: run CMD with stdout to $T/.stdout and stderr to $T/.stderr;
# its exit status goes to $rc.  Redirect run's stdin to feed CMD.
run() {
	rc=0
	"$@" >"$T/.stdout" 2>"$T/.stderr" || rc=$?
}

# expect_exit CODE CMD...: run CMD and fail unless it exits with CODE.
expect_exit() {
	_want=$1
	shift
	check "exit $_want: $*"
	run "$@"
	[ "$rc" = "$_want" ] || fail "'$*' exited $rc, expected $_want"
}

# The captured output of the last run.
stdout_file() { printf '%s' "$T/.stdout"; }
stderr_file() { printf '%s' "$T/.stderr"; }

# expect_stderr ERE [WHAT]: the last run's stderr matches ERE (case-insensitive).
expect_stderr() {
	check "stderr matches /$1/ ${2:-}"
	grep -Eiq -- "$1" "$T/.stderr" ||
		fail "stderr does not match /$1/: $(head -c 400 "$T/.stderr")"
}

expect_stdout() {
	check "stdout matches /$1/ ${2:-}"
	grep -Eiq -- "$1" "$T/.stdout" ||
		fail "stdout does not match /$1/: $(head -c 400 "$T/.stdout")"
}

expect_stderr_empty() {
	check "stderr empty ${1:-}"
	[ ! -s "$T/.stderr" ] || fail "stderr not empty: $(head -c 400 "$T/.stderr")"
}

expect_stdout_empty() {
	check "stdout empty ${1:-}"
	[ ! -s "$T/.stdout" ] || fail "stdout not empty ($(fsize "$T/.stdout") bytes)"
}

expect_stderr_nonempty() {
	check "stderr has a message ${1:-}"
	[ -s "$T/.stderr" ] || fail "stderr is empty: no error message"
}

# Error messages follow "dmar: CMD: ...".
expect_error_prefix() {
	check "stderr starts with 'dmar: $1:'"
	head -n 1 "$T/.stderr" | grep -q "^dmar: $1: " ||
		fail "message does not start with 'dmar: $1: ': $(head -n 1 "$T/.stderr")"
}

digest() {
	openssl dgst -sha256 -r "$1" | cut -d' ' -f1
}

fsize() {
	stat -c %s "$1"
}

# expect_same ORIG COPY: byte-identical (cmp, and SHA-256 for the log).
expect_same() {
	check "$2 is byte-identical to $1"
	[ -f "$2" ] || fail "$2 does not exist"
	cmp -s "$1" "$2" ||
		fail "$2 differs from $1 (sizes $(fsize "$1") / $(fsize "$2"), sha256 $(digest "$1") / $(digest "$2"))"
}

expect_file() {
	check "$1 exists"
	[ -f "$1" ] || fail "$1 was not created"
}

expect_no_file() {
	check "no file $1"
	[ ! -e "$1" ] || fail "$1 exists but must not"
}

# expect_dir_only DIR NAME...: DIR holds exactly NAME... (no temp files).
expect_dir_only() {
	_dir=$1
	shift
	_want=$(for n in "$@"; do printf '%s\n' "$n"; done | sort)
	_got=$(ls -A "$_dir" | sort)
	check "$_dir holds only: $*"
	[ "$_want" = "$_got" ] || fail "$_dir holds [$(printf '%s' "$_got" | tr '\n' ' ')], expected [$*]"
}

# expect_magic FILE MAGIC: FILE starts with the 4-byte MAGIC.
expect_magic() {
	check "$1 starts with '$2'"
	[ "$(head -c 4 "$1")" = "$2" ] || fail "$1 does not start with '$2'"
}

# mkrand FILE BYTES: random bytes.
mkrand() {
	if [ "$2" -eq 0 ]; then
		: >"$1"
	else
		openssl rand -out "$1" "$2"
	fi
}

# mkprng FILE BYTES SEED: pseudo-random bytes, the same for the same SEED
# (AES-128-CTR keystream), for cases whose outcome depends on the data.
mkprng() {
	openssl enc -aes-128-ctr -nosalt -K "$(printf '%032x' "$3")" -iv 00000000000000000000000000000000 \
		-in /dev/zero 2>/dev/null | head -c "$2" >"$1"
	[ "$(fsize "$1")" = "$2" ] || fail "mkprng: could not make $2 bytes"
}

# mktext FILE BYTES [SEED]: compressible, deterministic text of BYTES bytes.
mktext() {
	awk -v n="$2" -v seed="${3:-1}" 'BEGIN {
		srand(seed);
		split("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu", w, " ");
		out = 0;
		while (out < n) {
			line = sprintf("%08d %s=%d %s %s status=ok\n", out, w[int(rand() * 12) + 1],
				int(rand() * 1000), w[int(rand() * 12) + 1], w[int(rand() * 12) + 1]);
			out += length(line);
			printf "%s", line;
		}
	}' | head -c "$2" >"$1"
}

# info_value KEY: the leading number of "KEY: N ..." in the last stdout.
info_value() {
	sed -n "s/^$1: *\([0-9][0-9]*\).*/\1/p" "$T/.stdout" | head -n 1
}

# expect_info KEY VALUE: `dmar info` (last run) says "KEY: VALUE".
expect_info() {
	_v=$(info_value "$1")
	check "info: $1 = $2"
	[ -n "$_v" ] || fail "info output has no '$1: N' line: $(tr '\n' '|' <"$T/.stdout")"
	[ "$_v" = "$2" ] || fail "info says $1: $_v, expected $2"
}

# mkjson DIR N SEED: N small JSON records sharing their structure.
mkjson() {
	mkdir -p "$1"
	awk -v dir="$1" -v n="$2" -v seed="$3" 'BEGIN {
		srand(seed);
		split("red green blue cyan magenta yellow black white", c, " ");
		for (i = 0; i < n; i++) {
			f = sprintf("%s/rec%04d.json", dir, i);
			printf "{\n  \"id\": %d,\n  \"user\": \"user%05d\",\n", i, int(rand() * 100000) > f;
			printf "  \"email\": \"user%05d@example.org\",\n", int(rand() * 100000) >> f;
			printf "  \"colour\": \"%s\",\n  \"tags\": [", c[int(rand() * 8) + 1] >> f;
			for (j = 0; j < 12; j++)
				printf "\"tag-%s-%d\"%s", c[int(rand() * 8) + 1], int(rand() * 50), j < 11 ? ", " : "" >> f;
			printf "],\n  \"history\": [\n" >> f;
			for (j = 0; j < 10; j++)
				printf "    {\"ts\": %d, \"event\": \"login\", \"ok\": true, \"agent\": \"Mozilla/5.0 (X11; Linux x86_64)\"},\n", 1700000000 + int(rand() * 1000000) >> f;
			printf "    {\"ts\": 0, \"event\": \"end\"}\n  ]\n}\n" >> f;
			close(f);
		}
	}'
}
