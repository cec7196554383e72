#!/bin/sh
# SPDX-License-Identifier: MIT
#
# roundtrip.sh - `dmar pack` then `dmar unpack` gives back the same bytes:
# edge sizes around the chunk limits, big random and compressible data, every
# level and thread count, pipes, default names, custom chunk sizes, mode and
# mtime, thin artifacts against reference data, and the byte pack.

. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
setup
trap cleanup EXIT
cd "$W" || exit 1

# rt FILE PACK-OPTION...: pack FILE with the options to rt.dmar, unpack it
# to rt.out and compare; leaves the artifact size in $rt_size.
rt() {
	_f=$1
	shift
	rm -f rt.dmar rt.out
	expect_exit 0 "$DMAR" pack -q "$@" -o rt.dmar "$_f"
	expect_magic rt.dmar DMAR
	expect_exit 0 "$DMAR" unpack -q -o rt.out rt.dmar
	expect_same "$_f" rt.out
	rt_size=$(fsize rt.dmar)
	rm -f rt.out
}

# --- sizes at and around the default chunk limits (8k/32k/128k) -------------
for n in 0 1 2 255 256 257 8191 8192 8193 32767 32768 32769 131071 131072 131073 262145; do
	mkrand "r$n" "$n"
	rt "r$n"
	rt "r$n" -0
	rm -f "r$n"
done

# Every byte value, and a long run of one byte (cut points on constant data).
awk 'BEGIN { for (i = 0; i < 256; i++) printf "%c", i }' >bytes256
check "bytes256 holds 256 bytes"
[ "$(fsize bytes256)" = 256 ] || fail "could not make a file of all 256 byte values"
rt bytes256
head -c 1000000 /dev/zero >zeros
rt zeros
check "a MB of zeros compresses to under 2 KiB ($rt_size)"
[ "$rt_size" -lt 2048 ] || fail "zeros: artifact is $rt_size bytes"

# --- 20 MiB of random data: levels and threads --------------------------------
mkrand big $((20 << 20))
rt big
check "random data does not grow by more than 1 % ($rt_size vs $(fsize big))"
[ "$rt_size" -lt $(((20 << 20) + (20 << 20) / 100)) ] || fail "artifact of random data is $rt_size bytes"
rt big -0
rt big -1
for t in 1 2 0; do
	rt big "-T$t"
	cp rt.dmar "big.T$t.dmar"
done
check "the artifact does not depend on the thread count (-T1, -T2, -T0 identical)"
cmp -s big.T1.dmar big.T2.dmar || fail "-T1 and -T2 artifacts differ"
cmp -s big.T1.dmar big.T0.dmar || fail "-T1 and -T0 artifacts differ"
rt big -T 2
cmp -s big.T1.dmar rt.dmar || fail "-T 2 and -T1 artifacts differ"
for t in 1 2; do
	expect_exit 0 "$DMAR" unpack -q "-T$t" -o big.out big.T1.dmar
	expect_same big big.out
	rm -f big.out
done
rm -f big.T*.dmar

# An output file is written at block offsets by several threads (pack: the
# workers; unpack: an I/O thread); a stream in order by one.  Same bytes:
# compressible and random blocks of different sizes, so every offset
# depends on all the blocks before it.
mktext mixed 9000000 7
head -c $((9 << 20)) big >>mixed
for t in 1 2 3; do
	rm -f mixed.dmar mixed.out
	expect_exit 0 "$DMAR" pack -q "-T$t" -o mixed.dmar mixed
	"$DMAR" pack -q "-T$t" -c mixed >mixed.stream.dmar || fail "pack -T$t -c mixed: status $?"
	check "pack -T$t: -o and -c write the same artifact"
	cmp -s mixed.dmar mixed.stream.dmar || fail "pack -T$t: -o and -c artifacts differ"
	expect_exit 0 "$DMAR" unpack -q "-T$t" -o mixed.out mixed.dmar
	expect_same mixed mixed.out
	"$DMAR" unpack -q "-T$t" -c mixed.dmar >mixed.stream || fail "unpack -T$t -c: status $?"
	expect_same mixed mixed.stream
	rm -f mixed.stream.dmar mixed.stream
done
rm -f mixed mixed.dmar mixed.out

# --- compressible data ---------------------------------------------------------
if [ -d /usr/include/linux ] && tar -cf text -C /usr/include linux 2>/dev/null; then
	say "compressible input: tar of /usr/include/linux ($(fsize text) bytes)"
else
	mktext text 6000000
	say "compressible input: generated text ($(fsize text) bytes)"
fi
tsize=$(fsize text)
rt text
check "compressible data shrinks to under half ($rt_size of $tsize)"
[ "$rt_size" -lt $((tsize / 2)) ] || fail "artifact is $rt_size bytes for $tsize"
rt text -0
check "-0 stores: the artifact is at least the input ($rt_size >= $tsize)"
[ "$rt_size" -ge "$tsize" ] || fail "-0 artifact is smaller than its input"
rt text --store
check "--store is -0"
[ "$rt_size" -ge "$tsize" ] || fail "--store artifact is smaller than its input"
rt text -T2 -1

head -c 600000 text >small
rt small -0
s0=$rt_size
rt small -1
s1=$rt_size
rt small -3
s3=$rt_size
rt small -19
s19=$rt_size
rt small -L 19
sL19=$rt_size
say "sizes of a 600000-byte sample: -0 $s0, -1 $s1, -3 $s3, -19 $s19"
check "-1 < -0 and -19 <= -1"
[ "$s1" -lt "$s0" ] || fail "-1 ($s1) not smaller than -0 ($s0)"
[ "$s19" -le "$s1" ] || fail "-19 ($s19) larger than -1 ($s1)"
check "-L 19 is the same as -19"
[ "$sL19" = "$s19" ] || fail "-L 19 gave $sL19 bytes, -19 gave $s19"
expect_exit 0 "$DMAR" pack -q -5 -o a5.dmar small
expect_exit 0 "$DMAR" pack -q -L 5 -o b5.dmar small
check "-5 and -L 5 give identical artifacts"
cmp -s a5.dmar b5.dmar || fail "-5 and -L 5 artifacts differ"
rm -f a5.dmar b5.dmar

# --- pipes -----------------------------------------------------------------
check "pack -c <f | unpack -c >g"
{ "$DMAR" pack -q -c <text || echo "$?" >rc1; } |
	{ "$DMAR" unpack -q -c >piped 2>"$T/.stderr" || echo "$?" >rc2; }
[ ! -f rc2 ] || fail "'dmar unpack -c' (no FILE: stdin) in a pipe exited $(cat rc2)"
[ ! -f rc1 ] || fail "'dmar pack -c' in a pipe exited $(cat rc1)"
expect_same text piped
rm -f piped

expect_exit 0 "$DMAR" pack -q <small
cp "$(stdout_file)" s1.dmar
expect_magic s1.dmar DMAR
expect_exit 0 "$DMAR" pack -q - <small
cp "$(stdout_file)" s2.dmar
check "'pack <f' and 'pack - <f' write the same artifact to stdout"
cmp -s s1.dmar s2.dmar || fail "'pack' and 'pack -' artifacts differ"
expect_exit 0 "$DMAR" unpack -q -c <s1.dmar
expect_same small "$(stdout_file)"
expect_exit 0 "$DMAR" unpack -q -c - <s1.dmar
expect_same small "$(stdout_file)"
expect_exit 0 "$DMAR" unpack -q -o s.out - <s1.dmar
expect_same small s.out
expect_exit 0 "$DMAR" pack -q -o s3.dmar <small
expect_exit 0 "$DMAR" unpack -q -c s3.dmar
expect_same small "$(stdout_file)"
expect_exit 0 "$DMAR" pack -q -c small
cp "$(stdout_file)" s4.dmar
expect_exit 0 "$DMAR" unpack -q -o s4.out s4.dmar
expect_same small s4.out
rm -f s1.dmar s2.dmar s3.dmar s4.dmar s.out s4.out

# --- default names ------------------------------------------------------------
mkdir sub
cp small sub/f
expect_exit 0 "$DMAR" pack -q sub/f
expect_file sub/f.dmar
expect_no_file f.dmar
mv sub/f sub/f.orig
expect_exit 0 "$DMAR" unpack -q sub/f.dmar
expect_same sub/f.orig sub/f
check "unpack keeps its input"
[ -f sub/f.dmar ] || fail "unpack removed sub/f.dmar"
expect_dir_only sub f f.dmar f.orig
rm -rf sub

# --- mode and mtime -------------------------------------------------------------
mkrand meta 50000
chmod 640 meta
touch -d '2009-02-13 23:31:30.123456789' meta
want_mode=$(stat -c %a meta)
want_sec=$(stat -c %Y meta)
want_full=$(stat -c %y meta)
expect_exit 0 "$DMAR" pack -q meta
mv meta meta.orig
expect_exit 0 "$DMAR" unpack -q meta.dmar
expect_same meta.orig meta
check "mode restored ($want_mode)"
[ "$(stat -c %a meta)" = "$want_mode" ] || fail "mode is $(stat -c %a meta), expected $want_mode"
check "mtime restored ($want_sec)"
[ "$(stat -c %Y meta)" = "$want_sec" ] || fail "mtime is $(stat -c %Y meta), expected $want_sec"
check "mtime nanoseconds restored ($want_full)"
[ "$(stat -c %y meta)" = "$want_full" ] || fail "mtime is $(stat -c %y meta), expected $want_full"
expect_exit 0 "$DMAR" unpack -q -o meta.o meta.dmar
check "mode and mtime restored with -o too"
[ "$(stat -c %a meta.o)" = "$want_mode" ] || fail "-o: mode is $(stat -c %a meta.o)"
[ "$(stat -c %Y meta.o)" = "$want_sec" ] || fail "-o: mtime is $(stat -c %Y meta.o)"
chmod 755 meta.orig
touch -d '@1000000000' meta.orig
expect_exit 0 "$DMAR" pack -q -f -o meta.dmar meta.orig
expect_exit 0 "$DMAR" unpack -q -f -o meta.x meta.dmar
check "mode 755 and mtime 1000000000 restored"
[ "$(stat -c %a meta.x)" = 755 ] || fail "mode is $(stat -c %a meta.x), expected 755"
[ "$(stat -c %Y meta.x)" = 1000000000 ] || fail "mtime is $(stat -c %Y meta.x)"
rm -f meta meta.orig meta.o meta.x meta.dmar

# --- chunk sizes ------------------------------------------------------------------
mkrand r1m $((1 << 20))
rt r1m --chunk-size 4k
rt r1m --chunk-size=16k
rt r1m --chunk-min 1k --chunk-size 4k --chunk-max 16k
rt r1m --chunk-min 256 --chunk-size 256 --chunk-max 256
expect_exit 0 "$DMAR" info rt.dmar
expect_info chunks 4096
rt r1m --chunk-min 64k --chunk-size 64k --chunk-max 64k
expect_exit 0 "$DMAR" info rt.dmar
expect_info chunks 16
rt r1m --chunk-min 1K --chunk-size 8K --chunk-max 1M
rt big --chunk-min 1m --chunk-size 2m --chunk-max 4m
expect_exit 0 "$DMAR" info rt.dmar
chunks=$(info_value chunks)
check "20 MiB in 1m..4m chunks: between 5 and 20 chunks ($chunks)"
[ -n "$chunks" ] && [ "$chunks" -ge 5 ] && [ "$chunks" -le 20 ] || fail "$chunks chunks"
rt text --chunk-min 256 --chunk-size 1k --chunk-max 4k

for bad in "--chunk-size 3k" "--chunk-size 128" "--chunk-size 8m" "--chunk-max 8m" \
	"--chunk-min 128" "--chunk-size 0" "--chunk-size abc" "--chunk-size 4q" \
	"--chunk-size -4k" "--chunk-size 4kk" "--chunk-size 5000" \
	"--chunk-min 64k --chunk-size 32k --chunk-max 128k" \
	"--chunk-min 8k --chunk-size 64k --chunk-max 32k" \
	"--chunk-min 8k --chunk-size 8k --chunk-max 4k"; do
	# shellcheck disable=SC2086
	expect_exit 2 "$DMAR" pack $bad -o bad.dmar small
	expect_stderr_nonempty
	expect_no_file bad.dmar
done
expect_exit 2 "$DMAR" pack --chunk-size "" -o bad.dmar small
expect_no_file bad.dmar

# --- thin artifacts: --ref -----------------------------------------------------
# Seeded data, so the sizes checked below are the same on every run.
mkprng base $((32 << 20)) 1
cp base new
i=0
while [ $i -lt 8 ]; do
	mkprng patch 65536 $((100 + i))
	# 64 KiB blocks 16, 80, 144, ...: scattered over the 32 MiB (512 blocks).
	dd if=patch of=new bs=65536 seek=$((16 + i * 64)) count=1 conv=notrunc 2>/dev/null
	i=$((i + 1))
done
check "new differs from base"
! cmp -s base new || fail "the rewrites did not change new"
expect_exit 0 "$DMAR" pack -q --ref base new
thin=$(fsize new.dmar)
say "thin artifact: $thin bytes for 8 x 64 KiB of changes in 32 MiB"
# Each 64 KiB rewrite also costs the chunks it straddles: with 32k-average
# chunks (~38 KiB in practice) ~160 KiB per rewrite, ~1.3 MiB in all (1.0 to
# 1.6 MiB over random data).  4 x the rewritten bytes is the bound.
check "thin artifact is under 4 x 512 KiB ($thin)"
[ "$thin" -lt $((4 * 512 * 1024)) ] || fail "thin artifact is $thin bytes"
expect_exit 0 "$DMAR" pack -q -o full.dmar new
check "thin artifact is under 1/16 of the full one ($thin vs $(fsize full.dmar))"
[ $((thin * 16)) -lt "$(fsize full.dmar)" ] || fail "thin $thin, full $(fsize full.dmar)"
rm -f full.dmar
expect_exit 0 "$DMAR" info new.dmar
expect_info "logical size" $((32 << 20))
absent=$(info_value "absent chunks")
absent_bytes=$(sed -n 's/^absent chunks: *[0-9]* *(\([0-9]*\).*/\1/p' "$(stdout_file)")
check "info: absent chunks > 0 ($absent) covering most of the file ($absent_bytes bytes)"
[ -n "$absent" ] && [ "$absent" -gt 0 ] || fail "absent chunks: '$absent'"
[ -n "$absent_bytes" ] && [ "$absent_bytes" -ge $(((32 << 20) - 4 * 512 * 1024)) ] ||
	fail "absent bytes: '$absent_bytes'"
lines=$(wc -l <"$(stdout_file)")
expect_exit 0 "$DMAR" info -v new.dmar
vlines=$(wc -l <"$(stdout_file)")
check "info -v lists each absent chunk ($vlines lines >= $lines + $absent)"
[ "$vlines" -ge $((lines + absent)) ] || fail "info -v printed $vlines lines"

expect_exit 0 "$DMAR" unpack -q --ref base -o out new.dmar
expect_same new out
rm -f out
mkdir fails
cp new.dmar fails/t.dmar
expect_exit 0 "$DMAR" unpack -q -t --ref base fails/t.dmar
expect_dir_only fails t.dmar
rm fails/t.dmar
# Other reference data, even data holding every chunk, is refused up
# front: a thin artifact names the bases it was made against.
expect_exit 1 "$DMAR" unpack -q --ref new -o fails/out new.dmar
expect_stderr "same order"
expect_dir_only fails

expect_exit 1 "$DMAR" unpack -o fails/out new.dmar
expect_stderr "reference" "(says reference data is needed)"
expect_error_prefix unpack
expect_dir_only fails

mkprng wrong $((32 << 20)) 2
expect_exit 1 "$DMAR" unpack --ref wrong -o fails/out new.dmar
expect_stderr "not the one used at packing" "(names the wrong reference file)"
expect_stderr "reference file 1" "(with its position)"
expect_dir_only fails
rm -f wrong

# A base that changed after packing is noticed, not used.
cp base base2
dd if=patch of=base2 bs=65536 seek=300 count=1 conv=notrunc 2>/dev/null
expect_exit 1 "$DMAR" unpack --ref base2 -o fails/out new.dmar
expect_stderr_nonempty
expect_dir_only fails
rm -f base2

# Packing against itself leaves (almost) everything out.
expect_exit 0 "$DMAR" pack -q --ref new -o self.dmar new
check "new packed against itself is under 64 KiB ($(fsize self.dmar))"
[ "$(fsize self.dmar)" -lt 65536 ] || fail "self-referenced artifact is $(fsize self.dmar) bytes"
expect_exit 0 "$DMAR" unpack -q --ref new -o out self.dmar
expect_same new out
rm -f out self.dmar new.dmar

# --ref is repeatable: two bases, a file made of both.
head -c $((4 << 20)) base >ra
tail -c $((4 << 20)) base >rb
cat ra rb >rab
expect_exit 0 "$DMAR" pack -q --ref ra --ref rb -o rab.dmar rab
check "two refs: artifact under 512 KiB ($(fsize rab.dmar))"
[ "$(fsize rab.dmar)" -lt 524288 ] || fail "artifact with two refs is $(fsize rab.dmar) bytes"
expect_exit 0 "$DMAR" unpack -q --ref ra --ref rb -o out rab.dmar
expect_same rab out
rm -f out
expect_exit 1 "$DMAR" unpack --ref ra -o fails/out rab.dmar
expect_stderr "only 1 given"
expect_dir_only fails
expect_exit 1 "$DMAR" pack --ref no-such-base -o x.dmar rab
expect_stderr "no-such-base"
expect_no_file x.dmar
rm -f ra rb rab rab.dmar base new patch

# --- killed half-way: nothing left behind ----------------------------------
# dmar reads from a FIFO whose writer stalls after part of the data, so it
# is busy with an open temp output when the signal comes.  The temp file
# appearing is the ready signal.
mkfifo fifo
mkprng part $((3 << 20)) 3
expect_exit 0 "$DMAR" pack -q -o part.dmar part
head -c $((2 << 20)) part.dmar >part.head
for sig in TERM HUP; do
	for how in "pack -q -o fails/out.dmar -" "unpack -q -o fails/out -"; do
		case $how in
		pack*) feed=part ;;        # raw bytes; the artifact is never finished
		*) feed=part.head ;;       # the first 2 MiB of an artifact
		esac
		(
			cat "$feed"
			exec sleep 60
		) >fifo &
		writer=$!
		CLEANUP_PIDS="$CLEANUP_PIDS $writer"
		# shellcheck disable=SC2086
		"$DMAR" $how <fifo &
		victim=$!
		CLEANUP_PIDS="$CLEANUP_PIDS $victim"
		n=0
		while [ -z "$(ls -A fails)" ] && kill -0 "$victim" 2>/dev/null; do
			n=$((n + 1))
			[ $n -lt 200 ] || fail "'dmar $how' made no output file within 20 s"
			sleep 0.1
		done
		check "'dmar $how' killed by SIG$sig leaves nothing in fails/"
		kill -0 "$victim" 2>/dev/null || fail "'dmar $how' ended before the signal"
		kill -"$sig" "$victim"
		vrc=0
		wait "$victim" || vrc=$?
		kill "$writer" 2>/dev/null || :
		wait "$writer" 2>/dev/null || :
		[ "$vrc" != 0 ] || fail "'dmar $how' exited 0 after SIG$sig"
		left=$(ls -A fails | tr '\n' ' ')
		[ -z "$left" ] || fail "'dmar $how' killed by SIG$sig left: $left"
	done
done
rm -f fifo part part.dmar part.head

# --- byte pack: -D ------------------------------------------------------------------
mkjson train 400 11
mkjson other 200 99
printf 'unrelated sample text number %d\n' $(seq 1 3000) >other/z.txt
mkjson test 1 5
sample=test/rec0000.json
expect_exit 0 "$DMAR" mine -q --maxdict 64k -o p.dmpk train
expect_magic p.dmpk DMPK
expect_exit 0 "$DMAR" mine -q --maxdict 64k -o q.dmpk other
expect_magic q.dmpk DMPK
check "the two packs differ"
! cmp -s p.dmpk q.dmpk || fail "packs mined from different data are identical"

expect_exit 0 "$DMAR" pack -q -D p.dmpk -o s.dmar "$sample"
expect_exit 0 "$DMAR" pack -q -o nod.dmar "$sample"
check "the byte pack makes a small JSON file smaller ($(fsize s.dmar) < $(fsize nod.dmar))"
[ "$(fsize s.dmar)" -lt "$(fsize nod.dmar)" ] || fail "-D did not help"
expect_exit 0 "$DMAR" unpack -q -D p.dmpk -o out s.dmar
expect_same "$sample" out
rm -f out
expect_exit 1 "$DMAR" unpack -o fails/out s.dmar
expect_stderr "byte pack" "(says a byte pack is needed)"
expect_stderr "-D" "(tells how to pass it)"
expect_dir_only fails
expect_exit 1 "$DMAR" unpack -D q.dmpk -o fails/out s.dmar
expect_stderr "byte pack" "(says it is the wrong byte pack)"
expect_dir_only fails
expect_exit 1 "$DMAR" unpack -D no-such.dmpk -o fails/out s.dmar
expect_stderr "no-such\.dmpk"
expect_dir_only fails
expect_exit 1 "$DMAR" unpack -D "$sample" -o fails/out s.dmar
expect_stderr_nonempty "(a pack file that is not a pack)"
expect_dir_only fails
# A bigger file through the byte pack, on several threads.
cat train/*.json >alljson
expect_exit 0 "$DMAR" pack -q -D p.dmpk -T2 --chunk-size 1k -o all.dmar alljson
expect_exit 0 "$DMAR" unpack -q -D p.dmpk -T2 -o out all.dmar
expect_same alljson out
rm -f out
# The stored (-0) artifact needs no pack, or says so; never wrong bytes.
expect_exit 0 "$DMAR" pack -q -0 -D p.dmpk -o s0.dmar "$sample"
run "$DMAR" unpack -q -o out s0.dmar
if [ "$rc" = 0 ]; then
	expect_same "$sample" out
else
	check "-0 -D artifact unpacked without -D: fails cleanly"
	[ "$rc" = 1 ] || fail "exit $rc"
	expect_no_file out
fi

say "PASS: roundtrip"
exit 0
