// Must not compile: the typed reduce takes one element type for send and
// recv, and the diagnostic names the call (check_pair<Call::reduce, ...>).
#include <polycoll/backends/noop.hpp>

#include <span>
#include <vector>

int main() {
  polycoll::NoOp comm;
  std::vector<float> v(4);
#ifdef POLYCOLL_CONTROL
  std::vector<float> out(4);
#else
  std::vector<double> out(4);
#endif
  return comm.reduce(std::span<const float>(v), std::span(out), polycoll::sum, 0) ? 0 : 1;
}
