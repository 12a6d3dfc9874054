// combine_n with more sources than one loop fuses (k = 5..8, the Threads
// fold above 4 ranks): GB/s of source data folded per second, best of 5 rounds.
//   ninja -C build benchmarks/fold_many && build/benchmarks/fold_many
// (docs/benchmarks.md, "Fewer kernel variants", has the command of its figures).
#include <polycoll/kernels/reduce.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

// at < k: in place, dst is srcs[at] (Threads' in-place reduce_scatter and
// all_reduce fold into their own rank's buffer); otherwise a separate dst.
template <polycoll::DType D, polycoll::ReduceOp Op>
double gbps(std::size_t k, std::size_t bytes, std::size_t at = SIZE_MAX) {
  using T = typename polycoll::dtype_tag<D>::type;
  const std::size_t n = bytes / sizeof(T);
  std::vector<std::vector<T>> data(k, std::vector<T>(n, T(1.0f)));
  std::vector<const T*> src(k);
  for (std::size_t i = 0; i < k; ++i) src[i] = data[i].data();
  std::vector<T> separate(n);
  T* const dst = at < k ? data[at].data() : separate.data();
  const std::size_t reps = std::max<std::size_t>(3, (std::size_t{64} << 20) / (bytes * k));
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t r = 0; r < reps; ++r) {
      polycoll::kernels::combine_n(polycoll::dtype_tag<D>{}, polycoll::op_tag<Op>{}, dst, src.data(), k, n,
                                   k);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    best = std::min(best, s);
  }
  if (static_cast<float>(dst[n / 2]) < 0) std::puts("");  // keep the result alive
  return static_cast<double>(k * bytes) / best / 1e9;
}

}  // namespace

int main() {
  std::printf("%-8s %3s %10s %8s\n", "dtype", "k", "bytes", "GB/s");
  for (std::size_t k : {5, 8}) {
    for (std::size_t bytes : {std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{16} << 20}) {
      std::printf("%-8s %3zu %10zu %8.2f\n", "f32 sum", k, bytes,
                  gbps<polycoll::DType::F32, polycoll::ReduceOp::Sum>(k, bytes));
      std::printf("%-8s %3zu %10zu %8.2f\n", "bf16 avg", k, bytes,
                  gbps<polycoll::DType::BF16, polycoll::ReduceOp::Avg>(k, bytes));
    }
  }
  // In place at rank 1: where the fold's pass order decides whether the block
  // is folded in the L1 staging buffer first (docs/benchmarks.md).
  for (std::size_t k : {5, 6}) {
    for (std::size_t bytes : {std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{16} << 20}) {
      std::printf("%-8s %3zu %10zu %8.2f\n", "f32 sum, dst = srcs[1]", k, bytes,
                  gbps<polycoll::DType::F32, polycoll::ReduceOp::Sum>(k, bytes, 1));
    }
  }
}
