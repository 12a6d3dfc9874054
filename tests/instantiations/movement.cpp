// Every typed movement call of float on Threads: none visits the dtype, so
// only f32 paths may be instantiated.
#include <polycoll/threads.hpp>

#include <cstddef>
#include <span>

polycoll::Status one_call(polycoll::Threads& comm, std::span<float> a, std::span<float> b,
                          std::span<const std::size_t> counts) {
  if (auto s = comm.broadcast(a, 0); !s) return s;
  if (auto s = comm.all_gather(std::span<const float>(a), b); !s) return s;
  if (auto s = comm.send(std::span<const float>(a), 0, 1); !s) return s;
  if (auto s = comm.recv(a, 0, 1); !s) return s;
  if (auto s = comm.gather(std::span<const float>(a), b, 0); !s) return s;
  if (auto s = comm.scatter(std::span<const float>(b), a, 0); !s) return s;
  if (auto s = comm.all_to_all(std::span<const float>(a), b); !s) return s;
  if (auto s = comm.all_gather_v(std::span<const float>(a), b, counts); !s) return s;
  if (auto s = comm.all_to_all_v(std::span<const float>(a), counts, b, counts); !s) return s;
  return comm.send_recv(std::span<const float>(a), 0, b, 0, 1);
}
