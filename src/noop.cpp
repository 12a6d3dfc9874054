// libpolycoll: the seed surface of NoOp, which <polycoll/backends/noop.hpp>
// declares `extern template`; AnyCommunicator's table for NoOp calls it.
#define POLYCOLL_DETAIL_BUILDING_LIBRARY 1
#include <polycoll/backends/noop.hpp>

template class polycoll::Communicator<polycoll::NoOp>;
template const polycoll::AnyCommunicator::VTable& polycoll::AnyCommunicator::vtable_of<polycoll::NoOp>() noexcept;
