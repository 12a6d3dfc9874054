#!/usr/bin/env python3
"""Builds the Doxygen API reference and fails when a public entity is undocumented.

usage: doxygen_check.py DOXYGEN|"" DOXYFILE_IN SOURCE_INCLUDE BUILD_INCLUDE OUTDIR VERSION

SOURCE_INCLUDE is the repository's include/ (headers), BUILD_INCLUDE the build
tree's include/ (the generated polycoll/config.hpp). The HTML lands in
OUTDIR/html. Every Doxygen warning fails the check: an undocumented entity of
namespace polycoll (detail namespaces are excluded by the Doxyfile), and a
malformed comment. Before the real run, a self-test on a two-line header proves
that an undocumented public function is reported and an undocumented
polycoll::detail one is not, so the check cannot pass by seeing nothing.
An empty DOXYGEN (not installed) exits 77: meson reports SKIP, not a pass.
"""
import pathlib
import subprocess
import sys
import tempfile


def configure(template: str, out: pathlib.Path, inputs, strip, version: str) -> pathlib.Path:
    text = (template.replace("@VERSION@", version)
            .replace("@OUTPUT@", str(out))
            .replace("@INPUT@", " ".join(str(i) for i in inputs))
            .replace("@STRIP_BUILD@", str(strip[1]))
            .replace("@STRIP@", str(strip[0])))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "Doxyfile"
    path.write_text(text)
    return path


def run(doxygen: str, doxyfile: pathlib.Path, out: pathlib.Path):
    log = out / "warnings.log"
    if log.exists():
        log.unlink()
    proc = subprocess.run([doxygen, str(doxyfile)], cwd=out, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"doxygen failed with exit status {proc.returncode}")
    return [line for line in log.read_text().splitlines() if line.strip()] if log.exists() else []


def self_test(doxygen: str, template: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        inc = root / "include"
        inc.mkdir()
        (inc / "probe.hpp").write_text(
            "#pragma once\n/// @file probe.hpp\n/// A probe.\nnamespace polycoll {\n"
            "/// Documented.\ninline int documented() { return 1; }\n"
            "inline int undocumented_public() { return 2; }\n"
            "namespace detail {\ninline int undocumented_internal() { return 3; }\n}\n}\n")
        doxyfile = configure(template, root / "out", [inc], (inc, inc), "0")
        warnings = run(doxygen, doxyfile, root / "out")
        public = [w for w in warnings if "undocumented_public" in w]
        internal = [w for w in warnings if "undocumented_internal" in w or "documented()" in w]
        if len(public) != 1 or internal or len(warnings) != 1:
            raise SystemExit("self-test: expected exactly one warning, for undocumented_public; got:\n  "
                             + "\n  ".join(warnings or ["(none)"]))


def main() -> int:
    if len(sys.argv) != 7:
        print(__doc__, file=sys.stderr)
        return 2
    doxygen, template_path, src_inc, build_inc, outdir, version = sys.argv[1:]
    if not doxygen:
        print("SKIPPED: doxygen is not installed (Debian package doxygen)", file=sys.stderr)
        return 77
    template = pathlib.Path(template_path).read_text()
    self_test(doxygen, template)
    src_inc, build_inc, out = pathlib.Path(src_inc).resolve(), pathlib.Path(build_inc).resolve(), pathlib.Path(outdir).resolve()
    config = build_inc / "polycoll" / "config.hpp"
    if not config.exists():
        raise SystemExit(f"{config} is missing: configure the build first")
    readme = src_inc.parent / "README.md"  # the main page
    doxyfile = configure(template, out, [readme, src_inc / "polycoll", config], (src_inc, build_inc), version)
    with open(doxyfile, "a") as f:
        f.write(f"USE_MDFILE_AS_MAINPAGE = {readme}\n")
    warnings = run(doxygen, doxyfile, out)
    index = out / "html" / "index.html"
    must_exist = ["classpolycoll_1_1Communicator.html", "classpolycoll_1_1AnyCommunicator.html",
                  "classpolycoll_1_1StreamSyncOps.html", "structpolycoll_1_1Options.html"]
    missing = [m for m in must_exist if not (out / "html" / m).exists()]
    if not index.exists() or missing:
        print(f"the HTML reference lacks {index if not index.exists() else ', '.join(missing)}", file=sys.stderr)
        return 1
    if warnings:
        print(f"{len(warnings)} Doxygen warning(s): every public entity needs a /// comment", file=sys.stderr)
        for w in warnings:
            print("  " + w, file=sys.stderr)
        return 1
    pages = len(list((out / "html").glob("*.html")))
    print(f"API reference: {index} ({pages} pages), no undocumented public entity")
    return 0


if __name__ == "__main__":
    sys.exit(main())
