// A CUDA translation unit built against an installed polycoll with
// `nvcc $(pkg-config --cflags polycoll)`: the package's compile flags must be
// ones nvcc accepts. It sums over three Threads ranks and checks the answer.
#include <polycoll/polycoll.hpp>

#include <cstdio>
#include <span>
#include <vector>

__global__ void unused_kernel(float* p) { p[threadIdx.x] += 1.0f; }

int main() {
  std::vector<float> sums(3);
  const auto status = polycoll::Threads::run(3, [&](polycoll::Threads& comm) {
    std::vector<float> v(16, static_cast<float>(comm.rank() + 1));
    if (comm.all_reduce(std::span<float>(v), polycoll::sum) && comm.sync()) sums[comm.rank()] = v[15];
  });
  const bool ok = status && sums[0] == 6.0f && sums[1] == 6.0f && sums[2] == 6.0f;
  std::printf("nvcc consumer: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
