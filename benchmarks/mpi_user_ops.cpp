// mpi_user_ops: the Mpi backend's user MPI_Op bodies timed on one core, no MPI
// communication: what each reduction costs per element, next to memcpy as the
// memory-bandwidth reference. "user_fn" is what MPI calls (the AVX2 clone where
// the build lacks AVX2 and the CPU has it); "baseline" is reduce_body, the same
// unit compiled for the build's target only. Best of 15 passes.
//
//   build-dir/tests/mpi/mpi_user_ops [elements per operand, default 4 Mi]
#include <polycoll/backends/mpi.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using namespace polycoll;
using Clock = std::chrono::steady_clock;

template <class F>
double best_of(F f) {
  double b = 1e30;
  for (int r = 0; r < 15; ++r) {
    const auto a = Clock::now();
    f();
    b = std::min(b, std::chrono::duration<double>(Clock::now() - a).count());
  }
  return b;
}

template <DType D, ReduceOp Op>
void time_op(std::size_t n) {
  using T = typename dtype_tag<D>::type;
  std::vector<T> in(n), io(n);
  int len = static_cast<int>(n);
  const double f = best_of([&] { detail::mpi::user_fn<D, Op>(in.data(), io.data(), &len, nullptr); });
  const double b = best_of([&] { detail::mpi::reduce_body<D, Op>(in.data(), io.data(), n); });
  std::printf("  %-6s %-4s %13.3f %14.3f %8.2f\n", std::string(name(D)).c_str(), std::string(name(Op)).c_str(),
              f / static_cast<double>(n) * 1e9, b / static_cast<double>(n) * 1e9, b / f);
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : (std::size_t{4} << 20);
  std::vector<char> src(4 * n, 1), dst(4 * n);
  const double c = best_of([&] { std::memcpy(dst.data(), src.data(), 4 * n); });
  std::printf("# mpi_user_ops: %zu elements per operand; memcpy of %zu B: %.2f GB/s\n", n, 4 * n,
              static_cast<double>(4 * n) / c / 1e9);
  std::printf("# %-6s %-4s %13s %14s %8s\n", "dtype", "op", "user_fn_ns/el", "baseline_ns/el", "speedup");
  time_op<DType::F32, ReduceOp::Sum>(n);
  time_op<DType::BF16, ReduceOp::Sum>(n);
  time_op<DType::BF16, ReduceOp::Max>(n);
  time_op<DType::F16, ReduceOp::Sum>(n);
  time_op<DType::F8E4M3, ReduceOp::Sum>(n);
  time_op<DType::F8E5M2, ReduceOp::Sum>(n);
  return 0;
}
