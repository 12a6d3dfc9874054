#!/usr/bin/env bash
# Builds the libFuzzer target with clang (ASan + UBSan) and runs it for a
# bounded time on a copy of the corpus kept in fuzz/corpus.
# usage: run.sh SOURCE_ROOT BUILD_INCLUDE_DIR WORKDIR [seconds]
set -euo pipefail
src=$1 build_inc=$2 work=$3 seconds=${4:-${POLYCOLL_FUZZ_SECONDS:-60}}
mkdir -p "$work"
exe=$work/fuzz_any
# Header-only (POLYCOLL_HEADER_ONLY): the fuzzer is one clang-built TU with its
# own sanitizers, not linked against the library the meson build made.
clang++ -std=c++20 -DPOLYCOLL_HEADER_ONLY -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Wno-pass-failed \
  -I"$src/include" -I"$build_inc" "$src/fuzz/fuzz_any.cpp" -o "$exe" -pthread
rm -rf "$work/corpus"
cp -r "$src/fuzz/corpus" "$work/corpus"
cd "$work"
# The recommended-dictionary lines (they start with a quote) would push the
# INITED/DONE lines with cov and ft out of the tail.
# -error_exitcode=1: libFuzzer's default, 77, is what meson reads as SKIP, so a
# crash found would not fail the test.
"$exe" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 -error_exitcode=1 \
  -timeout_exitcode=1 corpus 2>&1 | grep -v '^"' | tail -n 25
