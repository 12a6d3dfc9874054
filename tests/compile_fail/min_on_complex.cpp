// Must not compile: min is not defined on complex numbers.
#include <polycoll/backends/noop.hpp>

#include <complex>
#include <span>
#include <vector>

int main() {
  polycoll::NoOp comm;
  std::vector<std::complex<float>> v(4);
#ifdef POLYCOLL_CONTROL
  return comm.all_reduce(std::span<std::complex<float>>(v), polycoll::sum) ? 0 : 1;
#else
  return comm.all_reduce(std::span<std::complex<float>>(v), polycoll::min) ? 0 : 1;
#endif
}
