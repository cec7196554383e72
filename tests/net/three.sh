#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Three nodes a, b, c on one bridge:
#  - cp into a/@b/ ships a file to b;
#  - POST /v1/transfers on b ships it on to c (b to c directly, a not in
#    the path): c's copy has the source's digest, the answer counts
#    logical_bytes and wire_bytes (about the file once), and `ls a/@c/`
#    shows it; the same transfer again under another name sends no chunk;
#  - a's own copy of the file sent from a to c sends almost nothing (c has
#    every chunk from b), and reading c's copy through a/@c/ pulls nothing
#    (a holds every chunk);
#  - the digests at the three ends are the source's.
. "$(dirname "$0")/lib.sh"

net_setup
net_ns a
net_ns b
net_ns c
net_peers_file
net_token_file
net_node_start a "" size=256m
A=$NODE_MNT
net_node_start b "" size=256m
B=$NODE_MNT
net_node_start c "" size=256m
C=$NODE_MNT
S=$T/src
mkdir -p "$S"

check "every node lists @a, @b and @c"
for n in a b c; do
	eval "m=\$$(echo "$n" | tr a-c A-C)"
	for p in a b c; do
		[ -d "$m/@$p" ] || fail "no @$p in the root of $n: $(ls -a "$m" | tr '\n' ' ')"
	done
done

check "cp into a/@b/ ships the file to b"
mkprng "$S/f.bin" $((32 * MiB)) 31
d=$(digest "$S/f.bin")
cp "$S/f.bin" "$A/@b/f.bin" || fail "cp into a/@b/ failed"
[ "$(digest "$B/f.bin")" = "$d" ] || fail "b's f.bin differs from the source"

check "POST /v1/transfers on b ships f.bin to c (got/f.bin); the answer counts the bytes"
mkdir "$A/@c/got" || fail "mkdir a/@c/got"
[ -d "$C/got" ] || fail "got not made at c"
wa=$(net_bytes a)
wb=$(net_bytes b)
wc=$(net_bytes c)
code=$(NET_CURL_MAX=120 net_api b b POST /v1/transfers -H 'Content-Type: application/json' \
	-d '{"path": "f.bin", "to": "c", "dest": "got/f.bin"}')
[ "$code" = 200 ] || fail "POST /v1/transfers answered $code: $(cat "$T/api.body" "$T/api.err")"
sb=$(( $(net_bytes b) - wb ))
sc=$(( $(net_bytes c) - wc ))
sa=$(( $(net_bytes a) - wa ))
cp "$T/api.body" "$T/xfer1.json"
say "  $(cat "$T/xfer1.json")"
[ "$(digest "$C/got/f.bin")" = "$d" ] || fail "c's got/f.bin differs from the source"
lb=$(json_get "$T/xfer1.json" logical_bytes) || fail "the transfer's answer has no logical_bytes"
wbytes=$(json_get "$T/xfer1.json" wire_bytes) || fail "the transfer's answer has no wire_bytes"
[ "$lb" = $((32 * MiB)) ] || fail "logical_bytes is $lb for a 32 MiB file"
[ "$wbytes" -ge $((32 * MiB)) ] && [ "$wbytes" -le $((34 * MiB)) ] ||
	fail "wire_bytes is $wbytes for 32 MiB of random data new to c"
[ "$(json_get "$T/xfer1.json" to)" = c ] || fail "the answer's \"to\" is not c"
[ "$(json_get "$T/xfer1.json" dest)" = got/f.bin ] || fail "the answer's \"dest\" is not got/f.bin"
# b's and c's links carried it, about once; a's link did not.
[ "$sb" -ge $((32 * MiB)) ] && [ "$sb" -le $((35 * MiB)) ] || fail "$(mib "$sb") crossed b's link for 32 MiB"
[ "$sc" -ge $((32 * MiB)) ] && [ "$sc" -le $((35 * MiB)) ] || fail "$(mib "$sc") crossed c's link for 32 MiB"
[ "$sa" -lt $((1 * MiB)) ] || fail "$(mib "$sa") crossed a's link during a transfer from b to c"
say "  b->c: b's link $(mib "$sb"), c's $(mib "$sc"), a's $sa bytes"

check "ls a/@c/got shows f.bin with its size"
ls "$A/@c/got" >"$T/ls" || fail "ls a/@c/got"
grep -qx f.bin "$T/ls" || fail "ls a/@c/got: $(tr '\n' ' ' <"$T/ls")"
[ "$(fsize "$A/@c/got/f.bin")" = $((32 * MiB)) ] || fail "stat a/@c/got/f.bin: $(fsize "$A/@c/got/f.bin") bytes"

check "the same transfer again, under another name: no chunk sent, and c counts what b's client says it asked"
wb=$(net_bytes b)
k0=$(net_node_info c commits.content)
rc0=$(net_node_info c server.requests)
code=$(NET_CURL_MAX=120 net_api b b POST /v1/transfers -H 'Content-Type: application/json' \
	-d '{"path": "f.bin", "to": "c", "dest": "f-again.bin"}')
[ "$code" = 200 ] || fail "the second transfer answered $code: $(cat "$T/api.body")"
sb=$(( $(net_bytes b) - wb ))
cp "$T/api.body" "$T/xfer2.json"
rc1=$(net_node_info c server.requests)
req=$(json_get "$T/xfer2.json" requests) || fail "the answer has no requests: $(cat "$T/xfer2.json")"
rt=$(json_get "$T/xfer2.json" round_trips) || fail "the answer has no round_trips"
# c's count includes the GET that read rc1
[ $((rc1 - rc0 - 1)) = "$req" ] || fail "c served $((rc1 - rc0 - 1)) requests, b's client says it made $req"
[ "$rt" -le 2 ] || fail "$rt round trips for a file c already holds"
last=$(net_node_info b transfers.last.dest) || fail "b's GET /v1/node has no transfers.last"
[ "$last" = f-again.bin ] || fail "b's last transfer is to $last, not f-again.bin"
say "  c holds it: $rt round trip(s), $req request(s)"
[ "$(digest "$C/f-again.bin")" = "$d" ] || fail "c's f-again.bin differs"
wbytes=$(json_get "$T/xfer2.json" wire_bytes) || fail "no wire_bytes in $(cat "$T/xfer2.json")"
[ "$wbytes" -lt $((1 * MiB)) ] || fail "wire_bytes is $wbytes for a file c holds"
[ "$(json_get "$T/xfer2.json" chunks_sent)" = 0 ] || fail "chunks were sent for a file c holds: $(cat "$T/xfer2.json")"
[ "$sb" -lt $((1 * MiB)) ] || fail "$(mib "$sb") crossed b's link for a file c holds"
# c made it from the content it holds (the transfer's X-Dmar-Content).
k1=$(net_node_info c commits.content)
[ $((k1 - k0)) = 1 ] || fail "c made $((k1 - k0)) files from content it holds (expected 1)"

check "a's copy sent from a to c sends almost nothing: c has every chunk from b"
cp "$S/f.bin" "$A/f.bin" || fail "cp into a"
wa=$(net_bytes a)
cp "$A/f.bin" "$A/@c/from-a.bin" || fail "cp a/f.bin a/@c/ failed"
sa=$(( $(net_bytes a) - wa ))
[ "$(digest "$C/from-a.bin")" = "$d" ] || fail "c's from-a.bin differs"
[ "$sa" -lt $((1 * MiB)) ] || fail "$(mib "$sa") crossed a's link for a file c holds"
say "  a->c, 32 MiB c holds: $sa bytes on the wire"

check "reading c's copy through a/@c/ pulls nothing: a holds every chunk"
wa=$(net_bytes a)
[ "$(digest_uncached "$A/@c/got/f.bin")" = "$d" ] || fail "a/@c/got/f.bin differs"
sa=$(( $(net_bytes a) - wa ))
[ "$sa" -lt $((1 * MiB)) ] || fail_later "reading a/@c/got/f.bin moved $(mib "$sa") though a holds every chunk"

check "the digests at the three ends are the source's"
for f in "$A/f.bin" "$B/f.bin" "$C/got/f.bin" "$C/f-again.bin" "$C/from-a.bin" "$A/@b/f.bin" "$B/@c/from-a.bin"; do
	[ "$(digest "$f")" = "$d" ] || fail "$f differs from the source"
done

check "a transfer to an unknown peer or of a missing file is refused, nothing made"
code=$(net_api b b POST /v1/transfers -H 'Content-Type: application/json' -d '{"path": "f.bin", "to": "zz"}')
[ "$code" = 404 ] || fail "a transfer to peer zz answered $code: $(cat "$T/api.body")"
code=$(net_api b b POST /v1/transfers -H 'Content-Type: application/json' -d '{"path": "nope.bin", "to": "c"}')
[ "$code" = 404 ] || fail "a transfer of a missing file answered $code: $(cat "$T/api.body")"
[ ! -e "$C/nope.bin" ] || fail "nope.bin appeared at c"

net_node_stop a
net_node_stop b
net_node_stop c
finish
