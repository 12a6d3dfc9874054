// Must not compile: one value where send takes a buffer.
#include <polycoll/backends/noop.hpp>

#include <span>

int main() {
  polycoll::NoOp comm;
  long long x = 1;
#ifdef POLYCOLL_CONTROL
  return comm.send(std::span<const long long>(&x, 1), 0, 1) ? 0 : 1;
#else
  return comm.send(x, 0, 1) ? 0 : 1;
#endif
}
