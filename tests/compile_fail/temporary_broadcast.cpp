// Must not compile: a temporary vector as broadcast's buffer.
#include <polycoll/backends/noop.hpp>

#include <vector>

int main() {
  polycoll::NoOp comm;
#ifdef POLYCOLL_CONTROL
  std::vector<double> v(3);
  return comm.broadcast(v, 0) ? 0 : 1;
#else
  return comm.broadcast(std::vector<double>(3), 0) ? 0 : 1;
#endif
}
