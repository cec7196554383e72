#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The web view (GET /ui/, net/ui/) and the mesh it draws (GET /v1/mesh):
# two nodes with a token, a's link shaped to 100 Mbit/s.
#  1. the page's files come without the token, with their types and a
#     Content-Security-Policy; / redirects to /ui/; an unknown file is 404;
#     /v1/mesh needs the token, and lists a (this node) and b, reachable,
#     with their arenas; a websocket that offers the token as the
#     subprotocol dmar.token.HEX is answered 101 with dmar.v1, a wrong
#     one 401;
#  2. in headless Chromium (DevTools protocol, tests/net/cdp.py): /ui/
#     without a token asks for it; /ui/#token=SECRET shows both nodes
#     reachable and takes the token out of the address bar; while a cp of
#     32 MiB into a's @b/ runs, the page shows the transfer in progress
#     (0 < bytes done < size), then done with every byte, and the chart
#     has samples with wire and effective speed above 0; the screenshot is
#     kept as tests/net/web.png (WEB_SHOT=PATH: elsewhere);
#  3. b stopped: the page shows b unreachable (within 10 s).
. "$(dirname "$0")/lib.sh"

here=$(cd "$(dirname "$0")" && pwd)
"$NET_PY" -c 'import websocket' 2>/dev/null ||
	skip "no websocket module for $NET_PY (python3-websocket)"
command -v chromium >/dev/null 2>&1 || skip "no chromium (Debian's chromium package)"
net_setup
net_ns a
net_ns b
net_peers_file
net_token_file
net_node_start a "" size=256m
A=$NODE_MNT
net_node_start b "" size=256m
SIZE=$((32 * MiB))
mkprng "$T/f" "$SIZE" 21
secret=$(head -n 1 "$NET_TOKEN")
# noauth PATH: GET a's PATH without the token; the status on stdout
noauth() {
	net_exec a curl -sS --path-as-is --max-time 10 -o "$T/api.body" -D "$T/api.hdr" -w '%{http_code}' \
		"$(net_url a "$1")" 2>"$T/api.err" || :
}

check "the page's files without the token; / redirects; an unknown file is 404"
for f in "" index.html app.js style.css; do
	st=$(noauth "/ui/$f")
	[ "$st" = 200 ] || fail "GET /ui/$f without the token: $st $(head -c 200 "$T/api.body")"
	case $f in *.js) want=text/javascript ;; *.css) want=text/css ;; *) want=text/html ;; esac
	grep -qi "^content-type: $want" "$T/api.hdr" || fail "/ui/$f: $(grep -i '^content-type' "$T/api.hdr")"
	grep -qi "^content-security-policy: default-src 'none'" "$T/api.hdr" || fail "/ui/$f has no CSP"
done
[ "$(noauth /)" = 302 ] || fail "GET / without the token is not a redirect"
grep -qi '^location: /ui/' "$T/api.hdr" || fail "GET /: $(grep -i '^location' "$T/api.hdr")"
[ "$(noauth /ui/nothing.js)" = 404 ] || fail "GET /ui/nothing.js is not 404"
# a way out of /ui/ is a bad path, and answers nothing of the node's
[ "$(noauth /ui/../v1/node)" = 400 ] || fail "GET /ui/../v1/node without the token: not 400"
[ "$(noauth /v1/node)" = 401 ] || fail "GET /v1/node without the token: not 401"

check "GET /v1/mesh: 401 without the token; with it a and b, reachable, with their arenas"
[ "$(noauth /v1/mesh)" = 401 ] || fail "GET /v1/mesh without the token is not 401"
[ "$(net_api a a GET /v1/mesh)" = 200 ] || fail "GET /v1/mesh: $(cat "$T/api.body")"
"$NET_PY" - "$T/api.body" <<'PY' || fail "the mesh (above): $(cat "$T/api.body")"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["node"] == "a", m["node"]
rows = {r["name"]: r for r in m["nodes"]}
assert sorted(rows) == ["a", "b"], sorted(rows)
assert rows["a"].get("self") is True and "self" not in rows["b"], m
for n, r in rows.items():
    assert r["reachable"] is True, (n, r)
    assert r["node"]["name"] == n, (n, r["node"]["name"])
    assert r["node"]["arena"]["size"] == 256 << 20, (n, r["node"]["arena"])
    assert r["ms"] >= 0, r
print("  mesh: " + ", ".join("%s %.1f ms" % (n, r["ms"]) for n, r in sorted(rows.items())))
PY

check "the event stream takes the token as a websocket subprotocol"
net_exec a "$NET_PY" - "$(net_addr_of a)" "$NET_PORT" "$secret" <<'PY' || fail "the websocket handshakes (above)"
import base64, os, socket, sys
host, port, secret = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def handshake(protocols):
    s = socket.create_connection((host, port), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(("GET /v1/events HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Protocol: %s\r\n\r\n"
               % (host, port, key, protocols)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(4096)
        if not b:
            break
        head += b
    s.close()
    lines = head.decode("latin-1").split("\r\n")
    return int(lines[0].split()[1]), {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
st, h = handshake("dmar.v1, dmar.token." + secret.encode().hex())
assert st == 101, "with the token as a subprotocol: %d" % st
assert h.get("sec-websocket-protocol") == "dmar.v1", h
st, _ = handshake("dmar.v1, dmar.token." + ("x" + secret[1:]).encode().hex())
assert st == 401, "with a wrong token: %d" % st
st, _ = handshake("dmar.v1")
assert st == 401, "with no token: %d" % st
PY

check "headless Chromium: the page asks for the token, then shows a and b"
net_exec a tc qdisc add dev eth0 root tbf rate 100mbit burst 256kb latency 200ms || fail "cannot shape a's eth0"
shot=${WEB_SHOT:-$(pwd)/tests/net/web.png}
mkdir -p "$(dirname "$shot")"
net_exec a env PYTHONPATH="$here" "$NET_PY" - "$(net_url a /ui/)" "$secret" "$A/@b/f" "$T/f" "$SIZE" "$shot" \
	"$(net_url b)" <<'PY' >"$T/web.out" 2>&1 &
import json, subprocess, sys, time
import cdp
url, secret, dst, src, size, shot = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
b = cdp.Browser()
def row(node):
    return "document.querySelector('#nodes tr[data-node=\"%s\"]')" % node
try:
    b.goto(url)
    assert b.wait("!document.getElementById('login').hidden", 10), "no token: the page did not ask for one"
    b.goto("about:blank")
    b.goto(url + "#token=" + secret)
    ok = b.wait(" && ".join("%s && %s.dataset.reachable === 'true'" % (row(n), row(n)) for n in "ab"), 15)
    assert ok, "a and b not both shown reachable: " + str(b.js("document.getElementById('nodes').innerText"))
    assert "token" not in b.js("location.href"), "the token stayed in the address bar"
    assert b.wait("document.getElementById('link').dataset.state === 'live'", 10), "the event stream is not live"
    print("  page: a and b reachable; arena of b: %s" % b.js(row("b") + ".cells[4].innerText"))
    cp = subprocess.Popen(["cp", src, dst])
    t0 = time.monotonic()
    running = "document.querySelector('#transfers tr[data-state=\"running\"]')"
    got = b.wait("(r => r && +r.dataset.logical > 0 && +r.dataset.logical < +r.dataset.size && [+r.dataset.logical, +r.dataset.size])(%s)" % running, 30, every=0.05)
    assert got, "no transfer shown in progress: " + str(b.js("document.getElementById('transfers').innerText"))
    print("  in progress after %.1f s: %d of %d bytes" % (time.monotonic() - t0, got[0], got[1]))
    assert cp.wait(timeout=120) == 0, "cp into @b/ failed"
    done = "document.querySelector('#transfers tr[data-state=\"done\"]')"
    got = b.wait("(r => r && [+r.dataset.logical, +r.dataset.wire])(%s)" % done, 10)
    assert got and got[0] == size, "the transfer is not shown done with %d bytes: %s" % (size, got)
    print("  done: %d bytes, %d on the wire" % (got[0], got[1]))
    chart = b.wait("(c => +c.dataset.peakEffective > 0 && +c.dataset.peakWire > 0 && [+c.dataset.samples, +c.dataset.peakEffective, +c.dataset.peakWire])(document.getElementById('chart'))", 5)
    assert chart, "the chart drew no speed: " + str(b.js("JSON.stringify(document.getElementById('chart').dataset)"))
    print("  chart: %d samples, peaks effective %.1f MB/s, wire %.1f MB/s" % tuple(chart))
    b.screenshot(shot)
    print("READY")
    sys.stdout.flush()
    # 3: the harness stops b; the page must show it
    for _ in range(600):
        try:
            if open(shot + ".stop").read():
                break
        except OSError:
            time.sleep(0.1)
    ok = b.wait("%s && %s.dataset.reachable === 'false'" % (row("b"), row("b")), 10)
    assert ok, "b stopped but shown: " + str(b.js(row("b") + " && " + row("b") + ".innerText"))
    print("  b stopped: %s" % b.js(row("b") + ".innerText").replace("\t", " | "))
    print("PASS")
finally:
    b.close()
PY
web=$!
CLEANUP_PIDS=$web
n=0
while ! grep -q '^READY' "$T/web.out" 2>/dev/null; do
	kill -0 "$web" 2>/dev/null || { cat "$T/web.out"; fail "the browser check failed (above)"; }
	n=$((n + 1))
	[ "$n" -lt 1800 ] || fail "the browser check took over 180 s: $(cat "$T/web.out")"
	sleep 0.1
done
sed -n '/^  /p' "$T/web.out"
[ -s "$shot" ] && [ "$(head -c 4 "$shot" | od -An -c | tr -d ' ')" = '211PNG' ] ||
	fail "no PNG screenshot at $shot"
say "  screenshot: $shot ($(fsize "$shot") bytes)"
[ "$(digest "$T/mnt-b/f")" = "$(digest "$T/f")" ] || fail "b's copy differs"

check "b stopped: the page shows it unreachable"
net_node_stop b
echo stop >"$shot.stop"
wait "$web" && st=0 || st=$?
CLEANUP_PIDS=""
rm -f "$shot.stop"
sed -n '/^  b stopped/p' "$T/web.out"
[ "$st" = 0 ] && grep -q '^PASS' "$T/web.out" || fail "the browser check: $(tail -5 "$T/web.out")"
net_exec a tc qdisc del dev eth0 root || fail "cannot unshape a's eth0"
check_arena "$A" "a's arena"
finish
