#!/bin/sh
# SPDX-License-Identifier: MIT
#
# corrupt.sh - damaged artifacts never unpack to wrong bytes.
#
# For small artifacts (compressed, stored, thin) every byte is flipped in
# turn (every bit of the header and end record of the first) and `dmar unpack -o out`
# must either fail with exit 1, a message, and no output or temp file left,
# or succeed with the exact original bytes.  Then truncations, a bad magic,
# an unsupported version and trailing garbage, each with its message.

. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
need python3
setup
trap cleanup EXIT
cd "$W" || exit 1

# flip.py DMAR ARTIFACT ORIGINAL [UNPACK-OPTION...]: the bit-flip sweep.
cat >flip.py <<'EOF'
import os, subprocess, sys, tempfile, concurrent.futures as cf

dmar, art_path, orig_path = sys.argv[1:4]
extra = sys.argv[4:]
allbits = os.environ.get("FLIP_ALLBITS") == "1"
art = open(art_path, "rb").read()
orig = open(orig_path, "rb").read()
orig_mode = os.stat(orig_path).st_mode & 0o7777
n = len(art)
HDR, END = 40, 32
cases = []
for off in range(n):
    edge = off < HDR or off >= n - END
    bits = range(8) if allbits and edge else [off % 8]
    cases += [(off, b) for b in bits]
print(f"flip: {art_path}: {n} bytes, {len(cases)} single-bit flips")

def worker(part):
    bad, accepted, rejected = [], 0, 0
    work = tempfile.mkdtemp(dir=".")
    src = os.path.join(work, "c.dmar")
    out = os.path.join(work, "out")
    for off, bit in part:
        data = bytearray(art)
        data[off] ^= 1 << bit
        with open(src, "wb") as f:
            f.write(data)
        what = f"offset {off} bit {bit}"
        try:
            r = subprocess.run([dmar, "unpack", *extra, "-o", out, src],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=30)
        except subprocess.TimeoutExpired:
            bad.append(f"{what}: unpack hung (> 30 s)")
            continue
        names = sorted(os.listdir(work))
        err = r.stderr.decode(errors="replace").strip()
        if r.returncode == 0:
            accepted += 1
            if names != ["c.dmar", "out"]:
                bad.append(f"{what}: exit 0 but the directory holds {names}")
            elif open(out, "rb").read() != orig:
                bad.append(f"{what}: exit 0 with WRONG BYTES")
            elif os.stat(out).st_mode & 0o7777 != orig_mode:
                bad.append(f"{what}: exit 0 with mode {os.stat(out).st_mode & 0o7777:o}")
        else:
            rejected += 1
            if r.returncode != 1:
                bad.append(f"{what}: exit {r.returncode} (expected 1): {err[:200]}")
            if names != ["c.dmar"]:
                bad.append(f"{what}: failed but left {names}")
            if not err.startswith("dmar: unpack: "):
                bad.append(f"{what}: failed without a 'dmar: unpack:' message: {err[:200]!r}")
        for name in os.listdir(work):
            if name != "c.dmar":
                p = os.path.join(work, name)
                os.chmod(p, 0o600)
                os.unlink(p)
    os.unlink(src)
    os.rmdir(work)
    return bad, accepted, rejected

jobs = max(2, os.cpu_count() or 1)
parts = [cases[i::jobs] for i in range(jobs)]
bad, acc, rej = [], 0, 0
with cf.ThreadPoolExecutor(jobs) as ex:
    for b, a, r in ex.map(worker, parts):
        bad += b; acc += a; rej += r
print(f"flip: {art_path}: {rej} rejected, {acc} accepted (exit 0), {len(bad)} problems")
for line in sorted(bad)[:40]:
    print("  " + line)
sys.exit(1 if bad else 0)
EOF

# Inputs are seeded, so a failure can be replayed (KEEP_TMP=1 keeps them).
# Compressed: 16 KiB of text in ~1 KiB chunks.
mktext text 16384 3
expect_exit 0 "$DMAR" pack -q --chunk-min 256 --chunk-size 1k --chunk-max 4k -o text.dmar text
expect_exit 0 "$DMAR" info text.dmar
say "text.dmar: $(fsize text.dmar) bytes, $(info_value chunks) chunks"
chunks=$(info_value chunks)
check "text.dmar has several chunks ($chunks)"
[ -n "$chunks" ] && [ "$chunks" -ge 4 ] || fail "text.dmar has '$chunks' chunks"
check "text.dmar unpacks cleanly before corruption"
expect_exit 0 "$DMAR" unpack -o text.out text.dmar
expect_same text text.out
rm -f text.out
FLIP_ALLBITS=1 python3 flip.py "$DMAR" text.dmar text || fail "bit-flip sweep of text.dmar found problems (above)"

# Stored (-0): 2 KiB of random bytes in 256..1k chunks.
mkprng raw 2048 7
expect_exit 0 "$DMAR" pack -q -0 --chunk-min 256 --chunk-size 512 --chunk-max 1k -o raw.dmar raw
expect_exit 0 "$DMAR" info raw.dmar
say "raw.dmar: $(fsize raw.dmar) bytes, $(info_value chunks) chunks"
python3 flip.py "$DMAR" raw.dmar raw || fail "bit-flip sweep of raw.dmar found problems (above)"

# Thin: absent chunks listed by id, bytes from --ref.
mkprng base 8192 8
cp base new
mkprng patch 256 9
dd if=patch of=new bs=256 seek=12 count=1 conv=notrunc 2>/dev/null
expect_exit 0 "$DMAR" pack -q --ref base --chunk-min 256 --chunk-size 512 --chunk-max 2k -o thin.dmar new
expect_exit 0 "$DMAR" info thin.dmar
absent=$(info_value "absent chunks")
say "thin.dmar: $(fsize thin.dmar) bytes, $(info_value chunks) chunks, $absent absent"
check "thin.dmar has absent chunks ($absent)"
[ -n "$absent" ] && [ "$absent" -gt 0 ] || fail "thin.dmar has no absent chunks"
expect_exit 0 "$DMAR" unpack --ref base -o thin.out thin.dmar
expect_same new thin.out
rm -f thin.out
python3 flip.py "$DMAR" thin.dmar new --ref base || fail "bit-flip sweep of thin.dmar found problems (above)"

# --- crafted damage -----------------------------------------------------------
mkdir w

# bad ART ERE WHAT: unpack of ART fails with exit 1, stderr matching ERE,
# and leaves nothing in w/; -t and stdin fail the same way.
bad() {
	expect_exit 1 "$DMAR" unpack -o w/out "$1"
	expect_stderr "$2" "($3)"
	expect_error_prefix unpack
	expect_dir_only w
	expect_exit 1 "$DMAR" unpack -t "$1"
	expect_stderr "$2" "($3, -t)"
	expect_exit 1 "$DMAR" unpack -c - <"$1"
	expect_stderr "$2" "($3, stdin)"
	expect_exit 1 "$DMAR" info "$1"
	expect_stderr_nonempty "(info of $3)"
}

len=$(fsize text.dmar)
for cut in 0 1 4 39 40 41 59 60 61 $((len / 2)) $((len - 33)) $((len - 32)) $((len - 31)) $((len - 1)); do
	head -c "$cut" text.dmar >"cut$cut.dmar"
	bad "cut$cut.dmar" 'truncat' "truncated at $cut of $len bytes"
	rm -f "cut$cut.dmar"
done

# A header whose check is recomputed, so only the field itself is wrong.
cat >patch.py <<'EOF'
import hashlib, sys
src, dst, off, val = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4], 0)
b = bytearray(open(src, "rb").read())
b[off] = val
b[36:40] = hashlib.sha256(bytes(b[:36])).digest()[:4]
open(dst, "wb").write(b)
EOF

python3 patch.py text.dmar v9.dmar 4 9
bad v9.dmar 'version' "unsupported version 9"
expect_stderr 'version 9|9' "(names the version found)"
python3 patch.py text.dmar v0.dmar 4 0
bad v0.dmar 'version' "unsupported version 0"
python3 patch.py text.dmar v255.dmar 4 255
bad v255.dmar 'version' "unsupported version 255"
# The version byte changed without fixing the check: still rejected.
python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[4] = 2; open(sys.argv[2], "wb").write(b)' \
	text.dmar v2raw.dmar
bad v2raw.dmar 'version|check|corrupt|mismatch' "version byte 2, header check stale"

python3 patch.py text.dmar flag.dmar 5 0x84
bad flag.dmar 'flag|unsupported|unknown' "unknown header flag 0x80"

python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[3] = ord("X"); open(sys.argv[2], "wb").write(b)' \
	text.dmar magic.dmar
bad magic.dmar 'not a dmar artifact' "bad magic DMAX"
printf 'this is just text, not an artifact at all, long enough to hold a header.\n' >plain.dmar
bad plain.dmar 'not a dmar artifact' "a text file"
head -c 1000 /dev/zero >zeros.dmar
bad zeros.dmar 'not a dmar artifact' "zeros"

# Anything after the end record is refused.
cp text.dmar trail.dmar
printf 'x' >>trail.dmar
bad trail.dmar 'trailing|after the end|garbage|extra' "one byte after the end record"
cat text.dmar text.dmar >twice.dmar
bad twice.dmar 'trailing|after the end|garbage|extra' "two artifacts back to back"

# -f over an existing file: a failed unpack leaves the old file as it was.
printf 'keep me\n' >w/keep
before=$(digest w/keep)
head -c 41 text.dmar >cut41.dmar
expect_exit 1 "$DMAR" unpack -f -o w/keep cut41.dmar
check "a failed 'unpack -f' leaves the existing output untouched"
[ "$(digest w/keep)" = "$before" ] || fail "failed unpack -f changed w/keep"
expect_dir_only w keep

say "PASS: corrupt"
exit 0
