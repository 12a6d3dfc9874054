// The floating min/max kernels against sum on the same operands, k = 2 (the
// step every backend's fold repeats): GB/s of source data, best of 5 rounds.
// Min and max select an operand in both orders and merge the two, so that
// -0 < +0 whatever the order (kernels/reduce.hpp); this measures what that costs.
//   g++ -std=c++20 -O2 -DPOLYCOLL_HEADER_ONLY -Iinclude -Ibuild/include benchmarks/micro/minmax.cpp -o minmax
// (docs/benchmarks.md, "Order-free min and max", has the figures.)
#include <polycoll/kernels/reduce.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <vector>

namespace {

template <polycoll::DType D, polycoll::ReduceOp Op>
double gbps(std::size_t bytes) {
  using T = typename polycoll::dtype_tag<D>::type;
  const std::size_t n = bytes / sizeof(T);
  // Mixed signs and magnitudes, so that neither selection is always taken.
  std::vector<T> a(n), b(n), out(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = T(static_cast<float>(static_cast<int>(i % 97) - 48));
    b[i] = T(static_cast<float>(static_cast<int>(i % 89) - 44));
  }
  const T* src[2] = {a.data(), b.data()};
  const std::size_t reps = std::max<std::size_t>(3, (std::size_t{256} << 20) / (bytes * 2));
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t r = 0; r < reps; ++r) {
      polycoll::kernels::combine_n(polycoll::dtype_tag<D>{}, polycoll::op_tag<Op>{}, out.data(), src, 2, n, 2);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    best = std::min(best, s);
  }
  if (static_cast<float>(out[n / 2]) < -1e9f) std::puts("");  // keep the result alive
  return static_cast<double>(2 * bytes) / best / 1e9;
}

template <polycoll::DType D>
void row(const char* name, std::size_t bytes) {
  using polycoll::ReduceOp;
  const double sum = gbps<D, ReduceOp::Sum>(bytes);
  const double min = gbps<D, ReduceOp::Min>(bytes);
  const double max = gbps<D, ReduceOp::Max>(bytes);
  std::printf("%-6s %10zu %8.2f %8.2f %8.2f %8.2f %8.2f\n", name, bytes, sum, min, max, min / sum, max / sum);
}

}  // namespace

int main() {
  std::printf("%-6s %10s %8s %8s %8s %8s %8s\n", "dtype", "bytes", "sum", "min", "max", "min/sum", "max/sum");
  for (std::size_t bytes : {std::size_t{16} << 10, std::size_t{4} << 20}) {
    row<polycoll::DType::F32>("f32", bytes);
    row<polycoll::DType::F64>("f64", bytes);
    row<polycoll::DType::BF16>("bf16", bytes);
    row<polycoll::DType::F16>("f16", bytes);
  }
}
