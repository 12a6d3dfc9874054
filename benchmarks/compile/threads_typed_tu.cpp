// Compile-cost probe (scripts/compile_cost): one typed all_reduce<float> with
// polycoll::sum on Threads, through the per-backend header.
#include <polycoll/threads.hpp>

#include <span>

bool probe(polycoll::Threads& comm, std::span<float> a) { return comm.all_reduce(a, polycoll::sum).has_value(); }
