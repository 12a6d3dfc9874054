// libpolycoll: Mpi (the default policies), its seed surface, its calls for
// every dtype and valid (dtype, op) pair, and the MPI user op bodies of every
// valid pair, which <polycoll/backends/mpi.hpp> and
// <polycoll/backends/mpi/process.hpp> declare `extern template`.
#define POLYCOLL_DETAIL_BUILDING_LIBRARY 1
// The user ops' AVX2 clones inline the kernels (kernels/reduce.hpp).
#define POLYCOLL_DETAIL_INLINE_KERNELS 1
#include <polycoll/backends/mpi.hpp>

template class polycoll::BasicMpi<polycoll::mpi::DefaultPolicies>;
template class polycoll::Communicator<polycoll::Mpi>;
template const polycoll::AnyCommunicator::VTable& polycoll::AnyCommunicator::vtable_of<polycoll::Mpi>() noexcept;

namespace polycoll {
#define POLYCOLL_DETAIL_X(D, Op) POLYCOLL_DETAIL_MPI_PAIR(, D, Op)
POLYCOLL_DETAIL_FOR_EACH_VALID_PAIR(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
#define POLYCOLL_DETAIL_X(D) POLYCOLL_DETAIL_BACKEND_DTYPE(, Mpi, D)
POLYCOLL_DETAIL_FOR_EACH_DTYPE(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
}  // namespace polycoll

namespace polycoll::detail::mpi {
#define POLYCOLL_DETAIL_X(D, Op) template void user_fn<DType::D, ReduceOp::Op>(void*, void*, int*, MPI_Datatype*);
POLYCOLL_DETAIL_FOR_EACH_VALID_PAIR(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
}  // namespace polycoll::detail::mpi
