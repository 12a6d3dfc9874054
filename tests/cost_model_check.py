#!/usr/bin/env python3
"""scripts/cost_model on the runs stored in tests/data/cost_model must print
what docs/benchmarks.md ("The cost model's terms") shows it printing, and
refuse a run it cannot fit (so the model's documented terms cannot drift
from the script)."""
import json
import os
import subprocess
import sys
import tempfile

script, data, doc = sys.argv[1], sys.argv[2], sys.argv[3]
runs = [os.path.join(data, f"window-{i}.json") for i in (1, 2, 3)]
hier = [os.path.join(data, f"hier-{i}.json") for i in (1, 2, 3)]
out = subprocess.run([sys.executable, script, *runs, "--hier", *hier], check=True, capture_output=True,
                     text=True).stdout
# From the fitted terms to the out-of-sample check's last line.
printed = out[out.index("Fitted at 2 ranks"):]
printed = printed[:printed.index("**One node")].rstrip()
text = open(doc).read()
start = text.index("### The cost model's terms")
block = text[text.index("Fitted at 2 ranks", start):]
block = block[:block.index("\nThe 8 B row")].rstrip()
if block != printed:
    sys.exit("docs/benchmarks.md's cost model block differs from scripts/cost_model's output:\n" + printed)
# The predictions docs/mpi.md ("The cost model") quotes: (table row, column
# of the size, value).
rows = {}
for line in out.splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if line.startswith("| ") and cells[0].isdigit():
        key = tuple(cells[:2]) if len(cells) > 9 else (cells[0],)
        rows[key] = cells[2:] if len(cells) > 9 else cells[1:]
quoted = [(("128",), 0, "1.18"), (("2",), 3, "0.79"), (("128", "64"), 6, "0.21"), (("2", "64"), 6, "1.27"),
          (("2", "2"), 1, "0.42"), (("8", "2"), 0, "0.44")]
for key, col, want in quoted:
    got = rows.get(key, [None] * 8)[col]
    if got != want:
        sys.exit(f"scripts/cost_model predicts {got} for row {key} column {col}; docs/mpi.md quotes {want}")

# A run with too few sizes is refused with a message, not fitted.
with open(runs[0]) as f:
    run = json.load(f)
run["rows"] = [r for r in run["rows"] if r["size"] <= 32]
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    json.dump(run, f)
bad = subprocess.run([sys.executable, script, f.name], capture_output=True, text=True)
os.unlink(f.name)
if bad.returncode == 0 or "needs sizes" not in bad.stderr:
    sys.exit(f"scripts/cost_model fitted a run of two sizes: rc {bad.returncode}, {bad.stderr!r}")
print("scripts/cost_model reproduces docs/benchmarks.md and refuses a run it cannot fit")
