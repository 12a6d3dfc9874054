// Must not compile: long double is not an element type.
#include <polycoll/backends/noop.hpp>

#include <vector>

int main() {
  polycoll::NoOp comm;
#ifdef POLYCOLL_CONTROL
  std::vector<double> v(4);
#else
  std::vector<long double> v(4);
#endif
  return comm.all_reduce(v, polycoll::sum) ? 0 : 1;
}
