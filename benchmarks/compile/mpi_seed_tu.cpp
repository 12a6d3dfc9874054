// Compile-cost probe (scripts/compile_cost): one seed-surface all_reduce
// (address, count, DType, ReduceOp at run time) on Mpi: every supported
// (dtype, op) pair is instantiated.
#include <polycoll/mpi.hpp>

#include <cstddef>
#include <cstdint>

bool probe(polycoll::Mpi& comm, std::uint64_t a, std::size_t n, polycoll::DType d, polycoll::ReduceOp op) {
  return comm.all_reduce(a, n, d, op).has_value();
}
