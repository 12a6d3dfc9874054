#!/usr/bin/env python3
"""Instantiation check: compiles SOURCE to an object at -O0 (every template the
TU instantiates is then emitted, nothing inlined away) and reads its symbols
with `nm -C`. Fails if a polycoll symbol names a dtype other than DTYPE (a
DType discriminant), a kernel unit of another element type, or an op outside
OPS; or if a symbol containing an --expect string is missing (so the TU really
reached the backend). Prints how many backend paths and kernels it found.

usage: check.py SOURCE DTYPE ELEMENT OPS [--expect S]... -- NM COMPILER ARGS...
  DTYPE: discriminant, e.g. 1 for f32; ELEMENT: its C++ type as nm spells it
  (float); OPS: comma-separated ReduceOp discriminants allowed, or '-' for none.
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

COUNTED = ["_impl", "combine", "combine_n", "fold_n", "run_pass", "fold_pass", "chunked", "binary_loop"]


def function_name(symbol: str):
    """The COUNTED entry a function symbol instantiates (its name without
    template arguments ends in it), or None (other symbols, and entities
    nested in a function, such as its lambdas)."""
    depth, start = 0, 0
    for i, ch in enumerate(symbol):
        if ch in "<{":
            depth += 1
        elif ch in ">}":
            depth -= 1
        elif ch == " " and depth == 0:
            start = i + 1
        elif ch == "(" and depth == 0:
            close, d = i, 0
            for j in range(i, len(symbol)):
                d += symbol[j] == "("
                d -= symbol[j] == ")"
                if d == 0:
                    close = j
                    break
            if symbol[close + 1:].startswith("::"):
                return None
            name, d = "", 0
            for c in symbol[start:i]:
                d += c == "<"
                if d == 0:
                    name += c
                d -= c == ">"
            last = name.rsplit("::", 1)[-1]
            if last in COUNTED:
                return last
            return "_impl" if last.endswith("_impl") else None
    return None


def main() -> int:
    sep = sys.argv.index("--")
    args = sys.argv[1:sep]
    nm, compiler = sys.argv[sep + 1], sys.argv[sep + 2:]
    source, dtype, element, ops = args[:4]
    expect = [args[i + 1] for i in range(4, len(args)) if args[i] == "--expect"]
    library = [args[i + 1] for i in range(4, len(args)) if args[i] == "--library"]
    allowed_ops = set() if ops == "-" else set(ops.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        obj = os.path.join(tmp, "tu.o")
        build = subprocess.run(compiler + ["-O0", "-c", source, "-o", obj], capture_output=True, text=True)
        if build.returncode != 0:
            print("compile failed:\n" + build.stderr[:4000])
            return 1
        listing = subprocess.run([nm, "-C", obj], capture_output=True, text=True, check=True).stdout.splitlines()
    # nm: "ADDRESS TYPE NAME", or "TYPE NAME" padded for an undefined symbol (U).
    listing = [line.split(None, 2) if not line.startswith(" ") else ["", *line.split(None, 1)] for line in listing]
    listing = [(kind, name) for _, kind, name in (e for e in listing if len(e) == 3) if "polycoll::" in name]
    symbols = [name for _, name in listing]
    defined = [name for kind, name in listing if kind not in ("U", "w", "v")]
    bad = []
    for s in symbols:
        dtypes = set(re.findall(r"\(polycoll::DType\)(\d+)", s))
        found_ops = set(re.findall(r"\(polycoll::ReduceOp\)(\d+)", s))
        units = re.findall(r"polycoll::kernels::detail::(\w+_unit)<([^,>]*)", s)
        wrong_unit = [u for u in units if u[0] == "bool_unit" or u[1] != element]
        if dtypes - {dtype} or found_ops - allowed_ops or wrong_unit:
            bad.append(s)
    counts = collections.Counter(name for name in map(function_name, symbols) if name)
    print(f"{source}: " + ", ".join(f"{k} {counts[k]}" for k in COUNTED))
    missing = [e for e in expect if not any(e in s for s in symbols)]
    for e in missing:
        print(f"expected a symbol containing '{e}', none found: the TU no longer reaches the backend")
    held = [s for s in defined if any(lib in s for lib in library)]
    if held:
        print(f"{len(held)} definitions of what libpolycoll holds ({', '.join(library)}); the first ones:")
        for s in held[:8]:
            print("  " + s[:300])
    if bad:
        print(f"{len(bad)} instantiations outside dtype {dtype} ({element}), ops {ops}; the first ones:")
        for s in bad[:8]:
            print("  " + s[:300])
    return 1 if bad or missing or held else 0


if __name__ == "__main__":
    sys.exit(main())
