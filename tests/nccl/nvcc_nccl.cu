// Compiled by nvcc -std=c++20: the Nccl backend is valid CUDA C++, next to a
// kernel; with POLYCOLL_HEADER_ONLY (test nvcc_nccl_header_only) its
// definitions too, its templates instantiated through the typed and seed
// surfaces.
#include <polycoll/any_communicator.hpp>
#include <polycoll/backends/nccl.hpp>

__global__ void scale(float* p, float a) { p[threadIdx.x] *= a; }

template <class B>
polycoll::Status step(polycoll::Communicator<B>& comm, float* d, std::size_t n) {
  if (auto s = comm.all_reduce(std::span<float>(d, n), polycoll::avg); !s) return s;
  if (auto s = comm.all_reduce(polycoll::detail::to_address(d), n / 2, polycoll::DType::C64, polycoll::ReduceOp::Sum); !s)
    return s;
  if (auto s = comm.broadcast(std::span<float>(d, n), 0); !s) return s;
  if (auto s = comm.send(std::span<const float>(d, n), 0, 0); !s) return s;
  if (auto s = comm.recv(std::span<float>(d, n), 0, 0); !s) return s;
  if (auto s = comm.reduce(std::span<const float>(d, n), std::span<float>(d, n), polycoll::sum, 0); !s) return s;
  if (auto s = comm.gather(polycoll::detail::to_address(d), polycoll::detail::to_address(d), 1, polycoll::DType::BF16, 0);
      !s)
    return s;
  if (auto s = comm.all_to_all(std::span<const float>(d, n), std::span<float>(d + n, n)); !s) return s;
  const std::size_t counts[1] = {n};
  if (auto s = comm.all_gather_v(std::span<const float>(d, n), std::span<float>(d + n, n), counts); !s) return s;
  {
    auto g = comm.group();
    if (auto s = comm.send_recv(std::span<const float>(d, n), 0, std::span<float>(d + n, n), 0, 1); !s) return s;
    if (auto s = g.end(); !s) return s;
  }
  auto parts = comm.split(0, 0);
  if (!parts) return tl::unexpected(parts.error());
  return comm.barrier();
}

int main() {
  const int device = 0;
  auto comms = polycoll::Nccl::init_all(std::span<const int>(&device, 1));
  if (!comms) return 77;
  float* d = nullptr;
  if (cudaMalloc(&d, 64 * sizeof(float)) != cudaSuccess) return 1;  // [0, 32) and [32, 64)
  scale<<<1, 32, 0, (*comms)[0].stream()>>>(d, 2.0f);
  const bool ok = static_cast<bool>(step((*comms)[0], d, 32));
  polycoll::AnyCommunicator any{std::move((*comms)[0])};
  cudaFree(d);
  return ok ? 0 : 1;
}
