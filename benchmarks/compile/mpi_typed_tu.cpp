// Compile-cost probe (scripts/compile_cost): one typed all_reduce<float> with
// polycoll::sum on Mpi, through the per-backend header.
#include <polycoll/mpi.hpp>

#include <span>

bool probe(polycoll::Mpi& comm, std::span<float> a) { return comm.all_reduce(a, polycoll::sum).has_value(); }
