// Must not compile: the typed reduce checks its op at compile time too.
#include <polycoll/backends/noop.hpp>

#include <complex>
#include <span>
#include <vector>

int main() {
  polycoll::NoOp comm;
  std::vector<std::complex<double>> v(4), out(4);
#ifdef POLYCOLL_CONTROL
  return comm.reduce(std::span<const std::complex<double>>(v), std::span<std::complex<double>>(out), polycoll::sum, 0)
             ? 0
             : 1;
#else
  return comm.reduce(std::span<const std::complex<double>>(v), std::span<std::complex<double>>(out), polycoll::max, 0)
             ? 0
             : 1;
#endif
}
