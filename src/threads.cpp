// libpolycoll: the non-template members of Threads, its seed surface and its
// calls for every dtype and valid (dtype, op) pair, which
// <polycoll/backends/threads.hpp> declares; AnyCommunicator's table for
// Threads calls them.
#define POLYCOLL_DETAIL_BUILDING_LIBRARY 1
// The Reduction entries hold the kernels' loops (kernels/reduce.hpp).
#define POLYCOLL_DETAIL_INLINE_KERNELS 1
#define POLYCOLL_DETAIL_DEFINE_THREADS 1
#include <polycoll/backends/threads.hpp>

template class polycoll::Communicator<polycoll::Threads>;
template const polycoll::AnyCommunicator::VTable& polycoll::AnyCommunicator::vtable_of<polycoll::Threads>() noexcept;

namespace polycoll {
#define POLYCOLL_DETAIL_X(D, Op) POLYCOLL_DETAIL_BACKEND_PAIR(, Threads, D, Op)
POLYCOLL_DETAIL_FOR_EACH_VALID_PAIR(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
#define POLYCOLL_DETAIL_X(D) POLYCOLL_DETAIL_BACKEND_DTYPE(, Threads, D)
POLYCOLL_DETAIL_FOR_EACH_DTYPE(POLYCOLL_DETAIL_X)
#undef POLYCOLL_DETAIL_X
}  // namespace polycoll
