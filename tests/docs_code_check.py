#!/usr/bin/env python3
"""Code blocks in docs that name a file must be that file, verbatim.

usage: docs_code_check.py ROOT DOC.md [MIN_BLOCKS]

A ```cpp block whose first line is `// examples/...: ...` quotes that file
(relative to ROOT), which the test suite builds and runs; the block must equal
the file so the page cannot rot. Fails when fewer than MIN_BLOCKS (default 1)
such blocks are found, so deleting them does not pass quietly.
"""
import pathlib
import re
import sys

if len(sys.argv) not in (3, 4):
    sys.exit(__doc__)
root, doc = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
minimum = int(sys.argv[3]) if len(sys.argv) == 4 else 1
blocks = re.findall(r"```cpp\n(.*?)```", doc.read_text(), re.S)
checked, bad = 0, []
for block in blocks:
    m = re.match(r"// (examples/[^:\s]+)", block)
    if not m:
        continue
    path = root / m.group(1)
    checked += 1
    if not path.exists():
        bad.append(f"{m.group(1)}: quoted in {doc.name} but does not exist")
    elif path.read_text() != block:
        bad.append(f"{m.group(1)}: {doc.name}'s copy differs from the file")
if checked < minimum:
    bad.append(f"{doc.name}: {checked} quoted file(s), expected at least {minimum}")
for b in bad:
    print(b, file=sys.stderr)
if not bad:
    print(f"{doc.name}: {checked} code block(s) match their files")
sys.exit(1 if bad else 0)
