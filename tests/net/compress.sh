#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Compression that fits the link (codec/compress.h, the link meter): the
# same bf16-like tensor shipped from a to b goes byte-grouped and
# compressed over a link shaped to 200 Mbit/s, and raw over the plain
# veth, where zstd is slower than the wire; asserted from the transfer's
# own counters (POST /v1/transfers: zchunk_bytes of chunk_bytes) and the
# bytes that crossed.  b holds the same bytes as a each time.
. "$(dirname "$0")/lib.sh"

MKFLOATS=${MKFLOATS:-$top_builddir/tests/net/mkfloats}
[ -x "$MKFLOATS" ] || fail "$MKFLOATS not built"

net_setup
net_ns a
net_ns b
net_peers_file
net_token_file
net_node_start a "" size=512m
A=$NODE_MNT
net_node_start b "" size=512m
B=$NODE_MNT

# 96 MiB: a dozen 8 MiB batches, so the meter's first measured batches
# (one per stream, compressed until it knows both rates) are a minority.
SIZE=$((96 * MiB))
# Two tensors of other values: b lacks every chunk of each when it comes.
"$MKFLOATS" "$A/slow.bf16" "$SIZE" 2 7 || fail "mkfloats into a"
"$MKFLOATS" "$A/fast.bf16" "$SIZE" 2 8 || fail "mkfloats into a"

# ship NAME: a ships its NAME to b; sets chunk, zchunk, wire and took
# (seconds) from the answer.
ship() {
	d=$(digest "$A/$1")
	code=$(net_api a a POST /v1/transfers -H 'Content-Type: application/json' \
		-d "{\"path\":\"$1\",\"to\":\"b\"}")
	[ "$code" = 200 ] || fail "POST /v1/transfers to b as $1 answered $code: $(cat "$T/api.body" "$T/api.err")"
	chunk=$(json_get "$T/api.body" chunk_bytes) || fail "no chunk_bytes in $(cat "$T/api.body")"
	zchunk=$(json_get "$T/api.body" zchunk_bytes) || fail "no zchunk_bytes in $(cat "$T/api.body")"
	wire=$(json_get "$T/api.body" wire_bytes) || fail "no wire_bytes"
	took=$(json_get "$T/api.body" seconds) || fail "no seconds"
	[ "$(digest "$B/$1")" = "$d" ] || fail "b's $1 differs from a's"
	[ "$chunk" -ge "$SIZE" ] || fail "only $chunk chunk bytes sent of $SIZE new ones"
	say "  $1: $zchunk of $chunk chunk bytes compressed, wire $wire bytes ($(awk -v w="$wire" -v s="$SIZE" 'BEGIN { printf "%.2f", w / s }')x the file) in $took s"
}

check "over a 200 Mbit/s link the tensor goes compressed, byte-grouped: wire <= 0.8x the file"
net_exec a tc qdisc add dev eth0 root tbf rate 200mbit burst 512kb latency 200ms || fail "cannot shape a's eth0"
ship slow.bf16
[ "$zchunk" -ge $((chunk * 9 / 10)) ] || fail "over 200 Mbit/s only $zchunk of $chunk bytes went compressed"
[ "$wire" -le $((SIZE * 8 / 10)) ] || fail "over 200 Mbit/s the wire carried $wire bytes for $SIZE (> 0.8x)"
net_exec a tc qdisc del dev eth0 root || fail "cannot unshape a's eth0"

check "over the plain veth it goes raw after the first measured batches"
ship fast.bf16
[ "$zchunk" -le $((chunk * 4 / 10)) ] || fail "over the veth $zchunk of $chunk bytes went compressed (zstd is slower than this wire)"
[ "$wire" -ge $((SIZE * 8 / 10)) ] || fail "over the veth the wire carried only $wire bytes: it compressed"

check_arena "$A" "a's arena"
check_arena "$B" "b's arena"
finish
