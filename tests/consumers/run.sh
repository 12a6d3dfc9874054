#!/usr/bin/env bash
# Installs polycoll into a scratch prefix, then builds and runs one consumer
# program three ways: CMake find_package(polycoll), meson via pkg-config, and
# meson with polycoll as a subproject. The program (main.cpp) uses every backend
# the installation has, so each way must carry MPI's, cudart's and NCCL's
# include paths and libraries; MPI runs as a singleton world (no mpiexec).  usage: run.sh SOURCE_ROOT WORKDIR [meson options...]
set -euo pipefail
src=$(cd "$1" && pwd)
work=$2
shift 2
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

echo "== install into $prefix"
meson setup "$work/polycoll" "$src" --prefix="$prefix" --wrap-mode=nodownload -Dtests=false -Dbenchmarks=false "$@" >/dev/null
meson install -C "$work/polycoll" --quiet
test -f "$prefix/include/polycoll/config.hpp"
cmake_dir=$(dirname "$(find "$prefix" -name polycollConfig.cmake | head -n1)")
pc_dir=$(dirname "$(find "$prefix" -name polycoll.pc | head -n1)")

echo "== CMake: find_package(polycoll) from $cmake_dir"
cp -r "$src/tests/consumers/cmake" "$src/tests/consumers/main.cpp" "$work/"
cmake -S "$work/cmake" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
"$work/cmake-build/consumer"
echo "== CMake: find_package(polycoll 9.0) must be refused by polycollConfigVersion.cmake"
if cmake -S "$work/cmake" -B "$work/cmake-build-9" -DCMAKE_PREFIX_PATH="$prefix" -DPOLYCOLL_WANT=9.0 \
  >"$work/cmake-9.log" 2>&1; then
  echo "find_package(polycoll 9.0) succeeded against polycoll $(grep -o 'PACKAGE_VERSION "[^"]*"' "$cmake_dir/polycollConfigVersion.cmake")"
  exit 1
fi
grep -q "compatible with requested version \"9.0\"" "$work/cmake-9.log"  # refused for the version, not another error

echo "== meson: dependency('polycoll') via pkg-config from $pc_dir"
cp -r "$src/tests/consumers/meson_pc" "$work/"
PKG_CONFIG_PATH="$pc_dir" meson setup "$work/meson_pc-build" "$work/meson_pc" >/dev/null
ninja -C "$work/meson_pc-build" >/dev/null
"$work/meson_pc-build/consumer"

echo "== meson: polycoll as a subproject"
cp -r "$src/tests/consumers/meson_sub" "$work/"
mkdir -p "$work/meson_sub/subprojects"
ln -s "$src" "$work/meson_sub/subprojects/polycoll"
sub_opts=()
for o in "$@"; do sub_opts+=("${o/#-D/-Dpolycoll:}"); done
meson setup "$work/meson_sub-build" "$work/meson_sub" --wrap-mode=nodownload "${sub_opts[@]}" >/dev/null
ninja -C "$work/meson_sub-build" >/dev/null
"$work/meson_sub-build/consumer"
echo "all three consumers built and ran"
