#!/usr/bin/env python3
"""Compile-fail check: the source must fail to compile with the expected
message, and must compile when POLYCOLL_CONTROL is defined (so the failure is
the intended one, not a typo). With --max-lines N the compiler's whole
diagnostic must be at most N lines (a misuse gets one short static_assert,
not a dump of every overload's failed constraints).

usage: check.py SOURCE EXPECTED_SUBSTRING [--max-lines N] -- COMPILER ARGS...
"""
import subprocess
import sys

def main() -> int:
    sep = sys.argv.index("--")
    source, expected = sys.argv[1], sys.argv[2]
    options = sys.argv[3:sep]
    max_lines = int(options[options.index("--max-lines") + 1]) if "--max-lines" in options else None
    compiler = sys.argv[sep + 1:]
    base = compiler + ["-fsyntax-only", source]
    control = subprocess.run(base + ["-DPOLYCOLL_CONTROL"], capture_output=True, text=True)
    if control.returncode != 0:
        print("control build failed, the test is broken:\n" + control.stderr)
        return 1
    bad = subprocess.run(base, capture_output=True, text=True)
    if bad.returncode == 0:
        print(f"{source} compiled, but must not")
        return 1
    if expected not in bad.stderr:
        print(f"{source} failed to compile, but without '{expected}':\n{bad.stderr[:4000]}")
        return 1
    lines = len(bad.stderr.splitlines())
    if max_lines is not None and lines > max_lines:
        print(f"{source} fails with '{expected}', but in {lines} lines of diagnostics (at most {max_lines}):\n"
              + bad.stderr[:4000])
        return 1
    print(f"ok: {source} fails with '{expected}'" + (f" in {lines} lines" if max_lines is not None else ""))
    return 0

if __name__ == "__main__":
    sys.exit(main())
