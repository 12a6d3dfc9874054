// One typed reduce of float with a compile-time op on Threads: only the
// (f32, sum) backend path and kernels may be instantiated.
#include <polycoll/threads.hpp>

#include <span>

polycoll::Status one_call(polycoll::Threads& comm, std::span<const float> send, std::span<float> recv) {
  return comm.reduce(send, recv, polycoll::sum, 0);
}
