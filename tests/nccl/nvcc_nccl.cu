// Compiled by nvcc -std=c++20: the Nccl backend is valid CUDA C++, next to a
// kernel, with its templates instantiated through the typed and seed surfaces.
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
  auto parts = comm.split(0, 0);
  if (!parts) return tl::unexpected(parts.error());
  return comm.barrier();
}

int main() {
  const int device = 0;
  auto comms = polycoll::Nccl::init_all(std::span<const int>(&device, 1));
  if (!comms) return 77;
  float* d = nullptr;
  if (cudaMalloc(&d, 32 * sizeof(float)) != cudaSuccess) return 1;
  scale<<<1, 32, 0, (*comms)[0].stream()>>>(d, 2.0f);
  const bool ok = static_cast<bool>(step((*comms)[0], d, 32));
  polycoll::AnyCommunicator any{std::move((*comms)[0])};
  cudaFree(d);
  return ok ? 0 : 1;
}
