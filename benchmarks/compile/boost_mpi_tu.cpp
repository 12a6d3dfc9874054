// Compile-cost probe (scripts/compile_cost): boost/mpi.hpp and the same
// operations where Boost.MPI has them (it has no reduce_scatter: scatter stands in).
#include <boost/mpi.hpp>

#include <functional>
#include <vector>

int probe(boost::mpi::communicator& comm) {
  std::vector<float> a(64), b(64 * static_cast<std::size_t>(comm.size()));
  float x = 1, y = 0;
  boost::mpi::all_reduce(comm, x, y, std::plus<float>());
  boost::mpi::all_reduce(comm, a.data(), static_cast<int>(a.size()), b.data(), boost::mpi::maximum<float>());
  boost::mpi::broadcast(comm, a.data(), static_cast<int>(a.size()), 0);
  boost::mpi::all_gather(comm, a.data(), static_cast<int>(a.size()), b.data());
  boost::mpi::scatter(comm, b.data(), a.data(), static_cast<int>(a.size()), 0);
  boost::mpi::request reqs[2] = {comm.isend(0, 1, a.data(), static_cast<int>(a.size())),
                                 comm.irecv(0, 1, b.data(), static_cast<int>(a.size()))};
  boost::mpi::wait_all(reqs, reqs + 2);
  comm.barrier();
  boost::mpi::communicator sub = comm.split(0, 0);
  return sub.size() > 0 ? 0 : 1;
}
