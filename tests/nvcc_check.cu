// Compiled by nvcc -std=c++20: the umbrella header must be valid CUDA C++.
#include <polycoll/polycoll.hpp>

__global__ void touch(float* p) { p[threadIdx.x] += 1.0f; }

int main() {
  polycoll::NoOp comm;
  float v[4] = {1, 2, 3, 4};
  return comm.all_reduce(std::span<float>(v), polycoll::sum) ? 0 : 1;
}
