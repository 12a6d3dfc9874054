// Typed reduce_scatter (compile-time and run-time op) and reduce (run-time op)
// of float on Threads: the op is visited, the dtype is not, so only f32 paths
// may be instantiated.
#include <polycoll/threads.hpp>

#include <span>

polycoll::Status one_call(polycoll::Threads& comm, std::span<const float> send, std::span<float> recv,
                          polycoll::ReduceOp op) {
  if (auto s = comm.reduce_scatter(send, recv, polycoll::max); !s) return s;
  if (auto s = comm.reduce_scatter(send, recv, op); !s) return s;
  return comm.reduce(send, recv, op, 0);
}
