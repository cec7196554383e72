#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Hostile and malformed requests against a node's REST API (node b, token
# set; every request made with curl or a raw socket from a's namespace):
#  - no token, a wrong one, another scheme: 401 with WWW-Authenticate, and
#    nothing changes (a DELETE or a mkdir with a wrong token does nothing);
#  - bodies over the limit: a Content-Length of 200 MiB is refused (413) at
#    once, a streamed chunked body past the limit gets 413 at its end;
#  - paths with "..", "//", "%00", "%2F..", "%2E%2E", bad escapes, long
#    components: 400, and nothing below or beside b's root changes;
#  - malformed JSON for POST /v1/transfers and PUT /v1/dirs, malformed
#    recipes (bad magic, truncated, bad checksum), a wrong Content-Type,
#    an id list not a multiple of 32 bytes, a malformed chunk batch: 400
#    (415) naming what is wrong;
#  - namespace errors: a commit over a directory, under a file, in no
#    directory, If-None-Match: * over a file (412), the root (400);
#  - an unknown endpoint 404, a wrong method 405 with Allow;
#  - 70 idle connections that send nothing (no token needed to open one)
#    must not lock an authenticated client out;
#  - GET /v1/node: name, arena.size, arena.used;
# and after all that b still serves (a cp through a/@b/), its daemon is
# alive and its log has no sanitizer report.  Last, a node refuses to
# listen on a non-loopback address without token=.
. "$(dirname "$0")/lib.sh"

WIRE="$NET_PY $top_srcdir/tests/net/wire.py"

net_setup
net_ns a
net_ns b
net_peers_file
net_token_file
net_node_start a "" size=256m
A=$NODE_MNT
net_node_start b "" size=256m
B=$NODE_MNT
BPID=$NODE_PID_b
S=$T/src
mkdir -p "$S"

mkprng "$S/victim.bin" $((4 * MiB)) 21
cp "$S/victim.bin" "$B/victim.bin" || fail "cp into b"
mkdir "$B/d" || fail "mkdir in b"
cp "$S/victim.bin" "$B/d/inner.bin" || fail "cp into b/d"
tree0=$(digest_tree "$B")

# unchanged WHAT: b's tree is as it was, and nothing named like what the
# path tricks aim at appeared anywhere under $T (b's mount is in there).
unchanged() {
	[ "$(digest_tree "$B")" = "$tree0" ] || fail "$1 changed b's tree: $(cd "$B" && find . | sort | tr '\n' ' ')"
	_esc=$(find "$T" -name 'escape*' -o -name 'newdir*' -o -name '*-new' | head -n 5)
	[ -z "$_esc" ] || fail "$1 made $_esc"
}

# alive: b's daemon runs and answers GET /v1/node.
alive() {
	kill -0 "$BPID" 2>/dev/null || fail "b's daemon (pid $BPID) died after $1"
	code=$(net_api a b GET /v1/node)
	[ "$code" = 200 ] || fail "b does not answer GET /v1/node after $1 ($code)"
}

# expect CODE WHAT METHOD PATH [CURLARGS]: one request from a to b.
expect() {
	_want=$1 _what=$2
	shift 2
	code=$(net_api a b "$@")
	[ "$code" = "$_want" ] || fail "$_what: $1 $2 answered $code, want $_want: $(head -c 400 "$T/api.body")"
}

# has_error PATTERN WHAT: the answer is JSON with an "error" matching PATTERN.
has_error() {
	_e=$(json_get "$T/api.body" error) || fail "$2: the answer has no JSON \"error\": $(head -c 400 "$T/api.body")"
	printf '%s\n' "$_e" | grep -Eqi -- "$1" || fail "$2: the error '$_e' does not say /$1/"
}

# noauth CURLARGS...: curl from a without the token's header.
noauth() {
	: >"$T/api.body"
	: >"$T/api.hdr"
	net_exec a curl -sS --path-as-is --connect-timeout 3 --max-time 30 -o "$T/api.body" -D "$T/api.hdr" \
		-w '%{http_code}' "$@" 2>"$T/api.err" || :
}

# ---- tokens ---------------------------------------------------------------------

check "no token: 401 with WWW-Authenticate: Bearer"
code=$(noauth "$(net_url b /v1/node)")
[ "$code" = 401 ] || fail "GET /v1/node without a token answered $code"
grep -qi '^WWW-Authenticate: *Bearer' "$T/api.hdr" || fail "the 401 has no WWW-Authenticate: Bearer: $(cat "$T/api.hdr")"
json_get "$T/api.body" error >/dev/null || fail "the 401 is not a JSON error: $(cat "$T/api.body")"

check "a wrong token, another scheme, the token with a byte more: 401, and nothing changes"
tok=$(head -n 1 "$NET_TOKEN")
for h in "Authorization: Bearer wrong" "Authorization: Bearer ${tok}x" "Authorization: Bearer $(printf '%s' "$tok" | cut -c 2-)" \
	"Authorization: Basic $(printf 'x:%s' "$tok" | base64 -w0)" "Authorization: $tok" "Authorization: Bearer"; do
	code=$(noauth -H "$h" "$(net_url b /v1/node)")
	[ "$code" = 401 ] || fail "GET /v1/node with '$(printf '%s' "$h" | cut -c 1-40)...' answered $code"
done
code=$(noauth -X DELETE -H "Authorization: Bearer wrong" "$(net_url b /v1/files/victim.bin)")
[ "$code" = 401 ] || fail "DELETE with a wrong token answered $code"
[ -f "$B/victim.bin" ] || fail "a DELETE with a wrong token removed victim.bin"
code=$(noauth -X PUT -H "Authorization: Bearer wrong" "$(net_url b /v1/dirs/newdir)")
[ "$code" = 401 ] || fail "PUT /v1/dirs with a wrong token answered $code"
$WIRE recipe "$T/r-empty" || fail "wire.py recipe"
code=$(noauth -X PUT -H "Authorization: Bearer wrong" -H 'Content-Type: application/x-dmar-recipe' \
	--data-binary "@$T/r-empty" "$(net_url b /v1/files/victim.bin)")
[ "$code" = 401 ] || fail "a commit over victim.bin with a wrong token answered $code"
code=$(noauth -X POST -H 'Content-Type: application/json' -d '{"path":"victim.bin","to":"a"}' "$(net_url b /v1/transfers)")
[ "$code" = 401 ] || fail "POST /v1/transfers without a token answered $code"
unchanged "requests with a wrong token"
[ ! -e "$A/victim.bin" ] || fail "a transfer without a token reached a"
alive "the 401s"

# ---- body limits ------------------------------------------------------------------

# rawreq OUT: send stdin's bytes to b from a on one connection; OUT gets
# the status line and the seconds until it came ("000" on no answer).
rawreq() {
	net_exec a "$NET_PY" -c '
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
t0 = time.monotonic()
s.sendall(sys.stdin.buffer.read())
got = b""
try:
    while b"\r\n" not in got:
        b = s.recv(4096)
        if not b:
            break
        got += b
except OSError:
    pass
line = got.split(b"\r\n")[0].decode("latin-1")
print((line.split(" ")[1] if line.startswith("HTTP/") else "000"), "%.1f" % (time.monotonic() - t0))
' "$(net_addr_of b)" "$NET_PORT" >"$1"
}

check "Content-Length of 200 MiB declared, a few bytes sent: 413 at once, and b still answers"
printf 'POST /v1/chunks HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer %s\r\nContent-Type: application/x-dmar-chunks\r\nContent-Length: %s\r\n\r\nDMCB\001' \
	"$tok" $((200 * MiB)) | rawreq "$T/api.raw"
read -r code secs <"$T/api.raw"
[ "$code" = 413 ] || fail "a declared 200 MiB body answered '$code' after $secs s"
say "  413 after $secs s"
printf 'PUT /v1/files/big.bin HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer %s\r\nContent-Type: application/x-dmar-recipe\r\nContent-Length: %s\r\n\r\nDMRC' \
	"$tok" $((200 * MiB)) | rawreq "$T/api.raw"
read -r code secs <"$T/api.raw"
[ "$code" = 413 ] || fail "a declared 200 MiB recipe answered '$code' after $secs s"
alive "a declared 200 MiB body"

# chunked URL CTYPE BYTES: POST BYTES in 64 KiB pieces with chunked
# transfer coding; prints the status ("000" if the connection broke).
chunked() {
	net_exec a "$NET_PY" -c '
import http.client, sys, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
total = int(sys.argv[3])
def body():
    left = total
    piece = b" " * 65536
    while left > 0:
        yield piece[:min(left, len(piece))]
        left -= len(piece)
try:
    c.request("POST", u.path, body=body(), encode_chunked=True,
              headers={"Authorization": "Bearer " + open(sys.argv[4]).readline().strip(), "Content-Type": sys.argv[2]})
    r = c.getresponse()
    sys.stdout.write("%d " % r.status)
    sys.stdout.write(r.read().decode("utf-8", "replace").replace("\n", " ")[:300] + "\n")
except OSError as e:
    print("000", e)
' "$1" "$2" "$3" "$NET_TOKEN"
}

check "a chunked JSON body past 1 MiB (POST /v1/transfers): 413 at its end"
out=$(chunked "$(net_url b /v1/transfers)" application/json $((3 * MiB / 2)))
case $out in 413*) ;; *) fail "a 1.5 MiB chunked JSON body answered: $out" ;; esac
alive "a chunked JSON body past the limit"

# The server reads at most one more limit's worth of a refused body, then
# drops the connection (net/server.c): a 413 or a closed connection, never
# a success, and the node lives on.
check "a chunked JSON body far past the limit (8 MiB): refused, the connection may be dropped"
out=$(chunked "$(net_url b /v1/transfers)" application/json $((8 * MiB)))
case $out in 413* | 000*) ;; *) fail "an 8 MiB chunked JSON body answered: $out" ;; esac
say "  ${out%% *}"
alive "a chunked JSON body far past the limit"

check "a chunked id list past 64 MiB (POST /v1/chunks/query): 413"
out=$(chunked "$(net_url b /v1/chunks/query)" application/octet-stream $((72 * MiB)))
case $out in 413*) ;; *) fail "a 72 MiB chunked query body answered: $out" ;; esac
alive "a chunked body past 64 MiB"

# ---- paths ------------------------------------------------------------------------

check "paths with '..', '//', '%00', '%2F..', '%2E%2E', bad escapes, long components: 400"
long=$(printf '%0256d' 0)
for p in ../victim.bin d/../victim.bin d/./inner.bin ./victim.bin d//inner.bin /victim.bin \
	victim.bin%00 victim.bin%00.txt d%2F..%2Fvictim.bin d/%2E%2E/victim.bin %2E%2E/%2E%2E/etc/passwd \
	d%2F%2Finner.bin %2Fetc%2Fpasswd victim.bin%zz victim.bin%2 d/.. "$long"; do
	expect 400 "GET of '$p'" GET "/v1/files/$p"
	[ "$(json_get "$T/api.body" errno)" = EINVAL ] || fail "GET of '$p': errno is not EINVAL: $(cat "$T/api.body")"
	expect 400 "DELETE of '$p'" DELETE "/v1/files/$p"
	expect 400 "mkdir of '$p/new'" PUT "/v1/dirs/$p/new"
	expect 400 "GET /v1/recipes/ of '$p'" GET "/v1/recipes/$p"
done
expect 400 "GET of '..'" GET "/v1/files/.."
has_error "'\.\.'|\.\." "GET of '..'"
expect 400 "GET with %00" GET "/v1/files/a%00b"
has_error 'NUL' "GET with %00"
$WIRE recipe "$T/r-one" || fail "wire.py recipe"
for p in ../escape.bin d/../../escape.bin ..%2Fescape.bin d%2F..%2F..%2Fescape.bin escape.bin%00; do
	expect 400 "commit at '$p'" PUT "/v1/files/$p" -H 'Content-Type: application/x-dmar-recipe' --data-binary "@$T/r-one"
done
for p in ../escape d/../../escape ..%2Fescape; do
	expect 400 "mkdir at '$p'" PUT "/v1/dirs/$p"
done
code=$(net_api a b POST /v1/transfers -H 'Content-Type: application/json' -d '{"path":"../victim.bin","to":"a"}')
[ "$code" = 400 ] || fail "a transfer of '../victim.bin' answered $code: $(cat "$T/api.body")"
code=$(net_api a b POST /v1/transfers -H 'Content-Type: application/json' -d '{"path":"victim.bin","to":"a","dest":"../escape.bin"}')
[ "$code" = 400 ] || fail "a transfer to dest '../escape.bin' answered $code: $(cat "$T/api.body")"
unchanged "the path tricks"
[ ! -e "$A/escape.bin" ] && [ ! -e "$A/victim.bin" ] || fail "a path trick made a file at a: $(ls "$A")"
[ ! -e "$T/escape.bin" ] && [ ! -e "$T/escape" ] && [ ! -e /escape.bin ] || fail "a path trick escaped b's root"
alive "the path tricks"

check "the name policy: '@' at the root, names not UTF-8, control characters: 400 naming why"
expect 400 "mkdir of '@a'" PUT /v1/dirs/@a
has_error "'@'" "mkdir of '@a'"
expect 400 "mkdir of '%40zz'" PUT /v1/dirs/%40zz
expect 400 "commit at '@a/x'" PUT /v1/files/@a/x -H 'Content-Type: application/x-dmar-recipe' --data-binary "@$T/r-one"
expect 400 "mkdir of a name not UTF-8" PUT /v1/dirs/bad%FFname
has_error "UTF-8" "mkdir of a name not UTF-8"
expect 400 "mkdir of a name with CR LF" PUT /v1/dirs/cr%0D%0Alf
has_error "control character" "mkdir of a name with CR LF"
code=$(net_api a b POST /v1/transfers -H 'Content-Type: application/json' -d '{"path":"victim.bin","to":"a","dest":"x\u0001y"}')
[ "$code" = 400 ] || fail "a transfer to a dest with a control character answered $code"
unchanged "the refused names"
check "'@' at the root is refused through the mount too (the peers' names)"
mkdir "$B/@zz" 2>/dev/null && fail "mkdir of @zz at b's root succeeded"
mkdir "$B/d/@fine" || fail "mkdir of @fine below the root"
rmdir "$B/d/@fine"
check "a file's stat object has its name; a name JSON cannot carry is counted, not listed"
expect 200 "GET of victim.bin" GET /v1/files/victim.bin
[ "$(json_get "$T/api.body" name)" = victim.bin ] || fail "GET of victim.bin: no name: $(head -c 300 "$T/api.body")"
expect 200 "GET of d/" GET /v1/files/d/
[ "$(json_get "$T/api.body" name)" = d ] || fail "GET of d/: name is not d: $(head -c 300 "$T/api.body")"
bad=$(printf 'not-utf8-\377')
: >"$B/d/$bad" || fail "a local file with a name not UTF-8"
expect 200 "GET of d" GET /v1/files/d
[ "$(json_get "$T/api.body" unlisted)" = 1 ] || fail "the listing of d does not count its unlisted name: $(head -c 400 "$T/api.body")"
rm "$B/d/$bad"

# ---- sizes and memory ---------------------------------------------------------------

check "a recipe with a 2^62-byte hole: 413 EFBIG, over max_file_size (16 x the arena, at least 16 TiB)"
$WIRE recipe "$T/r-huge" hole:4611686018427387904 || fail "wire.py recipe"
expect 413 "a 4 EiB file" PUT /v1/files/huge.bin -H 'Content-Type: application/x-dmar-recipe' --data-binary "@$T/r-huge"
has_error "max_file_size" "a 4 EiB file"
check "1,000,000 entries of one 4 KiB chunk, again and again: 507 EDQUOT before b's memory outside the arena passes mem_max"
cid=$($WIRE batch "$T/b-4k" good:77:4096) || fail "wire.py batch"
expect 200 "the 4 KiB chunk" POST /v1/chunks -H 'Content-Type: application/x-dmar-chunks' --data-binary "@$T/b-4k"
$WIRE recipe "$T/r-amp" "$cid:4096*1000000" || fail "wire.py recipe"
refused=0
for k in 1 2 3 4 5 6 7 8 9 10 11 12; do
	code=$(net_api a b PUT "/v1/files/amp$k" -H 'Content-Type: application/x-dmar-recipe' --data-binary "@$T/r-amp")
	case $code in
	201) ;;
	507) [ "$(json_get "$T/api.body" errno)" = EDQUOT ] || fail "commit $k: 507 but not EDQUOT: $(cat "$T/api.body")"
	     has_error "memory budget" "commit $k"
	     say "  commit $k refused: $(json_get "$T/api.body" error)"
	     refused=1
	     break ;;
	*) fail "commit $k of the amplifying recipe answered $code: $(head -c 300 "$T/api.body")" ;;
	esac
done
[ "$refused" = 1 ] || fail "12 commits of 1,000,000 entries each were all accepted"
anon=$(awk '/^RssAnon:/ { print $2 }' "/proc/$BPID/status")
say "  b: RssAnon $((anon / 1024)) MiB (mem_max 512 MiB)"
[ "$anon" -le $(((512 + ${API_MEM_SLACK_MIB:-64}) * 1024)) ] || fail "b's memory outside the arena is $((anon / 1024)) MiB, over mem_max"
rm -f "$B"/amp*
check_arena "$B" "b's arena after the amplifying commits"

# ---- malformed bodies -------------------------------------------------------------

check "malformed JSON to POST /v1/transfers and PUT /v1/dirs: 400 with a message"
for j in '{"path": "victim.bin",' 'not json' '[1,2]' '{"path": "victim.bin", "path": "x", "to": "a"}' \
	'{"path": 7, "to": "a"}' '{"path": "victim.bin"}' '{"path": "victim.bin", "to": ""}' \
	'{"path": "victim\u0000.bin", "to": "a"}'; do
	expect 400 "transfer with '$j'" POST /v1/transfers -H 'Content-Type: application/json' -d "$j"
	has_error . "transfer with '$j'"
done
expect 400 "transfer with bad JSON" POST /v1/transfers -H 'Content-Type: application/json' -d '{"path": '
has_error 'JSON' "transfer with truncated JSON"
for j in '{"mode": ' '{"mode": "0755"}' '{"mode": -1}' '{"mode": 65536}' '[493]' 'mode=493'; do
	expect 400 "mkdir with '$j'" PUT /v1/dirs/newdir -H 'Content-Type: application/json' -d "$j"
	has_error . "mkdir with '$j'"
	[ ! -e "$B/newdir" ] || fail "mkdir with '$j' made newdir although it was refused"
done
expect 404 "transfer to an unknown peer" POST /v1/transfers -H 'Content-Type: application/json' -d '{"path":"victim.bin","to":"nosuch"}'
unchanged "malformed JSON"

check "malformed recipes: 400 naming what is wrong (magic, length, checksum), 415 for another type"
vid=$($WIRE payload 1 100)
$WIRE recipe "$T/r-magic" --corrupt magic "$vid:100"
$WIRE recipe "$T/r-trunc" --corrupt truncate "$vid:100"
$WIRE recipe "$T/r-sum" --corrupt checksum "$vid:100"
head -c 20 "$T/r-sum" >"$T/r-short"
$WIRE recipe "$T/r-mode" --mode 0o100644 "$vid:100"
for c in "magic:magic" "trunc:truncated|bytes, but" "sum:checksum" "short:truncated" "mode:mode"; do
	f=${c%%:*}
	expect 400 "recipe $f" PUT /v1/files/victim.bin -H 'Content-Type: application/x-dmar-recipe' --data-binary "@$T/r-$f"
	has_error "${c#*:}" "recipe $f"
	[ "$(json_get "$T/api.body" errno)" = EBADMSG ] || fail "recipe $f: errno is not EBADMSG: $(cat "$T/api.body")"
done
expect 400 "an empty recipe body" PUT /v1/files/new.bin -H 'Content-Type: application/x-dmar-recipe' --data-binary ''
expect 415 "a recipe as application/json" PUT /v1/files/new.bin -H 'Content-Type: application/json' --data-binary "@$T/r-one"
expect 415 "a recipe without Content-Type" PUT /v1/files/new.bin -H 'Content-Type:' --data-binary "@$T/r-one"
unchanged "the malformed recipes"

check "id lists not a positive multiple of 32 bytes: 400"
head -c 33 /dev/zero >"$T/q-33"
head -c 31 /dev/zero >"$T/q-31"
for f in q-33 q-31; do
	expect 400 "query of $f" POST /v1/chunks/query -H "Content-Type: application/octet-stream" --data-binary "@$T/$f"
	has_error 'multiple of 32' "query of $f"
	expect 400 "fetch of $f" POST /v1/chunks/fetch -H "Content-Type: application/octet-stream" --data-binary "@$T/$f"
done
expect 400 "an empty query" POST /v1/chunks/query -H "Content-Type: application/octet-stream" --data-binary ''
expect 400 "GET /v1/chunks/ with a bad id" GET /v1/chunks/xyz
expect 400 "GET /v1/chunks/ with 63 hex digits" GET "/v1/chunks/$(printf '%063d' 0)"

check "malformed chunk batches: 400 naming what is wrong"
$WIRE batch "$T/bt-ok" good:31:1000 >/dev/null
{ printf 'XMCB'; tail -c +5 "$T/bt-ok"; } >"$T/bt-magic"
head -c 500 "$T/bt-ok" >"$T/bt-trunc"
{ cat "$T/bt-ok"; printf 'junk'; } >"$T/bt-extra"
for c in "magic:magic" "trunc:truncated" "extra:after the last record"; do
	f=${c%%:*}
	expect 400 "batch $f" POST /v1/chunks -H 'Content-Type: application/x-dmar-chunks' --data-binary "@$T/bt-$f"
	has_error "${c#*:}" "batch $f"
done

check "namespace errors: commit over a dir / under a file / in no dir, If-None-Match, the root"
$WIRE recipe "$T/r-zero" || fail "wire.py recipe"
for c in "400:d" "400:victim.bin/x" "404:nodir/x" "400:"; do
	expect "${c%%:*}" "commit at '${c#*:}'" PUT "/v1/files/${c#*:}" -H 'Content-Type: application/x-dmar-recipe' --data-binary "@$T/r-zero"
done
expect 412 "commit with If-None-Match: * over victim.bin" PUT /v1/files/victim.bin -H 'If-None-Match: *' \
	-H 'Content-Type: application/x-dmar-recipe' --data-binary "@$T/r-zero"
expect 400 "DELETE of the root" DELETE /v1/files
expect 400 "DELETE of the root/" DELETE /v1/files/
expect 409 "DELETE of a non-empty dir" DELETE /v1/files/d
expect 400 "mkdir under a file" PUT /v1/dirs/victim.bin/x
expect 400 "the recipe of a dir" GET /v1/recipes/d
unchanged "the namespace errors"

# ---- routing ----------------------------------------------------------------------

check "unknown endpoints 404, wrong methods 405 with Allow"
for p in /v1/nope /v2/node /x /v1 /v1/node/x /v1/filesx /v1/chunks/query/x /uix; do
	expect 404 "unknown endpoint" GET "$p"
done
expect 405 "DELETE /v1/node" DELETE /v1/node
grep -qi '^Allow: *GET' "$T/api.hdr" || fail "the 405 for DELETE /v1/node has no Allow: GET: $(cat "$T/api.hdr")"
expect 405 "POST /v1/files/x" POST /v1/files/victim.bin -d x
grep -i '^Allow:' "$T/api.hdr" | grep -q 'PUT' || fail "the 405 for POST /v1/files/ does not allow PUT: $(cat "$T/api.hdr")"
expect 405 "GET /v1/chunks/query" GET /v1/chunks/query
expect 405 "GET /v1/transfers" GET /v1/transfers
unchanged "the 404s and 405s"

check "GET /v1/node: JSON with name, arena.size, arena.used"
expect 200 "GET /v1/node" GET /v1/node
[ "$(json_get "$T/api.body" name)" = b ] || fail "GET /v1/node: name is not b: $(cat "$T/api.body")"
size=$(json_get "$T/api.body" arena.size) || fail "GET /v1/node: no arena.size"
used=$(json_get "$T/api.body" arena.used) || fail "GET /v1/node: no arena.used"
[ "$size" = $((256 * MiB)) ] || fail "GET /v1/node: arena.size is $size, the mount has size=256m"
[ "$used" -gt $((4 * MiB)) ] && [ "$used" -le "$size" ] || fail "GET /v1/node: arena.used $used (b holds 4 MiB of data)"
grep -qi '^Content-Type: *application/json' "$T/api.hdr" || fail "GET /v1/node is not application/json"

check "GET /v1/node: server.requests counts every request answered, server.connections every connection"
r0=$(json_get "$T/api.body" server.requests) || fail "GET /v1/node: no server.requests: $(cat "$T/api.body")"
n0=$(json_get "$T/api.body" server.connections) || fail "GET /v1/node: no server.connections"
for p in /v1/files /v1/files/nothing-here /v1/nope; do net_api a b GET "$p" >/dev/null; done
expect 200 "GET /v1/node" GET /v1/node
r1=$(json_get "$T/api.body" server.requests)
n1=$(json_get "$T/api.body" server.connections)
# three requests and this GET, each curl on a connection of its own
[ "$r1" = $((r0 + 4)) ] || fail "server.requests went from $r0 to $r1 over 4 requests"
[ "$n1" = $((n0 + 4)) ] || fail "server.connections went from $n0 to $n1 over 4 curl runs"

check "70 idle connections that never send a request do not lock authenticated clients out"
# Anyone who reaches the port can open them: no token is needed to hold
# a connection.  While they are open, GET /v1/node with the token must
# still be answered.
out=$(net_exec a "$NET_PY" -c '
import socket, subprocess, sys, time
ss = [socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) for _ in range(70)]
time.sleep(1)
r = subprocess.run(["curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "-H", "@" + sys.argv[3],
                    "http://%s:%s/v1/node" % (sys.argv[1], sys.argv[2])], capture_output=True, text=True)
print(r.stdout, r.stderr.strip())
' "$(net_addr_of b)" "$NET_PORT" "$NET_TOKEN.hdr")
case $out in 200*) ;; *) fail_later "with 70 idle unauthenticated connections open, GET /v1/node with the token got: $out" ;; esac
alive "70 idle connections (closed again)"

# ---- still serving ----------------------------------------------------------------

check "after all that b still serves: a cp through a/@b/ works; the daemon never crashed"
mkprng "$S/after.bin" $((16 * MiB)) 22
cp "$S/after.bin" "$A/@b/after.bin" || fail "cp into a/@b/ after the hostile requests failed"
[ "$(digest "$B/after.bin")" = "$(digest "$S/after.bin")" ] || fail "b's after.bin differs"
[ "$(digest "$B/victim.bin")" = "$(digest "$S/victim.bin")" ] || fail "victim.bin changed"
kill -0 "$BPID" 2>/dev/null || fail "b's daemon died"
[ "$NODE_PID_b" = "$BPID" ] || fail "b's daemon is not the one started"
if grep -Ei 'Sanitizer|runtime error|SUMMARY:|Segmentation|Aborted|double free|corrupted' "$T/dmarfs.b.log"; then
	fail "b's log has a crash or sanitizer report"
fi

net_node_stop a
net_node_stop b

# ---- listening without a token --------------------------------------------------

check "a node refuses to listen on a non-loopback address without token="
M=$T/mnt-plain
mkdir -p "$M"
CLEANUP_MOUNTS="${CLEANUP_MOUNTS:-} $M"
if timeout 30 nsenter --net="$(net_ns_path b)" "$DMARFS" plain "$M" -f \
	-o "size=64m,node=b,listen=$(net_addr_of b):$NET_PORT,peers=$NET_PEERS" >"$T/dmarfs.plain.log" 2>&1; then
	fail "dmarfs served $(net_addr_of b) without a token (exit 0): $(cat "$T/dmarfs.plain.log")"
else
	st=$?
fi
[ "$st" != 124 ] || fail "dmarfs listening on $(net_addr_of b) without a token was still running after 30 s"
grep -qi "token" "$T/dmarfs.plain.log" || fail "the refusal does not name token: $(cat "$T/dmarfs.plain.log")"
! is_mounted "$M" || fail "$M still mounted after the refusal"
say "  exit $st: $(grep -i token "$T/dmarfs.plain.log")"
check "... while loopback without a token is allowed"
net_spawn b "$T/dmarfs.loop.log" "$DMARFS" loop "$M" -f -o "size=64m,node=b,listen=127.0.0.1:$NET_PORT"
LPID=$NET_PID
CLEANUP_PIDS="${CLEANUP_PIDS:-} $LPID"
n=100
until [ "$(net_exec b curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$NET_PORT/v1/node" 2>/dev/null)" = 200 ]; do
	n=$((n - 1))
	[ "$n" -gt 0 ] && kill -0 "$LPID" 2>/dev/null || fail "a loopback node without a token did not come up: $(cat "$T/dmarfs.loop.log")"
	sleep 0.1
done
fusermount3 -u "$M" || fail "unmount the loopback node"
wait_pid_exit "$LPID" 10 || fail "the loopback node still runs after unmount"

finish
