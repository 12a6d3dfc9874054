// Must not compile: a temporary vector as the buffer would dangle before
// sync(); the error says so in one static_assert.
#include <polycoll/backends/noop.hpp>

#include <vector>

int main() {
  polycoll::NoOp comm;
  std::vector<float> recv(2);
#ifdef POLYCOLL_CONTROL
  std::vector<float> send{1, 2};
  return comm.all_reduce(send, recv, polycoll::ReduceOp::Sum) ? 0 : 1;
#else
  return comm.all_reduce(std::vector<float>{1, 2}, recv, polycoll::ReduceOp::Sum) ? 0 : 1;
#endif
}
