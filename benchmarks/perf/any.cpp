// polycoll-perf-any: the same harness on Threads held by an AnyCommunicator
// (one indirect call per operation), to compare with polycoll-perf-threads.
#include "threads_driver.hpp"

int main(int argc, char** argv) { return polycoll::perf::run<polycoll::perf::ThreadsDriver<true>>(argc, argv); }
