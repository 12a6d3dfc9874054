#!/usr/bin/env bash
# Installs polycoll into a scratch prefix, then builds and runs one consumer
# program three ways: CMake find_package(polycoll), meson via pkg-config, and
# meson with polycoll as a subproject; each way in both modes, linking
# libpolycoll and header-only (POLYCOLL_HEADER_ONLY), whose seed-surface
# results must be identical. The program (main.cpp) uses every backend
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
# -O0: what this test checks is the package, not the library's speed, and at
# the default -O3 the library's build was most of this test's time. Two
# compiler jobs at most (here and for the subproject below): the test may
# share the machine with another.
meson setup "$work/polycoll" "$src" --prefix="$prefix" --wrap-mode=nodownload -Dtests=false -Dbenchmarks=false \
  -Doptimization=0 "$@" >/dev/null
ninja -C "$work/polycoll" -j 2 >/dev/null
meson install -C "$work/polycoll" --quiet --no-rebuild
test -f "$prefix/include/polycoll/config.hpp"
cmake_dir=$(dirname "$(find "$prefix" -name polycollConfig.cmake | head -n1)")
pc_dir=$(dirname "$(find "$prefix" -name polycoll.pc | head -n1)")
lib_dir=$(dirname "$(find "$prefix" -name 'libpolycoll.so.*' | head -n1)")
# The soname carries the version.
soname=$(readelf -d "$(find "$lib_dir" -name 'libpolycoll.so.*.*.*' | head -n1)" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
echo "== libpolycoll soname: $soname"
[[ "$soname" =~ ^libpolycoll\.so\.[0-9]+ ]]
export LD_LIBRARY_PATH=$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# run_consumer EXE MODE: runs it; checks the mode it reports and that it links
# libpolycoll exactly when compiled; keeps its output in EXE.out.
run_consumer() {
  "$1" | tee "$1.out"
  grep -qx "mode: ${2/_/-}" "$1.out"
  if [ "$2" = compiled ]; then
    readelf -d "$1" | grep -q "NEEDED.*\[$soname\]"
  else
    ! readelf -d "$1" | grep -q 'NEEDED.*libpolycoll'
  fi
}

echo "== CMake: find_package(polycoll) from $cmake_dir"
cp -r "$src/tests/consumers/cmake" "$src/tests/consumers/main.cpp" "$work/"
cmake -S "$work/cmake" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
run_consumer "$work/cmake-build/consumer" compiled
echo "== CMake: polycoll::header_only"
cmake -S "$work/cmake" -B "$work/cmake-build-ho" -DCMAKE_PREFIX_PATH="$prefix" \
  -DPOLYCOLL_TARGET=polycoll::header_only >/dev/null
cmake --build "$work/cmake-build-ho" >/dev/null
run_consumer "$work/cmake-build-ho/consumer" header_only
echo "== CMake: find_package(polycoll 9.0) must be refused by polycollConfigVersion.cmake"
if cmake -S "$work/cmake" -B "$work/cmake-build-9" -DCMAKE_PREFIX_PATH="$prefix" -DPOLYCOLL_WANT=9.0 \
  >"$work/cmake-9.log" 2>&1; then
  echo "find_package(polycoll 9.0) succeeded against polycoll $(grep -o 'PACKAGE_VERSION "[^"]*"' "$cmake_dir/polycollConfigVersion.cmake")"
  exit 1
fi
grep -q "compatible with requested version \"9.0\"" "$work/cmake-9.log"  # refused for the version, not another error

echo "== meson: dependency('polycoll') via pkg-config from $pc_dir"
cp -r "$src/tests/consumers/meson_pc" "$work/"
for mode in compiled header_only; do
  [ $mode = compiled ] || echo "== meson: dependency('polycoll-header-only') via pkg-config"
  PKG_CONFIG_PATH="$pc_dir" meson setup "$work/meson_pc-$mode" "$work/meson_pc" -Dmode=$mode >/dev/null
  ninja -C "$work/meson_pc-$mode" >/dev/null
  run_consumer "$work/meson_pc-$mode/consumer" $mode
done

echo "== meson: polycoll as a subproject"
cp -r "$src/tests/consumers/meson_sub" "$work/"
mkdir -p "$work/meson_sub/subprojects"
ln -s "$src" "$work/meson_sub/subprojects/polycoll"
sub_opts=()
for o in "$@"; do sub_opts+=("${o/#-D/-Dpolycoll:}"); done
for mode in compiled header_only; do
  [ $mode = compiled ] || echo "== meson: the subproject's header_only dependency"
  meson setup "$work/meson_sub-$mode" "$work/meson_sub" --wrap-mode=nodownload -Dmode=$mode "${sub_opts[@]}" >/dev/null
  # The consumer target only: header-only mode must not need libpolycoll built.
  ninja -C "$work/meson_sub-$mode" -j 2 consumer >/dev/null
  run_consumer "$work/meson_sub-$mode/consumer" $mode
done

echo "== the seed surface gives the same results in both modes"
digests=$(cat "$work"/*/consumer.out | grep '^seed digest: ' | sort -u)
echo "$digests"
[ "$(echo "$digests" | wc -l)" = 1 ]

# CUDA users compile .cu files with nvcc: the package's compile flags must be
# ones nvcc accepts (it rejects -pthread). MPICH's own link flags (-Wl,...) are
# not nvcc's, so the host compiler links, as CUDA builds usually do.
nvcc=$(command -v nvcc || true)
[ -n "$nvcc" ] || nvcc=$(ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
if [ -n "$nvcc" ]; then
  echo "== nvcc: a .cu file compiled with nvcc \$(pkg-config --cflags polycoll)"
  cuda_lib=$(dirname "$(dirname "$nvcc")")/lib64
  read -r -a cflags <<<"$(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags polycoll)"
  read -r -a libs <<<"$(PKG_CONFIG_PATH="$pc_dir" pkg-config --libs polycoll)"
  # The compiled mode: the .cu file sees the extern template declarations.
  "$nvcc" "${cflags[@]}" -c "$src/tests/consumers/nvcc_consumer.cu" -o "$work/nvcc_consumer.o"
  c++ "$work/nvcc_consumer.o" -o "$work/nvcc_consumer" "${libs[@]}" -L"$cuda_lib" -lcudart -Wl,-rpath,"$cuda_lib"
  "$work/nvcc_consumer"
else
  echo "== nvcc: not found; the CUDA consumer is not built"
fi

# Built with the tl-expected fallback subproject (no system libexpected-dev),
# the installation must carry <tl/expected.hpp>: its headers include it. The
# subproject is made from the system's header and polycoll's packagefile, in a
# copy of the source tree (the wrap cannot download here). Configuring is
# enough: meson's install plan (introspect --installed) and the generated CMake
# package are fixed at setup, and building the library again would cost a
# minute of this test for nothing it checks.
if [ -f /usr/include/tl/expected.hpp ]; then
  echo "== the tl-expected fallback installs its header"
  copy=$work/fallback-src
  mkdir -p "$copy/subprojects/tl-expected/include/tl"
  mkdir -p "$copy/tests"
  cp -r "$src/meson.build" "$src/meson_options.txt" "$src/include" "$src/src" "$src/cmake" "$src/docs" "$copy/"
  cp "$src/tests/doxygen_check.py" "$copy/tests/"
  cp -r "$src/subprojects/packagefiles" "$src/subprojects/tl-expected.wrap" "$copy/subprojects/"
  cp "$src/subprojects/packagefiles/tl-expected/meson.build" "$copy/subprojects/tl-expected/"
  cp /usr/include/tl/expected.hpp "$copy/subprojects/tl-expected/include/tl/"
  meson setup "$work/fallback" "$copy" --prefix="$work/fallback-prefix" --wrap-mode=nodownload \
    --force-fallback-for=tl-expected -Dtests=false -Dbenchmarks=false "$@" >/dev/null
  meson introspect "$work/fallback" --installed >"$work/fallback-installed.json"
  if ! grep -q "\"$work/fallback-prefix/include/tl/expected.hpp\"" "$work/fallback-installed.json"; then
    echo "the fallback build does not install <tl/expected.hpp>"
    exit 1
  fi
  grep -q 'POLYCOLL_EXPECTED_INSTALLED' "$src/cmake/polycollConfig.cmake.in"
  if grep -q 'find_dependency(tl-expected)' "$work/fallback/polycollConfig.cmake" &&
    ! grep -q 'if(NOT TRUE)' "$work/fallback/polycollConfig.cmake"; then
    echo "the fallback build's CMake package still requires the system tl-expected"
    exit 1
  fi
fi
echo "all consumers built and ran"
