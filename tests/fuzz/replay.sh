#!/bin/sh
# Replay the committed fuzz corpus through every target (make check).
# Each replay_TARGET links the fuzz target with a plain main(), so this runs
# in every build, with or without libFuzzer; under --enable-sanitizers it
# also catches memory errors on the corpus.
set -u
: "${top_srcdir:?run from make check, or set top_srcdir and top_builddir}"
: "${top_builddir:?run from make check, or set top_srcdir and top_builddir}"

status=0
for t in decode bytepack roundtrip recipe batch peers ws journal http tree zframe; do
	bin="$top_builddir/tests/fuzz/replay_$t"
	corpus="$top_srcdir/tests/fuzz/corpus/$t"
	if [ ! -x "$bin" ]; then
		echo "replay.sh: $bin not built" >&2
		status=1
		continue
	fi
	if [ ! -d "$corpus" ]; then
		echo "replay.sh: no corpus $corpus" >&2
		status=1
		continue
	fi
	printf '%s: ' "$t"
	if ! "$bin" "$corpus"; then
		echo "replay.sh: FAIL: replay_$t over $corpus" >&2
		status=1
	fi
done
exit $status
