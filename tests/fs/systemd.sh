#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/fs/systemd.sh - the daemon under systemd (dmarfs@.service,
# dmarfs/notify.h).  The unit, pointed at this build's dmarfs, passes
# `systemd-analyze verify` without a word; the daemon, given a
# NOTIFY_SOCKET as systemd's Type=notify gives one, says READY=1 with a
# STATUS= of its arena's use once the mount answers, STATUS= again while
# it runs, and STOPPING=1 at umount.  Then the unit under a real systemd,
# PID 1 of namespaces of its own (below): systemctl start waits for
# READY and shows the arena's use; a SIGKILL of the daemon restarts it
# with the arena re-attached (a file written before is intact); stop
# unmounts, with the result success.
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
# ---- under a real systemd ---------------------------------------------------------
# systemd 252 runs as PID 1 of a PID, mount and cgroup namespace of this
# test's own, with a tmpfs on /run and SYSTEMD_UNIT_PATH naming only this
# test's units (empty targets, and the unit with a drop-in that points
# EnvironmentFile at this test's config): it starts nothing of the host's,
# and its mounts, the node's among them, stay in its namespace (reached
# with nsenter).
check "under systemd as PID 1 of its own namespaces: start, a SIGKILL and the restart, stop"
if ! command -v unshare >/dev/null || ! command -v nsenter >/dev/null || [ ! -x /lib/systemd/systemd ] ||
	[ "$(id -u)" != 0 ]; then
	say "  note: no unshare, nsenter, /lib/systemd/systemd or root: not run"
	say "PASS: systemd"
	exit 0
fi
U=$T/units
mkdir -p "$U/dmarfs@t.service.d" "$T/sd-mnt"
# the targets a service's default dependencies name, empty
for t in t sysinit basic shutdown network-online; do
	printf '[Unit]\nDescription=test stand-in for %s.target\nDefaultDependencies=no\n' "$t" >"$U/$t.target"
done
cp "$T/dmarfs@t.service" "$U/dmarfs@.service"
# the config of instance t, where this test keeps it
printf 'MOUNTPOINT=%s\nOPTIONS=size=32m,keep\n' "$T/sd-mnt/t" >"$T/t.conf"
printf '[Unit]\nConditionPathExists=\nConditionPathExists=%s\n[Service]\nEnvironmentFile=\nEnvironmentFile=%s\n' \
	"$T/t.conf" "$T/t.conf" >"$U/dmarfs@t.service.d/test.conf"
cg_before=$(find /sys/fs/cgroup -maxdepth 5 -type d 2>/dev/null | sort)
cat >"$T/boot.sh" <<EOF
mount -t tmpfs tmpfs /run && mkdir -p /run/lock || exit 1
export SYSTEMD_UNIT_PATH=$U
exec /lib/systemd/systemd --system --unit=t.target
EOF
# --kill-child: when unshare goes (the cleanup's kill of timeout), the
# whole namespace goes with it
timeout 300 unshare --pid --fork --kill-child=SIGKILL --mount --propagation private --mount-proc --cgroup sh "$T/boot.sh" \
	>"$T/systemd.log" 2>&1 &
SDW=$!
CLEANUP_PIDS=$SDW
SD=""
for _ in $(seq 1 100); do
	SD=$(pgrep -P "$(pgrep -P "$SDW" | head -n 1)" 2>/dev/null | head -n 1) || :
	[ -n "$SD" ] && sdstate=$(nsenter -t "$SD" -m -p systemctl is-system-running 2>/dev/null) && break
	sleep 0.1
done
sd() { timeout 60 nsenter -t "$SD" -m -p "$@"; }
sd_stop() {
	[ -n "$SD" ] && kill -KILL "$SD" 2>/dev/null
	wait "$SDW" 2>/dev/null || :
	CLEANUP_PIDS=""
	# the cgroups this systemd made (empty now), deepest first: the
	# host's tree as it was
	for d in $(find /sys/fs/cgroup -mindepth 1 -maxdepth 5 -type d 2>/dev/null | sort -r); do
		printf '%s\n' "$cg_before" | grep -qx "$d" || rmdir "$d" 2>/dev/null || :
	done
}
case ${sdstate:-} in
running | degraded) say "  systemd: $sdstate, PID $SD on the host" ;;
*) tail -n 5 "$T/systemd.log"; sd_stop; fail "systemd did not come up: '${sdstate:-}'" ;;
esac
M=$T/sd-mnt/t
sd systemctl start dmarfs@t ||
	{ sd systemctl status --no-pager -n 8 dmarfs@t || :; sd_stop; fail "systemctl start dmarfs@t failed (above)"; }
st=$(sd systemctl show -p ActiveState --value dmarfs@t)
txt=$(sd systemctl show -p StatusText --value dmarfs@t)
pid1=$(sd systemctl show -p MainPID --value dmarfs@t)
say "  started: $st, pid $pid1, status '$txt'"
[ "$st" = active ] || { sd_stop; fail "dmarfs@t is $st after its start"; }
case $txt in "arena t: "*" of 32.0 MiB used"*) ;; *) sd_stop; fail "the unit's status text: '$txt'" ;; esac
mkprng "$T/sdf" 3000000 8
sd cp "$T/sdf" "$M/f" || { sd_stop; fail "cp into the unit's mount"; }
sd kill -KILL "$pid1"
pid2=""
for _ in $(seq 1 150); do
	pid2=$(sd systemctl show -p MainPID --value dmarfs@t)
	[ "$pid2" != 0 ] && [ "$pid2" != "$pid1" ] && [ "$(sd systemctl show -p ActiveState --value dmarfs@t)" = active ] && break
	sleep 0.1
done
n=$(sd systemctl show -p NRestarts --value dmarfs@t)
say "  after SIGKILL of pid $pid1: pid $pid2, $n restart(s)"
[ "$n" = 1 ] && [ "$pid2" != "$pid1" ] ||
	{ sd systemctl status --no-pager -n 8 dmarfs@t || :; sd_stop; fail "no restart after the SIGKILL (NRestarts=$n, MainPID=$pid2)"; }
[ "$(sd openssl dgst -sha256 -r "$M/f" | cut -d' ' -f1)" = "$(digest "$T/sdf")" ] ||
	{ sd_stop; fail "the file written before the SIGKILL is not intact after the restart"; }
sd systemctl stop dmarfs@t || { sd_stop; fail "systemctl stop dmarfs@t"; }
st=$(sd systemctl show -p ActiveState --value dmarfs@t)
res=$(sd systemctl show -p Result --value dmarfs@t)
say "  stopped: $st, result $res"
[ "$st" = inactive ] && [ "$res" = success ] ||
	{ sd systemctl status --no-pager -n 12 dmarfs@t || :; sd_stop; fail "after stop: $st, result $res"; }
! sd mountpoint -q "$M" || { sd_stop; fail "$M still mounted after the stop"; }
sd_stop
say "PASS: systemd"
