#!/usr/bin/env python3
"""scripts/cost_model on the runs stored in tests/data/cost_model must print
what docs/benchmarks.md ("The cost model's terms": the fits and the checks)
and docs/mpi.md ("The cost model": the --summary block) show it printing,
and refuse a run it cannot fit, so that the documented figures cannot drift
from the script.

usage: cost_model_check.py SCRIPT DATA_DIR BENCHMARKS.md MPI.md
"""
import json
import os
import subprocess
import sys
import tempfile

if len(sys.argv) != 5:
    sys.exit(__doc__)
script, data, benchmarks, mpi = sys.argv[1:]
runs = [os.path.join(data, f"window-{i}.json") for i in (1, 2, 3)]
hier = [os.path.join(data, f"hier-{i}.json") for i in (1, 2, 3)]


def run(*args):
    r = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"scripts/cost_model {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r.stdout


failures = []

# docs/benchmarks.md: from the fitted terms to the out-of-sample check.
out = run(*runs, "--hier", *hier)
printed = out[out.index("Fitted at 2 ranks"):out.index("**One node")].rstrip()
text = open(benchmarks).read()
start = text.index("### The cost model's terms")
block = text[text.index("Fitted at 2 ranks", start):]
block = block[:block.index("\nThe 8 B row")].rstrip()
if block != printed:
    failures.append("docs/benchmarks.md's block differs from scripts/cost_model's output:\n" + printed)

# docs/mpi.md: the --summary block, verbatim.
summary = run(*runs, "--summary")
text = open(mpi).read()
start = text.index("### The cost model")
fence = text.index("```\n", text.index("--summary` prints", start)) + 4
block = text[fence:text.index("```", fence)]
if block != summary:
    failures.append("docs/mpi.md's --summary block differs from scripts/cost_model's output:\n" + summary)

# A run with too few sizes is refused with a message, not fitted.
with open(runs[0]) as f:
    short = json.load(f)
short["rows"] = [r for r in short["rows"] if r["size"] <= 32]
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    json.dump(short, f)
bad = subprocess.run([sys.executable, script, f.name], capture_output=True, text=True)
os.unlink(f.name)
if bad.returncode == 0 or "needs sizes" not in bad.stderr:
    failures.append(f"scripts/cost_model fitted a run of two sizes: rc {bad.returncode}, {bad.stderr!r}")

if failures:
    sys.exit("\n".join(failures))
print("scripts/cost_model prints what docs/benchmarks.md and docs/mpi.md show, and refuses a run it cannot fit")
