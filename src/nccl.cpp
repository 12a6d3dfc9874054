// libpolycoll: the seed surface of Nccl, which <polycoll/backends/nccl.hpp>
// declares `extern template`; AnyCommunicator's table for Nccl calls it.
#define POLYCOLL_DETAIL_BUILDING_LIBRARY 1
#include <polycoll/backends/nccl.hpp>

template class polycoll::Communicator<polycoll::Nccl>;
template const polycoll::AnyCommunicator::VTable& polycoll::AnyCommunicator::vtable_of<polycoll::Nccl>() noexcept;
