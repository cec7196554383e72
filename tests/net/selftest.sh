#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/net/selftest.sh - the multi-node harness (tests/net/lib.sh) itself,
# without dmarfs nodes:
#  1. three namespaces on the hub's bridge: the addresses and routes laid
#     out as documented, ICMP echo between every pair;
#  2. nothing can leave them: no route to a TEST-NET-1 address or to any of
#     the host's own addresses, connects fail at once (ENETUNREACH), the
#     host namespace gained no interface;
#  3. a python3 http.server in one namespace, fetched with curl from the
#     two others, byte for byte; the byte counters see the transfer;
#  4. a process started with nsenter --net is in the namespace but shares
#     our mount namespace (a mount it makes is seen here, unlike under
#     `ip netns exec`), and net_stop_pid ends it;
#  5. the peers and token files, digest_tree;
#  6. cleanup leaves no namespace, process, mount, veth or temp dir behind,
#     when a test ends well and when it fails midway: a child copy of this
#     script sets up namespaces, processes (tracked or not) and a mount,
#     then exits 0, calls fail, runs into a failing command under set -e,
#     or is killed with SIGTERM;
#  7. nodes: if $DMARFS accepts listen= (nodes exist in this build) two real
#     ones, else two stand-ins (tmpfs + python3): start, query, stop, kill.
. "$(dirname "$0")/lib.sh"

# ---- the child (part 6) -------------------------------------------------------
# NET_SELFTEST_CHILD=MODE NET_SELFTEST_STATE=FILE sh selftest.sh
if [ -n "${NET_SELFTEST_CHILD:-}" ]; then
	net_setup
	st=$NET_SELFTEST_STATE
	net_ns a
	net_ns b
	net_spawn a "$T/sleep.log" sleep 300
	p1=$NET_PID
	mkdir "$T/www"
	net_spawn b "$T/http.log" "$NET_PY" -m http.server --bind "$(net_addr_of b)" 8080 --directory "$T/www"
	p2=$NET_PID
	# not tracked by PID: only `ip netns pids` can find it at cleanup
	nsenter --net="$(net_ns_path a)" sleep 301 </dev/null >/dev/null 2>&1 &
	mkdir "$T/m"
	net_exec a mount -t tmpfs -o size=1m selftest-child "$T/m" || fail "child: tmpfs mount"
	CLEANUP_MOUNTS="$T/m"
	n=50
	until [ "$(ip netns pids "$(basename "$(net_ns_path a)")" | wc -l)" -ge 2 ]; do
		n=$((n - 1))
		[ "$n" -gt 0 ] || fail "child: the untracked sleep did not start"
		sleep 0.1
	done
	{
		printf 'T %s\n' "$T"
		printf 'mount %s\n' "$T/m"
		for x in hub a b; do
			printf 'ns %s %s\n' "$(basename "$(net_ns_path $x)")" "$(stat -L -c %i "$(net_ns_path $x)")"
		done
		for x in hub a b; do
			for p in $(ip netns pids "$(basename "$(net_ns_path $x)")"); do printf 'pid %s\n' "$p"; done
		done
		printf 'pid %s\npid %s\n' "$p1" "$p2"
	} >"$st.tmp"
	mv "$st.tmp" "$st"
	case $NET_SELFTEST_CHILD in
	ok) finish ;;
	fail) fail "deliberate failure midway (cleanup test)" ;;
	error) false; say "not reached" ;;
	term)
		sleep 30 &
		CLEANUP_PIDS=$!
		wait $! ;;
	esac
	exit 0
fi

# ---- the test -------------------------------------------------------------------
net_setup
need awk
veths0=$(ip -o link show type veth | wc -l)
links0=$(ip -o link show | wc -l)

check "three namespaces on a bridge: eth0 10.77.$NET_SUBNET.N/24, lo up, one route, no default"
net_ns a
net_ns b
net_ns c
n=0
for x in a b c; do
	n=$((n + 1))
	[ "$(net_addr_of $x)" = "$NET_NET.$n" ] || fail "$x has address $(net_addr_of $x), expected $NET_NET.$n"
	net_exec $x ip -4 -o addr show dev eth0 | grep -q "inet $NET_NET.$n/24" ||
		fail "$x: eth0 lacks $NET_NET.$n/24: $(net_exec $x ip -4 -o addr show 2>&1)"
	net_exec $x ip -o link show dev lo | grep -q 'UP' || fail "$x: lo is not up"
	routes=$(net_exec $x ip -4 route show | tr '\n' ';')
	[ "$routes" = "$NET_NET.0/24 dev eth0 proto kernel scope link src $NET_NET.$n ;" ] ||
		fail "$x: unexpected routes: $routes"
	[ "$(net_exec $x ip -o link show | wc -l)" = 2 ] || fail "$x: more than lo and eth0: $(net_exec $x ip -o link show)"
done
[ -z "$(ip -n "$(basename "$(net_ns_path hub)")" -4 -o addr show scope global)" ] || fail "the hub has an IPv4 address"

check "ICMP echo between every pair (and to itself over lo)"
for x in a b c; do
	for y in a b c; do
		net_ping $x "$(net_addr_of $y)" || fail "no echo reply from $y ($(net_addr_of $y)) to $x"
	done
	net_ping $x 127.0.0.1 || fail "$x: no echo reply on lo"
done
net_ping a "$(net_addr_of b)" 3 || fail "3 echoes a -> b: not all answered"

check "no way out: no route to 192.0.2.1 or to the host's own addresses; connects fail at once"
outside="192.0.2.1 $(ip -4 -o addr show scope global | awk '{ sub(/\/.*/, "", $4); print $4 }' | tr '\n' ' ')"
for x in a b c; do
	for o in $outside; do
		if net_exec $x ip -4 route get "$o" >"$T/route" 2>&1; then
			fail "$x has a route to $o: $(cat "$T/route")"
		fi
		grep -q 'unreachable' "$T/route" || fail "$x: ip route get $o: $(cat "$T/route")"
	done
done
# Only now that no route exists may we try: nothing can be sent.
rc=0
net_ping a 192.0.2.1 2>"$T/ping.err" || rc=$?
[ "$rc" = 2 ] && grep -q 'unreachable' "$T/ping.err" ||
	fail "ping 192.0.2.1 from a: status $rc ($(cat "$T/ping.err")), expected network unreachable"
rc=0
timeout 10 nsenter --net="$(net_ns_path a)" curl -sS --connect-timeout 3 -o /dev/null http://192.0.2.1/ 2>"$T/curl.err" || rc=$?
[ "$rc" = 7 ] || fail "curl to 192.0.2.1 from a: status $rc ($(cat "$T/curl.err")), expected 7 (cannot connect)"
[ "$(ip -o link show type veth | wc -l)" = "$veths0" ] && [ "$(ip -o link show | wc -l)" = "$links0" ] ||
	fail "the host namespace gained interfaces: $(ip -o link show | cut -d' ' -f2 | tr '\n' ' ')"

check "a python3 http.server in b, fetched from a and c with curl, byte for byte"
mkdir "$T/www"
mkprng "$T/www/blob" $((4 * MiB)) 7
net_spawn b "$T/http.log" "$NET_PY" -m http.server --bind "$(net_addr_of b)" 8080 --directory "$T/www"
http_pid=$NET_PID
url=http://$(net_addr_of b):8080/blob
n=100
until NET_CURL_MAX=2 net_curl a -o /dev/null "$url" 2>/dev/null; do
	kill -0 "$http_pid" 2>/dev/null || fail "http.server exited: $(cat "$T/http.log")"
	n=$((n - 1))
	[ "$n" -gt 0 ] || fail "http.server in b does not answer after 10 s: $(cat "$T/http.log")"
	sleep 0.1
done
a0=$(net_bytes a)
for x in a c; do
	net_curl $x -o "$T/got.$x" "$url" || fail "curl from $x failed"
	[ "$(digest "$T/got.$x")" = "$(digest "$T/www/blob")" ] || fail "$x got different bytes"
done
a1=$(net_bytes a)
say "  a's eth0 counted $((a1 - a0)) bytes (rx + tx) for one 4 MiB fetch"
[ $((a1 - a0)) -ge $((4 * MiB)) ] && [ $((a1 - a0)) -lt $((5 * MiB)) ] ||
	fail "net_bytes a: $((a1 - a0)) bytes for a 4 MiB fetch"

check "nsenter --net: the process is in the namespace, in our mount namespace; net_stop_pid ends it"
net_spawn a "$T/sleep.log" sleep 300
p=$NET_PID
n=50
until [ "$(readlink "/proc/$p/ns/net" 2>/dev/null)" = "net:[$(stat -L -c %i "$(net_ns_path a)")]" ]; do
	n=$((n - 1))
	[ "$n" -gt 0 ] || fail "pid $p is not in a's namespace: $(readlink "/proc/$p/ns/net" 2>&1)"
	sleep 0.1
done
[ "$(cat "/proc/$p/comm" 2>/dev/null)" = sleep ] || fail "pid $p is $(cat "/proc/$p/comm"), not sleep (nsenter did not exec?)"
[ "$(readlink "/proc/$p/ns/mnt")" = "$(readlink /proc/self/ns/mnt)" ] || fail "pid $p has a mount namespace of its own"
mkdir "$T/m"
net_exec a mount -t tmpfs -o size=1m selftest "$T/m" || fail "mount of a tmpfs from a"
CLEANUP_MOUNTS="$T/m"
is_mounted "$T/m" || fail "a mount made under nsenter --net is not seen here"
umount "$T/m" || fail "umount $T/m"
CLEANUP_MOUNTS=""
if [ "$(ip netns exec "$(basename "$(net_ns_path a)")" readlink /proc/self/ns/mnt)" = "$(readlink /proc/self/ns/mnt)" ]; then
	note "ip netns exec kept our mount namespace on this system"
else
	say "  (as documented: ip netns exec would have given it a mount namespace of its own)"
fi
net_stop_pid "$p"
! kill -0 "$p" 2>/dev/null || fail "pid $p still there after net_stop_pid"
net_stop_pid "$http_pid"

check "net_peers_file, net_token_file (mode 600), digest_tree"
net_peers_file
printf 'a %s.1:7420\nb %s.2:7420\nc %s.3:7420\n' "$NET_NET" "$NET_NET" "$NET_NET" >"$T/peers.want"
cmp -s "$NET_PEERS" "$T/peers.want" || fail "peers file: $(cat "$NET_PEERS")"
net_token_file
[ "$(stat -c %a "$NET_TOKEN")" = 600 ] && [ "$(stat -c %a "$NET_TOKEN.hdr")" = 600 ] || fail "token files are not mode 600"
grep -Eqx '[0-9a-f]{64}' "$NET_TOKEN" || fail "token: $(head -c 80 "$NET_TOKEN")"
[ "$(cat "$NET_TOKEN.hdr")" = "Authorization: Bearer $(cat "$NET_TOKEN")" ] || fail "token header file"
mkdir -p "$T/tree/sub"
echo one >"$T/tree/one"
cp "$T/www/blob" "$T/tree/sub/blob"
ln -s one "$T/tree/link"
d1=$(digest_tree "$T/tree")
cp -a "$T/tree" "$T/tree2"
[ "$(digest_tree "$T/tree2")" = "$d1" ] || fail "digest_tree differs for a cp -a copy"
printf x | dd of="$T/tree2/sub/blob" bs=1 seek=100 conv=notrunc status=none
[ "$(digest_tree "$T/tree2")" != "$d1" ] || fail "digest_tree unchanged after a one-byte change"

# ---- 6. cleanup, by a child copy of this script ------------------------------------
# ns_held INODE: some process still holds the namespace with this inode
ns_held() {
	find /proc/[0-9]*/ns/net -maxdepth 0 -lname "net:\[$1\]" 2>/dev/null | grep -q .
}
# pid_alive PID: running (a zombie, waiting for a parent to reap it, is not)
pid_alive() {
	[ -e "/proc/$1" ] && ! awk '{ sub(/.*\) /, ""); exit !($1 == "Z") }' "/proc/$1/stat" 2>/dev/null
}
for mode in ok fail error term; do
	check "cleanup after a child that $(case $mode in ok) echo ends well ;; fail) echo calls fail midway ;;
		error) echo hits a failing command under set -e ;; term) echo is killed by SIGTERM ;; esac)"
	st=$T/child.$mode.state
	NET_SELFTEST_CHILD=$mode NET_SELFTEST_STATE=$st timeout 120 sh "$0" >"$T/child.$mode.log" 2>&1 &
	cpid=$!
	CLEANUP_PIDS=$cpid
	n=300
	until [ -f "$st" ]; do
		kill -0 "$cpid" 2>/dev/null || break
		n=$((n - 1))
		[ "$n" -gt 0 ] || fail "the $mode child did not set up in 30 s: $(tail -n 5 "$T/child.$mode.log")"
		sleep 0.1
	done
	[ -f "$st" ] || fail "the $mode child exited before setting up: $(tail -n 5 "$T/child.$mode.log")"
	[ "$mode" = term ] && { sleep 0.3; kill -TERM "$cpid"; }
	wait_pid_exit "$cpid" 60 || fail "the $mode child still runs 60 s on"
	rc=0
	wait "$cpid" || rc=$?
	CLEANUP_PIDS=""
	case $mode in ok) want=0 ;; fail | error) want=1 ;; term) want=143 ;; esac
	[ "$rc" = "$want" ] || fail "the $mode child exited $rc, expected $want: $(tail -n 5 "$T/child.$mode.log")"
	[ "$mode" != fail ] || grep -q 'FAIL: selftest: deliberate failure' "$T/child.$mode.log" ||
		fail "the fail child did not print its FAIL line"
	prefix=$(awk '$1 == "ns" { sub(/hub$/, "", $2); print $2; exit }' "$st")
	[ -n "$prefix" ] || fail "no namespaces in $st"
	! ip netns list | grep -q "^$prefix" || fail "namespaces left behind: $(ip netns list | grep "^$prefix" | tr '\n' ' ')"
	n=0
	for p in $(awk '$1 == "pid" { print $2 }' "$st"); do
		n=$((n + 1))
		k=30
		while pid_alive "$p" && [ "$k" -gt 0 ]; do sleep 0.1; k=$((k - 1)); done
		! pid_alive "$p" || fail "process $p ($(cat "/proc/$p/cmdline" 2>/dev/null | tr '\0' ' ')) left behind"
	done
	[ "$n" -ge 4 ] || fail "the state file lists only $n processes"
	for i in $(awk '$1 == "ns" { print $3 }' "$st"); do
		k=30
		while ns_held "$i" && [ "$k" -gt 0 ]; do sleep 0.1; k=$((k - 1)); done
		! ns_held "$i" || fail "a process still holds namespace net:[$i]"
	done
	m=$(awk '$1 == "mount" { print $2 }' "$st")
	! is_mounted "$m" || fail "mount $m left behind"
	ct=$(awk '$1 == "T" { print $2 }' "$st")
	[ ! -e "$ct" ] || fail "temp dir $ct left behind"
	[ "$(ip -o link show type veth | wc -l)" = "$veths0" ] && [ "$(ip -o link show | wc -l)" = "$links0" ] ||
		fail "interfaces left in the host namespace: $(ip -o link show | cut -d' ' -f2 | tr '\n' ' ')"
	say "  exit $rc; $n processes, $(grep -c '^ns ' "$st") namespaces, the mount and the temp dir all gone"
done

# ---- 7. nodes: real ones where this build has them, else a stand-in -------------------
if [ -x "$DMARFS" ] && "$DMARFS" --help 2>&1 | grep -q 'listen='; then
	what="real nodes"
else
	note "$DMARFS does not accept listen= (no nodes in this build): the node helpers run against a stand-in"
	what="stand-in nodes (a tmpfs mount, GET /v1/node from python3)"
	# It takes dmarfs's arguments, mounts a tmpfs, answers GET /v1/node
	# (401 without the token), ends with status 0 once unmounted.
	cat >"$T/fake-dmarfs" <<EOF
#!$NET_PY
import http.server, subprocess, sys, threading, time
name, mnt = sys.argv[1], sys.argv[2]
opts = dict((o.split("=", 1) + [""])[:2] for o in sys.argv[sys.argv.index("-o") + 1].split(","))
secret = open(opts["token"]).readline().strip() if "token" in opts else None
host, port = opts["listen"].rsplit(":", 1)
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "fake-" + name, mnt], check=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = secret is None or self.headers.get("Authorization") == "Bearer " + secret
        body = ('{"name": "%s"}' % name).encode()
        self.send_response((200 if self.path == "/v1/node" else 404) if ok else 401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer((host, int(port)), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
print("stand-in dmarfs %s on %s, listening on %s" % (name, mnt, opts["listen"]), flush=True)
while any(l.split()[4] == mnt for l in open("/proc/self/mountinfo")):
    time.sleep(0.1)
EOF
	chmod +x "$T/fake-dmarfs"
	DMARFS=$T/fake-dmarfs
	fs_need_mount() { :; }
fi
check "two $what: start, GET /v1/node with and without the token, stop, kill"
net_node_start a "" size=64m
net_node_start b "" size=64m
grep -q "listening on $NET_NET.1:7420" "$T/dmarfs.a.log" || [ "$what" = "real nodes" ] ||
	fail "node a did not get listen=$NET_NET.1:7420: $(cat "$T/dmarfs.a.log")"
net_curl c -o "$T/node.json" "$(net_url a /v1/node)" || fail "GET /v1/node of a from c"
grep -q '"name": *"a"' "$T/node.json" || fail "a's /v1/node: $(head -c 300 "$T/node.json")"
code=$(net_exec c curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$(net_url b /v1/node)")
[ "$code" = 401 ] || fail "GET /v1/node of b without the token: $code, expected 401"
pb=$NODE_PID_b
net_node_stop a
net_node_kill b
! kill -0 "$pb" 2>/dev/null || fail "node b (pid $pb) still there after net_node_kill"
finish
