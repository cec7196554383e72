#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/fs/idle.sh - a file held open is encoded once it has not been
# written for a while (5 s), not only after its close; a new write makes
# it partly raw again, and it is encoded again later.  The encoder is one
# thread at nice 19, and what encoding gives is settled where it is asked
# for (a closed file's user.dmar.*, statfs, the check, a full arena): with
# the thread held back (DMARFS_ENCODER_PAUSE), copies of one file still fit
# an arena that holds one of them raw only a few times.  The consistency
# check run while the encoder works adds up every time.
. "$(dirname "$0")/lib.sh"

fs_setup
need python3
fs_mount "size=128m,encode=dedup"
m=$MNT
check "write 4 MiB, keep the file open, wait for user.dmar.state"
python3 - "$m/held" <<'PY' || fail "idle encoding (see above)"
import os, sys, time
path = sys.argv[1]
f = open(path, "wb")
f.write(os.urandom(4 << 20))
f.flush()
state = lambda: os.getxattr(path, "user.dmar.state").decode()

def wait_encoded(what):
    t0 = time.monotonic()
    while time.monotonic() - t0 < 20:
        if state() == "encoded":
            print("note: %s: encoded after %.1f s, file still open" % (what, time.monotonic() - t0))
            return
        time.sleep(0.1)
    sys.exit("FAIL: %s: still %s after 20 s" % (what, state()))

s = state()
if s != "raw":
    sys.exit("FAIL: right after the write the state is %s, expected raw" % s)
wait_encoded("first write")
f.write(b"more bytes")
f.flush()
s = state()
if s != "partly-encoded":
    sys.exit("FAIL: after appending, state is %s, expected partly-encoded" % s)
wait_encoded("after appending")
f.close()
PY
check "content survives: size is 4 MiB + 10"
[ "$(stat -c %s "$m/held")" = $((4 * 1048576 + 10)) ] || fail "size is $(stat -c %s "$m/held")"
check "the encoder is one thread, dmarfs-encode, at nice 19"
enc=$(ps -L -o comm=,nice= -p "$MNT_PID" | awk '$1 == "dmarfs-encode" { print $2 }')
[ "$enc" = 19 ] || fail "encoder thread: '$enc' (ps -L: $(ps -L -o comm=,nice= -p "$MNT_PID" | tr '\n' ' '))"
fs_umount "$m"

check "encoder held back: 8 closed copies of a 12 MiB file in a 48 MiB arena"
DMARFS_ENCODER_PAUSE=1 fs_mount "size=48m,encode=dedup"
m=$MNT
mkprng "$T/src" 12582912 7
want=$(digest "$T/src")
u0=$(used_bytes "$m")
cp "$T/src" "$m/c0" || fail "cp c0"
# (the kernel sends the close after cp exits: a few reads may come first)
wait_state "$m/c0" encoded 5
for k in 1 2 3 4 5 6 7; do
	# each write past the room the raw copies leave encodes the waiting ones
	cp "$T/src" "$m/c$k" || fail "cp c$k: the full arena did not settle the pending encodes"
done
wait_used_below "$m" $((u0 + 16 * 1048576)) 5 ||
	fail "statfs did not settle: $(mib $(($(used_bytes "$m") - u0))) used"
say "  used after 8 copies (statfs settles): $(mib $(($(used_bytes "$m") - u0)))"
for k in 0 1 2 3 4 5 6 7; do
	[ "$(digest "$m/c$k")" = "$want" ] || fail "c$k differs"
	[ "$(xattr "$m/c$k" user.dmar.state)" = encoded ] || fail "c$k: $(xattr "$m/c$k" user.dmar.state)"
done
check_arena "$m" "the arena after the settled copies"
fs_umount "$m"

# An encode step stores its chunks before it swaps them into the file; a
# check between the two saw chunks nobody held (~1 check in 12 failed).
# The check now waits for the step in flight: every answer is ok.
check "the check while the encoder works: 12 closes of 16 MiB, 10 checks each, all add up"
fs_mount "size=256m,encode=dedup"
m=$MNT
mkprng "$T/big" 16777216 9
r=1
while [ "$r" -le 12 ]; do
	cp "$T/big" "$m/e$r" || fail "cp e$r"
	# a tail of its own: every file has chunks the others do not
	printf 'file %s' "$r" >>"$m/e$r"
	for k in 1 2 3 4 5 6 7 8 9 10; do
		c=$(arena_check "$m") || fail "user.dmar.check failed (round $r)"
		case "$c" in state=ok*) ;; *) fail "round $r, check $k, encode in flight: $c" ;; esac
	done
	[ "$r" -le 2 ] || rm -f "$m/e$((r - 2))"
	r=$((r + 1))
done
fs_umount "$m"
say "PASS: idle encoding"
