// One typed all_reduce of float with a compile-time op on Threads: only the
// (f32, sum) backend path and kernels may be instantiated.
#include <polycoll/threads.hpp>

#include <span>

polycoll::Status one_call(polycoll::Threads& comm, std::span<float> v) {
  return comm.all_reduce(v, polycoll::sum);
}
