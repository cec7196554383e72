#!/bin/sh
# Fuzz each target for a short while (built with --enable-fuzzing only).
#
# Seeds from tests/fuzz/corpus/TARGET; new inputs go to a scratch corpus so
# the source tree is never written.  Fails if libFuzzer reports a crash,
# leak, timeout or out-of-memory; the input that triggered it is kept in
# $top_builddir/tests/fuzz/findings/ (reproduce with
# `tests/fuzz/fuzz_TARGET FILE` or `tests/fuzz/replay_TARGET FILE`).
#
# FUZZ_TIME (seconds per target, default 20) and FUZZ_TARGETS (default
# "decode bytepack roundtrip recipe batch peers ws journal http tree zframe") override the defaults.
set -u
: "${top_srcdir:?run from make check, or set top_srcdir and top_builddir}"
: "${top_builddir:?run from make check, or set top_srcdir and top_builddir}"
FUZZ_TIME=${FUZZ_TIME:-20}
FUZZ_TARGETS=${FUZZ_TARGETS:-decode bytepack roundtrip recipe batch peers ws journal http tree zframe}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dmar-fuzz.XXXXXX") || exit 99
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
findings="$top_builddir/tests/fuzz/findings"

status=0
for t in $FUZZ_TARGETS; do
	bin="$top_builddir/tests/fuzz/fuzz_$t"
	seed="$top_srcdir/tests/fuzz/corpus/$t"
	if [ ! -x "$bin" ]; then
		echo "run-short.sh: $bin not built" >&2
		status=1
		continue
	fi
	mkdir -p "$tmp/$t/corpus" "$tmp/$t/crash"
	# -error_exitcode: libFuzzer's default (77) would read as "skipped".
	if "$bin" -max_total_time="$FUZZ_TIME" -max_len=65536 -timeout=30 \
		-rss_limit_mb=2560 -error_exitcode=1 -timeout_exitcode=1 \
		-print_final_stats=1 -artifact_prefix="$tmp/$t/crash/" \
		"$tmp/$t/corpus" "$seed" >"$tmp/$t/log" 2>&1; then
		rc=0
	else
		rc=$?
	fi
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$tmp/$t/log")
	cov=$(grep -E '^#[0-9]+' "$tmp/$t/log" | tail -1 | sed -n 's/.*cov: \([0-9]*\).*ft: \([0-9]*\).*/cov \1, ft \2/p')
	echo "fuzz_$t: ${FUZZ_TIME}s, ${execs:-?} execs, ${cov:-no coverage line}, exit $rc"
	if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$tmp/$t/crash")" ]; then
		echo "run-short.sh: FAIL: fuzz_$t (exit $rc); last lines of its log:" >&2
		tail -40 "$tmp/$t/log" >&2
		mkdir -p "$findings"
		for f in "$tmp/$t/crash"/*; do
			[ -e "$f" ] || continue
			cp "$f" "$findings/$t-$(basename "$f")"
			echo "run-short.sh: kept $findings/$t-$(basename "$f")" >&2
		done
		status=1
	fi
done
exit $status
