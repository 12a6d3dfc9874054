// libpolycoll: the backend-independent non-template functions (error texts,
// the fatal line), which <polycoll/detail/call.hpp> and
// <polycoll/detail/on_error.hpp> declare.
#define POLYCOLL_DETAIL_BUILDING_LIBRARY 1
#define POLYCOLL_DETAIL_DEFINE_CORE 1
#include <polycoll/detail/call.hpp>
#include <polycoll/detail/on_error.hpp>
