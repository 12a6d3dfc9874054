// libpolycoll: the backend-independent non-template functions (error texts,
// the fatal line, the flight recorder's reading side), which
// <polycoll/detail/call.hpp>, <polycoll/detail/on_error.hpp> and
// <polycoll/flight_record.hpp> declare.
#define POLYCOLL_DETAIL_BUILDING_LIBRARY 1
#define POLYCOLL_DETAIL_DEFINE_CORE 1
#include <polycoll/detail/call.hpp>
#include <polycoll/detail/on_error.hpp>
#include <polycoll/flight_record.hpp>
