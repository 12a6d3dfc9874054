// Compile-cost probe (scripts/compile_cost): one Boost.MPI all_reduce of floats,
// the reference the other probes are compared with.
#include <boost/mpi.hpp>

#include <functional>

void probe(boost::mpi::communicator& comm, const float* a, float* b, int n) {
  boost::mpi::all_reduce(comm, a, n, b, std::plus<float>());
}
