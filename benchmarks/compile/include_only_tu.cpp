// Compile-cost probe (scripts/compile_cost): polycoll.hpp included, no call.
#include <polycoll/polycoll.hpp>

int probe() { return 0; }
