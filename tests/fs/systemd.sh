#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/fs/systemd.sh - the daemon under systemd (dmarfs@.service,
# dmarfs/notify.h).  The unit, pointed at this build's dmarfs, passes
# `systemd-analyze verify` without a word; the daemon, given a
# NOTIFY_SOCKET as systemd's Type=notify gives one, says READY=1 with a
# STATUS= of its arena's use once the mount answers, STATUS= again while
# it runs, and STOPPING=1 at umount.  (systemd itself is not PID 1 here:
# starting and restarting the unit is not tested.)
. "$(dirname "$0")/lib.sh"

fs_setup
UNIT_IN=$top_srcdir/dmarfs/dmarfs@.service.in
[ -f "$UNIT_IN" ] || fail "no $UNIT_IN"

check "dmarfs@.service passes systemd-analyze verify"
if command -v systemd-analyze >/dev/null; then
	sed "s|%BINDIR%|$(dirname "$DMARFS")|" "$UNIT_IN" >"$T/dmarfs@t.service"
	grep -q "^ExecStart=$(dirname "$DMARFS")/dmarfs %i" "$T/dmarfs@t.service" || fail "no ExecStart of the build's dmarfs"
	systemd-analyze verify --man=no "$T/dmarfs@t.service" >"$T/verify" 2>&1 ||
		fail "systemd-analyze verify: $(cat "$T/verify")"
	[ ! -s "$T/verify" ] || fail "systemd-analyze verify says: $(cat "$T/verify")"
else
	say "  note: no systemd-analyze (package systemd): the unit is not verified"
fi

check "the daemon's notifications: READY=1 and STATUS= at the mount, STOPPING=1 at umount"
"${PYTHON:-python3}" - "$T/notify.sock" "$T/notify.log" <<'PY' &
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(1)
end = time.time() + 60
with open(sys.argv[2], "w") as log:
    while time.time() < end:
        try:
            m = s.recv(4096).decode()
        except socket.timeout:
            continue
        log.write(m.replace("\n", "|") + "\n")
        log.flush()
        if "STOPPING=1" in m:
            break
PY
LPID=$!
for _ in $(seq 1 50); do [ -S "$T/notify.sock" ] && break; sleep 0.1; done
[ -S "$T/notify.sock" ] || fail "the listener did not bind"
NOTIFY_SOCKET=$T/notify.sock fs_mount "size=32m"
m=$MNT
head -c 5000000 /dev/zero >"$m/f"
sleep 6 # one periodic STATUS
fs_umount "$m"
for _ in $(seq 1 50); do kill -0 "$LPID" 2>/dev/null || break; sleep 0.1; done
kill "$LPID" 2>/dev/null || :
say "  $(head -n 1 "$T/notify.log")"
head -n 1 "$T/notify.log" | grep -q '^READY=1|STATUS=arena dmarfs-test: .* of 32.0 MiB used' ||
	fail "first message: $(head -n 1 "$T/notify.log")"
[ "$(grep -c '^STATUS=arena dmarfs-test' "$T/notify.log")" -ge 1 ] || fail "no periodic STATUS: $(cat "$T/notify.log")"
tail -n 1 "$T/notify.log" | grep -qx 'STOPPING=1' || fail "last message: $(tail -n 1 "$T/notify.log")"
say "PASS: systemd"
