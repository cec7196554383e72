#!/bin/sh
# SPDX-License-Identifier: MIT
#
# GET /metrics (net/metrics.h): two nodes; after a cp into @b/ and a
# request without the token, both nodes' metrics parse with the
# Prometheus client's own parser (python3-prometheus-client), every family
# has the type its name promises, histograms add up (cumulative buckets,
# +Inf equal to _count), and the figures say what happened: a's transfer
# done with its bytes, b's requests by route and status, the refusal by
# reason, b's arena holding the file.  Without the token /metrics is 401.
. "$(dirname "$0")/lib.sh"

"$NET_PY" -c 'import prometheus_client.parser' 2>/dev/null ||
	{ echo "SKIP: no prometheus_client for $NET_PY (python3-prometheus-client)"; exit 77; }
net_setup
net_ns a
net_ns b
net_peers_file
net_token_file
net_node_start a "" size=256m
A=$NODE_MNT
net_node_start b "" size=256m
mkprng "$T/f" $((3 * MiB)) 4

check "a cp into @b/ and a request without the token"
cp "$T/f" "$A/@b/f" || fail "cp into @b/"
st=$(net_exec a curl -s -o /dev/null -w '%{http_code}' "$(net_url b /v1/node)")
[ "$st" = 401 ] || fail "GET /v1/node without the token: $st"
st=$(net_exec a curl -s -o /dev/null -w '%{http_code}' "$(net_url b /metrics)")
[ "$st" = 401 ] || fail "GET /metrics without the token: $st"

check "GET /metrics of a and b: text/plain version 0.0.4"
for n in a b; do
	st=$(net_api a $n GET /metrics)
	[ "$st" = 200 ] || fail "GET /metrics of $n: $st $(cat "$T/api.body")"
	grep -qi '^content-type: text/plain; version=0.0.4' "$T/api.hdr" || fail "$n: $(grep -i content-type "$T/api.hdr")"
	cp "$T/api.body" "$T/metrics.$n"
done

check "both parse, and the figures say what happened"
"$NET_PY" - "$T/metrics.a" "$T/metrics.b" $((3 * MiB)) <<'PY' || fail "the metrics (above)"
import sys
from prometheus_client.parser import text_string_to_metric_families

def load(path):
    fams = {}
    for f in text_string_to_metric_families(open(path).read()):
        assert f.name not in fams, "family %s twice" % f.name
        fams[f.name] = f
    return fams

def value(fams, name, **labels):
    # a sample's family: counters lose _total, histograms their suffixes
    fam = None
    for suffix in ("", "_total", "_count", "_sum", "_bucket"):
        if suffix == "" or name.endswith(suffix):
            fam = fams.get(name[:len(name) - len(suffix)] if suffix else name)
            if fam:
                break
    if not fam:
        return -1
    for s in fam.samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return -1  # absent

bad = []
def want(ok, what):
    if not ok:
        bad.append(what)

size = int(sys.argv[3])
a, b = load(sys.argv[1]), load(sys.argv[2])
for who, fams in (("a", a), ("b", b)):
    for name, f in fams.items():
        # the parser strips _total from counters' family names
        kind = "counter" if name.endswith("_total") or f.type == "counter" else None
        if kind:
            want(f.type == "counter", "%s: %s is %s, not counter" % (who, name, f.type))
        want(f.documentation, "%s: %s has no HELP" % (who, name))
        if f.type == "histogram":
            by = {}
            for s in f.samples:
                key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                by.setdefault(key, {"b": [], "count": None})
                if s.name.endswith("_bucket"):
                    by[key]["b"].append((float(s.labels["le"]), s.value))
                elif s.name.endswith("_count"):
                    by[key]["count"] = s.value
            for key, h in by.items():
                vals = [v for _, v in sorted(h["b"])]
                want(vals == sorted(vals), "%s: %s%s buckets not cumulative" % (who, name, key))
                want(h["b"] and sorted(h["b"])[-1][0] == float("inf") and vals[-1] == h["count"],
                     "%s: %s%s: +Inf bucket is not _count" % (who, name, key))
    for name in ("dmar_build_info", "dmar_arena_size_bytes", "dmar_arena_used_bytes", "dmar_chunks",
                 "dmar_encode_backlog_files", "dmar_http_requests", "dmar_http_request_duration_seconds",
                 "dmar_transfers", "dmar_transfer_effective_speed_bytes_per_second"):
        want(name in fams, "%s: no %s" % (who, name))

want(value(a, "dmar_transfers_total", result="done") >= 1, "a: no transfer done")
want(value(a, "dmar_transfer_logical_bytes_total") >= size, "a: transfer bytes %s" % value(a, "dmar_transfer_logical_bytes_total"))
want(value(a, "dmar_transfer_wire_bytes_total") > 0, "a: no wire bytes")
want(value(a, "dmar_transfer_effective_speed_bytes_per_second_count") >= 1, "a: no speed observed")
want(value(b, "dmar_arena_used_bytes") >= size, "b: arena used %s" % value(b, "dmar_arena_used_bytes"))
want(value(b, "dmar_arena_size_bytes") == 256 << 20, "b: arena size %s" % value(b, "dmar_arena_size_bytes"))
want(value(b, "dmar_chunks") >= 1, "b: no chunks")
want(value(b, "dmar_http_refusals_total", reason="EKEYREJECTED") >= 2, "b: refusals %s" % value(b, "dmar_http_refusals_total", reason="EKEYREJECTED"))
ok = [s for s in b["dmar_http_requests"].samples
      if s.labels["route"] in ("POST /v1/tree", "PUT /v1/files", "POST /v1/chunks") and s.labels["code"].startswith("2")]
want(ok, "b: no successful commit counted by route")
# refused before routing: counted as route "other"
want(value(b, "dmar_http_requests_total", route="other", code="401") >= 2, "b: the 401s not counted")
want(value(b, "dmar_http_requests_total", route="GET /v1/node", code="200") >= 1, "b: GET /v1/node not counted")
want(value(b, "dmar_http_request_duration_seconds_count", route="GET /v1/node") >= 1, "b: GET /v1/node latencies")
for m in bad:
    print("  " + m)
print("  a: %d families, b: %d; b served %d commit answers" % (len(a), len(b), sum(s.value for s in ok)))
sys.exit(1 if bad else 0)
PY
say "PASS: metrics"
