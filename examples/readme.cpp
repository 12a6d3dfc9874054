#include <polycoll/threads.hpp>
#include <cstdio>
#include <vector>

// Generic over the backend: the same code runs on Threads, Mpi or Nccl.
template <class B>
polycoll::Status step(polycoll::Communicator<B>& comm, std::vector<float>& grad) {
  if (auto s = comm.all_reduce(std::span<float>(grad), polycoll::avg); !s) return s;
  return comm.sync();  // outputs are valid after sync()
}

int main() {
  // Four ranks as four threads of this process; no launcher needed.
  auto status = polycoll::Threads::run(4, [](polycoll::Threads& comm) {
    std::vector<float> grad(1024, static_cast<float>(comm.rank()));
    if (auto s = step(comm, grad); !s) std::fprintf(stderr, "%s\n", s.error().message.c_str());
    else if (comm.rank() == 0) std::printf("mean = %g\n", grad[0]);  // 1.5
  });
  return status ? 0 : 1;
}
