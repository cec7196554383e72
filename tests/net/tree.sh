#!/bin/sh
# SPDX-License-Identifier: MIT
#
# A directory tree of 5,000 small files (and directories, an empty file,
# an empty directory, symlinks, one file of 6 MiB) to another node:
#   - `cp -r` into MOUNTPOINT/@b/ arrives intact, in about one request a
#     file at b (each small file one tree commit);
#   - `dmar cp -r` arrives intact in a few tens of requests, mode and
#     mtime kept; again under another name only recipes cross the wire;
#   - `dmar cp -rn` over it refuses each file (exit 1), changes nothing;
#   - to a node whose arena is too small it fails (exit 1), and that
#     node's arena adds up with nothing of the upload left staged.
# Every arena adds up at the end.
. "$(dirname "$0")/lib.sh"

net_setup
net_ns a
net_ns b
net_ns c
net_peers_file
net_token_file
net_node_start a "" size=256m
A=$NODE_MNT
net_node_start b "" size=512m
B=$NODE_MNT
net_node_start c "" size=24m
C=$NODE_MNT
S=$T/src/tree
NFILES=5000
dmar_cp() { net_exec a "$DMAR" cp -q --peers "$NET_PEERS" --token "$NET_TOKEN" "$@"; }

check "make the source: $NFILES small files in 50 directories, links, an empty directory, 6 MiB"
"$NET_PY" - "$S" "$NFILES" <<'EOF' || fail "making the tree"
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rnd = random.Random(7)
for k in range(n):
    d = os.path.join(root, "d%02d" % (k % 50), "s%d" % (k % 3))
    os.makedirs(d, exist_ok=True)
    size = rnd.choice([0, 1, 100, 700, 3000, 9000, 20000]) if k % 7 else rnd.randrange(0, 16000)
    # text-like bytes: words of a small vocabulary, as headers and sources are
    words = [b"int", b"static", b"return", b"struct", b"#define", b"(void)", b"{", b"}", b";\n"]
    buf = b" ".join(rnd.choice(words) for _ in range(size // 4 + 1))[:size]
    with open(os.path.join(d, "f%05d.h" % k), "wb") as f:
        f.write(buf)
os.makedirs(os.path.join(root, "empty"))
open(os.path.join(root, "zero"), "wb").close()
os.symlink("d00/s0/f00000.h", os.path.join(root, "link"))
os.symlink("../nowhere", os.path.join(root, "dangling"))
with open(os.path.join(root, "big.bin"), "wb") as f:
    f.write(rnd.randbytes(6 << 20))
os.chmod(os.path.join(root, "d01", "s1", "f00001.h"), 0o600)
os.utime(os.path.join(root, "zero"), (1600000000, 1600000000))
EOF
SUM=$(digest_tree "$S")
[ "$(find "$S" -type f | wc -l)" = $((NFILES + 2)) ] || fail "the source has $(find "$S" -type f | wc -l) files"

check "cp -r into @b/: intact, about one request a file at b"
ls "$A/@b/" >/dev/null
q0=$(net_node_info b server.requests)
cp -r "$S" "$A/@b/cp" || fail "cp -r into @b/ failed"
q1=$(net_node_info b server.requests)
[ "$(digest_tree "$B/cp")" = "$SUM" ] || fail "b's copy differs from the source"
req=$((q1 - q0 - 1))
say "  cp -r of $NFILES files: $req requests at b"
# one tree commit a file and a symlink; a directory: its mkdir, the stat
# of what was made, a lookup; listings refreshed once a second
[ "$req" -le $((NFILES * 12 / 10 + 2 * 200)) ] || fail "$req requests at b for $NFILES files (cp -r)"
[ -L "$B/cp/link" ] && [ "$(readlink "$B/cp/dangling")" = "../nowhere" ] || fail "the symlinks were not made"

check "dmar cp -r: intact in few requests, mode and mtime kept"
q0=$(net_node_info b server.requests)
w0=$(net_bytes a)
dmar_cp -r "$S" b: || fail "dmar cp -r failed" # b:tree, as cp -r would name it
sent=$(( $(net_bytes a) - w0 ))
q1=$(net_node_info b server.requests)
[ "$(digest_tree "$B/tree")" = "$SUM" ] || fail "b's dmar cp -r copy differs from the source"
req=$((q1 - q0 - 1))
say "  dmar cp -r of $NFILES files: $req requests at b, $sent bytes on the wire"
[ "$req" -le 40 ] || fail "$req requests at b for $NFILES files (dmar cp -r)"
[ "$(stat -c %a "$B/tree/d01/s1/f00001.h")" = 600 ] || fail "the mode of a 0600 file was not kept"
[ "$(stat -c %Y "$B/tree/zero")" = 1600000000 ] || fail "the mtime of zero was not kept"
[ -d "$B/tree/empty" ] || fail "the empty directory is missing"

check "dmar cp -r again under another name: only recipes cross"
w0=$(net_bytes a)
dmar_cp -r "$S" b:again || fail "dmar cp -r again failed"
sent=$(( $(net_bytes a) - w0 ))
[ "$(digest_tree "$B/again")" = "$SUM" ] || fail "b's second copy differs"
say "  again: $sent bytes on the wire"
[ "$sent" -lt $((2 * MiB)) ] || fail "$(mib "$sent") crossed for a tree b holds"

check "dmar cp -rn over the copy: every file refused, nothing changed"
echo "changed" >"$T/zero"
cp "$T/zero" "$S/zero"
if dmar_cp -r -n "$S" b: 2>"$T/n.err"; then fail "dmar cp -rn over an existing tree succeeded"; fi
grep -q "already exists (-n)" "$T/n.err" || fail "no 'already exists' message: $(head -3 "$T/n.err")"
[ "$(fsize "$B/tree/zero")" = 0 ] || fail "-n replaced zero"
: >"$S/zero"

check "dmar cp -r to a node without room: exit 1, its arena adds up, nothing staged"
if dmar_cp -r "$S" c:full 2>"$T/c.err"; then fail "dmar cp -r into a 24 MiB arena succeeded"; fi
grep -q "ENOSPC\|arena full\|No space" "$T/c.err" || fail "no ENOSPC in: $(head -3 "$T/c.err")"
check_arena "$C" "c's arena after the failed tree copy"
st=$(net_node_info c store.staged)
[ "$st" = 0 ] || fail "c holds $st staged chunks after the failed tree copy"

check "every arena adds up"
check_arena "$A" "a's arena"
check_arena "$B" "b's arena"
finish
