// Must not compile: the Recorder test backend declares f16 reductions unsupported.
#include "../recorder.hpp"

#include <vector>

int main() {
  polycoll::test::Recorder comm(2, 0);
#ifdef POLYCOLL_CONTROL
  std::vector<polycoll::bf16> v(4);
#else
  std::vector<polycoll::f16> v(4);
#endif
  return comm.all_reduce(v, polycoll::sum) ? 0 : 1;
}
