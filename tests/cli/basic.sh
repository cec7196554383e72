#!/bin/sh
# SPDX-License-Identifier: MIT
#
# basic.sh - golden tests of the dmar command line (documented in docs/dmar.1.md):
# help and version on stdout, errors on stderr, exit codes 0/1/2, refusal to
# overwrite or to write to a terminal, and `dmar info` numbers for files
# whose layout is known in advance.

. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
setup
trap cleanup EXIT
cd "$W" || exit 1

# --- help and version -------------------------------------------------------
expect_exit 0 "$DMAR" --help
expect_stderr_empty "(--help)"
for w in pack unpack mine info cp nodes watch; do
	check "--help mentions '$w'"
	grep -qw -- "$w" "$(stdout_file)" || fail "--help does not mention '$w'"
done

version=""
if [ -f "$top_builddir/config.h" ]; then
	version=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"$/\1/p' "$top_builddir/config.h")
fi
if [ -z "$version" ] && [ -f "$top_srcdir/configure.ac" ]; then
	version=$(sed -n 's/^AC_INIT(\[dmarfs\], \[\([^]]*\)\].*/\1/p' "$top_srcdir/configure.ac")
fi
[ -n "$version" ] || fail "cannot find the package version in config.h or configure.ac"
expect_exit 0 "$DMAR" --version
check "--version: first line is exactly 'dmar (dmarfs) $version'"
[ "$(head -n 1 "$(stdout_file)")" = "dmar (dmarfs) $version" ] ||
	fail "--version printed '$(head -n 1 "$(stdout_file)")'"
expect_stderr_empty "(--version)"

for cmd in pack unpack mine info cp nodes watch; do
	expect_exit 0 "$DMAR" "$cmd" --help
	check "'$cmd --help' prints help on stdout naming '$cmd'"
	grep -qw -- "$cmd" "$(stdout_file)" || fail "'$cmd --help' stdout does not mention '$cmd'"
	expect_stderr_empty "($cmd --help)"
done

# --- usage errors: exit 2, message on stderr, nothing on stdout -------------
expect_exit 2 "$DMAR" --no-such-option
expect_stderr_nonempty
expect_stdout_empty "(unknown option)"

expect_exit 2 "$DMAR" frobnicate
expect_stderr_nonempty
expect_stderr "frobnicate" "(names the unknown command)"
expect_stdout_empty "(unknown command)"

printf 'hello\n' >small
for cmd in pack unpack mine info cp nodes watch; do
	expect_exit 2 "$DMAR" "$cmd" --no-such-option small
	expect_stderr_nonempty
	expect_stdout_empty "($cmd with an unknown option)"
done

# Bad option values are usage errors too (-# is 1..19, -L 0..22 as the
# help says, -T a number).
for bad in "-20" "-L 23" "-L 0x" "-L abc" "-L -1" "-T abc" "-T -1"; do
	# shellcheck disable=SC2086
	expect_exit 2 "$DMAR" pack $bad -o bad.dmar small
	expect_stderr_nonempty
	expect_no_file bad.dmar
done

# The node commands' usage errors need no node: both sides local, a missing
# argument, a bad --count or stream count.
for bad in "cp small copy" "cp small" "watch" "watch --count 0 a" "cp -T 0x small a:x" "nodes extra"; do
	# shellcheck disable=SC2086
	expect_exit 2 "$DMAR" $bad
	expect_stderr_nonempty
	expect_stdout_empty "(dmar $bad)"
done
expect_no_file copy
# A peers file that is not there: exit 1, named.
expect_exit 1 "$DMAR" nodes --peers no-such-peers-file
expect_stderr "no-such-peers-file"

# --- failures: exit 1 with the file name ------------------------------------
expect_exit 1 "$DMAR" pack no-such-input-file
expect_stderr "no-such-input-file" "(names the missing file)"
expect_error_prefix pack
expect_no_file no-such-input-file.dmar
expect_stdout_empty

expect_exit 1 "$DMAR" unpack no-such-artifact.dmar
expect_stderr "no-such-artifact\.dmar"
expect_no_file no-such-artifact

expect_exit 1 "$DMAR" info no-such-artifact.dmar
expect_stderr "no-such-artifact\.dmar"

# --- pack: default output name, refuses to overwrite without -f -------------
mkrand data 70000
expect_exit 0 "$DMAR" pack data
expect_file data.dmar
expect_magic data.dmar DMAR
expect_stdout_empty "(pack to a file writes nothing on stdout)"

printf 'precious, not an artifact\n' >data.dmar
before=$(digest data.dmar)
expect_exit 1 "$DMAR" pack data
expect_stderr_nonempty
expect_stderr "data\.dmar" "(names the existing output)"
check "existing data.dmar left untouched"
[ "$(digest data.dmar)" = "$before" ] || fail "pack without -f changed the existing output"
expect_dir_only . data data.dmar small

expect_exit 1 "$DMAR" pack -o data.dmar data
check "existing -o output left untouched"
[ "$(digest data.dmar)" = "$before" ] || fail "pack -o without -f changed the existing output"

expect_exit 0 "$DMAR" pack -f data
expect_magic data.dmar DMAR
expect_exit 0 "$DMAR" unpack -o data.copy data.dmar
expect_same data data.copy

printf 'precious\n' >other.dmar
expect_exit 0 "$DMAR" pack -f -o other.dmar data
expect_exit 0 "$DMAR" unpack -o other.copy other.dmar
expect_same data other.copy
rm -f other.dmar other.copy data.copy

# -c writes the artifact to stdout and creates no file.
expect_exit 0 "$DMAR" pack -c data
expect_magic "$(stdout_file)" DMAR
expect_dir_only . data data.dmar small

# --- unpack: refuses to overwrite, needs a .dmar suffix or -o ---------------
mv data data.orig
cp data.orig data
expect_exit 1 "$DMAR" unpack data.dmar
expect_stderr "data" "(names the existing output)"
expect_same data.orig data
rm data
expect_exit 0 "$DMAR" unpack data.dmar
expect_same data.orig data
expect_exit 0 "$DMAR" unpack -f data.dmar
expect_same data.orig data

cp data.dmar art.bin
check "unpack art.bin (no .dmar suffix, no -o) is refused"
run "$DMAR" unpack art.bin
case $rc in 1 | 2) ;; *) fail "unpack art.bin exited $rc, expected 1 or 2" ;; esac
expect_stderr_nonempty
expect_stderr '\.dmar|suffix|-o' "(says why)"
expect_dir_only . art.bin data data.dmar data.orig small
expect_exit 0 "$DMAR" unpack -o art.out art.bin
expect_same data.orig art.out
rm -f art.bin art.out

# --- pack to a terminal is refused -------------------------------------------
if command -v script >/dev/null 2>&1 &&
	script -qec 'test -t 1 && echo IS-A-TTY' /dev/null </dev/null 2>/dev/null | grep -q IS-A-TTY; then
	for how in "pack -c data" "pack - <data" "pack <data"; do
		check "'dmar $how' with stdout on a terminal is refused"
		rc=0
		script -qec "\"$DMAR\" $how" /dev/null </dev/null >tty.out 2>&1 || rc=$?
		[ "$rc" != 0 ] || fail "'dmar $how' wrote to a terminal (exit 0)"
		[ "$rc" = 1 ] || [ "$rc" = 2 ] || fail "'dmar $how' to a terminal exited $rc"
		check "no artifact bytes on the terminal"
		! grep -aq 'DMAR' tty.out || fail "artifact bytes were written to the terminal"
		grep -aiq 'dmar' tty.out || fail "no message when refusing to write to a terminal"
		rm -f tty.out
	done
else
	note "skipped the terminal case: util-linux 'script' with a working pty not available"
fi

# --- -q and -v ---------------------------------------------------------------
rm -f data.dmar data
expect_exit 0 "$DMAR" pack -q data.orig -o q.dmar
expect_stderr_empty "(pack -q)"
expect_exit 0 "$DMAR" unpack -q q.dmar -o q.out
expect_stderr_empty "(unpack -q)"
expect_same data.orig q.out
expect_exit 0 "$DMAR" info q.dmar
expect_stderr_empty "(info)"
expect_exit 0 "$DMAR" unpack -q -t q.dmar
expect_stderr_empty "(unpack -q -t)"
expect_dir_only . data.orig q.dmar q.out small
rm -f q.out

expect_exit 0 "$DMAR" pack -v data.orig -o v.dmar
expect_stderr 'MB/s' "(pack -v prints a summary with a speed)"
expect_stderr '70000|68\.[0-9] ?KiB|70\.0 ?kB' "(pack -v summary shows the logical size)"
expect_exit 0 "$DMAR" unpack -v -o v.out v.dmar
expect_stderr 'MB/s' "(unpack -v prints a summary with a speed)"
expect_same data.orig v.out
rm -f v.dmar v.out

# --- unpack -t: test only, writes nothing ----------------------------------
expect_exit 0 "$DMAR" unpack -t q.dmar
expect_dir_only . data.orig q.dmar small
expect_stdout_empty "(unpack -t)"

# --- info numbers for known layouts -------------------------------------------
# Fixed 4 KiB chunks (min = avg = max): 100000 bytes are exactly 25 chunks.
mkrand r100k 100000
expect_exit 0 "$DMAR" pack --chunk-min 4k --chunk-size 4k --chunk-max 4k -o r100k.dmar r100k
expect_exit 0 "$DMAR" info r100k.dmar
expect_info "logical size" 100000
expect_info "artifact size" "$(fsize r100k.dmar)"
expect_info "chunks" 25
expect_info "absent chunks" 0
expect_stdout '^byte pack: none' "(no byte pack)"
expect_stdout '^ratio: ' "(ratio line)"
expect_stdout 'mode' "(file mode shown)"
expect_stdout 'mtime' "(mtime shown)"
expect_stderr_empty "(info)"

# Default sizes: a file below the 8 KiB minimum is one chunk; empty is none.
mkrand r5000 5000
: >empty
expect_exit 0 "$DMAR" pack r5000
expect_exit 0 "$DMAR" pack empty
expect_exit 0 "$DMAR" info r5000.dmar
expect_info "logical size" 5000
expect_info "artifact size" "$(fsize r5000.dmar)"
expect_info "chunks" 1
expect_exit 0 "$DMAR" info empty.dmar
expect_info "logical size" 0
expect_info "artifact size" "$(fsize empty.dmar)"
expect_info "chunks" 0

# Several files at once: one report each.
expect_exit 0 "$DMAR" info r100k.dmar r5000.dmar empty.dmar
check "info of three artifacts prints three 'logical size' lines (100000, 5000, 0)"
[ "$(grep -c '^logical size:' "$(stdout_file)")" = 3 ] || fail "expected 3 reports"
[ "$(sed -n 's/^logical size: *\([0-9]*\).*/\1/p' "$(stdout_file)" | tr '\n' ' ')" = "100000 5000 0 " ] ||
	fail "logical sizes are not 100000 5000 0 in order"

# info of something that is not an artifact.
expect_exit 1 "$DMAR" info small
expect_stderr "not a dmar artifact|truncated" "(says it is not an artifact)"

# The codec commands never load libcurl (net/libcurl.h: it and the
# thirty libraries it brings cost ~7 ms of start-up a process).  A pack
# that waits on a FIFO shows its mappings meanwhile.
check "dmar pack has no libcurl mapped while it runs"
mkfifo fifo
"$DMAR" pack -q -c fifo >fifo.dmar 2>fifo.err &
pid=$!
exec 3>fifo
maps=""
for _ in $(seq 1 100); do
	maps=$(cat "/proc/$pid/maps" 2>/dev/null) || break
	case $maps in *libzstd*) break ;; esac
	sleep 0.05
done
exec 3>&-
wait "$pid" || fail "dmar pack -c fifo failed: $(cat fifo.err)"
case $maps in
*libzstd*) ;;
*) fail "could not read the mappings of dmar pack (pid $pid)" ;;
esac
case $maps in *libcurl*) fail "dmar pack mapped libcurl: $(printf '%s\n' "$maps" | grep libcurl | head -n 1)" ;; esac

# Nor libcrypto where the CPU has SHA-NI (codec/libcrypto.h: linking it
# cost 2.3 ms of start-up a process); without SHA-NI, or told not to use
# it, dmar loads libcrypto and hashes with it, to the same artifact.  The
# dynamic loader's own log (LD_DEBUG=files) names every library loaded,
# dlopen()ed ones too.
check "libcrypto is loaded only to hash without SHA-NI, to the same bytes"
head -c 300000 /dev/urandom >lc.in
cat lc.in lc.in >>lc.in2
LD_DEBUG=files "$DMAR" pack -q -f -o lc.dmar lc.in2 2>lc.log || fail "dmar pack lc.in2 failed: $(grep -v 'file=\|calling\|^ *[0-9]*: *$' lc.log | head -n 3)"
if grep -qw sha_ni /proc/cpuinfo; then
	if grep -q 'file=libcrypto' lc.log; then fail "dmar pack loaded libcrypto on a CPU with SHA-NI"; fi
else
	say "  (this CPU has no SHA-NI: libcrypto is dmar's engine here)"
fi
DMAR_HASH_NO_SHANI=1 DMAR_HASH_NO_AVX512=1 LD_DEBUG=files "$DMAR" pack -q -f -o lc2.dmar lc.in2 2>lc2.log ||
	fail "dmar pack with DMAR_HASH_NO_SHANI failed"
grep -q 'file=libcrypto' lc2.log || fail "dmar pack with DMAR_HASH_NO_SHANI=1 did not load libcrypto"
cmp -s lc.dmar lc2.dmar || fail "libcrypto and sha256.c made different artifacts"
DMAR_HASH_NO_SHANI=1 DMAR_HASH_NO_AVX512=1 "$DMAR" unpack -q -f -o lc.out lc.dmar || fail "unpack with libcrypto failed"
cmp -s lc.out lc.in2 || fail "unpack with libcrypto gave other bytes"
rm -f lc.in lc.in2 lc.dmar lc2.dmar lc.out lc.log lc2.log

say "PASS: basic"
exit 0
