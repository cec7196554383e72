# SPDX-License-Identifier: MIT
#
# tests/net/lib.sh - helpers for the multi-node dmarfs tests (sourced, POSIX
# sh), built on tests/fs/lib.sh: the same check/fail/fail_later/note/skip/
# finish conventions, $T, digest, mkprng, KEEP_TMP=1.  Run by hand:
#     top_builddir=/tmp/build sh tests/net/selftest.sh
#
# The network.  Every test gets its own network namespaces, named
# dmar-TEST-PID-NAME (TEST the script's name, PID the test shell's), so
# tests can run in parallel and a leftover names its test.  net_ns NAME
# makes one "node" namespace, with lo up and one veth (eth0 inside) plugged
# into a Linux bridge (br0) that lives in a namespace of its own,
# dmar-TEST-PID-hub, made with the first net_ns.  Addresses are
# 10.77.X.N/24: X is $NET_SUBNET, by default derived from the PID (1..250),
# N given to net_ns or counted from 1.  net_pair A B makes two namespaces
# joined by one veth and no bridge instead (scripts/bench-net: one hop).
# Nothing joins these namespaces to the host's: no veth end is ever in the
# host namespace, no namespace has a default route, so nothing a test sends
# can leave them (tests/net/selftest.sh checks that), and two tests using
# the same X could not even see each other.  IPv6 is off inside (no
# autoconfiguration chatter in the byte counters).
#
# Processes.  `ip netns exec` would also give the command a private mount
# namespace, so a FUSE mount made under it would be invisible here; every
# helper below uses `nsenter --net=/run/netns/NS` instead, which changes the
# network namespace only: a node's mount is seen by the whole test.
#   net_exec NAME CMD...       run CMD in NAME's network namespace
#   net_spawn NAME LOG CMD...  the same in the background; its PID (nsenter
#                              execs CMD, so the PID is CMD's) in $NET_PID,
#                              killed at cleanup
#   net_node_start NAME [MOUNTPOINT] [OPTIONS]
#                              start `$DMARFS NAME MOUNTPOINT -f -o OPTIONS`
#                              in NAME's namespace (log $T/dmarfs.NAME.log),
#                              adding node=NAME, listen=ADDR:$NET_PORT,
#                              peers=$NET_PEERS, token=$NET_TOKEN where
#                              OPTIONS lacks them; waits (bounded) until the
#                              mount answers and GET /v1/node answers 200
#   net_node_stop NAME         unmount cleanly; the daemon must exit 0
#   net_node_kill NAME         SIGKILL the daemon, then detach its mount
#   net_peers_file [FILE]      "NAME ADDR:PORT" per node namespace -> $NET_PEERS
#   net_token_file [FILE]      a random secret, mode 600 -> $NET_TOKEN
#   net_curl NAME CURLARGS...  curl from NAME's namespace, bounded, with the
#                              token's Authorization header when there is one
#   net_url NAME [PATH]        http://ADDR:PORT of NAME's node, plus PATH
#   net_api FROM NODE METHOD PATH [CURLARGS...]
#                              one request from FROM's namespace to NODE's
#                              API (with the token, as net_curl): prints the
#                              HTTP status, the body in $T/api.body, the
#                              headers in $T/api.hdr
#   json_get FILE KEY[.KEY...] a member of the JSON object in FILE (arrays
#                              by index); exit 1 if absent
#   net_node_info NAME KEY[.KEY...]
#                              a member of NAME's GET /v1/node
#   net_ping NAME ADDR [N]     N (1) ICMP echoes from NAME; 0 if all answered
#   net_bytes NAME [DEV]       rx + tx bytes of DEV (eth0) in NAME, as
#                              /proc/net/dev counts them (L2 frames)
#   digest_tree DIR            one SHA-256 over every file's path and digest
#
# net_setup makes $T and sets `trap net_cleanup EXIT`.  net_cleanup, on
# success and on failure alike (also after INT/TERM): unmounts every node
# (gently, then by force) and stops its daemon by PID, kills the processes
# of net_spawn by PID, then every process still inside one of this test's
# namespaces (`ip netns pids`: only this test puts processes there), deletes
# the namespaces (their veths go with them), then runs tests/fs/lib.sh's
# cleanup (its mounts, CLEANUP_PIDS, CLEANUP_DIRS, $T) and exits with the
# test's status.
#
# Needs root (network namespaces), ip (iproute2) with veth and bridge
# support, nsenter, curl, python3; net_node_start also what fs_setup needs.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
# shellcheck source=../fs/lib.sh
. "$top_srcdir/tests/fs/lib.sh"

: "${NET_PORT:=7420}"
: "${NODE_TIMEOUT:=120}" # a node populates its arena first: see fs_mount
: "${NET_SUBNET:=$(($$ % 250 + 1))}"
NET_NET=10.77.$NET_SUBNET
NET_PREFIX=dmar-$TEST_NAME-$$-
NET_NSES=""    # short names of this test's namespaces, hub included
NET_HUB=""     # "hub" once the bridge namespace exists
NET_NEXT=1     # the next host number net_ns gives out
NET_NODES=""   # names of the nodes started and not yet stopped
NET_PIDS=""    # PIDs of net_spawn
NET_PEERS=""
NET_TOKEN=""
NET_PY=$(command -v /usr/bin/python3 || command -v python3 || :)

# ---- set-up and clean-up --------------------------------------------------

net_setup() {
	[ "$(id -u)" = 0 ] || skip "not root: network namespaces need CAP_SYS_ADMIN"
	need ip
	need nsenter
	need curl
	need timeout
	need openssl
	[ -n "$NET_PY" ] || skip "prerequisite 'python3' not found in PATH"
	T=$(mktemp -d "${TMPDIR:-/tmp}/dmarfs-$TEST_NAME.XXXXXX")
	# The nodes' arenas: a run directory of this test's (tests/fs/lib.sh).
	DMARFS_RUNDIR=$(mktemp -d /dev/shm/dmarfs-rundir-"$TEST_NAME".XXXXXX)
	export DMARFS_RUNDIR
	CLEANUP_DIRS="${CLEANUP_DIRS:-} $DMARFS_RUNDIR"
	trap net_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	say "test $TEST_NAME: tmp=$T namespaces=${NET_PREFIX}* net=$NET_NET.0/24"
	# Probe what every test needs; a refusal here is a missing
	# prerequisite (a container without CAP_NET_ADMIN, no veth module).
	_ns=${NET_PREFIX}probe
	ip netns add "$_ns" 2>"$T/probe.err" ||
		skip "cannot create a network namespace: $(head -c 200 "$T/probe.err")"
	NET_NSES="$NET_NSES probe"
	ip -n "$_ns" link add p0 type veth peer name p1 2>"$T/probe.err" ||
		skip "cannot create a veth pair: $(head -c 200 "$T/probe.err")"
	ip -n "$_ns" link add br0 type bridge 2>"$T/probe.err" ||
		skip "cannot create a bridge: $(head -c 200 "$T/probe.err")"
	nsenter --net="/run/netns/$_ns" true 2>"$T/probe.err" ||
		skip "nsenter --net does not work: $(head -c 200 "$T/probe.err")"
	net_ns_del probe
}

# net_ns_path NAME: the namespace's file (for nsenter --net=).
net_ns_path() {
	printf '/run/netns/%s%s\n' "$NET_PREFIX" "$1"
}

# net_check_name NAME: a short lower-case word (it names a veth: <= 13).
net_check_name() {
	case $1 in
	'' | [!a-z]* | *[!a-z0-9]*) fail "net: bad name '$1' (want [a-z][a-z0-9]*)" ;;
	esac
	[ ${#1} -le 13 ] || fail "net: name '$1' is longer than 13 characters"
}

# net_ns_new NAME: a bare namespace with lo up and IPv6 off.
net_ns_new() {
	net_check_name "$1"
	case " $NET_NSES " in *" $1 "*) fail "net: namespace $1 exists already" ;; esac
	ip netns add "$NET_PREFIX$1" || fail "ip netns add $NET_PREFIX$1 failed"
	NET_NSES="$NET_NSES $1"
	ip -n "$NET_PREFIX$1" link set lo up || fail "net: lo up in $1"
	nsenter --net="$(net_ns_path "$1")" sh -c \
		'for f in all default; do echo 1 >/proc/sys/net/ipv6/conf/$f/disable_ipv6; done' 2>/dev/null || :
}

# net_ns_del NAME: kill what runs in it (by PID), delete it.
net_ns_del() {
	_ns=$NET_PREFIX$1
	for _p in $(ip netns pids "$_ns" 2>/dev/null); do
		kill -9 "$_p" 2>/dev/null
	done
	ip netns del "$_ns" 2>/dev/null
	_new=""
	for _x in $NET_NSES; do [ "$_x" = "$1" ] || _new="$_new $_x"; done
	NET_NSES=$_new
}

# net_addr_of NAME: the IPv4 address net_ns/net_pair gave NAME.
net_addr_of() {
	eval "_a=\${NET_ADDR_$1:-}"
	[ -n "$_a" ] || fail "net: no namespace '$1' with an address"
	printf '%s\n' "$_a"
}

# net_host N_OR_ADDR: 10.77.X.N for a host number, an address as it is.
net_host() {
	case $1 in
	*.*.*.*) printf '%s\n' "$1" ;;
	'' | *[!0-9]*) fail "net: bad address '$1'" ;;
	*) [ "$1" -ge 1 ] && [ "$1" -le 254 ] || fail "net: host number $1 not in 1..254"
	   printf '%s.%s\n' "$NET_NET" "$1" ;;
	esac
}

# net_wait_up NS DEV [BRIDGE_NS]: until DEV is up in NS (and, given
# BRIDGE_NS, its bridge port there is forwarding); at most 5 s.
net_wait_up() {
	_n=50
	while :; do
		if ip -n "$NET_PREFIX$1" -o link show dev "$2" 2>/dev/null | grep -q 'state UP\|LOWER_UP'; then
			[ $# -lt 3 ] && return 0
			bridge -n "$NET_PREFIX$3" link show dev "v-$1" 2>/dev/null | grep -q 'state forwarding' && return 0
		fi
		_n=$((_n - 1))
		[ "$_n" -gt 0 ] || fail "net: $2 in $1 not up after 5 s: $(ip -n "$NET_PREFIX$1" -o link show dev "$2" 2>&1)"
		sleep 0.1
	done
}

net_hub() {
	net_ns_new hub
	NET_HUB=hub
	ip -n "${NET_PREFIX}hub" link add br0 type bridge || fail "net: cannot create the bridge"
	ip -n "${NET_PREFIX}hub" link set br0 up || fail "net: bridge up"
}

# net_ns NAME [N|ADDR]: a node namespace on the hub's bridge, eth0 with
# 10.77.X.N/24 (N counted from 1 if not given), in NET_ADDR_NAME.
net_ns() {
	[ "$1" != hub ] || fail "net: 'hub' is the bridge's namespace"
	[ -n "$NET_HUB" ] || net_hub
	net_ns_new "$1"
	_addr=$(net_host "${2:-$NET_NEXT}")
	NET_NEXT=$((${_addr##*.} + 1))
	ip link add eth0 netns "$NET_PREFIX$1" type veth peer name "v-$1" netns "${NET_PREFIX}hub" ||
		fail "net: cannot create the veth of $1"
	ip -n "${NET_PREFIX}hub" link set "v-$1" master br0 up || fail "net: v-$1 into the bridge"
	ip -n "$NET_PREFIX$1" addr add "$_addr/24" dev eth0 || fail "net: address $_addr on $1"
	ip -n "$NET_PREFIX$1" link set eth0 up || fail "net: eth0 up in $1"
	eval "NET_ADDR_$1=\$_addr"
	net_wait_up "$1" eth0 hub
}

# net_pair A [N|ADDR] B [N|ADDR]: two namespaces, one veth between them
# (eth0 on both sides), no bridge.
net_pair() {
	net_ns_new "$1"
	net_ns_new "$3"
	_aa=$(net_host "${2:-1}")
	_ab=$(net_host "${4:-2}")
	ip link add eth0 netns "$NET_PREFIX$1" type veth peer name eth0 netns "$NET_PREFIX$3" ||
		fail "net: cannot create the veth between $1 and $3"
	ip -n "$NET_PREFIX$1" addr add "$_aa/24" dev eth0 && ip -n "$NET_PREFIX$3" addr add "$_ab/24" dev eth0 ||
		fail "net: addresses on the pair"
	ip -n "$NET_PREFIX$1" link set eth0 up && ip -n "$NET_PREFIX$3" link set eth0 up || fail "net: pair up"
	eval "NET_ADDR_$1=\$_aa; NET_ADDR_$3=\$_ab"
	net_wait_up "$1" eth0
	net_wait_up "$3" eth0
}

net_exec() {
	_ns=$(net_ns_path "$1")
	shift
	[ -e "$_ns" ] || fail "net_exec: no namespace $_ns"
	nsenter --net="$_ns" "$@"
}

# net_spawn NAME LOG CMD...: CMD in the background in NAME's namespace,
# stdout and stderr to LOG; its PID in $NET_PID.
net_spawn() {
	_ns=$(net_ns_path "$1")
	_log=$2
	shift 2
	[ -e "$_ns" ] || fail "net_spawn: no namespace $_ns"
	nsenter --net="$_ns" "$@" >"$_log" 2>&1 &
	NET_PID=$!
	NET_PIDS="$NET_PIDS $NET_PID"
}

# net_stop_pid PID: TERM, then KILL after 3 s; reaped.
net_stop_pid() {
	kill "$1" 2>/dev/null
	wait_pid_exit "$1" 3 || kill -9 "$1" 2>/dev/null
	wait "$1" 2>/dev/null || :
	_new=""
	for _x in $NET_PIDS; do [ "$_x" = "$1" ] || _new="$_new $_x"; done
	NET_PIDS=$_new
	return 0
}

# net_node_reap NAME: whatever state the node is in, end it (cleanup).
net_node_reap() {
	eval "_pid=\${NODE_PID_$1:-}; _dir=\${NODE_MNT_$1:-}"
	[ -n "$_pid" ] || return 0
	unmount_dir "$_dir" || printf 'cleanup: could not unmount %s\n' "$_dir" >&2
	if ! wait_pid_exit "$_pid" 5; then
		kill "$_pid" 2>/dev/null
		wait_pid_exit "$_pid" 3 || kill -9 "$_pid" 2>/dev/null
	fi
	wait "$_pid" 2>/dev/null || :
	is_mounted "$_dir" && { umount -l "$_dir" 2>/dev/null || fusermount3 -u -z "$_dir" 2>/dev/null; }
	net_node_forget "$1"
}

net_node_forget() {
	eval "NODE_PID_$1=''"
	_new=""
	for _x in $NET_NODES; do [ "$_x" = "$1" ] || _new="$_new $_x"; done
	NET_NODES=$_new
}

net_cleanup() {
	_nrc=$?
	set +e
	trap - EXIT
	# A second signal must not cut the cleanup short: timeout(1) sends its
	# TERM to the child and then to the whole process group, so a test run
	# under it gets two.  A no-op trap (not '': children would inherit an
	# ignored signal) lets the cleanup run to the end.
	trap : INT TERM
	for _x in $NET_NODES; do net_node_reap "$_x"; done
	for _x in $NET_PIDS; do net_stop_pid "$_x"; done
	for _x in $NET_NSES; do net_ns_del "$_x"; done
	(exit "$_nrc")
	cleanup
}

# ---- nodes --------------------------------------------------------------------

# net_url NAME [PATH]: the base URL of NAME's REST API (and PATH);
# https:// when NET_SCHEME=https (nodes with tls_cert=, tests/net/tls.sh).
net_url() {
	printf '%s://%s:%s%s\n' "${NET_SCHEME:-http}" "$(net_addr_of "$1")" "$NET_PORT" "${2:-}"
}

# net_curl NAME CURLARGS...: curl in NAME's namespace with the token's
# header (if net_token_file was called), connect timeout 3 s, the whole
# request at most ${NET_CURL_MAX:-60} s; with NET_CACERT set, https
# servers are checked against that CA (curl --cacert).
net_curl() {
	_from=$1
	shift
	if [ -n "${NET_CACERT:-}" ]; then
		set -- --cacert "$NET_CACERT" "$@"
	fi
	if [ -n "$NET_TOKEN" ]; then
		net_exec "$_from" curl -sS --connect-timeout 3 --max-time "${NET_CURL_MAX:-60}" -H "@$NET_TOKEN.hdr" "$@"
	else
		net_exec "$_from" curl -sS --connect-timeout 3 --max-time "${NET_CURL_MAX:-60}" "$@"
	fi
}

# net_api FROM NODE METHOD PATH [CURLARGS...]: see the top.  A request
# curl could not make at all prints 000.
net_api() {
	_from=$1 _to=$2 _m=$3 _p=$4
	shift 4
	: >"$T/api.body"
	: >"$T/api.hdr"
	net_curl "$_from" --path-as-is -X "$_m" -o "$T/api.body" -D "$T/api.hdr" -w '%{http_code}' \
		"$@" "$(net_url "$_to" "$_p")" 2>"$T/api.err" || :
}

# json_get FILE KEY[.KEY...]: see the top.  Strings as they are, other
# values as JSON.
json_get() {
	"$NET_PY" - "$1" "$2" <<'EOF'
import json, sys
try:
    v = json.load(open(sys.argv[1]))
    for k in sys.argv[2].split("."):
        v = v[int(k)] if isinstance(v, list) else v[k]
except (ValueError, KeyError, IndexError, TypeError):
    sys.exit(1)
print(v if isinstance(v, str) else json.dumps(v))
EOF
}

# net_node_info NAME KEY: a member of NAME's GET /v1/node, asked from its
# own namespace.
net_node_info() {
	_c=$(net_api "$1" "$1" GET /v1/node)
	[ "$_c" = 200 ] || fail "GET /v1/node on $1 answered '$_c': $(cat "$T/api.body" "$T/api.err" 2>/dev/null)"
	json_get "$T/api.body" "$2" || fail "GET /v1/node on $1 has no $2: $(cat "$T/api.body")"
}

# net_peers_file [FILE]: "NAME ADDR:PORT" for every node namespace
# ("NAME ADDR:PORT https" when NET_SCHEME=https).
net_peers_file() {
	NET_PEERS=${1:-$T/peers}
	: >"$NET_PEERS"
	_tls=""
	[ "${NET_SCHEME:-http}" = https ] && _tls=" https"
	for _x in $NET_NSES; do
		[ "$_x" = hub ] && continue
		printf '%s %s:%s%s\n' "$_x" "$(net_addr_of "$_x")" "$NET_PORT" "$_tls" >>"$NET_PEERS"
	done
}

# net_token_file [FILE]: a random secret (64 hex digits) in FILE, mode
# 600, and FILE.hdr with its "Authorization: Bearer" line for curl -H @.
net_token_file() {
	NET_TOKEN=${1:-$T/token}
	(umask 077 && openssl rand -hex 32 >"$NET_TOKEN") || fail "cannot write $NET_TOKEN"
	chmod 600 "$NET_TOKEN"
	(umask 077 && printf 'Authorization: Bearer %s\n' "$(head -n 1 "$NET_TOKEN")" >"$NET_TOKEN.hdr")
}

# net_opts NAME OPTIONS: OPTIONS completed with this harness's node options.
net_opts() {
	_o=$2
	case ",$_o," in *,node=*) ;; *) _o="$_o,node=$1" ;; esac
	case ",$_o," in *,listen=*) ;; *) _o="$_o,listen=$(net_addr_of "$1"):$NET_PORT" ;; esac
	if [ -n "$NET_PEERS" ]; then
		case ",$_o," in *,peers=*) ;; *) _o="$_o,peers=$NET_PEERS" ;; esac
	fi
	if [ -n "$NET_TOKEN" ]; then
		case ",$_o," in *,token=*) ;; *) _o="$_o,token=$NET_TOKEN" ;; esac
	fi
	printf '%s\n' "${_o#,}"
}

# net_node_start NAME [MOUNTPOINT] [OPTIONS]: see the top.  MOUNTPOINT
# defaults to $T/mnt-NAME.  The PID goes to NODE_PID_NAME, the mount to
# NODE_MNT_NAME (and $NODE_MNT).
net_node_start() {
	fs_need_mount
	case " $NET_NODES " in *" $1 "*) fail "net_node_start: node $1 is running already" ;; esac
	_name=$1
	_mnt=${2:-$T/mnt-$1}
	_o=$(net_opts "$1" "${3:-}")
	_log=$T/dmarfs.$1.log
	mkdir -p "$_mnt"
	check "start node $_name: dmarfs -o $_o on $_mnt"
	nsenter --net="$(net_ns_path "$_name")" "$DMARFS" "$_name" "$_mnt" -f -o "$_o" >>"$_log" 2>&1 &
	_pid=$!
	eval "NODE_PID_$_name=\$_pid; NODE_MNT_$_name=\$_mnt"
	NODE_MNT=$_mnt
	NET_NODES="$NET_NODES $_name"
	_url=$(net_url "$_name" /v1/node)
	_n=$((NODE_TIMEOUT * 10))
	_up=0
	while :; do
		if [ "$_up" = 0 ] && is_mounted "$_mnt" && timeout 10 stat -f "$_mnt" >/dev/null 2>&1; then
			_up=1
		fi
		if [ "$_up" = 1 ]; then
			_code=$(NET_CURL_MAX=2 net_curl "$_name" -o /dev/null -w '%{http_code}' "$_url" 2>/dev/null) || :
			case $_code in
			200) break ;;
			401) fail "node $_name: GET /v1/node answered 401 with the token of $NET_TOKEN" ;;
			esac
		fi
		if ! kill -0 "$_pid" 2>/dev/null; then
			wait "$_pid" 2>/dev/null && _st=0 || _st=$?
			net_node_forget "$_name"
			if grep -Eq 'Operation not permitted|Permission denied|fuse: device not found|No such device' "$_log"; then
				skip "cannot mount FUSE here: $(tr '\n' ' ' <"$_log" | head -c 300)"
			fi
			fail "node $_name: dmarfs exited ($_st) before it was ready: $(tr '\n' ' ' <"$_log" | head -c 500)"
		fi
		_n=$((_n - 1))
		[ "$_n" -gt 0 ] || fail "node $_name not ready after $NODE_TIMEOUT s (mounted: $_up; last answer of $_url: '${_code:-}')"
		sleep 0.1
	done
	say "  node $_name up: $(net_url "$_name"), pid $_pid"
}

# net_node_stop NAME: unmount; the daemon must end, with status 0.
net_node_stop() {
	eval "_pid=\${NODE_PID_$1:-}; _dir=\${NODE_MNT_$1:-}"
	[ -n "$_pid" ] || fail "net_node_stop: node $1 is not running"
	check "stop node $1: unmount, the daemon ends cleanly"
	# fusermount3 -u as a user would; umount where it is missing (or for
	# the selftest's stand-in node, which mounts a tmpfs)
	fusermount3 -u "$_dir" 2>/dev/null || umount "$_dir" || fail "cannot unmount $_dir"
	! is_mounted "$_dir" || fail "$_dir still mounted after unmount"
	wait_pid_exit "$_pid" 10 || fail "node $1 (pid $_pid) still running 10 s after unmount"
	wait "$_pid" && _st=0 || _st=$?
	net_node_forget "$1"
	[ "$_st" = 0 ] || fail "node $1: dmarfs exited with status $_st after unmount"
}

# net_node_kill NAME: SIGKILL (a crash), then detach the dead mount.
net_node_kill() {
	eval "_pid=\${NODE_PID_$1:-}; _dir=\${NODE_MNT_$1:-}"
	[ -n "$_pid" ] || fail "net_node_kill: node $1 is not running"
	check "kill node $1 (SIGKILL pid $_pid)"
	kill -9 "$_pid" 2>/dev/null || fail "node $1 (pid $_pid) was not running"
	wait_pid_exit "$_pid" 10 || fail "node $1 (pid $_pid) still there 10 s after SIGKILL"
	wait "$_pid" 2>/dev/null || :
	umount -l "$_dir" 2>/dev/null || fusermount3 -u -z "$_dir" 2>/dev/null || :
	net_node_forget "$1"
	! is_mounted "$_dir" || fail "$_dir still mounted after the lazy unmount"
}

# ---- measuring ------------------------------------------------------------------

# net_bytes NAME [DEV]: rx + tx bytes of DEV (default eth0) in NAME.
net_bytes() {
	net_exec "$1" cat /proc/net/dev | awk -v d="${2:-eth0}:" '
		{ sub(/^ */, "") }
		index($0, d) == 1 { sub(d, ""); split($0, f, " "); printf "%.0f\n", f[1] + f[9]; n = 1 }
		END { exit !n }' || fail "net_bytes: no ${2:-eth0} in $1"
}

# net_ping NAME ADDR [COUNT]: ICMP echo from NAME's namespace, one a second
# at most, each answered within 2 s; 0 if every echo was answered.  ping(8)
# if installed, else the same over a raw socket in python3.
net_ping() {
	if command -v ping >/dev/null 2>&1; then
		net_exec "$1" ping -n -q -c "${3:-1}" -W 2 "$2" >/dev/null 2>&1
		return
	fi
	net_exec "$1" "$NET_PY" -c '
import os, socket, struct, sys, time
addr, count = sys.argv[1], int(sys.argv[2])
def csum(b):
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    t = (t >> 16) + (t & 0xffff)
    return ~(t + (t >> 16)) & 0xffff
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
ident, got = os.getpid() & 0xffff, 0
for seq in range(1, count + 1):
    body = b"dmarfs-net-ping!"
    pkt = struct.pack("!BBHHH", 8, 0, csum(struct.pack("!BBHHH", 8, 0, 0, ident, seq) + body), ident, seq) + body
    t0 = time.monotonic()
    try:
        s.sendto(pkt, (addr, 0))
    except OSError as e:
        print("ping %s: %s" % (addr, e.strerror), file=sys.stderr)
        sys.exit(2)
    while time.monotonic() < t0 + 2:
        s.settimeout(max(0.01, t0 + 2 - time.monotonic()))
        try:
            data, src = s.recvfrom(2048)
        except socket.timeout:
            break
        ihl = (data[0] & 15) * 4
        typ, _, _, rid, rseq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
        if typ == 0 and rid == ident and rseq == seq and src[0] == addr:
            got += 1
            break
    if seq < count:
        time.sleep(max(0, t0 + 1 - time.monotonic()))
sys.exit(0 if got == count else 1)
' "$2" "${3:-1}"
}

# digest_tree DIR: one SHA-256 over the sorted "TYPE PATH DIGEST" lines of
# everything under DIR (files by content, links by target, dirs by name).
digest_tree() {
	# openssl over many files at once: a fork a file cost a minute for a
	# tree of 8,000
	(cd "$1" && { find . -mindepth 1 \( -type d -printf 'd %p\n' \) -o \( -type l -printf 'l %p %l\n' \)
		find . -type f -print0 | xargs -0 -r openssl dgst -sha256 -r | sed 's/^\([0-9a-f]*\) \*\(.*\)$/f \2 \1/'; } |
		LC_ALL=C sort | openssl dgst -sha256 -r | cut -d' ' -f1)
}
