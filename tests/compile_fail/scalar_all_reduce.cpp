// Must not compile: one value where all_reduce takes a buffer; the error is a
// short static_assert naming all_reduce_value, not every overload's constraints.
#include <polycoll/backends/noop.hpp>

#include <span>

int main() {
  polycoll::NoOp comm;
  float x = 1;
#ifdef POLYCOLL_CONTROL
  return comm.all_reduce(std::span<float>(&x, 1), polycoll::sum) ? 0 : 1;
#else
  return comm.all_reduce(x, polycoll::sum) ? 0 : 1;
#endif
}
