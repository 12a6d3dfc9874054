// Must not compile: the Recorder test backend declares no probe
// (supports_probe<Recorder> is false, as on Nccl), so the typed probe<T> is a
// compile-time error; the seed probe compiles and is Errc::unsupported.
#include "../recorder.hpp"

int main() {
  polycoll::test::Recorder comm(2, 0);
#ifdef POLYCOLL_CONTROL
  auto p = comm.probe(0, 1, polycoll::DType::F32);
#else
  auto p = comm.probe<float>(0, 1);
#endif
  return p ? 0 : 1;
}
