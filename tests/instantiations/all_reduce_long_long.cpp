// Typed all_reduce calls on long long (I64 by size and signedness, read by the
// backend as std::int64_t, i.e. long): in place, out of place and the value
// form with a run-time op. Only I64 backend paths and kernels may be
// instantiated, no second dtype's.
#include <polycoll/threads.hpp>

#include <span>

polycoll::Status in_place(polycoll::Threads& comm, std::span<long long> v) {
  return comm.all_reduce(v, polycoll::sum);
}

polycoll::Status out_of_place(polycoll::Threads& comm, std::span<const long long> s, std::span<long long> r) {
  return comm.all_reduce(s, r, polycoll::max);
}

polycoll::Result<long long> value(polycoll::Threads& comm, long long x, polycoll::ReduceOp op) {
  return comm.all_reduce_value(x, op);
}
