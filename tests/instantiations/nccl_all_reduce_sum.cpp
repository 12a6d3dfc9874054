// One typed all_reduce of float with a compile-time op on Nccl: in the
// compiled mode, a call into libpolycoll, which holds every member of Nccl
// (its definitions are not even parsed here); only the (f32, sum) path may be named.
#include <polycoll/nccl.hpp>

#include <span>

polycoll::Status one_call(polycoll::Nccl& comm, std::span<float> v) {
  return comm.all_reduce(v, polycoll::sum);
}
