#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Two nodes in their own network namespaces, joined by veth: a plain `cp`
# into MOUNTPOINT/@b/ ships a file and b reconstructs it; only the chunks b
# lacks cross the wire (veth byte counters); ls/stat/cat/rm/mkdir work
# under @b/; a view= mount ships the same way; a node with encode=zstd
# stores what it receives compressed.
. "$(dirname "$0")/lib.sh"

net_setup
net_ns a
net_ns b
net_ns c
net_peers_file
net_token_file
net_node_start a "" size=1g
A=$NODE_MNT
net_node_start b "" size=1g
B=$NODE_MNT
# c compresses (encode=zstd); b keeps the default, which the checks on
# wire bytes and requests above rely on.
net_node_start c "" size=256m,encode=zstd
C=$NODE_MNT
S=$T/src
mkdir -p "$S"

# wire BEFORE: bytes that crossed a's veth since BEFORE was taken.
wire_since() { echo $(( $(net_bytes a) - $1 )); }

check "the root lists @a (itself) and @b"
ls -a "$A" >"$T/ls" || fail "ls $A"
grep -qx '@a' "$T/ls" || fail "no @a in the root of a: $(tr '\n' ' ' <"$T/ls")"
grep -qx '@b' "$T/ls" || fail "no @b in the root of a: $(tr '\n' ' ' <"$T/ls")"
[ -d "$A/@b" ] || fail "$A/@b is not a directory"

check "cp from another filesystem into @b/ ships it; b has the same bytes"
mkprng "$S/w1.bin" $((64 * MiB)) 1
d1=$(digest "$S/w1.bin")
w0=$(net_bytes a)
cp "$S/w1.bin" "$A/@b/" || fail "cp into @b/ failed"
sent=$(wire_since "$w0")
[ -f "$B/w1.bin" ] || fail "w1.bin not at b after cp"
[ "$(digest "$B/w1.bin")" = "$d1" ] || fail "b's w1.bin differs from the source"
[ "$(fsize "$A/@b/w1.bin")" = $((64 * MiB)) ] || fail "stat through @b/ shows $(fsize "$A/@b/w1.bin") bytes"
# Random data does not compress: the wire carries about the file once.
[ "$sent" -ge $((64 * MiB)) ] || fail "only $sent bytes crossed for 64 MiB of new random data"
[ "$sent" -le $((70 * MiB)) ] || fail "$sent bytes crossed for 64 MiB: more than 1.09x the file"
say "  64 MiB new: $(mib "$sent") on the wire"

check "a second copy under another name sends no chunk (a few KiB of recipe and answers)"
w0=$(net_bytes a)
ls "$A/@b/" >/dev/null # @b/'s own entry fresh: not counted below
k0=$(net_node_info b commits.content)
q0=$(net_node_info b server.requests)
cp "$S/w1.bin" "$A/@b/w1-again.bin" || fail "second cp failed"
sent=$(wire_since "$w0")
q1=$(net_node_info b server.requests)
k1=$(net_node_info b commits.content)
# One lookup of the new name (cp's stat; the kernel's own lookup before
# the O_CREAT|O_EXCL create is answered from a's record of b's "absent")
# and the commit, which b accepts at once (commit first); the second GET
# /v1/node is the last one counted.  The node adds no probe of its own.
req=$((q1 - q0 - 1))
[ "$req" -le 2 ] || fail "b served $req requests for a copy of a file it holds (expected <= 2)"
say "  copy under another name: $req requests at b"
[ "$(digest "$B/w1-again.bin")" = "$d1" ] || fail "w1-again.bin differs"
[ "$sent" -lt $((1 * MiB)) ] || fail "$(mib "$sent") crossed for a file b already holds"
say "  64 MiB already at b: $sent bytes on the wire"
# b made it from the content it holds (X-Dmar-Content), not from the
# recipe's 2048 entries; the two files share one extent table there, and
# a change to one at b leaves the other as it was.
[ $((k1 - k0)) = 1 ] || fail "b made $((k1 - k0)) files from content it holds (expected 1: the commit's X-Dmar-Content)"
printf 'changed' | dd of="$B/w1-again.bin" bs=1 seek=1000 conv=notrunc status=none || fail "write at b"
[ "$(digest "$B/w1.bin")" = "$d1" ] || fail "a write to w1-again.bin at b changed w1.bin"
[ "$(digest "$B/w1-again.bin")" != "$d1" ] || fail "the write to w1-again.bin at b did not show"

check "cp within the mount (copy_file_range by reference) into @b/ sends only what b lacks"
mkprng "$S/w2.bin" $((32 * MiB)) 2
cp "$S/w2.bin" "$A/w2.bin" || fail "cp into a"
wait_state "$A/w2.bin" encoded
w0=$(net_bytes a)
cp "$A/w2.bin" "$A/@b/w2.bin" || fail "cp a/w2.bin a/@b/ failed"
sent=$(wire_since "$w0")
[ "$(digest "$B/w2.bin")" = "$(digest "$S/w2.bin")" ] || fail "b's w2.bin differs"
[ "$sent" -ge $((32 * MiB)) ] && [ "$sent" -le $((36 * MiB)) ] ||
	fail "$(mib "$sent") crossed for 32 MiB of new data"
# The copy shares a's w2.bin's extent table: a second copy under another
# name is made at b from content (one commit, no chunk), and a change to
# a's w2.bin after that leaves what a shows of @b/ as b has it.
cp "$A/w2.bin" "$A/w2c.bin" || fail "cp a/w2.bin a/w2c.bin"
k0=$(net_node_info b commits.content)
w0=$(net_bytes a)
cp "$A/w2c.bin" "$A/@b/w2-again.bin" || fail "cp of a/w2c.bin into @b/"
sent=$(wire_since "$w0")
k1=$(net_node_info b commits.content)
[ $((k1 - k0)) = 1 ] || fail "b made $((k1 - k0)) files from content for a copy of a shared file (expected 1)"
# a knew the content id (w2.bin was shipped): the commit carried the
# recipe's header alone, not its 1024 entries
[ "$sent" -lt 65536 ] || fail "$sent bytes crossed for a copy whose content b holds (a content-only commit)"
say "  copy of a shipped file: $sent bytes on the wire"
printf 'changed' | dd of="$A/w2c.bin" bs=1 seek=5000 conv=notrunc status=none || fail "write to a/w2c.bin"
[ "$(digest "$A/@b/w2-again.bin")" = "$(digest "$S/w2.bin")" ] || fail "a write to a/w2c.bin changed @b/w2-again.bin"
[ "$(digest "$A/w2.bin")" = "$(digest "$S/w2.bin")" ] || fail "a write to a/w2c.bin changed a/w2.bin"
rm "$A/w2c.bin"
[ "$(digest "$B/w2-again.bin")" = "$(digest "$S/w2.bin")" ] || fail "b's w2-again.bin differs"

check "a new version with 16 scattered 64 KiB regions rewritten sends about those regions"
cp "$S/w1.bin" "$S/w1v2.bin"
i=0
while [ $i -lt 16 ]; do
	dd if=/dev/urandom of="$S/w1v2.bin" bs=65536 count=1 seek=$((i * 60 + 7)) conv=notrunc status=none
	i=$((i + 1))
done
w0=$(net_bytes a)
cp "$S/w1v2.bin" "$A/@b/w1v2.bin" || fail "cp v2 failed"
sent=$(wire_since "$w0")
[ "$(digest "$B/w1v2.bin")" = "$(digest "$S/w1v2.bin")" ] || fail "b's w1v2.bin differs"
[ "$sent" -le $((3 * MiB)) ] || fail "$(mib "$sent") crossed for 1 MiB rewritten (limit 3 MiB)"
say "  1 MiB rewritten in 64 MiB: $(mib "$sent") on the wire"
# b's kernel holds w1v2.bin's pages now (the digest above read them); a
# commit over it must show the new bytes at b at once, not the cached ones
cp "$S/w1.bin" "$A/@b/w1v2.bin" || fail "cp over a file b has cached"
[ "$(digest "$B/w1v2.bin")" = "$d1" ] || fail "b shows the old w1v2.bin after a commit replaced it"
[ "$(fsize "$B/w1v2.bin")" = $((64 * MiB)) ] || fail "b's w1v2.bin: $(fsize "$B/w1v2.bin") bytes after the commit"

check "a new version written over a file shipped through @b/ goes as a recipe delta; a base changed at b falls back"
# a shipped w1.bin's content as @b/w1v2.bin just above: cp's O_TRUNC
# keeps that as the base, and the commit names it by content id.
j0=$(net_node_info b commits.delta)
w0=$(net_bytes a)
cp "$S/w1v2.bin" "$A/@b/w1v2.bin" || fail "cp v2 over v1 failed"
sent=$(wire_since "$w0")
j1=$(net_node_info b commits.delta)
[ "$(digest "$B/w1v2.bin")" = "$(digest "$S/w1v2.bin")" ] || fail "b's w1v2.bin differs after the delta"
[ $((j1 - j0)) = 1 ] || fail "b made $((j1 - j0)) files from a recipe delta (expected 1)"
# 1 MiB of chunks and a delta of a few KB, not 64 KB of short recipe
[ "$sent" -le $((3 * MiB)) ] || fail "$(mib "$sent") crossed for 1 MiB rewritten as a delta"
say "  new version as a delta: $(mib "$sent") on the wire"
# Changed at b, the file is no longer the base a names: b says so, and a
# sends the recipe instead; the copy is whole either way.
printf 'b-side' | dd of="$B/w1v2.bin" bs=1 seek=4096 conv=notrunc status=none || fail "write at b"
r0=$(($(net_node_info b commits.recipe) + $(net_node_info b commits.content)))
cp "$S/w1.bin" "$A/@b/w1v2.bin" || fail "cp over a base changed at b failed"
[ "$(digest "$B/w1v2.bin")" = "$d1" ] || fail "b's w1v2.bin differs after the fallback from a stale base"
[ "$(net_node_info b commits.delta)" = "$j1" ] || fail "a delta against a base b no longer holds was applied"
# b holds w1.bin's content: the recipe's commit is made from it
r1=$(($(net_node_info b commits.recipe) + $(net_node_info b commits.content)))
[ $((r1 - r0)) = 1 ] || fail "the fallback made $((r1 - r0)) files from a recipe or content (expected 1)"

check "reading @b/FILE gives b's bytes; a second read pulls nothing new"
mkprng "$S/r.bin" $((16 * MiB)) 3
cp "$S/r.bin" "$B/r.bin" || fail "cp into b"
# Made at b, not by a: a's listing of @b/ may say "absent" for up to its
# 1 s (docs/mount.md), as a negative dentry would.
sleep 1.1
w0=$(net_bytes a)
[ "$(digest_uncached "$A/@b/r.bin")" = "$(digest "$S/r.bin")" ] || fail "cat of @b/r.bin differs"
first=$(wire_since "$w0")
[ "$first" -ge $((16 * MiB)) ] || fail "the first read of 16 MiB moved only $first bytes"
w0=$(net_bytes a)
[ "$(digest_uncached "$A/@b/r.bin")" = "$(digest "$S/r.bin")" ] || fail "second read of @b/r.bin differs"
again=$(wire_since "$w0")
[ "$again" -lt $((1 * MiB)) ] || fail "the second read moved $(mib "$again"): the pulled chunks were not kept"

check "mkdir, ls, stat, rm and rmdir under @b/"
mkdir "$A/@b/d1" || fail "mkdir @b/d1"
[ -d "$B/d1" ] || fail "d1 not made at b"
cp "$S/r.bin" "$A/@b/d1/" || fail "cp into @b/d1/"
ls "$A/@b/d1" | grep -qx r.bin || fail "ls @b/d1 does not show r.bin"
[ "$(stat -c %s "$A/@b/d1/r.bin")" = $((16 * MiB)) ] || fail "stat @b/d1/r.bin"
if rmdir "$A/@b/d1" 2>"$T/err"; then fail "rmdir of a non-empty @b/d1 succeeded"; fi
grep -q 'not empty' "$T/err" || fail "rmdir of a non-empty dir: '$(cat "$T/err")'"
rm "$A/@b/d1/r.bin" || fail "rm @b/d1/r.bin"
[ ! -e "$B/d1/r.bin" ] || fail "r.bin still at b after rm"
rmdir "$A/@b/d1" || fail "rmdir @b/d1"
[ ! -e "$B/d1" ] || fail "d1 still at b after rmdir"
if cat "$A/@b/nonexistent" 2>"$T/err"; then fail "cat of a missing remote file succeeded"; fi
grep -q 'No such file' "$T/err" || fail "missing remote file: '$(cat "$T/err")'"

check "a remote directory's listing answers its lookups for the entry timeout; this host's changes show at once"
mkdir "$A/@b/ld" || fail "mkdir @b/ld"
i=0
while [ $i -lt 20 ]; do echo "$i" >"$B/ld/f$i" || fail "write b's ld/f$i"; i=$((i + 1)); done
sleep 1.2 # past RENTRY_TIMEOUT: nothing a knows of ld is fresh
q0=$(net_node_info b server.requests)
ls -l "$A/@b/ld" >"$T/ls" || fail "ls -l @b/ld"
q1=$(net_node_info b server.requests)
[ "$(grep -c ' f[0-9]*$' "$T/ls")" = 20 ] || fail "ls -l @b/ld shows $(grep -c ' f[0-9]*$' "$T/ls") of 20 files"
grep -q ' 3 .* f12$' "$T/ls" || fail "ls -l @b/ld: f12 is not 3 bytes: $(grep f12 "$T/ls")"
# ld's lookup and the opendir; its 20 lstats come from the listing
req=$((q1 - q0 - 1))
[ "$req" -le 3 ] || fail "ls -l of 20 remote files: b served $req requests (expected <= 3, not one a file)"
say "  ls -l of 20 files in @b/ld: $req requests at b"
rm "$A/@b/ld/f3" || fail "rm @b/ld/f3"
[ ! -e "$A/@b/ld/f3" ] || fail "@b/ld/f3 still there just after this host removed it"
cp "$S/r.bin" "$A/@b/ld/new.bin" || fail "cp into @b/ld/"
[ "$(fsize "$A/@b/ld/new.bin")" = $((16 * MiB)) ] || fail "@b/ld/new.bin: $(fsize "$A/@b/ld/new.bin") bytes just after cp"
mkdir "$A/@b/ld/sub" && [ -d "$A/@b/ld/sub" ] || fail "@b/ld/sub not seen just after mkdir"
# A change made at b by someone else shows within the timeout.
echo late >"$B/ld/late" || fail "write b's ld/late"
sleep 1.2
[ "$(cat "$A/@b/ld/late" 2>&1)" = late ] || fail "b's new ld/late not seen through @b/ 1.2 s later"
rm -r "$A/@b/ld" || fail "rm -r @b/ld"
[ ! -e "$B/ld" ] || fail "ld still at b after rm -r"

check "a file written with many small writes (not cp) arrives whole at close"
"$NET_PY" - "$A/@b/small.txt" <<'EOF' || fail "python writer failed"
import sys
with open(sys.argv[1], "w") as f:
    for i in range(5000):
        f.write("line %d\n" % i)
EOF
[ "$(wc -l <"$B/small.txt")" = 5000 ] || fail "b's small.txt has $(wc -l <"$B/small.txt") lines"

check "@a is this node itself: cp into @a/ shares chunks and sends none to b"
w0=$(net_bytes a)
cp "$A/w2.bin" "$A/@a/w2-self.bin" || fail "cp into @a/ failed"
[ "$(digest "$A/w2-self.bin")" = "$(digest "$S/w2.bin")" ] || fail "w2-self.bin differs"
[ "$(wire_since "$w0")" -lt 65536 ] || fail "cp into @a/ crossed the veth"

check "a second mount on a's host, view=b, shows b's files; cp between the mounts ships"
V=$T/view-b
mkdir -p "$V"
nsenter --net="$(net_ns_path a)" "$DMARFS" bview "$V" -f -o "size=256m,view=b,peers=$NET_PEERS,token=$NET_TOKEN" \
	>"$T/dmarfs.view.log" 2>&1 &
VPID=$!
CLEANUP_PIDS="${CLEANUP_PIDS:-} $VPID"
CLEANUP_MOUNTS="${CLEANUP_MOUNTS:-} $V"
n=100
until is_mounted "$V"; do
	n=$((n - 1))
	[ "$n" -gt 0 ] && kill -0 "$VPID" 2>/dev/null || fail "view mount did not come up: $(cat "$T/dmarfs.view.log")"
	sleep 0.1
done
ls "$V" | grep -qx w1.bin || fail "the view does not list b's w1.bin: $(ls "$V" | tr '\n' ' ')"
w0=$(net_bytes a)
cp "$A/w2.bin" "$V/w2-view.bin" || fail "cp from mount a into the view failed"
sent=$(wire_since "$w0")
[ "$(digest "$B/w2-view.bin")" = "$(digest "$S/w2.bin")" ] || fail "w2-view.bin at b differs"
[ "$sent" -lt $((1 * MiB)) ] || fail "$(mib "$sent") crossed for a file b holds (via the view)"
fusermount3 -u "$V" || fail "unmount the view"
wait_pid_exit "$VPID" 10 || fail "view daemon still running after unmount"

check "cp of text into @c/ (encode=zstd): c stores the uploaded chunks compressed"
# Text compresses, so a sends it as zstd batches of raw records: c must
# compress the chunks itself, as a local write on c would.
awk 'BEGIN { srand(11); for (i = 0; i < 400000; i++) printf "%08d level=%s user=u%04d took %d ms status=ok\n", i, (rand() < 0.5 ? "info" : "warn"), int(rand() * 5000), int(rand() * 900) }' |
	head -c $((16 * MiB)) >"$S/text"
u0=$(used_bytes "$C")
cp "$S/text" "$A/@c/" || fail "cp into @c/ failed"
u1=$(used_bytes "$C")
[ "$(digest_uncached "$C/text")" = "$(digest "$S/text")" ] || fail "c's text differs from the source"
logical=$(xattr "$C/text" user.dmar.logical)
stored=$(xattr "$C/text" user.dmar.stored)
say "  16 MiB of text at c: $(mib $((u1 - u0))) of arena, user.dmar.stored $stored of $logical"
[ "$logical" = $((16 * MiB)) ] || fail "c's text: user.dmar.logical $logical"
[ "$stored" -lt $((8 * MiB)) ] || fail "c's text: user.dmar.stored $stored for 16 MiB of text (stored raw?)"
[ $((u1 - u0)) -lt $((8 * MiB)) ] || fail "c's arena grew by $(mib $((u1 - u0))) for 16 MiB of text"

net_node_stop a
net_node_stop b
net_node_stop c
finish
