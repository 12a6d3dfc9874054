// Compile-cost probe (scripts/compile_cost): one typed reduce<float> with
// polycoll::sum on Threads.
#include <polycoll/threads.hpp>

#include <span>

bool probe(polycoll::Threads& comm, std::span<const float> a, std::span<float> b) {
  return comm.reduce(a, b, polycoll::sum, 0).has_value();
}
