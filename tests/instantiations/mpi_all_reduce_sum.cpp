// One typed all_reduce of float with a compile-time op on Mpi (the default
// policies): in the compiled mode, a call into libpolycoll; only the (f32, sum)
// backend path may be named.
#include <polycoll/mpi.hpp>

#include <span>

polycoll::Status one_call(polycoll::Mpi& comm, std::span<float> v) {
  return comm.all_reduce(v, polycoll::sum);
}
