#!/usr/bin/env bash
# Test (suite 'benchmark'): --csv and --json are written and well-formed, and
# scripts/plot turns the JSON into a PNG (exit 77 = skipped without matplotlib).
#   smoke_outputs.sh PERF_BINARY SCRIPTS_PLOT
set -euo pipefail
perf=$1
plot=$2
# Debian's python3-matplotlib belongs to /usr/bin/python3 (a python3 earlier on PATH may lack it).
py=/usr/bin/python3
[ -x "$py" ] || py=python3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$perf" all_reduce all_gather reduce scatter all_to_all -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 -t 2 --vs-native \
  --csv "$dir/r.csv" --json "$dir/r.json"
"$py" - "$dir/r.json" "$dir/r.csv" <<'PY'
import csv, json, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
assert d["backend"] == "threads" and d["ranks"] == 2 and rows, d
assert d["baseline"]["memcpy_2thread_gbps"] > 0 and d["baseline"]["cache_line_rtt_us"] > 0, d["baseline"]
for r in rows:
    for k in ("out_of_place", "in_place"):
        m = r[k]
        if m:
            assert m["wrong"] == 0 and m["time_us"] > 0 and m["native_us"] > 0 and m["ratio"] > 0, r
colls = {r["collective"] for r in rows}
assert colls == {"all_reduce", "all_gather", "reduce", "scatter", "all_to_all"}, colls
for r in rows:
    rooted = r["collective"] in ("reduce", "scatter")
    assert r["root"] == (0 if rooted else -1), r
    assert (r["in_place"] is None) == (r["collective"] == "all_to_all"), r
c = list(csv.DictReader(open(sys.argv[2])))
assert len(c) == sum((r["out_of_place"] is not None) + (r["in_place"] is not None) for r in rows), len(c)
assert all(x["wrong"] == "0" and float(x["busbw_gbps"]) >= 0 for x in c)
print(f"json: {len(rows)} rows, csv: {len(c)} lines: OK")
PY
if ! "$py" -c 'import matplotlib' 2>/dev/null; then
  echo "python3-matplotlib is missing: plot not tested"
  exit 77
fi
"$py" "$plot" "$dir/r.json" -o "$dir/r.png"
"$py" - "$dir/r.png" <<'PY'
import sys
head = open(sys.argv[1], "rb").read(8)
assert head == b"\x89PNG\r\n\x1a\n", head
print("png: OK")
PY
