// libpolycoll: the seed surface of Mpi (the default policies) and the MPI user
// op bodies of every valid (dtype, op) pair, which <polycoll/backends/mpi.hpp>
// and <polycoll/backends/mpi/process.hpp> declare `extern template`.
#define POLYCOLL_DETAIL_BUILDING_LIBRARY 1
#include <polycoll/backends/mpi.hpp>

template class polycoll::Communicator<polycoll::Mpi>;
template const polycoll::AnyCommunicator::VTable& polycoll::AnyCommunicator::vtable_of<polycoll::Mpi>() noexcept;

namespace polycoll::detail::mpi {
#define POLYCOLL_DETAIL_X(D, Op) template void user_fn<DType::D, ReduceOp::Op>(void*, void*, int*, MPI_Datatype*);
POLYCOLL_DETAIL_FOR_EACH_VALID_PAIR(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
}  // namespace polycoll::detail::mpi
