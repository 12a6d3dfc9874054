// Must not compile: a Threads::run rank function returns void or a Status;
// any other result would be dropped silently.
#include <polycoll/backends/threads.hpp>

int main() {
#ifdef POLYCOLL_CONTROL
  return polycoll::Threads::run(2, [](polycoll::Threads& comm) { return comm.barrier(); }) ? 0 : 1;
#else
  return polycoll::Threads::run(2, [](polycoll::Threads& comm) { return static_cast<int>(comm.rank()); }) ? 0 : 1;
#endif
}
