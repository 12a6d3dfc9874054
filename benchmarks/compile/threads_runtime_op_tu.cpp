// Compile-cost probe (scripts/compile_cost): one typed all_reduce<float> with a
// run-time ReduceOp on Threads.
#include <polycoll/threads.hpp>

#include <span>

bool probe(polycoll::Threads& comm, std::span<float> a, polycoll::ReduceOp op) {
  return comm.all_reduce(a, op).has_value();
}
