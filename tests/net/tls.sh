#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Node-to-node TLS.  A throwaway CA signs a certificate for each of nodes a
# and b (subjectAltName = the node's address in its namespace); a third
# node c has a certificate from another CA.  Every node serves HTTPS
# (tls_cert=, tls_key=), trusts the first CA (tls_ca=) and needs the token:
#  - cp into a/@b/ ships a file over https: the SHA-256 at both ends is the
#    source's, and only the chunks cross (the veth count is about the file);
#  - b pulls through @a/, b ships to a (POST /v1/transfers), `dmar cp`
#    ships with --tls-ca: every direction and every client works over TLS;
#  - c's certificate is not signed by the CA: a refuses it, cp into a/@c/
#    fails and c has no file; so does `dmar cp` to c;
#  - plain http to a TLS node gets no answer (curl, and `dmar cp` with a
#    peers file that says http), and https without the CA is refused.
. "$(dirname "$0")/lib.sh"

: "${DMAR:=$top_builddir/dmar}"

net_setup
NET_SCHEME=https
net_ns a
net_ns b
net_ns c
net_peers_file
net_token_file
S=$T/src
P=$T/pki
mkdir -p "$S" "$P"

# ---- a throwaway PKI ------------------------------------------------------------

# mkca NAME: a self-signed CA (P-256) in $P/NAME.pem, its key $P/NAME.key.
mkca() {
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-subj "/CN=dmarfs test $1" -keyout "$P/$1.key" -out "$P/$1.pem" 2>"$P/$1.err" ||
		fail "openssl: cannot make the CA $1: $(cat "$P/$1.err")"
}

# mkcert NODE CA: a server certificate for NODE's address, signed by CA,
# in $P/NODE.pem and $P/NODE.key (mode 600).
mkcert() {
	_ip=$(net_addr_of "$1")
	(umask 077 && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-subj "/CN=$1" -keyout "$P/$1.key" -out "$P/$1.csr" 2>"$P/$1.err") ||
		fail "openssl: cannot make the key of $1: $(cat "$P/$1.err")"
	printf 'subjectAltName=IP:%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n' \
		"$_ip" >"$P/$1.ext"
	openssl x509 -req -in "$P/$1.csr" -CA "$P/$2.pem" -CAkey "$P/$2.key" -set_serial "0x$(openssl rand -hex 8)" \
		-days 2 -extfile "$P/$1.ext" -out "$P/$1.pem" 2>"$P/$1.err" ||
		fail "openssl: cannot sign the certificate of $1: $(cat "$P/$1.err")"
}

check "a throwaway CA signs certificates for a and b (SAN = their addresses); c's comes from another CA"
mkca ca
mkca rogue
mkcert a ca
mkcert b ca
mkcert c rogue
openssl verify -CAfile "$P/ca.pem" "$P/b.pem" >/dev/null 2>&1 || fail "openssl verify: b's certificate is not the CA's"
! openssl verify -CAfile "$P/ca.pem" "$P/c.pem" >/dev/null 2>&1 || fail "openssl verify accepts c's certificate"

tls_opts() { printf 'size=256m,tls_cert=%s,tls_key=%s,tls_ca=%s' "$P/$1.pem" "$P/$1.key" "$P/ca.pem"; }

NET_CACERT=$P/ca.pem
net_node_start a "" "$(tls_opts a)"
A=$NODE_MNT
net_node_start b "" "$(tls_opts b)"
B=$NODE_MNT
# c answers only to clients that trust its own CA: the harness's readiness
# check is one of them.
NET_CACERT=$P/rogue.pem
net_node_start c "" "$(tls_opts c)"
C=$NODE_MNT
NET_CACERT=$P/ca.pem

check "the API answers over https with the CA, and names the node"
[ "$(net_node_info b name)" = b ] || fail "GET /v1/node over https on b does not say b"

check "cp into a/@b/ ships the file over https; SHA-256 at both ends is the source's"
mkprng "$S/f.bin" $((24 * MiB)) 41
d=$(digest "$S/f.bin")
w0=$(net_bytes a)
cp "$S/f.bin" "$A/@b/f.bin" || fail "cp into a/@b/ over https failed: $(tail -n 5 "$T/dmarfs.a.log")"
sent=$(( $(net_bytes a) - w0 ))
[ -f "$B/f.bin" ] || fail "f.bin not at b after cp"
[ "$(openssl dgst -sha256 -r "$B/f.bin" | cut -d' ' -f1)" = "$d" ] || fail "b's f.bin differs from the source"
[ "$(openssl dgst -sha256 -r "$A/@b/f.bin" | cut -d' ' -f1)" = "$d" ] || fail "a/@b/f.bin differs from the source"
# TLS records add a little; random data does not compress.
[ "$sent" -ge $((24 * MiB)) ] && [ "$sent" -le $((27 * MiB)) ] ||
	fail "$(mib "$sent") crossed for 24 MiB of new data over https"
say "  24 MiB over https: $(mib "$sent") on the wire"

check "a second copy under another name sends no chunk over https either"
w0=$(net_bytes a)
cp "$S/f.bin" "$A/@b/f2.bin" || fail "second cp failed"
sent=$(( $(net_bytes a) - w0 ))
[ "$(digest "$B/f2.bin")" = "$d" ] || fail "b's f2.bin differs"
[ "$sent" -lt $((1 * MiB)) ] || fail "$(mib "$sent") crossed for a file b already holds"

check "b reads a file of a through b/@a/ (pull over https)"
mkprng "$S/g.bin" $((8 * MiB)) 42
cp "$S/g.bin" "$A/g.bin" || fail "cp into a"
[ "$(digest "$B/@a/g.bin")" = "$(digest "$S/g.bin")" ] || fail "b/@a/g.bin differs from the source"

check "POST /v1/transfers on b ships to a over https"
code=$(NET_CURL_MAX=120 net_api b b POST /v1/transfers -H 'Content-Type: application/json' \
	-d '{"path": "f.bin", "to": "a", "dest": "back.bin"}')
[ "$code" = 200 ] || fail "POST /v1/transfers answered $code: $(cat "$T/api.body" "$T/api.err")"
[ "$(digest "$A/back.bin")" = "$d" ] || fail "a's back.bin differs from the source"

if [ -x "$DMAR" ]; then
	check "dmar cp --tls-ca ships to b over https"
	mkprng "$S/h.bin" $((4 * MiB)) 43
	net_exec a "$DMAR" cp --peers "$NET_PEERS" --token "$NET_TOKEN" --tls-ca "$P/ca.pem" "$S/h.bin" b: \
		>"$T/dmarcp.out" 2>&1 || fail "dmar cp over https failed: $(cat "$T/dmarcp.out")"
	[ "$(digest "$B/h.bin")" = "$(digest "$S/h.bin")" ] || fail "b's h.bin differs from the source"

	check "dmar cp without the CA does not trust b's certificate"
	! net_exec a "$DMAR" cp --peers "$NET_PEERS" --token "$NET_TOKEN" "$S/h.bin" b:h-noca.bin \
		>"$T/dmarcp.out" 2>&1 || fail "dmar cp without --tls-ca succeeded"
	[ ! -e "$B/h-noca.bin" ] || fail "h-noca.bin is at b"

	check "dmar cp to c (a certificate from another CA) is refused"
	! net_exec a "$DMAR" cp --peers "$NET_PEERS" --token "$NET_TOKEN" --tls-ca "$P/ca.pem" "$S/h.bin" c: \
		>"$T/dmarcp.out" 2>&1 || fail "dmar cp to c succeeded"
	[ ! -e "$C/h.bin" ] || fail "h.bin is at c"
	say "  $(head -n 1 "$T/dmarcp.out")"

	check "dmar cp over plain http to the TLS node b fails"
	sed 's/ https$//' "$NET_PEERS" >"$T/peers.http"
	! net_exec a "$DMAR" cp --peers "$T/peers.http" --token "$NET_TOKEN" "$S/h.bin" b:h-http.bin \
		>"$T/dmarcp.out" 2>&1 || fail "dmar cp over http to a TLS node succeeded"
	[ ! -e "$B/h-http.bin" ] || fail "h-http.bin is at b"
else
	note "no $DMAR: dmar cp over https not tried"
fi

check "cp into a/@c/ is refused: c's certificate is not signed by the CA; c has no file"
if cp "$S/f.bin" "$A/@c/f.bin" 2>"$T/cp-c.err"; then
	fail "cp into a/@c/ succeeded with a certificate from another CA"
fi
say "  cp: $(head -n 1 "$T/cp-c.err")"
[ ! -e "$C/f.bin" ] || fail "f.bin is at c"
# Nothing was made at c by the refused attempts (its root: only the @ dirs).
[ -z "$(ls "$C" | grep -v '^@')" ] || fail "c has files: $(ls "$C" | tr '\n' ' ')"

check "plain http to the TLS node b gets no answer"
code=$(net_exec a curl -sS --connect-timeout 3 --max-time 10 -o /dev/null -w '%{http_code}' \
	-H "@$NET_TOKEN.hdr" "http://$(net_addr_of b):$NET_PORT/v1/node" 2>"$T/http.err") && rc=0 || rc=$?
[ "$rc" != 0 ] || fail "curl over plain http to b exited 0 (HTTP $code)"
[ "$code" != 200 ] || fail "b answered 200 over plain http"
say "  curl http://: exit $rc, $(head -n 1 "$T/http.err")"

check "https to b without the CA is refused by curl (b's certificate is not a public one)"
! net_exec a curl -sS --connect-timeout 3 --max-time 10 -o /dev/null -H "@$NET_TOKEN.hdr" \
	"https://$(net_addr_of b):$NET_PORT/v1/node" 2>/dev/null || fail "curl trusted b without the CA"

check "b still serves https after the refused handshakes"
[ "$(net_node_info b name)" = b ] || fail "b stopped answering"
[ "$(digest "$A/@b/f.bin")" = "$d" ] || fail "a/@b/f.bin differs after the failures"

net_node_stop a
net_node_stop b
net_node_stop c
finish
