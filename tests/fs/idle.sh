#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/fs/idle.sh - a file held open is encoded once it has not been
# written for a while (5 s), not only at close or fsync; a new write makes
# it partly raw again, and it is encoded again later.
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
fs_umount "$m"
say "PASS: idle encoding"
