// Options::on_error / POLYCOLL_ON_ERROR on Nccl (docs/reliability.md, "Abort
// on error"): one rank on device 0 makes one failing call (argv[1] names the
// scenario); under abort the communicator is aborted (ncclCommAbort) and the
// process dies by SIGABRT with the fatal line. Without a GPU it exits 77
// (meson's SKIP), after checking that the factory says so as an Error.
#include <polycoll/backends/nccl.hpp>
#include "death_common.hpp"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>

namespace {

using death::returned;
using polycoll::DType;
using polycoll::OnError;
using polycoll::Options;
using polycoll::ReduceOp;
using polycoll::Status;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  const std::string_view scenario = argv[1];
  int n = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    const int device = 0;
    // Under abort this factory failure would end the process: ask without it
    // (POLYCOLL_ON_ERROR=abort applies to factories too).
    ::unsetenv("POLYCOLL_ON_ERROR");
    auto made = polycoll::Nccl::init_all(std::span<const int>(&device, 1));
    if (made) {
      std::fprintf(stderr, "FAIL: no GPU visible but Nccl::init_all succeeded\n");
      return 1;
    }
    std::fprintf(stderr, "SKIPPED: no CUDA device; Nccl::init_all says: %s\n", made.error().message.c_str());
    return 77;
  }
  Options o;
  if (scenario != "env") o.on_error = OnError::abort;
  const int device = 0;
  auto comms = polycoll::Nccl::init_all(std::span<const int>(&device, 1), o);
  if (!comms) return returned(tl::unexpected(comms.error()));
  polycoll::Nccl& comm = (*comms)[0];
  if (scenario == "check" || scenario == "env") return returned(comm.all_reduce(0, 4, DType::F32, ReduceOp::Sum));
  if (scenario == "group_end") return returned(comm.group_end());  // the backend's error
  if (scenario == "factory") {
    auto bad = polycoll::Nccl::init_all(std::span<const int>(), o);  // no devices
    return bad ? 1 : returned(tl::unexpected(bad.error()));
  }
  return 2;
}
