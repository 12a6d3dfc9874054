// libpolycoll: the seed surface of Threads, which <polycoll/backends/threads.hpp>
// declares `extern template`; AnyCommunicator's table for Threads calls it.
#define POLYCOLL_DETAIL_BUILDING_LIBRARY 1
#include <polycoll/backends/threads.hpp>

template class polycoll::Communicator<polycoll::Threads>;
template const polycoll::AnyCommunicator::VTable& polycoll::AnyCommunicator::vtable_of<polycoll::Threads>() noexcept;
