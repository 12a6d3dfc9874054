// The Catch2 main of the Nccl suites. Without a usable GPU it first checks
// that the backend says so as an Error (no crash, no hang), then exits 77, which
// meson reports as SKIP: nothing here passes silently without a GPU.
// Catch2's implementation is in ../catch_impl.cpp, compiled once.
#include "../catch_run.hpp"

#include <cstdio>

#include "fixture.hpp"

int main(int argc, char** argv) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    const int device = 0;
    auto made = polycoll::Nccl::init_all(std::span<const int>(&device, 1));
    if (made) {
      std::fprintf(stderr, "FAIL: cudaGetDeviceCount reports no GPU but Nccl::init_all succeeded\n");
      return 1;
    }
    std::fprintf(stderr, "SKIPPED: no CUDA device (%s); Nccl::init_all says: %s\n",
                 e != cudaSuccess ? cudaGetErrorName(e) : "0 devices", made.error().message.c_str());
    return 77;
  }
  std::fprintf(stderr, "polycoll Nccl tests on %d GPU(s)\n", n);
  if (n == 1) {
    // NCCL puts one rank on one device (two ranks on one GPU fail at init), so
    // one GPU runs every suite at world size 1 only; the multi-rank paths
    // (mismatch across ranks, split into several groups) need 2+ GPUs.
    std::fprintf(stderr, "one GPU: world size 1 only (NCCL cannot put two ranks on one device); the parts of "
                         "the cases that need 2+ ranks (cross-rank mismatch, multi-group split) do not run\n");
  }
  bool bad_command_line = false;
  const int failed = polycoll::test::run_catch(argc, argv, nullptr, &bad_command_line);
  polycoll::test::nccl_cache().clear();  // before the CUDA runtime shuts down
  return failed > 255 ? 255 : failed;
}
