// One typed all_reduce of float with a run-time op on Threads: the op is
// visited, the dtype is not, so only f32 paths may be instantiated.
#include <polycoll/threads.hpp>

#include <span>

polycoll::Status one_call(polycoll::Threads& comm, std::span<float> v, polycoll::ReduceOp op) {
  return comm.all_reduce(v, op);
}
